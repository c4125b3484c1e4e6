"""NVRTC compile: real compiles (no GPU needed), the cache, errors with line numbers, options, timeouts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from solforge.compile import compile_candidate, samples
from solforge.compile.elf import ElfError, read_cubin
from solforge.compile.result import CompileResult, CompileStatus


@pytest.fixture()
def cache(tmp_path):
    return tmp_path / "cache"


def test_plain_kernel_compiles_to_sm90a_cubin(cache):
    cand = samples.candidate(samples.SCALE_CU, "scale", args=["x", "y", "float32:2.0", "int32:n"])
    res = compile_candidate(cand, "sm_90a", cache_dir=cache)
    assert res.status == CompileStatus.ok, res.log
    info = read_cubin(res.cubins["kernel.cu"])
    assert (info.sm, info.arch) == (90, "sm_90a")
    assert "scale" in info.functions
    assert res.entries["scale"].symbol == "scale" and res.entries["scale"].unit == "kernel.cu"
    assert res.cubin_hash == CompileResult.hash_cubins(res.cubins)
    assert res.compiler == "nvrtc" and "13." in res.compiler_version
    assert not any("/usr/local/cuda" in o for o in res.options)


def test_params_become_defines(cache):
    src = '#if BLOCK != 128\n#error BLOCK is wrong\n#endif\nextern "C" __global__ void k(float* x) { x[0] = SCALE; }'
    ok = compile_candidate(samples.candidate(src, "k", params={"BLOCK": 128, "SCALE": 1.5}, args=["x"]),
                           cache_dir=cache)
    assert ok.ok, ok.log
    assert "-DBLOCK=128" in ok.options and "-DSCALE=1.5" in ok.options
    bad = compile_candidate(samples.candidate(src, "k", params={"BLOCK": 64, "SCALE": 1.5}, args=["x"]),
                            cache_dir=cache)
    assert bad.status == CompileStatus.error and "BLOCK is wrong" in bad.log


def test_error_keeps_file_name_and_line_number(cache):
    src = "// one\n// two\n// three\nextern \"C\" __global__ void k(float* x) {\n    x[0] = not_declared;\n}\n"
    res = compile_candidate(samples.candidate(src, "k", name="my_rmsnorm.cu"), cache_dir=cache)
    assert res.status == CompileStatus.error
    assert 'my_rmsnorm.cu(5): error: identifier "not_declared" is undefined' in res.log
    assert res.cubins == {} and res.cubin_hash == ""


def test_cache_hit_is_a_lookup_with_same_cubins(cache):
    cand = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4})
    first = compile_candidate(cand, cache_dir=cache)
    assert first.ok and not first.cache_hit, first.log
    second = compile_candidate(cand, cache_dir=cache)
    assert second.cache_hit and second.cubins == first.cubins and second.cubin_hash == first.cubin_hash
    assert second.compile_seconds == first.compile_seconds
    # a different arch or param is a different key
    other = compile_candidate({**cand, "params": {"VEC": 2}}, cache_dir=cache)
    assert not other.cache_hit and other.cubin_hash != first.cubin_hash


def test_damaged_cache_entry_is_a_miss(cache):
    cand = samples.candidate(samples.SCALE_CU, "scale")
    first = compile_candidate(cand, cache_dir=cache)
    cubin_file = next((cache / "compile").rglob("*.cubin"))
    cubin_file.write_bytes(b"garbage")
    again = compile_candidate(cand, cache_dir=cache)
    assert not again.cache_hit and again.cubins == first.cubins


def test_units_headers_and_template_kernels(cache):
    cand = {
        "problem": "p", "sources": {
            "common.cuh": "template <int N> __device__ float times(float x) { return x * N; }\n",
            "a.cu": '#include "common.cuh"\nextern "C" __global__ void ka(float* x) { x[0] = times<2>(x[0]); }\n',
            "b.cu": '#include "common.cuh"\ntemplate <int N> __global__ void kb(float* x) { x[0] = times<N>(x[0]); }\n'
                    "template __global__ void kb<3>(float*);\n",
        },
        "launches": [{"kernel": "ka", "grid": ["1"], "block": ["1"], "args": ["x"]},
                     {"kernel": "kb<3>", "grid": ["1"], "block": ["1"], "args": ["x"]}],
    }
    res = compile_candidate(cand, cache_dir=cache)
    assert res.ok, res.log
    assert sorted(res.cubins) == ["a.cu", "b.cu"]
    assert res.entries["ka"].unit == "a.cu"
    kb = res.entries["kb<3>"]
    assert kb.unit == "b.cu" and kb.symbol.startswith("_Z") and kb.symbol in read_cubin(res.cubins["b.cu"]).functions


def test_wrong_launch_args_are_not_answered_from_the_cache(cache):
    good = samples.candidate(samples.SCALE_CU, "scale")
    assert compile_candidate(good, cache_dir=cache).ok
    short = samples.candidate(samples.SCALE_CU, "scale", args=["x", "y", "int32:n"])
    res = compile_candidate(short, cache_dir=cache)
    assert not res.cache_hit and res.status == CompileStatus.error, res.log


def test_launch_args_must_match_the_kernel_parameters(cache):
    short = samples.candidate(samples.SCALE_CU, "scale", args=["x", "y", "int32:n"])
    res = compile_candidate(short, cache_dir=cache)
    assert res.status == CompileStatus.error
    assert "takes 4 parameter(s) of sizes [8, 8, 4, 4]" in res.log and "[8, 8, 4]" in res.log
    wide = samples.candidate(samples.SCALE_CU, "scale", args=["x", "y", "float64:2.0", "int32:n"])
    assert compile_candidate(wide, cache_dir=cache).status == CompileStatus.error


def test_missing_kernel_is_an_error(cache):
    res = compile_candidate(samples.candidate(samples.SCALE_CU, "no_such_kernel"), cache_dir=cache)
    assert res.status == CompileStatus.error and "no_such_kernel" in res.log


@pytest.mark.parametrize("option", ["-I/usr/local/cuda/include", "--include-path=/tmp", "-ptx",
                                    "--gpu-architecture=sm_80", "--pre-include=/etc/passwd"])
def test_unsafe_options_are_invalid(cache, option):
    res = compile_candidate(samples.candidate(samples.SCALE_CU, "scale", options=[option]), cache_dir=cache)
    assert res.status == CompileStatus.invalid and "not allowed" in res.log


def test_allowed_options_pass_through(cache):
    res = compile_candidate(samples.candidate(samples.SCALE_CU, "scale",
                                              options=["-lineinfo", "--use_fast_math", "-std=c++20"]),
                            cache_dir=cache)
    assert res.ok, res.log
    assert "-std=c++20" in res.options and "-std=c++17" not in res.options


def test_unknown_arch_is_invalid(cache):
    res = compile_candidate(samples.candidate(samples.SCALE_CU, "scale"), "sm_42", cache_dir=cache)
    assert res.status == CompileStatus.invalid and "sm_42" in res.log


def test_timeout_kills_the_compiler_and_the_next_compile_works(cache):
    # thousands of template instances: minutes of ptxas work, far past the limit
    body = ("template <int N> __global__ void t(float* x) { float a = x[threadIdx.x];"
            " for (int i = 0; i < N % 13 + 3; ++i) a = sinf(a * N) + cosf(a); x[N % 64] = a; }\n")
    src = body + "".join(f"template __global__ void t<{i}>(float*);\n" for i in range(3000)) + \
        'extern "C" __global__ void k(float* x) { x[0] = 1; }\n'
    t0 = time.perf_counter()
    res = compile_candidate(samples.candidate(src, "k", options=["-w"], args=["x"]), cache_dir=cache,
                            timeout_s=0.5)
    assert res.status == CompileStatus.timeout and time.perf_counter() - t0 < 5
    assert compile_candidate(samples.candidate(samples.SCALE_CU, "scale"), cache_dir=cache).ok


def test_status_values_match_the_store():
    from solforge.store.status import CompileStatus as StoreStatus

    assert {s.value for s in CompileStatus} == {s.value for s in StoreStatus}


def test_to_row_has_the_store_columns(cache):
    res = compile_candidate(samples.candidate(samples.SCALE_CU, "scale"), cache_dir=cache)
    row = res.to_row("attempt-1")
    assert row["compiler"].startswith("nvrtc 13.") and row["arch"] == "sm_90a" and row["status"] == "ok"
    assert {"attempt_id", "status", "log", "seconds", "cubin_hash", "compiler", "arch", "cache_hit"} <= set(row)


def test_read_cubin_rejects_ptx():
    with pytest.raises(ElfError):
        read_cubin(b"//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90a\n" + b" " * 64)


def test_a_worker_whose_caller_is_gone_removes_its_private_folder():
    """A caller killed at a deadline runs no cleanup: the worker, finding its input closed, removes
    the solforge-compile-* folder it runs in (they piled up in the temp dir, one per killed caller)."""
    from solforge.compile import worker

    w = worker.Worker("nvrtc")
    home = Path(w.home)
    assert home.is_dir() and home.name.startswith("solforge-compile-nvrtc-")
    w.proc.stdin.close()          # what the kernel does to the pipe when the caller dies
    w.proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while home.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not home.exists()
