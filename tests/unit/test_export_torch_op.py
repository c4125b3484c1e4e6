"""Export as a torch.library op: the files, the op registers, its fake impl gives the right shapes
(for every workload of the problem); on a GPU, the op matches the reference."""

from __future__ import annotations

import importlib
import json
import sys
import uuid

import pytest
import torch
from test_export_solution import attempt_store

from solforge.export import load_attempt
from solforge.export.torch_op import VENDORED, write_torch_op


@pytest.fixture(scope="module")
def package(tmp_path_factory, sol_execbench_dir):
    tmp = tmp_path_factory.mktemp("op")
    s, aid, p, cand = attempt_store(tmp, sol_execbench_dir)
    name = "t_" + uuid.uuid4().hex[:10]  # a fresh op name: torch.library registrations are global
    pdir = write_torch_op(load_attempt(s, aid), tmp / "pkg", name=name)
    sys.path.insert(0, str(pdir.parent))
    try:
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(pdir.parent))
    return mod, pdir, p, name


def test_files(package):
    mod, pdir, p, name = package
    spec = json.loads((pdir / "spec.json").read_text())
    assert spec["problem"] == p.name and list(spec["outputs"]) == list(p.definition.outputs)
    manifest = json.loads((pdir / "manifest.json").read_text())
    for f in manifest["cubins"].values():
        assert (pdir / f).read_bytes()[:4] == b"\x7fELF"
    for rel, src in VENDORED.items():  # the package carries solforge's own launcher, unchanged
        assert (pdir / rel).read_bytes() == src.read_bytes()
    assert (pdir.parent / "pyproject.toml").exists()


def test_the_vendored_launcher_finds_its_siblings_without_a_package(package):
    """In the op the launcher is a standalone module: the tensor-map layout reader (elf) and the
    CUDA-graph replay (graph_launch) load from beside it (the H200 export check of 2026-12-01 (second batch) of the TMA
    GEMMs failed with 'attempted relative import with no known parent package' before)."""
    mod, pdir, p, name = package
    launcher = mod.launcher
    assert not launcher.__package__
    elf = launcher._sibling("elf")
    assert elf.__file__ == str(pdir / "_vendor" / "compile" / "elf.py") and callable(elf.kernel_params)
    assert hasattr(launcher._sibling("graph_launch"), "GraphLaunch")
    assert launcher._graph_launch_enabled() is True


def test_op_registers_with_fake_impl_shapes(package):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mod, pdir, p, name = package
    op = getattr(torch.ops.solforge, name)
    assert mod.run is not None
    d = p.definition
    for w in p.workloads:
        with FakeTensorMode():
            args = []
            for k, spec in d.inputs.items():
                if spec.shape is None:
                    args.append(w.axes_and_scalars()[k] if k in w.axes_and_scalars() else 1e-5)
                else:
                    args.append(torch.empty(w.input_shapes[k], dtype=getattr(torch, spec.dtype),
                                            device="cuda"))
            out = op(*args)
        outs = out if isinstance(out, tuple) else (out,)
        for o, (k, spec) in zip(outs, d.outputs.items()):
            assert tuple(o.shape) == tuple(w.output_shapes[k]), (w.workload.uuid, k)
            assert o.dtype == getattr(torch, spec.dtype)


def test_op_traces_under_torch_compile(package):
    """torch.compile sees the op through its fake impl (aot_eager runs it only on meta tensors)."""
    mod, pdir, p, name = package
    op = getattr(torch.ops.solforge, name)
    d = p.definition
    w = p.workloads[0]
    scal = w.axes_and_scalars()
    args = [scal.get(k, 1e-5) if s.shape is None else
            torch.empty(w.input_shapes[k], dtype=getattr(torch, s.dtype), device="meta")
            for k, s in d.inputs.items()]
    fn = torch.compile(lambda *a: op(*a), backend="aot_eager", fullgraph=True)
    out = fn(*args)
    o = out[0] if isinstance(out, tuple) else out
    assert o.device.type == "meta" and tuple(o.shape) == tuple(w.output_shapes[list(d.outputs)[0]])


@pytest.mark.gpu
def test_op_matches_reference_on_gpu(package):
    mod, pdir, p, name = package
    op = getattr(torch.ops.solforge, name)
    d = p.definition
    ns: dict = {}
    exec(d.reference, ns)  # noqa: S102 - the problem's own reference, as the evaluator runs it
    ref = ns["run"]
    g = torch.Generator(device="cuda").manual_seed(0)
    for w in p.workloads[:4]:
        scal = w.axes_and_scalars()
        args = [scal[k] if s.shape is None else
                torch.randn(w.input_shapes[k], generator=g, device="cuda").to(getattr(torch, s.dtype))
                for k, s in d.inputs.items()]
        got = op(*args)
        want = ref(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        tol = w.workload.tolerance
        for a, b in zip(got, want):
            a, b = a.float(), b.float()
            ok = (a - b).abs() <= tol.max_atol + tol.max_rtol * b.abs()
            assert ok.float().mean().item() >= tol.required_matched_ratio, w.workload.uuid
