"""Commit the optimize pipeline's best kernels: kernels_cuda|kernels_cute/<family>/best/<problem>.json.

    solforge best -- --db solforge.duckdb [--write]      (or: solforge --db FILE best -- --write)

For every problem in an optimize DB: its best correct attempt, chosen by the same rule as the README's
results table (`solforge table`; `v_leaderboard`, whose `best_attempt_id` comes from
`v_best_per_problem`, migration 070: every workload correct and scored, highest mean SOL score, then
highest geomean speedup; `--by speedup` ranks by geomean speedup vs T_b first instead). The record
holds the candidate as stored, its tunable params (where the family's readers look: top-level
`params`, checked to rebuild the stored candidate byte for byte), per-workload T_k, T_b and its variant,
T_sol, SOL score, correctness and errors, the aggregates, the GPU and where the numbers came from.

Replace rule: an existing best/ file is replaced only when the pipeline attempt's geomean speedup over
the workloads both cover is higher (each side's own T_b: the file's `speedup` per workload, the DB's
`scores.speedup`), or "refreshed" when the file has no git commit (measured before runs recorded it)
and the new result, from a run that records its commit, is within the ~3% run-to-run noise of it
(a table pick without a commit is likewise replaced by the best attempt with one within that noise). One line per problem says new / replaced / refreshed / kept and both numbers. Dry run unless
--write. The DB is read from a temporary copy (a .gz is unpacked there), so the committed file and
its lock sidecar stay untouched.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..agents.offline import _family_of_notes
from ..candidate import Candidate
from ..kernels import FamilyError, get_family
from ..problem.definition import Definition
from ..roofline.score import geomean
from ..settings import REPO_ROOT as REPO
from ..store import Store
from ..store.results import (attempt_evidence, best_attempt_ids, best_with_commit_near, run_and_hardware,
                             t_b_variants)

SOURCE = "optimize pipeline"
TIMING = ("solforge evaluator: CUPTI kernel spans, L2 flushed before each call, median of n_reps "
          "(eval_results); scores table for T_b / T_sol / SOL score")
_UNKNOWN = re.compile(r"unknown params \[([^\]]*)\]")


@dataclass
class Decision:
    problem: str
    action: str              # new | replaced | refreshed | kept | skipped
    path: Optional[Path]
    new_speedup: Optional[float]   # pipeline geomean over the common workloads (all, when new)
    old_speedup: Optional[float]   # the file's geomean over the same workloads
    n_common: int
    why: str = ""

    def line(self) -> str:
        f = lambda v: "-" if v is None else f"{v:.4f}x"
        where = self.path.relative_to(REPO) if self.path and self.path.is_relative_to(REPO) else self.path
        return (f"{self.action:8s} {self.problem}: pipeline {f(self.new_speedup)} vs best/ "
                f"{f(self.old_speedup)} over {self.n_common} workload(s) -> {where}"
                + (f"  ({self.why})" if self.why else ""))


def open_copy(db: Path, tmp: Path) -> Path:
    """A private copy of the DB (gunzipped when .gz): Store migrates and locks what it opens."""
    out = tmp / (db.name[:-3] if db.name.endswith(".gz") else db.name)
    if db.name.endswith(".gz"):
        with gzip.open(db, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(db, out)
        wal = db.with_name(db.name + ".wal")   # commits not yet checkpointed into the file
        if wal.exists():
            shutil.copyfile(wal, out.with_name(out.name + ".wal"))
    return out


def tunable_params(family, defn: Definition, stored: Candidate) -> dict:
    """The params the family's readers pass back to `instantiate` (best/ `params`): the stored
    candidate's params less the problem-fixed ones and the ones the family derives itself (it names
    those 'unknown'). Raises ValueError unless they rebuild the stored candidate exactly."""
    spec = family.analyze(defn)
    if spec is None:
        raise ValueError(f"family {family.name} does not serve {defn.name}")
    params = {k: v for k, v in stored.params.items() if k not in spec.fixed}
    for _ in range(4):
        try:
            rebuilt = family.instantiate(defn, params)
            break
        except FamilyError as e:
            m = _UNKNOWN.search(str(e))
            if not m:
                raise ValueError(f"params do not rebuild: {e}") from e
            for k in re.findall(r"'([^']+)'", m.group(1)):
                params.pop(k, None)
    else:
        raise ValueError("params do not rebuild (too many derived keys)")
    if rebuilt.source_hash() != stored.source_hash():
        raise ValueError(f"params rebuild a different candidate ({rebuilt.source_hash()[:12]} != "
                         f"{stored.source_hash()[:12]})")
    return params


NOISE = 0.97  # measurements of one kernel in two runs differ by up to ~3% (README: timing spread)


def remeasured_with_commit(s: Store, attempt_id: str) -> Optional[str]:
    """For a pick whose run recorded no git commit: the best attempt of the same problem, correct on
    every workload, made by a run that recorded its commit (migration 080), if its geomean speedup
    is within the run-to-run noise of the pick's (>= NOISE x); else None."""
    return best_with_commit_near(s, attempt_id, NOISE)


