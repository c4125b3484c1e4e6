-- reports (070-079): read-only views over the core tables, for `solforge report`, notebooks and
-- `solforge sql`. Example queries: docs/reports.md. Views hold no data, so they always reflect the
-- latest rows; result tables are append-only, so each view reads the newest row per key.
--
-- "Correct" attempt: every workload of its problem has a latest eval_results row with correct = true
-- (problems.n_workloads when the problem is in the store, else every workload it was evaluated on).
-- Speedups aggregate with a geometric mean; SOL scores with an arithmetic mean (as SOL-ExecBench).

-- Newest eval_results row per (attempt, workload).
CREATE VIEW v_latest_evals AS
SELECT * FROM eval_results
QUALIFY row_number() OVER (PARTITION BY attempt_id, workload_uuid ORDER BY created_at DESC) = 1;

-- Newest scores row per (attempt, workload).
CREATE VIEW v_latest_scores AS
SELECT * FROM scores
QUALIFY row_number() OVER (PARTITION BY attempt_id, workload_uuid ORDER BY created_at DESC) = 1;

-- One row per attempt with its per-workload results rolled up, and its LLM spend.
CREATE VIEW v_attempt_summary AS
WITH ev AS (
    SELECT attempt_id,
           count(*)                              AS n_evaluated,
           count(*) FILTER (WHERE correct)       AS n_correct,
           count(*) FILTER (WHERE NOT coalesce(correct, false)) AS n_wrong
    FROM v_latest_evals GROUP BY attempt_id
), sc AS (
    SELECT attempt_id,
           count(*)                                           AS n_scored,
           exp(avg(ln(speedup)) FILTER (WHERE speedup > 0))   AS speedup_geomean,
           min(speedup)                                       AS speedup_min,
           avg(sol_score)                                     AS sol_score_mean,
           sum(t_kernel_ms)                                   AS t_kernel_ms_sum,
           sum(t_baseline_ms)                                 AS t_baseline_ms_sum
    FROM v_latest_scores GROUP BY attempt_id
), llm AS (
    SELECT attempt_id, count(*) AS llm_calls, sum(cost_usd) AS cost_usd,
           sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens
    FROM llm_calls WHERE attempt_id IS NOT NULL GROUP BY attempt_id
)
SELECT a.id AS attempt_id, a.run_id, a.problem, p.subset, a.parent_id, a.agent, a.model, a.language,
       a.status, a.outcome, a.error, a.created_at, a.gpu_seconds,
       coalesce(p.n_workloads, ev.n_evaluated)               AS n_workloads,
       coalesce(ev.n_evaluated, 0)                           AS n_evaluated,
       coalesce(ev.n_correct, 0)                             AS n_correct,
       coalesce(sc.n_scored, 0)                              AS n_scored,
       (ev.n_correct IS NOT NULL AND ev.n_wrong = 0
        AND ev.n_correct >= coalesce(p.n_workloads, ev.n_evaluated)) AS all_correct,
       sc.speedup_geomean, sc.speedup_min,
       coalesce(a.sol_score, sc.sol_score_mean)              AS sol_score,
       sc.t_kernel_ms_sum, sc.t_baseline_ms_sum,
       coalesce(llm.llm_calls, 0)                            AS llm_calls,
       coalesce(llm.cost_usd, 0.0)                           AS cost_usd,
       llm.prompt_tokens, llm.completion_tokens
FROM attempts a
LEFT JOIN problems p ON p.name = a.problem
LEFT JOIN ev ON ev.attempt_id = a.id
LEFT JOIN sc ON sc.attempt_id = a.id
LEFT JOIN llm ON llm.attempt_id = a.id;

-- The best correct attempt per problem: highest SOL score, then highest geomean speedup.
CREATE VIEW v_best_per_problem AS
SELECT problem, subset, attempt_id, run_id, agent, model, language, created_at,
       speedup_geomean, speedup_min, sol_score, n_workloads
FROM v_attempt_summary
WHERE all_correct AND n_scored > 0
QUALIFY row_number() OVER (PARTITION BY problem
                           ORDER BY sol_score DESC NULLS LAST, speedup_geomean DESC NULLS LAST,
                                    created_at) = 1;

