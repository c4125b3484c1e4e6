"""hf:// ingest over real HTTP: parquet files built from the shared copy are served by a small Hub
look-alike on 127.0.0.1 (HF_ENDPOINT points at it) and downloaded by huggingface_hub itself; the
round trip must give the same problems and content hashes as ingesting the local copy."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from solforge.problem.hf import parse_uri

REPO_ID = "nvidia/SOL-ExecBench"
COMMIT = hashlib.sha1(b"solforge-test-commit").hexdigest()
SUBSETS = ("L1", "L2", "Quant", "FlashInfer-Bench")


def build_parquet(sol_dir: Path, subset: str, out: Path) -> None:
    import polars as pl

    rows = []
    for p in sorted((sol_dir / subset).iterdir()):
        d = json.loads((p / "definition.json").read_text())
        wls = [json.loads(x) for x in (p / "workload.jsonl").read_text().splitlines() if x.strip()]
        rows.append({"name": d["name"], "description": d.get("description"), "hf_id": d.get("hf_id"),
                     "axes": json.dumps(d["axes"]), "inputs": json.dumps(d["inputs"]),
                     "outputs": json.dumps(d["outputs"]), "reference": d["reference"],
                     "custom_inputs_entrypoint": d.get("custom_inputs_entrypoint"),
                     "workloads": json.dumps(wls)})
    out.parent.mkdir(parents=True, exist_ok=True)
    schema = {k: pl.String for k in rows[0]}
    pl.DataFrame(rows, schema=schema).write_parquet(out)


CARD = "---\nconfigs:\n" + "".join(
    f"- config_name: {s}\n  data_files:\n  - split: train\n    path: data/{s}-*.parquet\n" for s in SUBSETS
) + "---\n# SOL-ExecBench (test copy)\n"


class FakeHub:
    """Answers the endpoints huggingface_hub's snapshot_download uses: repo info (revision -> sha),
    the recursive tree listing, and file resolution (HEAD and GET, with the Hub's headers)."""

    def __init__(self, files: dict[str, bytes], other_refs: dict[str, dict[str, bytes]] | None = None):
        # revision name -> (commit sha, files); "main" serves `files`
        self.revisions = {"main": (COMMIT, files)}
        for ref, fs in (other_refs or {}).items():
            self.revisions[ref] = (hashlib.sha1(ref.encode()).hexdigest(), fs)
        self.by_sha = {sha: fs for sha, fs in self.revisions.values()}
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_HEAD(self):
                self._serve(body=False)

            def do_GET(self):
                self._serve(body=True)

            def _json(self, obj, body=True):
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _serve(self, body: bool):
                url = urlparse(self.path)
                path = unquote(url.path)
                hub.requests.append(f"{self.command} {path}")
                api = f"/api/datasets/{REPO_ID}"
                if path.startswith(f"{api}/revision/"):
                    rev = path[len(f"{api}/revision/"):]
                    if rev in hub.revisions or rev in hub.by_sha:
                        sha, files = hub.revisions.get(rev) or (rev, hub.by_sha[rev])
                        return self._json({"id": REPO_ID, "sha": sha, "private": False,
                                           "siblings": [{"rfilename": f} for f in files]}, body)
                if path.startswith(f"{api}/tree/"):
                    sha = path[len(f"{api}/tree/"):].split("/")[0]
                    if sha in hub.by_sha:
                        return self._json([{"type": "file", "path": f, "size": len(b),
                                            "oid": hashlib.sha1(b).hexdigest()}
                                           for f, b in sorted(hub.by_sha[sha].items())], body)
                prefix = f"/datasets/{REPO_ID}/resolve/"
                if path.startswith(prefix):
                    sha, _, fname = path[len(prefix):].partition("/")
                    files = hub.by_sha.get(sha, {})
                    if fname in files:
                        data = files[fname]
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data)))
                        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                        self.send_header("X-Repo-Commit", sha)
                        self.send_header("Content-Type", "application/octet-stream")
                        self.end_headers()
                        if body:
                            self.wfile.write(data)
                        return
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.send_header("X-Error-Code", "EntryNotFound")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory, sol_execbench_dir) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("parquet")
    files = {"README.md": CARD.encode()}
    for s in SUBSETS:
        out = d / f"{s}-00000-of-00001.parquet"
        build_parquet(sol_execbench_dir, s, out)
        files[f"data/{s}-00000-of-00001.parquet"] = out.read_bytes()
    return files


