"""CLI: sol: roofline table per GPU profile (owner: roofline)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
