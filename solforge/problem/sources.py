"""ingest_path: every problem under a local path (ingest.py) or an hf:// URI (hf.py).

Its own module because it sits above both: hf.py unpacks a download and ingests it with ingest.py's
ingest_local, so ingest.py must not import hf.py back."""

from __future__ import annotations

import time
from pathlib import Path

from .ingest import HF_SCHEME, IngestReport, ingest_local


def ingest_path(path_or_uri: str | Path) -> IngestReport:
    """Load every problem under a path or hf:// URI. Bad problems are reported, never raised."""
    t0 = time.perf_counter()
    src = str(path_or_uri)
    if src.startswith(HF_SCHEME):
        from .hf import ingest_hf  # only this path needs huggingface_hub
        report = ingest_hf(src)
    else:
        report = ingest_local(Path(src).expanduser())
    report.source = src
    report.seconds = time.perf_counter() - t0
    return report
