"""CLI: attempts, sql (owner: store)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
