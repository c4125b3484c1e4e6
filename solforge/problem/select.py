"""Which problems a command means: one naming convention for every command.

A selector is a comma-separated list of terms; each term is a problem's name (`021_rmsnorm_h128`),
`SUBSET/name` (`FlashInfer-Bench/021_rmsnorm_h128`), or a glob over either
(`FlashInfer-Bench/*rmsnorm*`, `*gemm*`). Selection works over what is known (name, subset) pairs,
e.g. the store's problems table; it never opens a file.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, Optional

GLOB_CHARS = "*?["


def expand_file(selector: Optional[str]) -> Optional[str]:
    """`@FILE`: one name, SUBSET/name or glob per line ('#' starts a comment), as one comma list;
    any other selector as it is."""
    if not selector or not selector.startswith("@"):
        return selector
    from pathlib import Path

    from ..errors import InputError

    path = Path(selector[1:])
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise InputError(f"cannot read the problem list {path}: {e.strerror}",
                         field="--problems") from None
    return ",".join(t for t in (ln.split("#", 1)[0].strip() for ln in lines) if t)


def terms(selector: Optional[str]) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]


def matches(term: str, name: str, subset: Optional[str]) -> bool:
    """Does one term name this problem (exactly, or as a glob over `name` or `SUBSET/name`)?"""
    keys = [name] + ([f"{subset}/{name}"] if subset else [])
    if any(c in term for c in GLOB_CHARS):
        return any(fnmatch.fnmatchcase(k, term) for k in keys)
    return term in keys


def select(known: Iterable[tuple[str, Optional[str]]], selector: Optional[str] = None, *,
           subset: Optional[str] = None, limit: Optional[int] = None) -> list[tuple[str, Optional[str]]]:
    """The (name, subset) pairs of `known` that the selector names (all of them without one), only
    `subset`'s when given, sorted by (subset, name), at most `limit`."""
    ts = terms(selector)
    out = sorted({(n, s) for n, s in known
                  if (subset is None or s == subset) and (not ts or any(matches(t, n, s) for t in ts))},
                 key=lambda p: (p[1] or "", p[0]))
    return out[:limit] if limit else out


def unmatched(known: Iterable[tuple[str, Optional[str]]], selector: Optional[str]) -> list[str]:
    """The terms of a selector that name nothing known (for a clear message)."""
    known = list(known)
    return [t for t in terms(selector) if not any(matches(t, n, s) for n, s in known)]
