"""GPU profiles as data: data/hardware/<name>.yaml, one pydantic model.

A profile lists dense peak FLOP/s per math unit (fp32_simt, tf32_tc, bf16_tc, fp16_tc, fp8_tc, fp4_tc,
fp64_tc), DRAM bandwidth, L2 size and SM count, each with the datasheet it comes from, and measured
ceilings beside them where someone measured them. A unit the chip lacks (FP4 tensor cores on Hopper)
is mapped by `fallbacks` to the unit a kernel can actually use (dequantize to FP8): `peak(unit)` follows
that map, so the counting code never needs to know which chip it is pricing.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import InputError

UNITS = ("fp32_simt", "tf32_tc", "bf16_tc", "fp16_tc", "fp8_tc", "fp4_tc", "fp64_tc")


class _Strict(BaseModel):
    # Profiles are ours: a misspelt key is a bug, so unknown keys are rejected.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rate(_Strict):
    flops_per_s: float = Field(gt=0)
    source: str = Field(min_length=1)
    measured_flops_per_s: Optional[float] = Field(default=None, gt=0)
    measured_source: Optional[str] = None


class Dram(_Strict):
    bytes_per_s: float = Field(gt=0)
    source: str = Field(min_length=1)
    measured_bytes_per_s: Optional[float] = Field(default=None, gt=0)
    measured_source: Optional[str] = None


class HardwareProfile(_Strict):
    name: str = Field(min_length=1)
    display_name: str
    arch: str
    sm_count: int = Field(gt=0)
    sm_count_source: str
    l2_bytes: int = Field(gt=0)
    l2_source: str
    dram: Dram
    compute: dict[str, Rate]
    fallbacks: dict[str, str] = Field(default_factory=dict)
    # Fixed time every kernel pays however little it does (launch to first DRAM byte back, and the
    # last write's drain): T_sol = latency_s + max(compute, memory).
    latency_s: float = Field(default=0.0, ge=0)
    latency_source: str = ""

    @model_validator(mode="after")
    def _units(self) -> "HardwareProfile":
        for u in list(self.compute) + list(self.fallbacks) + list(self.fallbacks.values()):
            if u not in UNITS:
                raise ValueError(f"unknown math unit {u!r} (known: {', '.join(UNITS)})")
        if "fp32_simt" not in self.compute:
            raise ValueError("compute.fp32_simt is required (every GPU has CUDA cores)")
        for u, target in self.fallbacks.items():
            if u in self.compute:
                raise ValueError(f"fallbacks.{u}: the unit has its own rate in compute")
            if target not in self.compute:
                raise ValueError(f"fallbacks.{u}: target {target!r} has no rate in compute")
        return self

    def resolve_unit(self, unit: str) -> str:
        """The unit that really runs `unit` work on this chip."""
        if unit in self.compute:
            return unit
        if unit in self.fallbacks:
            return self.fallbacks[unit]
        # A tensor-core dtype with no rate and no declared fallback: the CUDA cores can always do it.
        return "fp32_simt"

    def peak(self, unit: str, measured: bool = False) -> float:
        r = self.compute[self.resolve_unit(unit)]
        return (r.measured_flops_per_s or r.flops_per_s) if measured else r.flops_per_s

    def bandwidth(self, measured: bool = False) -> float:
        d = self.dram
        return (d.measured_bytes_per_s or d.bytes_per_s) if measured else d.bytes_per_s


def hardware_dir() -> Path:
    from ..settings import get

    return Path(get().hardware_dir)


def available_profiles(directory: Optional[Path] = None) -> list[str]:
    d = Path(directory) if directory else hardware_dir()
    return sorted(p.stem for p in d.glob("*.yaml"))


def load_profile_file(path: Path) -> HardwareProfile:
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("hardware profile not found", file=path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"invalid YAML: {getattr(e, 'problem', e)}", file=path,
                         line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping at the top level", file=path)
    try:
        prof = HardwareProfile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        fld = ".".join(str(p) for p in err.get("loc", ()))
        raise InputError(err.get("msg", str(e)), file=path, line=_line_of(text, err.get("loc", ())),
                         field=fld or None) from None
    if prof.name != path.stem:
        raise InputError(f"name {prof.name!r} does not match the file name {path.stem!r}", file=path,
                         line=_line_of(text, ("name",)), field="name")
    return prof


def _line_of(text: str, loc) -> Optional[int]:
    """Best-effort line of the last named key of a pydantic loc in a YAML file."""
    keys = [k for k in loc if isinstance(k, str)]
    for key in reversed(keys):
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip().startswith(f"{key}:"):
                return i
    return None


@cache
def _load_cached(path: str, mtime: float) -> HardwareProfile:
    return load_profile_file(Path(path))


def load_profile(name: str, directory: Optional[Path] = None) -> HardwareProfile:
    """A profile by name (h200, h100, b200) or by path to a YAML file."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        path = p
    else:
        d = Path(directory) if directory else hardware_dir()
        path = d / f"{name.lower()}.yaml"
        if not path.exists():
            known = ", ".join(available_profiles(d)) or "none"
            raise InputError(f"unknown GPU profile {name!r} (known: {known})", file=path)
    return _load_cached(str(path.resolve()), path.stat().st_mtime if path.exists() else 0.0)
