"""Optimize tasks: each stage of the agents' loop (solforge.orchestrate.loop.Stages) as a Prefect task,
so one flow run shows plan-round, propose, check, compile, evaluate, score and store-result task runs.

Big objects (the loop, the lab, problems) are passed through `quote` so Prefect does not walk them
looking for futures. Retries: compile once on a transient error (a crashed compiler process is not a
compile error: the compiler's own errors come back as a result, not an exception), evaluate twice
(a lost GPU worker), never on compile or correctness failures (they are results, not exceptions).
"""

from __future__ import annotations

import socket
from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from solforge.agents.planner import plan_round
from solforge.orchestrate import leaderboard as lb
from solforge.orchestrate.evaluation import evaluate_pinned, score
from solforge.orchestrate import attempts
from solforge.orchestrate.loop import Stages

from .common import retry_transient


@task(name="plan-round", cache_policy=NO_CACHE)
def plan_task(states, budget, spent, planner_cfg, n):
    return plan_round(states, budget, spent, planner_cfg, n)


@task(name="propose", cache_policy=NO_CACHE)
def propose_task(loop, decision) -> None:
    loop.propose(decision)


@task(name="check", cache_policy=NO_CACHE)
def check_task(lab, problem, cand):
    return lab.check(problem, cand)


@task(name="compile", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2,
      retry_condition_fn=retry_transient)
def compile_task(lab, cand):
    return lab.compile(cand)


@task(name="evaluate", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=10,
      retry_condition_fn=retry_transient)
def evaluate_task(lab, problem, cand, compiled, pool, gpu_limit: Optional[str] = None):
    return evaluate_pinned(lab, problem, cand, compiled, pool, hold=_gcl(gpu_limit))


@task(name="score", cache_policy=NO_CACHE)
def score_task(lab, problem, out):
    return score(lab, problem, out)


@task(name="store-result", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2,
      retry_condition_fn=retry_transient)
def record_task(loop, aid, out, compile_row=None) -> None:
    attempts.finish(loop.store, aid, out, compile_row)


def _gcl(template: Optional[str]):
    """A Prefect global concurrency limit per GPU, e.g. "gpu-{host}-{gpu}" (create each with
    `prefect gcl create gpu-HOST-0 --limit 1`): other flow runs on this host see the GPU busy."""
    if not template:
        return None
    from prefect.concurrency.sync import concurrency

    def hold(slot):
        return concurrency(template.format(host=socket.gethostname(), gpu=slot.gpu), occupy=1)
    return hold


def prefect_stages(gpu_limit: Optional[str] = None) -> Stages:
    q = quote
    return Stages(
        session=lambda loop, d: propose_task(q(loop), q(d)),
        plan=lambda states, budget, spent, cfg, n: plan_task(q(states), q(budget), q(spent), q(cfg), n),
        check=lambda lab, problem, cand: check_task(q(lab), q(problem), q(cand)),
        compile=lambda lab, cand: compile_task(q(lab), q(cand)),
        evaluate=lambda lab, problem, cand, res, pool: evaluate_task(q(lab), q(problem), q(cand), q(res),
                                                                    q(pool), gpu_limit),
        score=lambda lab, problem, out: score_task(q(lab), q(problem), q(out)),
        record=lambda loop, aid, out, row=None: record_task(q(loop), aid, q(out), q(row)),
    )


@task(name="leaderboard", cache_policy=NO_CACHE)
def leaderboard_task(store, run_id: Optional[str]) -> list[dict]:
    return lb.leaderboard(store, run_id)
