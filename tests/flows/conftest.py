"""One real `prefect server` on 127.0.0.1 per test session, shared by every flow test that needs one
(starting it costs tens of seconds on a loaded machine); pools `cpu` and `gpu` created once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from .prefect_server import api as call_api
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
        call_api(api, "PATCH", "/work_pools/gpu", {"concurrency_limit": 2})
        assert call_api(api, "GET", "/work_pools/gpu")["concurrency_limit"] == 2
        yield SimpleNamespace(api=api, env=env, home=home,
                              call=lambda method, path, body=None: call_api(api, method, path, body))
