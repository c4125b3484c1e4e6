"""The environment untrusted code gets: built from an allowlist, never copied from the caller.

One list for every process that runs code nobody here wrote (a candidate's Python, a dataset's
reference.py, a baseline): what Python, torch, CUDA and the BLAS libraries need to start and to pick
their devices and thread counts, and nothing that can carry a credential (API keys, tokens, proxies,
database URLs). A name that matches the allowlist is still dropped when it looks like a secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]

# exact names kept from the caller's environment
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "USER", "LOGNAME", "TMPDIR",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER",
})
# name prefixes kept (thread counts, allocator and compiler tuning, solforge's own settings)
ALLOWED_PREFIXES = ("CUDA_", "NVIDIA_", "OPENBLAS_", "GOTO", "MALLOC_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_",
                    "TRITON_", "CUTE_DSL_", "CUTLASS_", "NVRTC_", "KINETO_", "CUPTI_", "SOLFORGE_")
# dropped even when allowed above: anything that names a credential, a proxy or a database
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE"
                         r"|PROXY|DATABASE|_DB\b|_DB_|DSN|URL|URI", re.IGNORECASE)


def allowed(name: str) -> bool:
    if SECRET_NAME.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def sandbox_env(home: Optional[str] = None, extra: Optional[Mapping[str, str]] = None,
                extra_pythonpath: Optional[list[str]] = None,
                source: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The allowlisted part of `source` (default os.environ), HOME/TMPDIR pointed at `home`, and a
    PYTHONPATH that imports this solforge first (then the caller's entries, so a worktree's code and
    its venv still load). `extra` is added last and is filtered by the same allowlist."""
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if allowed(k)}
    paths = [str(REPO_ROOT)] + list(extra_pythonpath or [])
    paths += [p for p in src.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PATH", os.defpath)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if home:
        env["HOME"] = env["TMPDIR"] = home
        env["XDG_CACHE_HOME"] = os.path.join(home, ".cache")
    elif src.get("HOME"):  # no private home: the caller's (its files are what bwrap hides, not the name)
        env["HOME"] = src["HOME"]
    for k, v in (extra or {}).items():
        if allowed(k):
            env[k] = str(v)
    return env
