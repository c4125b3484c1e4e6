"""Arch-specific kernels compile to cubins of the right target: Hopper wgmma + TMA for sm_90a,
Blackwell tcgen05 for sm_100a. Checked through the ELF header/toolkit note and, where the wheels'
cuobjdump + nvdisasm are installed, the instructions in the SASS."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from solforge.compile import compile_candidate, samples
from solforge.compile.elf import read_cubin
from solforge.compile.result import CompileStatus


def _wheel_bin(name: str) -> Path | None:
    import nvidia

    for root in nvidia.__path__:
        p = Path(root) / "cu13" / "bin" / name
        if p.exists():
            return p
    return None


def sass_text(cubin: bytes, tmp_path: Path) -> str:
    """cuobjdump -sass of a cubin (skips the test when the wheels' binaries are missing)."""
    cuobjdump, nvdisasm = _wheel_bin("cuobjdump"), _wheel_bin("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels not installed")
    f = tmp_path / "k.cubin"
    f.write_bytes(cubin)
    env = {**os.environ, "PATH": f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(cuobjdump), "-sass", str(f)], capture_output=True, text=True, env=env,
                          check=True).stdout


def sass_opcodes(cubin: bytes, tmp_path: Path) -> set[str]:
    return set(re.findall(r"\b([A-Z][A-Z0-9]+)(?:\.[A-Z0-9_.]+)?\b", sass_text(cubin, tmp_path)))


def test_wgmma_tma_kernel_for_sm90a(tmp_path):
    res = compile_candidate(samples.candidate(samples.WGMMA_TMA_CU, "wgmma_tma_tile"), "sm_90a",
                            cache_dir=tmp_path / "c")
    assert res.ok, res.log
    info = read_cubin(res.cubins["kernel.cu"])
    assert (info.sm, info.arch) == (90, "sm_90a")
    ops = sass_opcodes(res.cubins["kernel.cu"], tmp_path)
    assert {"HGMMA", "UTMALDG", "SYNCS"} <= ops, sorted(ops)


def test_wgmma_is_rejected_for_plain_sm90(tmp_path):
    res = compile_candidate(samples.candidate(samples.WGMMA_TMA_CU, "wgmma_tma_tile"), "sm_90",
                            cache_dir=tmp_path / "c")
    assert res.status == CompileStatus.error and "wgmma" in res.log and "sm_90" in res.log


def test_tcgen05_kernel_for_sm100a(tmp_path):
    res = compile_candidate(samples.candidate(samples.TCGEN05_CU, "tcgen05_tile"), "sm_100a",
                            cache_dir=tmp_path / "c")
    assert res.ok, res.log
    info = read_cubin(res.cubins["kernel.cu"])
    assert (info.sm, info.arch) == (100, "sm_100a")
    ops = sass_opcodes(res.cubins["kernel.cu"], tmp_path)
    assert {"UTCHMMA", "LDTM"} <= ops, sorted(ops)


def test_tcgen05_is_rejected_for_hopper(tmp_path):
    res = compile_candidate(samples.candidate(samples.TCGEN05_CU, "tcgen05_tile"), "sm_90a",
                            cache_dir=tmp_path / "c")
    assert res.status == CompileStatus.error and "tcgen05" in res.log


def test_fp8_bf16_headers_come_from_the_wheels(tmp_path):
    res = compile_candidate(samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 8}),
                            "sm_90a", cache_dir=tmp_path / "c")
    assert res.ok, res.log
    assert any(o == "--include-path=<wheel:cccl>" for o in res.options)
