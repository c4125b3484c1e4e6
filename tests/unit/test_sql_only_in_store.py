"""SQL is written only in solforge/store: no SQL text and no duckdb import anywhere else in solforge/,
flows/ or tasks/.

Read from the source with ast: every string literal (f-string pieces joined) is checked against SQL
statement shapes; docstrings and argparse `help=` texts are prose for people and are not checked.
A store function is the way to read or write a table outside solforge/store."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("solforge", "flows", "tasks")
STORE = REPO / "solforge" / "store"

SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+)?(?:TABLE|VIEW|INDEX|SEQUENCE|MACRO)\b"
    r"|\bALTER\s+TABLE\b|\bDROP\s+(?:TABLE|VIEW)\b|\bWITH\s+\w+\s+AS\s*\(")


def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _help_texts(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog"):
            out.update(id(n) for n in ast.walk(node.value))
    return out


def sql_in(source: str, name: str = "<src>") -> list[tuple[int, str]]:
    """(line, text) of every string literal that reads as SQL, and of every duckdb import."""
    tree = ast.parse(source, name)
    skip = _docstrings(tree) | _help_texts(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        text = None
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
            skip.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "duckdb" for a in node.names):
            found.append((node.lineno, "import duckdb"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "duckdb":
            found.append((node.lineno, "from duckdb import ..."))
        if text is not None and SQL.search(text):
            found.append((node.lineno, " ".join(text.split())[:80]))
    return found


def test_the_check_finds_sql_and_leaves_prose_alone():
    src = '''
"""SELECT * FROM a docstring is prose."""
import duckdb
def f(store, ids):
    """UPDATE attempts SET prose = 1"""
    store.query(f"SELECT id FROM attempts WHERE id IN ({ids})")
    store.execute("UPDATE llm_calls SET attempt_id = ?", [1])
    x = ("WITH a AS (" "SELECT 1)")
    ap.add_argument("query", help="e.g. SELECT name FROM problems")
    return "selected from the store"
'''
    assert sorted(line for line, _ in sql_in(src)) == [3, 6, 7, 8]


def test_no_sql_outside_the_store():
    bad = []
    for root in ROOTS:
        for f in sorted((REPO / root).rglob("*.py")):
            if STORE in f.parents:
                continue
            for line, text in sql_in(f.read_text(), str(f)):
                bad.append(f"{f.relative_to(REPO)}:{line}: {text}")
    assert not bad, "SQL outside solforge/store (move it into a store function):\n" + "\n".join(bad)


def test_the_store_is_where_the_sql_is():
    """The check is not vacuous: the store's own modules are full of it."""
    assert sum(len(sql_in(f.read_text())) for f in STORE.rglob("*.py")) > 20
