"""The JSON frame codec shared by the compile worker and the cute backend's per-job child: JSON with
bytes as {"__bytes__": base64}. Never pickle: a frame is data, and a hostile frame can at most be a
wrong answer. Its own module so that the worker and the cute backend do not import each other."""

from __future__ import annotations

import base64
import json


def _bytes_out(o):
    if isinstance(o, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(o)).decode("ascii")}
    raise TypeError(f"{type(o).__name__} is not JSON")


def _bytes_in(d: dict):
    if len(d) == 1 and "__bytes__" in d and isinstance(d["__bytes__"], str):
        return base64.b64decode(d["__bytes__"])
    return d


def dumps(obj) -> bytes:
    return json.dumps(obj, default=_bytes_out).encode()


def loads(data: bytes):
    return json.loads(data, object_hook=_bytes_in)
