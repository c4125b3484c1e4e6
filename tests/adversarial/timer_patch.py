"""Replaces the timers the evaluator might read (CUDA events, perf_counter) so that every call looks
instant. The integrity guard compares their identity with a snapshot taken before loading us."""

import time

import torch

EXPECT = ("rejected", "integrity")
ALLOW_TORCH = True


def _fast(*args, **kwargs):
    return 1e-6


torch.cuda.Event.elapsed_time = _fast
time.perf_counter = _fast


def run(inputs, outputs, ctx):
    z = inputs["x"]
    for _ in range(64):
        z = torch.sin(z) + inputs["y"]
    outputs["out"].copy_(z)
