-- A screened attempt (outcome 'screened': correct on the few workloads it was screened on, not
-- faster than the best known there, the rest not run) is a verdict of the search, not a failure:
-- v_failures leaves it out, and the workloads it did not run with it.
CREATE OR REPLACE VIEW v_failures AS
SELECT 'attempt' AS stage, coalesce(a.outcome, a.status) AS kind, a.problem, a.id AS attempt_id,
       a.error AS message, a.created_at
FROM attempts a
WHERE a.status IN ('failed', 'interrupted')
   OR (a.outcome IS NOT NULL AND a.outcome NOT IN ('ok', 'compiled', 'pending', 'screened'))
UNION ALL
SELECT 'compile', c.status, a.problem, c.attempt_id, c.log, c.created_at
FROM compile_results c LEFT JOIN attempts a ON a.id = c.attempt_id
WHERE c.status <> 'ok'
UNION ALL
SELECT 'evaluate', e.status, a.problem, e.attempt_id, e.message, e.created_at
FROM v_latest_evals e LEFT JOIN attempts a ON a.id = e.attempt_id
WHERE (e.status <> 'passed' OR NOT coalesce(e.correct, false))
  AND NOT (coalesce(a.outcome, '') = 'screened' AND e.status = 'skipped');
