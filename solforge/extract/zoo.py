"""The model zoo: architecture configs of production open models, one JSON file each in data/models/.

Values are transcribed from the models' published configuration files (Hugging Face `config.json`,
diffusers `transformer/config.json` / `unet/config.json`, or the original repo's config); each file
names where. Only what the extracted blocks need is kept; no weights are ever read.

`ModelConfig.shrunk()` gives the same architecture with its *free* sizes (hidden width, head dim,
intermediate width, state size...) made tiny while keeping every structural constant (head counts,
expert counts, top-k, groups, eps, theta, scales): the extracted references hard-code only the
structural constants and read sizes from tensor shapes, so the small config yields the *same*
reference text and can be checked on a CPU in milliseconds.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import InputError


class _Strict(BaseModel):
    # Unknown keys are typos in a hand-written zoo file: reject them.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arch(str, Enum):
    DENSE_LLM = "dense_llm"
    MOE_LLM = "moe_llm"
    VISION_ENCODER = "vision_encoder"
    DIFFUSION_DIT = "diffusion_dit"
    DIFFUSION_UNET = "diffusion_unet"
    AUDIO_ENCDEC = "audio_encdec"
    SSM = "ssm"
    HYBRID = "hybrid"


class Source(_Strict):
    hf_repo: str
    config_url: str
    as_of: str = Field(description="date of the config revision these values were read from, as known")
    notes: Optional[str] = None


class Rope(_Strict):
    theta: float = Field(gt=0)
    type: Literal["default", "llama3", "linear", "yarn"] = "default"
    factor: Optional[float] = None
    low_freq_factor: Optional[float] = None
    high_freq_factor: Optional[float] = None
    original_max_position_embeddings: Optional[int] = None
    beta_fast: Optional[float] = None
    beta_slow: Optional[float] = None
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    partial_rotary_factor: float = Field(1.0, gt=0, le=1)
    local_theta: Optional[float] = Field(None, description="theta of sliding-window layers (Gemma 3)")
    axes_dims: Optional[list[int]] = Field(None, description="multi-axis RoPE split of head_dim (Flux)")

    @model_validator(mode="after")
    def _scaling_fields(self) -> "Rope":
        need = {"llama3": ("factor", "low_freq_factor", "high_freq_factor",
                           "original_max_position_embeddings"),
                "linear": ("factor",),
                "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow")}
        for f in need.get(self.type, ()):
            if getattr(self, f) is None:
                raise ValueError(f"rope type {self.type!r} needs {f}")
        return self


class Norm(_Strict):
    type: Literal["rmsnorm", "layernorm", "groupnorm"]
    eps: float = Field(gt=0)
    weight_offset: float = Field(0.0, description="Gemma stores w and applies (1 + w)")
    bias: bool = False
    num_groups: Optional[int] = None


class Attention(_Strict):
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    qkv_bias: bool = False
    k_bias: Optional[bool] = Field(None, description="overrides qkv_bias for k alone (Whisper)")
    o_bias: bool = False
    qk_norm: Literal["none", "head", "full"] = "none"
    causal: bool = True
    scale: Optional[float] = Field(None, description="softmax scale if not head_dim**-0.5")
    sliding_window: Optional[int] = None
    logit_softcap: Optional[float] = None

    @model_validator(mode="after")
    def _groups(self) -> "Attention":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        return self

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else self.head_dim ** -0.5


class Mlp(_Strict):
    intermediate_size: int = Field(gt=0)
    activation: Literal["silu", "gelu", "gelu_tanh", "quick_gelu"]
    gated: bool
    bias: bool = False


class Moe(_Strict):
    num_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = 0
    shared_intermediate_size: Optional[int] = None
    scoring: Literal["softmax", "sigmoid"] = "softmax"
    norm_topk_prob: bool = True
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    score_correction_bias: bool = False
    first_dense_layers: int = 0

    @model_validator(mode="after")
    def _sane(self) -> "Moe":
        if self.top_k > self.num_experts or self.num_experts % self.n_group or \
                self.topk_group > self.n_group:
            raise ValueError("inconsistent top_k / n_group / topk_group for num_experts")
        return self


class Mla(_Strict):
    q_lora_rank: Optional[int] = None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class Ssm(_Strict):
    kind: Literal["mamba1", "mamba2"]
    d_state: int
    d_conv: int
    expand: int
    d_inner: int
    headdim: Optional[int] = None  # mamba2
    ngroups: int = 1  # mamba2
    chunk_size: Optional[int] = None  # mamba2
    dt_rank: Optional[int] = None  # mamba1
    inner_rmsnorm: bool = Field(False, description="RMSNorm on dt, B, C (Jamba, Falcon-Mamba)")
    inner_norm_eps: Optional[float] = None
    conv_bias: bool = True
    norm_before_gate: bool = False


class Vision(_Strict):
    image_size: int
    patch_size: int
    num_channels: int = 3
    cls_token: bool = True
    window_size: Optional[int] = None  # SAM windowed attention
    layerscale: bool = False  # DINOv2


class Diffusion(_Strict):
    """DiT (Flux, SD3) and UNet (SDXL, SD1.5) specifics."""
    in_channels: int
    patch_size: Optional[int] = None
    joint_attention_dim: Optional[int] = None
    block_out_channels: Optional[list[int]] = None
    transformer_layers_per_block: Optional[list[int]] = None
    cross_attention_dim: Optional[int] = None
    attention_head_dim: Optional[int] = None
    sample_size: int


class ModelConfig(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    display_name: str
    arch: Arch
    source: Source
    dtype: Literal["bfloat16", "float16", "float32"]
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    vocab_size: Optional[int] = None
    max_position_embeddings: Optional[int] = None
    norm: Norm
    attention: Optional[Attention] = None
    rope: Optional[Rope] = None
    mlp: Optional[Mlp] = None
    moe: Optional[Moe] = None
    mla: Optional[Mla] = None
    ssm: Optional[Ssm] = None
    vision: Optional[Vision] = None
    diffusion: Optional[Diffusion] = None
    layer_norm_placement: Literal["pre", "sandwich", "post", "parallel"] = "pre"
    residual_multiplier: Optional[float] = None  # Granite
    attn_layer_period: Optional[int] = Field(None, description="hybrid: one attention layer per N")
    extra: dict[str, object] = Field(default_factory=dict,
                                     description="published values the blocks do not use")

    @model_validator(mode="after")
    def _parts(self) -> "ModelConfig":
        a = self.arch
        if a in (Arch.DENSE_LLM, Arch.MOE_LLM) and self.attention is None and self.mla is None:
            raise ValueError("an LLM needs attention or mla")
        if a == Arch.MOE_LLM and self.moe is None:
            raise ValueError("arch moe_llm needs moe")
        if a in (Arch.SSM, Arch.HYBRID) and self.ssm is None:
            raise ValueError(f"arch {a.value} needs ssm")
        if a in (Arch.DIFFUSION_DIT, Arch.DIFFUSION_UNET) and self.diffusion is None:
            raise ValueError(f"arch {a.value} needs diffusion")
        if self.ssm and self.ssm.kind == "mamba2" and not (self.ssm.headdim and self.ssm.chunk_size):
            raise ValueError("mamba2 needs headdim and chunk_size")
        if self.ssm and self.ssm.kind == "mamba1" and not self.ssm.dt_rank:
            raise ValueError("mamba1 needs dt_rank")
        return self

    # ---- the small twin used by the faithfulness check -------------------------------------------
    def shrunk(self) -> "ModelConfig":
        """Same structure, tiny free sizes. Structural constants (counts, eps, theta, scales) stay."""
        upd: dict = {"hidden_size": 48}
        if self.attention:
            at = self.attention
            hd = 24 if (self.rope and self.rope.axes_dims) else 16
            upd["attention"] = at.model_copy(update={"head_dim": hd, "scale": at.softmax_scale})
        if self.rope and self.rope.axes_dims:
            upd["rope"] = self.rope.model_copy(update={"axes_dims": [4, 10, 10]})
        if self.mlp:
            upd["mlp"] = self.mlp.model_copy(update={"intermediate_size": 40})
        if self.moe:
            upd["moe"] = self.moe.model_copy(update={
                "expert_intermediate_size": 12,
                "shared_intermediate_size": 20 if self.moe.shared_intermediate_size else None})
        if self.mla:
            upd["mla"] = self.mla.model_copy(update={
                "q_lora_rank": 24 if self.mla.q_lora_rank else None, "kv_lora_rank": 20})
        if self.ssm:
            s = self.ssm
            if s.kind == "mamba2":
                nheads = s.d_inner // s.headdim
                upd["ssm"] = s.model_copy(update={"d_state": 8, "headdim": 4, "d_inner": 4 * nheads})
            else:
                upd["ssm"] = s.model_copy(update={"d_state": 4, "d_inner": 24, "dt_rank": 6})
        if self.diffusion and self.diffusion.block_out_channels:
            g = self.norm.num_groups or 32
            d = self.diffusion
            hd = 8
            upd["diffusion"] = d.model_copy(update={
                "block_out_channels": [2 * g * (i + 1) for i in range(len(d.block_out_channels))],
                "cross_attention_dim": 24,
                "attention_head_dim": hd if d.attention_head_dim else None})
        if self.diffusion and self.diffusion.joint_attention_dim:
            upd["diffusion"] = self.diffusion.model_copy(update={"joint_attention_dim": 32})
        return self.model_copy(update=upd)


def _load_one(path: Path) -> ModelConfig:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", file=path, line=e.lineno) from None
    try:
        cfg = ModelConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(err["msg"], file=path,
                         field=".".join(str(p) for p in err["loc"]) or None) from None
    if cfg.name != path.stem:
        raise InputError(f"name {cfg.name!r} does not match the file name", file=path, field="name")
    return cfg


def load_model_config(path_or_name: str | Path, zoo_dir: Path | None = None) -> ModelConfig:
    """A zoo entry by file path or by name (looked up in zoo_dir, default data/models)."""
    p = Path(path_or_name)
    if p.suffix == ".json" and p.exists():
        return _load_one(p)
    zoo = Path(zoo_dir) if zoo_dir else default_zoo_dir()
    f = zoo / f"{path_or_name}.json"
    if not f.exists():
        known = ", ".join(sorted(x.stem for x in zoo.glob("*.json")))
        raise InputError(f"no model {str(path_or_name)!r} in the zoo (known: {known})", file=f)
    return _load_one(f)


def load_zoo(zoo_dir: Path | None = None) -> list[ModelConfig]:
    zoo = Path(zoo_dir) if zoo_dir else default_zoo_dir()
    return [_load_one(f) for f in sorted(zoo.glob("*.json"))]


def default_zoo_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "models"
