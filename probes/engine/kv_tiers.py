"""engine.kv_tiers: each engine's KV cache beyond its GPU: KV transfer between prefill and
decode instances (disaggregated serving) and KV offload to host memory.

Sources: engine.metrics' record (the NIXL and offload series of its two scrapes, read by
probes/helpers/engine_kv.py, which names vLLM's files they come from; ``vllm:cache_config_info``'s
``kv_cache_size_tokens``: the GPU tier), engine.discovery's engines and their command lines
(``/proc/<pid>/cmdline``), the engine's environment (``/proc/<pid>/environ``: ``UCX_TLS``,
``PYTHONHASHSEED``, ``LMCACHE_MAX_LOCAL_CPU_SIZE``; the rest never kept), and net.rdma's
record when it ran (the host's ACTIVE InfiniBand/RoCE ports). Flags, as vLLM 0.33.0's
``vllm/engine/arg_utils.py`` and ``vllm/config/cache.py`` and SGLang 0.5.23's ``server_args.py``
name them:

* vLLM ``--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'`` (or
  ``--kv-transfer-config.kv_connector X``): the connector (NixlConnector, LMCacheConnectorV1,
  OffloadingConnector, MooncakeConnector…) and the instance's role;
* vLLM ``--kv-offloading-size`` (GiB, all TP ranks together) and ``--kv-offloading-backend``
  (``native`` or ``lmcache``); ``--tensor-parallel-size`` / ``-tp``;
* SGLang ``--enable-hierarchical-cache``, ``--hicache-ratio`` (host pool / device pool,
  default 2.0) and ``--hicache-size`` (GB; 0, the default, uses the ratio).
* SGLang ``--disaggregation-mode`` (``prefill``/``decode``; ``null``, the default, serves both)
  and ``--disaggregation-transfer-backend`` (default ``mooncake``), as SGLang 0.5.23's
  ``sglang/srt/arg_groups/fields/disagg.py`` (lines 55 and 65) declares them: the instance's
  role and its transfer backend, in place of vLLM's connector and kv_role;
* LMCache's ``LMCACHE_PRE_CACHING_HASH_ALGORITHM`` (``pre_caching_hash_algorithm``, default
  ``builtin``: Python's hash(), LMCache 0.5.6 ``lmcache/v1/config.py`` line 131).

The CPU tier helps only when it holds more than the GPU tier (LMCache's maintainers,
LMCache/LMCache#928 and #1109; a user measured TTFT 27 % worse with it smaller, #1241).
The host's room for the tier (probes/helpers/kv_host.py: MemAvailable, the resident memory of
the engine and its workers, which already holds what of the tier is allocated, the memlock
limit and CAP_IPC_LOCK); NIXL transfer time against the link (the fastest ACTIVE RDMA port,
else the fastest physical interface up: net.interfaces); the NIXL instances of one model on
this host that could pair, and what of their KV configuration differs
(probes/helpers/nixl_pairs.py); SGLang's prompt-token share from each HiCache tier; the
share of LMCache's looked-up tokens it found.
Units: tokens, bytes, seconds, counts. Privilege: the engine's user or root for its environ.
Manual equivalent: ``curl -s :8000/metrics | grep -E 'nixl_|kv_offload_config|cached_tokens|sglang:(kv_transfer|num_(transfer|bootstrap)_failed)|lmcache:num_lookup'``,
``grep MemAvailable /proc/meminfo``, ``grep 'Max locked' /proc/PID/limits`` and
``tr '\\0' '\\n' < /proc/PID/environ | grep -E '^(UCX_TLS|PYTHONHASHSEED)='``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from doctor.values import count, number, page_json
from probes.helpers.engine_argv import engine_argv
from probes.helpers.engine_discovery import DiscoveryRecord, found
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import scraped, with_metrics
from probes.helpers.engine_kv import XFER_BYTES, KvFigures, hits_only
from probes.helpers.kv_host import host_room
from probes.helpers.net_interfaces import interfaces_of
from probes.helpers.nixl_pairs import NixlSide, mismatches, mode_of
from probes.helpers.process_env import env_value

GIB = 1 << 30
MAX_GB = 1e6  # no host has a petabyte of memory: a larger size is no size


def _gb(value: str | None) -> float | None:
    """A size in GB/GiB from a flag or variable; None unless a number in (0, MAX_GB]."""
    found = number(value)
    return found if found is not None and 0 < found <= MAX_GB else None
# UCX transports that use an RDMA device (ucx_info -d): rc, ud, dc and their verbs/mlx5 forms
UCX_RDMA = ("rc", "ud", "dc", "ib", "rc_v", "rc_x", "rc_mlx5", "ud_v", "ud_x", "ud_mlx5",
            "dc_x", "dc_mlx5", "all")


@dataclass(frozen=True, slots=True)
class EngineKvTiers:
    endpoint: str
    kind: str
    model: str | None
    kv_connector: str | None  # --kv-transfer-config's kv_connector
    kv_role: str | None  # kv_producer, kv_consumer, kv_both
    transfers: float | None  # NIXL transfers over the window (else since start)
    failed_transfers: float | None  # failed NIXL transfers, handshakes and notifications
    failed_window: str | None  # "between scrapes" | "since start"
    xfer_p99_s: float | None
    nixl: bool  # the connector moves KV with NIXL (over UCX): NixlConnector
    ucx_tls: str | None  # the engine's UCX_TLS; None: unset (UCX picks) or not readable
    ucx_tcp_only: bool | None  # UCX_TLS leaves no RDMA transport; None: unset or not read
    rdma_ports_active: int | None  # the host's ACTIVE RDMA ports (net.rdma); None: not run
    offload_backend: str | None  # native, lmcache, OffloadingConnector, LMCacheConnectorV1, hicache
    cpu_tier_bytes: int | None  # the CPU tier's size
    cpu_tier_from: str | None  # where it was read
    cpu_tier_tokens: int | None  # tokens it holds (vLLM's offload info)
    gpu_tier_tokens: int | None  # vllm:cache_config_info's kv_cache_size_tokens
    hicache_ratio: float | None  # SGLang's host pool / device pool
    tensor_parallel: int | None
    lmcache: bool  # the connector or offload backend is LMCache
    pythonhashseed_set: bool | None  # None: the environ was not read
    missing: dict[str, str]  # figure -> why it is None
    # the host's room for the tier (probes/helpers/kv_host.py says how a tier already
    # allocated is told apart): all ranks' tiers together, where the size is per rank
    cpu_tier_host_bytes: int | None = None
    mem_available_bytes: int | None = None  # /proc/meminfo MemAvailable
    engine_rss_bytes: int | None = None  # VmRSS of the engine and its workers
    memlock_bytes: int | None = None  # the engine's soft RLIMIT_MEMLOCK; None: unlimited or unread
    ipc_lock: bool | None = None  # CAP_IPC_LOCK: the memlock limit does not bind
    tier_rdma_registered: bool = False  # the tier is registered with an RDMA device (Mooncake)
    # NIXL transfer time against the link (probes/helpers/engine_kv.py: floor and ceiling)
    xfer_p99_floor_s: float | None = None  # at least 1 % of the transfers took longer
    xfer_bytes_max: float | None = None  # no transfer moved more bytes
    link_gbits: float | None = None  # the fastest ACTIVE RDMA port's rate, else the fastest up NIC's
    link_from: str | None = None  # "net.rdma: mlx5_0/1", "net.interfaces: ens1f0"
    xfer_line_s: float | None = None  # xfer_bytes_max at link_gbits: the longest a transfer needs
    # what a NIXL pair must agree on (probes/helpers/nixl_pairs.py), vllm:cache_config_info
    cache_dtype: str | None = None
    block_size: str | None = None
    kv_cache_layout: str | None = None
    kv_buffer_device: str | None = None  # --kv-transfer-config's kv_buffer_device
    nixl_permute: bool = False  # enable_permute_local_kv
    nixl_differs: str | None = None  # differences from the instances it could pair with, "; "-joined
    # SGLang: each cache source's share of the prompt tokens (device, host, storage); reported,
    # not judged: no published threshold says what share a tier should reach
    hit_shares: dict[str, float] | None = None
    hit_window: str | None = None  # "between scrapes" | "since start"
    # the transfer time ends when the engine polls it (SGLang): up to one scheduler iteration
    # late, which its page does not give; kv-transfer-slow does not judge it
    xfer_polled: bool = False
    # LMCache: the share of the looked-up prompt tokens it found, the tokens, over what span
    lm_hit_share: float | None = None
    lm_lookup_tokens: float | None = None
    lm_window: str | None = None
    # LMCache keys chunks with Python's hash() (builtin, its default) unless told otherwise
    lm_builtin_hash: bool | None = None  # None: the environ was not read
    # SGLang's Mooncake backend told to use TCP: "MC_FORCE_TCP=1" or "MOONCAKE_PROTOCOL=tcp"
    mooncake_tcp: str | None = None


@dataclass(frozen=True, slots=True)
class KvTiersRecord:
    engines: tuple[EngineKvTiers, ...]


def config_key(argv: list[str], key: str, name: str = "--kv-transfer-config") -> str | None:
    """A key of a JSON config argument (``--x '{"k": 4}'``) or its dotted form (``--x.k 4``)."""
    value = flag(argv, f"{name}.{key}")
    if value is not None:
        return value[:128]
    raw = flag(argv, name)
    try:
        config = page_json(raw) if raw and len(raw) < 65536 else None  # depth bounded
    except ValueError:
        return None
    got = config.get(key) if isinstance(config, dict) else None
    return None if got is None or isinstance(got, (dict, list)) else str(got)[:128]


def tcp_only(tls: str | None) -> bool | None:
    """Whether UCX_TLS leaves UCX no RDMA transport: ``tcp,cuda_copy`` yes, ``rc,tcp`` no,
    ``^ib`` (everything but InfiniBand) yes; None when unset (UCX then picks every device)."""
    if not tls:
        return None
    names = {n.strip().lower() for n in tls.lstrip("^").split(",") if n.strip()}
    if tls.startswith("^"):  # an exclusion list
        return "ib" in names or {"rc", "ud", "dc"} <= names or "all" in names
    return not names & set(UCX_RDMA)


def _env(host: Host, pid: int | None, name: str, missing: dict[str, str]) -> tuple[str | None, bool]:
    """(value, read): the variable, and whether the environ could be read at all."""
    if pid is None:
        missing[name] = "no engine process found for this endpoint"
        return None, False
    got = env_value(host, pid, name)
    if got.reason is not None:
        missing[name] = f"/proc/{pid}/environ: {got.reason}"
        return None, False
    return got.value or None, True


def _cpu_tier(m: EngineMetrics, argv: list[str], lmcache_size: str | None,
              connector: str | None) -> tuple[str | None, int | None, str | None, float | None]:
    """(backend, bytes, where from, SGLang's ratio)."""
    if m.kind == "sglang":
        if "--enable-hierarchical-cache" not in argv:
            return None, None, None, None
        size = _gb(flag(argv, "--hicache-size"))
        if size:
            return "hicache", int(size * 1e9), "--hicache-size", None
        raw = flag(argv, "--hicache-ratio")
        ratio = number(raw) if raw is not None else 2.0  # its default
        return "hicache", None, None, ratio if ratio is not None and 0 <= ratio <= MAX_GB else None
    kv = m.kv
    backend = flag(argv, "--kv-offloading-backend")
    size = _gb(flag(argv, "--kv-offloading-size"))
    if kv is not None and kv.offload_cpu_bytes is not None:
        named = backend or ("native" if size else connector) or "native"
        return named, kv.offload_cpu_bytes, "vllm:kv_offload_config_info", None
    if size is not None:
        return backend or "native", int(size * GIB), "--kv-offloading-size", None
    if connector and "lmcache" in connector.lower():
        lm = _gb(lmcache_size)
        return connector, int(lm * 1e9) if lm else None, "LMCACHE_MAX_LOCAL_CPU_SIZE" if lm else None, None
    if connector == "OffloadingConnector":
        return connector, None, None, None
    return None, None, None, None


# Backends whose size is per worker process: the host holds one tier a tensor-parallel rank
# (LMCache's max_local_cpu_size, SGLang's --hicache-size); vLLM's --kv-offloading-size is
# all ranks together (vllm/engine/arg_utils.py).
PER_RANK = ("hicache", "lmcache")
# SGLang's Mooncake HiCache storage registers the whole host pool with Mooncake's transfer
# engine (mooncake_store.py register_mem_pool_host: store.register_buffer(kv_buffer)), which
# registers it with the RDMA device: charged against RLIMIT_MEMLOCK.
RDMA_STORAGE = ("mooncake",)


def _tier_host_bytes(backend: str, size: int, tp: int | None) -> int:
    """What the host holds for the tier: the size, times the ranks where it is per rank
    (an unknown rank count is one: the least the host holds)."""
    return size * (tp or 1) if any(b in backend.lower() for b in PER_RANK) else size


def _active_rdma(inputs: Inputs) -> tuple[int | None, tuple[float, str] | None]:
    """(ACTIVE ports, (the fastest one's rate in Gb/s, its name)); None where net.rdma did not run."""
    # read by shape: a probe imports no other probe (tests/test_import_graph.py)
    ports = getattr(inputs.records.get("net.rdma"), "ports", None)
    if not isinstance(ports, tuple):
        return None, None
    active = [p for p in ports if getattr(p, "state", None) == "ACTIVE"]
    rates = [(float(r), f"net.rdma: {getattr(p, 'name', '?')}") for p in active
             if isinstance(r := getattr(p, "rate_gbits", None), (int, float)) and 0 < r < 1e5]
    return len(active), max(rates) if rates else None


def _fastest_nic(host: Host, inputs: Inputs) -> tuple[float, str] | None:
    """The fastest physical interface that is up, where no RDMA port gives a rate: the line
    UCX's TCP transport (or RoCE through it) uses. /sys/class/net/<if>/speed, Mb/s."""
    record = interfaces_of(host, inputs)
    speeds = [(i.speed_mbits / 1000, f"net.interfaces: {i.name}") for i in (record.interfaces if record else ())
              if i.kind == "physical" and i.up and i.speed_mbits and 0 < i.speed_mbits < 10**8]
    return max(speeds) if speeds else None


def _line(kv: KvFigures | None, link: float | None, missing: dict[str, str]) -> float | None:
    """The seconds the largest transfer needs at the link's rate; None with a reason."""
    if kv is None or kv.xfer_p99_floor_s is None:
        return None
    if link is None:
        missing["link_gbits"] = "no ACTIVE RDMA port (net.rdma) nor physical interface up with a speed (/sys/class/net)"
        return None
    if kv.xfer_bytes_max is None:
        missing["xfer_bytes_max"] = f"{XFER_BYTES}: no transfer counted, or one above its last bucket"
        return None
    return round(kv.xfer_bytes_max * 8 / (link * 1e9), 6)


def _sglang_pd(argv: list[str]) -> tuple[str | None, str | None]:
    """(transfer backend, role) of an SGLang instance in a prefill/decode pair; (None, None)
    where it serves both (``--disaggregation-mode null``, the default)."""
    mode = flag(argv, "--disaggregation-mode")
    if mode not in ("prefill", "decode"):
        return None, None
    return (flag(argv, "--disaggregation-transfer-backend") or "mooncake")[:64], mode


def _mooncake_tcp(host: Host, pid: int | None, connector: str | None) -> str | None:
    """The SGLang environment that puts Mooncake's transfer engine on TCP: ``MC_FORCE_TCP=1``
    ("makes mooncake install TcpTransport instead of RDMA", SGLang 0.5.23's
    distributed/device_communicators/mooncake_transfer_engine.py:131-133) or
    ``MOONCAKE_PROTOCOL=tcp`` (the protocol it initialises Mooncake with, default rdma: line 207,
    environ.py:887); None where neither, or the environ was not read."""
    if connector != "mooncake" or pid is None:
        return None
    force, _ = _env(host, pid, "MC_FORCE_TCP", {})
    if force == "1":
        return "MC_FORCE_TCP=1"
    protocol, _ = _env(host, pid, "MOONCAKE_PROTOCOL", {})
    return "MOONCAKE_PROTOCOL=tcp" if (protocol or "").strip().lower() == "tcp" else None


def view(host: Host, engine: Engine | None, m: EngineMetrics, argv: list[str],
         rdma: int | None, link: tuple[float, str] | None = None) -> EngineKvTiers | None:
    """One engine's KV tiers; None when it uses neither KV transfer nor offload."""
    connector, role = _sglang_pd(argv) if m.kind == "sglang" else (config_key(argv, "kv_connector"),
                                                                    config_key(argv, "kv_role"))
    hits = m.kv if m.kv is not None and m.kv.hit_shares else None
    kv = None if hits_only(m.kv) else m.kv  # SGLang's tier hits alone: no transfer or offload series
    pid = engine.pid if engine else None
    missing: dict[str, str] = dict(a.split(": ", 1) for a in (m.kv.absent if m.kv else ()) if ": " in a)
    lmcache, _ = (_env(host, pid, "LMCACHE_MAX_LOCAL_CPU_SIZE", {})
                  if connector and "lmcache" in connector.lower() else (None, False))
    backend, size, size_from, ratio = _cpu_tier(m, argv, lmcache, connector)
    if connector is None and kv is None and backend is None:
        return None
    tls, _ = _env(host, pid, "UCX_TLS", missing) if connector or kv else (None, False)
    seed, read = _env(host, pid, "PYTHONHASHSEED", missing)
    uses_lmcache = "lmcache" in f"{connector} {backend}".lower()
    algorithm, _ = _env(host, pid, "LMCACHE_PRE_CACHING_HASH_ALGORITHM", {}) if read and uses_lmcache else (None, False)
    gpu_tokens = count(m.cache_config.get("kv_cache_size_tokens"), minimum=1)
    if rdma is None and (connector or kv):
        missing["rdma_ports_active"] = "net.rdma did not run here or found no RDMA device"
    if backend and size is None and ratio is None:
        missing["cpu_tier_bytes"] = "set in LMCache's config file or by its default: not on the command line"
    tp = count(flag(argv, "--tensor-parallel-size", "-tp", "--tp-size", "--tp"), minimum=1)
    sized = backend is not None and size is not None  # the host is read for a tier of known size
    room = host_room(host, pid, missing) if sized else None
    storage = (flag(argv, "--hicache-storage-backend") or "").lower()
    return EngineKvTiers(
        endpoint=m.endpoint, kind=m.kind, model=engine.model if engine else None,
        kv_connector=connector, kv_role=role,
        transfers=kv.transfers if kv else None, failed_transfers=kv.failed if kv else None,
        failed_window=kv.failed_window if kv else None, xfer_p99_s=kv.xfer_p99_s if kv else None,
        nixl=m.kind != "sglang" and "nixl" in (connector or "").lower(), ucx_tls=tls[:128] if tls else None, ucx_tcp_only=tcp_only(tls), rdma_ports_active=rdma,
        offload_backend=backend, cpu_tier_bytes=size, cpu_tier_from=size_from,
        cpu_tier_tokens=kv.offload_cpu_tokens if kv else None, gpu_tier_tokens=gpu_tokens,
        hicache_ratio=ratio,
        tensor_parallel=tp, lmcache=uses_lmcache,
        pythonhashseed_set=(seed is not None) if read else None, missing=missing,
        cpu_tier_host_bytes=(kv.offload_cpu_bytes_all if size_from == "vllm:kv_offload_config_info" and kv
                             and kv.offload_cpu_bytes_all else _tier_host_bytes(backend, size, tp)
                             if backend and size else None),
        mem_available_bytes=room.mem_available_bytes if room else None,
        engine_rss_bytes=room.engine_rss_bytes if room else None,
        memlock_bytes=room.memlock_bytes if room else None, ipc_lock=room.ipc_lock if room else None,
        tier_rdma_registered=backend == "hicache" and storage in RDMA_STORAGE,
        hit_shares=dict(hits.hit_shares) if hits else None, hit_window=hits.hit_window if hits else None,
        xfer_p99_floor_s=kv.xfer_p99_floor_s if kv else None, xfer_bytes_max=kv.xfer_bytes_max if kv else None,
        link_gbits=link[0] if link and kv and kv.transfers else None,
        link_from=link[1] if link and kv and kv.transfers else None,
        xfer_line_s=_line(kv, link[0] if link else None, missing),
        cache_dtype=m.cache_config.get("cache_dtype"), block_size=m.cache_config.get("block_size"),
        kv_cache_layout=m.cache_config.get("kv_cache_layout"),
        kv_buffer_device=config_key(argv, "kv_buffer_device"),
        nixl_permute=(config_key(argv, "enable_permute_local_kv") or "").lower() == "true",
        xfer_polled=kv.xfer_polled if kv else False,
        lm_hit_share=m.kv.lm_hit_share if m.kv else None,
        lm_lookup_tokens=m.kv.lm_lookup_tokens if m.kv else None, lm_window=m.kv.lm_window if m.kv else None,
        lm_builtin_hash=(algorithm or "builtin").lower() == "builtin" if read and uses_lmcache else None,
        mooncake_tcp=_mooncake_tcp(host, pid, connector) if m.kind == "sglang" else None)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> KvTiersRecord:
    inputs = with_metrics(host, options, inputs)  # handed over, else read here once
    engines = {e.base_url: e for e in found(host, options, inputs).engines}
    record = inputs.get("engine.discovery", DiscoveryRecord)
    argvs = {a.pid: a.argv for a in record.argv} if record is not None else {}
    metrics = scraped(host, options, inputs)
    if not metrics.engines:
        raise Skip(t("no engine's /metrics page could be read (see engine.metrics)"))
    (rdma, link), items = _active_rdma(inputs), []
    if link is None and any(m.kv is not None and m.kv.transfers for m in metrics.engines):
        link = _fastest_nic(host, inputs)
    for m in metrics.engines:
        engine = engines.get(m.endpoint.rsplit("/metrics", 1)[0])
        pid = engine.pid if engine else None
        argv = list(argvs[pid] if pid in argvs else engine_argv(host, pid).argv if pid else ())
        item = view(host, engine, m, argv, rdma, link)
        if item is not None:
            items.append(item)
    if not items:
        raise Skip(t("no engine transfers or offloads its KV cache (no --kv-transfer-config, offload flags or series)"))
    return KvTiersRecord(paired(items))


def paired(items: list[EngineKvTiers]) -> tuple[EngineKvTiers, ...]:
    """The items, each NIXL instance with what differs from those it could pair with here."""
    sides = [NixlSide(e.endpoint, e.model, e.kv_role, mode_of(e.kv_connector), e.cache_dtype,
                      e.block_size, e.kv_cache_layout, (e.kv_buffer_device or "").lower() == "cpu",
                      e.nixl_permute) for e in items if e.nixl]
    found = mismatches(sides)
    return tuple(replace(e, nixl_differs="; ".join(found[e.endpoint])[:1000]) if e.endpoint in found else e for e in items)


def summary(record: KvTiersRecord) -> str:
    parts = []
    for e in record.engines:
        bits = []
        if e.kv_connector:
            bits.append(t("{connector} ({role})", connector=e.kv_connector, role=e.kv_role or "?"))
        if e.failed_transfers is not None:
            bits.append(t("{failed:g} failed transfers ({window})", failed=e.failed_transfers,
                          window=e.failed_window))
        if e.cpu_tier_bytes is not None:
            bits.append(t("CPU tier {gib:.1f} GiB", gib=e.cpu_tier_bytes / GIB))
        if e.lm_hit_share is not None and e.lm_lookup_tokens is not None:
            bits.append(t("LMCache found {share:.0%} of {tokens:g} looked-up tokens ({window})",
                          share=e.lm_hit_share, tokens=e.lm_lookup_tokens, window=e.lm_window))
        if e.hit_shares:
            bits.append(t("prompt tokens from cache: {shares}",
                          shares=", ".join(f"{k} {v:.0%}" for k, v in sorted(e.hit_shares.items()))))
        parts.append(f"{e.kind}: " + (t(", ").join(bits) or t("no KV tier figures")))
    return t("; ").join(parts)
