"""A model of gemm_wgmma's persistent tier-2 schedule and its mbarrier ring, in Python (no GPU here):
the tile order (tile_coord with a raster group, CTAs looping bid += gridDim.x) covers every output
tile exactly once, and the producer / consumer protocol (full/empty barriers with parity waits, the
ring position carried across tiles, the last stage released after each tile, idle warpgroups that
only release what is full) never deadlocks and always hands a consumer the k-tile it expects, under
random interleavings. The model follows the kernel line by line (names as in gemm_wgmma.cu)."""

from __future__ import annotations

import random

import pytest


def tile_coord(m: int, n: int, bm: int, bn: int, group: int, bid: int) -> tuple[int, int]:
    n_tiles, m_tiles = n // bn, -(-m // bm)
    if group > 0:
        g = bid // (group * n_tiles)
        first = g * group
        gsize = min(m_tiles - first, group)
        inn = bid - g * group * n_tiles
        return first + inn % gsize, inn // gsize
    return bid % m_tiles, bid // m_tiles


def t2_tile(order: int, grid: int, cta: int, j: int) -> int:
    return (j + 1) * grid - 1 - cta if order and j & 1 else j * grid + cta


def cta_tiles(order: int, grid: int, cta: int, tiles: int) -> list[int]:
    out, j = [], 0
    while (bid := t2_tile(order, grid, cta, j)) < tiles:  # the kernel's loop
        out.append(bid)
        j += 1
    return out


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("m,n,bm,bn,group,ctas", [
    (8192, 4096, 128, 256, 16, 132), (2053, 4096, 128, 256, 8, 132), (136, 28672, 128, 256, 16, 132),
    (16294, 2048, 128, 256, 16, 132), (300, 2048, 128, 128, 0, 132), (977, 6144, 128, 256, 3, 100)])
