"""Prefect-free helpers the flows need: GPU slots, the content cache, resume bookkeeping, the
orchestrated optimize loop and the leaderboard. `solforge/` never imports Prefect; flows/ and tasks/
wrap these."""

from .gpus import GpuPool, Slot, gpu_identity, visible_gpus

__all__ = ["GpuPool", "Slot", "gpu_identity", "visible_gpus"]
