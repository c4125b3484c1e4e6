"""attention_ragged family: it claims FlashInfer-Bench 016/017 (ragged GQA causal prefill) and
nothing else; its kernel is attention_prefill.cu with RAGGED=1 (kv row kv_start + n instead of
kv_indices[kv_start + n]), every param point compiles for sm_90a without spills, the launch spec
fits every workload, RAGGED=0 leaves attention_prefill's GPU-checked cubin unchanged, and the
prefill emulation with identity indices (what RAGGED=1 reads) matches the ragged reference."""

from __future__ import annotations

import math
import re

import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, all_families, families_for, get_family
from solforge.problem.loader import load_problem_dir
from tests.unit.family_checks import check_compiled, claimed
from tests.unit.test_kernels_attention_prefill import _check, emulate

SUBSET = "FlashInfer-Bench"
CLAIMED = ["016_gqa_ragged_prefill_causal_h32_kv4_d128", "017_gqa_ragged_prefill_causal_h32_kv8_d128"]


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return {n: load_problem_dir(sol_execbench_dir / SUBSET / n) for n in CLAIMED}


def test_claims_exactly_016_and_017(sol_execbench_dir):
    assert claimed(get_family("attention_ragged"), sol_execbench_dir) == CLAIMED


def test_not_offered_before_a_gpu_check(problems):
    fam = get_family("attention_ragged")
    assert fam in all_families()
    if not fam.offered:
        for p in problems.values():
            assert fam not in families_for(p)


def test_changed_reference_is_not_claimed(problems):
    defn = problems[CLAIMED[0]].definition
    data = defn.model_dump()
    data["reference"] = defn.reference.replace("(q_positions[:, None] + 1 + delta)", "(num_kv_tokens)")
    assert not get_family("attention_ragged").matches(type(defn).model_validate(data))


def test_bad_params_rejected(problems):
    fam, p = get_family("attention_ragged"), problems[CLAIMED[0]]
    for bad in ({"BLOCK_M": 64, "BLOCK_N": 32, "STAGES": 3, "ZFUSE": 1},
                {"BLOCK_M": 48, "BLOCK_N": 64, "STAGES": 2},
                {"BLOCK_M": 64, "BLOCK_N": 32, "STAGES": 3, "RAGGED": 0}):
        with pytest.raises(FamilyError):
            fam.instantiate(p, bad)


@pytest.mark.parametrize("name", CLAIMED)
def test_every_point_compiles_without_spills_and_launches_fit(problems, name, tmp_path):
    fam, p = get_family("attention_ragged"), problems[name]
    space = fam.param_space(p)
    assert len(space) >= 4
    for params in space:
        cand = fam.instantiate(p, params)
        Candidate.model_validate_json(cand.model_dump_json())
        assert cand.params["RAGGED"] == 1
        zero, launch = cand.launches
        assert (zero.kernel, launch.kernel) == ("gqa_prefill_zero_rows", "gqa_paged_prefill_causal")
        assert launch.args[:8] == ["q", "k", "v", "qo_indptr", "kv_indptr", "kv_indptr", "output", "lse"]
        for w in p.workloads:
            env = launch_env(w.axes, w.scalars(), cand.params)
            gx, gy = (eval_expr(g, env) for g in launch.grid)
            batch = w.axes["len_indptr"] - 1
            group = cand.params["NUM_QO_HEADS"] // cand.params["NUM_KV_HEADS"]
            valid = min(w.axes["total_q"], w.axes["total_kv"])
            assert gx >= (valid * group) // params["BLOCK_M"] + batch
            assert 1 <= gx < 2**31 - 1 and gy == cand.params["NUM_KV_HEADS"]
            assert eval_expr(zero.grid[0], env) * 8 >= w.axes["total_q"]
            assert eval_expr(launch.args[-2].split(":", 1)[1], env) == batch
        check_compiled(cand, tmp_path, ("HMMA.16816.F32.BF16", "LDGSTS"), what=params)


def test_ragged_off_compiles_to_the_gpu_checked_prefill_code(sol_execbench_dir):
    """The RAGGED macro and its one-line gather change leave attention_prefill (RAGGED undefined)
    byte-identical to the source before them, whose cubins the H200 checks found correct."""
    from solforge.kernels.build import compile_cuda_candidate

    fam = get_family("attention_prefill")
    p = load_problem_dir(sol_execbench_dir / SUBSET / "015_gqa_paged_prefill_causal_h32_kv8_d128_ps1")
    for params in fam.param_space(p)[:2]:
        cand = fam.instantiate(p, params)
        src = cand.sources["attention_prefill.cu"]
        old = src.replace("(RAGGED ? (long long)(kv_start + n) : (long long)kv_indices[kv_start + n])",
                          "(long long)kv_indices[kv_start + n]")
        old = re.sub(r"#ifndef RAGGED\n#define RAGGED 0\n#endif\n", "", old)
        assert old != src and "RAGGED ?" not in old
        a, _ = compile_cuda_candidate(cand)
        b, _ = compile_cuda_candidate(cand.model_copy(update={"sources": {"attention_prefill.cu": old}}))
        assert a == b


def _reference(defn):
    ns: dict = {}
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    return ns["run"]


# q_len == kv_len (what the evaluator generates), q_len < kv_len, lengths straddling tiles
CASES = [([5, 1, 19], [5, 1, 19]), ([3, 40], [9, 130]), ([70, 2], [70, 2]), ([1], [1])]


@pytest.mark.parametrize("name", CLAIMED)
def test_emulation_matches_reference_on_every_point(problems, name):
    fam, p = get_family("attention_ragged"), problems[name]
    ref = _reference(p.definition)
    h_kv = fam.analyze(p.definition).fixed["NUM_KV_HEADS"]
    for ci, (q_lens, kv_lens) in enumerate(CASES):
        g = torch.Generator().manual_seed(ci)
        total_q, total_kv = sum(q_lens), sum(kv_lens)
        q = torch.randn(total_q, 32, 128, generator=g).to(torch.bfloat16)
        k = torch.randn(total_kv, h_kv, 128, generator=g).to(torch.bfloat16)
        v = torch.randn(total_kv, h_kv, 128, generator=g).to(torch.bfloat16)
        qo = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
        kvp = torch.tensor([0] + list(torch.tensor(kv_lens).cumsum(0)), dtype=torch.int32)
        sc = 1.0 / math.sqrt(128)
        ref_out, ref_lse = ref(q, k, v, qo, kvp, sc)
        ident = torch.arange(total_kv, dtype=torch.int32)   # RAGGED=1 reads row kv_start + n
        for params in fam.param_space(p):
            out, lse = emulate(q, k[:, None], v[:, None], qo, kvp, ident, sc, block_m=params["BLOCK_M"],
                               block_n=params["BLOCK_N"], num_kv_heads=h_kv, zfuse=False)
            _check(out, lse, ref_out, ref_lse)
