"""Fast segment templates the compiler's lowering can use in place of its generic kernels (generic.py):
GEMM tiers and implicit-GEMM convolution (gemm.py, conv.py, gemm_adapter.py), flash attention
(attention.py, attention_match.py)."""
