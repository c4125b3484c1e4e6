"""GPU slots: which GPUs this process may use, how many evaluations each runs at a time (lanes), and
how busy each was.

An evaluation holds a slot for as long as its spawned evaluator runs; the evaluator is pinned to the
slot's GPU through CUDA_VISIBLE_DEVICES in its own environment (threads share os.environ, so the
parent never changes its own). Within a process a condition variable hands slots out; across
processes on one host an flock per GPU (the same idea as solforge.evaluate.baseline.gpu_lock) keeps
a second run, a baseline script or another worker off a GPU that is busy. With lanes > 1 a GPU
has that many slots: their evaluations run correctness side by side and time alone, through a
per-GPU share lock the evaluator takes (solforge.evaluate.gpu_share, $SOLFORGE_GPU_SHARE in the
slot's environment; every slot of a real pool carries it, so a one-lane run on the same GPU
cooperates too).

Stdlib only: the bare GPU box runs this (benchmarks/two_gpu_run.py).
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES entries.

    SOLFORGE_GPUS ("0,1", or "" for none) wins; else CUDA_VISIBLE_DEVICES; else every GPU torch
    (or nvidia-smi) sees. An empty list means no GPU: compile-only."""
    for var in ("SOLFORGE_GPUS", "CUDA_VISIBLE_DEVICES"):
        if var in os.environ:
            return [g.strip() for g in os.environ[var].split(",") if g.strip() and g.strip() != "-1"]
    n = _torch_count()
    if n is None:
        n = len(_smi(["--query-gpu=index", "--format=csv,noheader"]))
    return [str(i) for i in range(n)]


def _torch_count() -> Optional[int]:
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch: ask nvidia-smi
        return None
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def _smi(args: list[str]) -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


def gpu_identity(gpus: Sequence[str]) -> str:
    """What a timing depends on besides the kernel: GPU model and driver ("none" without a GPU).

    Part of the evaluation cache key: a candidate timed on an H100 is not timed on an H200."""
    if not gpus:
        return "none"
    rows = _smi(["--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"])
    names = set()
    for r in rows:
        idx, uuid, name, driver = [x.strip() for x in r.split(",")[:4]]
        if idx in gpus or uuid in gpus:
            names.add(f"{name}|{driver}")
    if not names:  # nvidia-smi absent or silent: the model torch reports
        try:
            import torch

            names.add(torch.cuda.get_device_name(0))
        except Exception:  # noqa: BLE001
            names.add("unknown-gpu")
    return ";".join(sorted(names))


