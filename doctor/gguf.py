"""GGUF metadata: the key/value header and tensor table of a llama.cpp model file.

Format (ggml docs/gguf.md, versions 2 and 3, little-endian): magic ``GGUF``, uint32
version, uint64 tensor count, uint64 key/value count, the key/values (string key, uint32
type, value), then per tensor its name, dimensions, ggml type and data offset. Only the
header is read (a few MB, however large the weights); the tensor data is never loaded.
Large arrays (the tokenizer's vocabulary) are skipped, their length kept.

Manual equivalent: ``python -m gguf.scripts.gguf_dump model.gguf`` (the ``gguf`` package).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

MAGIC = b"GGUF"
# Value types (gguf.md "gguf_metadata_value_type"): struct format, or None for the others.
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_STRING = 1 << 20  # no key or value in a real header comes near 1 MiB
MAX_COUNT = 1 << 32
KEPT_ARRAY = 64  # arrays longer than this keep only their length


class GGUFError(Exception):
    """Not a readable GGUF file; the message names the file and the offset."""


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any]  # long arrays as ("array", length)
    tensor_count: int
    param_count: int  # elements over all tensors
    file_bytes: int


class _Reader:
    def __init__(self, f: BinaryIO, path: str) -> None:
        self.f, self.path = f, path

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFError(f"{self.path}: truncated at byte {self.f.tell()} "
                            f"(wanted {n} more bytes); the file is incomplete, download it again")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        value = self.scalar("<Q")
        if value > MAX_COUNT:
            raise GGUFError(f"{self.path}: {what} {value} at byte {self.f.tell() - 8} is "
                            "impossible; the file is corrupt")
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        if length > MAX_STRING:
            raise GGUFError(f"{self.path}: a string of {length} bytes at byte "
                            f"{self.f.tell() - 8}; the file is corrupt")
        return self.take(length).decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind in SCALARS:
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            inner, length = self.scalar("<I"), self.count("array length")
            if length > KEPT_ARRAY:
                self.skip_array(inner, length)
                return ("array", length)
            return [self.value(inner) for _ in range(length)]
        raise GGUFError(f"{self.path}: unknown value type {kind} at byte {self.f.tell() - 4}")

    def skip_array(self, inner: int, length: int) -> None:
        if inner in SCALARS:
            self.take(struct.calcsize(SCALARS[inner]) * length)
            return
        for _ in range(length):
            self.value(inner)


def read_header(path: str) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor table; GGUFError when it is not one."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return _read(_Reader(f, path), path, size)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read(r: _Reader, path: str, size: int) -> GGUFHeader:
    if r.f.read(4) != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (no 'GGUF' magic at byte 0)")
    version = r.scalar("<I")
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version}; this reader knows versions 2 and 3")
    tensors, kv_count = r.count("tensor count"), r.count("key/value count")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = r.string()
        metadata[key] = r.value(r.scalar("<I"))
    params = 0
    for _ in range(tensors):
        r.string()  # tensor name
        dims = r.scalar("<I")
        if dims > 8:
            raise GGUFError(f"{path}: a tensor with {dims} dimensions; the file is corrupt")
        elements = 1
        for _ in range(dims):
            elements *= r.scalar("<Q")
        r.take(4 + 8)  # ggml type, data offset
        params += elements
    return GGUFHeader(path, version, metadata, tensors, params, size)
