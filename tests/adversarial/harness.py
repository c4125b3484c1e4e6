"""Reads the adversarial files (header conventions in README.md) and runs them through the real
runner: a staged directory and a spawned driver process per candidate."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
PROBLEM_DIR = HERE / "problem"


@dataclass
class Adversary:
    name: str
    path: Path
    kind: str                     # "cuda" | "host"
    expect_status: str
    expect_guard: Optional[str]
    t_sol_ms: Optional[float] = None
    allow_torch: bool = False
    needs_cubins: Optional[str] = None


def _header(text: str, key: str) -> Optional[str]:
    m = re.search(rf"^//\s*{key}:\s*(.+)$", text, re.MULTILINE)
    return m.group(1).strip() if m else None


def load(path: Path) -> Adversary:
    text = path.read_text()
    if path.suffix == ".cu":
        exp = _header(text, "expect").split()
        t_sol = _header(text, "t_sol_ms")
        return Adversary(path.stem, path, "cuda", exp[0], exp[1] if len(exp) > 1 else None,
                         float(t_sol) if t_sol else None)
    ns: dict = {}
    # Only the constants: executing the whole file here would run its hack in the test process.
    for line in text.splitlines():
        if re.match(r"^(EXPECT|ALLOW_TORCH|NEEDS_CUBINS)\s*=", line):
            exec(line, ns)  # noqa: S102 - our own test files, constants only
    st, guard = ns["EXPECT"]
    return Adversary(path.stem + "_host", path, "host", st, guard,
                     allow_torch=ns.get("ALLOW_TORCH", False), needs_cubins=ns.get("NEEDS_CUBINS"))


def all_adversaries() -> list[Adversary]:
    return [load(p) for p in sorted(HERE.glob("*.cu")) + sorted(HERE.glob("*.py"))
            if p.name not in ("harness.py",) and not p.name.startswith(("test_", "conftest"))]


def cuda_candidate(path: Path) -> dict:
    text = path.read_text()
    cand = {"problem": "adv_sin_chain", "language": "cuda", "sources": {"kernel.cu": text},
            "launches": json.loads(_header(text, "launches"))}
    ws = _header(text, "workspace")
    if ws:
        cand["workspace"] = ws
    wz = _header(text, "workspace_zero")
    if wz is not None:
        cand["workspace_zero"] = wz
    return cand


def compiled(cand: dict, name: str):
    """A CompileResult: precompiled cubins from $SOLFORGE_ADV_CUBINS/<name>/ when given (so a GPU box
    without the NVRTC wheels can run the tests), else compiled here with NVRTC."""
    import os

    from solforge.compile import compile_candidate
    from solforge.compile.result import CompileResult

    pre = os.environ.get("SOLFORGE_ADV_CUBINS")
    if pre and (Path(pre) / name / "result.json").exists():
        d = json.loads((Path(pre) / name / "result.json").read_text())
        d["cubins"] = {u: (Path(pre) / name / f).read_bytes() for u, f in d.pop("files").items()}
        return CompileResult.model_validate(d)
    cr = compile_candidate(cand, use_cache=False)
    assert cr.ok, cr.log
    return cr


def precompile(dest: Path) -> None:
    """Write every CUDA adversary's CompileResult under dest/<name>/ (for compiled())."""
    for adv in all_adversaries():
        src = adv.path if adv.kind == "cuda" else (HERE / adv.needs_cubins if adv.needs_cubins else None)
        if src is None:
            continue
        name = src.stem
        cr = compiled(cuda_candidate(src), name)
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for unit, blob in cr.cubins.items():
            fname = unit.replace("/", "_") + ".cubin"
            (folder / fname).write_bytes(blob)
            files[unit] = fname
        d = json.loads(cr.model_dump_json(exclude={"cubins"}))
        d["files"] = files
        (folder / "result.json").write_text(json.dumps(d))


def stage(adv: Adversary, root: Path, workloads: list[str], settings: Optional[dict] = None) -> Path:
    from solforge.evaluate.runner import stage_candidate
    from solforge.problem import load_problem_dir

    problem = load_problem_dir(PROBLEM_DIR)
    job = {"workloads": workloads, "settings": settings or {}}
    folder = root / adv.name
    if adv.kind == "cuda":
        cand = cuda_candidate(adv.path)
        cr = compiled(cand, adv.path.stem)
        if adv.t_sol_ms:
            job["t_sol_ms"] = {u: adv.t_sol_ms for u in workloads}
        return stage_candidate(folder, problem, candidate=cand, compile_result=cr, job=job)
    job["allow_torch"] = adv.allow_torch
    cand = cr = None
    if adv.needs_cubins:
        cand = cuda_candidate(HERE / adv.needs_cubins)
        cr = compiled(cand, Path(adv.needs_cubins).stem)
    return stage_candidate(folder, problem, candidate=cand, compile_result=cr,
                           host_source=adv.path.read_text(), job=job)


# ── the bare GPU box: only the stdlib, pydantic, numpy, torch and cuda-python ─────────────────────
BARE_BOX_BLOCKED = ("duckdb", "prefect", "litellm", "polars", "rich", "cutlass", "pandas", "httpx",
                    "openai")

_BLOCKER = '''import importlib.abc, sys
BLOCKED = %r


class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on the bare GPU box")
        return None


sys.meta_path.insert(0, _Block())
'''


def bare_box_site(folder: Path) -> Path:
    """A folder with a sitecustomize.py that makes BARE_BOX_BLOCKED unimportable in any Python started
    with it on PYTHONPATH (run_stage(extra_pythonpath=[...]) for the spawned driver)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_BLOCKER % (BARE_BOX_BLOCKED,))
    return folder
