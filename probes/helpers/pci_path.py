"""How far apart two PCI functions are, named as ``nvidia-smi topo -m`` names it.

From the two functions' directories under ``/sys/devices`` (their paths are their places in
the PCIe tree: ``/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0/0000:18:00.0``, the host
bridge first, then each bridge down to the function) and their NUMA nodes:

* PIX: at most one bridge between each of them and their common upstream bridge (one PCIe
  switch, or two functions of one card);
* PXB: more bridges than that, all below one root port (several switches);
* PHB: below one host bridge, through it (different root ports of one PCIe root complex);
* NODE: different host bridges of one NUMA node;
* SYS: different NUMA nodes: across the inter-socket link (UPI / Infinity Fabric).

This is the legend nvidia-smi prints under ``topo -m`` and NCCL's path types (PATH_PIX ...
PATH_SYS in src/graph/topo.h), which NCCL_NET_GDR_LEVEL is written in. A function whose NUMA
node the firmware did not give (-1) is taken to be on the other's node only when neither has
one: a one-node host.
"""

from __future__ import annotations

LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first


def _parts(path: str) -> list[str]:
    """The path's components from the host bridge (``pci0000:16``) down."""
    parts = [p for p in path.split("/") if p]
    for i, p in enumerate(parts):
        if p.startswith("pci"):
            return parts[i:]
    return []


def level(dir_a: str, dir_b: str, node_a: int | None, node_b: int | None) -> str | None:
    """The path type between two functions; None when it cannot be told (a path outside
    the PCI tree, or one NUMA node known and the other not across host bridges)."""
    a, b = _parts(dir_a), _parts(dir_b)
    if len(a) < 2 or len(b) < 2:
        return None
    if a[0] != b[0]:  # different host bridges
        if node_a is None and node_b is None:
            return "NODE"
        if node_a is None or node_b is None:
            return None
        return "NODE" if node_a == node_b else "SYS"
    common = 0
    while common < min(len(a), len(b)) - 1 and a[common] == b[common]:
        common += 1
    if common == 1:  # only the host bridge is shared: through it, by two root ports
        return "PHB"
    # bridges from each function up to (not counting) the shared one
    bridges = max(len(a), len(b)) - common - 1
    return "PIX" if bridges <= 1 else "PXB"


def nearer(x: str | None, y: str | None) -> bool:
    """``x`` is a strictly nearer level than ``y`` (an unknown level is farthest)."""
    rank = {name: i for i, name in enumerate(LEVELS)}
    return rank.get(x or "", len(LEVELS)) < rank.get(y or "", len(LEVELS))
