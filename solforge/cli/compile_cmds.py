"""CLI: compile: compile a candidate to cubins (owner: compile)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
