"""npu.device_files: the Ascend device nodes a process needs to use an NPU, as this scan sees
/dev (inside a container, the container's /dev).

A process reaches an Ascend chip through ``/dev/davinci<N>`` (the chip), and through three
nodes every chip shares: ``/dev/davinci_manager``, ``/dev/devmm_svm`` (the device memory
manager) and ``/dev/hisi_hdc`` (host-device communication). Huawei's ``docker run`` for
MindIE without the Ascend Docker Runtime passes all of them (``--device=/dev/davinci0
--device=/dev/davinci_manager --device=/dev/devmm_svm --device=/dev/hisi_hdc``; mind-cluster
docs, inference_service_fault_recovery). A container given only the chip loses the rest
without a word until npu-smi or the runtime fails. Source: stat of each node (a recording keeps
the stat, docs/recorded-host.md); the chips from npu.devices' table (``npu-smi info``), else
/dev/davinci0-15. Whether a node can be opened (its mode against the user, the device cgroup)
is not read: a node present but refused shows as npu-smi's own error in npu.devices. Manual
equivalent: ``ls -l /dev/davinci* /dev/devmm_svm /dev/hisi_hdc``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError, Reason
from probes.helpers.gpu_common import reason_of
from probes.helpers.npu_read import CommandFailed, absent_reason, overview
from probes.helpers.npu_smi import TableError

VENDOR = "huawei"
SHARED = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER = "/usr/local/Ascend/driver/version.info"
GUESS = 16  # chips looked for when npu-smi could not say which there are


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str  # "/dev/davinci0", "/dev/devmm_svm"
    role: str  # "chip" (one chip's node) or "shared" (every chip needs it)
    present: bool | None  # None: stat refused (then reason)
    reason: str | None  # the seam's reason where stat failed: not-found, no-permission


@dataclass(frozen=True, slots=True)
class NpuDeviceFilesRecord:
    vendor: str
    nodes: tuple[DeviceNode, ...]
    chips_from: str  # "npu-smi info" or why the chips were guessed from /dev


def _node(host: Host, path: str, role: str) -> DeviceNode:
    try:
        host.stat(path)
        return DeviceNode(path, role, True, None)
    except HostReadError as exc:
        return DeviceNode(path, role, False if exc.reason == Reason.NOT_FOUND else None,
                          reason_of(exc))


def _driver_installed(host: Host) -> bool:
    try:
        host.read_text(DRIVER)
        return True
    except HostReadError:
        return False


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuDeviceFilesRecord:
    try:
        ids = sorted({c.phy_id if c.phy_id is not None else c.npu_id for c in overview(host).chips})
        chips_from = "npu-smi info"
        chips = [_node(host, f"/dev/davinci{i}", "chip") for i in ids]
    except (Skip, CommandFailed, TableError, HostReadError) as exc:
        chips_from = t("npu-smi info did not list the chips ({why}): /dev/davinci0-{last} looked for",
                       why=str(exc)[:120], last=GUESS - 1)
        chips = [n for n in (_node(host, f"/dev/davinci{i}", "chip") for i in range(GUESS))
                 if n.present is not False]
    shared = [_node(host, path, "shared") for path in SHARED]
    if not any(n.present for n in chips + shared) and not _driver_installed(host):
        raise Skip(absent_reason(host, t("no Ascend driver: no /dev/davinci* node and no {path}",
                                         path=DRIVER)))
    return NpuDeviceFilesRecord(VENDOR, tuple(chips + shared), chips_from)


def summary(record: NpuDeviceFilesRecord) -> str:
    absent = [n.path for n in record.nodes if n.present is False]
    if not absent:
        return t("{n} Ascend device nodes present", n=len(record.nodes))
    return t("missing: {paths}", paths=", ".join(absent))
