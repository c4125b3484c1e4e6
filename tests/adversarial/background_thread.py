"""Returns at once and does the work on a background thread, so the timed call is empty. The thread
guard sees a thread the call left running (and the output is not there yet when checked)."""

import threading
import time

import torch

EXPECT = ("rejected", "threads")
ALLOW_TORCH = True


def run(inputs, outputs, ctx):
    def later():
        time.sleep(0.5)
        z = inputs["x"]
        for _ in range(64):
            z = torch.sin(z) + inputs["y"]
        outputs["out"].copy_(z)

    threading.Thread(target=later, name="hidden-work", daemon=True).start()
