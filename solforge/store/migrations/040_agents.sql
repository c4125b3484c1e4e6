-- agents (solforge/agents): what the planner and the loop need to read back cheaply.
-- attempts.outcome: the agents' finer status (solforge.agents.outcome.AttemptStatus: ok, compiled,
--   invalid, compile_error, incorrect, runtime_error, timeout); attempts.status stays the lifecycle.
-- attempts.sol_score: mean SOL score over workloads, set only when every workload is correct and scored.
-- attempts.gpu_seconds: wall time the evaluation held the GPU (what the planner's budget counts).
ALTER TABLE attempts ADD COLUMN outcome VARCHAR;
ALTER TABLE attempts ADD COLUMN sol_score DOUBLE;
ALTER TABLE attempts ADD COLUMN gpu_seconds DOUBLE;
-- planner_decisions: run | skip | stop, the rank behind it, how many attempts it handed out, and the
-- numbers the reason quotes (headroom, yield per GPU-second, attempts, best SOL score).
ALTER TABLE planner_decisions ADD COLUMN action VARCHAR;
ALTER TABLE planner_decisions ADD COLUMN priority DOUBLE;
ALTER TABLE planner_decisions ADD COLUMN attempts INTEGER;
ALTER TABLE planner_decisions ADD COLUMN metrics JSON;
