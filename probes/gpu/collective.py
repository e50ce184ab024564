"""gpu.collective: all-reduce bus bandwidth of each group of GPUs that must talk, beside its path's ceiling.

Runs ``probes.kernels.allreduce`` (torch.distributed, NCCL, one process per GPU, 256 MiB
float32) in a child process through ``host.measure``, so a replay gives the same figures,
once per tensor-parallel group that ``gpu.topology`` finds (every GPU when no engine is
known). Figures as nccl-tests reports them: algbw = bytes / time of one all-reduce, busbw =
algbw x 2(n-1)/n, decimal GB/s; the transport NCCL chose for most channels, from its
``NCCL_DEBUG=INFO`` lines (P2P/IPC, P2P/CUMEM, SHM, NET/IB, NET/Socket). Level full, exclusive:
it loads the GPUs for up to ``LIMIT_S`` seconds per group (~10-20 s on a healthy host: torch's
import, NCCL's set-up, 5 s of timed all-reduces). Needs torch with CUDA; no root. Manual
equivalent: ``NCCL_DEBUG=INFO all_reduce_perf -b 256M -e 256M -g <n>`` (nccl-tests).

The hard limit: a hung NCCL ignores Python timeouts, so the kernel's launcher kills every
worker's process group with SIGKILL at ``LIMIT_S`` and says which step each rank had reached;
the record then holds ``outcome`` "timeout", the step, and how long the kill took.

The ceiling (``path_ceiling``) is one direction of the slowest GPU's path in the group: over
NVLink, the GPU's links up x the per-link rate of its NVLink version
(``nvmlDeviceGetNvLinkVersion``: H100 18 x 25 = 450 GB/s); else its PCIe link as capable
(gpu.pcie's ``ceiling_capable_gbps``: Gen4 x16 = 31.5 GB/s). A ring all-reduce reaches about
0.8 of it (NCCL's maintainers' figure); well under half says the traffic is staged through
host memory: P2P is off or blocked (ACS, IOMMU, ``NCCL_P2P_DISABLE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.values import finite_float
from doctor.i18n import t
from probes.helpers import pcie_link as pcie
from probes.helpers import gpu_topology as topology
from probes.helpers.gpu_common import gpu_count, reason_of
from probes.helpers.kernel_child import run_kernel
from probes.helpers.spread import read_spread

LIMIT_S = 90.0  # per group: a cold torch import (~10 s) and NCCL's set-up on 8 GPUs (~10-30 s)
CHILD_MARGIN_S = 20.0  # the launcher reports by LIMIT_S; this kills the launcher itself
BUDGET_S = 5.0  # for the timed all-reduces
MAX_GROUPS = 4
# Per link, one direction, GB/s, by nvmlNvlinkVersion (nvml.h NVML_NVLINK_VERSION_*): NVLink1
# 20 (P100), NVLink2-4 25 (V100, A100, H100: 6/12/18 links = 150/300/450), NVLink5 50 (B200:
# 18 links = 900). Later versions: no figure here yet, the ratio stays None with that reason.
NVLINK_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}
NVLINK_VERSION_NAMES = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0",
                        8: "6.0"}
LEVEL_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
_OUTCOMES = ("ok", "timeout", "failed")


@dataclass(frozen=True, slots=True)
class PathCeiling:
    path: str | None  # "NV18" (links up, the group's least) or the widest PCIe level: PIX..SYS
    gbps: float | None  # one direction, the slowest GPU's path
    source: str  # how it was computed, or why there is none
    p2p_capable: bool | None  # every pair: NVLink, or NVML's P2P read ok and not across sockets


@dataclass(frozen=True, slots=True)
class GroupCollective:
    group: str  # "0,1,2,3": the GPUs, as a label and as the rule's key
    gpus: tuple[int, ...]  # NVML indexes, one process each
    n: int
    backend: str | None  # nccl | gloo (the CPU, in tests)
    size_bytes: int | None  # the all-reduced buffer
    iterations: int | None  # timed all-reduces (after the warm-up)
    seconds: float | None  # one all-reduce, the slowest rank's mean
    algbw_gbps: float | None  # size_bytes / seconds
    busbw_gbps: float | None  # algbw x 2(n-1)/n, as nccl-tests
    # (max - min) / median of busbw over the timed blocks (probes/kernels/allreduce.py): its
    # noise floor; None with one block and in recordings from before the kernel reported it
    busbw_gbps_spread: float | None
    transport: str | None  # what NCCL chose for most channels: P2P/IPC, P2P/CUMEM, SHM, NET/IB
    transports: dict[str, int]  # channel connections per transport (NCCL_DEBUG=INFO lines)
    path: str | None
    ceiling_gbps: float | None  # one direction of the path (PathCeiling)
    ceiling_source: str
    ratio: float | None  # busbw_gbps / ceiling_gbps: ~0.8 healthy, well under 0.5 staged
    p2p_capable: bool | None
    outcome: str  # ok | timeout (killed at the hard limit) | failed
    failed_step: str | None  # start | rendezvous | warm-up | timed (probes/kernels/allreduce.py)
    failure: str | None  # one line: which rank was where, or the error
    limit_s: float | None  # the hard limit it ran under
    kill_latency_s: float | None  # SIGKILL sent until every worker was gone
    steps_s: dict[str, float]  # seconds per step, the slowest rank's
    total_s: float | None  # the launcher's whole run
    size_note: str | None  # a size other than 256 MiB says why (the CPU)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    groups: tuple[GroupCollective, ...]
    group_source: str  # gpu.topology's talk-group source


def _number(data: dict, key: str) -> float | None:
    """A finite number, else None (a recording may hold anything)."""
    return finite_float(data.get(key))


def _integer(data: dict, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(data: dict, key: str) -> str | None:
    value = data.get(key)
    return value[:400] if isinstance(value, str) else None


def _counts(value: Any) -> dict[str, float]:
    """A mapping of names to finite numbers, at most 32 of them."""
    if not isinstance(value, dict):
        return {}
    out = {str(k)[:40]: _number(value, k) for k in list(value)[:32]}
    return {k: v for k, v in out.items() if v is not None}


def _nvlink(host: Host, topo: topology.TopologyRecord, gpus: tuple[int, ...],
            missing: dict[str, str]) -> tuple[str | None, float | None, str]:
    placed = {g.index: g for g in topo.gpus}
    best: tuple[float, int, int, int] | None = None  # (gbps, links, version, gpu) of the slowest
    for i in gpus:
        links = placed[i].nvlinks_up if i in placed else None
        try:
            version = host.nvml("nvmlDeviceGetNvLinkVersion", i, 0)
        except HostReadError as exc:
            missing["ceiling_gbps"] = f"GPU{i}: nvmlDeviceGetNvLinkVersion: {reason_of(exc)}"
            return None, None, t("no NVLink version from NVML")
        rate = NVLINK_LINK_GBPS.get(version) if isinstance(version, int) else None
        if not links or rate is None:
            why = (t("GPU{index}: no NVLink up", index=i) if not links
                   else t("GPU{index}: NVLink version {version} has no per-link rate here", index=i,
                          version=repr(version)))
            missing["ceiling_gbps"] = why
            return None, None, why
        if best is None or links * rate < best[0]:
            best = (links * rate, links, version, i)
    assert best is not None
    gbps, links, version, gpu = best
    return (f"NV{links}", round(gbps, 1),
            t("GPU{index}: NVLink {version} x {links} links up x {rate:g} GB/s per direction",
              index=gpu, version=NVLINK_VERSION_NAMES.get(version, version), links=links,
              rate=NVLINK_LINK_GBPS[version]))


def _pcie(host: Host, gpus: tuple[int, ...], pairs: list[topology.GpuPair],
          missing: dict[str, str]) -> tuple[str | None, float | None, str]:
    levels = [p.level for p in pairs if p.level in LEVEL_ORDER]
    path = max(levels, key=LEVEL_ORDER.index) if levels else None
    slowest: tuple[float, int] | None = None
    for i in gpus:
        link = pcie.read_link(host, i, None)  # NVML and sysfs reads only: no copy
        if link.ceiling_capable_gbps is None:
            why = t("GPU{index}: no PCIe generation or width from NVML", index=i)
            missing["ceiling_gbps"] = why
            return path, None, why
        if slowest is None or link.ceiling_capable_gbps < slowest[0]:
            slowest = (link.ceiling_capable_gbps, i)
    assert slowest is not None
    return path, slowest[0], t("GPU{index}: its PCIe link as capable, {gbps:g} GB/s per direction "
                               "(gpu.pcie)", index=slowest[1], gbps=slowest[0])


def path_ceiling(host: Host, topo: topology.TopologyRecord, gpus: tuple[int, ...],
                 missing: dict[str, str]) -> PathCeiling:
    """The ceiling of the group's slowest path (see the module)."""
    pairs = [p for p in topo.pairs if p.a in gpus and p.b in gpus]
    # NCCL stages a pair across sockets (SYS) through host memory by design: not P2P-capable
    if any(p.p2p_read is None and not p.nvlink for p in pairs):
        p2p: bool | None = None
    else:
        p2p = all(p.nvlink or (p.p2p_read == "ok" and p.level != "SYS") for p in pairs)
    if pairs and all(p.nvlink for p in pairs):
        path, gbps, source = _nvlink(host, topo, gpus, missing)
    else:
        path, gbps, source = _pcie(host, gpus, pairs, missing)
    return PathCeiling(path=path, gbps=gbps, source=source, p2p_capable=p2p)


