"""CLI: ingest, problems, show (owner: core/ingest)."""

from __future__ import annotations


def register(sub) -> None:
    """Not built yet."""
