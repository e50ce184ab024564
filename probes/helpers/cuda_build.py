"""Which GPU architectures a CUDA library was built for, read from its ELF without loading it.

Source: the library's ``.nv_fatbin`` section (the "fat binaries" nvcc embeds, one container
per translation unit), read through ``host.read_bytes``: the ELF header, the section header
table, the section-name table, then each container's 16-byte header (magic 0xBA55ED50,
version 1, header size, size of its entries) and each entry's 64-byte header (kind: 1 PTX,
2 or 0x10 a cubin of SASS; its header size at byte 4, its payload size at byte 8, its SM
architecture at byte 28), seeking past the payloads. Only headers are read, each read is a
few bytes at a known offset, and the walk stops after MAX_CONTAINERS containers or
MAX_ENTRIES entries: libtorch_cuda.so is over a GB, and thousands of containers all list
the same architectures, so a bounded walk finds the build's list. Manual equivalent:
``cuobjdump --list-elf --list-ptx libtorch_cuda.so``.

Why the fatbin and not ``torch.cuda.get_arch_list()`` or TORCH_CUDA_ARCH_LIST: importing
torch runs the engine's code in our process (and needs its CUDA), and the arch list is not
written as text anywhere a wheel installs; the section headers are the kernels that exist,
and the format is stable since CUDA 9 (cuobjdump reads the same). Payloads may be
compressed; headers never are.

Compatibility (CUDA C Programming Guide, "Binary Compatibility" and "Application
Compatibility"): a cubin for sm_XY runs on a GPU of compute capability X.Z with Z >= Y (same
major only: sm_80 runs on 8.6, not on 9.0), and PTX for compute_XY is JIT-compiled by the
driver for any GPU of capability >= X.Y. Neither → "no kernel image is available for
execution on the device".

Every file is hostile input: a short read is "truncated", a header out of its bounds is
named with its offset, and nothing here raises beyond ``BuildError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError

FATBIN_MAGIC = 0xBA55ED50  # fatbinary.h FATBIN_MAGIC
FATBIN_MAGICS = (FATBIN_MAGIC, 0x466243B1)  # the second: a relocatable (-rdc) device link's
KIND_PTX, KIND_SASS, KIND_SASS_ALT = 1, 2, 0x10
ELF_SECTION_HEADER = 64  # Elf64_Shdr
MAX_SECTIONS = 1024
MAX_NAMES_BYTES = 64 << 10
MAX_CONTAINERS = 256
MAX_ENTRIES = 4096
MAX_PADDING_WORDS = 64  # zero words between containers before we call the section odd


class BuildError(Exception):
    """The library could not be read as a CUDA build; the message says where and why."""


@dataclass(frozen=True, slots=True)
class BuildArches:
    sass: tuple[int, ...]  # SM numbers with a cubin: (80, 86, 90)
    ptx: tuple[int, ...]  # compute_XY with PTX: (90,)
    containers: int  # fatbin containers walked
    complete: bool  # the whole section was walked (False: stopped at a cap)

    def text(self) -> str:
        return ",".join([f"sm_{a}" for a in self.sass] + [f"compute_{a}" for a in self.ptx])


def runs_on(arches: BuildArches, major: int, minor: int) -> bool:
    """Whether a GPU of compute capability major.minor finds a kernel in this build."""
    gpu = major * 10 + minor
    return (any(a // 10 == major and a % 10 <= minor for a in arches.sass)
            or any(a <= gpu for a in arches.ptx))


class _Reader:
    def __init__(self, host: Host, path: str) -> None:
        self.host, self.path = host, path

    def read(self, offset: int, size: int, what: str) -> bytes:
        try:
            data = self.host.read_bytes(self.path, offset, size)
        except HostReadError as exc:
            raise BuildError(f"{self.path}: {what}: {exc.reason}"
                             + (f" ({exc.detail})" if exc.detail else "")) from None
        if not isinstance(data, bytes) or len(data) < size:
            raise BuildError(f"{self.path}: truncated: {what} at offset {offset} wants {size} "
                             f"bytes, the file gave {len(data) if isinstance(data, bytes) else 0}")
        return data


def _sections(r: _Reader) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each section of a 64-bit little-endian ELF."""
    head = r.read(0, 64, "ELF header")
    if head[:4] != b"\x7fELF":
        raise BuildError(f"{r.path}: not an ELF file (no \\x7fELF magic)")
    if head[4] != 2 or head[5] != 1:
        raise BuildError(f"{r.path}: not a 64-bit little-endian ELF (class {head[4]}, data {head[5]})")
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shentsize != ELF_SECTION_HEADER or not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
        raise BuildError(f"{r.path}: ELF section table unreadable: {shnum} entries of "
                         f"{shentsize} bytes, names in {shstrndx} (at most {MAX_SECTIONS} of 64)")
    table = r.read(shoff, shnum * ELF_SECTION_HEADER, "ELF section headers")
    raw = [struct.unpack_from("<IIQQQQ", table, i * ELF_SECTION_HEADER) for i in range(shnum)]
    _, _, _, _, names_at, names_size = raw[shstrndx]
    names = r.read(names_at, min(names_size, MAX_NAMES_BYTES), "ELF section names")
    out = []
    for name_at, _, _, _, offset, size in raw:
        end = names.find(b"\0", name_at) if name_at < len(names) else -1
        out.append((names[name_at:end].decode("ascii", "replace") if end >= 0 else "", offset, size))
    return out


