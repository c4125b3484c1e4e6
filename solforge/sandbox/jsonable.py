"""Dataclass trees <-> JSON, for answers that cross the sandbox boundary (never pickle).

`encode(obj)` turns dataclasses, tuples, sets and dicts into tagged JSON values; `decode(value, types)`
rebuilds them, instantiating only the dataclasses named in `types` (anything else is a ValueError), so
an answer from untrusted code can at worst be a wrong value of an expected type.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable


def encode(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dc__": type(obj).__name__,
                "f": {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(x) for x in obj]}
    if isinstance(obj, (set, frozenset)):
        return {"__set__": [encode(x) for x in sorted(obj, key=repr)]}
    if isinstance(obj, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in obj.items()]}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{type(obj).__name__} cannot cross the sandbox boundary")


def decode(value: Any, types: Iterable[type]) -> Any:
    allowed = {t.__name__: t for t in types}

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "__dc__" in v:
            cls = allowed.get(v["__dc__"])
            if cls is None or not isinstance(v.get("f"), dict):
                raise ValueError(f"unexpected type {v.get('__dc__')!r} in a sandbox answer")
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            fields = {k: walk(x) for k, x in v["f"].items() if k in names}
            return cls(**fields)
        if "__tuple__" in v:
            return tuple(walk(x) for x in v["__tuple__"])
        if "__set__" in v:
            return {walk(x) for x in v["__set__"]}
        if "__dict__" in v:
            return {walk(k): walk(x) for k, x in v["__dict__"]}
        raise ValueError("untagged object in a sandbox answer")

    return walk(value)
