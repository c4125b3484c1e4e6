"""What the kernel family tests (test_kernels_attention_{decode,prefill,ragged}.py,
test_kernels_fp8_gemm.py, test_kernels_moe_group_mask.py) share: the problems a family claims, the
resource usage / SASS of a compiled cubin."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

from solforge.compile import compile_candidate
from solforge.problem.loader import load_problem_dir
from tests.unit.test_compile_arch import _wheel_bin


def claimed(fam, sol_execbench_dir: Path) -> list[str]:
    """Names of the shared problems the family matches, in directory order."""
    return [d.name for d in sorted(sol_execbench_dir.glob("*/*"))
            if (d / "definition.json").exists() and fam.matches(load_problem_dir(d))]


def usage_and_sass(cubin: bytes, tmp_path: Path) -> Optional[tuple[str, str]]:
    """(cuobjdump -res-usage, cuobjdump -sass) of a cubin; None without the wheels' cuobjdump."""
    cuobjdump = _wheel_bin("cuobjdump")
    if cuobjdump is None:
        return None
    f = tmp_path / "k.cubin"
    f.write_bytes(cubin)
    env = {**os.environ, "PATH": f"{cuobjdump.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return tuple(subprocess.run([str(cuobjdump), flag, str(f)], capture_output=True, text=True, env=env,
                                check=True).stdout for flag in ("-res-usage", "-sass"))


def check_compiled(cand, tmp_path: Path, want: tuple[str, ...] = (), kernels: Optional[int] = None,
                   what=None) -> Optional[str]:
    """Compile for sm_90a (which also checks the launch args against each kernel's parameters); with
    the wheels' cuobjdump: no local memory and no stack (in each of `kernels` kernels when given), no
    LDL/STL, and every SASS mnemonic of `want` present. `what` labels a failure (the params).
    Returns the SASS for further checks (None without cuobjdump)."""
    res = compile_candidate(cand, arch="sm_90a")
    assert res.ok, res.log
    dumps = usage_and_sass(next(iter(res.cubins.values())), tmp_path)
    if dumps is None:
        return None
    usage, sass = dumps
    if kernels is None:
        assert "LOCAL:0" in usage and "STACK:0" in usage, (what, usage)
    else:
        assert usage.count("LOCAL:0") == kernels and usage.count("STACK:0") == kernels, (what, usage)
    assert all(w in sass for w in want), (what, [w for w in want if w not in sass])
    assert "LDL" not in sass and "STL" not in sass, what
    return sass