def _run_meta(s: Store, run_id: str, hardware_id: Optional[str]) -> dict:
    run, hw = run_and_hardware(s, run_id, hardware_id)
    cfg = run.get("config") or {}
    details = hw.get("details") or {}
    ident = str(cfg.get("gpu_identity") or "").split("|")
    gpu = hw.get("gpu_name") or (ident[0] if ident[0] else None)
    driver = hw.get("driver") or (ident[1] if len(ident) > 1 else None)
    pv = cfg.get("provenance") or {}  # runs.config.provenance and the columns of migration 080
    return {"run": run, "config": cfg, "gpu": gpu, "driver": driver,
            "torch": (run.get("torch_version") or pv.get("torch") or details.get("torch_version")
                      or details.get("torch") or cfg.get("torch")),
            "cuda": run.get("cuda_version") or pv.get("cuda") or hw.get("cuda")
                    or details.get("cuda_runtime") or None,
            "commit": run.get("git_commit") or pv.get("commit") or cfg.get("commit") or cfg.get("git_commit"),
            "commit_source": pv.get("commit_source"), "commit_dirty": pv.get("dirty")}


def _commit_before(ts) -> Optional[str]:
    """The repository's last commit before the run started: what the run most likely ran (the DB
    does not store a commit); None outside a git checkout."""
    if ts is None:
        return None
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-list", "-1", f"--before={ts:%Y-%m-%d %H:%M:%S} +0000",
                              "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def pipeline_record(s: Store, attempt_id: str, db_label: str) -> dict:
    """The best/ JSON for one stored attempt. Raises ValueError when it cannot be made faithfully."""
    ev_all = attempt_evidence(s, attempt_id)
    if ev_all is None:
        raise ValueError("no such attempt")
    a, p = ev_all["attempt"], ev_all["problem"]
    if p is None:
        raise ValueError("problem not in the DB (no definition to rebuild params from)")
    stored = Candidate.model_validate(a["candidate"])
    fam_name = _family_of_notes(stored.notes or "")
    if not fam_name:
        raise ValueError("not a family candidate (no family= in its notes): no best/ directory")
    family = get_family(fam_name)
    defn = Definition.model_validate(p["definition"])
    params = tunable_params(family, defn, stored)

    wl, ev, sc, base = ev_all["workloads"], ev_all["evals"], ev_all["scores"], ev_all["baselines"]
    rows = []
    for uuid in sorted(ev, key=lambda u: (wl.get(u, {}).get("workload_index", 1 << 30), u)):
        e, c, w = ev[uuid], sc.get(uuid, {}), wl.get(uuid, {})
        rows.append({
            "workload": w.get("workload_index"), "uuid": uuid, "axes": w.get("axes"),
            "t_kernel_ms": c.get("t_kernel_ms", e["median_ms"]), "t_base_ms": c.get("t_baseline_ms"),
            "t_b_kind": c.get("baseline_variant"),
            "t_eager_ms": base.get((uuid, "eager")), "t_compile_ms": base.get((uuid, "compile")),
            "t_sol_ms": c.get("t_sol_ms"), "sol_score": c.get("sol_score"), "speedup": c.get("speedup"),
            "correct": e["correct"], "status": e["status"], "max_abs_err": e.get("max_abs_err"),
            "max_rel_err": e.get("max_rel_err"), "matched_ratio": e.get("matched_ratio"),
            "p10_ms": e.get("p10_ms"), "p90_ms": e.get("p90_ms"), "n_reps": e.get("n_reps")})
    if not rows or not all(r["correct"] for r in rows):
        raise ValueError("attempt is not correct on every evaluated workload")

    hw_id = next((r["hardware_id"] for r in ev.values() if r.get("hardware_id")), None)
    meta = _run_meta(s, a["run_id"], hw_id)
    sols = [r["sol_score"] for r in rows if r["sol_score"] is not None]
    tb = t_b_variants(s).get(attempt_id)
    commit = a.get("commit") or meta["commit"]
    started = meta["run"].get("started_at")
    db_unzipped = db_label[:-3] if db_label.endswith(".gz") else db_label
    unpack = f"gunzip -kf {db_label} && " if db_label.endswith(".gz") else ""
    return {
        "problem": a["problem"], "subset": p["subset"], "family": family.name, "language": stored.language,
        "variant": f"{family.name}:pipeline", "params": params,
        "geomean_speedup": geomean(r["speedup"] for r in rows),
        "speedup_min": min((r["speedup"] for r in rows if r["speedup"] is not None), default=None),
        "sol_geomean": geomean(sols), "sol_median": statistics.median(sols) if sols else None,
        "sol_mean": statistics.fmean(sols) if sols else None,
        "n_workloads": len(rows), "all_correct": True, "t_b_from": tb,
        "gpu": meta["gpu"], "driver": meta["driver"], "torch": meta["torch"], "cuda": meta["cuda"],
        "gpu_profile": meta["run"].get("gpu_profile"), "hardware_id": hw_id,
        "commit": commit,
        "commit_source": (f"stored in the DB ({meta['commit_source'] or 'runs'})" if commit else
                          "not stored in the DB (no commit in attempts or runs)"),
        "commit_dirty": meta["commit_dirty"] if commit else None,
        "commit_before_run": None if commit else _commit_before(started),
        "source": SOURCE, "db": db_label, "run_id": a["run_id"], "run_started_at": str(started) if started else None,
        "attempt_id": attempt_id, "agent": a.get("agent"), "model": a.get("model"),
        "selected_by": "v_leaderboard (solforge table): all workloads correct, highest mean SOL score, "
                       "then geomean speedup",
        "timing": TIMING,
        "baseline": "the pipeline's T_b per workload (scores.baseline_variant: eager or compile, the faster measured)",
        "scored_by": "solforge best",
        "reproduce": f"{unpack}solforge --db {db_unzipped} replay {attempt_id}",
        "candidate_source_hash": stored.source_hash(),
        "candidate": a["candidate"],
        "workloads": rows,
    }


