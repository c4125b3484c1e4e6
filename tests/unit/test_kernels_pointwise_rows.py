"""pointwise_rows family: the trace (row statistics, branch-free scalar code), the GPU gate, real
NVRTC compiles, and the generated kernel run on the CPU (tests/unit/cuda_host_emu.py: one
std::thread per CUDA thread) against the reference on small shapes: vector and tail paths,
several rows per block (grid-stride), every branch of 053's inverse normal CDF."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cuda_host_emu import HAVE_GXX, build_and_run, defines, kernel_text
from solforge.candidate import eval_expr, launch_env, parse_arg
from solforge.kernels import families_for, get_family
from solforge.kernels.build import compile_cuda_candidate
from solforge.kernels.pointwise_rows_trace import trace_rows
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

P053 = "L1/053_gaussian_topk_sparse_activation"
_CT = {"bfloat16": "__nv_bfloat16", "float32": "float", "float16": "__half", "bool": "bool"}
_TT = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}

LAYERNORMISH = """
import torch
def run(x, w, rs, eps):
    xf = x.to(torch.float32)
    mu = xf.mean(dim=-1, keepdim=True)
    var = torch.var(xf, dim=-1, keepdim=True)            # correction 1
    s = (xf * w).sum(-1, keepdim=True)
    y = (xf - mu) * torch.rsqrt(var + eps) * w + s * rs
    return y.to(torch.bfloat16), (xf * rs - mu).to(torch.float32)
