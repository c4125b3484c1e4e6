-- 001_core: the tables every area writes into. Documented column by column in ../SCHEMA.md.
-- Conventions: ids are text (uuid4 hex, made in Python, so a worker can name a row before it reaches
-- the database); times are TIMESTAMP in UTC; JSON columns hold JSON text; status columns hold the
-- .value of the str Enums in solforge/store/status.py. No foreign keys: DuckDB cannot update a row
-- that a foreign key references, and attempts are updated through their lifecycle.
-- Result tables (compile_results, eval_results, baselines, scores) are append-only history:
-- read "the latest" by created_at.

CREATE TABLE problems (
    name          VARCHAR PRIMARY KEY,          -- definition.name (unique across all datasets)
    subset        VARCHAR,                      -- L1 | L2 | Quant | FlashInfer-Bench | flashinfer_trace | ...
    op_type       VARCHAR,
    content_hash  VARCHAR NOT NULL,             -- Problem.content_hash (definition + workloads)
    source        VARCHAR,                      -- directory, file or hf:// URI it was loaded from
    provenance    JSON,                         -- {"dataset":..., "hf_id":..., "b200_reference":{...}, ...}
    definition    JSON NOT NULL,                -- the full definition object (with reference code)
    tags          VARCHAR[],
    model_tags    VARCHAR[],                    -- 'model:<x>' tags (prefix stripped) plus hf_id
    dtypes        VARCHAR[],                    -- distinct tensor dtypes of inputs and outputs
    n_workloads   INTEGER NOT NULL DEFAULT 0,
    warnings      VARCHAR[],
    ingested_at   TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),  -- first ingest
    updated_at    TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')   -- last content change
);

CREATE TABLE workloads (
    problem        VARCHAR NOT NULL,            -- problems.name
    uuid           VARCHAR NOT NULL,
    workload_index INTEGER NOT NULL,            -- 0-based order in workload.jsonl
    axes           JSON NOT NULL,               -- every axis value (const, var and expr resolved)
    workload       JSON NOT NULL,               -- the workload object as given (axes, inputs, tolerance)
    tolerance      JSON NOT NULL,               -- effective tolerance (defaults filled in)
    input_shapes   JSON,                        -- {"name": [d0, d1, ...] or null for a scalar}
    output_shapes  JSON,
    published      JSON,                        -- NVIDIA's published numbers for this workload, if any:
                                                -- {"gpu": "NVIDIA B200", "sol_ms":..., "baseline_latency_ms":...}
    warnings       VARCHAR[],
    PRIMARY KEY (problem, uuid)
);

CREATE TABLE runs (
    id           VARCHAR PRIMARY KEY,
    started_at   TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    finished_at  TIMESTAMP,
    status       VARCHAR NOT NULL DEFAULT 'running',  -- RunStatus
    kind         VARCHAR,                             -- optimize | baseline | replay | ingest | ...
    config       JSON,
    gpu_profile  VARCHAR,
    hardware_id  VARCHAR,                             -- hardware.id
    host         VARCHAR,
    pid          INTEGER,
    note         VARCHAR,
    error        VARCHAR
);

CREATE TABLE attempts (
    id           VARCHAR PRIMARY KEY,
    run_id       VARCHAR,                             -- runs.id
    problem      VARCHAR NOT NULL,                    -- problems.name
    parent_id    VARCHAR,                             -- attempts.id this one refines
    agent        VARCHAR,                             -- llm | offline | human | ...
    model        VARCHAR,                             -- LLM model name, if any
    language     VARCHAR,                             -- cuda | cute
    candidate    JSON,                                -- the Candidate (solforge/candidate.py) as JSON
    params       JSON,
    source_hash  VARCHAR,
    status       VARCHAR NOT NULL DEFAULT 'queued',   -- AttemptStatus: queued -> compiled -> evaluated | failed | interrupted
    error        VARCHAR,
    created_at   TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    updated_at   TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE compile_results (
    attempt_id   VARCHAR NOT NULL,
    status       VARCHAR NOT NULL,                    -- CompileStatus
    log          VARCHAR,
    seconds      DOUBLE,
    cubin_hash   VARCHAR,
    compiler     VARCHAR,                             -- e.g. "nvrtc 13.0"
    arch         VARCHAR,                             -- e.g. sm_90a
    cache_hit    BOOLEAN,
    created_at   TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE eval_results (
    attempt_id    VARCHAR NOT NULL,
    workload_uuid VARCHAR NOT NULL,
    status        VARCHAR NOT NULL,                   -- EvalStatus
    correct       BOOLEAN,
    max_abs_err   DOUBLE,
    max_rel_err   DOUBLE,
    matched_ratio DOUBLE,
    median_ms     DOUBLE,
    p10_ms        DOUBLE,
    p90_ms        DOUBLE,
    spread        DOUBLE,                             -- (p90 - p10) / median
    n_reps        INTEGER,
    message       VARCHAR,
    hardware_id   VARCHAR,
    created_at    TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE baselines (
    problem       VARCHAR NOT NULL,
    workload_uuid VARCHAR NOT NULL,
    variant       VARCHAR NOT NULL,                   -- BaselineVariant: eager | compile
    median_ms     DOUBLE,
    p10_ms        DOUBLE,
    p90_ms        DOUBLE,
    spread        DOUBLE,
    n_reps        INTEGER,
    hardware_id   VARCHAR,
    label         VARCHAR,                            -- e.g. 'dequantized-reference'
    status        VARCHAR,                            -- EvalStatus of the baseline run itself
    message       VARCHAR,
    created_at    TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE roofline (
    problem       VARCHAR NOT NULL,
    workload_uuid VARCHAR NOT NULL,
    gpu_profile   VARCHAR NOT NULL,
    flops         DOUBLE,
    bytes         DOUBLE,
    t_sol_ms      DOUBLE,
    limiter       VARCHAR,                            -- compute | memory | ...
    details       JSON,
    created_at    TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    PRIMARY KEY (problem, workload_uuid, gpu_profile)
);

CREATE TABLE scores (
    attempt_id    VARCHAR NOT NULL,
    workload_uuid VARCHAR NOT NULL,
    speedup       DOUBLE,                             -- T_baseline / T_kernel
    sol_score     DOUBLE,                             -- 1 / (1 + (T_k - T_sol) / (T_b - T_sol))
    t_kernel_ms   DOUBLE,
    t_baseline_ms DOUBLE,
    t_sol_ms      DOUBLE,
    baseline_variant VARCHAR,
    hardware_id   VARCHAR,
    created_at    TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE llm_calls (
    id                VARCHAR PRIMARY KEY,
    attempt_id        VARCHAR,
    run_id            VARCHAR,
    model             VARCHAR,
    prompt            VARCHAR,
    response          VARCHAR,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    cost_usd          DOUBLE,
    latency_s         DOUBLE,
    status            VARCHAR NOT NULL,               -- LlmCallStatus
    error             VARCHAR,
    created_at        TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE planner_decisions (
    id          VARCHAR PRIMARY KEY,
    run_id      VARCHAR,
    problem     VARCHAR,
    worker      VARCHAR,
    language    VARCHAR,
    reason      VARCHAR,
    budget      JSON,
    created_at  TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

CREATE TABLE hardware (
    id          VARCHAR PRIMARY KEY,                  -- stable id, e.g. hash of gpu name + driver + clocks
    gpu_name    VARCHAR,
    driver      VARCHAR,
    cuda        VARCHAR,
    clocks      JSON,
    details     JSON,
    captured_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
