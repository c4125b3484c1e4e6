"""A real `prefect server` on 127.0.0.1 for tests, with its own PREFECT_HOME (sqlite) in a temp dir."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

PREFECT = str(Path(sys.executable).parent / "prefect")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_env(home: Path, api_url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="WARNING", LITELLM_LOCAL_MODEL_COST_MAP="True")
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


@contextmanager
def prefect_server(home: Path, timeout_s: float = 120):
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = prefect_env(home, None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port),
                             "--no-ui"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prefect server did not start:\n" + (home / "server.log").read_text())
            time.sleep(0.5)
        yield api
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


def prefect(args: list[str], env: dict, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    r = subprocess.run([PREFECT, "--no-prompt", *args], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"prefect {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def api(api_url: str, method: str, path: str, body: dict | None = None):
    """One call to the server's REST API (faster than a `prefect` CLI process on a busy machine)."""
    import json

    req = urllib.request.Request(f"{api_url}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
    return json.loads(raw) if raw else None
