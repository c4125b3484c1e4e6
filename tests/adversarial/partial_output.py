"""Writes only the first half of the output. Outputs are poisoned with NaN before the call, so the
unwritten half must fail correctness."""

import torch

EXPECT = ("incorrect", None)
ALLOW_TORCH = True


def run(inputs, outputs, ctx):
    z = inputs["x"]
    for _ in range(64):
        z = torch.sin(z) + inputs["y"]
    half = z.numel() // 2
    outputs["out"][:half].copy_(z[:half])
