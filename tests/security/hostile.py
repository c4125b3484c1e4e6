"""Entry points the security tests run inside the sandbox: each executes a piece of hostile source,
as a candidate's or a reference's code would run there, and answers with what it managed to see."""

from __future__ import annotations

import os


def exec_source(payload: dict) -> dict:
    ns: dict = {"__name__": "hostile"}
    exec(compile(payload["source"], "<hostile>", "exec"), ns)  # noqa: S102 - the attack under test
    out = ns.get("RESULT", {})
    return out if isinstance(out, dict) else {"value": repr(out)}


def warm() -> None:
    os.environ.get("PATH")


def echo(payload: dict) -> dict:
    return dict(payload)
