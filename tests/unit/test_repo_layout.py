"""The repository's shape: tests use the package, never a script; nothing outside solforge/settings.py
decides where the dataset lives (settings.shared_dir, $SOLFORGE_SHARED_DIR); scripts/ holds only the
entry points (setup, main, test) and benchmarks/ the maintained benchmarks its README lists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_IMPORTS_SCRIPT = re.compile(r"""(spec_from_file_location\([^)]*["']scripts|sys\.path\.insert\([^)]*["']scripts"""
                             r"""|REPO / ["']scripts["']\)|["']scripts/[\w./]+\.py["'])""")


def _py(*dirs: str):
    for d in dirs:
        yield from (p for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_imports_or_runs_a_script():
    bad = [str(p.relative_to(REPO)) for p in _py("tests") if p.name != "test_repo_layout.py"
           and _IMPORTS_SCRIPT.search(p.read_text(encoding="utf-8"))]
    # family_checks/test_kernels_* load scripts/import_kernel_check.py until that check leaves with
    # the per-problem offered lists it maintained
    assert not [b for b in bad if "import_kernel_check" not in (REPO / b).read_text()], bad


def test_the_dataset_folder_is_one_setting():
    pattern = re.compile(r"""parents?\[?\d?\]?\s*/\s*["']shared["']|REPO\.parent\s*/\s*["']shared""")
    bad = [str(p.relative_to(REPO)) for p in _py("solforge", "benchmarks", "flows", "tasks")
           if p.name != "settings.py" and pattern.search(p.read_text(encoding="utf-8"))]
    assert bad == []


def test_scripts_are_entry_points_and_benchmarks_are_listed():
    assert sorted(p.name for p in (REPO / "scripts").iterdir()) == [
        "fetch_device_wheels.sh", "gpu_box.sh", "main.sh", "setup.sh", "test.sh"]
    readme = (REPO / "benchmarks" / "README.md").read_text()
    for p in (REPO / "benchmarks").glob("*.py"):
        assert f"`{p.name}`" in readme, p.name