def _speedups(rec: dict) -> dict[str, float]:
    """{uuid: speedup} of a best/ file in any of its formats (sol_scores, bench_kernels, bench_gemm,
    this script): `speedup`, else T_b / T_k from whichever key pair it has."""
    out = {}
    for w in rec.get("workloads") or []:
        sp = w.get("speedup")
        if sp is None:
            tk = w.get("t_kernel_ms", w.get("t_k_ms"))
            tb = w.get("t_base_ms", w.get("t_b_ms"))
            sp = tb / tk if tk and tb else None
        if w.get("uuid") and sp is not None and sp > 0:
            out[w["uuid"]] = sp
    return out


def decide(problem: str, path: Path, new: dict, old: Optional[dict]) -> Decision:
    """new | replaced | kept, comparing geomean speedups over the workloads both cover."""
    ns = _speedups(new)
    if old is None:
        return Decision(problem, "new", path, geomean(ns.values()), None, len(ns))
    os_ = _speedups(old)
    common = sorted(set(ns) & set(os_))
    if not common:
        return Decision(problem, "kept", path, geomean(ns.values()), geomean(os_.values()), 0,
                        "no workload in common")
    g_new, g_old = geomean(ns[u] for u in common), geomean(os_[u] for u in common)
    if g_new > g_old:
        return Decision(problem, "replaced", path, g_new, g_old, len(common))
    if not old.get("commit") and new.get("commit") and g_new >= NOISE * g_old:
        # a file without a commit (measured before runs recorded it), and a result from a run that
        # records its commit within the run-to-run noise: the file gets the provenance it lacked
        same = old.get("candidate_source_hash") == new.get("candidate_source_hash")
        return Decision(problem, "refreshed", path, g_new, g_old, len(common),
                        ("the same kernel" if same else "a kernel within the timing noise") +
                        ", measured by a run that records its commit")
    return Decision(problem, "kept", path, g_new, g_old, len(common))


