"""Remembers the answer per input pointer and returns it again when the pointer repeats. The second
correctness round writes new values into the same buffers, so the stale answer must fail."""

import torch

EXPECT = ("incorrect", None)
ALLOW_TORCH = True
_cache = {}


def run(inputs, outputs, ctx):
    key = (inputs["x"].data_ptr(), inputs["y"].data_ptr())
    if key not in _cache:
        z = inputs["x"]
        for _ in range(64):
            z = torch.sin(z) + inputs["y"]
        _cache[key] = z.clone()
    outputs["out"].copy_(_cache[key])
