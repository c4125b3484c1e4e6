"""Turning a model's reply into a Candidate or a segment replacement, with an error message the model
can act on."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional, Union

from pydantic import ValidationError

from ..candidate import Candidate

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.S)
# a segment's source may come in its own fenced block instead of a JSON string (no escaping)
_CODE_FENCE = re.compile(r"```(?:cuda|cu|c\+\+|cpp|c)[ \t]*\n(.*?)```", re.S | re.I)


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


@dataclass
class SegmentReply:
    """One replaced segment of the plan (protocol.md, 'Segment replies')."""

    segment: str
    source: str
    launch: dict = field(default_factory=dict)
    language: Optional[str] = None
    notes: str = ""


def segment_from_obj(obj: dict, text: str = "") -> SegmentReply:
    """`text`: the whole reply, whose last ```cuda block is the source when the object has none."""
    seg, src, launch = obj.get("segment"), obj.get("source"), obj.get("launch") or {}
    if src is None and text:
        code = _CODE_FENCE.findall(text)
        src = code[-1] if code else None
    if not isinstance(seg, str) or not seg.strip():
        raise ParseError("\"segment\" must be the kernel name of one segment of the plan")
    if not isinstance(src, str) or not src.strip():
        raise ParseError(f"segment {seg!r}: \"source\" (or a ```cuda block) must be the kernel's "
                         "whole new definition")
    if not isinstance(launch, dict):
        raise ParseError(f"segment {seg!r}: \"launch\" must be an object (grid, block, smem, ...)")
    lang = obj.get("language")
    notes = obj.get("notes") if isinstance(obj.get("notes"), str) else ""
    return SegmentReply(seg.strip(), src, dict(launch), lang if isinstance(lang, str) else None,
                        notes)


def parse_answer(text: str, problem_name: str,
                 language: Optional[str] = None) -> Union[Candidate, SegmentReply]:
    """A whole Candidate or one replaced segment, whichever the reply's last JSON block holds."""
    if not text or not text.strip():
        raise ParseError("the reply is empty")
    objs = [o for o in _objects(text) if "segment" in o or "sources" in o or "candidate" in o]
    if objs and "segment" in objs[0] and "sources" not in objs[0]:
        return segment_from_obj(objs[0], text)
    return parse_reply(text, problem_name, language)
