"""run_python / run_python_batch: the parent's side of the sandbox (see the package docstring)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional, Sequence

from . import bwrap
from .env import REPO_ROOT, sandbox_env
from .redact import scrub

_LOG_TAIL = 64 << 10
# the sandboxes this process has running: work folder -> the process group leader's pid (None
# until started), for stop_all
_LIVE: dict[str, Optional[int]] = {}


class SandboxError(RuntimeError):
    """Untrusted code did not give an answer. str(e) is one line (scrubbed); `kind` is one of
    timeout | crash | error | too_large | bad_output; `log` the scrubbed tail of its stdout/stderr."""

    def __init__(self, message: str, kind: str = "error", log: str = "", pgid: Optional[int] = None):
        line = (scrub(message).strip().splitlines() or [kind])[0]
        super().__init__(line[:500])
        self.kind = kind
        self.log = log
        self.pgid = pgid  # the process group that ran it (killed), for callers that check it is gone


@dataclass(frozen=True)
class Limits:
    """Resource limits of a sandboxed process (None: no limit of that kind).

    cpu_s defaults to the wall-clock timeout plus 5 s. as_bytes (address space) is on by default for
    CPU work and off for GPU work: the CUDA driver reserves far more virtual memory than it uses.
    nproc counts every process and thread of the user, so its default is what the user runs now
    plus 512 (root ignores it anyway)."""

    cpu_s: Optional[float] = None
    as_bytes: Optional[int] = 32 << 30
    nproc: Optional[int] = None
    fsize_bytes: Optional[int] = 256 << 20
    nofile: Optional[int] = 4096
    result_bytes: int = 16 << 20


def _user_tasks() -> int:
    uid, n = os.getuid(), 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                n += int(fields.get("Threads", "1"))
        except (OSError, ValueError, KeyError):
            continue
    return n


def _resolved(limits: Optional[Limits], timeout_s: float, gpu: bool) -> Limits:
    lim = limits or (Limits(as_bytes=None) if gpu else Limits())
    if lim.cpu_s is None:
        lim = replace(lim, cpu_s=timeout_s + 5)
    if lim.nproc is None:
        lim = replace(lim, nproc=_user_tasks() + 512)
    return lim


def _read_capped(path: str, cap: int, what: str = "the sandboxed process") -> bytes:
    """A regular file's bytes, at most cap (the untrusted side could leave a FIFO or a symlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"{what}: its answer is not a regular file", "bad_output")
        if st.st_size > cap:
            raise SandboxError(f"{what}: its answer is {st.st_size} bytes, over the {cap}-byte cap", "too_large")
        return f.read(cap + 1)


def _log_tail(f) -> str:
    try:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - _LOG_TAIL))
        return scrub(f.read(_LOG_TAIL).decode("utf-8", "replace"))
    except OSError:
        return ""


