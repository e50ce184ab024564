"""gpu.numa: each engine's CPUs and memory against its GPUs' NUMA node.

Sources: the engine's GPUs from NVML's process list (``nvmlDeviceGetComputeRunningProcesses``:
the GPUs where the engine or one of its workers holds a context, as gpu.topology and
gpu.sharing find them); each GPU's node from ``/sys/bus/pci/devices/<bdf>/numa_node`` (the bus
id from ``nvmlDeviceGetPciInfo``), else ``nvmlDeviceGetNumaNodeId`` (gpu.topology's
placements); the nodes' CPUs (``/sys/devices/system/node/node<N>/cpulist``); the engine's
``Cpus_allowed_list`` and ``Mems_allowed_list`` (``/proc/<pid>/status``: its workers inherit
them); where its memory sits: ``/proc/<pid>/numa_maps`` of the engine and of its processes
holding a GPU, ``N<node>=<pages>`` x ``kernelpagesize_kB`` summed per node, in bytes. Root is
needed for another user's numa_maps. Manual equivalent: ``nvidia-smi topo -m`` ("CPU Affinity",
"NUMA Affinity"), ``taskset -cp <pid>``, ``numastat -p <pid>``.

Why: each GPU hangs off one socket. Threads on the other socket, or pinned buffers allocated
there, send every host-device copy and kernel launch over the inter-socket link.

What is judged (checks/gpu_placement.toml): an engine whose GPUs all sit on one node, with
none of its allowed CPUs on that node (``cpus_elsewhere``) or most of its resident memory on
another (``memory_share_gpu_node``). An engine allowed every CPU is not misplaced by its CPUs
(the scheduler may run it anywhere; where its memory landed says whether it ran far).

A tensor-parallel group over both sockets is recorded with a note and not judged: no one node
is near all its GPUs, so binding the engine to one socket makes the other socket's copies
remote instead; the fix is the layout (one engine per socket), which pcie-topology-shared-path
raises for the cross-socket pairs. A host with one node is skipped: nothing can be misplaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host
from doctor.i18n import t
from probes.helpers import gpu_topology as topology
from probes.helpers.gpu_common import Reader, gpu_count, pci_bdf
from probes.helpers.numa_nodes import (
    MemoryPlacement, format_cpulist, memory_placement, node_map, pci_numa_node, allowed)
from probes.helpers.processes import engine_processes, lasting_name

MAX_HOLDERS = 16  # numa_maps read per engine: its own and its GPU-holding workers'


@dataclass(frozen=True, slots=True)
class EngineNuma:
    pid: int
    engine: str  # vllm, sglang, …
    gpus: tuple[int, ...]  # NVML indexes where it or a worker holds a context
    gpu_nodes: tuple[int | None, ...]  # each GPU's node, in the order of gpus
    gpu_node: int | None  # the node all its GPUs sit on; None when several or unknown
    cpus_allowed: str | None  # Cpus_allowed_list: "96-191,288-383"
    cpu_nodes: tuple[int, ...]  # the nodes holding any allowed CPU
    all_cpus: bool  # allowed every CPU of the host
    mems_allowed: str | None  # Mems_allowed_list: "0-1"
    cpus_elsewhere: bool  # its GPUs on one node and no allowed CPU there
    memory_bytes: int | None  # resident, summed over numa_maps of its processes
    memory_node: int | None  # the node holding the most of it
    memory_share_gpu_node: float | None  # share of memory_bytes on gpu_node, 0..1
    memory_partial: bool  # numa_maps longer than read: the sums are a lower bound
    note: str | None  # why it is not judged (GPUs on several nodes, no GPU known)
    missing: dict[str, str]
    name: str = ""  # processes.lasting_name: the finding's key (a pid is not one)


@dataclass(frozen=True, slots=True)
class NumaRecord:
    nodes: tuple[int, ...]
    node_cpus: tuple[str, ...]  # each node's cpulist, in the order of nodes
    engines: tuple[EngineNuma, ...]


def _gpu_nodes(host: Host, topo: topology.TopologyRecord, count: int,
               missing: dict[str, str]) -> dict[int, int | None]:
    """GPU index -> node: sysfs for the GPU's bus id, else NVML's answer."""
    nvml_nodes = {g.index: g.numa_node for g in topo.gpus}
    out: dict[int, int | None] = {}
    for i in range(count):
        r = Reader(host)
        info = r.mapping("bus_id", "nvmlDeviceGetPciInfo", i)
        bus = r.item("bus_id", info, "busId", str) if info else None
        bdf = pci_bdf(bus)
        node, why = pci_numa_node(host, bdf) if bdf else (None, r.missing.get("bus_id", "failed"))
        if node is None:
            node = nvml_nodes.get(i)
            if node is None:
                missing[f"gpu{i}.numa_node"] = why or "not-found"
        out[i] = node
    return out


def _memory(host: Host, pids: list[int], missing: dict[str, str]) -> MemoryPlacement:
    total: dict[int, int] = {}
    partial, lines, read = False, 0, 0
    for pid in pids[:MAX_HOLDERS]:
        placed = memory_placement(host, pid)
        if placed.reason:
            missing.setdefault("memory_bytes", placed.reason)
            continue
        read += 1
        partial = partial or placed.truncated
        lines += placed.lines
        for node, size in placed.bytes_by_node.items():
            total[node] = total.get(node, 0) + size
    if read:
        missing.pop("memory_bytes", None)
    return MemoryPlacement(total, lines, partial, None if read else missing.get("memory_bytes"))


def _engine(host: Host, proc, gpus: tuple[int, ...], nodes_of_gpu: dict[int, int | None],
            holders: list[int], host_cpus: frozenset[int], nmap) -> EngineNuma:
    missing: dict[str, str] = {}
    gpu_nodes = tuple(nodes_of_gpu.get(i) for i in gpus)
    known = {n for n in gpu_nodes if n is not None}
    gpu_node = known.pop() if len(known) == 1 and None not in gpu_nodes else None
    note = None
    if not gpus:
        note = "NVML lists none of its processes on a GPU: its GPUs are not known"
    elif len(set(gpu_nodes) - {None}) > 1:
        note = (f"its GPUs sit on nodes {format_cpulist({n for n in gpu_nodes if n is not None})}"
                ": no one node is near all of them (pcie-topology-shared-path judges the "
                "layout)")
    elif gpu_node is None:
        note = "its GPUs' NUMA node is not known"
    where = allowed(host, proc.pid)
    if where.reason:
        missing["cpus_allowed"] = where.reason
    cpu_nodes = tuple(sorted(nmap.nodes_of(where.cpus))) if where.cpus is not None else ()
    memory = _memory(host, [proc.pid] + [p for p in holders if p != proc.pid], missing)
    size = sum(memory.bytes_by_node.values()) if memory.reason is None else None
    top = max(memory.bytes_by_node.items(), key=lambda kv: kv[1])[0] if size else None
    share = None
    if size and gpu_node is not None:
        share = round(memory.bytes_by_node.get(gpu_node, 0) / size, 3)
    elif size == 0:
        missing["memory_share_gpu_node"] = "not-found"  # numa_maps shows no resident page
    return EngineNuma(
        pid=proc.pid, name=lasting_name(proc), engine=proc.engine or "?", gpus=gpus, gpu_nodes=gpu_nodes,
        gpu_node=gpu_node,
        cpus_allowed=None if where.cpus is None else format_cpulist(where.cpus),
        cpu_nodes=cpu_nodes, all_cpus=where.cpus is not None and host_cpus <= where.cpus,
        mems_allowed=None if where.mems is None else format_cpulist(where.mems),
        cpus_elsewhere=gpu_node is not None and where.cpus is not None
        and gpu_node not in cpu_nodes,
        memory_bytes=size, memory_node=top, memory_share_gpu_node=share,
        memory_partial=memory.truncated, note=note, missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NumaRecord:
    count = gpu_count(host)  # first: no GPU (or NVML failing) says so before the nodes do
    nmap = node_map(host)
    if nmap.reason:
        raise Skip(nmap.reason)
    if len(nmap.cpus) < 2:
        raise Skip(t("one NUMA node: the engine cannot sit on a node away from its GPUs"))
    topo = topology.topology_of(host, inputs)  # gpu.topology's record, else read here
    missing: dict[str, str] = {}
    nodes_of_gpu = _gpu_nodes(host, topo, count, missing)
    holders = topology.gpu_pids(host, count)
    engines = engine_processes(host)
    pids = {p.pid for p in engines}
    host_cpus = frozenset().union(*nmap.cpus.values())
    out = []
    for proc in engines:
        line = topology.lineage(host, proc.pid)
        if (line - {proc.pid}) & pids:
            continue  # a worker of an engine listed on its own
        held = {i: [pid for pid in ps if proc.pid in topology.lineage(host, pid)]
                for i, ps in holders.items()}
        gpus = tuple(i for i, ps in held.items() if ps)
        workers = sorted({pid for ps in held.values() for pid in ps})
        record = _engine(host, proc, gpus, nodes_of_gpu, workers, host_cpus, nmap)
        record.missing.update(missing)
        out.append(record)
    return NumaRecord(nodes=tuple(nmap.cpus),
                      node_cpus=tuple(format_cpulist(c) for c in nmap.cpus.values()),
                      engines=tuple(out))


def summary(record: NumaRecord) -> str:
    parts = []
    for e in record.engines:
        gpus = f"GPU {','.join(map(str, e.gpus))}" if e.gpus else t("no GPU known")
        node = t(" on node {node}", node=e.gpu_node) if e.gpu_node is not None else ""
        cpus = (t("CPUs on node {nodes}", nodes=",".join(map(str, e.cpu_nodes))) if e.cpu_nodes
                else t("CPUs ?"))
        mem = (t(", {share:.0%} of memory near its GPUs", share=e.memory_share_gpu_node)
               if e.memory_share_gpu_node is not None else "")
        parts.append(t("{engine} pid {pid}: {gpus}{node}, {cpus}{mem}", engine=e.engine, pid=e.pid,
                       gpus=gpus, node=node, cpus=cpus, mem=mem))
    return t("{n} NUMA nodes; ", n=len(record.nodes)) + (t("; ").join(parts) or t("no engine"))
