"""Turning a model's reply into a Candidate, with an error message the model can act on."""

from __future__ import annotations

import json
import re
from typing import Optional

from pydantic import ValidationError

from ..candidate import Candidate

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.S)


class ParseError(ValueError):
    """The reply holds no valid Candidate; the message says why, for the repair turn."""


def _objects(text: str) -> list[dict]:
    """JSON objects in fenced blocks (last first), then the outermost {...} of the whole text."""
    found = []
    for block in reversed(_FENCE.findall(text)):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    if not found:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            try:
                obj = json.loads(text[start:end + 1])
                if isinstance(obj, dict):
                    found.append(obj)
            except json.JSONDecodeError:
                pass
    return found


def candidate_from_obj(obj: dict, problem_name: str, language: Optional[str] = None) -> Candidate:
    obj = dict(obj)
    if "candidate" in obj and isinstance(obj["candidate"], dict):  # a tool-call style wrapper
        obj = dict(obj["candidate"])
    obj["problem"] = problem_name  # the model does not get to pick another problem
    if language and "language" not in obj:
        obj["language"] = language
    try:
        return Candidate.model_validate(obj)
    except ValidationError as e:
        errs = "; ".join(f"{'.'.join(str(p) for p in x['loc']) or '(top)'}: {x['msg']}"
                         for x in e.errors()[:6])
        raise ParseError(f"the Candidate JSON is not valid: {errs}") from None


def parse_reply(text: str, problem_name: str, language: Optional[str] = None) -> Candidate:
    if not text or not text.strip():
        raise ParseError("the reply is empty")
    objs = [o for o in _objects(text) if "sources" in o or "candidate" in o]
    if not objs:
        raise ParseError("no JSON object with \"sources\" and \"launches\" found; reply with the "
                         "Candidate in a ```json fenced block")
    first_error: Optional[ParseError] = None
    for obj in objs:
        try:
            return candidate_from_obj(obj, problem_name, language)
        except ParseError as e:
            first_error = first_error or e
    raise first_error  # type: ignore[misc]
