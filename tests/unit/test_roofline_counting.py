"""Counting on small synthetic problems whose FLOPs and bytes are computed by hand."""

import json
from pathlib import Path

import pytest

from solforge.errors import InputError
from solforge.problem.loader import load_problem_dir
from solforge.roofline.analytic import attention_pairs
from solforge.roofline.sandboxed import count_problem
from solforge.roofline.estimate import CountStatus, roofline
from solforge.roofline.hardware import load_profile, load_profile_file


def make_problem(tmp: Path, name: str, axes: dict, inputs: dict, outputs: dict, ref: str,
                 workloads: list[dict]) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "definition.json").write_text(json.dumps({
        "name": name, "axes": axes, "inputs": inputs, "outputs": outputs, "reference": ref}))
    lines = []
    for i, w in enumerate(workloads):
        ins = {k: ({"type": "scalar", "value": w["scalars"][k]} if k in w.get("scalars", {})
                   else {"type": "random"}) for k in inputs}
        lines.append(json.dumps({"uuid": f"w{i}", "axes": w["axes"], "inputs": ins}))
    (d / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_gemm_bf16_flops_bytes_and_tsol(tmp_path):
    d = make_problem(
        tmp_path, "gemm", {"M": {"type": "var"}, "N": {"type": "const", "value": 4096},
                           "K": {"type": "const", "value": 2048}},
        {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}, "B": {"shape": ["N", "K"], "dtype": "bfloat16"}},
        {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
        "import torch\ndef run(A, B):\n    return A @ B.T\n",
        [{"axes": {"M": 8192}}, {"axes": {"M": 4}}])
    counts = count_problem(load_problem_dir(d))
    big, small = counts
    assert big.status is CountStatus.OK
    assert big.flops == {"bf16_tc": pytest.approx(2 * 8192 * 4096 * 2048)}
    assert big.input_bytes == pytest.approx(2 * (8192 * 2048 + 4096 * 2048))
    assert big.output_bytes == pytest.approx(2 * 8192 * 4096)
    b200 = load_profile("b200")
    r = roofline("gemm", big, b200)
    t_c = 2 * 8192 * 4096 * 2048 / 2.25e15
    t_m = big.bytes / 7.7e12
    assert r.limiter == "bf16_tc" and t_c > t_m
    assert r.t_sol_ms == pytest.approx((t_c + b200.latency_s) * 1e3)
    assert roofline("gemm", small, b200).limiter == "memory"


def test_upcast_bf16_matmul_runs_at_bf16_rate_but_scaled_does_not(tmp_path):
    ref = ("import torch\ndef run(x, w):\n"
           "    a = x.float() @ w.float().T\n"          # exact upcast: bf16 tensor cores
           "    b = (x.float() * 1.5) @ w.float().T\n"  # arithmetic in fp32 first: fp32 (tf32) matmul
           "    return a + b\n")
    d = make_problem(tmp_path, "upcast", {"M": {"type": "var"}},
                     {"x": {"shape": ["M", 256], "dtype": "bfloat16"},
                      "w": {"shape": [512, 256], "dtype": "bfloat16"}},
                     {"y": {"shape": ["M", 512], "dtype": "float32"}}, ref, [{"axes": {"M": 1024}}])
    (c,) = count_problem(load_problem_dir(d))
    mm = 2 * 1024 * 512 * 256
    assert c.flops["bf16_tc"] == pytest.approx(mm)
    assert c.flops["tf32_tc"] == pytest.approx(mm)
    # pointwise: the mul (1024*256) and the add (1024*512)
    assert c.flops["fp32_simt"] == pytest.approx(1024 * 256 + 1024 * 512)


def test_gather_reads_only_the_indexed_pages_and_item_drives_a_loop(tmp_path):
    # a paged cache of P pages of which the reference reads n (given by an int tensor's values)
    ref = ("import torch\ndef run(cache, idx, x):\n"
           "    n = int(idx.shape[0])\n"
           "    out = torch.zeros(x.shape[0], cache.shape[1], dtype=torch.float32)\n"
           "    for i in range(int(idx[0].item() * 0 + 2)):\n"   # data-dependent trip count: 2
           "        out = out + cache[idx].float().sum(0)\n"
           "    return out\n")
    d = make_problem(tmp_path, "paged", {"P": {"type": "var"}, "n": {"type": "var"},
                                         "D": {"type": "const", "value": 4096}},
                     {"cache": {"shape": ["P", "D"], "dtype": "bfloat16"},
                      "idx": {"shape": ["n"], "dtype": "int64"},
                      "x": {"shape": [3], "dtype": "float32"}},
                     {"out": {"shape": [3, "D"], "dtype": "float32"}}, ref,
                     [{"axes": {"P": 100000, "n": 50}}])
    (c,) = count_problem(load_problem_dir(d))
    assert c.status is CountStatus.OK, c.reason
    page = 4096 * 2
    assert c.input_bytes_declared == pytest.approx(100000 * page + 50 * 8 + 3 * 4)
    # cache: the 50 gathered pages, once per loop trip (2) -> 100 pages, far below 100000
    assert c.input_bytes == pytest.approx(100 * page + 50 * 8, rel=1e-6)


def test_untraceable_reference_is_reported_with_reason(tmp_path):
    ref = "import torch\ndef run(x):\n    raise ValueError('nope')\n"
    d = make_problem(tmp_path, "bad", {"N": {"type": "var"}}, {"x": {"shape": ["N"], "dtype": "float32"}},
                     {"y": {"shape": ["N"], "dtype": "float32"}}, ref, [{"axes": {"N": 8}}])
    (c,) = count_problem(load_problem_dir(d))
    assert c.status is CountStatus.UNSUPPORTED and "ValueError: nope" in c.reason
    assert roofline("bad", c, load_profile("h200")).t_sol_ms is None


def test_attention_pairs_by_hand():
    assert attention_pairs([1, 1], [5, 7], causal=False) == 12
    # causal, q aligned to the end of kv: q=3, kv=5 -> visible 3, 4, 5
    assert attention_pairs([3], [5], causal=True) == 12
    # square causal: 1+2+3+4
    assert attention_pairs([4], [4], causal=True) == 10


def test_profiles_fallback_and_errors(tmp_path):
    h200 = load_profile("h200")
    assert h200.resolve_unit("fp4_tc") == "fp8_tc"  # no FP4 tensor cores on Hopper
    assert h200.peak("fp4_tc") == h200.peak("fp8_tc")
    assert h200.bandwidth(measured=True) == pytest.approx(4.27e12)
    assert load_profile("b200").peak("fp4_tc") == pytest.approx(9e15)
    text = (Path(__file__).resolve().parents[2] / "data" / "hardware" / "h200.yaml").read_text()
    bad = tmp_path / "h200.yaml"
    bad.write_text(text.replace("fp8_tc:\n    flops_per_s: 1978.9e12", "fp8_tc:\n    flops_per_s: -1"))
    with pytest.raises(InputError) as e:
        load_profile_file(bad)
    assert "flops_per_s" in str(e.value) and str(bad) in str(e.value)
    bad.write_text(text.replace("fp32_simt:", "fp33_simt:"))
    with pytest.raises(InputError, match="unknown math unit"):
        load_profile_file(bad)
    with pytest.raises(InputError, match="unknown GPU profile"):
        load_profile("a100")
