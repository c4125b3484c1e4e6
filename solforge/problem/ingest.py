"""Ingest problems from anywhere: a SOL-ExecBench tree, a subset dir, one problem dir, a
FlashInfer-Trace tree, or hf://nvidia/SOL-ExecBench[/<subset>].

Every bad problem becomes one InputError in the report; the good ones are still returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .loader import Problem


@dataclass
class IngestReport:
    problems: list[Problem] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    source: str = ""
    seconds: float = 0.0


def ingest_path(path_or_uri: str | Path) -> IngestReport:
    """Load every problem under a path or hf:// URI. Never raises InputError for bad problems."""
    raise NotImplementedError("being written")
