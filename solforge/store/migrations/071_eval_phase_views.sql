-- reports (070-079): where evaluation (GPU) time goes, from attempts.eval_phases and
-- eval_results.phases (migration 031). Example queries: docs/reports.md.

-- One row per (evaluated attempt, phase): the phase seconds of the whole evaluation (summed over its
-- evaluator processes), "total" = runner start -> last exit, "driver" = the driver's own wall time.
CREATE VIEW v_eval_phase_seconds AS
SELECT a.id AS attempt_id, a.run_id, a.problem, a.agent, a.outcome, a.created_at,
       a.eval_launch AS launch, a.eval_mode AS mode, a.gpu_seconds,
       j.key AS phase, CAST(j.value AS DOUBLE) AS seconds
FROM attempts a, json_each(a.eval_phases) j
WHERE a.eval_phases IS NOT NULL;

-- Per problem, launch (zygote | spawn) and mode (full | screen | screen+full): how many evaluations,
-- the median / p90 / summed seconds of each phase, and its share of the summed "total".
-- Phases nest ("driver" and "total" contain the others), so shares do not add up to 1.
CREATE VIEW v_eval_phases AS
SELECT problem, launch, mode, phase,
       count(DISTINCT attempt_id)            AS n_evals,
       median(seconds)                       AS median_s,
       quantile_cont(seconds, 0.9)           AS p90_s,
       sum(seconds)                          AS sum_s,
       sum(seconds) / nullif(sum(CASE WHEN phase = 'total' THEN sum(seconds) END)
                             OVER (PARTITION BY problem, launch, mode), 0) AS share_of_total
FROM v_eval_phase_seconds
GROUP BY problem, launch, mode, phase;

-- One row per (attempt, workload, phase) from the newest eval_results row of each workload: the
-- workload's own phases in the driver, "workload" = its whole wall time there.
CREATE VIEW v_eval_workload_phases AS
WITH e AS (
    SELECT attempt_id, workload_uuid, status, phases FROM eval_results
    WHERE phases IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY attempt_id, workload_uuid ORDER BY created_at DESC) = 1
)
SELECT e.attempt_id, a.problem, a.eval_launch AS launch, a.eval_mode AS mode, e.workload_uuid,
       e.status, j.key AS phase, CAST(j.value AS DOUBLE) AS seconds
FROM e JOIN attempts a ON a.id = e.attempt_id, json_each(e.phases) j;
