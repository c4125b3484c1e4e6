"""bubblewrap (`bwrap`): no network and a read-only view of the filesystem for untrusted code.

The sandboxed process sees / read-only (it needs Python, the venv, torch and solforge), a fresh /tmp,
/dev without devices except the GPU's when asked, its own /proc (its own processes only: no other
process's environment), no network (a new, empty network namespace), no capabilities, and one
writable folder: its private temp dir. The caller's HOME is an empty tmpfs, with only the folders the
process must read (venv, repo, PYTHONPATH, inputs) shown again, read-only, and credential folders
inside those hidden again.

Where bwrap is missing or user namespaces are off, `available()` says so once, in one log line, and
the sandbox runs with the rest of its rules (allowlisted env, private cwd, limits, own session).
SOLFORGE_SANDBOX_BWRAP=0 turns it off on purpose (same line). Once per process tree: the line leaves
a mark in the environment, so processes started after it (matching workers, lanes) stay silent.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Optional

log = logging.getLogger("solforge.sandbox")

# under HOME: what may hold credentials (hidden when HOME itself must stay visible)
_HOME_SECRETS = (".ssh", ".aws", ".azure", ".config", ".gnupg", ".docker", ".kube", ".netrc",
                 ".git-credentials", ".pypirc", ".huggingface", ".cache/huggingface", ".prefect",
                 ".bash_history", ".python_history", ".duckdbrc")


# set by the first process of a tree that said why bwrap is not used; its children inherit it
_SAID = "SOLFORGE_SANDBOX_BWRAP_SAID"


@lru_cache(maxsize=1)
def available() -> Optional[str]:
    """Path of a working bwrap, or None (after one log line saying why and what still holds)."""
    if os.environ.get("SOLFORGE_SANDBOX_BWRAP", "1").lower() in ("0", "off", "false", "no"):
        why = "turned off by SOLFORGE_SANDBOX_BWRAP"
    else:
        exe = shutil.which("bwrap")
        if exe is None:
            why = "bwrap not found (Debian/Ubuntu: apt-get install bubblewrap)"
        else:
            try:
                r = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--cap-drop", "ALL",
                                    "--die-with-parent", "true"], capture_output=True, timeout=20,
                                   stdin=subprocess.DEVNULL)
                if r.returncode == 0:
                    return exe
                why = "bwrap cannot create namespaces here (" + \
                    (r.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1] + ")"
            except (OSError, subprocess.SubprocessError) as e:
                why = f"bwrap failed to start ({e})"
    if os.environ.get(_SAID) != why:
        os.environ[_SAID] = why
        log.warning("solforge sandbox: %s; untrusted code runs WITHOUT network/filesystem isolation "
                    "(still: allowlisted env, private temp dir, resource limits, own process group)",
                    why)
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _visibility(homes: list[str], keep: list[str]) -> list[str]:
    """HOME hidden, then what the process must read shown again (read-only), then any credential
    folder that a shown path would expose hidden once more."""
    out: list[str] = []
    homes = [os.path.realpath(h) for h in homes if h and os.path.isdir(h) and os.path.realpath(h) != "/"]
    for h in dict.fromkeys(homes):
        out += ["--tmpfs", h]
    shown = []
    for p in dict.fromkeys(os.path.realpath(k) for k in keep if k and os.path.exists(k)):
        if _under(p, "/tmp") or any(_under(p, h) for h in homes):
            out += ["--ro-bind", p, p]
            shown.append(p)
    for h in homes:
        for rel in _HOME_SECRETS:
            p = os.path.join(h, rel)
            if not any(_under(p, s) for s in shown) or not os.path.exists(p):
                continue
            out += ["--tmpfs", p] if os.path.isdir(p) else ["--ro-bind", "/dev/null", p]
    return out


def wrap(argv: list[str], workdir: str, *, gpu: bool = False, binds: tuple[str, ...] = (),
         keep_visible: tuple[str, ...] = ()) -> list[str]:
    """argv run inside bwrap, or argv itself when bwrap is not available.

    binds: extra folders that stay writable (the caller's own output dirs, e.g. a compile cache).
    keep_visible: paths the process must read (repo, PYTHONPATH, input folders) that may lie under
    HOME or /tmp, which are otherwise hidden."""
    exe = available()
    if exe is None:
        return argv
    out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
           "--tmpfs", "/run", "--unshare-all", "--cap-drop", "ALL", "--die-with-parent",
           "--new-session"]
    keep = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            *keep_visible]
    out += _visibility([os.path.expanduser("~"), os.environ.get("HOME", "")], keep)
    if gpu:
        for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
            out += ["--dev-bind", dev, dev]
    for b in (workdir, *binds):
        out += ["--bind", b, b]
    out += ["--chdir", workdir, "--"]
    return out + argv
