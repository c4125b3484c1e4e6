"""T_b for every workload: the baselines scheduler behind `solforge baseline` (eager and
torch.compile references timed on every GPU within a deadline), its plan and its outputs."""
