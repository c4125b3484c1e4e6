"""Reading attempts back, and the few writes beside create_attempt/mark_attempt: the SQL the optimize
loop, the planner's history, the content cache, resume, replay, the leaderboard and rescoring need.
Plain rows out; what they mean (AttemptSummary, Outcome, Candidate) is built by the callers."""

from __future__ import annotations

from typing import Optional, Sequence

from .store import Store


# ---- the planner's history and the workers' population ------------------------------------------
def history_rows(store: Store, problems: Sequence[str]) -> list[dict]:
    """Every attempt of these problems that left the queue, oldest first, with its LLM dollars."""
    if not problems:
        return []
    marks = ",".join("?" * len(problems))
    return store.query(
        f"SELECT a.problem, a.run_id, a.agent, a.language, a.status, a.outcome, a.sol_score, "
        f"a.gpu_seconds, coalesce(c.dollars, 0) AS dollars FROM attempts a LEFT JOIN ("
        f"  SELECT attempt_id, sum(cost_usd) AS dollars FROM llm_calls GROUP BY attempt_id) c "
        f"ON c.attempt_id = a.id WHERE a.problem IN ({marks}) AND a.status <> 'queued' "
        f"ORDER BY a.created_at, a.id", list(problems))


def best_row(store: Store, problem: str, live: Sequence[str]) -> Optional[dict]:
    """The best scored attempt with a candidate; without any score, the latest whose outcome is in
    `live` (something to improve on)."""
    return store.query_one(
        "SELECT id, candidate, sol_score FROM attempts WHERE problem = ? AND candidate IS NOT NULL "
        f"AND (sol_score IS NOT NULL OR outcome IN ({','.join('?' * len(live))})) "
        "ORDER BY sol_score DESC NULLS LAST, created_at DESC LIMIT 1", [problem, *live])


def best_times(store: Store, problem: str, hardware_id: str) -> dict[str, float]:
    """{workload uuid: median ms} of the problem's best timed attempt (highest SOL score, correct on
    every workload) measured on this hardware (GPU model, driver, CUDA); empty when there is none."""
    rows = store.query(
        "WITH best AS (SELECT a.id FROM attempts a WHERE a.problem = ? AND a.outcome = 'ok' "
        "AND a.sol_score IS NOT NULL AND EXISTS (SELECT 1 FROM eval_results e "
        "WHERE e.attempt_id = a.id AND e.hardware_id = ?) ORDER BY a.sol_score DESC LIMIT 1) "
        "SELECT e.workload_uuid, e.median_ms FROM eval_results e JOIN best b ON e.attempt_id = b.id "
        "WHERE e.status = 'passed' AND e.median_ms IS NOT NULL", [problem, hardware_id])
    return {r["workload_uuid"]: float(r["median_ms"]) for r in rows}


def attempt_kernel_times_rows(store: Store, attempt_id: str) -> list[dict]:
    """eval_results.kernel_ms ({kernel: ms}, one per workload) of one attempt."""
    return store.query("SELECT workload_uuid, kernel_ms FROM eval_results WHERE attempt_id = ? "
                       "AND kernel_ms IS NOT NULL ORDER BY workload_uuid", [attempt_id])


def kernel_times_rows(store: Store, problem: str, source_hash: str) -> list[dict]:
    """eval_results.kernel_ms ({kernel: ms}, one per workload) of the newest evaluated attempt of
    this problem with this source that has them."""
    return store.query(
        "WITH a AS (SELECT t.id FROM attempts t WHERE t.problem = ? AND t.source_hash = ? "
        "AND t.status = 'evaluated' AND EXISTS (SELECT 1 FROM eval_results e "
        "WHERE e.attempt_id = t.id AND e.kernel_ms IS NOT NULL) ORDER BY t.created_at DESC LIMIT 1) "
        "SELECT e.workload_uuid, e.kernel_ms FROM eval_results e JOIN a ON e.attempt_id = a.id "
        "WHERE e.kernel_ms IS NOT NULL ORDER BY e.workload_uuid", [problem, source_hash])


def population_rows(store: Store, problem: str, k: int, live: Sequence[str]) -> list[dict]:
    """The k best attempts whose outcome is in `live`, one per distinct source."""
    return store.query(
        "SELECT id, parent_id, agent, sol_score, candidate FROM attempts WHERE problem = ? "
        f"AND candidate IS NOT NULL AND outcome IN ({','.join('?' * len(live))}) "
        "QUALIFY row_number() OVER (PARTITION BY source_hash ORDER BY sol_score DESC NULLS LAST) = 1 "
        "ORDER BY sol_score DESC NULLS LAST, created_at DESC LIMIT ?", [problem, *live, k])


