"""GGUF metadata: the key/value header and tensor table of a llama.cpp model file.

Format (ggml docs/gguf.md, versions 2 and 3, little-endian): magic ``GGUF``, uint32
version, uint64 tensor count, uint64 key/value count, the key/values (string key, uint32
type, value), then per tensor its name, dimensions, ggml type and data offset. Only the
header is read (a few MB, however large the weights); the tensor data is never loaded.
Large arrays (the tokenizer's vocabulary) are skipped, their length kept; a per-layer array
(``<arch>.attention.sliding_window_pattern``: one boolean a layer) is kept whole up to
``KEPT_LAYER_ARRAY`` values, as a model with more than 64 layers needs it all.

The file may be anyone's: it is opened non-blocking and checked with fstat before any read
(a FIFO or a device is refused, never waited on), every length and count it declares is
checked against the bytes left in the file before anything is read or allocated for it,
arrays of arrays are bounded in depth, and the values read in all are bounded in number.
What it holds is returned as found: doctor/workload/model_shape.py checks each value it uses.

Manual equivalent: ``python -m gguf.scripts.gguf_dump model.gguf`` (the ``gguf`` package).
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

from doctor.i18n import t
from doctor.redact import safe_display

MAGIC = b"GGUF"
# Value types (gguf.md "gguf_metadata_value_type"): struct format, or None for the others.
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_STRING = 1 << 20  # no key or value in a real header comes near 1 MiB
KEPT_ARRAY = 64  # arrays longer than this keep only their length
KEPT_LAYER_ARRAY = 10_000  # a per-layer array's bound: model_shape.LIMITS["layers"]
LAYER_ARRAY_KEYS = (".sliding_window_pattern",)  # keys whose arrays hold one value a layer
# Real headers hold arrays of scalars or strings, never arrays of arrays (llama.cpp reads
# none); a few levels are allowed, and recursion never goes deeper.
MAX_DEPTH = 4
# Values read one by one (keys, strings, tensors): gemma-3's 262,144-token vocabulary makes
# 786,000; the bound keeps a header that declares millions of empty strings to seconds.
MAX_VALUES = 1 << 22
MAX_DIMS = 8  # ggml's GGML_MAX_DIMS is 4
MAX_PARAMS = 10**14  # elements over all tensors: 100 T, fifty times the largest model
# The fewest bytes an item can take, for checking a declared count against the file:
# a key/value is a key's length, a type and a one-byte value; a tensor its name's length,
# its dimension count, its ggml type and its offset.
KV_BYTES, TENSOR_BYTES = 8 + 4 + 1, 8 + 4 + 4 + 8


class GGUFError(Exception):
    """Not a readable GGUF file; the message names the file and the offset."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_display(message))  # a file name may hold any bytes


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any]  # long arrays as ("array", length)
    tensor_count: int
    param_count: int  # elements over all tensors
    file_bytes: int


