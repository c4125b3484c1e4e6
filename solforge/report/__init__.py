"""Reports: DuckDB views (migration 070), analysis with polars, terminal tables, self-contained HTML."""
