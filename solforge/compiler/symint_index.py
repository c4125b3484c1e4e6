"""`t[:, i]` with i a symbolic int (an int scalar input, `offset + k` in a loop over experts).

Python indexing turns a SymInt index into an int through `__index__`, which pins the trace to this
workload's value (a guard that singles the symbol out). Basic indexing by slices, ints, SymInts and
one Ellipsis is rewritten here as slices and `torch.select`, which keeps the index symbolic.
"""

from __future__ import annotations

NOT_HANDLED = object()


def getitem(t, idx):
    """t[idx] with every SymInt in idx kept symbolic, or NOT_HANDLED when idx has no SymInt or is
    not basic indexing (tensors, None, bools stay with torch's own indexing)."""
    import torch

    items = idx if isinstance(idx, tuple) else (idx,)
    if not any(isinstance(e, torch.SymInt) for e in items):
        return NOT_HANDLED
    if not all(isinstance(e, (slice, int, torch.SymInt)) and not isinstance(e, bool) or e is Ellipsis
               for e in items) or sum(e is Ellipsis for e in items) > 1:
        return NOT_HANDLED
    used = sum(e is not Ellipsis for e in items)
    if used > t.dim():
        return NOT_HANDLED
    full: list = []
    for e in items:
        full.extend([slice(None)] * (t.dim() - used) if e is Ellipsis else [e])
    out, dim = t, 0
    for e in full:
        if isinstance(e, slice):
            if e != slice(None):
                out = out[(slice(None),) * dim + (e,)]
            dim += 1
        else:
            out = torch.select(out, dim, e)   # the dim goes; the next index applies to its place
    return out
