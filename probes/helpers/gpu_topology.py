"""The GPUs' topology: how each pair is connected and which pairs must talk (gpu.topology's work).

Source: NVML ``nvmlDeviceGetTopologyCommonAncestor`` (PIX/PXB/PHB/NODE/SYS),
``nvmlDeviceGetP2PStatus`` (read and NVLink capability), ``nvmlDeviceGetNvLinkState``
(links up), ``nvmlDeviceGetNumaNodeId``, ``nvmlDeviceGetCpuAffinity`` (as CPU lists,
``cpu_list``); the engines' command lines (``--tensor-parallel-size``) from the process table.
probes/gpu/topology.py says which pairs must talk and why. Manual equivalent:
``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p rn``.

In a scan, gpu.topology reads this once and the runner hands its record to the probes that
name it in ``needs`` or ``after`` (``topology_of(host, inputs)``); the daemon hands it over
the same way. A probe run without it (on its own, or after a gpu.topology that did not end
ok) reads it here itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import Inputs
from doctor.seam.host import Host
from probes.helpers.gpu_common import Reader, gpu_count
from probes.helpers.lineage import lineage
from probes.helpers.nvlinks import link_states
from probes.helpers.processes import Process, engine_processes, flag_value

NAME = "gpu.topology"  # the probe whose record this is, in ProbeSpec.needs and after

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's names.
LEVELS = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlGpuP2PStatus_t
P2P_STATUS = {0: "ok", 1: "chipset-not-supported", 2: "gpu-not-supported",
              3: "topology-not-supported", 4: "disabled-by-regkey", 5: "not-supported",
              6: "unknown"}
P2P_READ, P2P_NVLINK = 0, 2  # nvmlGpuP2PCapsIndex_t (pass ints: the binding's READ is a tuple)
AFFINITY_WORDS = 16  # 64-bit words of CPU mask asked for: 1024 CPUs
TP_FLAGS = ("--tensor-parallel-size", "-tp", "--tp", "--tp-size", "--num-shard")


@dataclass(frozen=True, slots=True)
class GpuPlacement:
    index: int
    numa_node: int | None  # nvmlDeviceGetNumaNodeId
    cpu_affinity: str | None  # nvmlDeviceGetCpuAffinity as a CPU list: "0-55,112-167"
    nvlinks_up: int | None  # links in state up; None when the GPU has no NVLink
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class GpuPair:
    a: int
    b: int
    level: str | None  # PIX | PXB | PHB | NODE | SYS
    p2p_read: str | None  # "ok" or why not (nvmlGpuP2PStatus_t)
    nvlink: bool | None  # P2P over NVLink is possible (directly or through NVSwitch)
    must_talk: bool  # in one engine's tensor-parallel group, or no engine known
    shared_root_port: bool  # behind one CPU root port (PIX/PXB) and no working P2P
    crosses_sockets: bool  # SYS: through the inter-socket link (UPI / Infinity Fabric)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    gpus: tuple[GpuPlacement, ...]
    pairs: tuple[GpuPair, ...]
    talk_group: tuple[int, ...]  # the GPUs in some engine's tensor-parallel group
    # "engine vllm pid 1234 tensor parallel 4 on GPUs 4,5,6,7 (NVML's process list)"; one
    # clause per engine, "; "-separated | "no engine found: all pairs"
    talk_group_source: str


def cpu_list(words: list) -> str | None:
    """NVML's affinity mask (64-bit words, CPU 0 in bit 0 of word 0) as "0-3,8"."""
    cpus = [w * 64 + bit for w, word in enumerate(words) if isinstance(word, int)
            for bit in range(64) if word >> bit & 1]
    if not cpus:
        return None
    ranges: list[str] = []
    start = prev = cpus[0]
    for cpu in cpus[1:] + [-1]:  # -1 closes the last range
        if cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def _placement(host: Host, index: int) -> GpuPlacement:
    r = Reader(host)
    numa = r.integer("numa_node", "nvmlDeviceGetNumaNodeId", index)
    words = r.sequence("cpu_affinity", "nvmlDeviceGetCpuAffinity", index, AFFINITY_WORDS)
    return GpuPlacement(index=index, numa_node=numa,
                        cpu_affinity=cpu_list(words) if words else None,
                        nvlinks_up=link_states(host, index)[0], missing=r.missing)


