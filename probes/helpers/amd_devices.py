"""The device files and links ROCm needs, read without the ROCm library: the DRM render nodes,
whether an engine may open them (its groups), and whether the GPUs reach each other over xGMI.

* ``/dev/dri/renderD128``… (stat): one per GPU (per logical GPU in CPX). ROCm's runtime opens
  ``/dev/kfd`` and each GPU's render node; ROCm's Docker guide passes both
  (``--device=/dev/kfd --device=/dev/dri``), and a container given only the first sees no GPU.
* ``/proc/<pid>/status`` (``Uid:``, ``Gid:``, ``Groups:``) against ``/etc/group``'s ``render``
  and ``video``: ROCm's install guide puts the user who runs GPU work in both
  (``usermod -a -G render,video``); the nodes are ``crw-rw---- root render`` on current
  distributions. Whether the node's own group is the one /etc/group names is not read (the
  seam's stat gives no owner): the rules judge the groups only together with an engine that
  holds no GPU device open.
* ``/sys/class/kfd/kfd/topology/nodes/<n>/{io_links,p2p_links}/<m>/properties``: a link's
  ``type`` (kfd_crat.h: 2 PCI Express, 11 xGMI) and ``node_to``. GPUs with an xGMI link to
  another GPU node talk over Infinity Fabric; without one they go over PCIe, where RCCL needs
  ``HSA_FORCE_FINE_GRAIN_PCIE=1`` for peer-to-peer (RCCL usage tips).

Manual equivalent: ``ls -l /dev/dri``, ``id <user>``, ``grep -h type
/sys/class/kfd/kfd/topology/nodes/*/io_links/*/properties``, ``amd-smi topology``.
"""

from __future__ import annotations

from doctor.seam.host import Host, HostReadError, Reason
from probes.helpers.gpu_common import reason_of

RENDER_FIRST, RENDER_LAST = 128, 255  # the DRM render minors (drm_minor's render range)
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
XGMI = 11  # CRAT_IOLINK_TYPE_XGMI (drivers/gpu/drm/amd/amdkfd/kfd_crat.h)
MAX_LINKS = 64  # of one node, per kind
GPU_GROUPS = ("render", "video")


def render_nodes(host: Host, missing: dict[str, str]) -> int | None:
    """How many ``/dev/dri/renderD<N>`` stat; None (and why) when stat was refused."""
    found = 0
    for minor in range(RENDER_FIRST, RENDER_LAST + 1):
        try:
            host.stat(f"/dev/dri/renderD{minor}")
        except HostReadError as exc:
            if exc.reason != Reason.NOT_FOUND:
                missing["render_nodes"] = reason_of(exc)
                return None
            continue
        found += 1
    return found


def _properties(host: Host, path: str) -> dict[str, str]:
    try:
        text = host.read_text(path)
    except HostReadError:
        return {}
    return dict(line.partition(" ")[::2] for line in text.splitlines()[:64] if " " in line)


def xgmi_peer_links(host: Host, gpu_nodes: list[str], missing: dict[str, str]) -> int | None:
    """Links of type xGMI from a GPU node to another GPU node (each direction counted);
    None where no GPU node's links could be listed."""
    listed, count = False, 0
    for node in gpu_nodes:
        for kind in ("io_links", "p2p_links"):
            try:
                links = host.list_dirs(f"{KFD_NODES}/{node}/{kind}")
            except HostReadError as exc:
                if kind == "io_links":
                    missing["xgmi_peer_links"] = reason_of(exc)
                continue
            listed = True
            for link in links[:MAX_LINKS]:
                props = _properties(host, f"{KFD_NODES}/{node}/{kind}/{link}/properties")
                count += props.get("type", "").strip() == str(XGMI) and props.get("node_to", "").strip() in gpu_nodes
    if listed:
        missing.pop("xgmi_peer_links", None)
    return count if listed else None


def _group_ids(host: Host) -> set[str] | None:
    try:
        text = host.read_text("/etc/group")
    except HostReadError:
        return None
    ids = set()
    for line in text.splitlines()[:10000]:
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] in GPU_GROUPS and fields[2].isdigit():
            ids.add(fields[2])
    return ids or None


def in_gpu_groups(host: Host, pid: int) -> tuple[bool | None, int | None]:
    """Whether process ``pid`` is root or in the render or video group (its primary or a
    supplementary one), and its uid; None where its status or /etc/group cannot say."""
    try:
        status = host.read_text(f"/proc/{pid}/status")
    except HostReadError:
        return None, None
    fields = {k: v.split() for k, _, v in (line.partition(":") for line in status.splitlines()[:100])}
    uid_f = fields.get("Uid", [])
    uid = int(uid_f[1]) if len(uid_f) > 1 and uid_f[1].isdigit() else None  # effective
    if uid == 0:
        return True, uid
    groups = host.memo("gpu group ids", lambda: _group_ids(host))
    if uid is None or groups is None:
        return None, uid
    gid_f = fields.get("Gid", [])
    mine = set(fields.get("Groups", [])) | ({gid_f[1]} if len(gid_f) > 1 else set())
    return bool(mine & groups), uid
