"""The benchmark tools the LLM may call (LiteLLM function calling): compile, evaluate, read_roofline,
latest_results. The model decides when to benchmark; each tool answers with JSON text.

`evaluate` goes through the loop's `try_candidate`, so a benchmark the model asks for is an attempt
like any other (written before it runs, with its parent, counted against the GPU budget).
"""

from __future__ import annotations

import json
from typing import Callable, Optional

from .outcome import Outcome
from .parse import ParseError, candidate_from_obj, segment_from_obj
from .segments import SegmentError
from .prompts import MAX_LOG_CHARS, clip

_CAND = {"type": "object", "description": "the Candidate JSON object (see the output format), or, "
                                          "when a plan is shown, a segment reply object"}

TOOL_SPECS = [
    {"type": "function", "function": {
        "name": "compile",
        "description": "Compile a candidate with NVRTC for the target GPU. Returns status and the "
                       "compiler log. Cheap: use it to check code before evaluating.",
        "parameters": {"type": "object", "properties": {"candidate": _CAND},
                       "required": ["candidate"]}}},
    {"type": "function", "function": {
        "name": "evaluate",
        "description": "Compile, check correctness on every workload against the reference, time it "
                       "and score it against the speed of light. Uses GPU time (needs a GPU).",
        "parameters": {"type": "object", "properties": {"candidate": _CAND},
                       "required": ["candidate"]}}},
    {"type": "function", "function": {
        "name": "read_roofline",
        "description": "Per workload: speed-of-light time T_sol (ms), what bounds it, and the "
                       "baseline time (ms) when measured.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "latest_results",
        "description": "The latest attempts on this problem with their outcome (newest last).",
        "parameters": {"type": "object", "properties": {
            "n": {"type": "integer", "description": "how many (default 3)"}}}}},
]


class ToolRuntime:
    """Executes tool calls for one problem.

    try_candidate(candidate) -> (attempt_id, Outcome) runs an evaluation as an attempt;
    history(n) -> [(label, Outcome)] gives the latest attempts."""

    def __init__(self, lab, problem, language: str,
                 try_candidate: Callable, history: Callable[[int], list],
                 splice: Optional[Callable] = None):
        self.lab, self.problem, self.language = lab, problem, language
        self.splice = splice  # SegmentReply -> Candidate (the plan with one segment replaced)
        self.try_candidate = try_candidate
        self.history = history
        self.evaluated: dict[str, tuple[Optional[str], Outcome]] = {}  # source_hash -> result

    def call(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (json.JSONDecodeError, ValueError) as e:
            return _j({"error": f"arguments are not valid JSON: {e}"})
        fn = {"compile": self._compile, "evaluate": self._evaluate,
              "read_roofline": self._roofline, "latest_results": self._latest}.get(name)
        if fn is None:
            return _j({"error": f"unknown tool {name!r}; tools: compile, evaluate, read_roofline, "
                                "latest_results"})
        try:
            return _j(fn(args))
        except (ParseError, SegmentError) as e:
            return _j({"error": str(e)})

    def _candidate(self, args: dict):
        obj = args.get("candidate", args)
        if isinstance(obj, str):  # some models send the object as a JSON string
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as e:
                raise ParseError(f"candidate is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ParseError("candidate must be a JSON object")
        if "segment" in obj and "sources" not in obj:
            if self.splice is None:
                raise ParseError("a segment reply needs a plan and this session has none")
            return self.splice(segment_from_obj(obj))
        return candidate_from_obj(obj, self.problem.name, self.language)

    def _compile(self, args: dict) -> dict:
        cand = self._candidate(args)
        bad = self.lab.check(self.problem, cand)
        if bad:
            return {"status": bad.status.value, "message": bad.message}
        out, _ = self.lab.compile(cand)
        return {"status": "ok" if out.status.value == "compiled" else out.status.value,
                "log": clip(out.compile_log, MAX_LOG_CHARS), "seconds": round(out.compile_seconds, 3)}

    def _evaluate(self, args: dict) -> dict:
        cand = self._candidate(args)
        attempt_id, out = self.try_candidate(cand)
        self.evaluated[cand.source_hash()] = (attempt_id, out)
        d = {"attempt": attempt_id, "status": out.status.value, "message": out.message,
             "sol_score": out.sol_score}
        if out.compile_log and out.status.value in ("compile_error", "invalid"):
            d["log"] = clip(out.compile_log, MAX_LOG_CHARS)
        d["workloads"] = [{k: v for k, v in w.__dict__.items() if v not in (None, "")}
                          for w in out.workloads]
        return d

    def _roofline(self, args: dict) -> dict:
        return {"gpu": self.lab.gpu_info().describe(),
                "workloads": [{"uuid": s.uuid, "axes": s.axes, "t_sol_ms": s.t_sol_ms,
                               "t_base_ms": s.t_base_ms, "bound": s.bound}
                              for s in self.lab.roofline(self.problem)]}

    def _latest(self, args: dict) -> dict:
        n = args.get("n", 3)
        n = max(1, min(int(n) if isinstance(n, (int, float)) else 3, 10))
        return {"attempts": [{"label": label, **_brief(o)} for label, o in self.history(n)]}


def _brief(o: Outcome) -> dict:
    return {"status": o.status.value, "message": o.message, "sol_score": o.sol_score,
            "log": clip(o.compile_log, 1500) if o.status.value == "compile_error" else "",
            "workloads": [{"uuid": w.uuid[:8], "correct": w.correct, "ms": w.median_ms,
                           "max_abs_err": w.max_abs_err, "sol_score": w.sol_score}
                          for w in o.workloads]}


def _j(obj) -> str:
    return json.dumps(obj, default=str)
