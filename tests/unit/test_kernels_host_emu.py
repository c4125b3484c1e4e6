"""The rmsnorm and pointwise kernels, as NVRTC compiles them, run on the CPU (tests/unit/cuda_host_emu.py:
one std::thread per CUDA thread, barriers for __syncthreads and shuffles) and checked against the
problems' references: every load/store path (uneven rows, rows past the end, 16-byte pieces, the
broadcast index stepping, the vector tail) and the reductions (grid-stride register sums over
several passes, shared slots, the workspace) that a GPU check would otherwise be the first to see."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cuda_host_emu import HAVE_GXX, bf16_bits, bf16_to_f32, build_and_run, defines, kernel_text
from solforge.candidate import eval_expr, launch_env, parse_arg
from solforge.kernels import get_family
from solforge.kernels.pointwise import reduction_grid
from solforge.kernels.pointwise_trace import trace_pointwise
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

pytestmark = pytest.mark.skipif(not HAVE_GXX, reason="needs g++")

_CT = {"bfloat16": "__nv_bfloat16", "float32": "float", "float16": "__half", "bool": "bool"}


def _shape(defn, name, axes):
    spec = defn.inputs.get(name) or defn.outputs[name]
    return [axes[d] if isinstance(d, str) else int(d) for d in (spec.shape or [])]


def _rand(shape, dtype, gen):
    x = torch.randn(shape, generator=gen) if shape else torch.randn((), generator=gen)
    return x.to({"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[dtype])


def _raw(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16).ravel()
    return t.contiguous().numpy().ravel()


def _from_raw(b: bytes, dtype: str, shape) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(bf16_to_f32(np.frombuffer(b, dtype=np.uint16)).reshape(shape).copy())
    return torch.from_numpy(np.frombuffer(b, dtype=np.float32).reshape(shape).copy())


def _reference(defn, inputs: dict):
    ns: dict = {}
    exec(compile(defn.reference, "ref", "exec"), ns)
    res = ns["run"](**inputs)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    return dict(zip(defn.outputs, res))


RMS_CASES = [  # (problem, params, var axes): rows past the end of the last block in each
    ("FlashInfer-Bench/021_rmsnorm_h128", {"VEC": 8, "TPR": 16, "ROWS": 16, "WPRE": 1}, {"batch_size": 37}),
    ("FlashInfer-Bench/021_rmsnorm_h128", {"VEC": 8, "TPR": 4, "ROWS": 64, "WPRE": 0}, {"batch_size": 70}),
    ("FlashInfer-Bench/001_fused_add_rmsnorm_h2048", {"VEC": 8, "TPR": 128, "ROWS": 2, "WPRE": 1},
     {"batch_size": 3}),
    ("FlashInfer-Bench/003_fused_add_rmsnorm_h7168", {"VEC": 8, "TPR": 256, "ROWS": 1, "WPRE": 0},
     {"batch_size": 2}),   # 896 vectors over 256 threads: the last 128 threads have 3
    ("FlashInfer-Bench/026_rmsnorm_h7168", {"VEC": 8, "TPR": 224, "ROWS": 2, "WPRE": 1}, {"batch_size": 3}),
    ("L1/069_rms_norm", {"VEC": 4, "TPR": 512, "ROWS": 1, "WPRE": 1}, {"batch_size": 1, "seq_len": 2}),
    ("L1/033_post_norm_residual", {"VEC": 8, "TPR": 128, "ROWS": 2, "WPRE": 1}, {"batch_size": 1, "seq_len": 3}),
    ("L1/033_post_norm_residual", {"VEC": 8, "TPR": 64, "ROWS": 4, "WPRE": 0}, {"batch_size": 1, "seq_len": 5}),
    # WPRE 2 (per call): a one-wave grid preloads; WPRE_AUTO_BLOCKS=1 makes a 3-block grid load late
    ("L1/033_post_norm_residual", {"VEC": 8, "TPR": 128, "ROWS": 1, "WPRE": 2}, {"batch_size": 1, "seq_len": 3}),
    ("L1/033_post_norm_residual", {"VEC": 8, "TPR": 128, "ROWS": 1, "WPRE": 2, "WPRE_AUTO_BLOCKS": 1},
     {"batch_size": 1, "seq_len": 3}),
    ("L1/069_rms_norm", {"VEC": 8, "TPR": 256, "ROWS": 1, "WPRE": 2, "WPRE_AUTO_BLOCKS": 1},
     {"batch_size": 1, "seq_len": 3}),
    # LPOL / SPOL (load / store cache policies): PTX on the GPU, the plain path here
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 32, "ROWS": 8, "WPRE": 1, "LPOL": 2, "SPOL": 3},
     {"batch_size": 11}),
    # PERSIST (rmsnorm_persist): NSM=1 makes a grid of BPS blocks walk several block-rows, so the
    # PF-slot ring wraps (5 block-rows over 3 slots), the last block-row is partial, and with
    # TPR > 32 the two shared reduction buffers alternate
    ("FlashInfer-Bench/021_rmsnorm_h128", {"VEC": 8, "TPR": 16, "ROWS": 16, "PERSIST": 1, "PF": 3, "BPS": 1,
                                           "NSM": 1}, {"batch_size": 70}),
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 64, "ROWS": 4, "PERSIST": 1, "PF": 4, "BPS": 1,
                                           "LPOL": 2, "SPOL": 3, "NSM": 1}, {"batch_size": 23}),
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 32, "ROWS": 4, "PERSIST": 1, "PF": 2, "BPS": 2,
                                           "NSM": 1}, {"batch_size": 19}),   # 2 blocks, 5 block-rows
    ("FlashInfer-Bench/001_fused_add_rmsnorm_h2048", {"VEC": 8, "TPR": 128, "ROWS": 2, "PERSIST": 1, "PF": 2,
                                                      "BPS": 1, "NSM": 1}, {"batch_size": 5}),
    ("FlashInfer-Bench/003_fused_add_rmsnorm_h7168", {"VEC": 8, "TPR": 256, "ROWS": 1, "PERSIST": 1, "PF": 2,
                                                      "BPS": 1, "NSM": 1}, {"batch_size": 3}),  # uneven row
    ("L1/033_post_norm_residual", {"VEC": 8, "TPR": 64, "ROWS": 4, "PERSIST": 1, "PF": 3, "BPS": 1, "NSM": 1},
     {"batch_size": 1, "seq_len": 11}),
    ("L1/069_rms_norm", {"VEC": 8, "TPR": 512, "ROWS": 1, "PERSIST": 1, "PF": 1, "BPS": 1, "NSM": 1},
     {"batch_size": 1, "seq_len": 3}),
]


@pytest.mark.parametrize("rel,params,axes", RMS_CASES, ids=lambda v: str(v)[:40])
def test_rmsnorm_kernel_on_cpu_matches_reference(sol_execbench_dir, tmp_path, rel, params, axes):
    problem = load_problem_dir(sol_execbench_dir / rel)
    defn = problem.definition
    fam = get_family("rmsnorm")
    params = dict(params)
    # .cu / launch knobs, not tunables (NSM: the SM count a PERSIST grid is sized to)
    extra = {k: params.pop(k) for k in list(params) if k in ("WPRE_AUTO_BLOCKS", "NSM")}
    cand = fam.instantiate(problem, params)
    cand.params.update(extra)
    axes = {**{k: v.value for k, v in defn.axes.items() if getattr(v, "value", None) is not None}, **axes}
    gen = torch.Generator().manual_seed(7)
    scalars = {k: 1e-5 for k, v in defn.inputs.items() if v.is_scalar}
    tensors = {k: _rand(_shape(defn, k, axes), v.dtype, gen) for k, v in defn.inputs.items() if not v.is_scalar}
    ref = _reference(defn, {**tensors, **scalars})
    (oname, oref), = ref.items()
    launch = cand.launches[0]
    env = launch_env(axes, scalars, cand.params)
    rows = eval_expr(launch.args[-2].split(":", 1)[1], env)
    names = [a for a in launch.args[:-2]]
    ins = [n for n in names if n != oname]
    decl = "".join(f"    auto {n} = emu_read<elem_t>(f, {tensors[n].numel()});\n" for n in ins)
    eps = float(eval_expr(launch.args[-1].split(":", 1)[1], env))
    call = ", ".join([f"{n}.data()" for n in ins] + ["o.data()", str(rows), f"{eps!r}f"])
    main = f"""
