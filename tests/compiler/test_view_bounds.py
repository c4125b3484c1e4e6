"""What views tell about data-dependent sizes (solforge/compiler/view_bounds.py), on IR written here:
a product of values read back that a view of a bounded slice bounds, a collected length a view pins,
and the views that tell nothing."""

from __future__ import annotations

import sympy

from solforge.compiler import dynamic, symexpr
from solforge.compiler.view_bounds import pinned_sizes, view_products


def _ir(src_shape, dst_shape, dyn=None):
    return {"inputs": [{"name": "x", "kind": "tensor", "shape": ["P", "C"]}],
            "dynamic": dyn or {},
            "nodes": [{"name": "a", "op": "aten.slice.Tensor", "args": [{"ref": "x"}], "kwargs": {},
                       "shape": src_shape},
                      {"name": "v", "op": "aten.view.default", "args": [{"ref": "a"}, []], "kwargs": {},
                       "shape": dst_shape}]}


BOUNDS = {"dyn0": None, "dyn1": None, "dyn2": None, "dyn3": symexpr.parse("P")}


def test_a_view_of_a_bounded_slice_bounds_the_product_of_values_read_back():
    ir = _ir(["dyn3", "8"], ["dyn0", "(dyn1 // 2)", "2", "(dyn2 // 2)", "2", "8"])
    got = view_products(ir, BOUNDS)
    prod = symexpr.parse("dyn0 * (dyn1 // 2) * (dyn2 // 2)")
    assert list(got) == [prod]
    assert sympy.simplify(symexpr.parse(symexpr.to_axis(got[prod])) - symexpr.parse("P // 4")) == 0
    sizes = dynamic.Sizes({"dynamic": {"dyn3": {"bound": "P"}}})
    sizes.products = got
    # inside a larger product and a sum: each term at its bound, nothing read back left
    e = dynamic.upper(symexpr.parse("6144 * dyn0 * (dyn1 // 2) * (dyn2 // 2) + 3"), sizes)
    assert not any(dynamic.is_dynamic(str(x)) for x in e.free_symbols)


def test_views_that_bound_nothing():
    # both sides unbounded; a view of a tensor that reads nothing back; a non-integer factor
    assert view_products(_ir(["dyn0", "8"], ["dyn1", "8"]), BOUNDS) == {}
    assert view_products(_ir(["P", "C"], ["C", "P"]), BOUNDS) == {}
    assert view_products(_ir(["dyn3", "8"], ["dyn0", "C"]), BOUNDS) == {}


def test_a_view_pins_a_collected_length_exactly():
    ir = _ir(["dyn15", "4096"], ["T", "8", "4096"])
    assert pinned_sizes(ir) == {"dyn15": symexpr.parse("8 * T")}
    # -1 in the view leaves the length free: the view's shape names the size itself
    assert pinned_sizes(_ir(["dyn15", "4096"], ["T", "8", "((512 * dyn15) // T)"])) == {}
