"""A fork server for evaluator processes: pay for `import torch` once, still one fresh process per
candidate.

    python -m solforge.evaluate.zygote SOCKET_PATH        (started by runner.py, never by hand)

The zygote is trusted code only. It imports torch, cuda-python and the evaluator's modules but never
initializes CUDA (it checks: cuCtxGetCurrent must answer "not initialized", and torch must not have
initialized CUDA; forking a process that has a CUDA context is unsupported, and torch refuses CUDA in
such a child). For each request it forks one child; the child

  - becomes its own session and process group (the runner kills the group on a timeout),
  - closes every socket of the zygote (the listening one and every other runner's connection) and any
    descriptor the imports did not open, so it can talk to nobody but its own stdout/stderr,
  - takes the runner's pipe as stdout and the stage's stderr file as stderr (passed over the Unix
    socket with SCM_RIGHTS), /dev/null as stdin, the runner's extra environment (CUDA_VISIBLE_DEVICES
    of its GPU slot: CUDA reads it at initialization, which happens in the child), chdir's to the stage,
  - runs driver.main(), then os._exit(): none of the zygote's cleanup runs in it.

Untrusted code (the candidate's cubins or host.py) is only ever loaded by the child, after the same
integrity snapshot as in a spawned driver. The zygote's environment is the runner's scrubbed one.

Protocol (one connection per child, JSON lines): the runner sends {"stage", "env", "t"} with two
descriptors (stdout write end, stderr file); the zygote answers {"pid"} (or {"error"}), then {"exit": rc,
"rusage": {...}} once it reaped the child (rc < 0: killed by signal -rc; rusage: rusage_dict). A runner that disconnects first gets its
child's group killed. The zygote exits when its stdin closes (the runner process ended).

The runner side (the Zygote client class) imports no torch.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .phases import rusage_dict

PRELOAD = ("torch", "torch.profiler", "numpy", "cuda.bindings.driver",
           "solforge.problem.loader", "solforge.compile.launcher",
           "solforge.evaluate.evaluator", "solforge.evaluate.callers", "solforge.evaluate.hardware",
           "solforge.evaluate.reference", "solforge.evaluate.driver")
# Best effort (a failure is reported in the hello, the zygote still serves): torch.profiler's first
# session runs `hasattr(torch, "_inductor")` (profiler.py, prepare_trace), and torch's lazy __getattr__
# then imports torch._inductor -> torch._dynamo -> sympy: ~800 modules, ~4 s in every fresh child,
# nearly all of the "first CUPTI session" cost (data/results/profiler/profiler_first_session.txt). Imported here
# once instead; it initializes no CUDA (checked below, as for every preload). cupti-python (the
# timer's CUPTI backend, where installed): loading it only loads libcupti; CUPTI attaches at the
# child's first measurement.
PRELOAD_OPTIONAL = ("torch._inductor", "cupti.cupti")
_MAX_MSG = 1 << 16
MAX_SPARES = 8      # spare children kept at once (one per GPU slot in use)


class ZygoteError(RuntimeError):
    pass


# ──────────────────────────────────────────── server (the zygote process) ───────────────────────
def cuda_state() -> str:
    """'uninitialized' when no CUDA driver context could exist in this process yet, else why not."""
    mods = sys.modules
    torch = mods.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch initialized CUDA"
    try:
        from cuda.bindings import driver
    except Exception:  # noqa: BLE001 - no cuda-python: nothing of ours could have called cuInit
        return "uninitialized"
    try:
        err, _ = driver.cuCtxGetCurrent()
    except Exception:  # noqa: BLE001 - no libcuda (a CPU machine)
        return "uninitialized"
    if err == driver.CUresult.CUDA_ERROR_NOT_INITIALIZED or \
            err == getattr(driver.CUresult, "CUDA_ERROR_STUB_LIBRARY", None):
        return "uninitialized"
    return f"cuInit was called (cuCtxGetCurrent -> {err})"


def _os_threads() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def _open_fds() -> set[int]:
    """The descriptors open now (not the one the listing itself used, closed by the time it returns:
    kept in a `keep` set, its number would shelter whatever is opened there later)."""
    try:
        listed = {int(x) for x in os.listdir("/proc/self/fd")}
    except OSError:
        return set()
    return {fd for fd in listed if _is_open(fd)}


def _close_others(keep: set) -> None:
    """Close every descriptor above stderr that is not in `keep`."""
    for fd in _open_fds():
        if fd > 2 and fd not in keep:
            _close(fd)


def _opened_by(step):
    """(step(), the descriptors it opened). A child's own setup before the driver (the slot's CUDA
    wait mode, cuInit; a spare's CUDA context) opens the GPU's device files and the CUDA driver's
    own pipes; the driver's descriptor sweep must keep them, or the context they belong to dies at
    its first launch ("unspecified launch failure" at the first synchronize: what a spare child did
    on the H200 while a freshly forked one, whose context is made after the sweep, passed)."""
    before = _open_fds()
    out = step()
    return out, _open_fds() - before


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _send(conn: socket.socket, obj: dict) -> None:
    try:
        conn.sendall((json.dumps(obj) + "\n").encode())
    except OSError:
        pass


def serve(sock_path: str, preload=PRELOAD, optional=PRELOAD_OPTIONAL) -> int:
    import importlib

    t0 = time.perf_counter()
    # Should an import ask torch whether CUDA is available, let it ask NVML rather than cuInit (torch's
    # own guard against "fork poisoning"); cuda_state() below refuses to fork if CUDA came up anyway.
    nvml = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    optional_failed = {}
    try:
        for name in preload:
            importlib.import_module(name)
        for name in optional:
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - the child imports it itself then, as before
                optional_failed[name] = f"{type(e).__name__}: {e}"[:300]
    finally:
        if nvml is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml
    preload_s = time.perf_counter() - t0
    state = cuda_state()
    if state != "uninitialized":
        print(json.dumps({"ready": False, "error": f"refusing to fork: {state}"}), flush=True)
        return 1
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(64)
    # Descriptors the imports opened (kept in children); everything else is closed there.
    keep = _open_fds() - {srv.fileno()}
    conns: dict[int, socket.socket] = {}       # fileno -> connection
    bufs: dict[int, tuple[bytes, list]] = {}   # fileno -> (bytes so far, descriptors so far)
    children: dict[int, socket.socket] = {}   # pid -> its runner's connection
    child_of: dict[int, int] = {}             # connection fileno -> pid
    # A child's exit must wake select() at once (the runner waits for {"exit"}): SIGCHLD writes a
    # byte into this pipe. Created after `keep`, so children close it.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    print(json.dumps({"ready": True, "pid": os.getpid(), "preload_s": round(preload_s, 3),
                      "os_threads": _os_threads(), "cuda": state,
                      "optional_failed": optional_failed}), flush=True)

    def drop(fno: int) -> None:
        c = conns.pop(fno, None)
        _, fds = bufs.pop(fno, (b"", []))
        for fd in fds:
            _close(fd)
        pid = child_of.pop(fno, None)
        if pid is not None and pid in children:
            _killpg(pid)  # its runner went away: nobody will read the results
        if c is not None:
            c.close()

    # one spare child per environment (GPU slot), made after each request: {key: {"pid", "sock"}}
    spares: dict[str, dict] = {}

    def discard_spare(key: str) -> None:
        sp = spares.pop(key, None)
        if sp:
            _killpg(sp["pid"])
            sp["sock"].close()

    def make_spare(env: dict) -> None:
        key = env_key(env)
        if key in spares:
            return
        while len(spares) >= MAX_SPARES:
            discard_spare(next(iter(spares)))
        a, b = socket.socketpair()
        try:
            pid = os.fork()
        except OSError:
            a.close()
            b.close()
            return
        if pid == 0:
            a.close()
            for sp in spares.values():    # the other spares' channels are not this one's business
                sp["sock"].close()
            _spare(env, b, srv, list(conns.values()), keep)  # never returns
        b.close()
        spares[key] = {"pid": pid, "sock": a}

    def hand_to_spare(req: dict, fds: list) -> Optional[int]:
        """The pid of the spare for this request's environment once it has the request; None when
        there is none or it died (the caller forks)."""
        sp = spares.pop(env_key(req.get("env")), None)
        if not sp:
            return None
        try:
            msg = json.dumps({"stage": req["stage"], "t": req.get("t")}).encode() + b"\n"
            socket.send_fds(sp["sock"], [msg], fds)
        except OSError:
            _killpg(sp["pid"])
            return None
        finally:
            sp["sock"].close()
        return sp["pid"]

    def fork_child(fno: int, req: dict, fds: list) -> None:
        conn = conns[fno]
        if len(fds) != 2 or "stage" not in req:
            _send(conn, {"error": "bad request"})
            for fd in fds:
                _close(fd)
            return drop(fno)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = hand_to_spare(req, fds)
        spared = pid is not None
        if pid is None:
            try:
                pid = os.fork()
            except OSError as e:
                _send(conn, {"error": f"fork failed: {e}"})
                for fd in fds:
                    _close(fd)
                return drop(fno)
            if pid == 0:
                _child(req, fds, srv, list(conns.values()), keep)  # never returns
        for fd in fds:
            _close(fd)
        children[pid] = conn
        child_of[fno] = pid
        _send(conn, {"pid": pid, "spare": spared})
        env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
        if spare_enabled(env):
            # the next candidate's process, made now: its CUDA context is created alongside this
            # candidate's (both before any timing starts) instead of after it
            make_spare(env)

    while True:
        watch = [srv, sys.stdin, wake_r] + list(conns.values())
        try:
            ready, _, _ = select.select(watch, [], [], 0.2)
        except InterruptedError:
            ready = []
        for r in ready:
            if r is wake_r:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except OSError:
                    pass
            elif r is sys.stdin:
                if not os.read(sys.stdin.fileno(), 4096):
                    for pid in list(children):
                        _killpg(pid)
                    for key in list(spares):
                        discard_spare(key)
                    return 0
            elif r is srv:
                c, _ = srv.accept()
                conns[c.fileno()] = c
                bufs[c.fileno()] = (b"", [])
            else:
                fno = r.fileno()
                try:
                    data, fds, _flags, _addr = socket.recv_fds(r, _MAX_MSG, 4)
                except OSError:
                    data, fds = b"", []
                if fno in child_of:  # a request was served; only a close is expected now
                    if not data:
                        drop(fno)
                    for fd in fds:
                        _close(fd)
                    continue
                if not data:
                    drop(fno)
                    continue
                got, have = bufs[fno]
                got += data
                have = have + list(fds)
                bufs[fno] = (got, have)
                if b"\n" in got:
                    bufs[fno] = (b"", [])
                    try:
                        req = json.loads(got.split(b"\n", 1)[0])
                    except ValueError:
                        req = {}
                    fork_child(fno, req, have)
                elif len(got) > _MAX_MSG:
                    drop(fno)
        while True:  # reap (served children report their exit; discarded spares just go)
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            for key, sp in list(spares.items()):
                if sp["pid"] == pid:  # a spare died before serving (e.g. its CUDA init failed)
                    sp["sock"].close()
                    del spares[key]
            conn = children.pop(pid, None)
            if conn is not None:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status), "rusage": rusage_dict(ru)})
                child_of.pop(conn.fileno(), None)
                drop(conn.fileno())


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _set_threads(n: Optional[str]) -> None:
    """CPU threads of this child (the runner's slot decides, solforge.orchestrate.gpus.eval_threads).
    OMP_NUM_THREADS in the request would come too late: the OpenMP runtime read the environment when
    the zygote imported torch; torch.set_num_threads sets both torch's and OpenMP's count."""
    if not n or not n.isdigit() or int(n) < 1:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(n))


def cpuset(spec: Optional[str]) -> set[int]:
    """"0,1,4-7" -> {0, 1, 4, 5, 6, 7}; only CPUs this process may use; empty when unset or bad."""
    out: set[int] = set()
    for part in (spec or "").split(","):
        a, _, b = part.strip().partition("-")
        if not a.isdigit() or (b and not b.isdigit()):
            return set()
        out.update(range(int(a), int(b or a) + 1))
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else out
    return out & allowed


def _set_cpus(spec: Optional[str]) -> None:
    """Pin this child (and the threads it starts later) to its slot's CPUs
    (solforge.orchestrate.gpus.eval_cpusets)."""
    cpus = cpuset(spec)
    if cpus:
        os.sched_setaffinity(0, cpus)


def _set_sync(mode: Optional[str]) -> str:
    """CU_CTX_SCHED_BLOCKING_SYNC (or _SPIN) on the primary context of the child's GPU, before the
    driver creates it (torch uses the primary context, so it inherits the flags). Best effort: any
    failure (no GPU, no cuda-python) leaves CUDA's default and is only reported."""
    if mode not in ("blocking", "spin"):
        return ""
    try:
        from cuda.bindings import driver as cu

        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return f"cuInit: {err}"
        err, dev = cu.cuDeviceGet(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return f"cuDeviceGet: {err}"
        flag = cu.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC if mode == "blocking" else \
            cu.CUctx_flags.CU_CTX_SCHED_SPIN
        (err,) = cu.cuDevicePrimaryCtxSetFlags(dev, int(flag))
        return "" if err == cu.CUresult.CUDA_SUCCESS else f"cuDevicePrimaryCtxSetFlags: {err}"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def _isolate(srv: socket.socket, conns: list) -> None:
    """First steps of every forked child: its own session, default signals, none of the zygote's
    sockets."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    srv.close()
    for c in conns:
        c.close()


def _apply_env(env: dict) -> list[str]:
    """The slot's environment, threads, CPUs and wait mode; returns what could not be applied (for
    the candidate's stderr, which the child only has once it runs the driver)."""
    os.environ.update(env)
    _set_threads(env.get("SOLFORGE_EVAL_THREADS"))
    _set_cpus(env.get("SOLFORGE_EVAL_CPUSET"))
    why = _set_sync(env.get("SOLFORGE_EVAL_SYNC"))
    return [f"zygote child: SOLFORGE_EVAL_SYNC not applied: {why}"] if why else []


def _run_driver(req: dict, fds: list, keep: set, t_start: float, mode: str,
                notes: tuple = ()) -> None:
    """The request's descriptors become stdout/stderr, every other descriptor the imports did not
    open is closed, then the driver runs on the stage. Never returns."""
    rc = 1
    try:
        out_fd, err_fd = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        _close_others(keep)
        for note in notes:
            print(note, file=sys.stderr)
        if req.get("t"):
            os.environ["SOLFORGE_LAUNCH_T"] = str(req["t"])
        stage = str(req["stage"])
        os.chdir(stage)
        sys.argv = [sys.argv[0], stage]
        import random

        random.seed()
        from solforge.evaluate import driver

        driver.reserve_stdout()
        rc = driver.main([stage], t_start=t_start, mode=mode)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on the child's stderr, the runner reads it
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(rc if isinstance(rc, int) else 1)


def _child(req: dict, fds: list, srv: socket.socket, conns: list, keep: set) -> None:
    """In the forked child: isolate, then run the driver. Never returns."""
    t_start = time.time()
    try:
        _isolate(srv, conns)
        notes, opened = _opened_by(
            lambda: _apply_env({str(k): str(v) for k, v in (req.get("env") or {}).items()}))
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        os._exit(1)
    _run_driver(req, fds, keep | opened, t_start, "zygote", tuple(notes))


def _init_cuda() -> None:
    """What the driver's cuda_init phase does, done ahead: the context of GPU 0 of this process's
    CUDA_VISIBLE_DEVICES (nothing on a machine without a GPU)."""
    import torch

    if torch.cuda.is_available():
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        torch.empty(1, device=dev)
        torch.cuda.synchronize(dev)


def _spare(env: dict, sock: socket.socket, srv: socket.socket, conns: list, keep: set) -> None:
    """A spare child (never returns): isolated like any child, with the environment of the request
    it was made after, it creates its CUDA context while the current candidate runs, then waits on
    its private socket for one request (stage, launch time, stdout/stderr descriptors), closes the
    socket and runs the driver exactly as a freshly forked child does. An empty read (the zygote
    discarded it or died) ends it."""
    try:
        _isolate(srv, conns)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)        # the zygote's stdout is its hello pipe to the runner
        notes, opened = _opened_by(lambda: (_apply_env(env), _init_cuda())[0])
        data, fds = b"", []
        while b"\n" not in data:
            chunk, more, _flags, _addr = socket.recv_fds(sock, _MAX_MSG, 4)
            if not chunk:
                os._exit(0)
            data, fds = data + chunk, fds + list(more)
        t_start = time.time()
        sock.close()
        req = json.loads(data.split(b"\n", 1)[0])
    except BaseException:  # noqa: BLE001 - the zygote sees it die and forks the next one itself
        os._exit(1)
    _run_driver(req, fds, keep | opened, t_start, "zygote-spare", tuple(notes))


def spare_enabled(env: Optional[dict] = None) -> bool:
    """SOLFORGE_EVAL_SPARE (default on) in the request's extra environment, else the zygote's: keep
    a spare child with its CUDA context made ahead for this environment.

    It was off while a spare-served candidate died in its first synchronize on the H200 with
    'unspecified launch failure' (data/results/compiler_sweep/spare_diag_h200.txt): the driver's
    descriptor sweep closed the CUDA context's own descriptors, opened before it (fixed:
    _opened_by). On since the H200 ran 23 spare-served evaluations, every workload passed, kernel
    times 1.0005x those of freshly forked children over 92 workloads, 35.8 evaluations a GPU-minute
    against 34.5 (data/results/eval_throughput/eval_throughput_h200_2026-12-04_spare.md)."""
    v = (env or {}).get("SOLFORGE_EVAL_SPARE", os.environ.get("SOLFORGE_EVAL_SPARE", "1"))
    return str(v).strip().lower() not in ("0", "false", "no")


def env_key(env: Optional[dict]) -> str:
    """Requests a spare may serve: the same extra environment exactly (GPU slot, threads, CPUs)."""
    return json.dumps({str(k): str(v) for k, v in (env or {}).items()}, sort_keys=True)


# ──────────────────────────────────────────── client (the runner's side; no torch) ──────────────
class ZygoteChild:
    """A forked evaluator as the runner sees it: Popen's poll()/wait()/pid/returncode."""

    def __init__(self, conn: socket.socket, pid: int, zygote: "Zygote"):
        self.conn, self.pid, self.zygote = conn, pid, zygote
        self.returncode: Optional[int] = None
        self.rusage: Optional[dict] = None  # the zygote's wait4 of this child (rusage_dict)
        self.note = ""
        self._buf = b""

    def poll(self) -> Optional[int]:
        if self.returncode is not None:
            return self.returncode
        while True:
            r, _, _ = select.select([self.conn], [], [], 0)
            if not r:
                return None
            try:
                data = self.conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # the zygote died under us: our child is an orphan now; end it
                _killpg(self.pid)
                self.note = "the zygote exited before reporting this child's exit"
                self.returncode = -signal.SIGKILL
                self.conn.close()
                return self.returncode
            self._buf += data
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "exit" in msg:
                    self.rusage = msg.get("rusage") if isinstance(msg.get("rusage"), dict) else None
                    self.returncode = int(msg["exit"])
                    self.conn.close()
                    return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        t0 = time.monotonic()
        while self.poll() is None:
            if timeout is not None and time.monotonic() - t0 > timeout:
                raise TimeoutError(f"child {self.pid} still running after {timeout} s")
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        _killpg(self.pid)


class Zygote:
    """One zygote process (started on creation; ready() waits for its preloads)."""

    def __init__(self, python: str, env: dict, log_path: Optional[Path] = None):
        self.dir = tempfile.mkdtemp(prefix="solforge-zygote-")
        self.sock_path = os.path.join(self.dir, "sock")
        self.log_path = Path(log_path or os.path.join(self.dir, "zygote.log"))
        self._log = open(self.log_path, "wb")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen([python, "-m", "solforge.evaluate.zygote", self.sock_path],
                                     env=env, cwd=self.dir, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log,
                                     start_new_session=True)
        self.hello: Optional[dict] = None
        self.error = ""
        self._lock = threading.Lock()

    def ready(self, timeout: float = 180.0) -> bool:
        with self._lock:
            if self.hello is not None:
                return bool(self.hello.get("ready")) and self.alive()
            if self.error:
                return False
            r, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if r else b""
            try:
                self.hello = json.loads(line) if line else None
            except ValueError:
                self.hello = None
            if not self.hello or not self.hello.get("ready"):
                self.error = (self.hello or {}).get("error") or \
                    f"no hello within {timeout:.0f} s: {self.log_tail()}"
                self.hello = self.hello or {"ready": False}
                self.close()
                return False
            self.hello["startup_s"] = round(time.monotonic() - self.t_start, 3)
            return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def spawn(self, stage: Path, out_fd: int, err_fd: int, env: Optional[dict] = None,
              t_launch: Optional[float] = None, timeout: float = 30.0) -> ZygoteChild:
        if not self.ready():
            raise ZygoteError(f"zygote not available: {self.error}")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.sock_path)
            msg = json.dumps({"stage": str(stage), "env": env or {}, "t": t_launch}).encode() + b"\n"
            socket.send_fds(conn, [msg], [out_fd, err_fd])
            r, _, _ = select.select([conn], [], [], timeout)
            buf = b""
            while r:
                data = conn.recv(4096)
                if not data:
                    break
                buf += data
                if b"\n" in buf:
                    break
                r, _, _ = select.select([conn], [], [], timeout)
            line, rest = (buf.split(b"\n", 1) + [b""])[:2] if b"\n" in buf else (buf, b"")
            reply = json.loads(line) if line.strip() else {}
        except (OSError, ValueError) as e:
            conn.close()
            raise ZygoteError(f"zygote request failed: {type(e).__name__}: {e}") from None
        if "pid" not in reply:
            conn.close()
            raise ZygoteError(f"zygote refused: {reply.get('error') or 'no answer'}")
        child = ZygoteChild(conn, int(reply["pid"]), self)
        child._buf = rest
        return child

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # the zygote's signal to kill its children and exit
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        finally:
            self._log.close()
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m solforge.evaluate.zygote SOCKET_PATH", file=sys.stderr)
        return 2
    return serve(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
