"""CLI: extract MODEL (owner: extraction)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