def link_llm_calls(store: Store, attempt_id: str, call_ids: Sequence[str]) -> None:
    """The LLM calls that made an attempt point at it."""
    if call_ids:
        marks = ",".join("?" * len(call_ids))
        store.execute(f"UPDATE llm_calls SET attempt_id = ? WHERE id IN ({marks})",
                      [attempt_id, *call_ids])


def run_outcome_counts(store: Store, run_id: str) -> list[dict]:
    """Per problem and outcome of one run: attempts and the best SOL score."""
    return store.query(
        "SELECT problem, outcome, count(*) AS n, max(sol_score) AS best FROM attempts "
        "WHERE run_id = ? GROUP BY problem, outcome", [run_id])


def ensure_hardware(store: Store, row: dict) -> None:
    """The hardware row an evaluation ran on, once."""
    if not store.query("SELECT id FROM hardware WHERE id = ?", [row["id"]]):
        store.insert_rows("hardware", [row])


def get_attempt(store: Store, attempt_id: str) -> Optional[dict]:
    return store.query_one("SELECT * FROM attempts WHERE id = ?", [attempt_id])


def latest_eval_results(store: Store, attempt_id: str) -> list[dict]:
    """One eval_results row per workload of an attempt, the latest."""
    return store.query(
        "SELECT * FROM eval_results WHERE attempt_id = ? QUALIFY row_number() OVER "
        "(PARTITION BY workload_uuid ORDER BY created_at DESC) = 1", [attempt_id])


# ---- the content cache ----------------------------------------------------------------------------
def _answers(store: Store, problem: str, source_hash: str, evaluator: Optional[str], where: str,
             args: list, one: bool):
    sql = ("SELECT a.id, a.outcome, a.status, a.error FROM attempts a JOIN runs r ON r.id = a.run_id "
           "WHERE a.problem = ? AND a.source_hash = ? ")
    params: list = [problem, source_hash]
    if evaluator is not None:
        sql += "AND json_extract_string(r.config, '$.evaluator_version') = ? "
        params.append(evaluator)
    sql += where + " ORDER BY a.created_at" + (" LIMIT 1" if one else "")
    return store.query_one(sql, params + args) if one else store.query(sql, params + args)


def compile_answer(store: Store, problem: str, source_hash: str, *, arch: str,
                   evaluator: Optional[str], outcomes: Sequence[str]) -> Optional[dict]:
    """A failed attempt of this source on this arch whose outcome is a compile-time one."""
    return _answers(store, problem, source_hash, evaluator,
                    "AND json_extract_string(r.config, '$.arch') = ? AND a.status = 'failed' "
                    f"AND a.outcome IN ({','.join('?' * len(outcomes))})", [arch, *outcomes], True)


def eval_answers(store: Store, problem: str, source_hash: str, *, gpu_identity: str,
                 evaluator: Optional[str], outcomes: Sequence[str]) -> list[dict]:
    """Finished attempts of this source on this GPU model whose outcome is an evaluation's."""
    return _answers(store, problem, source_hash, evaluator,
                    "AND json_extract_string(r.config, '$.gpu_identity') = ? "
                    "AND a.status IN ('evaluated', 'failed') "
                    f"AND a.outcome IN ({','.join('?' * len(outcomes))})",
                    [gpu_identity, *outcomes], False)


def compiled_answer(store: Store, problem: str, source_hash: str, *, arch: str,
                    evaluator: Optional[str]) -> Optional[dict]:
    """An attempt of this source that compiled for this arch (and was not timed)."""
    return _answers(store, problem, source_hash, evaluator,
                    "AND json_extract_string(r.config, '$.arch') = ? AND a.outcome = 'compiled' "
                    "AND EXISTS (SELECT 1 FROM compile_results c WHERE c.attempt_id = a.id "
                    "AND c.status = 'ok')", [arch], True)


def evaluated_workloads(store: Store, attempt_id: str) -> set[str]:
    return {r["workload_uuid"] for r in store.query(
        "SELECT DISTINCT workload_uuid FROM eval_results WHERE attempt_id = ?", [attempt_id])}


