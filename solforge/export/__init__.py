"""Export: attempts as SOL-ExecBench solutions or torch.library ops."""
