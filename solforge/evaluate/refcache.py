"""Reference-output cache for problems whose reference is too slow to re-run for every candidate
(FlashInfer-Bench 014/015: a Python loop over sequences, queries and heads, 8 ms to minutes a call).

Without it every candidate's process runs the reference 4 times per workload (2 correctness rounds,
the post-timing re-check, the caching probe's fresh-value check), and the slow ones do not fit any
per-evaluation limit. With it, per run and per problem:

  fill   a trusted process (`python -m solforge.evaluate.refcache_fill fill STAGE CACHE_DIR`, no candidate
         staged, started by the orchestrator on a GPU slot before the problem's first evaluation)
         makes the inputs of every input set a candidate evaluation will check -- correctness rounds
         0..R-1, the last timing set (100 + n_sets - 1) and `probe` never-used probe seeds drawn from
         os.urandom -- exactly as InputFactory.make(seed) makes them, runs the reference once on each
         and writes one file per entry. Its JSON summary (on stdout) gives each entry's sha256; the
         orchestrator keeps those digests in memory.
  use    the candidate's driver regenerates each input set from its seed (fresh copies, as before),
         runs the candidate, and only then loads the entry for that seed: it checks the file's sha256
         against the digest the orchestrator put into job.json and the regenerated inputs'
         fingerprint against the one recorded at fill time; if anything differs, or there is no entry,
         it runs the reference live (the old path). The comparison itself is unchanged
         (correctness.compare_all, in the driver, with the same tolerance).

Key of an entry: sha256 over (problem, workload uuid, seed, input-generation version (a hash of
inputs.py and this module's format version), reference source hash, torch version, device name), so a
changed reference, input generator, torch or GPU never reuses an old entry (it is a miss: live).

Why the cache does not weaken the reward-hack guards (see also docs/refcache.md):
  - the comparison happens where it did, in the driver, after the candidate's call and its guards
    (integrity snapshot, threads, input mutation); the cached answer is read only after that call, so
    it is never in the process's memory while the call it checks runs (the live path computes the
    reference before the call: strictly more exposure);
  - it is only used for candidate_kind "cuda" (cubins + a declarative launch spec: the candidate has
    no code that runs on the host and cannot open files); a "host" candidate (Python in the driver
    process) always gets the live reference;
  - the cache directory is never in the child's environment or under its stage (cwd); it is named
    only in job.json, read by trusted driver code; entry files are 0400 in a 0700 directory;
  - writing does not help: every entry is checked against the sha256 the orchestrator got from the
    filler (held in the orchestrator's memory, passed per job), so a rewritten entry is detected and
    the reference runs live (counted as `rejected` in the workload's extra["refcache"]);
  - the caching probe still times never-seen values (os.urandom seeds) on both sides; only its final
    output check uses one of the run's pool seeds, drawn from os.urandom when the cache was filled (so
    no candidate can carry answers for them from before the run). What a candidate could do across
    evaluations of one run is keep its own earlier (correct) answers for those pool inputs in a file;
    it cannot get them without having computed them.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any, Optional

FORMAT_VERSION = 1
_HERE = Path(__file__).resolve().parent


def inputs_version() -> str:
    """Changes whenever input generation (inputs.py) or this cache's format changes."""
    h = hashlib.sha256((_HERE / "inputs.py").read_bytes())
    h.update(f"refcache-format-{FORMAT_VERSION}".encode())
    return h.hexdigest()[:16]


def reference_hash(reference_source: str) -> str:
    return hashlib.sha256(reference_source.encode()).hexdigest()[:16]


