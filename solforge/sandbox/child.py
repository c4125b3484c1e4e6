"""Inside the sandbox: `python -m solforge.sandbox.child REQUEST.json` (started by runner.py only).

Sets the resource limits, imports the trusted entry module, refuses process creation and network
connections from then on (an audit hook: a clear one-line refusal for the common case; the real walls
are bwrap's namespaces and the limits), calls the entry function with the JSON payload and writes its
JSON answer to result.json in the working dir. Batch requests fork one child per payload after the
module (and its warm-up) is imported, each in its own process group with its own CPU limit and
wall-clock timeout, so one payload's hang or crash costs only that payload.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import sys
import time
import traceback

_BLOCKED_ALWAYS = ("socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind")
_BLOCKED_SPAWN = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.fork",
                  "os.forkpty", "pty.spawn")


class SandboxRefusal(PermissionError):
    pass


def _set_limit(which: int, value) -> None:
    if value is None:
        return
    value = int(value)
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else min(hard, value)))
    except (ValueError, OSError):
        pass  # a limit the kernel refuses here is one wall less, not a reason to fail


def apply_limits(lim: dict) -> None:
    if lim.get("cpu_s"):
        cpu = max(1, int(lim["cpu_s"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
    _set_limit(resource.RLIMIT_AS, lim.get("as_bytes"))
    _set_limit(resource.RLIMIT_NPROC, lim.get("nproc"))
    _set_limit(resource.RLIMIT_FSIZE, lim.get("fsize_bytes"))
    _set_limit(resource.RLIMIT_NOFILE, lim.get("nofile"))
    _set_limit(resource.RLIMIT_CORE, 0)


def install_guard(allow_subprocess: bool) -> None:
    blocked = _BLOCKED_ALWAYS + (() if allow_subprocess else _BLOCKED_SPAWN)

    def hook(event: str, args) -> None:
        if event.startswith(blocked):
            raise SandboxRefusal(f"solforge sandbox: {event} is not allowed here")

    sys.addaudithook(hook)


def _entry(req: dict):
    mod = importlib.import_module(req["module"])
    return mod, getattr(mod, req["function"])


def _call(fn, payload) -> dict:
    try:
        out = fn(payload)
        if not isinstance(out, dict):
            return {"__sandbox_error__": f"entry returned {type(out).__name__}, not a dict"}
        return out
    except BaseException as e:  # noqa: BLE001 - everything the untrusted code raises is an answer
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                      if os.path.abspath(f.filename) != os.path.abspath(__file__)), "")
        msg = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        return {"__sandbox_error__": msg + (f" ({where})" if where else "")}


def _write_json(path: str, obj) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        data = json.dumps(obj, allow_nan=True)
    except (TypeError, ValueError) as e:
        data = json.dumps({"__sandbox_error__": f"answer is not JSON: {e}"})
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, path)


def _run_one(req: dict) -> None:
    _, fn = _entry(req)
    install_guard(req.get("allow_subprocess", False))
    _write_json("result.json", _call(fn, req["payload"]))


def _run_batch(req: dict) -> None:
    mod, fn = _entry(req)
    if req.get("warm"):
        getattr(mod, req["warm"])()
    timeout = float(req["timeout_s"])
    cap = int(req.get("item_result_bytes") or req["limits"].get("result_bytes") or (16 << 20))
    os.makedirs("items", exist_ok=True)
    answers = []
    for i, payload in enumerate(req["payloads"]):
        path = os.path.join("items", f"{i}.json")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setpgid(0, 0)
                if req["limits"].get("cpu_s"):
                    cpu = max(1, int(req["limits"]["cpu_s"] + 0.999))
                    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
                install_guard(req.get("allow_subprocess", False))
                _write_json(path, _call(fn, payload))
            except BaseException:  # noqa: BLE001
                code = 70
            finally:
                os._exit(code)
        deadline, status = time.monotonic() + timeout, None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.monotonic() > deadline:
                break
            else:
                time.sleep(0.02)
        try:
            os.killpg(pid, signal.SIGKILL)  # the item's stray processes too
        except (ProcessLookupError, PermissionError):
            pass
        if status is None:
            os.waitpid(pid, 0)
            answers.append({"__sandbox_error__": f"timed out after {timeout:g} s (killed)",
                            "__kind__": "timeout"})
            continue
        answers.append(_item_answer(path, status, cap))
    _write_json("result.json", {"items": answers})


def _item_answer(path: str, status: int, cap: int) -> dict:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        why = " (CPU time limit)" if sig == signal.SIGXCPU else ""
        return {"__sandbox_error__": f"killed by {name}{why}", "__kind__": "crash"}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {"__sandbox_error__": f"exited with code {os.WEXITSTATUS(status)} and no answer",
                "__kind__": "crash"}
    with os.fdopen(fd, "rb") as f:
        import stat

        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return {"__sandbox_error__": f"answer larger than {cap} bytes or not a file",
                    "__kind__": "too_large"}
        try:
            return json.loads(f.read(cap + 1))
        except ValueError as e:
            return {"__sandbox_error__": f"answer is not JSON ({e})", "__kind__": "bad_output"}


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        req = json.load(f)
    os.chdir(os.path.dirname(os.path.abspath(argv[1])))
    batch = "payloads" in req
    # a batch's CPU limit is per item (set in each forked child); the supervisor mostly waits
    apply_limits({**req["limits"], "cpu_s": None} if batch else req["limits"])
    if batch:
        _run_batch(req)
    else:
        _run_one(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
