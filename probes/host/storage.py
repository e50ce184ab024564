"""host.storage: where the model weights live, and how fast they read.

For each model path (``--model-dir``, and the local ``--model``/``-m`` path of every engine
process): the filesystem and mount (``/proc/self/mountinfo``), the backing block device and
whether it is rotational (``/sys/dev/block/MAJ:MIN`` → ``/sys/block/<disk>/queue/rotational``),
free space (statvfs), the weight files' size, and, at level standard, a bounded sequential
read of the weights that bypasses the page cache (O_DIRECT; decimal MB/s). The read stops at
a byte bound or a time bound (READ_BOUNDS); which one stopped it is recorded, since a read
stopped by time on a slow disk is a full measurement however few bytes it got. No root needed
for reading world-readable weights. Manual equivalent: ``findmnt -T DIR``, ``lsblk -o
NAME,ROTA,MODEL``, ``dd if=FILE of=/dev/null bs=8M count=128 iflag=direct``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.model import Level, ScanOptions, Skip
from probes.kernels import disk_read
from probes.helpers.processes import engine_processes, model_path_of

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ggml", ".onnx", ".engine")
NETWORK_FS = ("nfs", "nfs4", "lustre", "cifs", "smb3", "9p", "ceph", "glusterfs", "beegfs", "gpfs")
# The read test's bounds: level standard reads a sample, level full the weights (to 16 GiB).
READ_BOUNDS = {Level.STANDARD: (1024**3, 3.0), Level.FULL: (16 * 1024**3, 30.0)}


@dataclass(frozen=True, slots=True)
class ModelStorage:
    path: str
    source: str  # "--model-dir", or "vllm pid 1234"
    fs_type: str | None  # from /proc/self/mountinfo
    mount_point: str | None
    network_fs: bool  # NFS, Lustre, CIFS, 9p, FUSE...
    block_device: str | None  # sda, nvme0n1, dm-0; None for virtual and network filesystems
    rotational: bool | None  # /sys/block/<disk>/queue/rotational; None when not a block device
    fs_free_bytes: int
    weight_files: int
    weights_bytes: int
    read_mbps: float | None  # None at level quick, or when there are no weight files
    read_bytes: int | None
    read_method: str | None  # o_direct, or fadvise_dontneed where O_DIRECT is refused
    read_reason: str | None  # why read_mbps is None
    read_seconds: float | None = None  # time spent in reads
    # What ended the read: "max_seconds" (the time bound: a slow disk), "max_bytes", or
    # "end_of_files" (the weights were smaller than the bound).
    read_stopped_by: str | None = None


@dataclass(frozen=True, slots=True)
class StorageRecord:
    paths: tuple[ModelStorage, ...]


def mount_of(mountinfo: str, path: str) -> tuple[str | None, str | None]:
    """(fs type, mount point) of the longest mount point that contains ``path``."""
    best: tuple[str | None, str | None] = (None, None)
    best_len = -1
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = fields[4].replace("\\040", " ")
        fs_type = line.split(" - ", 1)[1].split()[0]
        inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > best_len:
            best, best_len = (fs_type, mount_point), len(mount_point)
    return best


def block_device_of(host: Host, device: str) -> tuple[str | None, bool | None]:
    """``8:1`` → (``sda``, rotational); (None, None) for virtual devices (major 0).

    ``/sys/dev/block/MAJ:MIN`` links to ``…/block/sda/sda1`` for a partition, or to
    ``…/nvme0n1/nvme0n1p1`` (no ``block`` component) or ``…/block/dm-0``. Only whole disks
    have ``/sys/block/<disk>/queue``: try the last component, then its parent.
    """
    if device.startswith("0:"):
        return None, None
    try:
        target = host.read_link(f"/sys/dev/block/{device}")
    except HostReadError:
        return None, None
    parts = [p for p in target.split("/") if p and p != ".."]
    for disk in reversed(parts[-2:]):
        try:
            flag = host.read_text(f"/sys/block/{disk}/queue/rotational").strip()
        except HostReadError:
            continue
        return disk, flag == "1"
    return parts[-1] if parts else None, None


def _weights(host: Host, path: str, is_dir: bool) -> dict[str, int]:
    folder, only = (path, None) if is_dir else (os.path.dirname(path), os.path.basename(path))
    try:
        files = host.list_files(folder)
    except HostReadError:
        return {}
    return {
        os.path.join(folder, name): size for name, size in sorted(files.items())
        if (only is None or name == only) and name.endswith(WEIGHT_SUFFIXES)
    }


def _read(host: Host, path: str, weights: dict[str, int], level: Level) -> dict:
    max_bytes, max_s = READ_BOUNDS[level]

    def run() -> dict:
        try:
            return disk_read.measure(paths=list(weights), max_bytes=max_bytes, max_seconds=max_s)
        except OSError as exc:
            raise MeasurementError(f"reading {exc.filename or path}: {exc.strerror}") from None

    return host.measure(f"host.storage.read:{path}", run)


def _model_paths(host: Host, options: ScanOptions) -> list[tuple[str, str]]:
    paths = [(os.path.abspath(d), "--model-dir") for d in options.model_dirs]
    for proc in engine_processes(host):
        model = model_path_of(proc.cmdline)
        if model and all(model != p for p, _ in paths):
            paths.append((model, f"{proc.engine} pid {proc.pid}"))
    return paths


def _storage(host: Host, options: ScanOptions, mountinfo: str, path: str, source: str) -> ModelStorage:
    info = host.stat(path)
    fs_type, mount_point = mount_of(mountinfo, path)
    disk, rotational = block_device_of(host, info.device)
    weights = _weights(host, path, info.is_dir)
    read, reason = {}, None
    if options.level < Level.STANDARD:
        reason = "level quick: no read test"
    elif not weights:
        reason = "no weight files (*.safetensors, *.gguf, *.bin, ...) found"
    else:
        try:
            read = _read(host, path, weights, options.level)
        except MeasurementError as exc:
            reason = str(exc)
    return ModelStorage(
        path=path,
        source=source,
        fs_type=fs_type,
        mount_point=mount_point,
        network_fs=fs_type is not None and (fs_type in NETWORK_FS or fs_type.startswith("fuse")),
        block_device=disk,
        rotational=rotational,
        fs_free_bytes=info.fs_free_bytes,
        weight_files=len(weights),
        weights_bytes=sum(weights.values()),
        read_mbps=round(read["read_mbps"], 1) if read else None,
        read_bytes=read.get("bytes_read"),
        read_method=read.get("method"),
        read_reason=reason,
        read_seconds=round(read["seconds"], 2) if read else None,
        read_stopped_by=read.get("stopped_by"),
    )


def probe(host: Host, options: ScanOptions) -> StorageRecord:
    paths = _model_paths(host, options)
    if not paths:
        raise Skip("no --model-dir given and no engine process with a local model path: "
                   "pass --model-dir DIR to judge the disk the weights are on")
    mountinfo = host.read_text("/proc/self/mountinfo")
    rows = []
    for path, source in paths:
        try:
            rows.append(_storage(host, options, mountinfo, path, source))
        except HostReadError:
            if source == "--model-dir":
                raise  # the user named it: a path we cannot read is an error, not a skip
            # an engine's path may live in its own mount namespace (a container): pass on
    return StorageRecord(paths=tuple(rows))


def summary(record: StorageRecord) -> str:
    """One line for people: each model path's disk and read rate, and what ended the read."""
    parts = []
    for p in record.paths:
        if p.read_mbps is None:
            speed = p.read_reason or "not read"
        else:
            stop = {"max_seconds": "stopped by time", "max_bytes": "stopped by size"}.get(
                p.read_stopped_by or "", "to the end")
            speed = f"{p.read_mbps:.1f} MB/s ({(p.read_bytes or 0) / 1e6:.0f} MB, {stop})"
        rotational = {True: "rotational", False: "solid-state", None: "no block device"}
        parts.append(f"{p.path}: {p.fs_type} on {p.block_device or '-'} "
                     f"({rotational[p.rotational]}), {p.weights_bytes / 1e9:.1f} GB weights, {speed}")
    return "; ".join(parts)
