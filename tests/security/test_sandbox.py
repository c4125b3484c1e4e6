"""solforge.sandbox against hostile Python: what it can see, reach, write and keep running."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from solforge.sandbox import Limits, SandboxError, run_python, run_python_batch, sandbox_env, scrub
from solforge.sandbox import bwrap

from .conftest import CANARY_ENV, MARK, group_gone, leaks_in_files

ENTRY = "tests.security.hostile"
needs_bwrap = pytest.mark.skipif(bwrap.available() is None, reason="bubblewrap unavailable here")


def hostile(source: str, **kw):
    return run_python(ENTRY, "exec_source", {"source": source}, **{"timeout_s": 20, **kw})


def test_environment_is_built_from_an_allowlist():
    out = hostile("import os\nRESULT = {'env': dict(os.environ), 'cwd': os.getcwd()}")
    env = out["env"]
    assert not set(CANARY_ENV) & set(env)
    assert MARK not in json.dumps(env)
    assert env["HOME"] == out["cwd"] == env["TMPDIR"]  # private temp dir
    assert "PYTHONPATH" in env and "PATH" in env


def test_proc_environ_of_other_processes_is_out_of_reach():
    src = ("import os\nseen = []\n"
           "for p in os.listdir('/proc'):\n"
           "    if p.isdigit():\n"
           "        try: seen.append(open(f'/proc/{p}/environ','rb').read().decode('latin1'))\n"
           "        except OSError: pass\n"
           "RESULT = {'environ': seen}")
    assert MARK not in json.dumps(hostile(src))


@needs_bwrap
def test_secret_files_under_home_are_hidden(tmp_path, monkeypatch):
    home = Path(os.path.expanduser("~"))
    probe = home / ".ssh" / f"id_{MARK.lower()}"
    created = not probe.parent.exists()
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(f"-----BEGIN KEY----- {MARK}")
    try:
        out = hostile(f"import os\np = {str(probe)!r}\n"
                      "try: RESULT = {'key': open(p).read()}\nexcept OSError as e: RESULT = {'err': str(e)}")
        assert MARK not in json.dumps(out) and "err" in out
    finally:
        probe.unlink()
        if created:
            probe.parent.rmdir()


@needs_bwrap
def test_filesystem_is_read_only_outside_the_temp_dir(tmp_path):
    target = Path.cwd() / f"escape-{MARK}"
    with pytest.raises(SandboxError, match="Read-only file system|Permission"):
        hostile(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists()
    assert not leaks_in_files(tmp_path)


def test_temp_dir_is_removed_afterwards():
    out = hostile("import os\nopen('left.txt','w').write('x')\nRESULT = {'cwd': os.getcwd()}")
    assert not Path(out["cwd"]).exists()


def test_process_creation_is_refused_in_one_line():
    for src in ("import os\nos.system('true')", "import subprocess\nsubprocess.run(['true'])",
                "import os\nos.execv('/bin/true', ['true'])", "import os\nos.fork()"):
        with pytest.raises(SandboxError) as e:
            hostile(src)
        assert "is not allowed here" in str(e.value) and "\n" not in str(e.value)


def test_loopback_connection_is_refused_and_the_server_gets_nothing():
    got: list[bytes] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(3)
    port = srv.getsockname()[1]

    def accept():
        try:
            c, _ = srv.accept()
            got.append(c.recv(1024))
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    with pytest.raises(SandboxError):
        hostile(f"import os, socket\ns = socket.create_connection(('127.0.0.1', {port}))\n"
                "s.sendall(os.environ.get('OPENAI_API_KEY', 'none').encode())")
    t.join()
    srv.close()
    assert got == []


@needs_bwrap
def test_no_network_even_through_ctypes():
    """The audit hook is only the clear message; the empty network namespace is the wall."""
    src = ("import ctypes, socket, struct\nlibc = ctypes.CDLL(None)\n"
           "fd = socket.socket().detach()\n"
           "addr = struct.pack('<HH4s8x', socket.AF_INET, socket.htons(22), socket.inet_aton('127.0.0.1'))\n"
           "RESULT = {'rc': libc.connect(fd, addr, len(addr))}")
    assert hostile(src)["rc"] != 0


def test_hang_ends_at_the_timeout_and_its_group_is_gone():
    t0 = time.monotonic()
    with pytest.raises(SandboxError) as e:
        hostile("import time\nwhile True: time.sleep(1)", timeout_s=2)
    assert e.value.kind == "timeout" and time.monotonic() - t0 < 15
    assert e.value.pgid and group_gone(e.value.pgid)


@needs_bwrap
def test_daemonized_leftovers_die_with_the_sandbox():
    """A child that leaves its process group (setsid) still dies: it lives in the sandbox's pid
    namespace, which ends with the sandbox."""
    marker = f"sleeper-{MARK}"
    src = ("import ctypes, os\nlibc = ctypes.CDLL(None)\npid = libc.fork()\n"
           "if pid == 0:\n    os.setsid()\n"
           f"    os.execv('/bin/sleep', ['/bin/sleep', '300', {marker!r}])\n"
           "RESULT = {'child': pid}")
    hostile(src, allow_subprocess=True)  # the wall under test, not the audit hook
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps


def test_cpu_burn_is_stopped_by_the_cpu_limit():
    with pytest.raises(SandboxError) as e:
        hostile("while True: pass", timeout_s=30, limits=Limits(cpu_s=1))
    assert e.value.kind == "crash" and "CPU time limit" in str(e.value)


def test_big_file_is_stopped_by_the_file_size_limit():
    with pytest.raises(SandboxError, match="File too large|exceeded|SIGXFSZ"):
        hostile("open('big','wb').write(b'x' * (8 << 20))", limits=Limits(fsize_bytes=1 << 20))


def test_oversized_answer_is_refused():
    with pytest.raises(SandboxError) as e:
        hostile("RESULT = {'x': 'a' * (4 << 20)}", limits=Limits(result_bytes=1 << 20))
    assert e.value.kind == "too_large"


def test_answer_replaced_by_a_fifo_or_dev_zero_does_not_hang():
    t0 = time.monotonic()
    for src in ("import os\nos.mkfifo('result.json')\nos._exit(0)",
                "import os\nos.symlink('/dev/zero', 'result.json')\nos._exit(0)"):
        with pytest.raises(SandboxError) as e:
            hostile(src)
        assert e.value.kind in ("bad_output", "crash")
    assert time.monotonic() - t0 < 20


def test_answer_is_json_never_pickle(tmp_path):
    flag = tmp_path / "unpickled"
    src = ("import pickle, os\n"
           "class P:\n    def __reduce__(self):\n"
           f"        return (os.system, ('touch {flag}',))\n"
           "open('result.json','wb').write(pickle.dumps(P()))\nos._exit(0)")
    with pytest.raises(SandboxError) as e:
        hostile(src)
    assert e.value.kind == "bad_output" and not flag.exists()


def test_error_messages_and_logs_are_scrubbed(monkeypatch):
    key = CANARY_ENV["OPENAI_API_KEY"]
    with pytest.raises(SandboxError) as e:
        hostile(f"print({key!r})\nraise RuntimeError({key!r})")
    assert MARK not in str(e.value) and MARK not in e.value.log


def test_batch_items_fail_alone():
    payloads = [{"source": "RESULT = {'a': 1}"},
                {"source": "import time\ntime.sleep(600)"},
                {"source": "import os\nos._exit(3)"},
                {"source": "import os\nos.system('true')"},
                {"source": "RESULT = {'b': 2}"}]
    t0 = time.monotonic()
    out = run_python_batch(ENTRY, "exec_source", payloads, timeout_s=2, warm="warm")
    assert time.monotonic() - t0 < 30
    assert out[0] == {"a": 1} and out[4] == {"b": 2}
    assert [getattr(x, "kind", None) for x in out[1:4]] == ["timeout", "crash", "error"]


def test_fallback_without_bwrap_says_so_once_and_keeps_the_allowlist(tmp_path):
    code = ("import logging, json\nfrom solforge.sandbox import run_python\n"
            "a = run_python('tests.security.hostile', 'exec_source', "
            "{'source': 'import os\\nRESULT = {\"env\": dict(os.environ)}'})\n"
            "run_python('tests.security.hostile', 'echo', {'x': 1})\n"
            "print(json.dumps(a))\n")
    env = dict(os.environ, SOLFORGE_SANDBOX_BWRAP="0", PYTHONPATH=str(Path.cwd()))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("WITHOUT network/filesystem isolation") == 1
    assert MARK not in r.stdout


def test_sandbox_env_drops_every_secret_looking_name():
    env = sandbox_env(source={**CANARY_ENV, "PATH": "/bin", "TORCH_TOKEN": MARK, "SOLFORGE_DB": MARK,
                              "SOLFORGE_DB_PATH": MARK, "OMP_NUM_THREADS": "2", "no_proxy": MARK})
    assert MARK not in json.dumps(env) and env["OMP_NUM_THREADS"] == "2"


def test_scrub_removes_env_values_and_key_shapes():
    text = f"{CANARY_ENV['GITHUB_TOKEN']} sk-abcdefghijklmnop1234 hf_abcdefghijklmnopqrstuvwx"
    out = scrub(text)
    assert MARK not in out and "sk-abcdefghijklmnop1234" not in out and "hf_abc" not in out


def test_reduced_isolation_is_said_once_per_process_tree():
    """The line on reduced isolation: the first process says it, the processes it starts do not."""
    code = ("import subprocess, sys; from solforge.sandbox import bwrap; bwrap.available(); "
            "[subprocess.run([sys.executable, '-c', 'from solforge.sandbox import bwrap; "
            "bwrap.available()']) for _ in range(3)]")
    env = {k: v for k, v in os.environ.items() if k != "SOLFORGE_SANDBOX_BWRAP_SAID"}
    env["SOLFORGE_SANDBOX_BWRAP"] = "0"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count("WITHOUT network/filesystem isolation") == 1, r.stderr