def open_regular(path: str) -> tuple[BinaryIO, int]:
    """``path`` opened for reading, and its size, if it is a regular file.

    Opened with O_NONBLOCK and checked with fstat before any read: a FIFO (which would block
    the open or the read until a writer came), a device or a socket is refused at once.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise GGUFError(t("{path}: no such file or directory", path=path)) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise GGUFError(t("{path}: cannot read it ({error})", path=path,
                          error=getattr(exc, 'strerror', None) or exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (t("a directory") if stat.S_ISDIR(info.st_mode)
                    else t("not a regular file (a FIFO, device or socket)"))
            raise GGUFError(t("{path}: {kind}; pass the model's directory, its config.json or "
                              "its .gguf file", path=path, kind=kind))
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


class _Reader:
    """Reads forward from byte ``at``, never past ``size``: each read or skip is checked first."""

    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self.f, self.path, self.size = f, path, size
        self.at = 0  # kept here, not asked of the file: a skipped vocabulary is 800,000 reads
        self.values = 0

    def truncated(self, n: int, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: truncated at byte {self.size} or corrupt ({what} at "
                         f"byte {self.at} needs {n:,} bytes, {self.size - self.at:,} left); "
                         "download it again")

    def take(self, n: int, what: str = "a value") -> bytes:
        if n > self.size - self.at:
            raise self.truncated(n, what)
        data = self.f.read(n)
        if len(data) != n:  # it shrank while read
            raise self.truncated(n, what)
        self.at += n
        return data

    def skip(self, n: int, what: str) -> None:
        if n > self.size - self.at:
            raise self.truncated(n, what)
        self.f.seek(n, os.SEEK_CUR)
        self.at += n

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def tick(self, n: int = 1) -> None:
        self.values += n
        if self.values > MAX_VALUES:
            raise GGUFError(f"{self.path}: more than {MAX_VALUES:,} values before byte "
                            f"{self.at}; no model's header holds so many, the file is corrupt")

    def count(self, what: str, item_bytes: int) -> int:
        """A declared count of items of at least ``item_bytes`` each, checked against the file."""
        at = self.at
        value = self.scalar("<Q")
        if value * item_bytes > self.size - self.at:
            raise GGUFError(f"{self.path}: truncated at byte {self.size} or corrupt (the {what} "
                            f"{value:,} at byte {at} needs at least {value * item_bytes:,} bytes, "
                            f"{self.size - self.at:,} left); download it again")
        return value

    def string_length(self) -> int:
        length = self.scalar("<Q")
        if length > MAX_STRING:
            raise GGUFError(f"{self.path}: a string of {length} bytes at byte {self.at - 8}; "
                            "the file is corrupt")
        return length

    def string(self) -> str:
        self.tick()
        return self.take(self.string_length(), "a string").decode("utf-8", "replace")

    def item_bytes(self, kind: int) -> int:
        """The fewest bytes one value of ``kind`` takes; unknown kinds are refused here."""
        if kind in SCALARS:
            return struct.calcsize(SCALARS[kind])
        if kind in (STRING, ARRAY):
            return 8 if kind == STRING else 4 + 8
        raise GGUFError(f"{self.path}: unknown value type {kind} at byte {self.at - 4}; "
                        "the file is corrupt or newer than this reader")

    def value(self, kind: int, depth: int = 0, kept: int = KEPT_ARRAY) -> Any:
        if kind in SCALARS:
            self.tick()
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind != ARRAY:
            self.item_bytes(kind)  # raises: unknown
        if depth >= MAX_DEPTH:
            raise GGUFError(f"{self.path}: arrays nested more than {MAX_DEPTH} deep at byte "
                            f"{self.at}; no model file nests them, the file is corrupt")
        self.tick()
        inner = self.scalar("<I")
        length = self.count("array length", self.item_bytes(inner))
        if length > kept:
            self.skip_array(inner, length, depth + 1)
            return ("array", length)
        return [self.value(inner, depth + 1) for _ in range(length)]

    def skip_array(self, inner: int, length: int, depth: int) -> None:
        if inner in SCALARS:  # one seek, nothing allocated
            self.skip(self.item_bytes(inner) * length, f"an array of {length:,} values")
        elif inner == STRING:
            self.tick(length)
            for _ in range(length):
                self.skip(self.string_length(), "a string")
        else:
            for _ in range(length):
                self.value(inner, depth)


def read_header(path: str) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor table; GGUFError when it is not one."""
    f, size = open_regular(path)
    try:
        with f:
            return _read(_Reader(f, path, size), path, size)
    except OSError as exc:
        raise GGUFError(t("{path}: cannot read it ({error})", path=path,
                          error=exc.strerror or exc)) from None


def _read(r: _Reader, path: str, size: int) -> GGUFHeader:
    if size < 4 or r.take(4) != MAGIC:
        raise GGUFError(t("{path}: not a GGUF file (no 'GGUF' magic at byte 0)", path=path))
    version = r.scalar("<I")
    if version not in (2, 3):
        raise GGUFError(t("{path}: GGUF version {version}; this reader knows versions 2 and 3",
                          path=path, version=version))
    tensors = r.count("tensor count", TENSOR_BYTES)
    kv_count = r.count("key/value count", KV_BYTES)
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = r.string()
        kept = KEPT_LAYER_ARRAY if key.endswith(LAYER_ARRAY_KEYS) else KEPT_ARRAY
        metadata[key] = r.value(r.scalar("<I"), kept=kept)
    params = 0
    for _ in range(tensors):
        r.string()  # tensor name
        dims = r.scalar("<I")
        if dims > MAX_DIMS:
            raise GGUFError(f"{path}: a tensor with {dims} dimensions at byte {r.at - 4}; "
                            "the file is corrupt")
        elements = 1
        for _ in range(dims):
            elements *= r.scalar("<Q")
            elements = min(elements, MAX_PARAMS + 1)  # a product of 2^64s stays small
        r.take(4 + 8)  # ggml type, data offset
        params += elements
        if params > MAX_PARAMS:
            raise GGUFError(f"{path}: the tensors declare more than {MAX_PARAMS:,} parameters "
                            f"(at byte {r.at}); no model is that large, the file is corrupt")
    return GGUFHeader(path, version, metadata, tensors, params, size)