def _run_ingest(uri: str, endpoint: str, cache: Path) -> dict:
    """Ingest in a fresh interpreter, so HF_ENDPOINT is read the way a user's process reads it."""
    code = (
        "import json, sys\n"
        "from solforge.problem.sources import ingest_path\n"
        "r = ingest_path(sys.argv[1])\n"
        "print(json.dumps({'problems': {p.name: [p.subset, p.content_hash, len(p.workloads), p.source]"
        " for p in r.problems}, 'errors': [e.describe() for e in r.errors]}))\n"
    )
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="0",
               HF_HUB_DISABLE_XET="1", SOLFORGE_CACHE_DIR=str(cache), HF_TOKEN="")
    env.pop("HF_TOKEN")
    out = subprocess.run([sys.executable, "-c", code, uri], env=env, capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_parse_uri():
    assert parse_uri("hf://nvidia/SOL-ExecBench") == (REPO_ID, None, None)
    assert parse_uri("hf://nvidia/SOL-ExecBench/L2") == (REPO_ID, "L2", None)
    assert parse_uri("hf://datasets/nvidia/SOL-ExecBench/Quant@abc") == (REPO_ID, "Quant", "abc")
    from solforge.errors import InputError
    from solforge.problem.sources import ingest_path

    with pytest.raises(InputError):
        parse_uri("hf://only-one-part")
    r = ingest_path("hf://a/b/c/d")
    assert not r.problems and len(r.errors) == 1 and r.errors[0].file == "hf://a/b/c/d"


def test_hf_round_trip_matches_local(tmp_path, hub_files, sol_execbench_dir):
    from solforge.problem.sources import ingest_path

    local = ingest_path(sol_execbench_dir)
    want = {p.name: [p.subset, p.content_hash, len(p.workloads)] for p in local.problems}
    with FakeHub(hub_files) as hub:
        got = _run_ingest("hf://nvidia/SOL-ExecBench", hub.url, tmp_path / "cache")
        assert any(r.startswith("GET /datasets/nvidia/SOL-ExecBench/resolve/") for r in hub.requests)
        assert got["errors"] == []
        assert {k: v[:3] for k, v in got["problems"].items()} == want
        assert all(v[3].startswith(f"hf://{REPO_ID}/{v[0]}/") and v[3].endswith(COMMIT)
                   for v in got["problems"].values())

        # one subset; the second run is served from the cache (no new file downloads)
        n_before = sum(r.startswith("GET /datasets/") for r in hub.requests)
        sub = _run_ingest("hf://nvidia/SOL-ExecBench/Quant", hub.url, tmp_path / "cache")
        assert sub["errors"] == []
        assert {k: v[:3] for k, v in sub["problems"].items()} == {
            k: v for k, v in want.items() if v[0] == "Quant"}
        assert sum(r.startswith("GET /datasets/") for r in hub.requests) == n_before

        bad = _run_ingest("hf://nvidia/SOL-ExecBench/L9", hub.url, tmp_path / "cache")
        assert bad["problems"] == {} and "L9" in bad["errors"][0]


def test_hf_falls_back_to_the_hubs_parquet_branch(tmp_path, hub_files, sol_execbench_dir):
    """A dataset whose main branch is not parquet: the Hub's refs/convert/parquet copy is used."""
    from solforge.problem.sources import ingest_path

    converted = {f"{s}/train/0000.parquet": hub_files[f"data/{s}-00000-of-00001.parquet"]
                 for s in ("Quant", "FlashInfer-Bench")}
    main = {"README.md": b"# no configs here\n", "raw/problems.jsonl": b"{}\n"}
    want = {p.name: [p.subset, p.content_hash, len(p.workloads)]
            for s in ("Quant", "FlashInfer-Bench") for p in ingest_path(sol_execbench_dir / s).problems}
    with FakeHub(main, {"refs/convert/parquet": converted}) as hub:
        got = _run_ingest("hf://nvidia/SOL-ExecBench", hub.url, tmp_path / "cache")
        assert got["errors"] == []
        assert {k: v[:3] for k, v in got["problems"].items()} == want
        assert "GET /api/datasets/nvidia/SOL-ExecBench/revision/refs/convert/parquet" in hub.requests


def test_hf_bad_rows_are_reported(tmp_path, sol_execbench_dir):
    import polars as pl

    from solforge.problem.hf import unpack_subset
    from solforge.problem.ingest import ingest_local

    pq = tmp_path / "L1.parquet"
    build_parquet(sol_execbench_dir, "L1", pq)
    df = pl.read_parquet(pq)
    rows = df.to_dicts()[:3]
    rows[1]["axes"] = "{not json"
    pl.DataFrame(rows, schema=df.schema).write_parquet(pq)
    errors = unpack_subset([pq], tmp_path / "out" / "L1")
    assert [(e.line, e.field) for e in errors] == [(2, "axes")]
    assert len(ingest_local(tmp_path / "out" / "L1").problems) == 2
    # cached: same errors again without rewriting
    assert [(e.line, e.field) for e in unpack_subset([pq], tmp_path / "out" / "L1")] == [(2, "axes")]
