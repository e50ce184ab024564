"""gpu.peer_to_peer: for each group of GPUs that must talk, which pairs cannot use P2P, and why.

Named with letters only, as every probe is (tests/test_registry.py, docs/report-schema.json);
its module, rule file and metrics say p2p.

Sources, all through the seam: gpu.topology's pairs (path, NVML's P2P read status, NVLink)
and groups; NVML ``nvmlDeviceGetP2PStatus`` for WRITE (caps index 1; an older driver's
missing call is "not-supported"); PCIe ACS on the bridges between the two GPUs
(probes/helpers/pcie_acs.py: sysfs ``config``, root needed to see it); the IOMMU mode and each
GPU's IOMMU group type (probes/helpers/iommu.py); what each tensor-parallel engine was told:
``NCCL_P2P_DISABLE``, ``NCCL_P2P_LEVEL``, ``NCCL_IB_DISABLE``, ``--disable-custom-all-reduce``,
vLLM's cached P2P verdict (probes/helpers/engine_p2p.py); at level standard, a functional
check with torch in a child process killed at ``CHECK_LIMIT_S`` (probes/kernels/p2p_check.py:
can-access-peer both ways, a copy read back and compared). Manual equivalent:
``nvidia-smi topo -p2p rw``, ``sudo lspci -vvv | grep ACSCtl``, ``cat /proc/cmdline``.

A pair's blockers, each a sentence naming what blocks it: the engine's NCCL_P2P_DISABLE (any
path, NVLink included); NCCL_P2P_LEVEL below the pair's path; NVML's read or write status not
ok on a path without NVLink; ACS P2P Request or Completion Redirect on a bridge between the
two (with the IOMMU's translation, where it translates); vLLM's cache disagreeing with NVML;
the functional check failing. A pair across sockets (SYS) without NVLink is judged by
pcie-topology-shared-path: P2P there is unsupported by design, so only a cached "works"
(vLLM's custom all-reduce then hangs) and the engine's own switches count.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.model import Level, ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.i18n import t
from probes.helpers import gpu_topology as topology
from probes.helpers import engine_p2p, iommu, pcie_acs
from probes.helpers.gpu_common import Reader, gpu_count, pci_bdf, reason_of
from probes.helpers.kernel_child import run_kernel
from probes.helpers.p2p_blockers import Functional, PairFacts, blockers_of, describe_functional, kind_of

CHECK_LIMIT_S = 60.0  # torch's import (~10 s cold), a CUDA context per GPU, 16 MiB per pair
P2P_WRITE = 1  # nvmlGpuP2PCapsIndex_t NVML_P2P_CAPS_INDEX_WRITE


@dataclass(frozen=True, slots=True)
class PairP2p:
    a: int
    b: int
    path: str | None  # "NV18" (NVLink links up, the pair's least) or PIX | PXB | PHB | NODE | SYS
    p2p_read: str | None  # nvmlDeviceGetP2PStatus READ (gpu.topology)
    p2p_write: str | None  # nvmlDeviceGetP2PStatus WRITE
    acs_redirect: str | None  # "0000:02:08.0 ReqRedir+ CmpltRedir+; ..." on the bridges between
    acs_unread: str | None  # why some bridge's ACS could not be read (without root)
    iommu_types: str | None  # both GPUs' IOMMU group types: "DMA-FQ" or "identity/DMA"
    functional: str | None  # "ok", "no peer access 0->1", "copy 0->1 differs: ...", None: not run
    blocked: bool  # some blocker below holds
    blockers: tuple[str, ...]
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class GroupP2p:
    group: str  # "0,1,2,3"
    gpus: tuple[int, ...]
    engine: str | None  # "vllm pid 4242", None: no engine known (every GPU)
    nccl_p2p_disable: str | None
    nccl_p2p_level: str | None
    nccl_ib_disable: str | None
    custom_all_reduce_disabled: bool | None
    cache_file: str | None  # vLLM's P2P cache file
    pairs: tuple[PairP2p, ...]
    blocked_pairs: str | None  # "0-1 PHB, 2-3 PIX"
    acs_bridges: str | None  # the bridges redirecting P2P between the group's pairs: "0000:04:08.0, ..."
    blockers: tuple[str, ...]  # every pair's blockers, each once
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class P2pRecord:
    groups: tuple[GroupP2p, ...]
    group_source: str  # gpu.topology's
    iommu_mode: str  # off | passthrough | translated | unknown (host-wide)
    iommu_source: str
    iommu_cmdline: str | None  # the IOMMU options on /proc/cmdline
    iommu_groups: int | None
    bridges: tuple[pcie_acs.BridgeAcs, ...]  # above the groups' GPUs
    functional_source: str  # how the functional check ran, or why it did not
    missing: dict[str, str]  # host-wide reads that failed: a GPU's sysfs link, the IOMMU's


def _gpu_paths(host: Host, count: int, missing: dict[str, str]) -> dict[int, tuple[str, str]]:
    """Each GPU's sysfs bus id and device directory (under /sys/devices)."""
    out: dict[int, tuple[str, str]] = {}
    for i in range(count):
        r = Reader(host)
        pci = r.mapping("bus_id", "nvmlDeviceGetPciInfo", i)
        bdf = pci_bdf(r.item("bus_id", pci, "busId", str))
        if bdf is None:
            missing[f"gpu{i}_sysfs"] = r.missing.get("bus_id", "no bus id")
            continue
        try:
            out[i] = (bdf, pcie_acs.device_dir(host, bdf))
        except HostReadError as exc:
            missing[f"gpu{i}_sysfs"] = f"/sys/bus/pci/devices/{bdf}: {reason_of(exc)}"
    return out