"""


def _ln_def() -> Definition:
    return Definition.model_validate({
        "name": "t_rows", "axes": {"b": {"type": "var"}, "h": {"type": "var"}},
        "inputs": {"x": {"shape": ["b", "h"], "dtype": "bfloat16"},
                   "w": {"shape": ["h"], "dtype": "float32"},
                   "rs": {"shape": ["b", 1], "dtype": "float32"},
                   "eps": {"shape": None, "dtype": "float32"}},
        "outputs": {"y": {"shape": ["b", "h"], "dtype": "bfloat16"},
                    "z": {"shape": ["b", "h"], "dtype": "float32"}},
        "reference": LAYERNORMISH})


def _reference(defn: Definition, inputs: dict) -> list[torch.Tensor]:
    ns: dict = {}
    exec(compile(defn.reference, "ref", "exec"), ns)
    res = ns["run"](**inputs)
    return list(res) if isinstance(res, (tuple, list)) else [res]


def test_053_traced_with_its_scalar_branches(sol_execbench_dir):
    g = trace_rows(load_problem_dir(sol_execbench_dir / P053).definition)
    assert g is not None
    assert g.scalars == ["target_sparsity"] and g.kinds == ["direct"]
    assert g.passes == 2 and len(g.sums) == 2            # sum(x), then sum((x - mean)^2)
    # the three branches of _ndtri survive as selects on the scalar, computed once per thread
    wheres = [n.name for n in g.nodes if n.op == "aten.where.self"]
    assert len(wheres) == 3 and all(g.klass[w] == "const" for w in wheres)


def test_gate_is_the_family_flag(sol_execbench_dir, monkeypatch, tmp_path):
    """Served exactly while family.json's one `offered` flag is true (no per-problem list), and a
    generic family never takes a problem from a specific one."""
    problem = load_problem_dir(sol_execbench_dir / P053)
    fam = get_family("pointwise_rows")
    assert fam.matches(problem)
    data = json.loads((fam.family_dir / "family.json").read_text())
    assert "offered_problems" not in data
    assert ("pointwise_rows" in [f.name for f in families_for(problem)]) == bool(data["offered"])
    from solforge.kernels import gate
    fake = tmp_path / "pointwise_rows"
    fake.mkdir()
    monkeypatch.setattr(gate, "CUDA_DIR", tmp_path)
    (fake / "family.json").write_text(json.dumps({**data, "offered": True}))
    assert [f.name for f in families_for(problem)] == ["pointwise_rows"]
    (fake / "family.json").write_text(json.dumps({**data, "offered": False}))
    assert families_for(problem) == []
    (fake / "family.json").write_text(json.dumps({**data, "offered": True}))
    rms = load_problem_dir(sol_execbench_dir / "L1/069_rms_norm")
    assert fam.matches(rms) and "pointwise_rows" not in [f.name for f in families_for(rms)]


@pytest.mark.parametrize("rel", ["L1/013_fused_residual_rms_norm_backward",
                                 "L1/084_silu_activation_backward", "L1/066_masked_softmax_with_attention_dropout_backward"])
def test_not_claimed(sol_execbench_dir, rel):
    """013: a column sum output; 084: no row statistic (pointwise's); 066: masked_fill (a
    specific family's). (An RMSNorm matches too, but the rmsnorm family claims it first.)"""
    assert not get_family("pointwise_rows").matches(load_problem_dir(sol_execbench_dir / rel))


def test_refuses_unguarded_branch_and_other_reductions():
    base = _ln_def().model_dump()
    for ref in (  # a branch on a tensor with no masked assignment; a sum over the first dim
            "import torch\ndef run(x, w, rs, eps):\n    m = x.float().mean(-1, keepdim=True)\n"
            "    if (m > 0).any():\n        return (x * 2).bfloat16(), x.float()\n"
            "    return (x - m).bfloat16(), x.float()\n",
            "import torch\ndef run(x, w, rs, eps):\n    m = x.float().mean(0, keepdim=True)\n"
            "    return (x - m).bfloat16(), x.float()\n"):
        assert trace_rows(Definition.model_validate({**base, "reference": ref, "name": "t_bad"})) is None


def test_compiles_with_nvrtc(sol_execbench_dir):
    problem = load_problem_dir(sol_execbench_dir / P053)
    fam = get_family("pointwise_rows")
    space = fam.param_space(problem)
    assert space[0]["VEC"] == 8
    for params in (space[0], space[-1]):
        cand = fam.instantiate(problem, params)
        cubin, _ = compile_cuda_candidate(cand)
        assert cubin[:4] == b"\x7fELF"
    cubin, _ = compile_cuda_candidate(fam.instantiate(_ln_def(), {"VEC": 4, "BLOCK": 128}))
    assert cubin[:4] == b"\x7fELF"


def _raw(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16).ravel()
    return t.contiguous().numpy().ravel()


def _from_raw(b: bytes, dtype: str, shape) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(np.frombuffer(b, dtype=np.int16).copy()).view(torch.bfloat16).float().reshape(shape)
    return torch.from_numpy(np.frombuffer(b, dtype=np.float32).copy()).reshape(shape)


def _emulate(defn, cand, tensors: dict, scalars: dict, axes: dict, grid: int, tmp_path) -> list[torch.Tensor]:
    env = launch_env(axes, scalars, cand.params)
    outs = list(defn.outputs)
    shapes = {o: [axes[d] if isinstance(d, str) else int(d) for d in defn.outputs[o].shape] for o in outs}
    lines, reads = [], []
    for k, t in tensors.items():
        lines.append(f"    auto {k} = emu_read<{_CT[defn.inputs[k].dtype]}>(f, {t.numel()});")
        reads.append(_raw(t))
    for o in outs:
        lines.append(f"    std::vector<{_CT[defn.outputs[o].dtype]}> {o}({int(np.prod(shapes[o]))});")
    args = []
    for a in cand.launches[0].args:
        p = parse_arg(a)
        if p.kind == "tensor":
            args.append(f"{p.name}.data()")
        else:
            v = eval_expr(p.expr, env)
            args.append(f"{float(v)!r}f" if p.ctype == "float32" else f"{int(v)}L")
    main = ("int main() {\n    FILE* f = std::fopen(\"in.bin\", \"rb\");\n" + "\n".join(lines)
            + "\n    std::fclose(f);\n"
            + f"    emu_launch({grid}, {cand.params['BLOCK']}, [&] {{ pointwise_rows_kernel({', '.join(args)}); }});\n"
            + "    f = std::fopen(\"out.bin\", \"wb\");\n"
            + "".join(f"    std::fwrite({o}.data(), sizeof({o}[0]), {o}.size(), f);\n" for o in outs)
            + "    std::fclose(f);\n}\n")
    sizes = [int(np.prod(shapes[o])) * (2 if defn.outputs[o].dtype == "bfloat16" else 4) for o in outs]
    src = defines(cand.params) + kernel_text(cand.sources["pointwise_rows.cu"])
    data = build_and_run(tmp_path, src, main, reads, sum(sizes))
    got, off = [], 0
    for o, b in zip(outs, sizes):
        got.append(_from_raw(data[off:off + b], defn.outputs[o].dtype, shapes[o]))
        off += b
    return got


needs_gxx = pytest.mark.skipif(not HAVE_GXX, reason="needs g++")


@needs_gxx
@pytest.mark.parametrize("target,h,params,grid", [
    (0.3, 256, {"VEC": 8, "BLOCK": 32}, 6),     # vector path, a block per row
    (0.01, 203, {"VEC": 8, "BLOCK": 64}, 2),    # low branch of _ndtri, a tail, 3 rows per block
    (0.99, 200, {"VEC": 4, "BLOCK": 32}, 4)])   # high branch
def test_053_kernel_on_cpu_matches_reference(sol_execbench_dir, tmp_path, target, h, params, grid):
    problem = load_problem_dir(sol_execbench_dir / P053)
    defn = problem.definition
    cand = get_family("pointwise_rows").instantiate(problem, params)
    axes = {"batch_size": 2, "seq_len": 3, "intermediate_size": h}
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 3, h, generator=gen) * 1.5 + 0.25).to(torch.bfloat16)
    ref = _reference(defn, {"inputs": x, "target_sparsity": target})[0].float()
    got = _emulate(defn, cand, {"inputs": x}, {"target_sparsity": target}, axes, grid, tmp_path)[0]
    # mean and std summed in another order than PyTorch's: the threshold moves by ~1e-7 relative,
    # the bf16 output by at most one ulp where it rounds the other way
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=8e-3, atol=1e-5)
    assert (ref > 0).float().mean() > 0.005  # the test sees non-zero outputs


