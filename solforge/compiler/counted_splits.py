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
    tensor of one element, that element; of a static length over one, its HostReads."""
    import torch

    from .loop_base import SHORT_RUN, active_loops

    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        return MISS
    n = _static_length(t)
    if n is not None and n > 1:
        # a count per expert (a fake tensor has no values to list): each read where the loop over
        # experts reads it
        return HostReads(t)
    loops = active_loops()
    if loops is None or not loops.enabled:
        return MISS
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


class HostReads:
    """A 1-D integer tensor's values read to the host (`counts.cpu().numpy()`, or `counts.tolist()`
    of a static length: a count per expert), read one at a time where the reference
    indexes them: each `t[j].item()` then lands in the loop iteration that reads it, so a loop over
    the values rolls. Each read is remembered with its position, and the exclusive prefix sum of
    a tensor of a static length is taken here, before any loop, for `running_slice`. Nothing else
    numpy or a list offers is (an attribute it lacks stops the trace with its name)."""

    def __init__(self, t):
        import torch

        self._t = t
        self.shape = tuple(t.shape)
        self.ndim = t.dim()
        _STATE.keep.append(t)
        if t.dim() == 1 and (_static_length(t) or 0) > 1 and id(t) not in _STATE.offsets:
            # a count per expert (a static length): a loop over experts may slice at their
            # running offset. Segment bounds of a symbolic length (`cu`) are read as they are.
            off = torch.cumsum(t, 0) - t
            _STATE.offsets[id(t)] = off
            _STATE.keep.append(off)

    def __len__(self):
        return len(self._t)

    def __getitem__(self, i):
        from .errors import TraceError

        if self._t.dim() == 0 or not hasattr(i, "__index__"):   # an int, or a numpy integer
            raise TraceError("the reference reads a tensor's values to the host and indexes them "
                             "by more than one position")
        return _read(self._t, i)

    def __iter__(self):
        return (_read(self._t, i) for i in range(len(self._t)))

    def item(self):
        return self._t.item()

    def tolist(self):
        return list(self)


def _read(t, i):
    """t[i] read back, its origin remembered; emptiness tests of it are decided as in a counted
    loop (counted_loops.decide: the non-empty side)."""
    import torch

    from .loop_base import active_loops

    v = t[i].item()
    if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol:
        _STATE.origin[v.node.expr] = (t, int(i))
        loops = active_loops()
        if loops is not None:
            loops.any_counted = True
    return v


def running_slice(x, index):
    """`x[start:start + n]` where n is the e-th value of a HostReads and start the sum of the ones
    before it (the running offset of `start += n`, any number of Python additions): the same rows
    with start read from the values' exclusive prefix sum at e. Iteration e then reads values at
    position e only, and a loop over e rolls. MISS for any other index."""
    import torch

    dims = index if isinstance(index, tuple) else (index,)
    if not dims or not isinstance(dims[-1], slice) or \
            any(d != slice(None) for d in dims[:-1]) or dims[-1].step not in (None, 1):
        return MISS
    sl = dims[-1]
    if not isinstance(sl.stop, torch.SymInt):
        return MISS
    stop = sl.stop.node.expr
    if isinstance(sl.start, torch.SymInt):
        start = sl.start.node.expr
    elif sl.start in (None, 0) and not isinstance(sl.start, bool):
        start = 0
    else:
        return MISS
    n = stop - start
    got = _STATE.origin.get(n) if getattr(n, "is_Symbol", False) else None
    if got is None:
        return MISS
    t, e = got
    off = _STATE.offsets.get(id(t))
    if off is None:
        return MISS
    import sympy

    terms = sympy.Add.make_args(sympy.expand(start)) if start != 0 else ()
    before = [_STATE.origin.get(u) for u in terms]   # the values read before e, one term each
    if any(b is None or b[0] is not t for b in before) or sorted(b[1] for b in before) != list(range(e)):
        return MISS
    idx = torch.full((1,), e, dtype=torch.int64)
    s = torch.index_select(off, 0, idx).squeeze(0).item()
    length = sl.stop - sl.start if isinstance(sl.start, torch.SymInt) else sl.stop   # n itself
    return x[dims[:-1] + (slice(s, s + length),)]


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
    if func is torch.Tensor.__getitem__ and len(args) == 2 and isinstance(args[0], torch.Tensor) \
            and _STATE.offsets:
        hit = running_slice(*args)
        if hit is not MISS:
            return hit
    if func in (torch.split, torch.Tensor.split) and len(args) >= 2 and \
            isinstance(args[0], torch.Tensor) and isinstance(args[1], (list, tuple)):
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
        return split(args[0], args[1], dim)
    return MISS
