"""Workload: one concrete configuration of a Definition (SOL-ExecBench docs/workload.md).

Tolerance defaults and meaning are SOL-ExecBench's: an element passes when
|out - ref| <= max_atol + max_rtol * |ref|; the workload passes when at least
required_matched_ratio of the elements pass and (if set) the largest absolute error is at most
max_error_cap; allow_negative_inf lets matching -inf in both tensors count as correct.

The L2 subset spells `required_match_ratio`. The official evaluator's model does not know that key and
ignores it, so the default 0.99 applies; we do exactly the same and surface it as a warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from .definition import Definition

MISSPELLED_MATCH_RATIO = "required_match_ratio"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class RandomInput(_Model):
    type: Literal["random"]


class ScalarInput(_Model):
    type: Literal["scalar"]
    value: Union[bool, int, float]


class SafetensorsInput(_Model):
    type: Literal["safetensors"]
    path: str = Field(min_length=1)
    tensor_key: str = Field(min_length=1)


class CustomInput(_Model):
    type: Literal["custom"]


InputSpec = Annotated[Union[RandomInput, ScalarInput, SafetensorsInput, CustomInput],
                      Field(discriminator="type")]


def _finite_nonneg(name: str, v: Optional[float]) -> Optional[float]:
    if v is None:
        return v
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v}")
    return v


class Tolerance(_Model):
    max_atol: float = 1e-2
    max_rtol: float = 1e-2
    required_matched_ratio: float = 0.99
    max_error_cap: Optional[float] = None
    allow_negative_inf: bool = False

    @field_validator("max_atol", "max_rtol", "max_error_cap")
    @classmethod
    def _nonneg(cls, v, info):
        return _finite_nonneg(info.field_name, v)

    @field_validator("required_matched_ratio")
    @classmethod
    def _ratio(cls, v: float) -> float:
        if not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise ValueError(f"required_matched_ratio must be in [0, 1], got {v}")
        return v

    @property
    def ignored_match_ratio(self) -> Optional[float]:
        """The L2 misspelling's value, which (like the official evaluator) we do not apply."""
        extra = self.model_extra or {}
        return extra.get(MISSPELLED_MATCH_RATIO)


class Workload(_Model):
    uuid: str = Field(min_length=1)
    axes: dict[str, int]
    inputs: dict[str, InputSpec]
    tolerance: Tolerance = Field(default_factory=Tolerance)

    @field_validator("axes", mode="before")
    @classmethod
    def _int_axes(cls, v):
        if not isinstance(v, dict):
            return v
        out = {}
        for k, x in v.items():
            if isinstance(x, bool) or not isinstance(x, (int, str)) or (
                    isinstance(x, str) and not x.strip().isdigit()):
                if isinstance(x, float) and x == int(x):
                    x = int(x)
                else:
                    raise ValueError(f"axes.{k}: {x!r} is not a non-negative integer")
            x = int(x)
            if x < 0:
                raise ValueError(f"axes.{k}: {x} is negative")
            out[k] = x
        return out

    @property
    def warnings(self) -> list[str]:
        w = []
        if self.tolerance.ignored_match_ratio is not None:
            w.append(f"tolerance.{MISSPELLED_MATCH_RATIO}={self.tolerance.ignored_match_ratio} is "
                     "ignored (as by the official evaluator); required_matched_ratio="
                     f"{self.tolerance.required_matched_ratio} applies")
        return w


@dataclass
class ResolvedWorkload:
    """A workload bound to its definition: every axis value and every concrete shape."""

    definition: Definition
    workload: Workload
    axes: dict[str, int]
    input_shapes: dict[str, Optional[tuple[int, ...]]]
    output_shapes: dict[str, Optional[tuple[int, ...]]]
    warnings: list[str] = field(default_factory=list)
    extra_axes: dict[str, int] = field(default_factory=dict)  # workload axes only the entrypoint sees

    @property
    def uuid(self) -> str:
        return self.workload.uuid

    def scalars(self) -> dict[str, Union[bool, int, float]]:
        return {k: v.value for k, v in self.workload.inputs.items() if isinstance(v, ScalarInput)}

    def axes_and_scalars(self) -> dict[str, Union[bool, int, float]]:
        """What the custom-inputs entrypoint receives: every axis, extra workload axes, scalars."""
        return {**self.axes, **self.extra_axes, **self.scalars()}


