"""A multi-kernel CUDA candidate seen as segments: one per launched kernel, with the span of its
definition in the source, so one kernel can be read on its own and replaced without touching the
others.

Only the source text and the launch list are read (no compiler internals), so this works for the
compiler's plans and for any CUDA candidate whose launched kernels are defined at file scope (also
inside an `extern "C" { ... }` block). Comments, string literals and preprocessor lines are masked
before braces are matched, so a `{` in a comment or a `#define` does not shift a span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from pydantic import ValidationError

from ..candidate import Candidate

_MAX_NESTING = 8   # extern "C" / namespace blocks looked into
_IDENT_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*$")
_GLOBAL = re.compile(r"\b__global__\b")


class SegmentError(ValueError):
    """The candidate cannot be split into segments, or a replacement does not fit; one line."""


@dataclass
class Segment:
    kernel: str                       # the launched entry point's name (template args removed)
    file: str                         # the source file holding its definition
    start: int                        # span of the definition in that file
    end: int
    n_params: int                     # parameters in its signature
    launches: list[int] = field(default_factory=list)  # indexes into candidate.launches

    def text(self, cand: Candidate) -> str:
        return cand.sources[self.file][self.start:self.end]


def base_name(kernel: str) -> str:
    """`gemm<128, 64>` -> `gemm`: the name a definition carries."""
    return kernel.split("<", 1)[0].strip()


def mask(src: str) -> str:
    """The source with comments and preprocessor lines blanked and the insides of string/char
    literals reduced to letters, same length and newlines kept, so offsets map one to one."""
    out = list(src)
    i, n = 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c == "#":
            j = i
            while j < n and src[j] != "\n":  # a directive runs to the newline, continuations too
                j += 2 if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n" else 1
            for k in range(i, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                if src[j] == "\\":
                    out[j] = "_"
                    j += 1
                    if j < n:
                        out[j] = "_"
                    j += 1
                    continue
                if not src[j].isalnum():
                    out[j] = "_"
                j += 1
            i = j + 1
            line_start = False
            continue
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return "".join(out)


def _match(m: str, i: int, open_c: str, close_c: str) -> int:
    """Index just past the bracket that closes the one at m[i]."""
    depth = 0
    for j in range(i, len(m)):
        if m[j] == open_c:
            depth += 1
        elif m[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SegmentError(f"unbalanced {open_c}{close_c} in the source")


def _items(m: str, lo: int, hi: int):
    """Top-level items in m[lo:hi]: (header_start, brace_open, end) for each `header { body }`."""
    i, head = lo, None
    while i < hi:
        c = m[i]
        if c == "{":
            end = _match(m, i, "{", "}")
            yield (head if head is not None else i), i, end
            i, head = end, None
            continue
        if c == ";":
            head = None
        elif c == "(":
            if head is None:
                head = i
            i = _match(m, i, "(", ")")
            continue
        elif not c.isspace() and head is None:
            head = i
        i += 1


def _signature(m: str, head: int, brace: int) -> Optional[tuple[str, int, int]]:
    """For a function definition's header m[head:brace]: (name, params_open, params_close)."""
    h = m[head:brace].rstrip()
    end = head + len(h)
    # skip trailing qualifiers between ) and { (const, noexcept, -> T is not used in kernels)
    close = m.rfind(")", head, end)
    if close < 0:
        return None
    depth, j = 0, close
    while j >= head:
        if m[j] == ")":
            depth += 1
        elif m[j] == "(":
            depth -= 1
            if depth == 0:
                break
        j -= 1
    if j < head:
        return None
    name = _IDENT_BEFORE_PAREN.search(m[head:j])
    return (name.group(1), j, close) if name else None


def split_params(src: str, masked: str, lo: int, hi: int) -> list[str]:
    """The parameter declarations of the list src[lo:hi] (the inside of its parentheses), split at
    commas outside brackets (found on the masked text); `void` or nothing is no parameter."""
    inner = masked[lo:hi].strip()
    if not inner or inner == "void":
        return []
    out, depth, start = [], 0, lo
    for j in range(lo, hi):
        c = masked[j]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(" ".join(src[start:j].split()))
            start = j + 1
    out.append(" ".join(src[start:hi].split()))
    return out


def kernel_definitions(src: str) -> dict[str, tuple[int, int, list[str]]]:
    """`__global__` definitions at file scope (or in `extern "C" {}`): name -> (start, end, the
    parameter declarations)."""
    m = mask(src)
    found: dict[str, tuple[int, int, int]] = {}

    def walk(lo: int, hi: int, depth: int) -> None:
        for head, brace, end in _items(m, lo, hi):
            header = m[head:brace]
            if re.fullmatch(r'\s*extern\s*"C"\s*', header) or re.match(r"\s*namespace\b", header):
                if depth < _MAX_NESTING:  # a hostile source cannot recurse without bound
                    walk(brace + 1, end - 1, depth + 1)
                continue
            if not _GLOBAL.search(header):
                continue
            sig = _signature(m, head, brace)
            if sig is None:
                continue
            name, po, pc = sig
            found.setdefault(name, (head, end, split_params(src, m, po + 1, pc)))

    walk(0, len(m), 0)
    return found


def device_functions(src: str) -> list[str]:
    """Names of the `__device__` functions defined at file scope, in order (each name once)."""
    m = mask(src)
    names: list[str] = []
    for head, brace, _ in _items(m, 0, len(m)):
        if re.search(r"\b__device__\b", m[head:brace]) and not _GLOBAL.search(m[head:brace]):
            sig = _signature(m, head, brace)
            if sig and sig[0] not in names:
                names.append(sig[0])
    return names