@needs_gxx
def test_layernormish_kernel_on_cpu_matches_reference(tmp_path):
    """var with correction 1, a [h] input read per element, a [b, 1] input read per row, a sum
    next to a mean, two outputs of different dtypes."""
    defn = _ln_def()
    g = trace_rows(defn)
    assert g is not None and g.kinds == ["direct", "elem", "row"] and g.passes == 2
    cand = get_family("pointwise_rows").instantiate(defn, {"VEC": 4, "BLOCK": 32})
    gen = torch.Generator().manual_seed(3)
    b, h = 5, 70
    t = {"x": torch.randn(b, h, generator=gen).to(torch.bfloat16), "w": torch.randn(h, generator=gen),
         "rs": torch.randn(b, 1, generator=gen)}
    ref = _reference(defn, {**t, "eps": 1e-5})
    got = _emulate(defn, cand, t, {"eps": 1e-5}, {"b": b, "h": h}, 2, tmp_path)
    np.testing.assert_allclose(got[0].numpy(), ref[0].float().numpy(), rtol=1.6e-2, atol=1e-2)
    np.testing.assert_allclose(got[1].numpy(), ref[1].numpy(), rtol=1e-5, atol=1e-5)


@needs_gxx
def test_python_branch_on_a_scalar_is_guarded(sol_execbench_dir, tmp_path):
    """053 returns its input unchanged when target_sparsity == 0.0 (a Python branch the trace cannot
    follow both ways): the kernel was traced for != 0 and traps on 0.0 rather than return NaN."""
    import subprocess

    problem = load_problem_dir(sol_execbench_dir / P053)
    g = trace_rows(problem.definition)
    assert g.guards == [(0, "==", 0.0, False)]
    cand = get_family("pointwise_rows").instantiate(problem, {"VEC": 8, "BLOCK": 32})
    x = torch.randn(1, 2, 64).to(torch.bfloat16)
    axes = {"batch_size": 1, "seq_len": 2, "intermediate_size": 64}
    got = _emulate(problem.definition, cand, {"inputs": x}, {"target_sparsity": 0.2}, axes, 2, tmp_path)[0]
    assert torch.isfinite(got).all()
    with pytest.raises(subprocess.CalledProcessError):
        _emulate(problem.definition, cand, {"inputs": x}, {"target_sparsity": 0.0}, axes, 2, tmp_path)
