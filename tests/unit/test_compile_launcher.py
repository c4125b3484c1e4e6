"""The bare-box launcher's CPU-side parts: imports without pydantic, packs kernel parameters the way a
kernel's parameter list lays them out, reads a staged folder. The launch itself is in tests/gpu."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

from solforge.compile import compile_candidate, samples, stage
from solforge.compile.launcher import _pack_args, _Params, launch_env, read_stage


def test_launcher_imports_without_pydantic():
    code = ("import sys; sys.modules['pydantic'] = None\n"
            "import solforge.compile.launcher as L\n"
            "print(L._axis_expr().evaluate('ceil_div(n, BLOCK)', {'n': 1000, 'BLOCK': 256}))\n"
            "assert 'pydantic' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"


def test_params_are_naturally_aligned():
    values = [ctypes.c_uint64(0x1111), ctypes.c_int32(-3), ctypes.c_uint64(0x2222), ctypes.c_float(1.5),
              ctypes.c_double(2.25)]
    layout, total = _pack_args(values)
    assert [off for off, _ in layout] == [0, 8, 16, 24, 32] and total == 40
    p = _Params(layout, total)
    base = ctypes.addressof(p.buf)
    assert [ptr - base for ptr in p.ptrs] == [0, 8, 16, 24, 32]
    assert ctypes.c_int32.from_address(base + 8).value == -3
    assert ctypes.c_double.from_address(base + 32).value == 2.25


def test_launch_env_params_win_and_bools_become_ints():
    env = launch_env({"n": 10, "BLOCK": 1}, {"eps": 1e-5, "flag": True}, {"BLOCK": 256, "USE": True,
                                                                        "T": "float"})
    # a bool scalar input is 0/1 too (the compiler's variant guards test it)
    assert env == {"n": 10, "BLOCK": 256, "eps": 1e-5, "flag": 1, "USE": 1}


def test_stage_round_trip(tmp_path):
    cand = samples.candidate(samples.SCALE_CU, "scale", args=["x", "y", "float32:2.0", "int32:n"],
                             grid=["ceil_div(n, 256)"], block=["256"])
    res = compile_candidate(cand, cache_dir=tmp_path / "c")
    stage(cand, res, tmp_path / "stage")
    cubins, manifest = read_stage(tmp_path / "stage")
    assert cubins == res.cubins
    assert manifest["entries"]["scale"]["symbol"] == "scale"
    assert json.loads((tmp_path / "stage" / "candidate.json").read_text())["launches"][0]["kernel"] == "scale"


def test_workspace_zero_bytes_default_all_clamped_and_checked():
    import pytest

    from solforge.compile.launcher import LaunchError, workspace_zero_bytes

    env = {"n": 10, "KEPT": 40}
    assert workspace_zero_bytes({"workspace": "n * 4"}, env, 40) == 40            # absent: all
    assert workspace_zero_bytes({"workspace_zero": None}, env, 40) == 40
    assert workspace_zero_bytes({"workspace_zero": "0"}, env, 40) == 0            # kernel keeps it
    assert workspace_zero_bytes({"workspace_zero": "KEPT / 4"}, env, 40) == 10    # a prefix
    assert workspace_zero_bytes({"workspace_zero": "n * 100"}, env, 40) == 40     # clamped
    for bad in ("0 - n", "n / 4"):
        with pytest.raises(LaunchError, match="workspace_zero"):
            workspace_zero_bytes({"workspace_zero": bad}, env, 40)


def test_candidate_workspace_zero_parsed_and_default_hash_unchanged():
    import hashlib

    import pytest

    from solforge.candidate import Candidate

    base = {"problem": "p", "sources": {"k.cu": "x"}, "workspace": "n * 4",
            "launches": [{"kernel": "k", "grid": ["1"], "block": ["32"], "args": ["workspace"]}]}
    plain, zero = Candidate(**base), Candidate(**base, workspace_zero=0)
    assert plain.workspace_zero is None and zero.workspace_zero == "0"
    # the default leaves the hash as it was before the field existed (stored attempts keep theirs)
    old = plain.model_dump(exclude={"notes", "problem", "workspace_zero"})
    for launch in old["launches"]:
        launch.pop("when")  # nor does a launch's `when` (None) change it
    assert plain.source_hash() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()
    assert zero.source_hash() != plain.source_hash()
    with pytest.raises(ValueError):
        Candidate(**base, workspace_zero="n +")


def test_a_strided_tensor_is_refused_not_read_as_row_major():
    """Quant 022's custom inputs give `w` as `w_scaled.T.to(fp8)`: shape [N, K], strides (1, N). A
    kernel reading it through its pointer as row-major [N, K] computes with the wrong elements; the
    launcher refuses the strided tensor with a message naming it (a CPU tensor: no GPU needed to
    resolve the arguments)."""
    import pytest
    import torch

    from solforge.compile.launcher import CandidateRuntime, LaunchError

    rt = object.__new__(CandidateRuntime)
    launch = {"kernel": "k", "args": ["x", "w", "int32:M"]}
    x = torch.zeros(8, 4)
    ok = rt._arg_values(launch, {}, {"x": x, "w": torch.zeros(8, 4)}, None, {"M": 8}, 0)
    assert ok[1] == 8 + 8 + 4  # two pointers and an int32
    with pytest.raises(LaunchError, match=r"tensor 'w' is not contiguous \(shape \(8, 4\), strides \(1, 8\)\)"):
        rt._arg_values(launch, {}, {"x": x, "w": torch.zeros(4, 8).T}, None, {"M": 8}, 0)
