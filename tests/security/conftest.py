"""Hostile-input tests: canary credentials in the environment of every test, and the places they
must never reach (DuckDB text columns, files, logs, prompts), checked for real."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MARK = "CANARY" + secrets.token_hex(6).upper()
# names an attacker looks for; values: some shaped like provider keys, some plain (so a leak is
# caught by the allowlist, not only by scrub's key shapes)
CANARY_ENV = {
    "OPENAI_API_KEY": f"sk-{MARK}openai000000",
    "ANTHROPIC_API_KEY": f"sk-ant-{MARK}anthropic0",
    "HF_TOKEN": f"hf_{MARK}huggingface000000",
    "GITHUB_TOKEN": f"{MARK}-github",
    "AWS_SECRET_ACCESS_KEY": f"{MARK}-aws",
    "DATABASE_URL": f"postgres://user:{MARK}-db@db/x",
    "HTTPS_PROXY": f"http://user:{MARK}-proxy@proxy:3128",
    "SOLFORGE_LLM_API_KEY": f"{MARK}-solforge",
    "PREFECT_API_KEY": f"{MARK}-prefect",
    "MY_SERVICE_PASSWORD": f"{MARK}-password",
}


@pytest.fixture(autouse=True)
def canaries(monkeypatch):
    """Every test runs with canary credentials; compile workers restart so they see them too."""
    for k, v in CANARY_ENV.items():
        monkeypatch.setenv(k, v)
    from solforge.compile import worker

    worker.shutdown()
    yield MARK
    worker.shutdown()


def leaks_in_text(text: str) -> bool:
    return MARK in (text or "")


def leaks_in_files(*roots) -> list[str]:
    """Regular files under roots whose bytes hold the canary (read capped; FIFOs and devices skipped)."""
    hits = []
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                p = Path(dirpath) / f
                try:
                    if not stat.S_ISREG(p.lstat().st_mode):
                        continue
                    with open(p, "rb") as fh:
                        if MARK.encode() in fh.read(64 << 20):
                            hits.append(str(p))
                except OSError:
                    continue
    return hits


def leaks_in_duckdb(path) -> list[str]:
    """table.column for every text column (VARCHAR or JSON) holding the canary, found with SQL.
    The file is compressed, so grepping its bytes proves nothing."""
    import duckdb

    hits = []
    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = con.execute("SELECT table_name, column_name FROM information_schema.columns "
                           "WHERE data_type IN ('VARCHAR', 'JSON') AND table_schema = 'main'").fetchall()
        for table, col in cols:
            n = con.execute(f'SELECT count(*) FROM "{table}" WHERE CAST("{col}" AS VARCHAR) LIKE ?',
                            [f"%{MARK}%"]).fetchone()[0]
            if n:
                hits.append(f"{table}.{col}")
        assert cols, "no text columns found: the check would prove nothing"
    finally:
        con.close()
    return hits


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
