"""What a new user meets first, without a GPU: the example candidate compiles (real NVRTC) and is right
(run on the CPU through the host emulator, against its problem's reference); saved best/ results are
candidates `compile` accepts; GPU commands refuse in one line and write nothing; `--db/--json` go
before or after every sub-command; unknown GPU profiles are refused; `doctor` prints one line per check."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cuda_host_emu import HAVE_GXX, bf16_bits, bf16_to_f32, build_and_run, defines, kernel_text
from solforge.candidate import eval_expr, launch_env
from solforge.cli import build_parser, main
from solforge.cli.candidate_file import load_candidate
from solforge.doctor import gpu_problem
from solforge.errors import InputError
from solforge.problem import load_problem_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rmsnorm"
NO_GPU = gpu_problem() is not None


def test_example_candidate_compiles_as_is(capsys):
    assert main(["--json", "compile", str(EXAMPLE / "candidate.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and "rmsnorm_kernel" in out["entries"] and out["cubin_hash"]


@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_example_candidate_matches_its_reference_on_cpu(tmp_path):
    problem = load_problem_dir(EXAMPLE / "problem")
    cand = load_candidate(EXAMPLE / "candidate.json")
    assert cand.problem == problem.name
    rows, hidden = 37, 256  # a partial last block: rows past the end must not be written
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(rows, hidden, generator=gen).to(torch.bfloat16)
    w = (torch.rand(hidden, generator=gen) + 0.5).to(torch.bfloat16)
    ns: dict = {}
    exec(problem.definition.reference, ns)
    want = ns["run"](x, w).float().numpy()
    launch = cand.launches[0]
    env = launch_env({"batch_size": rows, "hidden_size": hidden}, {}, cand.params)
    main_cpp = f"""
