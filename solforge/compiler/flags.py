"""Branches on a value read back from an input tensor (`if training.item():`), traced on every side.

The trace's shape environment (dynamic_trace.make_shape_env) takes each such branch on the side its
policy says (False by default) and records the condition; `fork` traces every combination of
sides (at most MAX_BRANCHES branches) and makes each distinct graph a variant whose predicate reads
the flag from the input on the device (`cv(p_<input>[0])`), so every kernel of the other variants
returns at once (plan.build_candidate_variants).
"""

from __future__ import annotations

import itertools
import json

from . import symexpr

MAX_BRANCHES = 3
_PREFIX = "sfflag_"


def condition_c(cond, flags: dict) -> str:
    """A branch condition over flag symbols as C over the flag inputs' first elements."""
    e = cond.xreplace({s: symexpr.sym(_PREFIX + flags[s]) for s in cond.free_symbols})
    return symexpr.to_c_bool(e, lambda n: f"((long long)cv(p_{n[len(_PREFIX):]}[0]))")


def record(ir: dict, shape_env) -> dict:
    """The IR with the branches this trace took on flags (C conditions and the inputs read)."""
    taken = getattr(shape_env, "flag_taken", [])
    if taken:
        ir["flags"] = {"conds": [condition_c(c, shape_env.flags) for c, _ in taken],
                       "inputs": sorted({shape_env.flags[s] for c, _ in taken for s in c.free_symbols})}
    return ir


def fork(trace, first: dict) -> dict:
    """Every side of the branches `first` took (trace(policy) -> IR), as device-picked variants."""
    from .errors import TraceError

    conds = first["flags"]["conds"]
    if len(conds) > MAX_BRANCHES:
        raise TraceError(f"{len(conds)} branches on values read back from inputs "
                         f"(at most {MAX_BRANCHES} are traced on every side)")
    irs = {tuple([False] * len(conds)): first}
    for sides in itertools.product([False, True], repeat=len(conds)):
        if sides not in irs:
            ir = trace(list(sides))
            if "variants" in ir or (ir.get("flags") or {}).get("conds") != conds:
                raise TraceError("the branches on a value read back differ between their sides")
            irs[sides] = ir
    groups: dict = {}
    for sides, ir in irs.items():
        key = json.dumps({k: v for k, v in ir.items() if k not in ("flags", "guards")}, sort_keys=True)
        pred = " && ".join(c if s else f"(!{c})" for c, s in zip(conds, sides))
        groups.setdefault(key, [ir, []])[1].append(f"({pred})")
    by_name = {i["name"]: i for i in first["inputs"]}
    tensors = [[n, by_name[n]["dtype"], by_name[n]["shape"]] for n in first["flags"]["inputs"]]
    variants = [{"pred": " || ".join(preds), "names": [], "fnames": [], "tensors": tensors,
                 "ir": {k: v for k, v in ir.items() if k != "flags"}}
                for ir, preds in groups.values()]
    if len(variants) == 1:
        return variants[0]["ir"]
    return {"variants": variants, "inputs": first["inputs"]}

