-- runs (080-089: provenance): what a run ran, so every result it produced can name it (issue #6).
-- git_commit: the solforge tree's commit ($SOLFORGE_COMMIT on a GPU box without .git, else git
--   rev-parse HEAD; NULL when neither is known). torch_version / cuda_version: torch's version and
--   the CUDA version it was built with, from the machine that ran the evaluations
--   (solforge/provenance.py; the full record, with commit_source and dirty, is in runs.config.provenance).
-- NULL for runs written before this migration.
ALTER TABLE runs ADD COLUMN git_commit VARCHAR;
ALTER TABLE runs ADD COLUMN torch_version VARCHAR;
ALTER TABLE runs ADD COLUMN cuda_version VARCHAR;