int main() {{
    FILE* f = std::fopen("in.bin", "rb");
    auto x = emu_read<__nv_bfloat16>(f, {rows * hidden});
    auto w = emu_read<__nv_bfloat16>(f, {hidden});
    std::fclose(f);
    std::vector<__nv_bfloat16> o({rows * hidden});
    emu_launch({eval_expr(launch.grid[0], env)}, {eval_expr(launch.block[0], env)},
               [&] {{ {launch.kernel}(x.data(), w.data(), o.data(), {rows}, 1e-6f); }});
    f = std::fopen("out.bin", "wb"); std::fwrite(o.data(), 2, o.size(), f); std::fclose(f);
}}
"""
    src = defines(cand.params) + kernel_text(cand.sources["rmsnorm.cu"])
    raw = build_and_run(tmp_path, src, main_cpp,
                        [bf16_bits(x.float().numpy()), bf16_bits(w.float().numpy())], rows * hidden * 2)
    got = bf16_to_f32(np.frombuffer(raw, dtype=np.uint16)).reshape(rows, hidden)
    np.testing.assert_allclose(got, want, rtol=8e-3, atol=1e-6)


def test_saved_best_results_are_candidates():
    files = sorted(glob.glob(str(REPO / "kernels_cuda" / "*" / "best" / "*.json")))
    assert files
    for f in files:
        cand = load_candidate(f)
        assert cand.sources and cand.launches, f


def test_candidate_file_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "best.json"
    bad.write_text(json.dumps({"problem": "p", "candidate": {"problem": "p", "language": "cuda"}}))
    with pytest.raises(InputError) as e:
        load_candidate(bad)
    assert "candidate.sources" in str(e.value) and "best.json" in str(e.value)
    assert main(["compile", str(tmp_path / "missing.json")]) == 2


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("argv", [
    ["evaluate", str(EXAMPLE / "problem"), str(EXAMPLE / "candidate.json")],
    ["replay", "abc123"],
    ["optimize", "--gpus", "0", "--problems", str(EXAMPLE / "problem")],
], ids=["evaluate", "replay", "optimize"])
def test_gpu_commands_refuse_without_gpu_and_write_nothing(tmp_path, capsys, argv):
    db = tmp_path / "s.duckdb"
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a CUDA GPU" in err[0] and "doctor" in err[0]
    assert not db.exists()


def test_db_and_json_after_every_subcommand():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert "--db" in p._option_string_actions and "--json" in p._option_string_actions, name
    after = parser.parse_args(["report", "--db", "a.duckdb", "--json"])
    before = parser.parse_args(["--db", "a.duckdb", "--json", "report"])
    assert (after.db, after.json) == (before.db, before.json) == ("a.duckdb", True)
    plain = parser.parse_args(["sol"])
    assert plain.db is None and plain.json is False


def test_unknown_gpu_profile_is_refused(tmp_path, capsys):
    assert main(["optimize", "--gpu-profile", "h300", "--gpus", "", "--db", str(tmp_path / "s.duckdb"),
                 "--problems", str(EXAMPLE / "problem")]) == 2
    assert "unknown GPU profile 'h300'" in capsys.readouterr().err
    assert main(["sol", "--gpu", "h300", "--root", str(EXAMPLE)]) == 2


def test_doctor_one_line_per_check(tmp_path, capsys):
    rc = main(["doctor", "--db", str(tmp_path / "none.duckdb")])
    lines = capsys.readouterr().out.strip().splitlines()
    names = [ln.split()[0] for ln in lines[:-1]]
    assert names == ["GPU", "driver", "torch", "NVRTC", "CuTe", "store", "Prefect"]
    assert all((" ok " in ln) or (" missing " in ln) for ln in lines[:-1])
    assert rc == 0  # NVRTC is installed: the CPU side works
    assert main(["doctor", "--json"]) in (0, 1)
    checks = json.loads(capsys.readouterr().out)
    assert {c["name"] for c in checks} >= {"GPU", "NVRTC", "store"}


def test_replay_resolves_an_attempt_prefix(tmp_path):
    from solforge.cli.evaluate_cmds import resolve_attempt
    from solforge.store import Store

    s = Store(tmp_path / "s.duckdb")
    a = s.create_attempt("p", agent="cli", language="cuda", candidate={"x": 1}, id="abc123" + "0" * 26)
    s.create_attempt("p", agent="cli", language="cuda", candidate={"x": 2}, id="abd" + "0" * 29)
    assert resolve_attempt(s, "abc1") == a and resolve_attempt(s, a) == a
    with pytest.raises(InputError, match="ambiguous"):
        resolve_attempt(s, "ab")
    with pytest.raises(InputError, match="no attempt"):
        resolve_attempt(s, "zz")


@pytest.mark.parametrize("kind", ["empty", "compiled-only"])
def test_report_of_an_unscored_store(tmp_path, capsys, kind):
    """Nothing scored (no attempts, or attempts that only compiled: every numeric column all NULL,
    which polars reads as dtype Null without pyarrow) renders, in the terminal and as HTML."""
    from solforge.store import Store

    s = Store(tmp_path / "s.duckdb")
    if kind == "compiled-only":
        run = s.create_run(kind="optimize")
        for _ in range(2):
            s.mark_attempt(s.create_attempt("p", run_id=run, agent="offline", language="cuda",
                                            candidate={"x": 1}), "compiled")
    html = tmp_path / "r.html"
    assert main(["report", "--db", str(s.path), "--html", str(html)]) == 0
    assert "nothing scored yet" in capsys.readouterr().err
    assert "Nothing scored yet" in html.read_text()
    assert main(["--json", "report", "--db", str(s.path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(p["best_speedup"] is None for p in out["problems"])


def test_doctor_and_the_gpu_refusal_need_no_orchestration_packages(tmp_path):
    """On a bare GPU box (no rich, duckdb, polars, prefect) `doctor` and `--json evaluate` still run."""
    import subprocess
    import sys

    prog = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('rich', 'duckdb', 'polars', 'prefect'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from solforge.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", prog, "doctor"], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and "NVRTC" in r.stdout, r.stderr[-2000:]
    if NO_GPU:
        r = subprocess.run([sys.executable, "-c", prog, "--json", "evaluate", str(EXAMPLE / "problem"),
                            str(EXAMPLE / "candidate.json")], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
        assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr and "Traceback" not in r.stderr