def test_persistent_tiles_cover_the_output_once(m, n, bm, bn, group, ctas, order):
    tiles = -(-m // bm) * (n // bn)
    grid = min(tiles, ctas)
    seen = [tile_coord(m, n, bm, bn, group, bid) for cta in range(grid) for bid in cta_tiles(order, grid, cta, tiles)]
    assert len(seen) == len(set(seen)) == tiles
    assert {t[0] for t in seen} == set(range(-(-m // bm))) and {t[1] for t in seen} == set(range(n // bn))


def test_serpentine_spreads_the_cheap_last_tiles():
    """M = 2053 on 128 x 256 tiles, N = 4096: 16 full M-tiles and one of 5 rows (half cost with
    MSKIP: one warpgroup multiplies) = 256 full + 16 half tiles on 132 CTAs. Round-robin gives
    CTAs 0..7 two full tiles and a half one (2.5); serpentine hands them the half ones (2.0)."""
    tiles, grid = 17 * 16, 132
    cost = lambda bid: 0.5 if tile_coord(2053, 4096, 128, 256, 16, bid)[0] == 16 else 1.0
    worst = {o: max(sum(map(cost, cta_tiles(o, grid, c, tiles))) for c in range(grid)) for o in (0, 1)}
    assert worst == {0: 2.5, 1: 2.0}


class Barrier:
    """mbarrier: a phase completes when `count` arrivals came; try_wait.parity(p) succeeds once the
    phase with parity p has completed, i.e. while the current phase's parity differs from p."""

    def __init__(self, count: int):
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def ready(self, parity: int) -> bool:
        return (self.phase & 1) != parity


def run_model(st: int, nwg: int, kt: int, tiles_of_cta: list[tuple[int, list[bool]]], seed: int):
    """One CTA: a producer and nwg consumer warpgroups as generators stepping one action at a time.
    tiles_of_cta: (tile id, idle flag per warpgroup) in the CTA's order."""
    full = [Barrier(1) for _ in range(st)]          # the 128 producer arrivals, as one
    empty = [Barrier(nwg) for _ in range(st)]       # one arrival per consumer warpgroup
    stage_data = [None] * st

    def producer():
        s, ph = 0, 0
        for tile, _ in tiles_of_cta:
            for k in range(kt):
                while not empty[s].ready(ph ^ 1):
                    yield
                assert stage_data[s] is None or stage_data[s][2] == nwg, "refilled before every consumer released it"
                stage_data[s] = [tile, k, 0]
                full[s].arrive()
                s, ph = (0, ph ^ 1) if s + 1 == st else (s + 1, ph)
                yield

    got = {w: [] for w in range(nwg)}

    def consumer(w):
        s, ph = 0, 0
        for tile, idle in tiles_of_cta:
            prev = 0
            for k in range(kt):
                while not full[s].ready(ph):
                    yield
                if idle[w]:
                    stage_data[s][2] += 1
                    empty[s].arrive()
                else:
                    assert stage_data[s][:2] == [tile, k], (w, tile, k, stage_data[s])
                    got[w].append((tile, k))
                    yield  # the wgmmas in flight
                    if k > 0:  # wgmma_wait<1>: the previous group done, its stage released
                        stage_data[prev][2] += 1
                        empty[prev].arrive()
                prev = s
                s, ph = (0, ph ^ 1) if s + 1 == st else (s + 1, ph)
                yield
            if not idle[w]:
                stage_data[prev][2] += 1  # wgmma_wait<0>, then the last stage
                empty[prev].arrive()
            yield  # the epilogue

    rng = random.Random(seed)
    actors = [producer()] + [consumer(w) for w in range(nwg)]
    steps = 0
    while actors:
        a = rng.choice(actors)
        try:
            next(a)
        except StopIteration:
            actors.remove(a)
        steps += 1
        assert steps < 200000, "deadlock"
    for w in range(nwg):
        want = [(t, k) for t, idle in tiles_of_cta if not idle[w] for k in range(kt)]
        assert got[w] == want


@pytest.mark.parametrize("st,nwg,kt", [(4, 2, 5), (7, 2, 3), (4, 1, 9), (2, 2, 2), (3, 2, 64)])
def test_ring_protocol_across_tiles_with_idle_warpgroups(st, nwg, kt):
    rng = random.Random(st * 100 + kt)
    for seed in range(10):
        tiles = [(t, [rng.random() < 0.3 and w > 0 for w in range(nwg)]) for t in range(rng.randint(1, 5))]
        run_model(st, nwg, kt, tiles, seed)


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_staged_epilogue_layout(bn):
    """T2_EPI: each consumer warp writes its 16 x PW slice of the accumulator fragments (thread
    lane: rows lane/4 and lane/4 + 8, columns 8j + 2(lane%4) + {0,1}) as half2 into a 16-row buffer
    with 16-byte chunks XOR-swizzled by row, then reads 16-byte chunks back row-contiguously. Every
    (row, column) must come back where it belongs, and neither phase may have bank conflicts (per
    instruction: 32 distinct 4-byte banks for the half2 stores; per 8-lane phase of the 16-byte
    loads, 8 distinct 16-byte bank groups)."""
    pw = min(bn, 128)
    cpr = pw // 8
    for p in range(bn // pw):
        buf = {}
        for jl in range(cpr):  # one store instruction per (jl, half): all 32 lanes
            for half in (0, 1):
                banks = set()
                for lane in range(32):
                    r = lane // 4 + 8 * half
                    sw = (jl ^ (lane // 4 & 7)) << 4
                    addr = r * pw * 2 + sw + (lane % 4) * 4
                    col = p * pw + 8 * jl + 2 * (lane % 4)
                    buf[addr] = (r, col)          # the half2 holding columns col, col + 1
                    buf[addr + 2] = (r, col + 1)
                    banks.add(addr // 4 % 32)
                assert len(banks) == 32
        for it in range(16 * cpr // 32):  # 16-byte loads
            for phase in range(4):
                groups = set()
                for lane in range(8 * phase, 8 * phase + 8):
                    idx = it * 32 + lane
                    r, c = idx // cpr, idx % cpr
                    addr = r * pw * 2 + ((c ^ (r & 7)) << 4)
                    groups.add(addr // 16 % 8)
                    for e in range(8):  # the 8 halves of the chunk go to row r, columns p*pw + 8c + e
                        assert buf[addr + 2 * e] == (r, p * pw + 8 * c + e)
                assert len(groups) == 8
