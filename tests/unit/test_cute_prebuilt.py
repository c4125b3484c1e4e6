"""A CuTe DSL candidate on a machine without the DSL (the GPU box): precompiled cubins.

The box case is made real here by a child Python whose `import cutlass` fails (a sitecustomize that
blocks the module, as if nvidia-cutlass-dsl were not installed); the compile worker it starts is that
same kind of process. The DSL compiles happen in this process, for real.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cutlass.cute")

from solforge.compile.api import compile_candidate  # noqa: E402
from solforge.compile.cute_prebuilt import ENV, prebuilt_key, write_prebuilt  # noqa: E402
from solforge.compile.launcher import LaunchError, read_stage, resolve_entries  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROBLEM = "FlashInfer-Bench/023_rmsnorm_h1536"
_BLOCK_DSL = '''
# as if nvidia-cutlass-dsl were not installed: its .pth puts its packages first on sys.path
import sys
sys.path[:] = [p for p in sys.path if "nvidia_cutlass_dsl" not in p]
'''


def _box(tmp: Path, code: str, prebuilt: Path | None = None, cache: Path | None = None) -> dict:
    """Run `code` (which sets OUT) in a child process where the CuTe DSL cannot be imported."""
    blocker = tmp / "nodsl"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(_BLOCK_DSL)
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), str(REPO)])
    env["SOLFORGE_CACHE_DIR"] = str(cache or tmp / "box-cache")
    if prebuilt is not None:
        env[ENV] = str(prebuilt)
    prog = ("import json, importlib.util\n"
            + textwrap.dedent(code) + "\nprint('@@' + json.dumps(OUT, default=str))\n")
    p = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.split("@@")[-1])


@pytest.fixture(scope="module")
def cpu_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cpu-cache")


@pytest.fixture(scope="module")
def rmsnorm(sol_execbench_dir, cpu_cache):
    """023's CuTe RMSNorm candidate, compiled here with the DSL (one real compile per module)."""
    from solforge.kernels import get_family
    from solforge.problem import load_problem_dir

    problem = load_problem_dir(sol_execbench_dir / PROBLEM)
    cand = get_family("cute_rmsnorm").instantiate(problem, {"THREADS": 64, "VEC": 8})
    res = compile_candidate(cand, "sm_90a", cache_dir=cpu_cache)
    assert res.ok, res.log
    return problem, cand, res


_COMPILE = """
from solforge.candidate import Candidate
from solforge.compile.api import compile_candidate
from solforge.compile.launcher import LaunchError, resolve_entries
cand = Candidate.model_validate_json(open({path!r}).read())
res = compile_candidate(cand, "sm_90a")
man = res.launch_manifest()
try:
    resolve_entries(cand.model_dump(), man, res.cubins)
    lookup = "ok"
except LaunchError as e:
    lookup = str(e)
OUT = {{"dsl": importlib.util.find_spec("cutlass") is not None, "status": res.status.value,
       "log": res.log, "hash": res.cubin_hash, "manifest": man, "lookup": lookup}}
"""


def _cand_file(tmp: Path, cand) -> str:
    f = tmp / "cand.json"
    f.write_text(cand.model_dump_json())
    return str(f)


def test_box_without_dsl_reproduces_the_missing_manifest_entry(rmsnorm, tmp_path):
    """What the first H200 export check hit (2026-11-30): the compile on a DSL-less box fails and leaves a
    manifest with no entries; the launcher's lookup then fails with "has no entry"."""
    _, cand, _ = rmsnorm
    out = _box(tmp_path, _COMPILE.format(path=_cand_file(tmp_path, cand)))
    assert out["dsl"] is False
    assert out["status"] == "error" and "not importable" in out["log"]
    assert out["manifest"]["entries"] == {}
    assert "kernel 'rmsnorm_cute' has no entry in the compile manifest" in out["lookup"]
    assert "no precompiled cubin" in out["log"] and prebuilt_key(cand.model_dump(), "sm_90a") in out["log"]


def test_precompiled_cubin_compiles_stages_and_resolves_without_dsl(rmsnorm, tmp_path):
    problem, cand, res = rmsnorm
    root = tmp_path / "prebuilt"
    write_prebuilt(root, cand, res)
    out = _box(tmp_path, _COMPILE.format(path=_cand_file(tmp_path, cand)), prebuilt=root)
    assert out["dsl"] is False
    assert out["status"] == "ok", out["log"]
    assert "precompiled CuTe DSL cubin" in out["log"]
    assert out["hash"] == res.cubin_hash  # the very cubin compiled here
    assert out["lookup"] == "ok"
    entry = out["manifest"]["entries"]["rmsnorm_cute"]
    assert entry == res.entries["rmsnorm_cute"].model_dump()
    # what the driver loads: a stage written from the box's compile result
    staged = _box(tmp_path, f"""
from pathlib import Path
from solforge.candidate import Candidate
from solforge.compile.api import compile_candidate
from solforge.compile.launcher import read_stage, resolve_entries
from solforge.evaluate.runner import stage_candidate
from solforge.problem import load_problem_dir
cand = Candidate.model_validate_json(open({_cand_file(tmp_path, cand)!r}).read())
res = compile_candidate(cand, "sm_90a")
stage = stage_candidate(Path("stage"), load_problem_dir({problem.source!r}), candidate=cand,
                        compile_result=res)
cubins, man = read_stage(stage)
OUT = sorted(resolve_entries(json.loads((stage / "candidate.json").read_text()), man, cubins))
""", prebuilt=root)
    assert staged == ["rmsnorm_cute"]