int main() {{
    FILE* f = std::fopen("in.bin", "rb");
{decl}    std::fclose(f);
    std::vector<elem_t> o({oref.numel()});
    emu_launch({eval_expr(launch.grid[0], env)}, {eval_expr(launch.block[0], env)}, [&] {{ {launch.kernel}({call}); }});
    f = std::fopen("out.bin", "wb"); std::fwrite(o.data(), sizeof(elem_t), o.size(), f); std::fclose(f);
}}
"""
    src = defines(cand.params) + kernel_text(cand.sources["rmsnorm.cu"])
    out = build_and_run(tmp_path, src, main, [_raw(tensors[n]) for n in ins],
                        oref.numel() * oref.element_size())
    got = _from_raw(out, defn.outputs[oname].dtype, tuple(oref.shape))
    want = oref.float()
    # bf16 output: the same math in float up to rsqrt / summation order, so within one bf16 ulp
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=8e-3, atol=1e-6)
    assert (got == want).float().mean() > 0.97


PW_CASES = [  # (problem, params, var axes)
    ("L1/056_mamba_ssm_dt_projection_softplus_clamp_backward", {"VEC": 8, "BLOCK": 64, "UNROLL": 2},
     {"batch_size": 3, "seq_len": 45}),   # 5400 elements: 3 grid-stride passes over 2 blocks? see m
    ("L1/056_mamba_ssm_dt_projection_softplus_clamp_backward", {"VEC": 16, "BLOCK": 32, "UNROLL": 1},
     {"batch_size": 2, "seq_len": 37}),   # 2960 = 185 x 16: no tail
    ("L1/061_tanh_gated_residual_add_backward", {"VEC": 8, "BLOCK": 64, "UNROLL": 2},
     {"batch_size": 2, "seq_len": 5}),    # mask [B, S, 1] broadcast over hidden 4096, 0-d gate
    # FIN=0: the two-kernel plan (sums, then pointwise_post_kernel) after a zeroed workspace
    ("L1/056_mamba_ssm_dt_projection_softplus_clamp_backward", {"VEC": 8, "BLOCK": 64, "UNROLL": 2,
                                                                "FIN": 0}, {"batch_size": 3, "seq_len": 45}),
    ("L1/061_tanh_gated_residual_add_backward", {"VEC": 8, "BLOCK": 64, "UNROLL": 2, "FIN": 0},
     {"batch_size": 2, "seq_len": 5}),
    ("L1/084_silu_activation_backward", {"VEC": 8, "BLOCK": 32, "UNROLL": 2}, {"num_elements": 1037}),
    ("L1/090_batched_2d_rope_position_encoding_backward", {"VEC": 4, "BLOCK": 32, "UNROLL": 2},
     {"batch_size": 1, "seq_len": 9}),
]


# x [b, h] + bias [h] (read at i % h) times rowscale [b, 1] (read at i / h): with h = 20 a vector
# of 8 straddles rows, so the broadcast index steps and wraps inside a vector
STRADDLE = Definition.model_validate({
    "name": "t_straddle", "axes": {"b": {"type": "var"}, "h": {"type": "const", "value": 20}},
    "inputs": {"x": {"shape": ["b", "h"], "dtype": "bfloat16"},
               "bias": {"shape": ["h"], "dtype": "bfloat16"},
               "rowscale": {"shape": ["b", 1], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["b", "h"], "dtype": "float32"}},
    "reference": "import torch\ndef run(x, bias, rowscale):\n    return (x + bias).float() * rowscale\n"})


@pytest.mark.parametrize("rel,params,axes", PW_CASES + [
    ("straddle", {"VEC": 8, "BLOCK": 32, "UNROLL": 2}, {"b": 13})], ids=lambda v: str(v)[:40])
def test_pointwise_kernel_on_cpu_matches_reference(sol_execbench_dir, tmp_path, rel, params, axes):
    problem = STRADDLE if rel == "straddle" else load_problem_dir(sol_execbench_dir / rel)
    defn = getattr(problem, "definition", problem)
    cand = get_family("pointwise").instantiate(problem, params)
    g = trace_pointwise(defn)
    axes = {**{k: v.value for k, v in defn.axes.items() if getattr(v, "value", None) is not None}, **axes}
    gen = torch.Generator().manual_seed(11)
    scalars = {}
    for w in getattr(problem, "workloads", [])[:1]:
        scalars = {k: v for k, v in w.scalars().items() if k in defn.inputs}
    tensors = {k: _rand(_shape(defn, k, axes), v.dtype, gen) for k, v in defn.inputs.items() if not v.is_scalar}
    ref = _reference(defn, {**tensors, **scalars})
    env = launch_env(axes, scalars, cand.params)
    n = eval_expr(g.numel, env)
    kept = g.kept
    lines, reads, call_args = [], [], {}
    for m in g.inputs:
        lines.append(f"    auto {m.name} = emu_read<{_CT[m.dtype]}>(f, {tensors[m.name].numel()});")
        reads.append(_raw(tensors[m.name]))
    outs = [o for o, _, _ in g.outputs] + [o for o, _, _ in g.reduced_outputs]
    for o in outs:
        lines.append(f"    std::vector<{_CT[defn.outputs[o].dtype]}> {o}({ref[o].numel()});")
    ws = eval_expr(cand.workspace, env) // 4
    lines.append(f"    std::vector<float> workspace({max(ws, 1)}, 0.0f);")

    def args_of(launch, steps=None):
        out = []
        for a in launch.args:
            p = parse_arg(a)
            if p.kind in ("tensor", "workspace"):
                out.append(f"{p.name or 'workspace'}.data()")
            else:
                v = eval_expr(p.expr, env)
                if steps is not None and a is launch.args[-1]:
                    v = steps  # the launch's last int is STEPS (vectors per thread)
                out.append(f"{float(v)!r}f" if p.ctype == "float32" else f"{int(v)}L")
        return ", ".join(out)

    main_launch = cand.launches[0]
    if g.reductions:
        # the smallest grid the kernel accepts, so that threads loop over several passes
        _, m = reduction_grid(g, params)
        chunk = params["VEC"] * params["BLOCK"] * params["UNROLL"]
        assert -(-n // chunk) > m, "test shape too small to loop"
        passes = [f"    emu_launch({m}, {params['BLOCK']}, [&] {{ pointwise_kernel({args_of(main_launch)}); }});"]
        if cand.workspace_zero is not None:
            # FIN=1: the harness does not zero the workspace, so a second call on the same one
            # must give the same answer (the kernel left its sums and counter at zero)
            assert eval_expr(cand.workspace_zero, env) == 0 and len(cand.launches) == 1
            passes *= 2
    else:
        # the launch's own STEPS (1 at these sizes), then UNROLL vectors per thread
        assert eval_expr(main_launch.args[-1].split(":", 1)[1], env) == 1
        passes = []
        for st in (1, params["UNROLL"]):
            grid = max(1, -(-n // (params["VEC"] * params["BLOCK"] * st)))
            passes.append(f"    emu_launch({grid}, {params['BLOCK']}, [&] {{ pointwise_kernel({args_of(main_launch, st)}); }});")
    writes = "".join(f"    std::fwrite({o}.data(), sizeof({o}[0]), {o}.size(), f);\n" for o in outs)
    clear = "".join(f"    std::memset({o}.data(), 0xff, {o}.size() * sizeof({o}[0]));\n" for o in outs)
    body = []
    for ps in passes:
        zero = "" if cand.workspace_zero is not None else \
            "    std::fill(workspace.begin(), workspace.end(), 0.0f);\n"
        body.append(clear + zero + ps + "\n"
                    + "".join(f"    emu_launch({eval_expr(l.grid[0], env)}, {params['BLOCK']}, "
                              f"[&] {{ {l.kernel}({args_of(l)}); }});\n" for l in cand.launches[1:])
                    + writes)
    main = ("int main() {\n    FILE* f = std::fopen(\"in.bin\", \"rb\");\n" + "\n".join(lines)
            + "\n    std::fclose(f);\n    f = std::fopen(\"out.bin\", \"wb\");\n" + "".join(body)
            + "    std::fwrite(workspace.data(), 4, workspace.size(), f);\n"
            + "    std::fclose(f);\n}\n")
    src = defines(cand.params) + kernel_text(cand.sources["pointwise.cu"])
    nbytes = sum(ref[o].numel() * ref[o].element_size() for o in outs)
    ws_words = max(ws, 1)
    data = build_and_run(tmp_path, src, main, reads, nbytes * len(passes) + 4 * ws_words)
    if cand.workspace_zero is not None:  # left zeroed for the next call: sums and the counter
        assert not any(data[len(data) - 4 * ws_words:]), "workspace not left zeroed"
    off = 0
    for _ in passes:
        for o in outs:
            b = ref[o].numel() * ref[o].element_size()
            got = _from_raw(data[off:off + b], defn.outputs[o].dtype, tuple(ref[o].shape))
            off += b
            want = ref[o].float()
            if o in [r[0] for r in g.reduced_outputs]:   # a float sum in another order: 1 bf16 ulp
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=8e-3, atol=1e-4, err_msg=o)
            else:  # element math is the reference's (sin/tanh: libm ulps; 0-d bf16 operand: 1 ulp)
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1.6e-2, atol=1e-6, err_msg=o)
    assert n > 0 and math.isfinite(float(off))


@pytest.mark.parametrize("params", [{"VEC": 4, "TPR": 32, "ROWS": 8, "WPRE": 1},
                                    {"VEC": 4, "TPR": 16, "ROWS": 4, "WPRE": 0, "FUSE": 0}],
                         ids=["fused", "two-launches"])
def test_rmsnorm_qk_pair_on_cpu_matches_reference(sol_execbench_dir, tmp_path, params):
    """038 (Q and K normed with per-head weights): one launch with grid.y = 2 choosing the pair
    (NPAIR 2), or FUSE=0's two launches; both outputs against the reference."""
    problem = load_problem_dir(sol_execbench_dir / "L1/038_flux_multi_head_rmsnorm_qk")
    defn = problem.definition
    cand = get_family("rmsnorm").instantiate(problem, params)
    assert len(cand.launches) == (1 if params.get("FUSE", 1) else 2)
    axes = {**{k: v.value for k, v in defn.axes.items() if getattr(v, "value", None) is not None},
            "batch_size": 1, "seq_len": 3}
    gen = torch.Generator().manual_seed(5)
    scalars = {"eps": 1e-6}
    tensors = {k: _rand(_shape(defn, k, axes), v.dtype, gen) for k, v in defn.inputs.items() if not v.is_scalar}
    ref = _reference(defn, {**tensors, **scalars})
    env = launch_env(axes, scalars, cand.params)
    ins = [k for k in tensors]
    decl = "".join(f"    auto {n} = emu_read<elem_t>(f, {tensors[n].numel()});\n" for n in ins)
    decl += "".join(f"    std::vector<elem_t> {o}({ref[o].numel()}, elem_t{{}});\n" for o in ref)
    calls = ""
    for l in cand.launches:
        args = ", ".join(f"{a}.data()" if parse_arg(a).kind == "tensor" else
                         (f"{float(eval_expr(parse_arg(a).expr, env))!r}f" if parse_arg(a).ctype == "float32"
                          else str(int(eval_expr(parse_arg(a).expr, env)))) for a in l.args)
        gy = eval_expr(l.grid[1], env) if len(l.grid) > 1 else 1
        calls += (f"    emu_launch({eval_expr(l.grid[0], env)}, {eval_expr(l.block[0], env)}, "
                  f"[&] {{ rmsnorm_kernel({args}); }}, {gy});\n")
    writes = "".join(f"    std::fwrite({o}.data(), sizeof(elem_t), {o}.size(), f);\n" for o in ref)
    main = (f"int main() {{\n    FILE* f = std::fopen(\"in.bin\", \"rb\");\n{decl}    std::fclose(f);\n"
            f"{calls}    f = std::fopen(\"out.bin\", \"wb\");\n{writes}    std::fclose(f);\n}}\n")
    src = defines(cand.params) + kernel_text(cand.sources["rmsnorm.cu"])
    nbytes = sum(r.numel() * r.element_size() for r in ref.values())
    out = build_and_run(tmp_path, src, main, [_raw(tensors[n]) for n in ins], nbytes)
    off = 0
    for o, want in ref.items():
        b = want.numel() * want.element_size()
        got = _from_raw(out[off:off + b], defn.outputs[o].dtype, tuple(want.shape))
        off += b
        np.testing.assert_allclose(got.numpy(), want.float().numpy(), rtol=2e-6, atol=1e-6, err_msg=o)


