"""CLI: evaluate, baseline, replay (owner: evaluator)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