def test_every_dsl_compile_lands_in_the_cache_dirs_prebuilt_folder(rmsnorm, cpu_cache, tmp_path):
    """Carrying <cache_dir>/cute_prebuilt is enough for the box: no separate precompile step."""
    _, cand, res = rmsnorm
    folder = cpu_cache / "cute_prebuilt" / prebuilt_key(cand.model_dump(), "sm_90a")
    assert json.loads((folder / "prebuilt.json").read_text())["cubin_hash"] == res.cubin_hash
    out = _box(tmp_path, _COMPILE.format(path=_cand_file(tmp_path, cand)),
               prebuilt=cpu_cache / "cute_prebuilt")
    assert out["status"] == "ok" and out["hash"] == res.cubin_hash
    # the box's own compile of it is not written back as if it were a DSL compile
    assert not (tmp_path / "box-cache" / "cute_prebuilt").exists()


def test_a_miss_is_not_cached_so_a_later_carried_folder_is_found(rmsnorm, tmp_path):
    _, cand, res = rmsnorm
    root, cache = tmp_path / "later", tmp_path / "cache"
    code = _COMPILE.format(path=_cand_file(tmp_path, cand))
    assert _box(tmp_path, code, prebuilt=root, cache=cache)["status"] == "error"
    write_prebuilt(root, cand, res)
    assert _box(tmp_path, code, prebuilt=root, cache=cache)["status"] == "ok"


def test_a_damaged_or_foreign_prebuilt_is_refused(rmsnorm, tmp_path):
    _, cand, res = rmsnorm
    folder = write_prebuilt(tmp_path / "pb", cand, res)
    cubin = next(folder.glob("*.cubin"))
    blob = bytearray(cubin.read_bytes())
    blob[-1] ^= 0xFF
    cubin.write_bytes(bytes(blob))
    out = _box(tmp_path, _COMPILE.format(path=_cand_file(tmp_path, cand)), prebuilt=tmp_path / "pb")
    assert out["status"] == "error" and "sha256" in out["log"]


def test_key_follows_what_shapes_the_cubin(rmsnorm):
    _, cand, _ = rmsnorm
    d = cand.model_dump()
    k = prebuilt_key(d, "sm_90a")
    assert prebuilt_key({**d, "notes": "x", "problem": "other"}, "sm_90a") == k
    assert prebuilt_key(d, "sm_100a") != k
    assert prebuilt_key({**d, "params": {**d["params"], "THREADS": 128}}, "sm_90a") != k
    bad = json.loads(json.dumps(d))
    bad["launches"][0]["args"][3] = "int64:batch_size"
    assert prebuilt_key(bad, "sm_90a") != k
    with pytest.raises(ValueError, match="CuTe"):
        write_prebuilt("/nonexistent", {**d, "language": "cuda"}, None)


def test_export_check_of_a_cute_attempt_resolves_on_a_box_without_dsl(rmsnorm, sol_execbench_dir,
                                                                      tmp_path):
    """#10: solforge.export.gpu_check prepare writes the CuTe cubin where the box's compile finds
    it; the evaluator-side runtime then has the manifest entry, and its cubin is the op package's."""
    problem, cand, _ = rmsnorm
    from solforge.export import gpu_check as mod
    from solforge.export import ExportAttempt

    att = ExportAttempt(attempt_id="0123456789abcdef", problem_name=problem.name,
                        definition=problem.definition, candidate=cand)
    d = tmp_path / "exp"
    entry = mod.prepare_one(att, d / problem.name, sol_execbench_dir)
    assert entry["language"] == "cute" and not entry["solution"] and (d / problem.name / "prebuilt").is_dir()
    op_cubins, op_manifest = read_stage(d / problem.name / "op" / entry["package"])
    resolve_entries(cand.model_dump(), op_manifest, op_cubins)  # the package itself was fine
    check = """
import solforge.export.gpu_check as m
from pathlib import Path
from solforge.candidate import Candidate
cand = Candidate.model_validate_json(open({path!r}).read())
{setup}
try:
    cubins, man = m.evaluator_parts(cand)
    OUT = {{"hash": man["cubin_hash"], "entries": sorted(man["entries"])}}
except RuntimeError as e:
    OUT = {{"error": str(e)}}
"""
    path = str(d / problem.name / "candidate.json")
    before = _box(tmp_path, check.format(path=path, setup=""))
    assert "no precompiled cubin" in before["error"]
    after = _box(tmp_path, check.format(path=path, setup=f"m.use_prebuilt(Path({str(d)!r}))"))
    assert after == {"hash": op_manifest["cubin_hash"], "entries": ["rmsnorm_cute"]}
    with pytest.raises(LaunchError, match="no entries at all"):
        resolve_entries(cand.model_dump(), {"entries": {}, "cubins": {}})
