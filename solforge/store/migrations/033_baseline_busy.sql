-- evaluate: the GPU's own time per call of a baseline (BaselineRow.busy_ms, Timing.busy_ms): the
-- median over the timed calls of the summed durations of the call's recorded activities, in ms.
-- median_ms - busy_ms is host time between the reference's launches: an eager reference far above
-- its busy time is launch-bound, and its T_b reads the host's launch speed
-- (docs/timing_agreement.md). NULL when timed by CUDA events and for rows written before this
-- migration (the committed baselines_h200.csv predates it).
ALTER TABLE baselines ADD COLUMN IF NOT EXISTS busy_ms DOUBLE;
