"""Loop rolling on hand-written IR: which runs of blocks roll, and what the loop node holds."""

from __future__ import annotations

from solforge.compiler.rolling import LOOP_OP, roll


def _ir(reps=5, index=lambda e: e, use_mid_after=False):
    nodes = [{"name": "init", "op": "aten.full.default", "args": [["M", 4], 0.0], "kwargs": {},
              "dtype": "float32", "shape": ["M", "4"]}]
    prev = "init"
    for e in range(reps):
        nodes += [
            {"name": f"s{e}", "op": "aten.select.int", "args": [{"ref": "w"}, 0, index(e)],
             "kwargs": {}, "dtype": "float32", "shape": ["4", "4"]},
            {"name": f"m{e}", "op": "aten.mm.default", "args": [{"ref": "x"}, {"ref": f"s{e}"}],
             "kwargs": {}, "dtype": "float32", "shape": ["M", "4"]},
            {"name": f"a{e}", "op": "aten.add.Tensor", "args": [{"ref": prev}, {"ref": f"m{e}"}],
             "kwargs": {}, "dtype": "float32", "shape": ["M", "4"]},
        ]
        prev = f"a{e}"
    out = [{"ref": prev}] + ([{"ref": f"m{reps - 1}"}] if use_mid_after else [])
    return {"inputs": [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": ["M", "4"]},
                       {"name": "w", "kind": "tensor", "dtype": "float32", "shape": ["8", "4", "4"]}],
            "nodes": nodes, "outputs": out}


def test_identical_blocks_roll_into_a_loop_with_a_carry():
    ir = roll(_ir(), min_reps=4, min_nodes=1)
    loops = [n for n in ir["nodes"] if n["op"] == LOOP_OP]
    assert len(loops) == 1 and loops[0]["count"] == 5 and len(loops[0]["body"]) == 3
    body = loops[0]["body"]
    assert body[0]["args"][2] == {"sym": "sfloop0"}            # w[e]: the loop index
    carry = loops[0]["carries"][0]
    assert carry["init"] == "init" and body[2]["args"][0] == {"ref": carry["name"]}
    assert ir["outputs"] == [{"ref": carry["name"]}]           # read after the loop: the carry


def test_affine_index_keeps_its_offset_and_step():
    ir = roll(_ir(index=lambda e: 1 + 2 * e, reps=4), min_reps=4, min_nodes=1)
    body = [n for n in ir["nodes"] if n["op"] == LOOP_OP][0]["body"]
    assert body[0]["args"][2] == {"sym": "((2 * sfloop0) + 1)"} or "sfloop0" in body[0]["args"][2]["sym"]


def test_what_does_not_roll():
    # a negative index (counted from the end), too few blocks
    for ir in (_ir(index=lambda e: -1 - e), _ir(reps=3)):
        assert not any(n["op"] == LOOP_OP for n in roll(ir, min_reps=4, min_nodes=1)["nodes"])


def test_a_block_whose_inner_value_is_read_later_stays_unrolled():
    ir = roll(_ir(use_mid_after=True), min_reps=4, min_nodes=1)
    loops = [n for n in ir["nodes"] if n["op"] == LOOP_OP]
    assert loops[0]["count"] == 4                                  # four of the five blocks
    names = [n["name"] for n in ir["nodes"]]
    assert names[-2:] == ["m4", "a4"] and ir["outputs"][1] == {"ref": "m4"}


def test_short_loops_only_shorten_a_for_statement():
    from solforge.compiler.rolling import SHORT_RUN, ShortLoops

    loops = ShortLoops()
    body = "\n".join(f"    a{j} = i * 2 + {j}" for j in range(150))   # a jump past 255 bytes
    src = f"seen = []\nfor i in rng(20):\n    seen.append(int(i))\n{body}\nall_ = list(rng(20))\n"
    ns = {"rng": loops.range}
    exec(compile(src, "<reference>", "exec"), ns)
    assert ns["seen"] == list(range(SHORT_RUN)) and loops.counts == [20]
    assert ns["all_"] == list(range(20))


def test_short_loops_stop_when_the_index_is_tested():
    import pytest

    from solforge.compiler.rolling import LoopIndexSteered, ShortLoops

    ns = {"rng": ShortLoops().range}
    with pytest.raises(LoopIndexSteered):
        exec(compile("for i in rng(20):\n    if i < 2:\n        pass\n", "<reference>", "exec"), ns)


def test_a_size_argument_moving_by_a_constant_rolls():
    """w[start + e] with start an int scalar input: the index is a size expression plus e."""
    ir = _ir(reps=5)
    for n in ir["nodes"]:
        if n["op"] == "aten.select.int":
            n["args"][2] = {"sym": f"(start + {n['args'][2]})"}
    body = [n for n in roll(ir, min_reps=4, min_nodes=1)["nodes"] if n["op"] == LOOP_OP][0]["body"]
    sym = body[0]["args"][2]["sym"]
    assert "start" in sym and "sfloop0" in sym


def test_short_loops_stop_when_the_index_meets_a_symbolic_value():
    import pytest

    from solforge.compiler.rolling import LoopIndexSteered, ShortLoops

    class Sym:   # stands for a SymInt: int arithmetic with it is not an int
        def __radd__(self, o):
            return self
    ns = {"rng": ShortLoops().range, "start": Sym()}
    with pytest.raises(LoopIndexSteered):
        exec(compile("for i in rng(20):\n    g = i + start\n", "<reference>", "exec"), ns)
