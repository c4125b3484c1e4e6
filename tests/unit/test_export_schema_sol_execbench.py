"""Exported solution.json files against NVIDIA's SOL-ExecBench package itself (its pydantic models,
its CLI's loaders and its ProblemPackager, imported from a checkout of the fetched mirror at run
time, never copied into this repo): what `sol-execbench PROBLEM --solution solution.json` does on
a CPU before it needs nvcc and a GPU. One kernel per family (rmsnorm, activation, gemm with a
workspace), from the measured best params in kernels_cuda/<family>/best/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.export import ExportAttempt
from solforge.export.solution import ENTRY, write_solution

MIRROR = Path("/work/.mirror/NVIDIA+SOL-ExecBench/repo")
REPO = Path(__file__).resolve().parents[2]
CASES = [("L1", "069_rms_norm", "rmsnorm"), ("L1", "085_geglu_activation", "elementwise"),
         ("FlashInfer-Bench", "004_gemm_n128_k2048", "gemm")]


@pytest.fixture(scope="module")
def sxb(tmp_path_factory):
    """NVIDIA's sol_execbench package from the mirror (git archive of HEAD's src/)."""
    if not (MIRROR / "HEAD").exists():
        pytest.skip(f"SOL-ExecBench mirror not found at {MIRROR}")
    pytest.importorskip("click")
    pytest.importorskip("rich")
    root = tmp_path_factory.mktemp("sxb")
    arch = subprocess.run(["git", "-C", str(MIRROR), "archive", "HEAD", "src"], capture_output=True)
    if arch.returncode != 0:
        pytest.skip(f"cannot read the mirror: {arch.stderr.decode()[:200]}")
    subprocess.run(["tar", "-x", "-C", str(root)], input=arch.stdout, check=True)
    sys.path.insert(0, str(root / "src"))
    try:
        import sol_execbench.cli.main as cli_main
        from sol_execbench import BenchmarkConfig, Definition, Solution
        from sol_execbench.driver import ProblemPackager

        yield {"cli": cli_main, "Solution": Solution, "Definition": Definition,
               "Packager": ProblemPackager, "Config": BenchmarkConfig}
    finally:
        sys.path.remove(str(root / "src"))
        for m in [m for m in sys.modules if m == "sol_execbench" or m.startswith("sol_execbench.")]:
            del sys.modules[m]


def _export(tmp_path, sol_execbench_dir, subset, prob, famdir, mutate=None):
    from solforge.kernels import get_family
    from solforge.problem import load_problem_dir

    p = load_problem_dir(sol_execbench_dir / subset / prob, subset)
    best = json.loads((REPO / "kernels_cuda" / famdir / "best" / f"{prob}.json").read_text())
    cand = get_family(best["family"]).instantiate(p, best["params"])
    att = ExportAttempt(attempt_id="t" + cand.source_hash()[:15], problem_name=p.name,
                        definition=p.definition, candidate=cand)
    return write_solution(att, tmp_path / prob / "solution"), p, cand


def _problem_copy(p_dir: Path, dest: Path) -> Path:
    """definition.json + workload.jsonl; an empty hf_id dropped (their model refuses it)."""
    dest.mkdir(parents=True, exist_ok=True)
    d = json.loads((p_dir / "definition.json").read_text())
    if d.get("hf_id") == "":
        d.pop("hf_id")
    (dest / "definition.json").write_text(json.dumps(d))
    (dest / "workload.jsonl").write_text((p_dir / "workload.jsonl").read_text())
    return dest


@pytest.mark.parametrize("subset,prob,famdir", CASES, ids=[c[1] for c in CASES])
def test_nvidia_cli_loads_and_stages_the_export(sxb, tmp_path, sol_execbench_dir, subset, prob, famdir):
    out, p, cand = _export(tmp_path, sol_execbench_dir, subset, prob, famdir)
    cli = sxb["cli"]
    # their CLI's own loaders: the solution (sources re-read from disk when content is empty) and
    # the problem files
    sol = cli._load_solution(out)
    prob_dir = _problem_copy(sol_execbench_dir / subset / prob, tmp_path / prob / "problem")
    defn = cli._load_definition(prob_dir / "definition.json")
    wls = cli._load_workloads(prob_dir / "workload.jsonl")
    assert sol.definition == defn.name == p.name
    assert sol.get_entry_symbol() == "run" and sol.get_entry_path().name == ENTRY
    assert len(wls) == len(p.workloads)
    # DPS signature: every input of the definition, then every output, in order
    entry = sol.get_entry_source().content
    sig = entry.split("void run(", 1)[1].split(")", 1)[0]
    assert [a.split()[-1][2:] for a in sig.split(", ")] == list(defn.inputs) + list(defn.outputs)
    # their packager stages it as a C++ build whose builder (build_ext.py) compiles every top-level
    # .cu of the staging folder: our kernel units and the entry must all be there
    stage = tmp_path / prob / "stage"
    pk = sxb["Packager"](definition=defn, workloads=wls, solution=sol, config=sxb["Config"](),
                         output_dir=stage, keep_output_dir=True)
    assert pk._is_cpp
    cmd, artifact = pk.compile()
    assert cmd[-1] == "build_ext.py" and artifact.endswith("benchmark_kernel.so")
    staged = json.loads((stage / "solution.json").read_text())
    flags = staged["spec"]["compile_options"]["cuda_cflags"]
    # our own -gencode stops their packager from adding one for LOCAL (nvidia-smi) or B200
    assert flags.count("-gencode=arch=compute_90a,code=sm_90a") == 1
    assert not any("sm_100" in f for f in flags)
    assert staged["spec"]["compile_options"]["ld_flags"] == []
    top_cu = {q.name for q in stage.iterdir() if q.suffix == ".cu"}
    assert top_cu == {s.path for s in sol.sources if s.path.endswith(".cu")}
    assert ENTRY in top_cu and len(top_cu) >= 2
    for launch in cand.launches:
        assert any(f"&{launch.kernel}" in (stage / u).read_text() for u in top_cu - {ENTRY})
    if cand.workspace.strip() != "0":  # the gemm: scratch memory allocated per call by the entry
        assert "torch::zeros" in entry and "workspace.data_ptr()" in entry


def test_nvidia_models_reject_what_they_should(sxb, tmp_path, sol_execbench_dir):
    out, *_ = _export(tmp_path, sol_execbench_dir, "L1", "069_rms_norm", "rmsnorm")
    Solution = sxb["Solution"]
    good = json.loads(out.read_text())
    Solution(**good)
    bad_entry = json.loads(out.read_text())
    bad_entry["spec"]["entry_point"] = "missing.cu::run"
    with pytest.raises(Exception, match="not found in sources"):
        Solution(**bad_entry)
    bad_path = json.loads(out.read_text())
    bad_path["sources"][0]["path"] = "../escape.cu"
    with pytest.raises(Exception, match="traversal"):
        Solution(**bad_path)


def test_flashinfer_definitions_need_the_empty_hf_id_dropped(sxb, sol_execbench_dir):
    """The shared copy's FlashInfer-Bench definitions carry hf_id "", which NVIDIA's own model
    refuses; benchmarks/compare_sol_execbench.py drops that key before calling their CLI."""
    raw = json.loads((sol_execbench_dir / "FlashInfer-Bench" / "004_gemm_n128_k2048" /
                      "definition.json").read_text())
    if raw.get("hf_id") != "":
        pytest.skip("this copy of the dataset has no empty hf_id")
    with pytest.raises(Exception, match="hf_id"):
        sxb["Definition"](**raw)
    raw.pop("hf_id")
    assert sxb["Definition"](**raw).name == "004_gemm_n128_k2048"
