"""One real `prefect server` on 127.0.0.1 per test session, shared by every flow test that needs one
(starting it costs tens of seconds on a loaded machine); pools `cpu` and `gpu` created once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from .prefect_server import prefect, prefect_env, prefect_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect_home")
    with prefect_server(home) as api:
        env = prefect_env(home, api)
        env["SOLFORGE_ROOT"] = str(REPO)
        prefect(["work-pool", "create", "cpu", "--type", "process"], env, REPO)
        # one slot per GPU of the (pretend) two-GPU host: one benchmark per GPU at a time
        prefect(["work-pool", "create", "gpu", "--type", "process"], env, REPO)
        prefect(["work-pool", "set-concurrency-limit", "gpu", "2"], env, REPO)
        yield SimpleNamespace(api=api, env=env, home=home)
