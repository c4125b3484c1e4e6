"""What this machine can do: `solforge doctor`, and the GPU check every GPU command runs first.

Each check is one line: ok or missing, and what to do about it. Nothing here initialises CUDA in
this process (the evaluator is a spawned child that must own the GPU context), so the GPU check reads
the driver's files and torch's build metadata only. Stdlib at import; torch and the NVIDIA wheels
are imported inside the checks that need them. Never imports Prefect: its API is checked over HTTP.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

NVIDIA_PROC = Path("/proc/driver/nvidia")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""          # what to do when not ok (empty when ok)
    needed_for: str = ""   # which commands depend on it

    def line(self) -> str:
        state = "ok" if self.ok else "missing"
        return f"{self.name:<12} {state:<8} {self.detail}" + (f" -> {self.fix}" if self.fix else "")

    def to_json(self) -> dict:
        return asdict(self)


# ---- GPU -----------------------------------------------------------------------------------------
def _gpu_names() -> list[str]:
    """GPU models the NVIDIA driver exposes, without touching CUDA (driver's /proc files, else
    nvidia-smi)."""
    gpus = NVIDIA_PROC / "gpus"
    names = []
    if gpus.is_dir():
        for d in sorted(gpus.iterdir()):
            info = d / "information"
            try:
                for ln in info.read_text().splitlines():
                    if ln.startswith("Model:"):
                        names.append(ln.split(":", 1)[1].strip())
            except OSError:
                names.append("NVIDIA GPU")
    if names:
        return names
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0:
                return [x.strip() for x in out.stdout.splitlines() if x.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return []


def _driver_version() -> Optional[str]:
    try:
        text = (NVIDIA_PROC / "version").read_text()
    except OSError:
        text = ""
    for tok in text.split():
        if tok.count(".") >= 1 and tok.replace(".", "").isdigit():
            return tok
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.split()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def _hidden_by_env() -> Optional[str]:
    for var in ("SOLFORGE_GPUS", "CUDA_VISIBLE_DEVICES"):
        v = os.environ.get(var)
        if v is not None and not [g for g in v.split(",") if g.strip() and g.strip() != "-1"]:
            return var
    return None


def _torch_gpu_names(timeout_s: float = 60.0) -> list[str]:
    """Last resort when neither the driver's /proc files nor nvidia-smi are visible (some containers):
    ask a CUDA build of torch, in a child process, so this one never initialises CUDA."""
    try:
        import torch
    except ImportError:
        return []
    if not getattr(torch.version, "cuda", None):
        return []
    code = ("import torch\nif torch.cuda.is_available():\n"
            "    print('\\n'.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in out.stdout.splitlines() if x.strip()] if out.returncode == 0 else []


def check_gpu() -> Check:
    names = _gpu_names() or _torch_gpu_names()
    if not names:
        return Check("GPU", False, "no NVIDIA GPU found",
                     "run GPU commands (evaluate, replay, baseline, optimize --gpus) on a machine "
                     "with one; compile, ingest, sol, report and export work here", "evaluate")
    hidden = _hidden_by_env()
    if hidden:
        return Check("GPU", False, f"{len(names)} GPU(s) but {hidden} hides them all",
                     f"unset {hidden} or set it to the GPUs to use, e.g. {hidden}=0", "evaluate")
    return Check("GPU", True, f"{len(names)} x {names[0]}")


def check_driver() -> Check:
    v = _driver_version()
    if v is None:
        return Check("driver", False, "no NVIDIA driver loaded",
                     "install the NVIDIA driver (580 or newer for CUDA 13 cubins)", "evaluate")
    return Check("driver", True, v)


def check_torch() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch", False, "torch not installed", "bash scripts/setup.sh", "evaluate")
    cuda = getattr(torch.version, "cuda", None)
    if not cuda:
        return Check("torch", False, f"torch {torch.__version__} is a CPU-only build",
                     "for GPU commands install a CUDA build: .venv/bin/pip install torch "
                     "--index-url https://download.pytorch.org/whl/cu130", "evaluate")
    return Check("torch", True, f"torch {torch.__version__}, CUDA {cuda}")


def gpu_problem() -> Optional[str]:
    """None when this machine can evaluate on a GPU, else one line saying why not and what to do."""
    for check in (check_gpu, check_torch):
        c = check()
        if not c.ok:
            return c.detail
    return None


# ---- toolchain -----------------------------------------------------------------------------------
def check_nvrtc() -> Check:
    try:
        from .compile.toolchain import include_dirs, nvrtc_version

        v = nvrtc_version()
        dirs = include_dirs()
    except Exception as e:  # noqa: BLE001 - any failure here means compile cannot work: say why
        return Check("NVRTC", False, str(e).splitlines()[0][:120],
                     "bash scripts/setup.sh (installs the nvidia-cuda-nvrtc/-runtime/-cccl wheels)",
                     "compile")
    headers = []
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-cccl"):
        try:
            headers.append(f"{dist.split('-')[-1]} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return Check("NVRTC", True, f"{v}; headers {', '.join(headers) or len(dirs)}")


def check_cute() -> Check:
    try:
        v = md.version("nvidia-cutlass-dsl")
    except md.PackageNotFoundError:
        return Check("CuTe DSL", False, "nvidia-cutlass-dsl not installed (CuTe DSL candidates "
                     "cannot compile; CUDA C++ ones can)", ".venv/bin/pip install 'solforge[cute]'",
                     "compile --language cute")
    return Check("CuTe DSL", True, f"nvidia-cutlass-dsl {v}")


# ---- store and orchestration ---------------------------------------------------------------------
def check_store(db: Optional[str] = None) -> Check:
    from . import settings

    path = Path(db).expanduser() if db else settings.get().db_path
    if not path.exists():
        return Check("store", False, f"{path} does not exist yet",
                     "solforge ingest <problems folder> (or bash scripts/main.sh) creates it", "all")
    try:
        from .store import Store
        from .store.results import store_counts

        n, a = store_counts(Store(path, lock_timeout_s=10))
    except Exception as e:  # noqa: BLE001 - a locked or broken file: one line
        return Check("store", False, f"{path}: {str(e).splitlines()[0][:120]}",
                     "close the process holding it, or point --db / SOLFORGE_DB_PATH elsewhere", "all")
    if not n:
        return Check("store", False, f"{path}: no problems", "solforge ingest <problems folder>", "all")
    return Check("store", True, f"{path}: {n} problems, {a} attempts")


def check_prefect(timeout_s: float = 3.0) -> Check:
    try:
        v = md.version("prefect")
    except md.PackageNotFoundError:
        return Check("Prefect", False, "prefect not installed (the CLI works without it)",
                     ".venv/bin/pip install 'solforge[full]'", "flows")
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return Check("Prefect", True, f"prefect {v}; no PREFECT_API_URL: flows start a temporary "
                     "local server (docs/prefect.md runs a lasting one)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as r:
            ok = r.status == 200
    except Exception as e:  # noqa: BLE001 - unreachable: say so in one line
        return Check("Prefect", False, f"prefect {v}; API {url} unreachable ({type(e).__name__})",
                     ".venv/bin/python -m prefect server start, or unset PREFECT_API_URL", "flows")
    return Check("Prefect", ok, f"prefect {v}; API {url}" + ("" if ok else " unhealthy"),
                 "" if ok else "restart the Prefect server", "flows")


CHECKS: list[Callable[..., Check]] = [check_gpu, check_driver, check_torch, check_nvrtc, check_cute,
                                      check_store, check_prefect]


def run_checks(db: Optional[str] = None) -> list[Check]:
    out = []
    for c in CHECKS:
        out.append(c(db) if c is check_store else c())
    return out