def _functional(host: Host, options: ScanOptions,
                pairs: list[tuple[int, int]]) -> tuple[dict[tuple[int, int], Functional], str]:
    if options.level < Level.STANDARD:
        return {}, t("level quick: not run (level standard runs it)")
    if not pairs:
        return {}, t("no pair to check")
    arg = ",".join(f"{a}-{b}" for a, b in pairs)
    try:
        data = host.measure("gpu.peer_to_peer.functional", lambda: run_kernel(
            "p2p_check", "--pairs", arg, timeout_s=CHECK_LIMIT_S))
    except MeasurementError as exc:
        return {}, t("not run: {why}", why=exc)
    if not isinstance(data, dict):
        return {}, t("not run: the measurement is not a JSON object")
    if isinstance(data.get("skipped"), str):
        return {}, t("skipped: {why}", why=data["skipped"][:200])
    got = {}
    entries = data.get("pairs")
    for p in entries if isinstance(entries, list) else []:
        if isinstance(p, dict) and type(p.get("a")) is int and type(p.get("b")) is int:
            flags = [p.get(k) if isinstance(p.get(k), bool) else None
                     for k in ("peer_access_ab", "peer_access_ba", "copy_ok")]
            error = p.get("error")
            got[(p["a"], p["b"])] = Functional(
                flags[0], flags[1], flags[2], error[:200] if isinstance(error, str) else None)
    return got, t("torch in a child process (limit {limit:g} s): {n} pairs checked",
                  limit=CHECK_LIMIT_S, n=len(got))


def _path(pair: topology.GpuPair, topo: topology.TopologyRecord) -> str | None:
    if pair.nvlink:
        links = [g.nvlinks_up for g in topo.gpus if g.index in (pair.a, pair.b)]
        known = [n for n in links if n]
        return f"NV{min(known)}" if known else "NVLink"
    return pair.level


class _Host:
    """What one scan reads once for every group: bridges' ACS, IOMMU group types."""

    def __init__(self, host: Host, count: int) -> None:
        self.host = host
        self.missing: dict[str, str] = {}
        self.gpus = _gpu_paths(host, count, self.missing)
        self.bridges: dict[str, pcie_acs.BridgeAcs] = {}
        self.above: dict[int, tuple[str, ...]] = {}
        self.types: dict[int, str | None] = {}
        for i, (_, device) in self.gpus.items():
            above = pcie_acs.bridges_above(device)
            self.above[i] = tuple(b for b, _ in above)
            for bdf, directory in above:
                if bdf not in self.bridges:
                    self.bridges[bdf] = pcie_acs.read_bridge(host, bdf, directory)
            self.types[i], why = iommu.group_type(host, device)
            if why and why != "no IOMMU group":
                self.missing[f"gpu{i}_iommu_group"] = why

    def between(self, a: int, b: int) -> tuple[tuple[pcie_acs.BridgeAcs, ...], str | None]:
        if a not in self.above or b not in self.above:
            return (), "a GPU's place on the PCI bus is unknown"
        found = [self.bridges[x] for x in pcie_acs.between(self.above[a], self.above[b])]
        unread = next((x.reason for x in found if x.acs_control is None
                       and x.reason and x.reason != "no ACS capability"), None)
        return tuple(x for x in found if x.redirects), unread


