"""Just enough ELF reading to check a cubin: its machine (EM_CUDA), target SM and kernel symbols.

CUDA cubins are 64-bit little-endian ELF files with e_machine 190 (EM_CUDA). Where the SM number sits
in e_flags depends on the CUDA ELF ABI version (e_ident[EI_ABIVERSION]): ABI 7 and older keep it in
the low byte, ABI 8 (CUDA 12.8+ toolchains, what NVRTC 13 emits) in bits 8-15. The e_flags of sm_90 and
sm_90a cubins are identical in ABI 8, so there the full target name ("sm_90a") is read from the
toolkit note (.note.nv.tkinfo), which records ptxas' "-arch sm_90a"; in ABI 7 (the CuTe DSL's cubins)
e_flags bit 0x800 marks the "a" variant. Compile cross-checks both against what it asked
for, so an unexpected layout fails loudly instead of passing.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

EM_CUDA = 190
STT_FUNC = 2


class ElfError(ValueError):
    pass


@dataclass
class CubinInfo:
    sm: int                 # 90 for sm_90/sm_90a, 100 for sm_100a
    abi_version: int
    e_flags: int
    functions: list[str]    # global function symbols (kernels and device functions kept visible)
    arch: str = ""          # "sm_90a" from the toolkit note; "" when the note is absent


def read_cubin(blob: bytes) -> CubinInfo:
    if len(blob) < 64 or blob[:4] != b"\x7fELF":
        raise ElfError("not an ELF file (a cubin starts with \\x7fELF; PTX text is not accepted)")
    if blob[4] != 2 or blob[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF")
    abi = blob[8]
    (machine,) = struct.unpack_from("<H", blob, 18)
    if machine != EM_CUDA:
        raise ElfError(f"ELF machine {machine} is not EM_CUDA ({EM_CUDA})")
    (e_flags,) = struct.unpack_from("<I", blob, 48)
    sm = (e_flags >> 8) & 0xFF if abi >= 8 else e_flags & 0xFF
    sections = _sections(blob)
    arch = ""
    note = sections.get(".note.nv.tkinfo")
    if note:
        m = re.search(rb"-arch[ =](sm_\d+[af]?)", blob[note[1]:note[1] + note[2]])
        arch = m.group(1).decode() if m else ""
    elif abi < 8:  # ABI 7 (e.g. the CuTe DSL's cubins): 0x800 is EF_CUDA_ACCELERATORS, the "a"
        arch = f"sm_{sm}" + ("a" if e_flags & 0x800 else "")
    return CubinInfo(sm=sm, abi_version=abi, e_flags=e_flags, functions=_function_symbols(blob),
                     arch=arch)


def _section_table(blob: bytes) -> list[tuple]:
    (e_shoff,) = struct.unpack_from("<Q", blob, 40)
    e_shentsize, e_shnum, _ = struct.unpack_from("<HHH", blob, 58)
    out = []
    for i in range(e_shnum):
        name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", blob, e_shoff + i * e_shentsize)
        out.append((name, stype, offset, size, link, entsize))
    return out


def _sections(blob: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name -> (type, offset, size)."""
    table = _section_table(blob)
    (shstrndx,) = struct.unpack_from("<H", blob, 62)
    str_off = table[shstrndx][2]
    out = {}
    for name, stype, offset, size, _link, _entsize in table:
        end = blob.index(b"\0", str_off + name)
        out[blob[str_off + name:end].decode("utf-8", "replace")] = (stype, offset, size)
    return out


def _function_symbols(blob: bytes) -> list[str]:
    sections = [(stype, offset, size, link, entsize)
                for _n, stype, offset, size, link, entsize in _section_table(blob)]
    out = []
    for stype, offset, size, link, entsize in sections:
        if stype != 2 or entsize == 0:  # SHT_SYMTAB
            continue
        str_off = sections[link][1]
        for j in range(size // entsize):
            st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from(
                "<IBBHQQ", blob, offset + j * entsize)
            if st_info & 0xF == STT_FUNC and st_info >> 4 in (1, 2):  # global or weak function
                end = blob.index(b"\0", str_off + st_name)
                out.append(blob[str_off + st_name:end].decode("utf-8", "replace"))
    return out


def sm_of_arch(arch: str) -> int:
    digits = "".join(c for c in arch if c.isdigit())
    return int(digits)


EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


@dataclass
class KernelParam:
    ordinal: int
    offset: int
    size: int


def kernel_params(blob: bytes, symbol: str) -> tuple[list[KernelParam], int]:
    """A kernel's parameters as ptxas laid them out (from .nv.info.<symbol>): ordered by ordinal,
    plus the total parameter-buffer size. This is the ground truth a launcher must pack against."""
    sec = _sections(blob).get(f".nv.info.{symbol}")
    if sec is None:
        raise ElfError(f"no .nv.info section for kernel {symbol!r}")
    _, off, size = sec
    end, params, total = off + size, [], 0
    while off + 2 <= end:
        fmt, attr = blob[off], blob[off + 1]
        off += 2
        if fmt == _EIFMT_SVAL:
            (n,) = struct.unpack_from("<H", blob, off)
            payload = blob[off + 2:off + 2 + n]
            off += 2 + n
            if attr == EIATTR_KPARAM_INFO:
                _index, ordinal, p_off, packed = struct.unpack_from("<IHHI", payload)
                params.append(KernelParam(ordinal=ordinal, offset=p_off, size=(packed >> 18) & 0x3FFF))
        elif fmt == _EIFMT_HVAL:
            (val,) = struct.unpack_from("<H", blob, off)
            off += 2
            if attr == EIATTR_CBANK_PARAM_SIZE:
                total = val
        elif fmt in (_EIFMT_BVAL, _EIFMT_NVAL):
            off += 2  # a byte value padded to two bytes / an unused two-byte field
        else:
            raise ElfError(f"unknown .nv.info format {fmt} in kernel {symbol!r}")
    params.sort(key=lambda p: p.ordinal)
    total = total or max((p.offset + p.size for p in params), default=0)
    return params, total
