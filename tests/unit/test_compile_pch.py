"""NVRTC precompiled headers: params as #define lines after the #include block, one PCH per include
block shared by every param set, cubins identical to the -D way, agent line numbers kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from solforge.compile import compile_candidate, pch, samples
from solforge.compile.result import CompileStatus


@pytest.fixture()
def cache(tmp_path):
    return tmp_path / "cache"


def _pch_files(cache: Path) -> list[Path]:
    return sorted((cache / "nvrtc_pch").glob("*/w*/*.pch"))


def test_one_pch_serves_every_param_set_with_the_same_cubins(cache):
    if not pch.supported():
        pytest.skip("NVRTC < 12.8 has no PCH")
    for vec in (2, 4, 8):
        cand = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": vec})
        with_pch = compile_candidate(cand, use_cache=False, cache_dir=cache)
        without = compile_candidate(cand, use_cache=False, cache_dir=cache, pch=False)
        assert with_pch.ok and without.ok, with_pch.log + without.log
        assert with_pch.cubins == without.cubins, vec
        assert f"-DVEC={vec}" in with_pch.options  # recorded as what it means
        # one include block, one option set: a single PCH file for all three VEC values
        assert len(_pch_files(cache)) == 1
    # a different option set is a different PCH; -lineinfo cubins still match the -D way
    cand = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4}, options=["-lineinfo"])
    a = compile_candidate(cand, use_cache=False, cache_dir=cache)
    b = compile_candidate(cand, use_cache=False, cache_dir=cache, pch=False)
    assert a.ok and a.cubins == b.cubins
    assert len(_pch_files(cache)) == 2


def test_errors_and_warnings_keep_the_agents_line_numbers(cache):
    src = ("#include <cuda_bf16.h>\n"                       # 1
           "// a comment\n"                                  # 2
           "#include <cuda/std/cstdint>\n"                   # 3
           "\n"                                              # 4
           'extern "C" __global__ void k(float* x) {\n'     # 5
           "    int unused_here = VEC;\n"                    # 6
           "    x[0] = not_declared * VEC;\n"                # 7
           "}\n")
    res = compile_candidate(samples.candidate(src, "k", params={"VEC": 4}, args=["x"], name="agent.cu"),
                            cache_dir=cache)
    assert res.status == CompileStatus.error
    assert 'agent.cu(7): error: identifier "not_declared" is undefined' in res.log
    assert "agent.cu(6): warning" in res.log
    assert "__solforge" not in res.log and "precompiled" not in res.log


def test_a_param_named_like_a_header_identifier_only_reaches_the_agents_code(cache):
    # as a -D option, T would have broken NVRTC's own builtin header (template<typename T>)
    src = ("#include <cuda_bf16.h>\n"
           'extern "C" __global__ void k(T* x) { x[0] = T(1.0f); }\n')
    res = compile_candidate(samples.candidate(src, "k", params={"T": "__nv_bfloat16"}, args=["x"]),
                            cache_dir=cache)
    assert res.ok, res.log


def test_header_config_macros_stay_command_line_defines(cache, tmp_path):
    folder = tmp_path / "tag"
    assert pch.injectable({"VEC": 4}, ["-DVEC=4"], folder)
    assert not pch.injectable({"NDEBUG": 1}, ["-DNDEBUG=1"], folder)       # tested by cuda/std headers
    assert not pch.injectable({"_MY": 1}, ["-D_MY=1"], folder)             # reserved name
    assert not pch.injectable({"X": "a/*b"}, ["-DX=a/*b"], folder)         # a #define would differ
    # and such a param still compiles (the -D way) and means the same
    src = ('#include <cuda/std/cstdint>\n#ifndef NDEBUG\n#error NDEBUG must be defined\n#endif\n'
           'extern "C" __global__ void k(float* x) { x[0] = NDEBUG; }\n')
    res = compile_candidate(samples.candidate(src, "k", params={"NDEBUG": 1}, args=["x"]), cache_dir=cache)
    assert res.ok, res.log


@pytest.mark.parametrize("src, local, lines", [
    ("#include <a.h>\n#include <b.h>\nint x;\n", (), 2),
    ("// c\n\n/* block\n   comment */\n#include <a.h>  // why\nint x;\n", (), 5),
    ('#include <a.h>\n#include "mine.cuh"\n#include <b.h>\n', ("mine.cuh",), 1),
    ("#include <mine.cuh>\n#include <b.h>\n", ("mine.cuh",), 0),   # the agent's header may use params
    ("#define X 1\n#include <a.h>\n", (), 0),
    ("#include <a.h> /* x */ int y;\n", (), 0),
    ("#include <a.h>\n#if 1\n#include <b.h>\n#endif\n", (), 1),
    ("int x;\n", (), 0),
])
def test_include_block(src, local, lines):
    assert pch.include_block_lines(src, set(local)) == lines


def test_rewrite_keeps_line_numbers():
    src = "#include <a.h>\n#include <b.h>\nline3\nline4"
    out = pch.rewrite(src, 2)
    assert out.splitlines()[:5] == ["#include <a.h>", "#include <b.h>", ";",
                                    f'#include "{pch.PARAMS_HEADER}"', "#line 3"]
    assert out.endswith("line3\nline4")
    assert pch.params_header(["-DVEC=4", "-DT=unsigned int", "-DE="]) == \
        "#define VEC 4\n#define T unsigned int\n#define E \n"