def _lock_dir() -> Path:
    d = Path(os.environ.get("SOLFORGE_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / "solforge-gpu-locks")
    d.mkdir(parents=True, exist_ok=True)
    return d


def eval_threads(n_gpus: int) -> int:
    """CPU threads for one evaluator process: the host's cores shared by one evaluator per GPU slot
    (n_gpus counts slots: GPUs x lanes) and the loop's own process, at most 8 (an evaluator's CPU work is input set-up and Python; torch's
    default, one thread per core in EVERY evaluator, oversubscribes the host when GPUs run at once).
    The same number for 1 and 2 GPUs on a 32-core host, so a scaling comparison is like for like.
    SOLFORGE_EVAL_THREADS overrides it."""
    v = os.environ.get("SOLFORGE_EVAL_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cores // (2 * max(1, n_gpus))))


def eval_cpusets(n_gpus: int) -> list[str]:
    """Per GPU slot (in pool order), the CPUs its evaluator is pinned to, or "" for no pinning.

    SOLFORGE_EVAL_PIN=split: the CPUs this process may use, cut into n_gpus disjoint consecutive
    blocks, one per GPU, so two evaluators never share a core (nor, on hosts that number SMT
    siblings apart, usually a sibling). Off by default: whether it helps on the Firecracker x2 box
    (32 vCPUs, no NUMA or SMT topology the guest can see) is what scripts/scaling_overhead_probe.py
    measures (spin_pair vs spin_pair_pin)."""
    if os.environ.get("SOLFORGE_EVAL_PIN", "").strip().lower() != "split" or n_gpus < 1:
        return [""] * max(n_gpus, 0)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    k = len(cpus) // n_gpus
    if k < 1:
        return [""] * n_gpus
    return [",".join(str(c) for c in cpus[i * k:(i + 1) * k]) for i in range(n_gpus)]


def eval_sync() -> str:
    """SOLFORGE_EVAL_SYNC=blocking: the evaluator's CUDA context waits for the GPU on an interrupt
    instead of spinning a core (CU_CTX_SCHED_BLOCKING_SYNC, set by the zygote child before the
    driver creates its context; zygote launch only). Off by default (see eval_cpusets)."""
    v = os.environ.get("SOLFORGE_EVAL_SYNC", "").strip().lower()
    return v if v in ("blocking", "spin") else ""


@dataclass
class Slot:
    gpu: str
    acquired_at: float
    lane: int = 0     # which of the GPU's slots (0 .. lanes-1)
    share: str = ""   # the GPU's share lock file (gpu_share); "": no cross-process locking
    threads: int = 0  # CPU threads for the evaluator (0: torch's default)
    cpus: str = ""    # CPUs to pin the evaluator to, "0,1,2" (eval_cpusets; "": not pinned)
    sync: str = ""    # the evaluator context's wait mode (eval_sync; "": CUDA's default)

    @property
    def env(self) -> dict:
        """What the spawned evaluator's environment needs: only this GPU visible, and its CPU threads
        (OMP_NUM_THREADS for a spawned interpreter; a zygote child applies SOLFORGE_EVAL_THREADS with
        torch.set_num_threads, its OpenMP runtime having read the environment before the fork), and
        when asked for, its CPUs (SOLFORGE_EVAL_CPUSET) and CUDA wait mode (SOLFORGE_EVAL_SYNC)."""
        env = {"CUDA_VISIBLE_DEVICES": self.gpu}
        if self.share:
            env["SOLFORGE_GPU_SHARE"] = self.share
        if self.threads > 0:
            env.update(OMP_NUM_THREADS=str(self.threads), SOLFORGE_EVAL_THREADS=str(self.threads))
        if self.cpus:
            env["SOLFORGE_EVAL_CPUSET"] = self.cpus
        if self.sync:
            env["SOLFORGE_EVAL_SYNC"] = self.sync
        return env


@dataclass
class GpuUse:
    intervals: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, label)


def _unflock(fd: int) -> None:
    """Release and close a lane's flock (-1: a pool without cross-process locks holds none)."""
    if fd >= 0:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class SlotDeadline(Exception):
    """Asked for a slot past the pool's deadline: the run's wall budget is spent. Not a
    TimeoutError, so no retry policy takes it for a transient failure."""


class GpuPool:
    """Hands out `lanes` slots per GPU; waits while all are busy; records when each GPU was held.

    `deadline` (time.monotonic() seconds, None: none): past it, a caller gets SlotDeadline instead
    of a slot, free or not: nothing starts on a GPU after it. An optimize run with a wall budget
    sets it, so that sessions queued behind busy lanes stop at the budget instead of each starting
    an evaluation after it (146 queued sessions on 4 lanes ran minutes past a 270 s budget)."""

    def __init__(self, gpus: Sequence[str], cross_process: bool = True, lanes: int = 1):
        self.gpus = list(gpus)
        self.lanes = max(1, int(lanes))
        # lane-major: a second lane of a GPU is handed out only once every GPU has one busy
        self._free = [(g, i) for i in range(self.lanes) for g in self.gpus]
        self._cond = threading.Condition()
        self._fds: dict[tuple[str, int], int] = {}
        self._cross = cross_process
        self.use = {g: GpuUse() for g in self.gpus}
        self.threads = eval_threads(len(self._free)) if self.gpus else 0
        self.cpusets = dict(zip(self._free, eval_cpusets(len(self._free))))
        self.sync = eval_sync()
        self.deadline: Optional[float] = None
        self._draining: set[str] = set()   # GPUs an alone() call waits to have to itself

    def __len__(self) -> int:
        """Slots: evaluations that may run at once."""
        return len(self.gpus) * self.lanes

    @staticmethod
    def _name(gpu: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", gpu)

    def _share(self, gpu: str) -> str:
        return str(_lock_dir() / (self._name(gpu) + ".share")) if self._cross else ""

    def _try_flock(self, key: tuple[str, int]) -> Optional[int]:
        if not self._cross:
            return -1
        gpu, lane = key
        path = _lock_dir() / (self._name(gpu) + (f".lane{lane}" if lane else "") + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            os.close(fd)
            return None

    def acquire(self, prefer: Optional[str] = None, timeout_s: Optional[float] = None) -> Slot:
        if not self.gpus:
            raise RuntimeError("no GPU in this pool: timing needs a GPU")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    raise SlotDeadline("the run's wall budget ended before a GPU slot was free")
                order = [k for k in self._free if (prefer is None or k[0] == prefer)
                         and k[0] not in self._draining]
                for key in order:
                    fd = self._try_flock(key)
                    if fd is not None:
                        self._free.remove(key)
                        self._fds[key] = fd
                        return Slot(key[0], time.monotonic(), lane=key[1], share=self._share(key[0]),
                                    threads=self.threads, cpus=self.cpusets.get(key, ""),
                                    sync=self.sync)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no GPU slot free within {timeout_s} s")
                # a slot freed here notifies; one freed by another process is seen on the next poll
                self._cond.wait(0.05)

    def _give_back(self, key: tuple[str, int]) -> None:
        """A held lane free again: its flock released, back among the free ones (under _cond)."""
        fd = self._fds.pop(key, None)
        if fd is not None:
            _unflock(fd)
        self._free.append(key)

    def release(self, slot: Slot, label: str = "") -> None:
        end = time.monotonic()
        key = (slot.gpu, slot.lane)
        with self._cond:
            self._give_back(key)
            self.use[slot.gpu].intervals.append((slot.acquired_at, end, label))
            self._cond.notify_all()

    @contextmanager
    def slot(self, prefer: Optional[str] = None, label: str = "") -> Iterator[Slot]:
        s = self.acquire(prefer)
        try:
            yield s
        finally:
            self.release(s, label)

    @contextmanager
    def alone(self, gpu: str, label: str = "") -> Iterator[Slot]:
        """Every lane of `gpu` at once, so that no other evaluation runs there meanwhile (an evaluation
        that ran out of memory beside other lanes' tensors runs again alone). While it waits, the
        GPU's lanes freed are not handed out again, so it is not starved by the lanes it waits for.
        The caller must hold none of the GPU's lanes. Past the deadline: SlotDeadline."""
        keys = [(gpu, i) for i in range(self.lanes)]
        with self._cond:
            self._draining.add(gpu)
            try:
                while True:
                    if self.deadline is not None and time.monotonic() > self.deadline:
                        raise SlotDeadline("the run's wall budget ended before the GPU was free "
                                           "for an evaluation alone")
                    if all(k in self._free for k in keys):
                        fds = {}
                        for k in keys:
                            fd = self._try_flock(k)
                            if fd is None:
                                break
                            fds[k] = fd
                        if len(fds) == len(keys):
                            for k in keys:
                                self._free.remove(k)
                                self._fds[k] = fds[k]
                            break
                        for fd in fds.values():   # another process holds a lane: try again
                            _unflock(fd)
                    self._cond.wait(0.05)
            finally:
                self._draining.discard(gpu)
        slot = Slot(gpu, time.monotonic(), lane=0, share=self._share(gpu),
                    threads=min(8, self.threads * self.lanes), cpus=self.cpusets.get(keys[0], ""),
                    sync=self.sync)
        try:
            yield slot
        finally:
            self.release(slot, label)
            with self._cond:
                for k in keys[1:]:
                    self._give_back(k)
                self._cond.notify_all()

    def busy_fractions(self, t0: float, t1: float) -> dict[str, float]:
        """Per GPU: the share of [t0, t1] during which any of its lanes was held."""
        span = max(t1 - t0, 1e-9)
        out = {}
        for g, u in self.use.items():
            busy, end = 0.0, t0
            for s, e, _ in sorted(u.intervals):     # the union of the lanes' intervals
                s, e = max(s, end), min(e, t1)
                if e > s:
                    busy += e - s
                    end = e
            out[g] = busy / span
        return out