def _last_line(log: str) -> str:
    lines = [x for x in log.strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rmtree(path: str) -> None:
    def retry(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


def stop_all() -> None:
    """Kill every sandbox this process still runs and remove its folder. For a process that is being
    stopped itself (a matching child sent SIGTERM at a run's end): its `finally` blocks will not run,
    and its sandboxes would otherwise trace on to their own time limit and leave their folders."""
    for work, pid in list(_LIVE.items()):
        if pid is not None:
            _kill_group(pid)
        _rmtree(work)
        _LIVE.pop(work, None)


def _launch(request: dict, *, wall_s: float, gpu: bool, binds: Sequence[str], read_paths: Sequence[str],
            env_extra: Optional[dict], python: Optional[str], what: str) -> dict:
    work = tempfile.mkdtemp(prefix="solforge-sandbox-")
    _LIVE[work] = None
    try:
        req_path = os.path.join(work, "request.json")
        with open(req_path, "w") as f:
            json.dump(request, f)
        env = sandbox_env(home=work, extra=env_extra)
        pypath = env["PYTHONPATH"].split(os.pathsep)
        argv = [python or sys.executable, "-s", "-B", "-m", "solforge.sandbox.child", req_path]
        argv = bwrap.wrap(argv, work, gpu=gpu, binds=tuple(binds),
                          keep_visible=(str(REPO_ROOT), *pypath, *read_paths))
        with open(os.path.join(work, "log.txt"), "w+b") as logf:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            _LIVE[work] = proc.pid
            try:
                rc = proc.wait(timeout=wall_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                raise SandboxError(f"{what} timed out after {wall_s:g} s (its process group was killed)",
                                   "timeout", _log_tail(logf), pgid=proc.pid) from None
            finally:
                _kill_group(proc.pid)  # whatever it left behind in its group
            log = _log_tail(logf)
        try:
            data = _read_capped(os.path.join(work, "result.json"), request["limits"]["result_bytes"], what)
        except FileNotFoundError:
            # bwrap passes a signal death on as exit code 128 + signal
            sig = -rc if rc < 0 else rc - 128 if rc > 128 and bwrap.available() else 0
            how = (f"was killed by {signal.Signals(sig).name}" if sig in signal.Signals._value2member_map_
                   else f"exited with code {rc}")
            if sig == signal.SIGXCPU:
                how += " (CPU time limit)"
            elif sig == signal.SIGXFSZ:
                how += " (file size limit)"
            raise SandboxError(f"{what} {how} without an answer: {_last_line(log)}"
                               f" [{time.monotonic() - t0:.1f} s]", "crash", log) from None
        except OSError as e:
            raise SandboxError(f"{what}: its answer cannot be read ({e})", "bad_output", log) from None
        try:
            out = json.loads(data)
        except ValueError as e:
            raise SandboxError(f"{what}: its answer is not JSON ({e})", "bad_output", log) from None
        if not isinstance(out, dict):
            raise SandboxError(f"{what}: its answer is not a JSON object", "bad_output", log)
        out["__log__"] = log
        return out
    finally:
        _rmtree(work)
        _LIVE.pop(work, None)


def _answer(out: Any, what: str, log: str = "") -> dict:
    if not isinstance(out, dict):
        raise SandboxError(f"{what}: its answer is not a JSON object", "bad_output", log)
    if "__sandbox_error__" in out:
        raise SandboxError(f"{what}: {out['__sandbox_error__']}", str(out.get("__kind__", "error")), log)
    return out


def run_python(module: str, function: str, payload: dict, *, timeout_s: float = 60.0,
               limits: Optional[Limits] = None, gpu: bool = False, allow_subprocess: bool = False,
               binds: Sequence[str] = (), read_paths: Sequence[str] = (),
               env_extra: Optional[dict] = None, python: Optional[str] = None) -> dict:
    """Call module.function(payload) in a fresh sandboxed process; its dict answer, or SandboxError."""
    lim = _resolved(limits, timeout_s, gpu)
    req = {"module": module, "function": function, "payload": payload, "limits": asdict(lim),
           "allow_subprocess": allow_subprocess}
    what = f"sandboxed {module}.{function}"
    out = _launch(req, wall_s=timeout_s, gpu=gpu, binds=binds, read_paths=read_paths,
                  env_extra=env_extra, python=python, what=what)
    log = out.pop("__log__", "")
    return _answer(out, what, log)


def run_python_batch(module: str, function: str, payloads: Sequence[dict], *, timeout_s: float = 60.0,
                     warm: Optional[str] = None, warm_timeout_s: float = 120.0,
                     limits: Optional[Limits] = None, gpu: bool = False, allow_subprocess: bool = False,
                     binds: Sequence[str] = (), read_paths: Sequence[str] = (),
                     env_extra: Optional[dict] = None,
                     python: Optional[str] = None) -> list[dict | SandboxError]:
    """Call module.function on each payload, one forked child per payload inside ONE sandbox (the
    module and module.warm() are imported and run once, before the forks). timeout_s and the CPU
    limit are per payload. Returns one answer or SandboxError per payload, in order; raises
    SandboxError only when the whole sandbox failed (then no payload has an answer).

    The payloads of one batch share a sandbox: none of them reaches the caller's secrets, network or
    files, but one could disturb another's answer. Batch only payloads of one trust domain (e.g. the
    problems of one dataset); use run_python for one-per-process."""
    if not payloads:
        return []
    lim = _resolved(limits, timeout_s, gpu)
    req = {"module": module, "function": function, "payloads": list(payloads), "warm": warm,
           "timeout_s": timeout_s, "limits": asdict(lim), "allow_subprocess": allow_subprocess}
    # each item's answer is capped inside; the batch's whole answer may hold all of them
    req["item_result_bytes"] = lim.result_bytes
    req["limits"]["result_bytes"] = lim.result_bytes * len(payloads) + (1 << 20)
    what = f"sandboxed {module}.{function}"
    out = _launch(req, wall_s=warm_timeout_s + len(payloads) * (timeout_s + 2), gpu=gpu,
                  binds=binds, read_paths=read_paths, env_extra=env_extra, python=python, what=what)
    log = out.pop("__log__", "")
    items = _answer(out, what, log).get("items")
    if not isinstance(items, list) or len(items) != len(payloads):
        raise SandboxError(f"{what}: the batch answer has the wrong shape", "bad_output", log)
    answers: list[dict | SandboxError] = []
    for it in items:
        try:
            answers.append(_answer(it, what))
        except SandboxError as e:
            answers.append(e)
    return answers
