"""CLI: report, export (owner: reports)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
