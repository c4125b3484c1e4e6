"""`x.split(lengths.tolist(), dim)` with lengths a tensor of a symbolic length n (segment lengths
read back from the device), then a loop over the chunks (`for q, k in zip(qs, ks)`): a loop of n
iterations, as counted_loops.py lowers it.

Trace (in the child): `t.tolist()` of a 1-D integer tensor of a symbolic length gives SHORT_RUN
values read back (each `t[j].item()`) and remembers where each came from. `split` by such a list
(or a list comprehension that kept them all, in order: `[l for l in lengths if l > 0]`, whose
test takes the non-empty side as counted_loops.decide does) gives a lazy list of chunks: iterating
it registers one counted loop of n iterations (the lists a `zip` iterates together share it), and
its j-th chunk is made inside iteration j, from values read back there: `x.narrow(dim, start_j,
length_j)` with start_j from the lengths' exclusive prefix sum. Each iteration is then a self-
contained block the loop rolls (rolling.py), and its slice a size bounded by the dim it slices
(sliced_sizes.py). The chunk lengths are assumed to add up to the split dim (split's own check):
the cat of the loop's outputs is checked against the dims it is reshaped to (counted_loops).
"""

from __future__ import annotations

import sys

MISS = object()


class _State:
    """Per-trace: where each value read by tolist came from, prefix sums per lengths tensor, and
    the loop (with its per-iteration reads) the chunk lists iterated together share."""

    def __init__(self):
        self.origin: dict = {}      # unbacked symbol -> (lengths tensor, position)
        self.offsets: dict = {}     # id(lengths tensor) -> its exclusive prefix sum
        self.keep: list = []        # tensors whose ids key the dicts above
        self.loops: dict = {}       # (frame id, instruction) -> per-iteration reads
        self.tested: set = set()    # ids of lengths tensors whose values the reference tested
        self.lists: dict = {}       # id(lengths tensor) -> the values tolist gave


_STATE = _State()


def reset() -> None:
    global _STATE
    _STATE = _State()


def tolist(t):
    """The SHORT_RUN first values of a 1-D int tensor of a symbolic length, each read back (the
    reads roll into a loop of their own: its values serve only Python, split reads afresh); of a
    tensor of one element, that element."""
    import torch

    from .loop_base import SHORT_RUN, active_loops

    loops = active_loops()
    if loops is None or not loops.enabled or t.dim() != 1 or t.is_floating_point() or \
            t.dtype == torch.bool:
        return MISS
    n = _static_length(t)
    if n is not None:
        # one segment (a workload with one sequence: the trace makes that length static): its
        # one value, read back; a split by it is the whole dim (split's own check), see split()
        if n != 1:
            return MISS
        v = torch.index_select(t, 0, torch.zeros((1,), dtype=torch.int64)).squeeze(0).item()
        if not isinstance(v, torch.SymInt):
            return MISS
        _STATE.keep.append(t)
        _STATE.origin[v.node.expr] = (t, 0)
        return [v]
    if id(t) in _STATE.lists:   # the same tensor's values again: the same reads
        return list(_STATE.lists[id(t)])
    out = []
    loops.any_counted = True   # tests of these values are decided as counted_loops.decide says
    _STATE.keep.append(t)
    # the reads roll into a loop of their own (of the tensor's length): register its count
    loops.counts.append(t.shape[0])
    for j in range(SHORT_RUN):
        v = torch.index_select(t, 0, torch.full((1,), j, dtype=torch.int64)).squeeze(0).item()
        if not isinstance(v, torch.SymInt):
            return MISS
        _STATE.origin[v.node.expr] = (t, j)
        out.append(v)
    _STATE.lists[id(t)] = list(out)
    return out


def _static_length(t):
    """The length of a 1-D tensor when the trace made it a number, else None."""
    import torch

    n = t.shape[0]
    if isinstance(n, torch.SymInt):
        return None if n.node.expr.free_symbols else int(n)
    return int(n)


