"""Input generation: dtype-appropriate, never all zeros, heuristics keep references finite,
FlashInfer-Bench metadata synthesized validly, safetensors read back, reproducible per round."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from solforge.evaluate import inputs as I
from solforge.problem import load_problem_dir

g = lambda seed=0: torch.Generator().manual_seed(seed)  # noqa: E731


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float8_e4m3fn", "int32",
                                   "int64", "bool", "float4_e2m1fn_x2", "uint8"])
def test_random_tensor_dtype_and_not_zero(dtype):
    t = I.random_tensor("x", (64, 32), dtype, "cpu", g())
    assert t.shape == (64, 32)
    raw = t.view(torch.uint8) if t.element_size() == 1 else t.float()
    assert raw.to(torch.float32).abs().sum() > 0


@pytest.mark.parametrize("name,shape", [("gate_up_weight", (12, 6, 32)), ("hidden_states", (40, 16)),
                                        ("attn_weights", (9, 3, 16)), ("causal_mask", (5, 8, 8))])
def test_large_tensors_are_made_in_slices_with_the_same_rules(monkeypatch, name, shape):
    """Over CHUNK_ELEMENTS a tensor is made slice by slice along dim 0: the same dtype, shape and
    rules (fan-in scaling, rows summing to one, the causal mask per [n, n]), reproducible."""
    monkeypatch.setattr(I, "CHUNK_ELEMENTS", 100)
    t = I.random_tensor(name, shape, "bfloat16", "cpu", g(3))
    assert t.shape == shape and t.dtype == torch.bfloat16
    assert torch.equal(t, I.random_tensor(name, shape, "bfloat16", "cpu", g(3)))
    f = t.float()
    if name == "gate_up_weight":
        assert 0.05 < f.std() < 0.4                      # 1 / sqrt(32), not 1
        assert not torch.equal(f[:2], f[2:4])             # each slice its own draws
    if name == "attn_weights":
        assert torch.allclose(f.sum(-1), torch.ones(shape[:-1]), atol=2e-2)
    if name == "causal_mask":
        assert (f[:, 0, 1] < -1e30).all() and (f[:, 1, 0] == 0).all()


def test_heuristics_keep_values_sane():
    w = I.random_tensor("q_proj_weight", (256, 1024), "float32", "cpu", g())
    assert w.std() < 0.1  # scaled by fan-in
    nw = I.random_tensor("input_layernorm_weight", (512,), "float32", "cpu", g())
    assert nw.min() >= 0.5 and nw.max() <= 1.5 and nw.std() > 0  # positive, not all ones
    assert I.random_tensor("rstd", (100,), "float32", "cpu", g()).min() > 0
    p = I.random_tensor("attn_weights", (4, 16), "float32", "cpu", g())
    assert torch.allclose(p.sum(-1), torch.ones(4), atol=1e-5)
    m = I.random_tensor("causal_mask", (8, 8), "float32", "cpu", g())
    assert m[0, 1] < -1e30 and m[1, 0] == 0
    a = I.random_tensor("A_log", (32,), "float32", "cpu", g())
    assert a.max() <= -1.0


def test_synthesized_paged_metadata_is_valid(sol_execbench_dir):
    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/014_gqa_paged_prefill_causal_h32_kv4_d128_ps1")
    for rw in p.workloads[:10]:
        f = I.InputFactory(rw, "cpu")
        assert f.notes and "synthesized" in f.notes[0]
        # only the metadata: the paged K/V caches (up to 10^8 random elements each) are not checked
        x = f.make(0, only={"qo_indptr", "kv_indptr", "kv_indices"})
        qo, kv, idx = x["qo_indptr"], x["kv_indptr"], x["kv_indices"]
        assert qo[0] == 0 and kv[0] == 0
        assert int(qo[-1]) == rw.axes["total_q"] and int(kv[-1]) == rw.axes["num_kv_indices"]
        assert bool((qo[1:] >= qo[:-1]).all()) and bool((kv[1:] >= kv[:-1]).all())
        assert int(idx.min()) >= 0 and int(idx.max()) < rw.axes["num_pages"]
        if rw.axes["num_kv_indices"] <= rw.axes["num_pages"]:
            assert len(set(idx.tolist())) == len(idx)  # distinct pages
        q_len, kv_len = qo.diff(), kv.diff()
        if rw.axes["total_q"] <= rw.axes["num_kv_indices"]:
            assert bool((q_len <= kv_len).all())  # causal prefill: queries never outnumber keys


def test_reference_runs_on_synthesized_inputs(sol_execbench_dir, tmp_path):
    from solforge.evaluate.correctness import normalize_reference_outputs
    from solforge.evaluate.reference import load_reference

    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/016_gqa_ragged_prefill_causal_h32_kv4_d128")
    rw = min(p.workloads, key=lambda w: w.axes["total_q"] * w.axes["total_kv"])
    mod = load_reference(p.definition, tmp_path, "ref016")
    x = I.InputFactory(rw, "cpu").make(0)
    out = normalize_reference_outputs(mod.run(*[x[k] for k in p.definition.inputs]), rw, "cpu")
    assert all(torch.isfinite(t.float()).all() for t in out.values())


@pytest.mark.parametrize("name", ["016_gqa_ragged_prefill_causal_h32_kv4_d128",
                                  "017_gqa_ragged_prefill_causal_h32_kv8_d128",
                                  "015_gqa_paged_prefill_causal_h32_kv8_d128_ps1"])
def test_causal_prefill_queries_never_outnumber_keys(sol_execbench_dir, name):
    """total_q == total_kv leaves no slack: every sequence must get q_len == kv_len. An escape counted
    in iterations once broke those caps (016 1f97930e, 017 2068cdff: rows with no visible key, NaN
    in the reference, every candidate 'incorrect' on the H200)."""
    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / name)
    kv_key = "kv_indptr"
    for rw in p.workloads:
        kv_total = rw.axes.get("total_kv", rw.axes.get("num_kv_indices"))
        if rw.axes["total_q"] > kv_total:
            continue  # the axes themselves leave queries without keys (015 fc772d69: 34 queries, 1 key)
        f = I.InputFactory(rw, "cpu")
        for rnd in (0, 1, 100):
            x = f.make(rnd, only={"qo_indptr", kv_key})
            q_len, kv_len = x["qo_indptr"].diff(), x[kv_key].diff()
            assert bool((q_len <= kv_len).all()), (rw.uuid, rnd, q_len.tolist(), kv_len.tolist())


def test_composition_respects_tight_caps():
    g = torch.Generator().manual_seed(0)
    for parts, total in [(3, 81), (4, 172), (40, 4000), (1, 7)]:
        kv = I._composition(total, parts, g, min_each=1)
        q = I._composition(total, parts, g, min_each=1, caps=kv)
        assert q == kv and sum(q) == total
    # caps that cannot hold: still a composition of the total
    q = I._composition(10, 3, g, min_each=1, caps=[1, 1, 1])
    assert sum(q) == 10 and min(q) >= 1


def test_rounds_are_fresh_and_reproducible(sol_execbench_dir):
    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/021_rmsnorm_h128")
    rw = p.workloads[0]
    f = I.InputFactory(rw, "cpu")
    a0, a1, b0 = f.make(0), f.make(1), I.InputFactory(rw, "cpu").make(0)
    assert not torch.equal(a0["hidden_states"], a1["hidden_states"])
    assert torch.equal(a0["hidden_states"], b0["hidden_states"])


def test_safetensors_reader_and_blob_resolution(tmp_path):
    t = torch.arange(6, dtype=torch.int32)
    header = {"kv_indptr": {"dtype": "I32", "shape": [6], "data_offsets": [0, 24]}}
    h = json.dumps(header).encode()
    blob = tmp_path / "data/flashinfer-trace/blob/x.safetensors"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(struct.pack("<Q", len(h)) + h + t.numpy().tobytes())
    found = I.resolve_blob("data/flashinfer-trace/blob/x.safetensors", [tmp_path / "data"])
    assert found == blob
    assert torch.equal(I.read_safetensors(found)["kv_indptr"], t)