ROPE_CASES = [  # (problem, var axes): a cache with rows before the new ones; Q and K head counts differ
    ("L1/071_kv_cache_update_with_rope", {"batch_size": 2, "num_kv_heads": 3, "new_seq_len": 2,
                                          "current_seq_len": 3, "updated_seq_len": 5}),
    ("L1/088_rotary_position_embedding_application", {"batch_size": 1, "num_heads": 5,
                                                      "num_kv_heads": 2, "seq_len": 3}),
]


@pytest.mark.parametrize("fuse", [1, 0], ids=["one-launch", "two-launches"])
@pytest.mark.parametrize("rel,axes", ROPE_CASES, ids=lambda v: str(v)[:40])
def test_rope_kernels_on_cpu_match_reference(sol_execbench_dir, tmp_path, rel, axes, fuse):
    """rope.cu's two outputs through rope2_kernel (FUSE=1: blocks0 blocks for the first output, the
    rest for the second) or rope_kernel/cat_kernel (FUSE=0), against the reference."""
    problem = load_problem_dir(sol_execbench_dir / rel)
    defn = problem.definition
    fam = get_family("rope")
    cand = fam.instantiate(problem, {**fam.param_space(problem)[0], "BLOCK": 64, "FUSE": fuse})
    assert [l.kernel for l in cand.launches][:1] == (["rope2_kernel"] if fuse else ["rope_kernel"])
    axes = {**{k: v.value for k, v in defn.axes.items() if getattr(v, "value", None) is not None}, **axes}
    gen = torch.Generator().manual_seed(3)
    tensors = {k: _rand(_shape(defn, k, axes), v.dtype, gen) for k, v in defn.inputs.items()}
    ref = _reference(defn, dict(tensors))
    env = launch_env(axes, {}, cand.params)
    decl = "".join(f"    auto {n} = emu_read<elem_t>(f, {t.numel()});\n" for n, t in tensors.items())
    decl += "".join(f"    std::vector<elem_t> {o}({ref[o].numel()}, elem_t{{}});\n" for o in ref)
    calls = ""
    for l in cand.launches:
        args = ", ".join(f"{a}.data()" if parse_arg(a).kind == "tensor" else
                         f"{int(eval_expr(parse_arg(a).expr, env))}L" for a in l.args)
        calls += (f"    emu_launch({eval_expr(l.grid[0], env)}, {eval_expr(l.block[0], env)}, "
                  f"[&] {{ {l.kernel}({args}); }});\n")
    writes = "".join(f"    std::fwrite({o}.data(), sizeof(elem_t), {o}.size(), f);\n" for o in ref)
    main = (f"int main() {{\n    FILE* f = std::fopen(\"in.bin\", \"rb\");\n{decl}    std::fclose(f);\n"
            f"{calls}    f = std::fopen(\"out.bin\", \"wb\");\n{writes}    std::fclose(f);\n}}\n")
    src = defines(cand.params) + kernel_text(cand.sources["rope.cu"])
    nbytes = sum(r.numel() * r.element_size() for r in ref.values())
    out = build_and_run(tmp_path, src, main, [_raw(t) for t in tensors.values()], nbytes)
    off = 0
    for o, want in ref.items():
        b = want.numel() * want.element_size()
        got = _from_raw(out[off:off + b], defn.outputs[o].dtype, tuple(want.shape))
        off += b
        np.testing.assert_allclose(got.numpy(), want.float().numpy(), rtol=0, atol=0, err_msg=o)