def _pair(host: Host, a: int, b: int, must_talk: bool) -> GpuPair:
    r = Reader(host)
    code = r.integer("level", "nvmlDeviceGetTopologyCommonAncestor", a, b)
    read = r.integer("p2p_read", "nvmlDeviceGetP2PStatus", a, b, P2P_READ)
    nvlink = r.integer("nvlink", "nvmlDeviceGetP2PStatus", a, b, P2P_NVLINK)
    level = None if code is None else LEVELS.get(code, f"level {code}")
    p2p = None if read is None else P2P_STATUS.get(read, f"status {read}")
    return GpuPair(
        a=a, b=b, level=level, p2p_read=p2p,
        nvlink=None if nvlink is None else nvlink == 0,
        must_talk=must_talk,
        shared_root_port=level in ("PIX", "PXB") and p2p != "ok",
        crosses_sockets=level == "SYS",
        missing=r.missing,
    )


def tensor_parallel(cmdline: str) -> int | None:
    value = flag_value(cmdline, *TP_FLAGS)
    return int(value) if value and value.isdigit() else None


def gpu_pids(host: Host, count: int) -> dict[int, set[int]]:
    """GPU index -> the pids holding a compute context on it (NVML's process list)."""
    out: dict[int, set[int]] = {}
    for i in range(count):
        out[i] = {e["pid"] for e in Reader(host).compute_processes(i)}
    return out


def tp_engines(host: Host) -> list[tuple[Process, int]]:
    """The engines running with tensor parallelism, and its degree: ``talk_groups``' groups
    are theirs, in this order."""
    return [(p, tp) for p in engine_processes(host) if (tp := tensor_parallel(p.cmdline)) and tp > 1]


def talk_groups(host: Host, count: int) -> tuple[tuple[tuple[int, ...], ...], str]:
    """Each tensor-parallel engine's GPUs, and where they came from; with no engine, one
    group of all GPUs."""
    engines = engine_processes(host)
    running = tp_engines(host)
    if not running:
        if engines:
            return (), t("engines run without tensor parallelism: no pair must talk")
        return (tuple(range(count)),), t("no engine found: all pairs")
    holders = gpu_pids(host, count)
    lineages = {pid: lineage(host, pid) for pids in holders.values() for pid in pids}
    groups, sources = [], []
    for proc, tp in running:
        placed = tuple(i for i, pids in holders.items()
                       if any(proc.pid in lineages[pid] for pid in pids))
        if len(placed) > 1:
            groups.append(placed)
            sources.append(t("engine {engine} pid {pid} tensor parallel {tp} on GPUs {gpus} "
                             "(NVML's process list)", engine=proc.engine, pid=proc.pid, tp=tp,
                             gpus=",".join(map(str, placed))))
        else:
            groups.append(tuple(range(min(tp, count))))
            sources.append(t("engine {engine} pid {pid} tensor parallel {tp}: GPUs 0-{last} "
                             "assumed (NVML lists none of its processes)", engine=proc.engine,
                             pid=proc.pid, tp=tp, last=min(tp, count) - 1))
    return tuple(groups), t("; ").join(sources)


def topology_of(host: Host, inputs: Inputs) -> TopologyRecord:
    """The record gpu.topology handed over in ``inputs``, else read here."""
    record = inputs.get(NAME, TopologyRecord)
    return record if record is not None else measured(host)


def measured(host: Host) -> TopologyRecord:
    """The GPUs' topology from NVML and the process table (gpu.topology's work; a probe that
    needs it reads its record through ``topology_of``)."""
    return _measured(host)


def _measured(host: Host) -> TopologyRecord:
    count = gpu_count(host)
    groups, source = talk_groups(host, count)
    pairs = tuple(_pair(host, a, b, any(a in g and b in g for g in groups))
                  for a in range(count) for b in range(a + 1, count))
    return TopologyRecord(gpus=tuple(_placement(host, i) for i in range(count)), pairs=pairs,
                          talk_group=tuple(sorted({i for g in groups for i in g})),
                          talk_group_source=source)
