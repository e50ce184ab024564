"""A multi-node NVLink domain (GB200/GB300 NVL72): the GPU's fabric health mask, cluster
UUID, and the IMEX daemon and channels that CUDA needs to share memory across trays.

Sources:
* ``healthMask`` of ``nvmlGpuFabricInfo_v2_t`` (R550+, nvml.h; the same constants in
  nvidia-ml-py 13.615's pynvml.py, ``NVML_GPU_FABRIC_HEALTH_MASK_*``): fields of 2 bits
  (incorrect configuration: 4) at the shifts below, each 0 = not supported, 1 = true,
  2 = false, except the configuration field (1 = none, 2-8 = what is wrong) and the global
  fabric manager's state (1 connected, 2 disconnected);
* ``/etc/nvidia-imex/nodes_config.cfg``: one IP a line, the nodes of the IMEX domain
  (NVIDIA IMEX guide, "Configuration"); ``nvidia-imex`` in the process table;
* ``/dev/nvidia-caps-imex-channels/channel0``: the default IMEX channel, created by the
  driver with ``NVreg_CreateImexChannel0=1`` or ``nvidia-modprobe -i 0:1``; without a
  channel a process cannot import another node's fabric memory (cuMemImportFromShareableHandle
  fails, NCCL's NVLS/MNNVL are not used).
"""

from __future__ import annotations

import uuid

from doctor.seam.host import Host, HostReadError

# (name, shift, mask, the values that are a problem and what they say) from nvml.h
HEALTH_FIELDS: tuple[tuple[str, int, int, dict[int, str]], ...] = (
    ("degraded-bandwidth", 0, 0x3, {1: "degraded-bandwidth"}),
    ("route-recovery", 2, 0x3, {1: "route-recovery-in-progress"}),
    ("route-unhealthy", 4, 0x3, {1: "route-unhealthy"}),
    ("access-timeout-recovery", 6, 0x3, {1: "access-timeout-recovery"}),
    ("incorrect-configuration", 8, 0xF, {
        2: "config-incorrect-sysguid",
        3: "config-incorrect-chassis-sn",
        4: "config-no-partition",
        5: "config-insufficient-nvlinks",
        6: "config-incompatible-gpu-fw",
        7: "config-invalid-location",
        8: "config-gpu-state-invalid"}),
    ("gfm-state", 14, 0x3, {2: "gfm-disconnected"}),  # the global fabric manager
)
IMEX_NODES = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"
IMEX_DAEMON = "nvidia-imex"


def health_problems(mask: int | None) -> tuple[str, ...] | None:
    """The health mask's bad fields, by NVML's names; () when none; None when no mask."""
    if mask is None:
        return None
    return tuple(bad[(mask >> shift) & width]
                 for _, shift, width, bad in HEALTH_FIELDS if (mask >> shift) & width in bad)


def cluster_uuid(raw: object) -> str | None:
    """The 16 bytes of clusterUuid as a UUID; None for all zeros (no cluster) or a bad shape."""
    if not isinstance(raw, list) or len(raw) != 16:
        return None
    if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw):
        return None
    if not any(raw):
        return None
    return str(uuid.UUID(bytes=bytes(raw)))


def imex_nodes(host: Host) -> tuple[int | None, str | None]:
    """Nodes listed in the IMEX config (non-blank, non-comment lines), or None and why."""
    try:
        text = host.read_text(IMEX_NODES)
    except HostReadError as exc:
        return None, f"{IMEX_NODES}: {exc.reason}"
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()[:4096]]
    return sum(1 for ln in lines if ln), None


def imex_channel0(host: Host) -> tuple[bool | None, str | None]:
    """Whether the default IMEX channel's device file exists; None when it was not read."""
    try:
        host.stat(f"{IMEX_CHANNELS}/channel0")
    except HostReadError as exc:
        if exc.reason == "not-found":
            return False, None
        return None, f"{IMEX_CHANNELS}/channel0: {exc.reason}"
    return True, None