class WorkloadMismatch(ValueError):
    """A workload that does not fit its definition; `field` says where."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def resolve(defn: Definition, wl: Workload) -> ResolvedWorkload:
    """Bind a workload to its definition; raise WorkloadMismatch naming the field on any mismatch."""
    const = defn.const_axes
    var = set(defn.var_axes)
    warnings = list(wl.warnings)
    extra_axes: dict[str, int] = {}
    for k, v in wl.axes.items():
        if k in var:
            continue
        if k not in defn.axes:
            # The official evaluator hands every workload axis to the custom-inputs entrypoint, and
            # some L2 problems rely on that (032's is_joint_block). Elsewhere it is a typo.
            if defn.custom_inputs_entrypoint:
                extra_axes[k] = v
                warnings.append(f"axes.{k} is not an axis of the definition; passed to "
                                f"{defn.custom_inputs_entrypoint} only")
                continue
            raise WorkloadMismatch(f"axes.{k}", f"workload names unknown axis {k!r}")
        if k in const and const[k] != v:
            raise WorkloadMismatch(f"axes.{k}", f"const axis {k} is {const[k]} in the definition, "
                                               f"{v} in the workload")
    for k in defn.var_axes:
        if k not in wl.axes:
            raise WorkloadMismatch(f"axes.{k}", f"var axis {k!r} missing from workload")
    for k, src in wl.inputs.items():
        if k not in defn.inputs:
            # A custom input the entrypoint may produce but run() never takes: the official
            # evaluator ignores it; we do too, loudly.
            if isinstance(src, CustomInput) and defn.custom_inputs_entrypoint:
                warnings.append(f"inputs.{k} is not an input of the definition; ignored")
                continue
            raise WorkloadMismatch(f"inputs.{k}", f"workload names unknown input {k!r}")
    kinds = {type(s) is CustomInput for s in wl.inputs.values()}
    if len(kinds) > 1:
        raise WorkloadMismatch("inputs", "a workload cannot mix 'custom' with other input types "
                                         "(SOL-ExecBench rule): the entrypoint makes all or none")
    for k, spec in defn.inputs.items():
        if k not in wl.inputs:
            raise WorkloadMismatch(f"inputs.{k}", f"input {k!r} missing from workload")
        src = wl.inputs[k]
        if spec.is_scalar and not isinstance(src, (ScalarInput, CustomInput)):
            raise WorkloadMismatch(f"inputs.{k}", f"scalar input {k!r} needs type 'scalar', "
                                                  f"got {src.type!r}")
        if isinstance(src, ScalarInput) and not spec.is_scalar:
            raise WorkloadMismatch(f"inputs.{k}", f"tensor input {k!r} cannot be a scalar")
        if isinstance(src, CustomInput) and not defn.custom_inputs_entrypoint:
            raise WorkloadMismatch(f"inputs.{k}", "type 'custom' but the definition has no "
                                                  "custom_inputs_entrypoint")
    try:
        env = defn.resolve_axes({k: wl.axes[k] for k in defn.var_axes})
    except (ValueError, ArithmeticError) as e:
        raise WorkloadMismatch("axes", str(e)) from None
    scalars = {k: v.value for k, v in wl.inputs.items() if isinstance(v, ScalarInput)}
    try:
        defn.check_constraints({**scalars, **env})
    except ValueError as e:
        raise WorkloadMismatch("axes", str(e)) from None
    return ResolvedWorkload(defn, wl, env, defn.input_shapes(env), defn.output_shapes(env),
                            warnings, extra_axes)