def _pair(h: _Host, pair: topology.GpuPair, topo: topology.TopologyRecord,
          engine: engine_p2p.EngineP2p | None, functional: Functional | None,
          host_mode: str) -> PairP2p:
    r = Reader(h.host)
    write = r.integer("p2p_write", "nvmlDeviceGetP2PStatus", pair.a, pair.b, P2P_WRITE)
    missing = dict(r.missing)
    p2p_write = None if write is None else topology.P2P_STATUS.get(write, f"status {write}")
    if missing.get("p2p_write") == "not-found":  # an older driver without the WRITE index
        missing["p2p_write"] = "not-supported"
    redirecting, unread = h.between(pair.a, pair.b)
    types = [h.types.get(i) for i in (pair.a, pair.b)]
    translating = next((t for t in types if t in iommu.TRANSLATED_TYPES), None)
    if translating is None and not any(types) and host_mode == "translated":
        translating = "translated host-wide"
    cache = tuple(v for v in (engine.cache if engine else ())
                  if {v.a, v.b} == {pair.a, pair.b})
    path = _path(pair, topo)
    facts = PairFacts(pair.a, pair.b, path, bool(pair.nvlink), pair.p2p_read, p2p_write,
                      redirecting, translating, functional, cache,
                      engine.nccl_p2p_disable if engine else None,
                      engine.nccl_p2p_level if engine else None,
                      bool(engine and engine.custom_all_reduce_disabled))
    blockers = blockers_of(facts)
    acs = "; ".join(f"{x.bdf} {' '.join(n + '+' for n in x.enabled)}" for x in redirecting)
    return PairP2p(a=pair.a, b=pair.b, path=path, p2p_read=pair.p2p_read, p2p_write=p2p_write,
                   acs_redirect=acs or None, acs_unread=unread,
                   iommu_types="/".join(sorted({t for t in types if t})) or None,
                   functional=describe_functional(functional, pair.a, pair.b),
                   blocked=bool(blockers), blockers=blockers, missing=missing)


def _group(h: _Host, gpus: tuple[int, ...], topo: topology.TopologyRecord,
           engine: engine_p2p.EngineP2p | None, functional: dict, host_mode: str) -> GroupP2p:
    pairs = tuple(_pair(h, p, topo, engine, functional.get((p.a, p.b)), host_mode)
                  for p in topo.pairs if p.a in gpus and p.b in gpus)
    blocked = [p for p in pairs if p.blockers]
    blockers = tuple(dict.fromkeys(b for p in blocked for b in p.blockers))
    return GroupP2p(
        group=",".join(map(str, gpus)), gpus=gpus,
        engine=f"{engine.engine} pid {engine.pid}" if engine else None,
        nccl_p2p_disable=engine.nccl_p2p_disable if engine else None,
        nccl_p2p_level=engine.nccl_p2p_level if engine else None,
        nccl_ib_disable=engine.nccl_ib_disable if engine else None,
        custom_all_reduce_disabled=engine.custom_all_reduce_disabled if engine else None,
        cache_file=engine.cache_file if engine else None, pairs=pairs,
        blocked_pairs=", ".join(f"{p.a}-{p.b} {p.path or '?'}" for p in blocked) or None,
        acs_bridges=", ".join(sorted({x.split()[0] for p in blocked if p.acs_redirect
                                      for x in p.acs_redirect.split("; ")})) or None,
        blockers=blockers, missing=dict(engine.missing) if engine else {})


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> P2pRecord:
    count = gpu_count(host)
    if count < 2:
        raise Skip(t("one GPU: no pair to judge"))
    topo = topology.topology_of(host, inputs)  # gpu.topology's record, else read here
    groups, source = topology.talk_groups(host, count)
    engines = [p for p, _ in topology.tp_engines(host)]
    placed = [(g, engines[i] if i < len(engines) else None) for i, g in enumerate(groups)
              if len(g) > 1]
    if not placed:
        raise Skip(t("no group of GPUs must talk ({source})", source=source))
    h = _Host(host, count)
    state = iommu.read_iommu(host)
    pairs = sorted({(p.a, p.b) for g, _ in placed for p in topo.pairs if p.a in g and p.b in g})
    functional, how = _functional(host, options, pairs)
    out = tuple(_group(h, g, topo, engine_p2p.engine_p2p(host, proc, count) if proc else None,
                       functional, state.mode) for g, proc in placed)
    return P2pRecord(groups=out, group_source=source, iommu_mode=state.mode,
                     iommu_source=state.mode_source, iommu_cmdline=state.cmdline,
                     iommu_groups=state.groups, bridges=tuple(h.bridges.values()),
                     functional_source=how, missing={**h.missing, **state.missing})


def summary(record: P2pRecord) -> str:
    parts = []
    for g in record.groups:
        if g.blocked_pairs:
            more = (t(" and {n} more", n=len(g.blockers) - 1) if len(g.blockers) > 1 else "")
            parts.append(t("GPUs {group}: P2P blocked for {pairs} ({blocker}{more})", group=g.group,
                           pairs=g.blocked_pairs, blocker=kind_of(g.blockers[0]), more=more))
        else:
            parts.append(t("GPUs {group}: P2P open on {n} pairs", group=g.group, n=len(g.pairs)))
    return t("; ").join(parts) + t("; IOMMU {mode}; functional check {how}", mode=record.iommu_mode,
                                how=record.functional_source)
