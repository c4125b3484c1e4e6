"""Tensor-map launch args ("tmap:TENSOR:BOX_ROWS,BOX_COLS:SWIZZLE"), CPU side: the candidate format
parses them, the compile-time arg check counts them as 128-byte parameters, the launcher packs them
at the offsets ptxas chose (read from the cubin: a 64-byte aligned struct parameter is placed by its
constant-bank address, not by its offset from 0), and tensor_map_bytes calls cuTensorMapEncodeTiled
with the tensor's dims/pitch and the box (a fake driver here; the encode itself needs the GPU box)."""

from __future__ import annotations

import ctypes
import types

import pytest

from solforge.candidate import Candidate, parse_arg
from solforge.compile import launcher as L
from solforge.compile.elf import kernel_params
from solforge.compile.nvrtc_backend import check_launch_args

SRC = r"""
struct __align__(64) TmaDesc { unsigned long long v[16]; };
extern "C" __global__ void k(const int* a, int* c, int m, const __grid_constant__ TmaDesc ta,
                             const __grid_constant__ TmaDesc tb) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(&ta)));
    c[0] = a[0] + m + (int)tb.v[3];
}
"""


def _cubin(src: str = SRC, arch: str = "sm_90a") -> bytes:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"k.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    (rc,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert rc == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetCUBIN(prog, buf)
    return buf


def test_parse_tmap_arg():
    a = parse_arg("tmap:A:64,T0_BM:sw128")
    assert a.kind == "tmap" and a.name == "A" and a.expr == "64,T0_BM" and a.swizzle == "sw128"
    for bad in ("tmap:A:64:sw128", "tmap:A:64,64:sw16", "tmap:1A:64,64:none", "tmap:A:64,64"):
        with pytest.raises(ValueError):
            parse_arg(bad)


def test_candidate_checks_tmap_tensor_names():
    cand = Candidate(problem="p", sources={"k.cu": SRC}, launches=[{
        "kernel": "k", "grid": ["1"], "block": ["32"],
        "args": ["A", "C", "int32:M", "tmap:A:64,64:sw128", "tmap:B:64,64:sw128"]}])
    cand.check_tensor_args({"A", "B"}, {"C"})
    with pytest.raises(ValueError):
        cand.check_tensor_args({"A"}, {"C"})


def test_cubin_places_tensor_maps_by_constant_bank_address():
    cubin = _cubin()
    kp, total = kernel_params(cubin, "k")
    assert [p.size for p in kp] == [8, 8, 4, 128, 128]
    # sm_90 parameters start at constant bank offset 0x210: 0x210 + 48 is 64-byte aligned
    assert [p.offset for p in kp] == [0, 8, 16, 48, 176] and total == 304
    args = ["A", "C", "int32:M", "tmap:A:64,64:sw128", "tmap:B:64,64:sw128"]
    entries = {"k": {"unit": "k.cu", "symbol": "k"}}
    assert check_launch_args([{"kernel": "k", "args": args}], entries, {"k.cu": cubin}) == []
    bad = check_launch_args([{"kernel": "k", "args": args[:-1] + ["B"]}], entries, {"k.cu": cubin})
    assert bad and "128" in bad[0]
    # the launcher packs at the cubin's offsets (natural alignment would put the first map at 64)
    vals = [ctypes.c_uint64(1), ctypes.c_uint64(2), ctypes.c_int32(3),
            (ctypes.create_string_buffer(b"\x11" * 128, 128), 64),
            (ctypes.create_string_buffer(b"\x22" * 128, 128), 64)]
    layout, tot = L._layout_from_cubin(vals, cubin, "k", 0)
    assert [o for o, _ in layout] == [0, 8, 16, 48, 176] and tot == 304
    p = L._Params(layout, tot)
    base = ctypes.addressof(p.buf)
    assert ctypes.string_at(base + 48, 128) == b"\x11" * 128
    assert ctypes.string_at(base + 176, 128) == b"\x22" * 128
    assert ctypes.c_int32.from_address(base + 16).value == 3
    with pytest.raises(L.LaunchError):
        L._layout_from_cubin(vals[:-1] + [ctypes.c_uint64(0)], cubin, "k", 0)


def test_pack_args_alignment_override():
    layout, total = L._pack_args([ctypes.c_int32(1), (ctypes.create_string_buffer(128), 64)])
    assert [o for o, _ in layout] == [0, 64] and total == 192


def test_tensor_map_bytes_calls_encode_with_dims_pitch_box(monkeypatch):
    torch = pytest.importorskip("torch")
    calls = {}

    class Enum:
        def __getattr__(self, name):
            return name

    class U:
        def __init__(self, v):
            self.v = v

        def __eq__(self, o):
            return self.v == o

        def __repr__(self):
            return f"U({self.v})"

    payload = ctypes.create_string_buffer(bytes(range(128)), 128)

    def encode(*a):
        calls["args"] = a
        return (0, types.SimpleNamespace(getPtr=lambda: ctypes.addressof(payload)))

    fake = types.SimpleNamespace(
        CUtensorMapDataType=Enum(), CUtensorMapInterleave=Enum(), CUtensorMapSwizzle=Enum(),
        CUtensorMapL2promotion=Enum(), CUtensorMapFloatOOBfill=Enum(), cuuint64_t=U, cuuint32_t=U,
        cuTensorMapEncodeTiled=encode, CUresult=types.SimpleNamespace(CUDA_SUCCESS=0))
    monkeypatch.setattr(L, "_drv", lambda: fake)
    t = torch.zeros(136, 4096, dtype=torch.bfloat16)
    raw = L.tensor_map_bytes(t, 64, 64, "sw128")
    assert raw == bytes(range(128))
    a = calls["args"]
    assert a[0] == "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" and a[1] == 2 and a[2] == t.data_ptr()
    assert a[3] == [4096, 136] and a[4] == [8192] and a[5] == [64, 64] and a[6] == [1, 1]
    assert a[8] == "CU_TENSOR_MAP_SWIZZLE_128B" and a[10] == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"
    with pytest.raises(L.LaunchError):  # a 128B-swizzle box row is at most 128 bytes
        L.tensor_map_bytes(t, 64, 128, "sw128")
    with pytest.raises(L.LaunchError):  # not row-major
        L.tensor_map_bytes(t.t(), 64, 64, "sw128")
