"""How the driver calls a candidate. Both kinds run inside the spawned driver process.

- CudaCaller ("cuda"/"cute" candidates): cubins + launch spec through solforge.compile.launcher, on
  torch's current stream. Nothing of the candidate is Python, so it cannot patch, thread or call torch.
- HostCaller ("host"): a staged host.py whose run(inputs, outputs, ctx) is Python. The evaluator
  supports it for host-side launch logic and for the adversarial tests; unless the job allows torch,
  every torch op inside run() trips the TORCH_CALL guard. ctx.launch() runs the staged cubins through
  the trusted launcher (with the guard suspended for the launcher's own bookkeeping).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from . import guards


def _tensors_and_scalars(inputs: dict, outputs: dict):
    tensors = {k: v for k, v in {**inputs, **outputs}.items() if isinstance(v, torch.Tensor)}
    scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    return tensors, scalars


class CudaCaller:
    def __init__(self, stage: Path, device):
        from ..compile.launcher import load_stage

        self.stage = Path(stage)
        self.runtime = load_stage(self.stage, json.loads((self.stage / "candidate.json").read_text()),
                                  device=torch.device(device).index)

    def prepare(self, rw, inputs: dict, outputs: dict):
        # a kernel reads its tensors as dense row-major memory: a strided input (a custom input made
        # as an expanded or transposed view) is handed over as a dense copy, refreshed on the call's
        # stream before every call (callers write new values into the same input buffers: the
        # correctness rounds, the caching probe), so its cost is in the timed call, as the exported
        # solution's `.contiguous()` is in NVIDIA's; the reference and the integrity guard keep the
        # original
        strided = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and not v.is_contiguous()}
        dense = {**inputs, **{k: torch.empty(v.shape, dtype=v.dtype, device=v.device) for k, v in strided.items()}}
        tensors, scalars = _tensors_and_scalars(dense, outputs)
        plan = self.runtime.prepare(tensors, rw.axes, scalars)
        if not strided:
            return plan.run

        def run():
            for k, v in strided.items():
                dense[k].copy_(v)
            plan.run()
        return run


class HostCaller:
    def __init__(self, stage: Path, device, allow_torch: bool = False):
        self.stage = Path(stage)
        self.device = torch.device(device)
        self.allow_torch = allow_torch
        self.runtime = None
        if (self.stage / "manifest.json").exists() and (self.stage / "candidate.json").exists():
            from ..compile.launcher import load_stage

            self.runtime = load_stage(self.stage, device=self.device.index)
        spec = importlib.util.spec_from_file_location("solforge_host_candidate", self.stage / "host.py")
        self.module = importlib.util.module_from_spec(spec)
        sys.modules["solforge_host_candidate"] = self.module
        spec.loader.exec_module(self.module)  # untrusted: the integrity snapshot was taken before
        self._blocker = None

    def prepare(self, rw, inputs: dict, outputs: dict):
        caller = self

        def launch(tensors=None, stream=None):
            if caller.runtime is None:
                raise RuntimeError("no cubins staged for this host candidate")
            t, s = _tensors_and_scalars(inputs, outputs)
            if tensors:
                t.update(tensors)
            blocker = caller._blocker
            if blocker is not None:
                blocker.suspended = True
            try:
                caller.runtime.launch_all(t, rw.axes, s, stream=stream)
            finally:
                if blocker is not None:
                    blocker.suspended = False

        ctx = SimpleNamespace(axes=dict(rw.axes), device=self.device, launch=launch,
                              stream=(torch.cuda.current_stream(self.device).cuda_stream
                                      if self.device.type == "cuda" else None))

        def call():
            if self.allow_torch:
                ret = self.module.run(inputs, outputs, ctx)
            else:
                with guards.NoTorchOps() as blocker:
                    self._blocker = blocker
                    try:
                        ret = self.module.run(inputs, outputs, ctx)
                    finally:
                        self._blocker = None
            if ret is not None:
                vals = list(ret.values()) if isinstance(ret, dict) else (
                    list(ret) if isinstance(ret, (list, tuple)) else [ret])
                guards.check_plain_tensors(vals)
                names = list(ret) if isinstance(ret, dict) else list(outputs)
                for name, v in zip(names, vals):
                    outputs[name].copy_(v)

        return call
