"""`for i in range(n)` over a symbolic size, traced once as a batched body (vmap), not unrolled.

A reference that loops over a batch size (`for b in range(B): out[:, :, b] = f(x[:, :, b])`) would
unroll into B copies and specialise the graph to this workload's B. In the reference's namespace
`range(n)` with a SymInt n yields one `LoopIndex` inside a functorch vmap level of size n: `x[..., i]`
(i at one position among full slices) is x with that dim as the level's batch dim, every op on it
runs batched (mm becomes a batched mm, ...), and `out[..., i] = v` writes the whole batch at once
(v unbatched into that dim). The graph is then the same for every n.

Only what keeps the loop's meaning is allowed: each iteration writes its own slice, nothing else
leaves the body. The index used any other way (arithmetic, a Python list index, an int), a value
computed in the body used after the loop (an accumulation `acc = acc + ...`), a name bound before
the loop and rebound in it to a value of the body (a carry the next iteration reads: `state =
state * d + ...`, even when `state` is never read after the loop) or a body vmap cannot run stop
this trace; trace.py then traces the loop unrolled, as for a plain range.
"""

from __future__ import annotations

from typing import Any


class LoopIndexError(Exception):
    pass


class LoopIndex:
    """The loop variable: usable only as a tensor index among full slices."""

    def __init__(self, loop: "BatchedLoop"):
        self.loop = loop

    def _refuse(self, *a, **k):
        raise LoopIndexError("the index of a loop over a symbolic size is used other than as a "
                             "tensor index")

    __index__ = __int__ = __float__ = __bool__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __truediv__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse
    __hash__ = None


class BatchedLoop:
    def __init__(self, n, state: "LoopBatching"):
        self.n = n
        self.state = state
        self.level = None

    def __iter__(self):
        import sys

        from torch._C._functorch import _vmap_decrement_nesting, _vmap_increment_nesting

        frame = sys._getframe(1)            # the reference's frame running the `for` statement
        before = _tensor_names(frame)
        self.level = _vmap_increment_nesting(self.n, "error")
        st = self.state
        st.serial += 1
        st.active[self.level] = st.serial   # levels are reused by later loops: serials are not
        try:
            yield LoopIndex(self)
            # The body ran once for every index at a time. A name bound to a tensor before the
            # loop and to a value of this loop now is a carry (`state = state * d + k.T @ v`): the
            # next iteration would read the new value, the batched body read the first one for all.
            carried = [k for k in before if _of_level(frame.f_locals.get(k), self.level)]
            if carried:
                raise LoopIndexError(f"`{carried[0]}` is carried from one iteration of a loop over "
                                     "a symbolic size to the next")
        finally:
            st.active.pop(self.level, None)
            _vmap_decrement_nesting()


def _tensor_names(frame) -> list:
    import torch

    return [k for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor)]


def _of_level(v, level) -> bool:
    import torch
    from torch._C._functorch import is_batchedtensor, maybe_get_level

    return isinstance(v, torch.Tensor) and is_batchedtensor(v) and maybe_get_level(v) == level


_TAG = "_solforge_loop"   # the serial of the loop a batched tensor was made in


class LoopBatching:
    """Per-trace state: the `range` the reference sees, and the tensor index/assign hooks."""

    def __init__(self):
        self.active: dict = {}   # vmap level -> serial of the loop running at it
        self.serial = 0

    def range(self, fallback=None):
        """`range` for the traced reference: a loop over one symbolic size is batched; any other
        goes to `fallback` (the trace's own range, e.g. rolling.ShortLoops), else the builtin."""
        import builtins

        import torch

        plain = fallback or builtins.range

        def rng(*a):
            if len(a) == 1 and isinstance(a[0], torch.SymInt):
                return BatchedLoop(a[0], self)
            return plain(*a)
        return rng

    def wrap_mode(self, mode_cls):
        """mode_cls (a TorchFunctionMode) with the loop hooks in front and every batched result
        tagged with its loop, so a value that leaves its loop is caught where it is used."""
        state = self

        class LoopBatchingMode(mode_cls):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                state.check_args(args, kwargs)
                r = state.intercept(func, args, kwargs)
                if r is _NOT_HANDLED:
                    r = super().__torch_function__(func, types, args, kwargs)
                return state.tag(r)
        return LoopBatchingMode

    def check_args(self, args, kwargs) -> None:
        import torch
        from torch._C._functorch import is_batchedtensor, maybe_get_level

        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and is_batchedtensor(a):
                lv = maybe_get_level(a)
                tag = getattr(a, _TAG, None)
                if lv not in self.active or (tag is not None and tag != self.active[lv]):
                    raise LoopIndexError("a value computed inside a loop over a symbolic size "
                                         "is used after the loop")

    def tag(self, r):
        import torch
        from torch._C._functorch import is_batchedtensor, maybe_get_level

        if not self.active:
            return r
        for t in (r if isinstance(r, (tuple, list)) else (r,)):
            if isinstance(t, torch.Tensor) and is_batchedtensor(t) and \
                    getattr(t, _TAG, None) is None:
                serial = self.active.get(maybe_get_level(t))
                if serial is not None:
                    try:
                        setattr(t, _TAG, serial)
                    except (AttributeError, RuntimeError):
                        pass
        return r

    def intercept(self, func, args, kwargs):
        import torch
        from torch._C._functorch import _add_batch_dim, _remove_batch_dim, is_batchedtensor, \
            maybe_get_level

        if func is torch.Tensor.__getitem__ and len(args) == 2:
            pos = _index_position(args[1])
            if pos is None:
                return _NOT_HANDLED
            x, (p, loop) = args[0], pos
            if is_batchedtensor(x) and maybe_get_level(x) == loop.level:
                raise LoopIndexError("a loop index reads a value computed in its own loop")
            return _add_batch_dim(x, p, loop.level)
        if func is torch.Tensor.__setitem__ and len(args) == 3:
            pos = _index_position(args[1])
            if pos is None:
                return _NOT_HANDLED
            out, (p, loop), v = args[0], pos, args[2]
            if is_batchedtensor(out):
                raise LoopIndexError("a loop index writes into a value computed in a loop")
            full = _full_index(args[1], p)
            if isinstance(v, torch.Tensor) and is_batchedtensor(v) and \
                    maybe_get_level(v) == loop.level:
                v = _remove_batch_dim(v, loop.level, loop.n, p)
            elif isinstance(v, torch.Tensor):  # the same value for every index
                v = v.expand(out.select(p, 0).shape).unsqueeze(p)
            out[full] = v
            return None
        return _NOT_HANDLED


_NOT_HANDLED = object()


def _index_position(idx) -> Any:
    """(dim, loop) when idx is a LoopIndex alone or in a tuple of full slices; else None."""
    items = idx if isinstance(idx, tuple) else (idx,)
    hits = [(i, x) for i, x in enumerate(items) if isinstance(x, LoopIndex)]
    if not hits:
        return None
    if len(hits) > 1 or not all(isinstance(x, LoopIndex) or (isinstance(x, slice) and
                                                             x == slice(None)) for x in items):
        raise LoopIndexError("a loop index combined with other indices")
    return hits[0][0], hits[0][1].loop


def _full_index(idx, p: int):
    items = list(idx) if isinstance(idx, tuple) else [idx]
    items[p] = slice(None)
    return tuple(items)
