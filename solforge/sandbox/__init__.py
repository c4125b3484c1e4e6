"""One way to run Python that nobody here wrote: a candidate's CuTe DSL module, a dataset's
reference.py (import, trace, run), a baseline. Stdlib only, so the bare GPU box can use it.

    from solforge.sandbox import run_python, SandboxError

    try:
        answer = run_python("solforge.roofline.sandboxed", "count", {"dir": "/data/p1"}, timeout_s=60)
    except SandboxError as e:          # str(e) is one line, secrets scrubbed; e.kind, e.log
        print(f"p1: {e}")

`module.function(payload: dict) -> dict` is a trusted entry point (a solforge module) that then runs
the untrusted code. Payload and answer cross the boundary as JSON (never pickle); the answer is capped
(Limits.result_bytes, 16 MiB by default). `run_python_batch(module, function, payloads, warm=...)` runs
many payloads in one sandbox: the module (and `module.warm()`, e.g. importing torch) is loaded once,
then each payload runs in a forked child with its own timeout and CPU limit.

The process: fresh (`subprocess`, new session, inherited descriptors closed), killed as a process
group on timeout (and its leftovers killed when it ends); the environment built from an allowlist
(env.py: no API keys, tokens, proxies, database URLs; HOME and TMPDIR point at a private temp dir that
is also its cwd and is removed afterwards); resource limits (Limits: CPU time, address space,
processes, file size, open files; no core dumps); inside bubblewrap where the machine allows it
(bwrap.py: no network, read-only filesystem except the temp dir, own /proc, no capabilities, HOME
hidden), else one log line says isolation is reduced. The entry function runs under an audit hook
that refuses process creation (unless allow_subprocess=True, e.g. torch.compile) and socket
connections with a one-line PermissionError; that hook gives clear errors, the namespaces and limits
are the walls.

Options: timeout_s (wall clock), limits=Limits(...), gpu=True (GPU device nodes visible, no
address-space limit), binds=(folders that stay writable), read_paths=(inputs under /tmp or HOME, which
are otherwise hidden), env_extra={allowlisted names only}.

scrub(text) (redact.py) removes secret values and key-shaped strings from any text before it is
stored, cached, logged or sent to a model.
"""

from .env import sandbox_env
from .redact import REDACTED, scrub, secret_values
from .runner import Limits, SandboxError, run_python, run_python_batch

__all__ = ["Limits", "REDACTED", "SandboxError", "run_python", "run_python_batch", "sandbox_env", "scrub",
           "secret_values"]