def entry_key(problem: str, uuid: str, seed: int, inputs_ver: str, ref_hash: str,
              torch_version: str, device_name: str) -> str:
    parts = [problem, uuid, str(int(seed)), inputs_ver, ref_hash, torch_version, device_name]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def fingerprint(inputs: dict) -> dict:
    """A cheap fingerprint of an input set (per tensor: dtype, shape, two wrapped int64 sums of its
    32-bit words; scalars by repr), computed where the tensors live. It catches a regenerated input
    set that differs from the one the reference saw (another RNG, torch, GPU); it is not a defence
    against an adversary (inputs are made by trusted code, and the input-mutation guard has already
    checked that the candidate left them alone)."""
    import torch

    out: dict[str, Any] = {}
    for k in sorted(inputs):
        v = inputs[k]
        if not isinstance(v, torch.Tensor):
            out[k] = ["scalar", repr(v)]
            continue
        t = v.detach().contiguous().reshape(-1)
        raw = t.view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
        w = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw.to(torch.int32)
        s1 = s2 = 0
        step = 1 << 24
        for i in range(0, w.numel(), step):
            c = w[i:i + step].to(torch.int64)
            s1 += int(c.sum())
            s2 += int((c * (c ^ 0x5BD1E995)).sum())
        out[k] = [str(v.dtype), list(v.shape), s1 & ((1 << 64) - 1), s2 & ((1 << 64) - 1)]
    return out


# ── the reading side (inside the candidate's driver process; trusted code) ────────────────────────
class RefCacheReader:
    """job["refcache"] = {"dir", "entries": {uuid: {seed: {"key", "sha256"}}}, "probe_seeds": {uuid:
    [seed, ...]}}. get() returns the cached outputs (device tensors) or None (then: run live)."""

    def __init__(self, spec: dict, *, problem: Optional[str] = None,
                 reference_source: Optional[str] = None, device_name: Optional[str] = None):
        """With problem, reference_source and device_name given (the driver does), every entry's key
        must equal the one this process computes from its own definition, input generator, torch and
        GPU: an entry filled for another reference (or inputs.py, torch, GPU) is stale and rejected."""
        self.expect = None
        if problem is not None and reference_source is not None and device_name is not None:
            import torch

            self.expect = (problem, inputs_version(), reference_hash(reference_source),
                           torch.__version__, device_name)
        self.dir = Path(spec["dir"])
        self.entries = {u: {int(s): e for s, e in d.items()} for u, d in spec.get("entries", {}).items()}
        self.probe_seeds = {u: [int(s) for s in v] for u, v in spec.get("probe_seeds", {}).items()}
        self.stats: dict[str, dict] = {}

    def _stat(self, uuid: str) -> dict:
        return self.stats.setdefault(uuid, {"hits": 0, "live": 0, "rejected": []})

    def has(self, uuid: str, seed: int) -> bool:
        return int(seed) in self.entries.get(uuid, {})

    def get(self, uuid: str, seed: int, inputs: dict, device) -> Optional[dict]:
        st = self._stat(uuid)
        e = self.entries.get(uuid, {}).get(int(seed))
        if e is None:
            st["live"] += 1
            return None
        if self.expect is not None:
            p, iv, rh, tv, dn = self.expect
            if e.get("key") != entry_key(p, uuid, seed, iv, rh, tv, dn):
                st["rejected"].append(f"seed {seed}: stale key (reference, inputs, torch or GPU "
                                      "changed since the fill)")
                st["live"] += 1
                return None
        try:
            blob = (self.dir / f"{e['key']}.pt").read_bytes()
        except OSError as err:
            st["rejected"].append(f"seed {seed}: unreadable ({type(err).__name__})")
            st["live"] += 1
            return None
        if sha256_bytes(blob) != e["sha256"]:
            st["rejected"].append(f"seed {seed}: sha256 differs from the filler's")
            st["live"] += 1
            return None
        import torch

        obj = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        if obj.get("key") != e["key"] or obj.get("fingerprint") != fingerprint(inputs):
            st["rejected"].append(f"seed {seed}: regenerated inputs differ from the filled ones")
            st["live"] += 1
            return None
        st["hits"] += 1
        return {k: t.to(device) for k, t in obj["outputs"].items()}


def job_spec(cache_dir: Path, summary: dict) -> dict:
    """What the orchestrator puts into a candidate's job.json (digests from its own memory)."""
    return {"dir": str(cache_dir), "entries": summary.get("entries", {}),
            "probe_seeds": summary.get("probe_seeds", {})}
