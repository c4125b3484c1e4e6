"""The optimize loop (loop.py, the only one) and what it runs on: GPU slots, the content cache, resume
bookkeeping, the one evaluation path, the one attempt writer, replay and the leaderboard. `solforge/` never imports Prefect; flows/ and tasks/
wrap these."""

from .gpus import GpuPool, Slot, gpu_identity, visible_gpus

__all__ = ["GpuPool", "Slot", "gpu_identity", "visible_gpus"]
