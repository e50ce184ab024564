"""host.storage: where the model weights live, and how fast they read.

For each model path (``--model-dir``, and the local ``--model``/``-m`` path of every engine
process): the filesystem and mount (``/proc/self/mountinfo``), the backing block device and
whether it is rotational (``/sys/dev/block/MAJ:MIN`` → ``/sys/block/<disk>/queue/rotational``),
free space (statvfs), the weight files' size, and, at level standard, a bounded sequential
read of the weights that bypasses the page cache (O_DIRECT; decimal MB/s). The read stops at
a byte bound or a time bound (READ_BOUNDS); which one stopped it is recorded, since a read
stopped by time on a slow disk is a full measurement however few bytes it got.

A hypervisor's disk (virtio ``vda``, Xen ``xvda``, Hyper-V and cloud SCSI disks) reports
whatever rotational flag the hypervisor chose, not what backs it: ``virtual_disk`` says so,
from the disk's driver (``/sys/block/<disk>/device/driver``), its place in the device tree or
its name, and only a measured read judges such a disk.

No root needed for world-readable weights; a value that could not be read is None, and the
row's ``missing`` says why (no permission, not measured at level quick). A model path this
user cannot see (another user's home, an engine's own mount namespace) is listed in
``unread`` with the reason. Manual equivalent: ``findmnt -T DIR``, ``lsblk -o
NAME,ROTA,MODEL``, ``readlink /sys/block/vda/device/driver``,
``dd if=FILE of=/dev/null bs=8M count=128 iflag=direct``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from doctor.seam.host import Host, HostReadError, MeasurementError, Reason
from doctor.model import Level, ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import number, text, why
from doctor.i18n import lazy, t, translated
from probes.helpers import disk_read
from probes.helpers.processes import engine_processes, model_path_of

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ggml", ".onnx", ".engine")
NETWORK_FS = ("nfs", "nfs4", "lustre", "cifs", "smb3", "9p", "ceph", "glusterfs", "beegfs", "gpfs")
# The read test's bounds: level standard reads a sample, level full the weights (to 16 GiB).
READ_BOUNDS = {Level.STANDARD: (1024**3, 3.0), Level.FULL: (16 * 1024**3, 30.0)}
NOT_READ_AT_QUICK = lazy("not measured at level quick")  # the read test runs at level standard
READ_FIELDS = ("read_mbps", "read_bytes", "read_method", "read_seconds", "read_stopped_by")
# Block drivers of hypervisors' disks (virtio, Xen, Hyper-V's storvsc) and the SCSI vendors
# of emulated or cloud disks: their rotational flag is the hypervisor's choice.
VIRTUAL_DRIVERS = ("virtio_blk", "virtio-blk", "xen-blkfront", "vbd", "hv_storvsc", "vmw_pvscsi")
VIRTUAL_VENDORS = ("QEMU", "VMware", "Msft", "Google", "VBOX", "Xen", "Amazon")
VIRTUAL_NAMES = ("vd", "xvd")  # vda: virtio_blk; xvda: Xen's blkfront


@dataclass(frozen=True, slots=True)
class ModelStorage:
    path: str
    source: str  # "--model-dir", or "vllm pid 1234"
    fs_type: str | None  # from /proc/self/mountinfo
    mount_point: str | None
    network_fs: bool  # NFS, Lustre, CIFS, 9p, FUSE...
    block_device: str | None  # sda, nvme0n1, dm-0; None for virtual and network filesystems
    rotational: bool | None  # /sys/block/<disk>/queue/rotational; None when not a block device
    virtual_disk: bool  # a hypervisor's disk (virtio, Xen, Hyper-V, cloud SCSI): rotational says nothing
    fs_free_bytes: int
    weight_files: int | None  # None when the folder could not be listed (missing says why)
    weights_bytes: int | None
    read_mbps: float | None  # None at level quick, or when there are no weight files
    read_bytes: int | None
    read_method: str | None  # o_direct, or fadvise_dontneed where O_DIRECT is refused
    read_reason: str | None  # why read_mbps is None
    read_seconds: float | None = None  # time spent in reads
    # What ended the read: "max_seconds" (the time bound: a slow disk), "max_bytes", or
    # "end_of_files" (the weights were smaller than the bound).
    read_stopped_by: str | None = None
    # field → why it holds None (doctor/seam/missing.py): no-permission, not-found, or the
    # read's reason ("not measured at level quick")
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StorageRecord:
    paths: tuple[ModelStorage, ...]
    # model path → why it could not be looked at: "no-permission" (run as the engine's user
    # or root), "not-found" (the path lives in the engine's own mount namespace)
    unread: dict[str, str] = field(default_factory=dict)


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


def block_device_of(host: Host, device: str,
                    missing: dict[str, str] | None = None) -> tuple[str | None, bool | None, bool]:
    """``8:1`` → (``sda``, rotational, virtual); (None, None, False) for virtual filesystems
    (major 0). A link or flag that cannot be read leaves its reason in ``missing``.

    ``/sys/dev/block/MAJ:MIN`` links to ``…/block/sda/sda1`` for a partition, or to
    ``…/nvme0n1/nvme0n1p1`` (no ``block`` component) or ``…/block/dm-0``. Only whole disks
    have ``/sys/block/<disk>/queue``: try the last component, then its parent.
    """
    missing = {} if missing is None else missing
    if device.startswith("0:"):
        return None, None, False
    try:
        target = host.read_link(f"/sys/dev/block/{device}")
    except HostReadError as exc:
        missing["block_device"] = missing["rotational"] = exc.reason.value
        return None, None, False
    parts = [p for p in target.split("/") if p and p != ".."]
    failed: Reason | None = None
    for disk in reversed(parts[-2:]):
        try:
            flag = host.read_text(f"/sys/block/{disk}/queue/rotational").strip()
        except HostReadError as exc:
            failed = failed or (exc.reason if exc.reason != Reason.NOT_FOUND else None)
            continue
        return disk, flag == "1", _virtual(host, disk, parts)
    missing["rotational"] = (failed or Reason.NOT_FOUND).value
    last = parts[-1] if parts else None
    return last, None, last is not None and _virtual(host, last, parts)


def _virtual(host: Host, disk: str, device_path: list[str]) -> bool:
    """Whether ``disk`` is a hypervisor's: its driver, its place in the device tree
    (``…/virtio1/block/vda``, ``…/vbd-51712/block/xvda``, ``…/VMBUS:00/…``), its name, or
    the SCSI vendor an emulated or cloud disk reports."""
    if disk.startswith(VIRTUAL_NAMES) or any(
            p.startswith(("virtio", "vbd-", "VMBUS")) for p in device_path):
        return True
    try:
        driver = host.read_link(f"/sys/block/{disk}/device/driver").rstrip("/").rsplit("/", 1)[-1]
        if driver in VIRTUAL_DRIVERS:
            return True
    except HostReadError:
        pass  # no device link (dm-0, md0) or a recording without it: judged by the rest
    try:
        vendor = host.read_text(f"/sys/block/{disk}/device/vendor").strip()
    except HostReadError:
        return False
    return vendor.startswith(VIRTUAL_VENDORS)


def _weights(host: Host, path: str, is_dir: bool) -> tuple[dict[str, int], str | None]:
    """The weight files and their sizes, or ({}, reason) when the folder cannot be listed."""
    folder, only = (path, None) if is_dir else (os.path.dirname(path), os.path.basename(path))
    try:
        files = host.list_files(folder)
    except HostReadError as exc:
        return {}, exc.reason.value
    return {
        os.path.join(folder, name): size for name, size in sorted(files.items())
        if (only is None or name == only) and name.endswith(WEIGHT_SUFFIXES)
    }, None


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
    missing: dict[str, str] = {}
    if fs_type is None:
        missing["fs_type"] = missing["mount_point"] = "not-found"  # no mount holds it
    disk, rotational, virtual = block_device_of(host, info.device, missing)
    weights, unlisted = _weights(host, path, info.is_dir)
    read, reason = {}, None
    if unlisted is not None:
        missing["weight_files"] = missing["weights_bytes"] = unlisted
        reason = f"the weight files could not be listed ({unlisted.replace('-', ' ')})"
    elif options.level < Level.STANDARD:
        reason = NOT_READ_AT_QUICK
    elif not weights:
        reason = lazy("no weight files (*.safetensors, *.gguf, *.bin, ...) found")
    else:
        try:
            read = _read(host, path, weights, options.level)
        except MeasurementError as exc:
            reason = str(exc)
    if reason is not None:
        missing.update(dict.fromkeys(READ_FIELDS, reason))
    return ModelStorage(
        path=path,
        source=source,
        fs_type=fs_type,
        mount_point=mount_point,
        network_fs=fs_type is not None and (fs_type in NETWORK_FS or fs_type.startswith("fuse")),
        block_device=disk,
        rotational=rotational,
        virtual_disk=virtual,
        fs_free_bytes=info.fs_free_bytes,
        weight_files=None if unlisted else len(weights),
        weights_bytes=None if unlisted else sum(weights.values()),
        read_mbps=round(read["read_mbps"], 1) if read else None,
        read_bytes=read.get("bytes_read"),
        read_method=read.get("method"),
        read_reason=reason,
        read_seconds=round(read["seconds"], 2) if read else None,
        read_stopped_by=read.get("stopped_by"),
        missing=missing,
    )


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> StorageRecord:
    paths = _model_paths(host, options)
    if not paths:
        raise Skip(t("no --model-dir given and no engine process with a local model path: "
                     "pass --model-dir DIR to judge the disk the weights are on"))
    mountinfo = host.read_text("/proc/self/mountinfo")
    rows, unread = [], {}
    for path, source in paths:
        try:
            rows.append(_storage(host, options, mountinfo, path, source))
        except HostReadError as exc:
            if source == "--model-dir":
                raise  # the user named it: a path we cannot read is an error, not a skip
            # an engine's path may live in its own mount namespace (a container), or in a
            # home this user cannot enter: said, not judged
            unread[f"{path} ({source})"] = exc.reason.value
    return StorageRecord(paths=tuple(rows), unread=unread)


def summary(record: StorageRecord) -> str:
    """One line for people: each model path's disk and read rate, what ended the read, and
    why a value or a path could not be read."""
    parts = []
    for p in record.paths:
        if p.read_mbps is None:
            # a sentence marked with lazy() (NOT_READ_AT_QUICK) reads in the scan's language
            speed = translated(why(p.read_reason)) if p.read_reason else t("not read")
        else:
            stop = {"max_seconds": t("stopped by time"), "max_bytes": t("stopped by size")}.get(
                p.read_stopped_by or "", t("to the end"))
            speed = t("{rate} MB/s ({mb} MB, {stop})", rate=number(p.read_mbps, ".1f"),
                      mb=number((p.read_bytes or 0) / 1e6, ".0f"), stop=stop)
        if p.rotational is None:
            kind = why(p.missing["rotational"]) if "rotational" in p.missing else t("no block device")
        else:
            kind = t("rotational") if p.rotational else t("solid-state")
        if p.virtual_disk:
            kind = (t("virtual disk, flagged {kind}", kind=kind) if p.rotational is not None
                    else t("virtual disk"))
        fs = text(p.fs_type, p.missing.get("fs_type"))
        if p.block_device is None and "block_device" in p.missing:  # its sysfs link unread
            disk = t("{fs}, disk {why}", fs=fs, why=why(p.missing["block_device"]))
        else:
            disk = t("{fs} on {device} ({kind})", fs=fs, device=p.block_device or "-", kind=kind)
        weights = (t("weights {why}", why=why(p.missing.get("weights_bytes")))
                   if p.weights_bytes is None
                   else t("{gb} GB weights", gb=number(p.weights_bytes / 1e9, ".1f")))
        parts.append(t("{path}: {disk}, {weights}, {speed}", path=p.path, disk=disk,
                       weights=weights, speed=speed))
    parts += [f"{path}: {why(reason)}" for path, reason in record.unread.items()]
    return t("; ").join(parts)
