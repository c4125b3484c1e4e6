"""Export as a SOL-ExecBench solution: schema (ours and, at run time, NVIDIA's own model from the
fetched mirror), the kernel units still compile with NVRTC, and the C++ expressions mean what the
Python evaluator means (compiled with g++ and run)."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.candidate import Candidate
from solforge.compile.api import compile_candidate
from solforge.export import load_attempt
from solforge.export.cexpr import CPP_HELPERS, to_cpp
from solforge.export.solution import ENTRY, write_solution
from solforge.problem import axis_expr
from solforge.problem.solution import Solution
from solforge.store import Store

MIRROR = Path("/work/.mirror/NVIDIA+SOL-ExecBench/repo")
PROBLEM = "L1/069_rms_norm"


def attempt_store(tmp_path, sol_execbench_dir, name="export.duckdb"):
    """A store with the real 069_rms_norm problem and one attempt made by the rmsnorm family."""
    from solforge.kernels import get_family
    from solforge.problem import load_problem_dir
    from solforge.store.problems import upsert_problems

    p = load_problem_dir(sol_execbench_dir / PROBLEM, "L1")
    s = Store(tmp_path / name)
    upsert_problems(s, [p])
    fam = get_family("rmsnorm")
    cand = fam.instantiate(p, fam.default_params(p))
    aid = s.create_attempt(p.name, agent="offline", candidate=cand)
    return s, aid, p, cand


@pytest.fixture(scope="module")
def exported(tmp_path_factory, sol_execbench_dir):
    tmp = tmp_path_factory.mktemp("exp")
    s, aid, p, cand = attempt_store(tmp, sol_execbench_dir)
    out = write_solution(load_attempt(s, aid[:10]), tmp / "sol")
    return out, p, cand, aid


def test_solution_json_follows_the_schema(exported):
    out, p, cand, aid = exported
    data = json.loads(out.read_text())
    sol = Solution.model_validate(data)
    assert sol.definition == p.name and sol.spec.entry_point == f"{ENTRY}::run"
    assert sol.spec.languages[0].value == "cuda_cpp" and sol.spec.binding == "torch"
    assert sol.spec.destination_passing_style is True
    assert [h.value for h in sol.spec.target_hardware] == ["LOCAL"]
    assert any("-gencode=arch=compute_90a,code=sm_90a" == f for f in sol.spec.compile_options.cuda_cflags)
    entry = sol.entry_source().content
    # DPS: inputs in definition order, then outputs
    names = list(p.definition.inputs) + list(p.definition.outputs)
    sig = entry.split("void run(", 1)[1].split(")", 1)[0]
    assert [a.split()[-1][2:] for a in sig.split(", ")] == names
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in entry
    for launch in cand.launches:
        assert launch.kernel in entry
    # every source is also on disk next to solution.json
    for s in sol.sources:
        assert (out.parent / s.path).read_text() == s.content


def test_exported_units_still_compile_with_nvrtc(exported):
    out, p, cand, _ = exported
    sol = Solution.model_validate(json.loads(out.read_text()))
    units = {s.path: s.content for s in sol.sources if s.path != ENTRY}
    # params are #defines in the files now; the host launchers are hidden from NVRTC
    check = Candidate(problem=p.name, sources=units, launches=cand.launches, params={})
    res = compile_candidate(check, use_cache=False)
    assert res.ok, res.log
    for unit, content in units.items():
        assert "solforge_launch_0" in content or unit.endswith((".cuh", ".h"))


def test_official_model_accepts_it(exported, tmp_path):
    """NVIDIA's own Solution model, read from the fetched mirror at run time (never copied here)."""
    if not (MIRROR / "HEAD").exists() and not (MIRROR / ".git").exists():
        pytest.skip(f"SOL-ExecBench mirror not found at {MIRROR}")
    pkg = tmp_path / "sebench_models"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for f in ("solution.py", "base_model.py"):
        text = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:src/sol_execbench/core/data/{f}"],
                              capture_output=True, text=True)
        if text.returncode != 0:
            pytest.skip(f"mirror has no {f}: {text.stderr.strip()}")
        (pkg / f).write_text(text.stdout)
    sys.path.insert(0, str(tmp_path))
    try:
        mod = importlib.import_module("sebench_models.solution")
        out, *_ = exported
        sol = mod.Solution(**json.loads(out.read_text()))
        assert sol.get_entry_symbol() == "run" and sol.get_entry_source() is not None
        bad = json.loads(out.read_text())
        bad["spec"]["target_hardware"] = ["H200"]  # not a value their schema knows
        with pytest.raises(Exception):
            mod.Solution(**bad)
    finally:
        sys.path.remove(str(tmp_path))
        for m in [m for m in sys.modules if m.startswith("sebench_models")]:
            del sys.modules[m]


def test_load_attempt_errors(tmp_path, sol_execbench_dir):
    from solforge.export import ExportError

    s, aid, *_ = attempt_store(tmp_path, sol_execbench_dir, "err.duckdb")
    with pytest.raises(ExportError, match="no attempt"):
        load_attempt(s, "zzz")
    with pytest.raises(ExportError, match="no correct"):
        load_attempt(s, "best:069_rms_norm")


