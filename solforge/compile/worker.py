"""Compile workers: long-lived child processes that run NVRTC / the CuTe DSL, so a compile can be timed
out (the worker is killed) and a compiler crash never takes the caller down.

Why a persistent worker rather than one process per compile: starting Python and loading NVRTC costs
~0.3 s and importing the CuTe DSL several seconds, more than the compiles themselves. A worker is
started once per backend and reused; a timeout or crash replaces it. CuTe DSL jobs run Python written
by an agent, so the cute worker forks a fresh child per job (see cute_backend) and the worker itself
never executes candidate code.

Protocol: the parent writes JSON job frames (8-byte length + JSON; bytes as {"__bytes__": base64})
to the worker's stdin; the worker answers with JSON dicts on a private pipe (the original stdout),
while its fd 1 is pointed at stderr so a stray print from a compiler or a kernel author cannot corrupt
the stream. Never pickle: a frame is data, and a hostile frame can at most be a wrong answer, which
the parent checks like any other (size cap, shape).

Isolation (solforge.sandbox): workers start in their own session with an environment from the
sandbox's allowlist (no API keys, tokens or proxies: NVRTC or a candidate reading /proc/self/environ
finds none), HOME and TMPDIR in a private temp dir, descriptors closed; a timeout kills the worker's
whole process group. The cute worker, which forks children that run a candidate's Python, also runs
inside bubblewrap (no network, read-only filesystem except its temp dir) where the machine allows it.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..sandbox import bwrap
from ..sandbox.env import sandbox_env
from .frames import dumps, loads

_REPO = str(Path(__file__).resolve().parents[2])
_MAX_JOBS_PER_WORKER = 500  # recycle now and then: compilers are not leak-free
_NVRTC_MALLOC_ENV = {"MALLOC_TRIM_THRESHOLD_": str(512 << 20), "MALLOC_TOP_PAD_": str(64 << 20),
                     "MALLOC_MMAP_THRESHOLD_": str(64 << 20)}


MAX_FRAME_BYTES = 1 << 30  # a compile answer is cubins + logs; more than this is not an answer


def _send(fd: int, obj) -> None:
    data = dumps(obj)
    os.write(fd, struct.pack("<Q", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv(fd: int, deadline: float | None = None):
    def read_exact(n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(fd, n - got)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    (size,) = struct.unpack("<Q", read_exact(8))
    if size > MAX_FRAME_BYTES:
        raise EOFError(f"frame of {size} bytes")
    out = loads(read_exact(size))
    if not isinstance(out, dict):
        raise EOFError("frame is not a JSON object")
    return out


class Worker:
    def __init__(self, backend: str):
        self.backend = backend
        self.jobs = 0
        self.home = tempfile.mkdtemp(prefix=f"solforge-compile-{backend}-")
        env = sandbox_env(home=self.home)
        if backend == "nvrtc":
            # NVRTC allocates and frees ~100 MB per compile; glibc's default gives it back to the
            # kernel each time (brk shrink, munmap) and the next compile faults it in again: ~5 ms of
            # system time per compile. Keep freed memory in the worker (a caller's settings win).
            for k, v in _NVRTC_MALLOC_ENV.items():
                env.setdefault(k, v)
        argv = [sys.executable, "-s", "-m", "solforge.compile.worker", backend]
        if backend == "cute":  # runs a candidate's Python (in forked children): behind bwrap's walls
            from .cute_prebuilt import roots  # read on a box without the DSL: keep them visible

            argv = bwrap.wrap(argv, self.home, keep_visible=(
                _REPO, *env["PYTHONPATH"].split(os.pathsep), *(str(r) for r in roots())))
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd=self.home, start_new_session=True, close_fds=True)

    def run(self, job: dict, timeout: float) -> dict:
        self.jobs += 1
        _send(self.proc.stdin.fileno(), job)
        return _recv(self.proc.stdout.fileno(), time.monotonic() + timeout)

    def kill(self) -> None:
        """The worker and everything it started (its own process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.cleanup()

    def cleanup(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:  # noqa: BLE001 - already closed
                pass
        shutil.rmtree(self.home, ignore_errors=True)


_idle: dict[str, list[Worker]] = {}
_lock = threading.Lock()
atexit.register(lambda: shutdown())  # idle workers end with the caller, and their temp dirs with them


def run_job(backend: str, job: dict, timeout: float) -> dict:
    """Run one compile job in a worker. Returns the backend's dict, or status timeout/error."""
    with _lock:
        pool = _idle.setdefault(backend, [])
        w = pool.pop() if pool else None
    if w is not None and w.proc.poll() is not None:
        w.cleanup()  # died while idle: its private temp dir goes with it
        w = None
    if w is None:
        w = Worker(backend)
    t0 = time.perf_counter()
    try:
        out = w.run(job, timeout)
    except TimeoutError:
        w.kill()
        return {"status": "timeout", "log": f"solforge: compile ran past {timeout:.0f} s and was killed",
                "cubins": {}, "entries": {}, "options": [], "compile_seconds": time.perf_counter() - t0}
    except (EOFError, BrokenPipeError, OSError, ValueError) as e:
        w.kill()
        return {"status": "error", "log": f"solforge: the compiler process died ({type(e).__name__}, "
                f"exit code {w.proc.returncode})", "cubins": {}, "entries": {}, "options": [],
                "compile_seconds": time.perf_counter() - t0}
    if w.jobs >= _MAX_JOBS_PER_WORKER:
        w.kill()
    else:
        with _lock:
            _idle[backend].append(w)
    return out


def warm(backend: str) -> None:
    """Start a worker ahead of time (it loads its compiler before the first job arrives)."""
    with _lock:
        _idle.setdefault(backend, []).append(Worker(backend))


def shutdown() -> None:
    """Stop the idle workers: end of input first, so each exits cleanly (the nvrtc worker removes its
    precompiled-header folder on exit); killed if it has not exited after 2 s."""
    with _lock:
        for pool in _idle.values():
            for w in pool:
                try:
                    w.proc.stdin.close()
                    w.proc.wait(timeout=2)
                    w.cleanup()
                except Exception:  # noqa: BLE001 - still running or already gone
                    w.kill()
        _idle.clear()


def _serve(backend: str) -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # prints go to stderr from here on
    if backend == "nvrtc":
        from .nvrtc_backend import compile_cuda as handler
        from cuda.bindings import nvrtc  # noqa: F401 - load the library before the first job
    elif backend == "cute":
        try:
            from . import cute_backend
            from .cute_backend import compile_cute_isolated as handler
            from .cute_backend import warm_up

            # the forked children that run candidate code must not hold the worker's pipes
            cute_backend.WORKER_FDS[:] = [0, reply_fd]
            warm_up()  # import + first compile (MLIR setup) here, so every forked job starts warm
        except ImportError as e:
            missing = f"solforge: the CuTe DSL is not importable here ({e}); pip install nvidia-cutlass-dsl"

            def handler(job, _msg=missing):
                # a GPU box without the DSL: the cubin precompiled on the CPU machine, if carried
                from .cute_prebuilt import lookup_job

                return lookup_job(job, _msg)
    else:
        raise SystemExit(f"unknown backend {backend!r}")
    while True:
        try:
            job = _recv(0)
        except (EOFError, ValueError):  # end of input, or a frame that is not ours
            return
        try:
            out = handler(job)
        except Exception as e:  # noqa: BLE001 - report, keep serving
            import traceback

            out = {"status": "error", "log": f"solforge: internal compile error: {e}\n"
                   + traceback.format_exc(), "cubins": {}, "entries": {}, "options": [],
                   "compile_seconds": 0.0}
        try:
            _send(reply_fd, out)
        except BrokenPipeError:  # the caller is gone (killed at a deadline): nobody to answer
            return


def _remove_own_home() -> None:
    """The caller removes a worker's private folder when it stops the worker; a caller that was
    killed (a deadline's SIGKILL or SIGTERM runs no atexit) cannot, and each such death left a
    solforge-compile-* folder in the temp dir. The worker, finding its input closed or its answer
    unwanted, removes the folder it runs in (its cwd, named by Worker)."""
    home = os.getcwd()
    if os.path.basename(home).startswith("solforge-compile-"):
        os.chdir("/")
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    try:
        _serve(sys.argv[1])
    finally:
        _remove_own_home()
