#!/usr/bin/env python3
"""After a GPU check of the attention_prefill / nvfp4_moe families: file the bench rows and open
what the rows prove correct.

    .venv/bin/python scripts/import_kernel_check.py --nvfp4 FILES_AT/nvfp4_029_ --attn FILES_AT/attn2 [--dry-run]

--nvfp4 DIR (rows.jsonl + env.json of `bench_kernels.py run` on nvfp4_moe problems): per problem in
  the rows, when every variant measured (>= 2) is correct on every workload, the rows go to
  data/results/nvfp4_moe_h200_<NNN>_{rows.jsonl,env.json} and the problem into family.json
  `offered_problems`.
--attn DIR (the same for attention_prefill): when every variant is correct on every workload of
  014 AND 015, the rows are appended to data/results/attention_prefill_h200_rows.jsonl; the points
  to move from UNCHECKED into `_space` (solforge/kernels/attention_prefill.py, a code edit) are
  printed, fastest first.
--attn-new DIR (attention_decode on 012/013, attention_ragged on 016/017: the families' first GPU
  check, staged as .carry/attn_new): per problem, when every variant measured (>= 2) is correct on
  every workload, the rows go to data/results/<family>_h200_<NNN>_{rows.jsonl,env.json}, the problem
  into the family's family.json `offered_problems` and `"offered"` becomes true.
--fp8 DIR (fp8_gemm on Quant 001/006/015/021/022: its first GPU check, staged as .carry/fp8): the
  same as --attn-new for family fp8_gemm.
--fp8w DIR (fp8_gemm_wgmma on Quant 001/006/015/021: its first GPU check, staged as .carry/fp8w):
  the same as --attn-new for family fp8_gemm_wgmma.
--moe DIR (moe_group_mask on L1/059: its first GPU check, staged as .carry/moe): the same as
  --attn-new for family moe_group_mask.
Nothing is filed for a problem with a missing or wrong workload; the reason is printed. Then
regenerate the results_h200.md files (their first lines hold the command).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "data" / "results"
SHARED = REPO.parent / "shared" / "sol_execbench"


def _rows(d: Path) -> list[dict]:
    return [json.loads(l) for l in (d / "rows.jsonl").read_text().splitlines() if l.strip()]


def _key(r: dict) -> str:
    return json.dumps(r["params"], sort_keys=True)


def evidence(rows: list[dict], problem) -> str:
    """'' when every variant in the rows (>= 2) is correct on every workload of the problem."""
    want = {w.uuid for w in problem.workloads}
    by: dict = {}
    for r in rows:
        if r["problem"] == problem.name:
            by.setdefault(_key(r), []).append(r)
    if len(by) < 2:
        return f"{len(by)} variant(s) measured"
    for k, rs in by.items():
        missing = want - {r["uuid"] for r in rs}
        if missing:
            return f"{k}: {len(missing)} of {len(want)} workloads not measured"
        bad = sorted(r["workload"] for r in rs if not r.get("ok"))
        if bad:
            return f"{k}: wrong on workloads {bad}"
    return ""


def _problem(name: str):
    from solforge.problem.loader import load_problem_dir

    d = next(SHARED.glob(f"*/{name}"), None)
    if d is None:  # e.g. run on a GPU box, which has no copy of the dataset: import here instead
        raise SystemExit(f"import_kernel_check: problem {name!r} not found under {SHARED} "
                         "(the shared SOL-ExecBench copy); run the import where ../shared exists")
    return load_problem_dir(d, d.parent.name)


def _file_problem(fam: str, name: str, rows: list, d: Path, data: dict) -> None:
    """data/results/<fam>_h200_<NNN>_{rows.jsonl,env.json} for one problem (its rows among `rows`,
    d/env.json), and the problem listed in family.json's `offered_problems` (`data`)."""
    num = name.split("_", 1)[0]
    (RESULTS / f"{fam}_h200_{num}_rows.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["problem"] == name))
    shutil.copy(d / "env.json", RESULTS / f"{fam}_h200_{num}_env.json")
    listed = data.setdefault("offered_problems", [])
    if name not in listed:
        listed.append(name)


def import_nvfp4(d: Path, dry: bool) -> None:
    rows, fam_json = _rows(d), REPO / "kernels_cuda" / "nvfp4_moe" / "family.json"
    data = json.loads(fam_json.read_text())
    for name in sorted({r["problem"] for r in rows}):
        why = evidence(rows, _problem(name))
        if why:
            print(f"{name}: NOT filed: {why}")
            continue
        num = name.split("_", 1)[0]
        print(f"{name}: every variant correct on every workload -> nvfp4_moe_h200_{num}_*, listed in "
              f"offered_problems (served while family.json 'offered' is true: now {data.get('offered')})")
        if not dry:
            _file_problem("nvfp4_moe", name, rows, d, data)
    if not dry:
        fam_json.write_text(json.dumps(data, indent=1) + "\n")


def import_attention(d: Path, dry: bool) -> None:
    from solforge.kernels.attention_prefill import UNCHECKED

    rows = _rows(d)
    names = sorted({r["problem"] for r in rows})
    whys = {n: evidence(rows, _problem(n)) for n in names}
    if len(names) < 2 or any(whys.values()):
        print(f"attention: NOT filed (both 014 and 015 must be complete and correct): {whys}")
        return
    main = RESULTS / "attention_prefill_h200_rows.jsonl"
    print(f"attention: every variant correct on every workload of {names} -> appended to {main.name}")
    speed: dict = {}
    for r in rows:
        speed.setdefault(_key(r), []).append(math.log(r["t_kernel_ms"]))
    order = sorted(speed, key=lambda k: sum(speed[k]) / len(speed[k]))
    for k in order:
        tag = "UNCHECKED -> _space" if json.loads(k) in UNCHECKED else "already in _space"
        print(f"  geomean {math.exp(sum(speed[k]) / len(speed[k])) * 1e3:8.2f} us  {k}  {tag}")
    if not dry:
        with main.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        shutil.copy(d / "env.json", RESULTS / "attention_prefill_h200_check2_env.json")


NEW_ATTN = ("attention_decode", "attention_ragged")
NEW_FP8 = ("fp8_gemm",)
NEW_FP8W = ("fp8_gemm_wgmma",)
NEW_MOE = ("moe_group_mask",)


def import_attn_new(d: Path, dry: bool) -> None:
    import_new(d, dry, NEW_ATTN)


def import_new(d: Path, dry: bool, families: tuple[str, ...]) -> None:
    """A new family's first GPU check (--attn-new, --fp8, --moe): per problem, every variant correct on
    every workload files the rows and opens the problem (family.json offered_problems, offered)."""
    rows = [r for r in _rows(d) if r.get("family") in families]
    for fam in families:
        fam_rows = [r for r in rows if r["family"] == fam]
        if not fam_rows:
            continue
        fam_json = REPO / "kernels_cuda" / fam / "family.json"
        data = json.loads(fam_json.read_text())
        for name in sorted({r["problem"] for r in fam_rows}):
            why = evidence(fam_rows, _problem(name))
            if why:
                print(f"{fam} {name}: NOT filed: {why}")
                continue
            num = name.split("_", 1)[0]
            speed: dict = {}
            for r in fam_rows:
                if r["problem"] == name:
                    speed.setdefault(_key(r), []).append(math.log(max(r["t_kernel_ms"], 1e-9)))
            print(f"{fam} {name}: every variant correct on every workload -> {fam}_h200_{num}_*, "
                  f"listed in offered_problems, offered true")
            for k in sorted(speed, key=lambda k: sum(speed[k]) / len(speed[k])):
                print(f"  geomean {math.exp(sum(speed[k]) / len(speed[k])) * 1e3:8.2f} us  {k}")
            if dry:
                continue
            _file_problem(fam, name, fam_rows, d, data)
            data["offered"] = True
            data["offered_why"] = ("H200 check: every variant correct on every workload of the problems in "
                                   f"offered_problems (data/results/{fam}_h200_<NNN>_rows.jsonl)")
        if not dry:
            fam_json.write_text(json.dumps(data, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvfp4", type=Path, help="bench out dir with rows.jsonl + env.json (nvfp4_moe)")
    ap.add_argument("--attn", type=Path, help="bench out dir with rows.jsonl + env.json (attention_prefill)")
    ap.add_argument("--attn-new", type=Path,
                    help="bench out dir with rows.jsonl + env.json (attention_decode / attention_ragged)")
    ap.add_argument("--fp8", type=Path, help="bench out dir with rows.jsonl + env.json (fp8_gemm)")
    ap.add_argument("--fp8w", type=Path, help="bench out dir with rows.jsonl + env.json (fp8_gemm_wgmma)")
    ap.add_argument("--moe", type=Path, help="bench out dir with rows.jsonl + env.json (moe_group_mask)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.nvfp4:
        import_nvfp4(a.nvfp4, a.dry_run)
    if a.attn:
        import_attention(a.attn, a.dry_run)
    if a.attn_new:
        import_attn_new(a.attn_new, a.dry_run)
    if a.fp8:
        import_new(a.fp8, a.dry_run, NEW_FP8)
    if a.fp8w:
        import_new(a.fp8w, a.dry_run, NEW_FP8W)
    if a.moe:
        import_new(a.moe, a.dry_run, NEW_MOE)


if __name__ == "__main__":
    main()