def kernel_args(gpus: tuple[int, ...], cpu_ranks: int = 0, limit_s: float = LIMIT_S,
                hold_rank: int | None = None) -> list[str]:
    where = ["--cpu", str(cpu_ranks)] if cpu_ranks else ["--devices", ",".join(map(str, gpus))]
    hold = [] if hold_rank is None else ["--hold-rank", str(hold_rank)]
    return [*where, "--limit-s", f"{limit_s:g}", "--budget-s", f"{BUDGET_S:g}", *hold]


def measure(host: Host, key: str, args: list[str], limit_s: float) -> dict:
    """The kernel's JSON; a kernel that failed outright is outcome "failed" with why."""
    try:
        data = host.measure(key, lambda: run_kernel("allreduce", *args,
                                                    timeout_s=limit_s + CHILD_MARGIN_S))
    except MeasurementError as exc:
        return {"outcome": "failed", "failure": str(exc)[:400]}
    if not isinstance(data, dict):
        return {"outcome": "failed", "failure": f"wrong type: {type(data).__name__}"}
    if isinstance(data.get("skip"), str):
        raise Skip(data["skip"][:300])
    return data


def group_record(gpus: tuple[int, ...], data: dict, ceiling: PathCeiling,
                 missing: dict[str, str]) -> GroupCollective:
    busbw = _number(data, "busbw_gbps")
    outcome = data.get("outcome") if data.get("outcome") in _OUTCOMES else "failed"
    failure = _text(data, "failure")
    if outcome == "failed" and failure is None:
        failure = "the kernel's result has no outcome" if "outcome" not in data else "no reason given"
    if busbw is None:
        missing.setdefault("busbw_gbps", f"not measured: {outcome}")
    ratio = round(busbw / ceiling.gbps, 3) if busbw and ceiling.gbps else None
    if ratio is None:
        missing.setdefault("ratio", missing.get("busbw_gbps") or missing.get("ceiling_gbps")
                           or "no ceiling")
    transports = {k: int(v) for k, v in _counts(data.get("transports")).items()}
    backend = _text(data, "backend")
    if data.get("transport") is None and backend == "gloo":
        missing["transport"] = "gloo on the CPU: no NCCL transport"
    return GroupCollective(
        group=",".join(map(str, gpus)) or "cpu", gpus=gpus, n=_integer(data, "n") or len(gpus), backend=backend,
        size_bytes=_integer(data, "bytes"), iterations=_integer(data, "iterations"),
        seconds=_number(data, "seconds"), algbw_gbps=_number(data, "algbw_gbps"),
        busbw_gbps=busbw, busbw_gbps_spread=read_spread(data.get("busbw_gbps_spread")),
        transport=_text(data, "transport"), transports=transports,
        path=ceiling.path, ceiling_gbps=ceiling.gbps, ceiling_source=ceiling.source,
        ratio=ratio, p2p_capable=ceiling.p2p_capable, outcome=str(outcome),
        failed_step=_text(data, "failed_step"), failure=failure,
        limit_s=_number(data, "limit_s"), kill_latency_s=_number(data, "kill_latency_s"),
        steps_s=_counts(data.get("steps_s")), total_s=_number(data, "total_s"),
        size_note=_text(data, "size_note"), missing=missing)