def tested(symbols) -> None:
    """The reference tested these values read by tolist for emptiness."""
    for u in symbols:
        got = _STATE.origin.get(u)
        if got is not None:
            _STATE.tested.add(id(got[0]))


def _source(sizes):
    """The lengths tensor a list of sizes was read from, all of it in order, else None."""
    import torch

    from .loop_base import SHORT_RUN

    if not isinstance(sizes, (list, tuple)) or len(sizes) != SHORT_RUN or \
            not all(isinstance(s, torch.SymInt) for s in sizes):
        return None
    got = [_STATE.origin.get(s.node.expr) for s in sizes]
    if any(g is None for g in got) or any(g[0] is not got[0][0] or g[1] != j for j, g in enumerate(got)):
        return None
    return got[0][0]


def split(x, sizes, dim=0):
    import torch

    if isinstance(sizes, (list, tuple)) and len(sizes) == 1 and isinstance(sizes[0], torch.SymInt):
        got = _STATE.origin.get(sizes[0].node.expr)
        if got is not None and _static_length(got[0]) == 1:
            d = dim % x.dim()
            return (x.narrow(d, 0, x.shape[d]),)   # one segment: all of the dim
    t = _source(sizes)
    if t is None:
        return MISS
    return Chunks(x, t, dim)


class Chunks:
    """The chunks of x along dim, made lazily per loop iteration (see the module doc)."""

    def __init__(self, x, lengths, dim):
        self.x, self.lengths, self.dim = x, lengths, dim

    def __len__(self):
        from .loop_base import SHORT_RUN

        return SHORT_RUN

    def __iter__(self):
        from .loop_base import SHORT_RUN, active_loops

        f = sys._getframe(1)
        key = (id(f), f.f_lasti)
        loops = active_loops()
        reads = _STATE.loops.get(key)
        if reads is None or reads["lengths"] is not self.lengths:
            reads = {"lengths": self.lengths, "at": {}}
            _STATE.loops = {key: reads}   # a later loop reads its values afresh
            loops.counts.append(self.lengths.shape[0])
            loops.any_counted = True

        def run():
            loops.counted += 1
            try:
                for j in range(SHORT_RUN):
                    yield self._chunk(reads, j)
            finally:
                loops.counted -= 1
        return run()

    def _chunk(self, reads, j):
        import torch

        at = reads["at"]
        if j not in at:
            t = self.lengths
            off = _STATE.offsets.get(id(t))
            if off is None:
                off = torch.cumsum(t, 0) - t
                _STATE.offsets[id(t)] = off
                _STATE.keep.append(off)
            idx = torch.full((1,), j, dtype=torch.int64)
            start = torch.index_select(off, 0, idx).squeeze(0).item()
            length = torch.index_select(t, 0, idx).squeeze(0).item()
            at[j] = (start, length)
        start, length = at[j]
        if id(self.lengths) in _STATE.tested:
            # the reference dropped empty segments (`[l for l in lengths if l > 0]`): these
            # lengths are tested for emptiness as well (dynamic.check_oblivious)
            import sympy

            env = length.node.shape_env
            e = sympy.Eq(length.node.expr, 0)
            if e not in env.oblivious:
                env.oblivious.append(e)
        dim = self.dim % self.x.dim()
        # a slice, not narrow: narrow checks start + length against the dim on this trace's values
        return self.x[(slice(None),) * dim + (slice(start, start + length),)]


def handle(func, args, kwargs):
    """The trace's hooks: tolist of segment lengths, split by them."""
    import torch

    if func is torch.Tensor.tolist and len(args) == 1 and isinstance(args[0], torch.Tensor):
        return tolist(args[0])
    if func in (torch.split, torch.Tensor.split) and len(args) >= 2 and \
            isinstance(args[0], torch.Tensor) and isinstance(args[1], (list, tuple)):
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
        return split(args[0], args[1], dim)
    return MISS
