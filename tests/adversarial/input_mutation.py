"""Right answer, but it overwrites its input x while computing. Must be rejected: the input-mutation
guard compares every input bit for bit with a copy taken before the call."""

import torch

EXPECT = ("rejected", "input_mutation")
ALLOW_TORCH = True


def run(inputs, outputs, ctx):
    x = inputs["x"]
    for _ in range(64):
        x.copy_(torch.sin(x) + inputs["y"])
    outputs["out"].copy_(x)
