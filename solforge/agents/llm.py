"""The LLM worker: one session per planner decision — prompt, tool calls, candidate, repair turns.

A session starts from the protocol (system message) and the problem with the best source so far and
the latest feedback (user message). When the compiler serves the problem (CUDA sessions), the user
message also carries its plan as segments (plan_context.py), and the model may answer with a whole
Candidate or with ONE replaced segment, which is spliced into the plan (the other segments as they
were); a segment reply that does not fit is refused with one line. The model may call the benchmark
tools; when it answers without a tool call, its reply is parsed into a Candidate and tried (an
attempt: checked, compiled, evaluated where a GPU is). On a parse, compile or correctness failure
the model gets the error and repairs, for as many turns as the session allows. Every call is logged
by the client; caps stop the session cleanly.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..candidate import Candidate
from .llm_client import (BudgetExceeded, LlmClient, LlmConfig, ProviderOutage, ProviderRejected,
                         assistant_message)
from .outcome import AttemptOutcome, Outcome
from .parse import ParseError, SegmentReply, parse_answer
from .plan_context import (PLAN_BUDGET_CHARS, LaunchTimes, Plan, PlanSource, compiler_plan,
                           make_plan, render)
from .prompts import problem_prompt, refusal_message, repair_message, system_prompt
from .segments import SegmentError
from .tools import TOOL_SPECS, ToolRuntime

log = logging.getLogger(__name__)

# try_candidate(candidate, parent_attempt_id, llm_call_ids) -> (attempt_id, Outcome)
TryFn = Callable[[Candidate, Optional[str], list], tuple[str, Outcome]]


@dataclass
class Context:
    """What the loop knows about a problem when it hands it to a worker."""

    best: Optional[Candidate] = None
    best_score: Optional[float] = None
    best_attempt_id: Optional[str] = None
    feedback: list = field(default_factory=list)  # [(label, Outcome)], newest last
    history: Callable[[int], list] = lambda n: []


@dataclass
class SessionResult:
    tried: list = field(default_factory=list)  # [(attempt_id, Outcome)]
    stopped: str = ""                          # why the session ended
    fatal: bool = False                        # the worker cannot go on (outage, cap, rejection)


class LlmWorker:
    name = "llm"

    def __init__(self, cfg: LlmConfig, lab, on_call: Optional[Callable[[dict], None]] = None,
                 sleep=None, plan_source: Optional[PlanSource] = compiler_plan,
                 launch_times: Optional[LaunchTimes] = None,
                 plan_budget_chars: int = PLAN_BUDGET_CHARS):
        self.cfg = cfg
        self.lab = lab
        self.plan_source = plan_source      # problem -> (plan Candidate, traced ops) or None
        self.launch_times = launch_times    # (problem, candidate) -> {kernel: ms}; None: unmeasured
        self.plan_budget_chars = plan_budget_chars
        self._plan_lock = threading.Lock()  # sessions in parallel trace a problem once, not each
        kw = {"sleep": sleep} if sleep else {}
        self.client = LlmClient(cfg, on_call=self._on_call, **kw)
        self._sink = on_call or (lambda row: None)
        self._call_ids: list[str] = []

    def _on_call(self, row: dict) -> None:
        from uuid import uuid4

        row["id"] = uuid4().hex
        self._call_ids.append(row["id"])
        self._sink(row)

    def _take_call_ids(self) -> list[str]:
        ids, self._call_ids = self._call_ids, []
        return ids

    def propose(self, problem, language: str, ctx: Context, try_candidate: TryFn,
                max_attempts: int) -> SessionResult:
        result = SessionResult()
        parent = [ctx.best_attempt_id]

        def run_try(cand: Candidate) -> tuple[str, Outcome]:
            aid, out = try_candidate(cand, parent[0], self._take_call_ids())
            result.tried.append((aid, out))
            parent[0] = aid  # a repair refines what it repairs: lineage follows the chain
            return aid, out

        plan = self.plan(problem, language, ctx)
        runtime = ToolRuntime(self.lab, problem, language, run_try, ctx.history,
                              splice=(lambda r: self._splice(plan, r)) if plan else None)
        best_dict = ctx.best.model_dump(exclude_defaults=True) if ctx.best is not None else None
        if plan is not None and plan.covers_best:
            best_dict = None  # the plan section shows it, segment by segment
        messages = [
            {"role": "system", "content": system_prompt(language, with_tools=self.cfg.use_tools,
                                                        with_plan=plan is not None)},
            {"role": "user", "content": problem_prompt(
                problem, language, self.lab.gpu_info(), self.lab.roofline(problem), best_dict,
                ctx.best_score, ctx.feedback,
                plan_text=render(plan, self.plan_budget_chars) if plan else "")},
        ]
        tools = TOOL_SPECS if self.cfg.use_tools else None
        for turn in range(self.cfg.max_turns):
            if len(result.tried) >= max_attempts:
                result.stopped = f"attempts for this round used ({len(result.tried)})"
                return result
            try:
                reply = self.client.chat(messages, tools, attempt_id=parent[0])
            except BudgetExceeded as e:
                result.stopped, result.fatal = f"budget: {e}", True
                return result
            except ProviderOutage as e:
                result.stopped, result.fatal = f"provider outage: {e}", True
                return result
            except ProviderRejected as e:
                result.stopped, result.fatal = f"provider rejected the request: {e}", True
                return result
            messages.append(assistant_message(reply))
            if reply["tool_calls"]:
                for tc in reply["tool_calls"]:
                    out = runtime.call(tc["name"], tc["arguments"])
                    messages.append({"role": "tool", "tool_call_id": tc["id"], "content": out})
                continue
            try:
                answer = parse_answer(reply["content"], problem.name, language)
            except ParseError as e:
                messages.append({"role": "user", "content": repair_message(
                    Outcome(AttemptOutcome.PARSE_ERROR, str(e), compile_log=str(e)),
                    with_plan=plan is not None)})
                continue
            if isinstance(answer, SegmentReply):
                try:
                    cand = self._splice(plan, answer)
                except (SegmentError, ParseError) as e:
                    messages.append({"role": "user", "content": refusal_message(str(e))})
                    continue
            else:
                cand = answer
            prior = runtime.evaluated.get(cand.source_hash())
            if prior is not None:  # the model answers with what it already benchmarked
                aid, out = prior
            else:
                aid, out = run_try(cand)
            if not out.status.failed:
                result.stopped = f"candidate {out.status.value}"
                return result
            messages.append({"role": "user",
                             "content": repair_message(out, with_plan=plan is not None)})
        result.stopped = f"turn limit ({self.cfg.max_turns}) reached"
        return result

    def plan(self, problem, language: str, ctx: Context) -> Optional[Plan]:
        """The session's plan (CUDA sessions of problems the compiler serves), or None. Any failure
        to get one leaves the session as it was without a plan."""
        if language != "cuda" or self.plan_source is None:
            return None
        try:
            with self._plan_lock:
                got = self.plan_source(problem)
            plan = make_plan(got[0], got[1], ctx.best, ctx.best_score) if got else None
            if plan is not None and self.launch_times is not None:
                plan.launch_ms = dict(self.launch_times(problem, plan.candidate) or {})
        except Exception as e:  # noqa: BLE001 - a plan is a help, never a reason to stop
            log.warning("%s: no plan for the LLM prompt: %s: %s", getattr(problem, "name", problem),
                        type(e).__name__, e)
            return None
        return plan

    @staticmethod
    def _splice(plan: Optional[Plan], reply: SegmentReply) -> Candidate:
        """The plan with the reply's segment replaced; SegmentError (one line) when it does not fit."""
        if plan is None:
            raise SegmentError("a segment reply needs a plan and this session has none; reply with a "
                               "whole Candidate")
        lang = plan.candidate.language
        if (reply.language and reply.language != lang) or _looks_like_cute(reply.source):
            raise SegmentError(f"a segment reply cannot change the language (the plan is {lang}); "
                               "reply with a whole Candidate to use another language")
        return plan.splice(reply.segment, reply.source, reply.launch, reply.notes)


def _looks_like_cute(source: str) -> bool:
    return "@cute.kernel" in source or "import cutlass" in source