def signature(text: str) -> str:
    """A definition's text up to its body's `{`, whitespace runs folded: what a caller must match."""
    brace = mask(text).find("{")
    return " ".join((text if brace < 0 else text[:brace]).split())


def segments_of(cand: Candidate) -> list[Segment]:
    """One segment per distinct launched kernel, in launch order; SegmentError when a launched
    kernel has no definition the scanner can find."""
    if cand.language != "cuda":
        raise SegmentError(f"segments are CUDA kernels; this candidate is {cand.language}")
    defs = {f: kernel_definitions(s) for f, s in cand.sources.items() if f.endswith(".cu")}
    segs: dict[str, Segment] = {}
    for i, launch in enumerate(cand.launches):
        name = base_name(launch.kernel)
        if name in segs:
            segs[name].launches.append(i)
            continue
        where = [(f, d[name]) for f, d in defs.items() if name in d]
        if not where:
            raise SegmentError(f"no __global__ definition of launched kernel {name!r} found")
        f, (start, end, params) = where[0]
        segs[name] = Segment(name, f, start, end, len(params), [i])
    return list(segs.values())


def shared_text(cand: Candidate, segs: list[Segment]) -> str:
    """The source of the `.cu` units outside every segment (includes, helpers, the compiler's
    prelude). Headers are not in it: they are library code the units include (headers())."""
    by_file: dict[str, list[Segment]] = {}
    for s in segs:
        by_file.setdefault(s.file, []).append(s)
    parts = []
    units = {f: src for f, src in cand.sources.items() if f.endswith(".cu")}
    for f, src in units.items():
        keep, pos = [], 0
        for s in sorted(by_file.get(f, []), key=lambda s: s.start):
            keep.append(src[pos:s.start])
            pos = s.end
        keep.append(src[pos:])
        text = re.sub(r"\n{3,}", "\n\n", "".join(keep)).strip()
        if text:
            parts.append(text if len(units) == 1 else f"// ---- {f}\n{text}")
    return "\n\n".join(parts)


def headers(cand: Candidate) -> dict[str, int]:
    """The candidate's non-unit source files (headers the units include): name -> characters."""
    return {f: len(src) for f, src in cand.sources.items() if not f.endswith(".cu")}


_LAUNCH_KEYS = {"grid", "block", "smem", "cluster", "args"}
_SCALAR_ARG = re.compile(r"^(int32|int64|uint32|uint64|float32|float64):")


def _mismatch(decl: str, arg) -> str:
    """Why a launch arg cannot feed a parameter (a pointer gets a tensor or the workspace, a scalar
    gets a TYPE:EXPR), or ''. Sizes are checked against the cubin when it compiles."""
    if not isinstance(arg, str):
        return f"gets {arg!r}, which is not an arg string"
    pointer = "*" in decl or "[" in decl
    scalar = _SCALAR_ARG.match(arg)
    if pointer and scalar:
        return f"is a pointer but its launch passes the scalar {arg!r}"
    if not pointer and not scalar:
        return f"is a scalar but its launch passes the buffer {arg!r}"
    return ""


def replace_segment(cand: Candidate, segs: list[Segment], kernel: str, source: str,
                    launch: Optional[dict] = None, notes: str = "") -> Candidate:
    """`cand` with segment `kernel`'s definition replaced by `source` (which may carry helper
    `__device__` code before the kernel) and its launches changed by `launch`; everything else as it
    was. SegmentError with one line when the replacement does not fit."""
    by_name = {s.kernel: s for s in segs}
    seg = by_name.get(base_name(kernel))
    if seg is None:
        raise SegmentError(f"unknown segment {kernel!r}; the segments are "
                           + ", ".join(s.kernel for s in segs))
    defs = kernel_definitions(source)
    if seg.kernel not in defs:
        raise SegmentError(f"the new source of segment {seg.kernel!r} does not define "
                           f"`__global__ void {seg.kernel}(...)`")
    if len(defs) > 1:
        raise SegmentError(f"the new source of segment {seg.kernel!r} defines {len(defs)} kernels "
                           f"({', '.join(defs)}); a segment is one kernel")
    launch = dict(launch or {})
    bad = set(launch) - _LAUNCH_KEYS
    if bad:
        raise SegmentError(f"launch changes may set {sorted(_LAUNCH_KEYS)}, not {sorted(bad)}")
    params = defs[seg.kernel][2]
    d = cand.model_dump()
    for i in seg.launches:
        d["launches"][i].update(launch)
        args = d["launches"][i]["args"]
        if not isinstance(args, list) or len(args) != len(params):
            raise SegmentError(f"segment {seg.kernel!r}: the new kernel takes {len(params)} "
                               f"parameters but its launch passes "
                               f"{len(args) if isinstance(args, list) else 'no list of'} args {args}")
        for k, (decl, arg) in enumerate(zip(params, args), 1):
            why = _mismatch(decl, arg)
            if why:
                raise SegmentError(f"segment {seg.kernel!r}: parameter {k} `{decl}` {why}")
    src = cand.sources[seg.file]
    d["sources"][seg.file] = src[:seg.start] + source.strip() + "\n" + src[seg.end:].lstrip("\n")
    d["notes"] = notes or f"segment {seg.kernel} replaced"
    try:
        return Candidate.model_validate(d)
    except ValidationError as e:
        x = e.errors()[0]
        where = ".".join(str(p) for p in x["loc"]) or "(top)"
        raise SegmentError(f"segment {seg.kernel!r}: the spliced candidate is not valid: "
                           f"{where}: {x['msg']}") from None