-- One row per attempted problem: best results, effort, and how often attempts were correct.
CREATE VIEW v_leaderboard AS
SELECT s.problem,
       any_value(s.subset)                                        AS subset,
       b.speedup_geomean                                          AS best_speedup_geomean,
       b.sol_score                                                AS best_sol_score,
       b.attempt_id                                               AS best_attempt_id,
       count(*)                                                   AS attempts,
       count(*) FILTER (WHERE s.status = 'evaluated')             AS evaluated,
       count(*) FILTER (WHERE s.all_correct)                      AS correct_attempts,
       count(*) FILTER (WHERE s.all_correct) / count(*)::DOUBLE   AS correctness,
       sum(s.cost_usd)                                            AS cost_usd,
       sum(s.gpu_seconds)                                         AS gpu_seconds,
       min(s.created_at)                                          AS first_attempt_at,
       max(s.created_at)                                          AS last_attempt_at
FROM v_attempt_summary s
LEFT JOIN v_best_per_problem b ON b.problem = s.problem
GROUP BY s.problem, b.speedup_geomean, b.sol_score, b.attempt_id
ORDER BY best_sol_score DESC NULLS LAST, best_speedup_geomean DESC NULLS LAST, s.problem;

-- Attempts in order per problem, with the running best so far (what "improvement over attempts" plots).
CREATE VIEW v_attempt_timeline AS
SELECT attempt_id, run_id, problem, subset, agent, model, language, status, outcome, created_at,
       all_correct, speedup_geomean, sol_score, cost_usd,
       row_number() OVER w                                                    AS attempt_no,
       max(CASE WHEN all_correct THEN sol_score END) OVER w                   AS best_sol_score_so_far,
       max(CASE WHEN all_correct THEN speedup_geomean END) OVER w             AS best_speedup_so_far,
       sum(cost_usd) OVER w                                                   AS cost_usd_so_far
FROM v_attempt_summary
WINDOW w AS (PARTITION BY problem ORDER BY created_at, attempt_id
             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);

-- LLM spend per run and model: calls, tokens, dollars, failures, and what the run achieved.
CREATE VIEW v_llm_spend AS
SELECT c.run_id, c.model,
       count(*)                                             AS calls,
       count(*) FILTER (WHERE c.status <> 'ok')             AS failed_calls,
       sum(c.prompt_tokens)                                 AS prompt_tokens,
       sum(c.completion_tokens)                             AS completion_tokens,
       sum(c.cost_usd)                                      AS cost_usd,
       sum(c.latency_s)                                     AS latency_s,
       count(DISTINCT c.attempt_id)                         AS attempts,
       min(c.created_at)                                    AS first_call_at,
       max(c.created_at)                                    AS last_call_at
FROM llm_calls c
GROUP BY c.run_id, c.model;

-- What went wrong, by stage and kind: attempt outcomes, compile statuses, per-workload eval statuses.
CREATE VIEW v_failures AS
SELECT 'attempt' AS stage, coalesce(a.outcome, a.status) AS kind, a.problem, a.id AS attempt_id,
       a.error AS message, a.created_at
FROM attempts a
WHERE a.status IN ('failed', 'interrupted')
   OR (a.outcome IS NOT NULL AND a.outcome NOT IN ('ok', 'compiled', 'pending'))
UNION ALL
SELECT 'compile', c.status, a.problem, c.attempt_id, c.log, c.created_at
FROM compile_results c LEFT JOIN attempts a ON a.id = c.attempt_id
WHERE c.status <> 'ok'
UNION ALL
SELECT 'evaluate', e.status, a.problem, e.attempt_id, e.message, e.created_at
FROM v_latest_evals e LEFT JOIN attempts a ON a.id = e.attempt_id
WHERE e.status <> 'passed' OR NOT coalesce(e.correct, false);

CREATE VIEW v_failures_by_kind AS
SELECT stage, kind, count(*) AS n, count(DISTINCT problem) AS problems,
       count(DISTINCT attempt_id) AS attempts,
       arg_max(left(coalesce(message, ''), 300), created_at) AS latest_message
FROM v_failures
GROUP BY stage, kind
ORDER BY n DESC, stage, kind;