def _entries(r: _Reader, start: int, end: int, sass: set, ptx: set, budget: list[int]) -> None:
    at = start
    while at + 64 <= end and budget[0] > 0:
        budget[0] -= 1
        entry = r.read(at, 64, "fatbin entry header")
        kind, header_size, payload = struct.unpack_from("<HxxIQ", entry, 0)
        arch, = struct.unpack_from("<I", entry, 28)
        if header_size < 64 or at + header_size + payload > end:
            raise BuildError(f"{r.path}: fatbin entry at offset {at} runs past its container "
                             f"(header {header_size} bytes, payload {payload})")
        if kind == KIND_PTX:
            ptx.add(arch)
        elif kind in (KIND_SASS, KIND_SASS_ALT):
            sass.add(arch)
        at += header_size + payload


def build_arches(host: Host, path: str) -> BuildArches:
    """The architectures of the cubins and PTX in ``path``'s ``.nv_fatbin``; BuildError."""
    r = _Reader(host, path)
    fatbins = [(o, s) for name, o, s in _sections(r) if name == ".nv_fatbin"]
    if not fatbins:
        raise BuildError(f"{path}: no .nv_fatbin section: the library holds no CUDA kernels")
    sass: set[int] = set()
    ptx: set[int] = set()
    containers, budget, complete = 0, [MAX_ENTRIES], True
    for offset, size in fatbins:
        at, end, padding = offset, offset + size, 0
        while at + 16 <= end:
            if containers >= MAX_CONTAINERS or budget[0] <= 0:
                complete = False
                break
            magic, _, header_size, fat_size = struct.unpack("<IHHQ", r.read(at, 16, "fatbin header"))
            if magic not in FATBIN_MAGICS:
                if magic == 0 and padding < MAX_PADDING_WORDS:  # alignment between containers
                    at, padding = at + 8, padding + 1
                    continue
                raise BuildError(f"{path}: no fatbin magic (0x{FATBIN_MAGIC:08X}) at offset {at} "
                                 f"of .nv_fatbin (found 0x{magic:08X})")
            if header_size < 16 or at + header_size + fat_size > end:
                raise BuildError(f"{path}: fatbin container at offset {at} runs past .nv_fatbin "
                                 f"({fat_size} bytes from a {header_size}-byte header)")
            _entries(r, at + header_size, at + header_size + fat_size, sass, ptx, budget)
            containers, padding = containers + 1, 0
            at = (at + header_size + fat_size + 7) & ~7
    if not sass and not ptx:
        raise BuildError(f"{path}: .nv_fatbin holds no cubin or PTX entry")
    return BuildArches(sass=tuple(sorted(sass)), ptx=tuple(sorted(ptx)), containers=containers,
                       complete=complete and budget[0] > 0)