def on_cpu(host: Host, ranks: int = 2, limit_s: float = 30.0,
           hold_rank: int | None = None) -> GroupCollective:
    """The same all-reduce on the CPU with gloo (the tests; a host without GPUs to try the
    code on), without a ceiling."""
    data = measure(host, "gpu.collective.cpu", kernel_args((), ranks, limit_s, hold_rank), limit_s)
    none = PathCeiling(None, None, "the CPU: no GPU path", None)
    return group_record((), data, none, {"ceiling_gbps": "the CPU: no GPU path"})


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CollectiveRecord:
    count = gpu_count(host)
    if count < 2:
        raise Skip(t("one GPU: an all-reduce needs two or more"))
    topo = topology.topology_of(host, inputs)  # gpu.topology's record, else read here
    groups, source = topology.talk_groups(host, count)
    groups = tuple(g for g in groups if len(g) > 1)[:MAX_GROUPS]
    if not groups:
        raise Skip(t("no group of GPUs must talk ({source})", source=source))
    out = []
    for gpus in groups:
        missing: dict[str, str] = {}
        ceiling = path_ceiling(host, topo, gpus, missing)
        data = measure(host, f"gpu.collective.{'-'.join(map(str, gpus))}",
                       kernel_args(gpus), LIMIT_S)
        out.append(group_record(gpus, data, ceiling, missing))
    return CollectiveRecord(groups=tuple(out), group_source=source)


def describe(g: GroupCollective) -> str:
    """One group in one line for people."""
    who = f"GPU {','.join(map(str, g.gpus))}" if g.gpus else t("{n} CPU ranks", n=g.n)
    if g.outcome != "ok":
        kill = ("" if g.kill_latency_s is None
                else t(" (kill took {ms:.0f} ms)", ms=g.kill_latency_s * 1000))
        return f"{who}: {g.outcome}{kill}: {g.failure}"
    busbw = f"busbw {g.busbw_gbps:g} GB/s" if g.busbw_gbps is not None else "busbw ?"
    ceiling = (t(" = {ratio:g} of {ceiling:g} GB/s ({path})", ratio=g.ratio,
                 ceiling=g.ceiling_gbps, path=g.path)
               if g.ratio is not None and g.ceiling_gbps else "")
    via = t(" via {transport}", transport=g.transport) if g.transport else ""
    return f"{who}: {busbw}{ceiling}{via}"


def summary(record: CollectiveRecord) -> str:
    return t("; ").join(describe(g) for g in record.groups)