def target_path(rec: dict, root: Path) -> Path:
    fam_dir = get_family(rec["family"]).family_dir
    rel = fam_dir.relative_to(REPO) if fam_dir.is_relative_to(REPO) else Path(fam_dir.parent.name) / fam_dir.name
    return root / rel / "best" / f"{rec['problem']}.json"


def save_best(db: Path, *, write: bool = False, root: Path = REPO, by: str = "leaderboard",
              db_label: Optional[str] = None, problems: Optional[set] = None) -> list[Decision]:
    label = db_label or (str(db.resolve().relative_to(REPO)) if db.resolve().is_relative_to(REPO) else str(db))
    out = []
    with tempfile.TemporaryDirectory(prefix="save_best_") as tmp:
        s = Store(open_copy(db, Path(tmp)))
        for problem, aid in sorted(best_attempt_ids(s, by).items()):
            if problems and problem not in problems:
                continue
            try:
                rec = pipeline_record(s, aid, label)
                again = None if rec["commit"] else remeasured_with_commit(s, aid)
                if again:
                    # the table's pick was measured before runs recorded their commit; the same
                    # kernel measured again by a run that did is what the file records
                    table_pick = {"attempt_id": aid, "geomean_speedup": rec["geomean_speedup"],
                                  "sol_mean": rec["sol_mean"], "run_id": rec["run_id"]}
                    rec = pipeline_record(s, again, label)
                    rec["selected_by"] += (f"; the table's pick {aid[:12]} was measured before runs recorded "
                                           "their commit: this is the best attempt of a run that did, within "
                                           f"{100 * (1 - NOISE):.0f}% of the pick's geomean speedup")
                    rec["table_pick"] = table_pick
            except (ValueError, KeyError, FamilyError) as e:
                out.append(Decision(problem, "skipped", None, None, None, 0, f"attempt {aid[:12]}: {e}"))
                continue
            if by == "speedup":
                rec["selected_by"] = "--by speedup: all workloads correct, highest geomean speedup vs T_b"
            path = target_path(rec, root)
            old = json.loads(path.read_text()) if path.exists() else None
            d = decide(problem, path, rec, old)
            if d.action in ("replaced", "refreshed"):
                rec["replaced"] = {k: old.get(k) for k in ("source", "scored_by", "timing", "commit", "variant",
                                                          "db", "attempt_id") if old.get(k) is not None}
                rec["replaced"].update(speedup_geomean_common=d.old_speedup, n_common=d.n_common)
            if write and d.action in ("new", "replaced", "refreshed"):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(rec, indent=1) + "\n")
            out.append(d)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="solforge best", description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=None,
                    help="optimize DuckDB file (.duckdb or .duckdb.gz; default: the store's default)")
    ap.add_argument("--write", action="store_true", help="write the new/replaced files (default: dry run)")
    ap.add_argument("--by", choices=("leaderboard", "speedup"), default="leaderboard",
                    help="best attempt: the README table's rule (default) or highest geomean speedup")
    ap.add_argument("--problem", action="append", help="only these problems (repeatable)")
    ap.add_argument("--root", type=Path, default=REPO, help="where kernels_cuda/ and kernels_cute/ are")
    args = ap.parse_args(argv)
    if args.db is None:
        from ..store.store import default_path

        args.db = default_path()
    if not args.db.exists():
        ap.error(f"--db {args.db}: no such file")
    decisions = save_best(args.db, write=args.write, root=args.root, by=args.by,
                          problems=set(args.problem) if args.problem else None)
    for d in decisions:
        print(d.line())
    n = {a: sum(d.action == a for d in decisions) for a in ("new", "replaced", "refreshed", "kept", "skipped")}
    print(f"\n{len(decisions)} problems: " + ", ".join(f"{v} {k}" for k, v in n.items())
          + ("" if args.write else "  (dry run: --write to save)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
