"""Computes the answer with torch ops instead of launching its own kernels. A language that may only
launch its kernels forbids that: the TORCH_CALL guard must reject it."""

import torch

EXPECT = ("rejected", "torch_call")
ALLOW_TORCH = False


def run(inputs, outputs, ctx):
    z = inputs["x"]
    for _ in range(64):
        z = torch.sin(z) + inputs["y"]
    outputs["out"].copy_(z)
