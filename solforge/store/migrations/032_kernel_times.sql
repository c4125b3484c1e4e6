-- evaluate: where a plan of several kernels spends one call. eval_results.kernel_ms: per kernel name,
-- the median over the timed calls of that kernel's summed GPU time within a call, in ms, from the
-- profiler's records (EvalResult.extra["kernel_ms"]; the 24 largest, the rest summed under
-- "(other kernels)"). NULL when timed by CUDA events, for untimed workloads and for rows written
-- before this migration. The LLM worker's plan prompt reads it (agents/plan_context.py).
ALTER TABLE eval_results ADD COLUMN IF NOT EXISTS kernel_ms JSON;