EXPRS = ["ceil_div(a, 4)", "a // 3 + b % 5", "-a // 4", "-a % 4", "min(a, b, 7) * 2", "max(a, b)",
         "a / 4", "2 ** 5 + abs(-b)", "a > 3 and b or 9", "not a", "(a < b < 100) * 5",
         "ceil_div(a * b, 128) * 128 + a % b"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cpp_expressions_match_python(tmp_path):
    envs = [{"a": 7, "b": 3}, {"a": 130, "b": 64}, {"a": 0, "b": 1}]
    lines = []
    for env in envs:
        for e in EXPRS:
            c = to_cpp(e, lambda n, env=env: repr(float(env[n])))
            lines.append(f'  printf("%.17g\\n", (double)({c}));')
    src = "#include <cmath>\n#include <cstdio>\n" + CPP_HELPERS + "int main() {\n" + "\n".join(lines) + "\n}\n"
    (tmp_path / "e.cpp").write_text(src)
    subprocess.run(["g++", "-O0", "-o", str(tmp_path / "e"), str(tmp_path / "e.cpp")], check=True)
    got = [float(x) for x in subprocess.run([str(tmp_path / "e")], capture_output=True, text=True,
                                            check=True).stdout.split()]
    want = [float(axis_expr.evaluate(e, env)) for env in envs for e in EXPRS]
    assert got == pytest.approx(want)


def _cuda_include() -> Path | None:
    import os

    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if root and (Path(root) / "include/cuda.h").exists():
            return Path(root) / "include"
    return None


@pytest.mark.skipif(shutil.which("g++") is None or _cuda_include() is None,
                    reason="needs g++ and the CUDA toolkit headers (cuda.h)")
def test_a_tma_candidate_exports_and_its_entry_compiles(tmp_path, sol_execbench_dir):
    """A `tmap:` launch argument becomes a CUtensorMap encoded on the host by the entry (the driver's
    cuTensorMapEncodeTiled, found through the runtime): the entry, with torch's and CUDA's headers,
    passes g++ (syntax and types; the CPU torch wheel lacks one generated CUDA header, stubbed)."""
    from solforge.kernels import get_family
    from solforge.problem import load_problem_dir
    from solforge.store.problems import upsert_problems

    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/004_gemm_n128_k2048", "FlashInfer-Bench")
    fam = get_family("gemm_wgmma")
    cand = fam.instantiate(p, dict(fam.default_params(p), TMA=1))
    assert any(a.startswith("tmap:") for l in cand.launches for a in l.args)
    s = Store(tmp_path / "t.duckdb")
    upsert_problems(s, [p])
    aid = s.create_attempt(p.name, agent="offline", candidate=cand)
    out = write_solution(load_attempt(s, aid[:10]), tmp_path / "sol")
    entry = (out.parent / ENTRY).read_text()
    assert 'sf_tmap(t_A, 64.0, 64.0, CU_TENSOR_MAP_SWIZZLE_128B, "A")' in entry
    assert 'sf_tmap(t_B, 64.0, 64.0, CU_TENSOR_MAP_SWIZZLE_128B, "B")' in entry
    _entry_passes_gxx(out.parent / ENTRY, tmp_path)


def _entry_passes_gxx(entry, tmp_path) -> None:
    """g++ -fsyntax-only on an exported entry, with torch's and CUDA's headers (the CPU torch wheel
    lacks one generated CUDA header: stubbed)."""
    import sysconfig

    import torch

    stub = tmp_path / "stub/c10/cuda/impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
    ti = Path(torch.__file__).parent / "include"
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", f"-I{tmp_path / 'stub'}",
                        f"-I{ti}", f"-I{ti / 'torch/csrc/api/include'}", f"-I{_cuda_include()}",
                        f"-I{sysconfig.get_paths()['include']}", "-DTORCH_EXTENSION_NAME=x",
                        str(entry)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_launch_with_when_is_made_only_where_it_holds(tmp_path, sol_execbench_dir):
    """A launch's `when` (a compiler plan's variant) becomes an `if` around that launch in the
    entry, over the same axis values the other expressions read."""
    from solforge.store.problems import upsert_problems

    s, _, p, cand = attempt_store(tmp_path, sol_execbench_dir)
    axis = sorted(p.definition.var_axes)[0]
    launch = cand.launches[0].model_copy(update={"when": f"{axis} > 1 and {axis} != 7"})
    guarded = cand.model_copy(update={"launches": [launch]})
    upsert_problems(s, [p])
    aid = s.create_attempt(p.name, agent="offline", candidate=guarded)
    out = write_solution(load_attempt(s, aid[:10]), tmp_path / "sol")
    entry = (out.parent / ENTRY).read_text()
    assert "  if (sf_and(" in entry and "!= 0.0) {  // launches[0]" in entry
    _entry_passes_gxx(out.parent / ENTRY, tmp_path)
