"""Output helpers shared by every command: rich on stderr, JSON on stdout.

Tables are made for a 100-column terminal (100 wide when stderr is not a terminal: logs and pipes);
identifying columns (names, ids) wrap instead of being cut, and `--json` always has every full value.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Iterable, Sequence

LOG_WIDTH = 100
FOLD = ("name", "problem", "id", "subset", "uuid", "workload", "attempt", "best attempt", "kind")


def console():
    from rich.console import Console

    width = None
    if not sys.stderr.isatty() and "COLUMNS" not in os.environ:
        width = LOG_WIDTH  # rich's default for a non-terminal is 80, narrower than our tables
    return Console(stderr=True, width=width)


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          fold: Sequence[str] = FOLD) -> None:
    """A rich table on stderr. Cells are Text, not markup: data such as "[axes.M]" stays as it is."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title))
    for c in columns:
        t.add_column(Text(str(c)), overflow="fold" if c in fold else "ellipsis")
    for r in rows:
        t.add_row(*(v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in r))
    console().print(t)
