"""gpu.fabric: the NVSwitch fabric of an HGX/DGX host: each GPU's fabric state, the fabric
manager, the GPUs' NVLinks.

On a host whose GPUs talk through NVSwitches, a GPU takes no CUDA work until the fabric
manager has programmed the switches and the GPU has registered with the fabric; until then
every CUDA call fails with "CUDA error 802: system not yet initialized"
(cudaErrorSystemNotReady).

Sources:
* the PCI bus for NVSwitches: ``/sys/bus/pci/devices/*/{vendor,class}`` = 0x10de, 0x0680xx
  (``lspci -d 10de: -nn`` shows them as "Bridge [0680]");
* NVML ``nvmlDeviceGetGpuFabricInfoV`` (R550; ``nvmlDeviceGetGpuFabricInfo`` on R525-R535):
  the GPU's state (nvmlGpuFabricState_t: NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2,
  COMPLETED 3) and status (the nvmlReturn_t of its registration; 0 is success). A driver
  without the call gives "not-supported", and the state is then not judged;
  The same structure gives the cluster UUID, the clique id and (v2) the health mask,
  decoded in probes/helpers/fabric_domain.py;
* ``nvmlDeviceGetNvLinkState`` per link (1 = up), up to the device's own link count
  (``nvmlDeviceGetFieldValues`` NVML_FI_DEV_NVLINK_LINK_COUNT), else from link 0 up to the
  binding's bound (NVML_NVLINK_MAX_LINKS: 18 before nvidia-ml-py 13, 36 since), stopping at
  the first link that does not answer (probes/helpers/nvlinks.py): a GB200 has 18 and
  answers INVALID_ARGUMENT for 18-35
  (NVIDIA/TensorRT-LLM#17060, where a loop that caught only NOT_SUPPORTED broke MNNVL
  detection on healthy NVL72 nodes);
* the process table for ``nv-fabricmanager``; when it is not there,
  ``systemctl is-active nvidia-fabricmanager`` for the service's state. Judged only where an
  NVSwitch is on this host's PCI bus: a GB200 compute tray has its GPUs on the fabric but
  the switches, and their manager, in the switch trays (leptonai/gpud#1106);
* the IMEX domain (``/etc/nvidia-imex/nodes_config.cfg``, ``nvidia-imex``,
  ``/dev/nvidia-caps-imex-channels/channel0``), read where a GPU reports a fabric cluster.

A host with no NVSwitch on its PCI bus, and no GPU reporting a fabric state, is skipped.
The manager is judged only where the process table is the host's (pid 1 is init): a
container sees none of the host's daemons. No root needed. Manual equivalent:
``nvidia-smi -q -d FABRIC``, ``systemctl status nvidia-fabricmanager``,
``nvidia-smi nvlink -s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError
from doctor.i18n import t
from probes.helpers.gpu_common import Reader, gpu_count, nvidia_pci
from probes.helpers.fabric_domain import (IMEX_DAEMON, cluster_uuid, health_problems,
                                          imex_channel0, imex_nodes)
from probes.helpers.nvlinks import link_states
from probes.helpers.processes import process_table

# nvmlGpuFabricState_t (nvml.h)
FABRIC_STATES = {0: "not-supported", 1: "not-started", 2: "in-progress", 3: "completed"}
NVML_SUCCESS = 0
MANAGER = "nv-fabricmanager"  # its comm is cut to 15 characters: "nv-fabricmanage"
SERVICE = "nvidia-fabricmanager"
INIT_NAMES = ("systemd", "init")


@dataclass(frozen=True, slots=True)
class GpuFabric:
    index: int
    state: str | None  # not-supported | not-started | in-progress | completed
    status: int | None  # nvmlReturn_t of the GPU's fabric registration: 0 success
    clique_id: int | None  # the NVLink domain's clique the GPU joined
    cluster_uuid: str | None  # the NVLink domain (rack) the GPU joined; None: all zeros
    health_mask: int | None  # nvmlGpuFabricInfo_v2_t.healthMask; None before R550
    health: tuple[str, ...] | None  # the mask's bad fields (fabric_domain.HEALTH_FIELDS)
    nvlinks_up: int | None  # nvmlDeviceGetNvLinkState == 1; None: no NVLink answered
    nvlinks_total: int | None  # links that answered
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class FabricRecord:
    nvswitches: int  # NVSwitches on the PCI bus (0 when only the GPUs' state tells)
    nvswitch_source: str  # what said this host has a fabric
    gpus: tuple[GpuFabric, ...]
    manager_running: bool | None  # nv-fabricmanager in the process table
    manager_pid: int | None
    manager_reason: str | None  # why manager_running is None
    service_state: str | None  # systemctl is-active nvidia-fabricmanager, when not running
    clusters: int  # distinct cluster UUIDs among the GPUs
    multi_node: bool  # GPUs in a cluster and no NVSwitch here: the domain spans trays
    imex_nodes: int | None  # nodes in /etc/nvidia-imex/nodes_config.cfg; None: not read
    imex_nodes_reason: str | None
    imex_channel0: bool | None  # /dev/nvidia-caps-imex-channels/channel0 exists
    imex_channel_reason: str | None
    imex_running: bool | None  # nvidia-imex in the process table; None: not judged


def read_gpu(host: Host, index: int) -> GpuFabric:
    r = Reader(host)
    info = r.mapping("state", "nvmlDeviceGetGpuFabricInfoV", index)
    if r.missing.get("state") == "not-found":  # a driver (or binding) before the call
        r.missing["state"] = "not-supported"
    code = r.item("state", info, "state")
    status = r.item("status", info, "status")
    up, total = link_states(host, index)
    mask = r.item("health_mask", info, "healthMask") if info and "healthMask" in info else None
    return GpuFabric(index=index,
                     state=None if code is None else FABRIC_STATES.get(code, f"state {code}"),
                     status=status, clique_id=r.item("clique_id", info, "cliqueId"),
                     cluster_uuid=cluster_uuid((info or {}).get("clusterUuid")),
                     health_mask=mask, health=health_problems(mask),
                     nvlinks_up=up, nvlinks_total=total, missing=r.missing)


def _daemon(host: Host, name: str) -> tuple[bool | None, int | None, str | None]:
    table = process_table(host)
    for p in table:
        if p.comm == name[:15] or p.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1] == name:
            return True, p.pid, None
    init = next((p.comm for p in table if p.pid == 1), None)
    if init not in INIT_NAMES:
        return None, None, (f"pid 1 is {init or 'not visible'}, not init: another pid "
                            "namespace (a container) does not show the host's daemons")
    return False, None, None


def _service(host: Host) -> str | None:
    try:
        out = host.run(["systemctl", "is-active", SERVICE], timeout_s=5.0)
    except HostReadError:
        return None
    state = out.stdout.strip().splitlines()[0][:40] if out.stdout.strip() else ""
    return state or None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> FabricRecord:
    count = gpu_count(host)
    pci = nvidia_pci(host)
    gpus = tuple(read_gpu(host, i) for i in range(count))
    on_fabric = [g.index for g in gpus if g.state in ("not-started", "in-progress", "completed")]
    if pci.switches:
        ids = sorted({f"10de:{f.device_id:04x}" for f in pci.switches})
        source = f"/sys/bus/pci/devices: {len(pci.switches)} NVSwitch ({', '.join(ids)})"
    elif on_fabric:
        source = (f"NVML: GPU {','.join(map(str, on_fabric))} report a fabric state"
                  + (f" ({pci.reason})" if pci.reason else ""))
    elif pci.reason:
        raise Skip(t("no GPU reports an NVSwitch fabric, and the PCI bus was not read ({why})",
                     why=pci.reason))
    else:
        raise Skip(t("no NVSwitch on the PCI bus (`lspci -d 10de:` lists no bridge of class 0680) "
                     "and no GPU reports a fabric state"))
    # the PCI bus read and no switch on it: the manager is not this host's to run
    tray = not pci.switches and not pci.reason
    if not tray:
        running, pid, reason = _daemon(host, MANAGER)
    else:
        running, pid, reason = None, None, ("no NVSwitch on this host's PCI bus: the fabric is "
                                            "managed from the switch trays (GB200 NVL72)")
    clusters = {g.cluster_uuid for g in gpus if g.cluster_uuid}
    # GPUs in a cluster with no switch of their own: the NVLink domain spans trays, and
    # memory shared across them goes through IMEX
    multi_node = bool(clusters) and tray
    nodes, nodes_reason = imex_nodes(host) if multi_node else (None, None)
    channel, channel_reason = imex_channel0(host) if multi_node else (None, None)
    imex = _daemon(host, IMEX_DAEMON)[0] if multi_node else None
    return FabricRecord(nvswitches=len(pci.switches), nvswitch_source=source, gpus=gpus,
                        manager_running=running, manager_pid=pid, manager_reason=reason,
                        service_state=_service(host) if running is False else None,
                        clusters=len(clusters), multi_node=multi_node,
                        imex_nodes=nodes, imex_nodes_reason=nodes_reason,
                        imex_channel0=channel, imex_channel_reason=channel_reason,
                        imex_running=imex)


def summary(record: FabricRecord) -> str:
    states = sorted({g.state or "?" for g in record.gpus})
    manager = {True: f"{MANAGER} pid {record.manager_pid}",
               False: t("{manager} not running", manager=MANAGER),
               None: t("{manager} not judged", manager=MANAGER)}[record.manager_running]
    return t("{n} NVSwitch; fabric {states}; {manager}", n=record.nvswitches,
             states="/".join(states), manager=manager)
