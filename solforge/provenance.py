"""What a run ran on, for its runs row (issue #6: every best/ result names its GPU, driver, git commit
and torch version). Never imports torch: the optimize process does not (runner.py), so versions come
from package metadata and torch's generated version.py, read as text.

    run_provenance() -> {"commit", "commit_source", "dirty", "torch", "cuda", "python", "cuda_bindings"}

The commit: $SOLFORGE_COMMIT when set (the GPU box gets a copy of the tree without .git, so the
scripts that launch runs there pass it; $SOLFORGE_COMMIT_SOURCE says where it came from), else
`git rev-parse HEAD` of the solforge tree with `dirty` (tracked files changed), else None.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> Optional[str]:
    try:
        p = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def git_commit() -> tuple[Optional[str], Optional[str], Optional[bool]]:
    """(commit, source, dirty)."""
    env = os.environ.get("SOLFORGE_COMMIT", "").strip()
    if env:
        return env, os.environ.get("SOLFORGE_COMMIT_SOURCE", "").strip() or "env SOLFORGE_COMMIT", None
    if not (REPO / ".git").exists():
        return None, None, None
    head = (_git("rev-parse", "HEAD") or "").strip()
    if not head:
        return None, None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head, "git", (bool(status.strip()) if status is not None else None)


def dist_version(dist: str, missing: Optional[str] = None) -> Optional[str]:
    """An installed distribution's version from its metadata (nothing is imported), else `missing`."""
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return missing


def torch_cuda_version() -> Optional[str]:
    """torch.version.cuda without importing torch (torch/version.py: `cuda: Optional[str] = '13.0'`)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        f = Path(loc) / "version.py"
        if f.is_file():
            m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", f.read_text(), re.MULTILINE)
            return m.group(1) if m else None
    return None


def run_provenance() -> dict:
    commit, source, dirty = git_commit()
    torch_v = dist_version("torch")
    if torch_v is None and "torch" in sys.modules:  # an editable or vendored torch without metadata
        torch_v = getattr(sys.modules["torch"], "__version__", None)
    return {"commit": commit, "commit_source": source, "dirty": dirty, "torch": torch_v,
            "cuda": torch_cuda_version(), "python": sys.version.split()[0],
            "cuda_bindings": dist_version("cuda-bindings")}