def scored_results(store: Store, attempt_id: str) -> list[dict]:
    """An attempt's eval_results rows with their scores, oldest first."""
    return store.query(
        "SELECT e.workload_uuid, e.status, e.correct, e.max_abs_err, e.max_rel_err, e.matched_ratio, "
        "e.median_ms, e.message, s.speedup, s.sol_score, s.t_sol_ms, s.t_baseline_ms FROM eval_results e "
        "LEFT JOIN scores s ON s.attempt_id = e.attempt_id AND s.workload_uuid = e.workload_uuid "
        "WHERE e.attempt_id = ? ORDER BY e.created_at", [attempt_id])


# ---- resume -----------------------------------------------------------------------------------
def runs_with_resume_key(store: Store, key: str) -> list[dict]:
    return store.query(
        "SELECT id, status, pid, host FROM runs WHERE kind = 'optimize' "
        "AND json_extract_string(config, '$.resume_key') = ? ORDER BY started_at", [key])


def end_session(store: Store, run_id: str, problem: str) -> None:
    """The session this run's latest open 'run' decision for `problem` started has returned (one
    session per problem runs at a time, so the open row is its own)."""
    store.execute(
        "UPDATE planner_decisions SET ended_at = now() AT TIME ZONE 'UTC' WHERE run_id = ? AND problem = ? "
        "AND action = 'run' AND ended_at IS NULL", [run_id, problem])


def cut_sessions(store: Store, run_ids: Sequence[str]) -> list[dict]:
    """Per problem, its latest 'run' decision over these runs when that session never returned and
    its run was interrupted: (problem, worker, language, attempts handed out, attempts made)."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    return store.query(
        f"WITH last AS (SELECT d.* FROM planner_decisions d WHERE d.run_id IN ({marks}) "
        f"  AND d.action = 'run' QUALIFY row_number() OVER (PARTITION BY d.problem "
        f"  ORDER BY d.created_at DESC, d.id DESC) = 1) "
        f"SELECT l.problem, l.worker, l.language, l.attempts, "
        f"  (SELECT count(*) FROM attempts a WHERE a.run_id = l.run_id AND a.problem = l.problem "
        f"   AND a.created_at >= l.created_at) AS made "
        f"FROM last l JOIN runs r ON r.id = l.run_id "
        f"WHERE l.ended_at IS NULL AND r.status = 'interrupted' ORDER BY l.created_at, l.problem",
        list(run_ids))


def spent_by_runs(store: Store, run_ids: Sequence[str]) -> tuple[int, float]:
    """(attempts, GPU-seconds) these runs spent, interrupted attempts left out."""
    if not run_ids:
        return 0, 0.0
    marks = ",".join("?" * len(run_ids))
    row = store.query_one(
        f"SELECT count(*) AS n, coalesce(sum(gpu_seconds), 0) AS g FROM attempts "
        f"WHERE run_id IN ({marks}) AND status <> 'interrupted'", list(run_ids))
    return int(row["n"]), float(row["g"])


def unfinished_attempts(store: Store, run_ids: Sequence[str], *, compiled_too: bool) -> list[dict]:
    """Interrupted attempts of these runs that never compiled (and, with compiled_too, those compiled
    but never timed), unless a later attempt already finished them (parent_id)."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    want = ["a.outcome IS NULL"] + (["a.outcome = 'compiled'"] if compiled_too else [])
    return store.query(
        f"SELECT a.id, a.problem, a.agent, a.parent_id, a.candidate, a.source_hash FROM attempts a "
        f"WHERE a.run_id IN ({marks}) AND a.status = 'interrupted' AND a.candidate IS NOT NULL "
        f"AND ({' OR '.join(want)}) "
        f"AND NOT EXISTS (SELECT 1 FROM attempts b WHERE b.parent_id = a.id AND b.status <> 'interrupted') "
        f"ORDER BY a.created_at, a.id", list(run_ids))


# ---- replay -----------------------------------------------------------------------------------
def attempts_by_id(store: Store, ids: Sequence[str]) -> list[dict]:
    marks = ",".join("?" * len(ids))
    return store.query(f"SELECT id, problem, agent, candidate FROM attempts WHERE id IN ({marks}) "
                       f"AND candidate IS NOT NULL ORDER BY created_at", list(ids))


def best_attempt_per_problem(store: Store, glob: Optional[str] = None) -> list[dict]:
    """Each problem's best scored attempt (names matching the glob), else its latest compiled one."""
    return store.query(
        "SELECT id, problem, agent, candidate FROM attempts WHERE candidate IS NOT NULL "
        "AND outcome IN ('ok', 'compiled') AND (? IS NULL OR problem GLOB ?) "
        "QUALIFY row_number() OVER (PARTITION BY problem ORDER BY sol_score DESC NULLS LAST, "
        "created_at DESC) = 1 ORDER BY problem", [glob, glob])


