"""What CUDA an engine process has loaded: its mapped libraries and its torch's version file.

Sources, through the host seam, no root for one's own processes (another user's need root):
* ``/proc/<pid>/maps``: the files mapped into the process: ``libcudart.so.12.8.90`` (a CUDA
  toolkit's runtime, its version in the name) or ``nvidia/cuda_runtime/lib/libcudart.so.12``
  (the pip wheel's, major only: ``.so.12`` is the soname, not the release), ``libcuda.so.*``
  (the driver's, or a forward-compatibility copy from a ``compat`` directory),
  ``libnccl.so.2.21.5`` (NCCL, its version in the name: the pip wheel ``nvidia-nccl-cu12``
  and the system package both install the full name; the soname ``libnccl.so.2`` alone says
  the major only, and is not taken for a version), and
  ``torch/lib/libtorch_cuda.so``, whose directory gives the engine's site-packages;
* ``/proc/<pid>/exe`` and the command line's interpreter, when torch is not mapped (yet):
  their ``lib/python3.*/{site,dist}-packages``;
* ``<site-packages>/torch/version.py``: ``cuda = '12.8'`` and ``__version__``, parsed as
  text with a regular expression, never imported or run (it is the engine's code), and only
  when it is under MAX_VERSION_FILE bytes.

Files are read as the process sees them, under ``/proc/<pid>/root`` (an engine in a
container has its own /usr). Manual equivalent: ``grep -E 'libcud|libnccl|libtorch' /proc/<pid>/maps``,
``cat <site-packages>/torch/version.py``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError

MAX_VERSION_FILE = 64 << 10  # torch's is ~300 bytes
MAX_MAPS_LINES = 200_000
MAX_SITE_DIRS = 8

# libcudart.so.12.8.90 (a toolkit's file), libcudart.so.12 (the pip wheel's), the soname
# libcudart.so.11.0 of every 11.x, libcudart-d0da41ae.so.11.0 (bundled in old torch wheels)
_CUDART = re.compile(r"libcudart(?:-[0-9a-f]{8})?\.so\.(\d+)(?:\.(\d+)\.\d+|\.\d+)?$")
_LIBCUDA = re.compile(r"libcuda\.so(?:\.\d+)*$")
# libnccl.so.2.21.5; torch's old wheels bundled libnccl-<hash>.so.2 (no version: not taken)
_NCCL = re.compile(r"libnccl(?:-[0-9a-f]{8})?\.so\.(\d{1,3}\.\d{1,4}\.\d{1,4})$")
_TORCH_LIB = "/torch/lib/"
_VERSION_LINE = re.compile(r"""^(cuda|__version__|hip)\s*(?::[^=\n]*)?=\s*(?:(['"])([^'"\n]{0,64})\2|None)\s*$""",
                           re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Loaded:
    """The CUDA files one process has mapped (paths as the process sees them)."""

    cudart: str | None  # the runtime library mapped
    cudart_version: str | None  # "12.8" from libcudart.so.12.8.90, "12" from libcudart.so.12
    libcuda: str | None  # the driver library mapped
    compat: bool  # that libcuda is a forward-compatibility copy (a compat directory)
    torch_cuda_lib: str | None  # torch/lib/libtorch_cuda.so mapped
    site_packages: str | None  # the directory above torch/
    nccl: str | None = None  # libnccl.so.2.21.5 mapped -> "2.21.5"; None: none, or the soname only


def mapped(maps: str) -> Loaded:
    """The CUDA libraries in a ``/proc/<pid>/maps`` text."""
    cudart = cudart_version = libcuda = torch_lib = site = nccl = None
    for n, line in enumerate(maps.splitlines()):
        if n >= MAX_MAPS_LINES:
            break
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5].removesuffix(" (deleted)")
        name = posixpath.basename(path)
        m = _CUDART.search(name)
        if m and cudart is None:
            cudart, cudart_version = path, m[1] + (f".{m[2]}" if m[2] else "")
        elif _LIBCUDA.fullmatch(name) and libcuda is None:
            libcuda = path
        elif (n_m := _NCCL.fullmatch(name)) and nccl is None:
            nccl = n_m[1]
        if _TORCH_LIB in path:
            site = site or path[:path.index(_TORCH_LIB)]
            if torch_lib is None and name.startswith("libtorch_cuda.so"):
                torch_lib = path
    compat = libcuda is not None and any(
        part == "compat" or part.endswith("-compat") for part in posixpath.dirname(libcuda).split("/"))
    return Loaded(cudart, cudart_version, libcuda, compat, torch_lib, site, nccl)


@dataclass(frozen=True, slots=True)
class TorchVersion:
    path: str
    version: str | None  # __version__: "2.7.0+cu128"
    cuda: str | None  # cuda: "12.8"; None for a CPU or ROCm build
    hip: str | None  # hip: a ROCm build's


def torch_version(host: Host, path: str) -> TorchVersion:
    """torch/version.py at ``path``, parsed as text; HostReadError names what is wrong."""
    directory, name = posixpath.split(path)
    size = host.list_files(directory).get(name)
    if size is None:
        raise HostReadError(path, "not-found")
    if size > MAX_VERSION_FILE:
        raise HostReadError(path, "failed", f"{size} bytes, over {MAX_VERSION_FILE}: not a "
                            "torch version file; not read")
    text = host.read_text(path)[:MAX_VERSION_FILE]
    found = {m[1]: m[3] for m in _VERSION_LINE.finditer(text)}
    if not found:
        raise HostReadError(path, "failed", "no `cuda = ...` or `__version__ = ...` line: "
                            "not a torch version file")
    cuda = found.get("cuda")
    if cuda is not None and not re.fullmatch(r"\d{1,3}\.\d{1,3}(?:\.\d{1,4})?", cuda):
        raise HostReadError(path, "failed", f"cuda = {cuda!r:.40} is not a CUDA version")
    return TorchVersion(path, found.get("__version__"), cuda, found.get("hip"))


def site_candidates(host: Host, root: str, interpreters: list[str]) -> list[str]:
    """site-packages directories (as seen under ``root``) of the given interpreters' prefixes."""
    out: list[str] = []
    prefixes = []
    for interpreter in interpreters:
        if interpreter.startswith("/") and posixpath.basename(posixpath.dirname(interpreter)) == "bin":
            prefix = posixpath.dirname(posixpath.dirname(interpreter))
            prefixes += [prefix] + (["/usr/local"] if prefix == "/usr" else [])
    for prefix in dict.fromkeys(prefixes):
        lib = posixpath.join(prefix, "lib")
        try:
            pythons = [d for d in host.list_dirs(root + lib) if d.startswith("python3")]
        except HostReadError:
            continue
        for python in pythons[:MAX_SITE_DIRS]:
            for kind in ("site-packages", "dist-packages"):
                out.append(posixpath.join(lib, python, kind))
    return out[:MAX_SITE_DIRS]
