"""The GPU's identity and state at measurement time: name, driver, clocks (NVML via nvidia-ml-py if
present, else nvidia-smi), L2 size. Never changes any setting."""

from __future__ import annotations

import subprocess

import torch

from ..provenance import dist_version
from .results import HardwareInfo


def clocks(index: int = 0) -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            c = {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                 "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                 "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                 "mem_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
                 "source": "nvml"}
            try:
                c["driver"] = pynvml.nvmlSystemGetDriverVersion()
                if isinstance(c["driver"], bytes):
                    c["driver"] = c["driver"].decode()
                c["temp_c"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                c["power_w"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            except Exception:  # noqa: BLE001
                pass
            return c
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - fall back to the command-line tool
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,"
             "clocks.max.mem,driver_version,temperature.gpu,power.draw",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        v = [x.strip() for x in out.stdout.strip().split(",")]
        return {"sm_mhz": int(v[0]), "mem_mhz": int(v[1]), "sm_max_mhz": int(v[2]),
                "mem_max_mhz": int(v[3]), "driver": v[4], "temp_c": float(v[5]),
                "power_w": float(v[6]), "source": "nvidia-smi"}
    except Exception as e:  # noqa: BLE001
        return {"source": f"unavailable: {e}"}


def capture(device=None, timing_method: str = "") -> HardwareInfo:
    if not torch.cuda.is_available():
        return HardwareInfo(gpu_name="cpu", torch_version=torch.__version__)
    dev = torch.device(device or "cuda")
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    p = torch.cuda.get_device_properties(idx)
    c = clocks(idx)
    return HardwareInfo(
        gpu_name=p.name, driver=str(c.pop("driver", "")), cuda_runtime=str(torch.version.cuda or ""),
        torch_version=torch.__version__, cuda_bindings=dist_version("cuda-bindings", ""),
        sm_count=p.multi_processor_count, l2_bytes=int(getattr(p, "L2_cache_size", 0) or 0),
        memory_bytes=int(p.total_memory), compute_capability=f"{p.major}.{p.minor}", clocks=c,
        timing_method=timing_method)