# ---- the leaderboard --------------------------------------------------------------------------
_LEADERBOARD = """
WITH a AS (
  SELECT * FROM attempts WHERE (? IS NULL OR run_id = ?)
), per AS (
  SELECT s.attempt_id, exp(avg(ln(s.speedup))) AS speedup, count(*) AS n_scored
  FROM scores s WHERE s.speedup > 0 GROUP BY s.attempt_id
), best AS (
  SELECT a.problem, a.id, a.agent, a.language, a.sol_score, per.speedup
  FROM a LEFT JOIN per ON per.attempt_id = a.id WHERE a.sol_score IS NOT NULL
  QUALIFY row_number() OVER (PARTITION BY a.problem ORDER BY a.sol_score DESC, a.created_at) = 1
), counts AS (
  SELECT problem, count(*) AS attempts,
         count(*) FILTER (WHERE outcome = 'ok') AS correct,
         count(*) FILTER (WHERE outcome = 'compiled' OR outcome = 'ok') AS compiled,
         count(*) FILTER (WHERE status = 'interrupted') AS interrupted
  FROM a GROUP BY problem
)
SELECT c.problem, c.attempts, c.compiled, c.correct, c.interrupted, b.id AS best_attempt,
       b.agent, b.language, b.sol_score, b.speedup
FROM counts c LEFT JOIN best b ON b.problem = c.problem
ORDER BY b.sol_score DESC NULLS LAST, c.problem
"""


def leaderboard(store: Store, run_id: Optional[str] = None) -> list[dict]:
    """Per problem (of one run, or all): its best attempt, geomean speedup and attempt counts."""
    return store.query(_LEADERBOARD, [run_id, run_id])


# ---- rescoring --------------------------------------------------------------------------------
_TIMED = """
SELECT s.attempt_id, s.workload_uuid, s.t_kernel_ms, s.t_sol_ms, s.t_baseline_ms, s.baseline_variant,
       a.problem
FROM scores s JOIN attempts a ON a.id = s.attempt_id
WHERE s.t_kernel_ms IS NOT NULL
"""

_BASELINES = """
SELECT problem, workload_uuid, min(median_ms) AS t_b, arg_min(variant, median_ms) AS variant FROM (
  SELECT problem, workload_uuid, variant, median_ms FROM baselines
  WHERE median_ms IS NOT NULL AND coalesce(status, 'passed') = 'passed'
  QUALIFY row_number() OVER (PARTITION BY problem, workload_uuid, variant ORDER BY created_at DESC) = 1)
GROUP BY problem, workload_uuid
"""


def timed_scores(store: Store, unscored_only: bool) -> list[dict]:
    return store.query(_TIMED + ("AND s.sol_score IS NULL\n" if unscored_only else ""))


def baseline_cost_ms(store: Store) -> dict[str, float]:
    """Per problem: T_b summed over its workloads (the fastest_baselines rows)."""
    return {r["problem"]: r["cost_ms"] for r in store.query(
        f"SELECT problem, sum(t_b) AS cost_ms FROM ({_BASELINES}) GROUP BY problem")}


def fastest_baselines(store: Store) -> list[dict]:
    """Per (problem, workload): the faster of the latest passed eager and torch.compile T_b."""
    return store.query(_BASELINES)


def update_scores(store: Store, updates: Sequence[dict], problem_score) -> int:
    """Rewrite scores rows ({attempt_id, workload_uuid, t_baseline_ms, speedup, sol_score,
    baseline_variant}) and each touched attempt's SOL score (`problem_score(list of per-workload
    scores)`, kept only on correct attempts), in one transaction. Returns attempts touched."""
    touched = []
    with store.transaction() as con:
        for u in updates:
            con.execute("UPDATE scores SET t_baseline_ms = ?, speedup = ?, sol_score = ?, "
                        "baseline_variant = ? WHERE attempt_id = ? AND workload_uuid = ?",
                        [u["t_baseline_ms"], u["speedup"], u["sol_score"], u["baseline_variant"],
                         u["attempt_id"], u["workload_uuid"]])
            if u["attempt_id"] not in touched:
                touched.append(u["attempt_id"])
        for aid in touched:
            per = [x[0] for x in con.execute("SELECT sol_score FROM scores WHERE attempt_id = ?",
                                             [aid]).fetchall()]
            con.execute("UPDATE attempts SET sol_score = ? WHERE id = ? AND outcome = 'ok'",
                        [problem_score(per), aid])
    return len(touched)
