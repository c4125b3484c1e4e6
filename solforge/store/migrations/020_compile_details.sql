-- compile (020-029): details of a compile beside the core compile_results columns.
-- compiler keeps "nvrtc 13.0" style text; these add what a cache lookup and a replay need.
ALTER TABLE compile_results ADD COLUMN compiler_version VARCHAR;  -- wheel versions (compiler + headers)
ALTER TABLE compile_results ADD COLUMN options JSON;              -- every option passed (include paths as <wheel:...>)
ALTER TABLE compile_results ADD COLUMN cache_key VARCHAR;         -- key in the on-disk cache (cubins live there)
ALTER TABLE compile_results ADD COLUMN compile_seconds DOUBLE;    -- compile time of the cubins (a cache hit keeps it)
ALTER TABLE compile_results ADD COLUMN cubin_bytes BIGINT;
ALTER TABLE compile_results ADD COLUMN entries JSON;              -- kernel -> {unit, symbol, params (CuTe DSL)}
