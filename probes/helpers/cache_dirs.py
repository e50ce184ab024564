"""Where an engine keeps its model and compile caches, and the filesystem each one sits on.

Sources: the engine's ``/proc/<pid>/environ`` (probes/helpers/process_env.py: only the cache
variables below are kept), its command line (vLLM ``--download-dir``), its user's home
(``/etc/passwd``) for the defaults, ``/proc/<pid>/mountinfo`` (the mount that holds each
path, in the engine's own mount namespace: a container's) and ``statvfs`` of the path inside
the engine's root (``/proc/<pid>/root<path>``, or the nearest folder above it that exists).
Privilege: the engine's user or root. Manual equivalent: ``sudo tr '\\0' '\\n' <
/proc/PID/environ | grep -E '^(HF_|VLLM_CACHE|TRITON|TORCHINDUCTOR)'``; ``nsenter -t PID -m
findmnt -T PATH``; ``nsenter -t PID -m df -h PATH``.

The defaults, from each library's own code: huggingface_hub ``constants.py`` (``HF_HOME`` =
``$XDG_CACHE_HOME/huggingface`` or ``~/.cache/huggingface``; ``HF_HUB_CACHE`` =
``$HF_HOME/hub``, the older ``HUGGINGFACE_HUB_CACHE`` honoured), vLLM ``envs.py``
(``VLLM_CACHE_ROOT`` = ``$XDG_CACHE_HOME/vllm`` or ``~/.cache/vllm``; its torch.compile
artefacts in ``torch_compile_cache`` below it), Triton (``TRITON_CACHE_DIR`` =
``$TRITON_HOME/.triton/cache``, ``TRITON_HOME`` the home) and PyTorch Inductor
(``TORCHINDUCTOR_CACHE_DIR`` = ``/tmp/torchinductor_<user>``).

A path does not survive a restart when its mount is a tmpfs (RAM), a Kubernetes
``emptyDir`` (its mount's root names ``kubernetes.io~empty-dir``: deleted with the pod), or
the overlay root of a container (its writable upper layer: gone when the container is
recreated). Any other mount (a host directory, a volume, a PVC) is taken as persistent.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of
from probes.helpers.mounts import unescape
from probes.helpers.process_env import env_value, real_uid

EMPTY_DIR = "kubernetes.io~empty-dir"
MAX_UP = 32  # folders climbed from a cache path to one that exists
# the engines whose caches are read (their compile caches: probes/engine/cache.py compiles())
MODEL_KINDS = ("vllm", "sglang", "tgi")


@dataclass(frozen=True, slots=True)
class CacheDir:
    """One cache of one engine and the filesystem it is on."""

    engine: str  # "vllm at http://127.0.0.1:8000 pid 4242"
    role: str  # "model" (weights) or "compile" (torch.compile, Triton, Inductor)
    name: str  # "hf-hub", "download-dir", "vllm-compile", "triton", "inductor"
    set_by: str  # "HF_HUB_CACHE", "HF_HOME", "--download-dir", "default"
    path: str | None  # as the engine sees it; None when it could not be told (missing says why)
    exists: bool | None  # the path itself is there (an engine creates it on first use)
    mount_point: str | None  # the mount that holds it, in the engine's namespace
    fstype: str | None  # "tmpfs", "overlay", "ext4", ...
    ephemeral: str | None  # "tmpfs", "emptyDir", "container overlay": why it is lost; None: kept
    persistent: bool | None  # False: lost at a restart; None: the mount was not read
    total_bytes: int | None  # statvfs of the filesystem
    free_bytes: int | None  # f_bavail: what the engine's user may still write
    free_share: float | None  # free / total, 0 to 1
    missing: dict[str, str]  # field -> why it is None
    # what this start paid to fill it, from the engine's log (probes/helpers/engine_phases.py):
    # the weights' load for a model cache, torch.compile for vLLM's compile cache
    start_cost_s: float | None = None
    from_cache: bool | None = None  # the log said every compiled graph came from the cache
    # a model cache the engine loads its weights through (started with a hub id); None for a
    # compile cache, False for one that holds no weights of its model (a local path served)
    holds_model: bool | None = None


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    root: str  # the part of the source filesystem mounted there (mountinfo field 4)
    fstype: str


def mounts(text: str) -> list[Mount]:
    """The mounts of a mountinfo, in order (a later one over the same point is on top)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail:
            out.append(Mount(unescape(fields[4]), unescape(fields[3]), tail[0]))
    return out


def mount_of(table: list[Mount], path: str) -> Mount | None:
    """The mount that holds ``path``: the longest mount point above it, the last one listed."""
    best: Mount | None = None
    for m in table:
        inside = path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def ephemeral_kind(m: Mount) -> str | None:
    """Why a mount does not outlive a restart, or None when it does (as far as we know)."""
    if m.fstype in ("tmpfs", "ramfs"):
        return "tmpfs"
    if EMPTY_DIR in m.root:
        return "emptyDir"
    if m.fstype == "overlay" and m.point == "/":
        return "container overlay"
    return None


def is_true(value: str | None) -> bool:
    """huggingface_hub's ``_is_true``: 1, ON, YES or TRUE, any case."""
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


