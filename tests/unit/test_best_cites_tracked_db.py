"""Every saved best/ kernel names the result database it was selected from; that database (or its .gz)
must be in the repository, or the kernel's measured result cannot be checked."""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_best_files_cite_a_tracked_database():
    tracked = set(subprocess.run(["git", "ls-files", "data/results/db"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split())
    cited = {}
    for f in list(ROOT.glob("kernels_cuda/*/best/*.json")) + list(ROOT.glob("kernels_cute/*/best/*.json")):
        db = json.loads(f.read_text()).get("db")
        if db:
            cited.setdefault(db, f.relative_to(ROOT))
    assert cited, "no best/ file names its database"
    missing = {db: str(f) for db, f in cited.items() if db not in tracked and db + ".gz" not in tracked}
    assert not missing, f"best/ files cite databases not in git: {missing}"
