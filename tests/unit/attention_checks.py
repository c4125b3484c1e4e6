"""What the attention family tests (test_kernels_attention_{decode,prefill,ragged}.py) share: the
problems a family claims, and the resource usage / SASS of a compiled cubin."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

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
