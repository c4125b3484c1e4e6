"""Output helpers shared by every command: rich on stderr, JSON on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence


def console():
    from rich.console import Console

    return Console(stderr=True)


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(str(c))
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    console().print(t)
