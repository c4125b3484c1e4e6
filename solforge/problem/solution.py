"""Solution: a kernel implementation for one Definition (SOL-ExecBench docs/solution.md).

Mirrors the on-disk JSON: name, definition, author, description, spec (languages, target_hardware,
entry_point "file::function", destination_passing_style, binding, dependencies, compile_options),
sources [{path, content}]. The rules the documentation states are enforced here: relative source
paths without "..", no duplicate paths, the entry file among the sources, C++ and Python languages
never mixed, and the entry file's suffix matching the language family.
"""

from __future__ import annotations

import hashlib
from enum import Enum
from pathlib import PurePosixPath
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Language(str, Enum):
    PYTORCH = "pytorch"
    TRITON = "triton"
    CUTE_DSL = "cute_dsl"
    CUTILE = "cutile"
    CUDNN_FRONTEND = "cudnn_frontend"
    CUDA_CPP = "cuda_cpp"
    CUTLASS = "cutlass"
    CUDNN = "cudnn"
    CUBLAS = "cublas"


PYTHON_LANGUAGES = frozenset({Language.PYTORCH, Language.TRITON, Language.CUTE_DSL,
                              Language.CUTILE, Language.CUDNN_FRONTEND})
CPP_LANGUAGES = frozenset({Language.CUDA_CPP, Language.CUTLASS, Language.CUDNN, Language.CUBLAS})
CPP_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cuh")


class Hardware(str, Enum):
    B200 = "B200"
    LOCAL = "LOCAL"
    H200 = "H200"  # ours: the box we actually time on

    @classmethod
    def _missing_(cls, value):
        # The docs write ["local"], the code "LOCAL": accept either spelling.
        if isinstance(value, str):
            for m in cls:
                if m.value.lower() == value.lower():
                    return m
        return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class SourceFile(_Model):
    path: str = Field(min_length=1)
    content: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or v.startswith("\\") or (len(v) > 1 and v[1] == ":"):
            raise ValueError(f"source path {v!r} must be relative")
        if ".." in p.parts:
            raise ValueError(f"source path {v!r} must not contain '..'")
        return v


class CompileOptions(_Model):
    cflags: list[str] = Field(default_factory=list)
    cuda_cflags: list[str] = Field(default_factory=lambda: ["-O3", "--use_fast_math"])
    ld_flags: list[str] = Field(default_factory=lambda: ["-lcuda"])


class BuildSpec(_Model):
    languages: list[Language] = Field(min_length=1)
    target_hardware: list[Hardware] = Field(min_length=1)
    entry_point: str = Field(min_length=1)
    destination_passing_style: bool = True
    binding: Optional[str] = None
    dependencies: list[str] = Field(default_factory=list)
    compile_options: Optional[CompileOptions] = None

    @field_validator("entry_point")
    @classmethod
    def _entry_format(cls, v: str) -> str:
        parts = v.split("::")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"entry_point {v!r} must be 'file_path::function_name'")
        return v

    @field_validator("binding")
    @classmethod
    def _binding(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v != "torch":
            raise ValueError(f"binding {v!r} is not supported (only 'torch')")
        return v

    @model_validator(mode="after")
    def _languages(self) -> "BuildSpec":
        langs = set(self.languages)
        if langs & PYTHON_LANGUAGES and langs & CPP_LANGUAGES:
            raise ValueError("languages: C++ and Python languages cannot be mixed")
        suffix = PurePosixPath(self.entry_file).suffix
        if langs & CPP_LANGUAGES and suffix not in CPP_SUFFIXES:
            raise ValueError(f"entry_point: C++ languages need a C++/CUDA file, got {self.entry_file!r}")
        if langs & PYTHON_LANGUAGES and suffix != ".py":
            raise ValueError(f"entry_point: Python languages need a .py file, got {self.entry_file!r}")
        return self

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.entry_point.split("::")[1]

    @property
    def is_cpp(self) -> bool:
        return bool(set(self.languages) & CPP_LANGUAGES)


class Solution(_Model):
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    author: str = Field(min_length=1)
    description: Optional[str] = None
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _sources(self) -> "Solution":
        seen: set[str] = set()
        for s in self.sources:
            if s.path in seen:
                raise ValueError(f"sources: duplicate path {s.path!r}")
            seen.add(s.path)
        if self.spec.entry_file not in seen:
            raise ValueError(f"spec.entry_point: file {self.spec.entry_file!r} is not in sources")
        return self

    def entry_source(self) -> SourceFile:
        return next(s for s in self.sources if s.path == self.spec.entry_file)

    @property
    def content_hash(self) -> str:
        """sha256 over what changes behaviour (not author or description)."""
        h = hashlib.sha256()
        parts = [self.name, self.definition, *(lang.value for lang in self.spec.languages),
                 self.spec.entry_point, self.spec.binding or "", *self.spec.dependencies,
                 self.spec.compile_options.model_dump_json() if self.spec.compile_options else "",
                 str(self.spec.destination_passing_style)]
        for s in sorted(self.sources, key=lambda s: s.path):
            parts += [s.path, s.content]
        for p in parts:
            h.update(p.encode())
            h.update(b"\0")  # separator: ("ab","c") and ("a","bc") must differ
        return h.hexdigest()
