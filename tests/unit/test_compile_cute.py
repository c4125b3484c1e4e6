"""CuTe DSL candidates compile to cubins on this (GPU-less) machine, with the kernel's real parameter
layout recorded for the bare-box launcher. One worker for the module: importing the DSL takes seconds."""

from __future__ import annotations

import pytest

pytest.importorskip("cutlass.cute")

from solforge.compile import compile_candidate, samples  # noqa: E402
from solforge.compile.elf import kernel_params, read_cubin  # noqa: E402
from solforge.compile.result import CompileStatus  # noqa: E402


def test_cute_kernel_compiles_to_an_sm90a_cubin_with_its_param_layout(tmp_path):
    res = compile_candidate(samples.cute_candidate(block=128), "sm_90a", cache_dir=tmp_path)
    assert res.status == CompileStatus.ok, res.log
    entry = res.entries["scale_cute"]
    cubin = res.cubins[entry.unit]
    info = read_cubin(cubin)
    assert (info.sm, info.arch) == (90, "sm_90a")
    assert entry.symbol in info.functions
    assert entry.block == [128, 1, 1]
    slots = [(p.kind, p.size, p.source) for p in entry.params]
    assert slots == [("ptr", 8, "x"), ("ptr", 8, "y"), ("f32", 4, "2.0"), ("i32", 4, "n")]
    kp, total = kernel_params(cubin, entry.symbol)
    assert [p.offset for p in entry.params] == [p.offset for p in kp] and entry.param_bytes == total
    assert res.compiler == "cutlass-dsl" and "4.8" in res.compiler_version
    again = compile_candidate(samples.cute_candidate(block=128), "sm_90a", cache_dir=tmp_path)
    assert again.cache_hit and again.cubins == res.cubins


def test_cute_error_names_the_agents_file_and_line(tmp_path):
    cand = samples.cute_candidate()
    cand["sources"]["kernel.py"] = samples.SCALE_CUTE.replace("mX[i] * s", "mX[i] * not_defined_here")
    res = compile_candidate(cand, cache_dir=tmp_path)
    assert res.status == CompileStatus.error
    line = next(i + 1 for i, t in enumerate(cand["sources"]["kernel.py"].splitlines()) if "not_defined_here" in t)
    assert f"kernel.py:{line}" in res.log and "not_defined_here" in res.log
    assert "solforge-cute-" not in res.log  # our temp folder is not in the agent's view


def test_cute_args_must_match_the_kernel(tmp_path):
    cand = samples.cute_candidate()
    cand["launches"][0]["args"] = ["x", "y", "float32:2.0", "int64:n"]  # kernel says Int32
    res = compile_candidate(cand, cache_dir=tmp_path)
    assert res.status == CompileStatus.error and "sizes" in res.log


def test_cute_block_must_be_constant(tmp_path):
    cand = samples.cute_candidate()
    cand["launches"][0]["block"] = ["n"]
    res = compile_candidate(cand, cache_dir=tmp_path)
    assert res.status == CompileStatus.invalid and "constant" in res.log
