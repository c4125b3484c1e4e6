"""CLI: optimize: planner + workers (owner: agents)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
