"""On-disk compile cache: <cache_dir>/compile/<key[:2]>/<key>/{result.json, <unit>.cubin}.

The key covers everything that changes the output: the sources, the params (as -D defines), the
candidate's options, the target arch, the language and the compiler + header wheel versions. Errors are
cached too (the same source fails the same way); timeouts are not (a loaded machine may finish next
time). Entries are written to a temporary folder and renamed into place, so a reader never sees half
an entry and concurrent writers of the same key are harmless.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..sandbox.redact import scrub
from .result import CompileResult, _cubin_filename


def cache_key(*, language: str, sources: dict[str, str], params: dict, options: list[str], arch: str,
              compiler_version: str, kernels: list[str], launch_args: list | None = None) -> str:
    # The launch args are part of the key: compiling checks them against each kernel's parameter
    # table, so a candidate with wrong args must not be answered by a correct candidate's entry.
    payload = {"language": language, "sources": sources, "params": params, "options": options,
               "arch": arch, "compiler": compiler_version, "kernels": sorted(set(kernels)),
               "launch_args": launch_args or [], "v": 2}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class CompileCache:
    def __init__(self, root: str | Path):
        self.root = Path(root) / "compile"

    def _dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> CompileResult | None:
        d = self._dir(key)
        try:
            meta = json.loads((d / "result.json").read_text())
            cubins = {unit: (d / _cubin_filename(unit)).read_bytes() for unit in meta.pop("units")}
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            return None
        res = CompileResult(**meta, cubins=cubins, cache_hit=True)
        res.log = scrub(res.log)  # an entry written before logs were scrubbed leaks nothing either
        if res.cubin_hash != CompileResult.hash_cubins(cubins):
            return None  # a damaged entry is a miss, and gets rewritten
        return res

    def put(self, key: str, result: CompileResult) -> None:
        if result.status.value == "timeout":
            return
        final = self._dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=final.parent))
        try:
            for unit, blob in result.cubins.items():
                (tmp / _cubin_filename(unit)).write_bytes(blob)
            meta = json.loads(result.to_cache_json())
            meta["log"] = scrub(meta.get("log", ""))
            meta["units"] = list(result.cubins)
            (tmp / "result.json").write_text(json.dumps(meta))
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another writer won the race: same content