class Env:
    """The cache variables of one process, read one at a time (the rest never kept)."""

    def __init__(self, host: Host, pid: int) -> None:
        self.host, self.pid = host, pid
        self.refused: str | None = None  # why the environ could not be read

    def get(self, name: str) -> str | None:
        got = env_value(self.host, self.pid, name)
        if got.reason is not None:
            self.refused = got.reason
        return got.value or None


def _under(base: str | None, *parts: str) -> str | None:
    return posixpath.join(base, *parts) if base else None


def hub_cache(env: Env, home: str | None) -> tuple[str | None, str]:
    """(path, set by) of the Hugging Face hub cache."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = env.get(name)
        if value:
            return value, name
    hf_home = env.get("HF_HOME")
    if hf_home:
        return posixpath.join(hf_home, "hub"), "HF_HOME"
    xdg = env.get("XDG_CACHE_HOME")
    if xdg:
        return posixpath.join(xdg, "huggingface", "hub"), "XDG_CACHE_HOME"
    return _under(home, ".cache", "huggingface", "hub"), "default"


def compile_caches(kind: str, env: Env, home: str | None, user: str | None) -> list[tuple[str, str | None, str]]:
    """(name, path, set by) of the compile caches of an engine of ``kind``: vLLM's
    torch.compile cache (vLLM points Inductor and Triton inside it at start:
    vllm/compilation/compiler_interface.py ``InductorAdaptor.initialize_cache``, so their own
    variables are not its), SGLang's Triton and Inductor caches."""
    if kind == "vllm":
        root, by = env.get("VLLM_CACHE_ROOT"), "VLLM_CACHE_ROOT"
        if not root:
            xdg = env.get("XDG_CACHE_HOME")
            root, by = (posixpath.join(xdg, "vllm"), "XDG_CACHE_HOME") if xdg else (_under(home, ".cache", "vllm"), "default")
        return [("vllm-compile", _under(root, "torch_compile_cache"), by)]
    out: list[tuple[str, str | None, str]] = []
    triton = env.get("TRITON_CACHE_DIR")
    if triton:
        out.append(("triton", triton, "TRITON_CACHE_DIR"))
    else:
        triton_home = env.get("TRITON_HOME")
        out.append(("triton", _under(triton_home or home, ".triton", "cache"),
                    "TRITON_HOME" if triton_home else "default"))
    inductor = env.get("TORCHINDUCTOR_CACHE_DIR")
    out.append(("inductor", inductor, "TORCHINDUCTOR_CACHE_DIR") if inductor
               else ("inductor", f"/tmp/torchinductor_{user}" if user else None, "default"))
    return out


def place(host: Host, pid: int, table: list[Mount] | None, table_why: str | None,
          engine: str, role: str, name: str, path: str | None, set_by: str,
          missing_path: str | None = None) -> CacheDir:
    """``path`` of ``pid`` placed on its mount and measured by statvfs."""
    missing: dict[str, str] = {}
    if path is None or not path.startswith("/"):
        why = missing_path or f"{set_by} is not an absolute path: {path!r:.80}"
        return CacheDir(engine, role, name, set_by, None, None, None, None, None, None, None,
                        None, None, {"path": why})
    path = posixpath.normpath(path)
    mount = mount_of(table, path) if table is not None else None
    if mount is None:
        missing["persistent"] = table_why or f"no mount holds {path} in /proc/{pid}/mountinfo"
    kind = ephemeral_kind(mount) if mount else None
    exists, total, free = _statvfs(host, pid, path, missing)
    share = round(free / total, 4) if free is not None and total else None
    return CacheDir(engine, role, name, set_by, path, exists, mount.point if mount else None,
                    mount.fstype if mount else None, kind,
                    None if mount is None else kind is None, total, free, share, missing)


def _statvfs(host: Host, pid: int, path: str, missing: dict[str, str]) -> tuple[bool | None, int | None, int | None]:
    """(the path exists, fs total, fs free) from statvfs of it, else of the nearest folder
    above it that exists (the filesystem it will be created on)."""
    here, exists = path, True
    for _ in range(MAX_UP):
        try:
            info = host.stat(f"/proc/{pid}/root{here}")
            return exists, info.fs_total_bytes, info.fs_free_bytes
        except HostReadError as exc:
            if reason_of(exc) != "not-found" or here == "/":
                missing["free_bytes"] = f"statvfs /proc/{pid}/root{here}: {reason_of(exc)}"
                return (None if exists else False), None, None
        here, exists = posixpath.dirname(here), False
    missing["free_bytes"] = f"no folder above {path} found"
    return None, None, None


def mount_table(host: Host, pid: int) -> tuple[list[Mount] | None, str | None]:
    try:
        return mounts(host.read_text(f"/proc/{pid}/mountinfo")), None
    except HostReadError as exc:
        return None, f"/proc/{pid}/mountinfo: {reason_of(exc)}"


def user_of(host: Host, pid: int, env: Env) -> str | None:
    """The user name of ``pid`` (Inductor's default folder is named after it): ``USER`` of
    its environment, else its uid's name in ``/etc/passwd``."""
    name = env.get("USER")
    if name:
        return name
    uid = real_uid(host, pid)
    try:
        passwd = host.read_text("/etc/passwd") if uid is not None else ""
    except HostReadError:
        return None
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2] == str(uid) and fields[0]:
            return fields[0]
    return None
