-- evaluate (030-039): where an evaluation's seconds go (solforge/evaluate/phases.py), per attempt and
-- per workload, so "where does GPU time go" is a SQL question. Written by the loop's record stage
-- (solforge.agents.loop._finish) and solforge.evaluate.api.record in the same UPDATE/transaction as
-- the attempt's status and eval_results rows. NULL for attempts that were never evaluated, and for
-- rows written before this migration.
-- attempts.eval_launch: how the evaluator process started: zygote | spawn (RunReport.launch).
-- attempts.eval_mode: full | screen | screen+full (RunReport.mode; screening.py).
-- attempts.eval_phases: {phase: seconds} summed over the evaluator processes, plus "total" (runner start
--   -> last exit) and "driver" (solforge.evaluate.phase_totals.flat_seconds), e.g.
--   {"launch": 0.04, "imports": 0.0, "cuda_init": 0.3, "load": 0.2, ..., "teardown": 0.01, "total": 2.1}.
ALTER TABLE attempts ADD COLUMN eval_launch VARCHAR;
ALTER TABLE attempts ADD COLUMN eval_mode VARCHAR;
ALTER TABLE attempts ADD COLUMN eval_phases JSON;
-- eval_results.phases: one workload's phase seconds (EvalResult.extra["phases"]) plus "workload" (its
--   whole wall time in the driver).
ALTER TABLE eval_results ADD COLUMN phases JSON;
