"""NVRTC precompiled headers (PCH) shared across param variants. Runs inside the nvrtc compile worker.

Why: a kernel that includes cuda_bf16.h / cuda_fp8.h spends most of its NVRTC time in the front end
parsing those headers (and every compile parses NVRTC's own builtin header first). NVRTC 12.8+ can
save the front end's state after the headers into a file and load it in a later compile. A PCH is
only accepted when the compile options and the leading preprocessing directives are the same as when
it was made, so params passed as `-D` options would give one PCH per param set: useless for a param
sweep. Instead each source unit is rewritten as

    <the unit's leading #include <...> lines, unchanged>          <- the PCH covers up to here
    ;                                                             <- "header stop point"
    #include "__solforge_params.h"                                <- `#define NAME VALUE` per param
    #line K+1                                                     <- the agent's line numbers again
    <rest of the unit, unchanged>

so one PCH serves every param set of the same include block and options. The `;` (an empty
declaration) is the first token, which is where NVRTC's front end stops the header part; NVRTC does
not honour `#pragma hdrstop`. Cubins are byte-identical to the `-D` way (tests check it).

Params go the old `-D` way (no PCH) when injection could change meaning: a reserved name (`_X`,
`__x`), a name the wheel headers test or define in a preprocessing directive (e.g. NDEBUG,
CCCL_DISABLE_BF16_SUPPORT), or a value a `#define` line would read differently (`\\` at the end,
comment openers). The reverse is a gain: a param named like an identifier the headers use (`T`, `N`)
used to break the headers as a `-D`, and now only reaches the agent's own code.

Files: `<pch_dir>/<toolchain tag>/w<pid>/<key>.pch`, key = sha256(include block text, options), one
folder per worker process because a PCH only loads in the NVRTC instance that made it (PchFiles).
Least recently used files go beyond MAX_BYTES. Deleting the folder is always safe (the next compile
makes what it needs).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from ..provenance import dist_version
from . import toolchain

PARAMS_HEADER = "__solforge_params.h"
# identical on create and use (a PCH is refused when the options differ); quiet PCH chatter:
# 20283 "PCH creation disabled because #line directive encountered" (ours, after the stop point),
# 629/630 "options / initial directives do not match", 20282 "heap address differs" (the compile then
# just runs without the PCH; PchFiles avoids all three)
PCH_OPTIONS = ["--pch-messages=false", "--diag-suppress=20282,20283,629,630"]
MAX_BYTES = 1 << 30       # PCH files per worker process (one with CUB is ~220 MB, bf16+fp8 ~12 MB)
_FORMAT = 1               # bump when the rewrite above changes

_ANGLE_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^<>\n]+)>\s*(//.*)?$")
_RESERVED = re.compile(r"^(_[A-Z_]|__)")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef|define|undef)\b(.*)$", re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*")


def supported() -> bool:
    """NVRTC 12.8+ with the PCH entry points in these bindings."""
    from cuda.bindings import nvrtc

    if not hasattr(nvrtc, "nvrtcGetPCHCreateStatus"):
        return False
    _, major, minor = nvrtc.nvrtcVersion()
    return (major, minor) >= (12, 8)


def include_block_lines(src: str, local_headers) -> int:
    """How many leading lines of `src` are only `#include <...>` of toolchain headers, blank lines and
    comments, up to and including the last such #include (0: none). A header the candidate ships
    (`local_headers`) ends the block: it may use params. Anything unusual ends it too."""
    end, in_block = 0, False
    for i, line in enumerate(src.splitlines()):
        s = line.strip()
        if s.endswith("\\"):
            break  # a continued line: keep it simple
        if in_block:
            if "*/" not in s:
                continue
            after = s.split("*/", 1)[1].strip()
            if after and not after.startswith("//"):
                break
            in_block = False
            continue
        if not s or s.startswith("//"):
            continue
        if s.startswith("/*"):
            if "*/" not in s[2:]:
                in_block = True
                continue
            after = s[2:].split("*/", 1)[1].strip()
            if after and not after.startswith("//"):
                break
            continue
        m = _ANGLE_INCLUDE.match(line)
        if m and m.group(1).strip() not in local_headers and "/*" not in line:
            end = i + 1
            continue
        break
    return end


def params_header(defines: list[str]) -> str:
    """`-DNAME=VALUE` options (toolchain.define_options) as `#define NAME VALUE` lines."""
    out = []
    for d in defines:
        name, _, value = d[2:].partition("=")
        out.append(f"#define {name} {value}\n")
    return "".join(out)


def rewrite(src: str, block_lines: int) -> str:
    lines = src.splitlines(keepends=True)
    head = "".join(lines[:block_lines])
    if head and not head.endswith(("\n", "\r")):
        head += "\n"
    return f'{head};\n#include "{PARAMS_HEADER}"\n#line {block_lines + 1}\n' + "".join(lines[block_lines:])


@lru_cache(maxsize=1)
def toolchain_tag() -> str:
    """Changes whenever NVRTC, the header wheels or their folders change: a PCH is never reused across."""
    def v(dist):
        return dist_version(dist, "-")

    ident = [toolchain.nvrtc_version(), *toolchain.include_dirs(), v("cuda-bindings"),
             v("nvidia-cuda-runtime"), v("nvidia-cuda-cccl"), str(_FORMAT)]
    return hashlib.sha256("\n".join(ident).encode()).hexdigest()[:16]


def _scan_header_macros() -> list[str]:
    names: set[str] = set()
    for d in toolchain.include_dirs():
        for root, _dirs, files in os.walk(d):
            for f in files:
                try:
                    text = Path(root, f).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                for m in _DIRECTIVE.finditer(text):
                    names.update(_IDENT.findall(m.group(1)))
    return sorted(names)


_macro_names: dict[str, frozenset] = {}


def header_macro_names(folder: Path) -> frozenset:
    """Every identifier on a #if/#ifdef/#ifndef/#elif/#define/#undef line of the wheel headers: a param
    with such a name may be meant for the headers, so it must stay a -D. Scanning takes ~1 s of CPU,
    so the list is kept next to the PCH files (per toolchain) and in memory."""
    key = toolchain_tag()  # the headers, whichever cache folder asks
    if key not in _macro_names:
        f = folder / "header_macros.json"
        try:
            names = json.loads(f.read_text())
        except (OSError, ValueError):
            names = _scan_header_macros()
            try:
                folder.mkdir(parents=True, exist_ok=True)
                tmp = f.with_name(f".{f.name}.{os.getpid()}")
                tmp.write_text(json.dumps(names))
                os.replace(tmp, f)
            except OSError:
                pass
        _macro_names[key] = frozenset(names)
    return _macro_names[key]


def injectable(params: dict, defines: list[str], folder: Path) -> bool:
    """True when defining the params after the include block means the same as -D options."""
    if not params:
        return True
    for d in defines:
        name, _, value = d[2:].partition("=")
        if _RESERVED.match(name) or value.rstrip().endswith("\\") or "/*" in value or "//" in value:
            return False
    macros = header_macro_names(folder)
    return not any(d[2:].partition("=")[0] in macros for d in defines)


class PchFiles:
    """The PCH files made by this process's NVRTC, and the calls around one compile that makes or uses one.

    A PCH is a snapshot of NVRTC's PCH heap and only loads at the same heap address: in practice only
    in the process (NVRTC instance) that made it, and only until the heap is resized (NVRTC warns
    #20282 and parses the headers again, slower than no PCH at all). So each worker process keeps its
    own folder <root>/<toolchain tag>/w<pid>/, removed when it exits; folders of dead workers (killed
    on a timeout) are removed by the next one. Workers live for hundreds of compiles, so each header
    set is parsed once per worker. The heap is never resized (default 256 MB holds even CUB's
    headers); a header set too big for it just compiles without a PCH.
    """

    def __init__(self, root: str | Path, max_bytes: int = MAX_BYTES):
        self.tag_dir = Path(root) / toolchain_tag()
        self.dir = self.tag_dir / f"w{os.getpid()}"
        self.max_bytes = max_bytes
        self.files: OrderedDict[str, int] = OrderedDict()  # key -> size, least recently used first
        self.failed: set[str] = set()                      # keys NVRTC would not make a PCH for
        _sweep_dead(Path(root))
        shutil.rmtree(self.dir, ignore_errors=True)  # a folder left by an earlier process of this pid
        atexit.register(shutil.rmtree, self.dir, True)

    def key(self, head: str, options: list[str]) -> str:
        return hashlib.sha256(json.dumps([head, options]).encode()).hexdigest()[:32]

    def options_for(self, key: str) -> tuple[list[str], bool]:
        """(extra NVRTC options, whether this compile creates the PCH)."""
        path = self.dir / f"{key}.pch"
        if key in self.files:
            if path.exists():
                self.files.move_to_end(key)
                return [f"--use-pch={path}"], False
            del self.files[key]  # removed under us: make it again
        if key in self.failed:
            return [], False
        self.dir.mkdir(parents=True, exist_ok=True)
        return [f"--create-pch={path}"], True

    def after_create(self, prog, key: str) -> None:
        """Keep the PCH NVRTC just wrote, or remember that there is none for this key."""
        from cuda.bindings import nvrtc

        path = self.dir / f"{key}.pch"
        (status,) = nvrtc.nvrtcGetPCHCreateStatus(prog)
        size = path.stat().st_size if path.exists() else 0
        if status == nvrtc.nvrtcResult.NVRTC_SUCCESS and size > 0:
            self.files[key] = size
            self._evict()
            return
        _remove(path)
        # heap exhausted (a header set > 256 MB of front-end state), or NVRTC chose not to: no PCH
        self.failed.add(key)

    def _evict(self) -> None:
        while len(self.files) > 1 and sum(self.files.values()) > self.max_bytes:
            key, _ = self.files.popitem(last=False)
            _remove(self.dir / f"{key}.pch")


_stores: dict[tuple[str, int], PchFiles] = {}


def files_for(root: str | Path, max_bytes: int = MAX_BYTES) -> PchFiles:
    """This process's PchFiles under root (one per process: a forked child starts its own)."""
    k = (str(root), os.getpid())
    if k not in _stores:
        _stores[k] = PchFiles(root, max_bytes)
    _stores[k].max_bytes = max_bytes
    return _stores[k]


def _sweep_dead(root: Path) -> None:
    for d in root.glob("*/w*"):
        try:
            pid = int(d.name[1:])
        except ValueError:
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass  # alive (or not ours to signal)


def _remove(path) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
