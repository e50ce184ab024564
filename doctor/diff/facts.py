"""Facts from one saved scan: one small extractor per family of probe records.

Each extractor reads a probe's ``data`` (as reports/json_report.to_dict wrote it) and gives
``Reading``s with stable ids: a GPU by its UUID (gpu.inventory), an engine by its kind and
where it listens (``engine[vllm@127.0.0.1:8000]``: a pid does not outlive a restart), a model
by its path. Only what describes the host's state goes in: settings, versions, links and
what the kernels measured. Readings that move every second (temperatures, current clocks,
memory in use by the engine) are left out: they are the scan's business, not the diff's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from doctor.saved_scan import SavedScan
from doctor.diff.model import CONFIG, FLAG, Reading
from doctor.i18n import lazy, t, translated
from doctor.diff.noise import BANDWIDTH, LATENCY, MIB, STORAGE, THROUGHPUT
from doctor.diff.net_facts import net_facts
from doctor.diff.accel_facts import amd_facts, not_recorded as accel_not_recorded, npu_facts

Data = dict[str, Any]


class Records:
    """One side's probe records, by name."""

    def __init__(self, report: SavedScan) -> None:
        self.status: dict[str, str] = {p.name: p.status for p in report.probes}
        self.data: dict[str, Data] = {name: dict(data) for name, data in report.records().items()}
        self.gpu_names = _gpu_names(self.data.get("gpu.inventory", {}))
        self.engine_names = _engine_names(self.data.get("engine.discovery", {}))

    def rows(self, probe: str, key: str) -> list[Data]:
        value = self.data.get(probe, {}).get(key)
        return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []

    def gpu(self, index: Any) -> str:
        return f"gpu[{self.gpu_names.get(as_key(index), f'#{as_key(index)}')}]"

    def engine_of_pid(self, pid: Any, fallback: str) -> str:
        return f"engine[{self.engine_names.get(as_key(pid), fallback)}]"


def as_key(value: Any) -> Any:
    """A record's index or pid as a dict key: a scalar as it is, anything else (a list in a
    hand-made saved scan) as its text."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def _gpu_names(inventory: Data) -> dict[Any, str]:
    names = {}
    for gpu in inventory.get("gpus", []) if isinstance(inventory.get("gpus"), list) else []:
        if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str) and gpu["uuid"]:
            names[as_key(gpu.get("index"))] = gpu["uuid"]
    return names


def engine_name(kind: Any, base_url: Any, model: Any = None) -> str:
    """``vllm@127.0.0.1:8000``: what names an engine across its restarts, its kind and where
    it listens; one that listens nowhere known, by the model it serves
    (``llama.cpp@/models/a.gguf``): two engines of one kind are two names."""
    where = "?"
    if isinstance(base_url, str) and base_url:
        try:
            parts = urlsplit(base_url)
            where = f"{parts.hostname or '?'}:{parts.port or ''}".rstrip(":")
        except ValueError:
            where = "?"
    elif isinstance(model, str) and model:
        where = model
    return f"{kind if isinstance(kind, str) else '?'}@{where}"


def _engine_names(discovery: Data) -> dict[Any, str]:
    names = {}
    for engine in discovery.get("engines", []) if isinstance(discovery.get("engines"), list) else []:
        if isinstance(engine, dict) and engine.get("pid") is not None:
            names[as_key(engine["pid"])] = engine_name(engine.get("kind"), engine.get("base_url"),
                                                       engine.get("model"))
    return names


def _scalar(value: Any) -> Any:
    """A value a fact may hold: a scalar as it is; a list or dict as sorted text (a set of
    flags, a count per governor), so two sides compare as a person reads them."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list):
        return ",".join(sorted(str(_scalar(v)) for v in value))
    if isinstance(value, dict):
        return ",".join(f"{k}={_scalar(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return str(value)


def _fields(prefix: str, family: str, probe: str, row: Data, names: dict[str, str],
            kind: str = CONFIG) -> Iterator[Reading]:
    for key, label in names.items():
        if key in row:
            yield Reading(f"{prefix}.{key}", family, translated(label), _scalar(row[key]), kind, probe,
                          spread=_spread(row, key))


def _spread(row: Data, key: str) -> float | None:
    value = row.get(f"{key}_spread")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


# --------------------------------------------------------------------------- GPU

def gpu_facts(r: Records) -> Iterator[Reading]:
    inventory = r.data.get("gpu.inventory", {})
    for key, label in (("driver_version", lazy("NVIDIA driver version")),
                       ("cuda_driver_version", lazy("CUDA version the driver supports"))):
        if key in inventory:
            short = "version" if key == "driver_version" else "cuda"
            yield Reading(f"gpu.driver.{short}", "gpu", translated(label), _scalar(inventory[key]), CONFIG,
                          "gpu.inventory")
    for gpu in r.rows("gpu.inventory", "gpus"):
        yield from _fields(r.gpu(gpu.get("index")), "gpu", "gpu.inventory", gpu, {
            "name": lazy("model"), "memory_total_mib": lazy("memory, MiB"), "persistence_mode": lazy("persistence mode"),
            "mig_enabled": lazy("MIG mode"), "compute_mode": lazy("compute mode")})
    for gpu in r.rows("gpu.pcie", "gpus"):
        at = r.gpu(gpu.get("index"))
        if "width_current" in gpu:
            yield Reading(f"{at}.pcie.width", "gpu", t("PCIe link width"), _scalar(gpu["width_current"]),
                          CONFIG, "gpu.pcie")
        # gen_current is left out: an idle GPU trains its link down to Gen1 and back
        yield from _fields(f"{at}.pcie", "gpu", "gpu.pcie", gpu, {
            "gen_max": lazy("PCIe generation (link's maximum)"), "width_max": lazy("PCIe width (maximum)"),
            "gen_loaded": lazy("PCIe generation under load"), "width_loaded": lazy("PCIe width under load")})
    for gpu in r.rows("gpu.thermal_power", "gpus"):
        yield from _fields(r.gpu(gpu.get("index")), "gpu", "gpu.thermal_power", gpu, {
            "power_limit_w": lazy("power cap, W"), "sm_clock_max_mhz": lazy("SM clock maximum, MHz"),
            "mem_clock_max_mhz": lazy("memory clock maximum, MHz")})
    for gpu in r.rows("gpu.errors", "gpus"):
        yield from _fields(r.gpu(gpu.get("index")), "gpu", "gpu.errors", gpu, {
            "ecc_enabled": lazy("ECC mode"), "ecc_uncorrected_aggregate": lazy("uncorrected ECC errors (lifetime)"),
            "remapped_rows_corrected": lazy("rows remapped (correctable)"),
            "remapped_rows_uncorrected": lazy("rows remapped (uncorrectable)"),
            "remap_pending": lazy("row remap pending")})
    for gpu in r.rows("gpu.topology", "gpus"):
        yield from _fields(r.gpu(gpu.get("index")), "gpu", "gpu.topology", gpu,
                           {"numa_node": lazy("NUMA node")})
    for pair in r.rows("gpu.topology", "pairs"):
        at = f"gpu.topology[{pair.get('a')}-{pair.get('b')}]"
        yield from _fields(at, "gpu", "gpu.topology", pair, {
            "level": lazy("path between the pair (nvidia-smi topo -m)"), "p2p_read": lazy("P2P read status")})
    yield from _p2p(r)
    yield from _gpu_memory(r)
    for gpu in r.rows("gpu.bandwidth", "gpus"):
        yield from _fields(f"{r.gpu(gpu.get('index'))}.bandwidth", "gpu", "gpu.bandwidth", gpu, {
            "d2d_gbps": lazy("HBM copy (D2D), GB/s"), "h2d_pinned_gbps": lazy("host to GPU (pinned), GB/s"),
            "d2h_pinned_gbps": lazy("GPU to host (pinned), GB/s")}, BANDWIDTH)
    for group in r.rows("gpu.collective", "groups"):
        yield from _fields(f"gpu.collective[{group.get('group')}]", "gpu", "gpu.collective", group,
                           {"busbw_gbps": lazy("all-reduce bus bandwidth, GB/s")}, BANDWIDTH)


def _p2p(r: Records) -> Iterator[Reading]:
    data = r.data.get("gpu.peer_to_peer", {})
    if "iommu_mode" in data:
        yield Reading("gpu.iommu_mode", "gpu", t("IOMMU mode"), _scalar(data["iommu_mode"]), CONFIG,
                      "gpu.peer_to_peer")
    for bridge in r.rows("gpu.peer_to_peer", "bridges"):
        if bridge.get("acs_control") is None and bridge.get("reason"):
            continue  # no ACS capability: nothing a BIOS can turn on
        yield Reading(f"pcie.bridge[{bridge.get('bdf')}].acs", "gpu", t("ACS redirects enabled"),
                      _scalar(bridge.get("enabled") or "none"), CONFIG, "gpu.peer_to_peer")


def _gpu_memory(r: Records) -> Iterator[Reading]:
    for gpu in r.rows("gpu.memory", "gpus"):
        at = r.gpu(gpu.get("index"))
        if "used_by_others_mib" in gpu:
            yield Reading(f"{at}.memory.held_by_others_mib", "gpu",
                          t("memory held by processes other than the engines, MiB"),
                          _scalar(gpu["used_by_others_mib"]), MIB, "gpu.memory")
    if "gpu.memory" in r.data:
        counts: dict[str, int] = {r.gpu(g.get("index")): 0 for g in r.rows("gpu.memory", "gpus")}
        for proc in r.rows("gpu.memory", "processes"):
            if not proc.get("engine") and not proc.get("is_llm_doctor"):
                at = r.gpu(proc.get("gpu"))
                counts[at] = counts.get(at, 0) + 1
        for at, n in counts.items():
            yield Reading(f"{at}.memory.other_processes", "gpu", t("other processes on the GPU"), n,
                          CONFIG, "gpu.memory")


# --------------------------------------------------------------------------- host

# checks/host.toml's host-memory-bandwidth-low: a figure taken while other work kept more
# than a quarter of the kernel's threads busy is contended, and not judged
MAX_OTHER_BUSY_SHARE = 0.25


def _contended(record: Data) -> str:
    busy, threads = record.get("other_busy_cores"), record.get("threads")
    if not isinstance(busy, (int, float)) or isinstance(busy, bool) or not math.isfinite(busy):
        return ""
    cores = threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else 1
    if busy <= MAX_OTHER_BUSY_SHARE * cores:
        return ""
    return t("other work kept {busy:g} of its {cores} threads' cores busy", busy=busy, cores=cores)


SYSCTLS = {"fs_file_max": "fs.file-max", "fs_nr_open": "fs.nr_open",
           "net_core_somaxconn": "net.core.somaxconn",
           "net_ipv4_tcp_max_syn_backlog": "net.ipv4.tcp_max_syn_backlog",
           "net_core_rmem_max_bytes": "net.core.rmem_max", "net_core_wmem_max_bytes": "net.core.wmem_max",
           "vm_swappiness": "vm.swappiness", "vm_overcommit_memory": "vm.overcommit_memory",
           "thp_enabled": lazy("transparent huge pages (enabled)"), "thp_defrag": lazy("transparent huge pages (defrag)")}


def host_facts(r: Records) -> Iterator[Reading]:
    yield from _fields("host.sysctl", "host", "host.sysctl", r.data.get("host.sysctl", {}), SYSCTLS)
    cpu = r.data.get("host.cpu", {})
    yield from _fields("host.cpu", "host", "host.cpu", cpu, {
        "model": lazy("CPU model"), "logical_cpus": lazy("logical CPUs"), "sockets": lazy("sockets"),
        "numa_nodes": lazy("NUMA nodes"), "energy_preference_counts": lazy("energy preference (CPUs each)")})
    if "governor_counts" in cpu:
        given = cpu["governor_counts"] if isinstance(cpu["governor_counts"], dict) else {}
        counts = {g: n for g, n in given.items() if isinstance(n, int) and not isinstance(n, bool)}
        # the governor most CPUs run: one name a person compares, the counts beside it
        top = max(counts, key=lambda g: (counts[g], g)) if counts else None
        yield Reading("host.cpu.governor", "host", t("CPU frequency governor (most CPUs)"), top, CONFIG,
                      "host.cpu")
    yield from _fields("host.memory", "host", "host.memory", r.data.get("host.memory", {}), {
        "total_mib": lazy("memory, MiB"), "swap_total_mib": lazy("swap, MiB"), "huge_pages_total": lazy("huge pages")})
    memory = r.data.get("host.memory", {})
    if "swap_used_mib" in memory:
        yield Reading("host.memory.swap_used_mib", "host", t("swap in use, MiB"),
                      _scalar(memory["swap_used_mib"]), MIB, "host.memory")
    for proc in r.rows("host.limits", "processes"):
        # an engine by its kind and address (engine.discovery's, by pid): two llama-servers
        # are two facts; a process discovery does not list (a worker) by its kind or comm
        who = "shell" if proc.get("role") == "shell" else r.engine_names.get(
            as_key(proc.get("pid")), f"{proc.get('engine') or proc.get('comm')}")
        yield from _fields(f"host.limits[{who}]", "host", "host.limits", proc, {
            "nofile_soft": lazy("open files (soft)"), "nofile_hard": lazy("open files (hard)"),
            "nproc_soft": lazy("processes (soft)"), "memlock_soft_bytes": lazy("locked memory (soft), bytes")})
    stream = r.data.get("host.memory_bandwidth", {})
    busy = _contended(stream)
    for reading in _fields("host.memory_bandwidth", "host", "host.memory_bandwidth", stream, {
            "copy_gbps": lazy("host memory STREAM copy, GB/s"),
            "triad_gbps": lazy("host memory STREAM triad, GB/s")}, BANDWIDTH):
        yield replace(reading, contended=busy)
    for path in r.rows("host.storage", "paths"):
        at = f"model[{path.get('path')}]"
        yield from _fields(at, "host", "host.storage", path, {
            "weights_bytes": lazy("weights, bytes"), "weight_files": lazy("weight files"),
            "fs_type": lazy("file system"), "block_device": lazy("block device"), "rotational": lazy("rotational disk"),
            "network_fs": lazy("network file system")})
        yield from _fields(at, "host", "host.storage", path, {"read_mbps": lazy("weights read, MB/s")}, STORAGE)


# --------------------------------------------------------------------------- engines

ENGINE_FLAGS = {  # the record's field → (its flag, what a person reads)
    "model": ("--model", lazy("model")),
    "gpu_memory_utilization": ("--gpu-memory-utilization", lazy("GPU memory share")),
    "max_num_seqs": ("--max-num-seqs", lazy("sequences at once")),
    "max_num_batched_tokens": ("--max-num-batched-tokens", lazy("tokens per batch")),
    "block_size": ("--block-size", lazy("KV block size")),
    "max_model_len": ("--max-model-len", lazy("context length")),
    "kv_cache_dtype": ("--kv-cache-dtype", lazy("KV cache type")),
    "tensor_parallel_size": ("--tensor-parallel-size", lazy("tensor parallel size")),
    "enforce_eager": ("--enforce-eager", lazy("CUDA graphs off (eager)")),
}


def engine_facts(r: Records) -> Iterator[Reading]:
    for engine in r.rows("engine.discovery", "engines"):
        at = f"engine[{engine_name(engine.get('kind'), engine.get('base_url'), engine.get('model'))}]"
        yield Reading(f"{at}.kind", "engine", t("engine kind"), _scalar(engine.get("kind")), CONFIG,
                      "engine.discovery")
        if engine.get("kind") != "ollama":  # engine.ollama's /api/version is Ollama's, below
            # always yielded: a scan saved before versions were read has none (INCOMPLETE)
            yield Reading(f"{at}.version", "engine", t("engine version (as the engine states it)"),
                          _scalar(engine.get("version")), CONFIG, "engine.discovery")
        for key, (flag, label) in ENGINE_FLAGS.items():
            if key in engine:
                yield Reading(f"{at}.flag.{key}", "engine", translated(label), _scalar(engine[key]), FLAG,
                              "engine.discovery", flag=flag)
        if "api_key_set" in engine:
            yield Reading(f"{at}.api_key_set", "engine", t("API key required"),
                          _scalar(engine["api_key_set"]), CONFIG, "engine.discovery")
    for engine in r.rows("gpu.runtime", "engines"):
        at = r.engine_of_pid(engine.get("pid"), str(engine.get("name") or engine.get("engine")))
        yield from _fields(at, "engine", "gpu.runtime", engine, {
            "torch_version": lazy("torch version"), "torch_cuda": lazy("torch built for CUDA"),
            "runtime_cuda": lazy("CUDA runtime the engine loads")})
        if "nccl" in engine:  # a scan saved before NCCL was read has no field: no fact
            yield Reading(f"{at}.nccl_version", "engine", t("NCCL version the engine loads (libnccl mapped)"),
                          _scalar(engine["nccl"]), CONFIG, "gpu.runtime")
    for engine in r.rows("gpu.numa", "engines"):
        at = r.engine_of_pid(engine.get("pid"), str(engine.get("name") or engine.get("engine")))
        yield from _fields(f"{at}.numa", "engine", "gpu.numa", engine, {
            "gpu_node": lazy("its GPUs' NUMA node"), "cpus_elsewhere": lazy("runs on CPUs of another node"),
            "memory_node": lazy("its memory's NUMA node")})
    for engine in r.rows("engine.container", "engines"):
        at = r.engine_of_pid(engine.get("pid"), str(engine.get("engine")))
        yield from _fields(f"{at}.cgroup", "engine", "engine.container", engine, {
            "cpu_quota_cpus": lazy("CPU quota, CPUs"), "memory_limit_bytes": lazy("memory limit, bytes"),
            "shm_bytes": lazy("/dev/shm size, bytes"), "cgroup_version": lazy("cgroup version")})
    for engine in r.rows("engine.ollama", "engines"):
        yield from _fields(f"engine[{engine_name('ollama', engine.get('base_url'))}]", "engine",
                           "engine.ollama", engine, {
                               "version": lazy("Ollama version (/api/version)"),
                               "num_parallel": "OLLAMA_NUM_PARALLEL", "context_length": "OLLAMA_CONTEXT_LENGTH",
                               "keep_alive": "OLLAMA_KEEP_ALIVE", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE",
                               "flash_attention": "OLLAMA_FLASH_ATTENTION"})
    for engine in r.rows("engine.capacity", "engines"):
        if "config_sha256" in engine and isinstance(engine.get("model_path"), str):
            yield Reading(f"model[{engine['model_path']}].config_hash", "engine",
                          "model's config.json (sha256, 16 hex digits)", _scalar(engine["config_sha256"]),
                          CONFIG, "engine.capacity")
    yield from _argv(r)
    yield from _latency(r)
    yield from _knee(r)
    yield from _roofline(r)


# the spellings whose figure is already a fact (ENGINE_FLAGS, with its meaning and link):
# the argv facts leave them out so one change is one fact
_JUDGED = {flag for flag, _ in ENGINE_FLAGS.values()}
# switches a cause names (links.py): read on every side, None when not given, so that adding
# one is judged as the flag it is (ADDED with its direction), not as a fact one side lacks
ARGV_SWITCHES = ("--disable-custom-all-reduce",)


def argv_flags(argv: list[Any]) -> dict[str, Any]:
    """A command line's flags: ``--flag value`` and ``--flag=value`` as their value (given
    twice: the values joined by a comma), a switch as True; the program and its positional
    arguments as ``program`` and ``args``."""
    words = [w for w in argv if isinstance(w, str)]
    found: dict[str, Any] = {}
    if words:
        found["program"] = words[0]
    positional: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        if not _is_flag(word):
            positional.append(word)
            i += 1
            continue
        name, eq, value = word.partition("=")
        given: Any = value if eq else True
        if not eq and i + 1 < len(words) and not _is_flag(words[i + 1]):
            given, i = words[i + 1], i + 1
        old = found.get(name)
        found[name] = given if old is None else f"{old},{given}"
        i += 1
    if positional:
        found["args"] = " ".join(positional)
    return found


def _is_flag(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False  # a negative number is a value


def _argv(r: Records) -> Iterator[Reading]:
    for command in r.rows("engine.discovery", "argv"):
        if command.get("reason") or not isinstance(command.get("argv"), list):
            continue
        at = r.engine_of_pid(command.get("pid"), f"pid {as_key(command.get('pid'))}")
        flags = argv_flags(command["argv"])
        for name, value in {**dict.fromkeys(ARGV_SWITCHES), **flags}.items():
            if name in _JUDGED:
                continue
            label = {"program": t("the engine's program"), "args": t("its positional arguments")}.get(
                name) or t("flag {name}", name=name)
            yield Reading(f"{at}.argv.{name}", "engine", label, value,
                          CONFIG if name in ("program", "args") else FLAG, "engine.discovery",
                          flag=name)


LATENCIES = {"ttft": lazy("time to first token"), "itl": lazy("inter-token latency"), "e2e": lazy("end-to-end latency")}


def _latency(r: Records) -> Iterator[Reading]:
    for engine in r.rows("engine.metrics", "engines"):
        at = f"engine[{engine_name(engine.get('kind'), engine.get('endpoint'))}]"
        samples = engine.get("latency_requests")
        count = int(samples) if isinstance(samples, (int, float)) and not isinstance(samples, bool) \
            and math.isfinite(samples) else None
        for name, label in LATENCIES.items():
            for p in ("p50", "p95", "p99"):
                key = f"{name}_{p}_s"
                if key in engine:
                    yield Reading(f"{at}.latency.{key}", "engine", t("{label} {p}, s", label=translated(label), p=p),
                                  _scalar(engine[key]), LATENCY, "engine.metrics", samples=count)


def _knee(r: Records) -> Iterator[Reading]:
    for engine in r.rows("engine.load", "engines"):
        if engine.get("knee_status") != "found":
            continue
        at = f"engine[{engine_name(engine.get('kind'), engine.get('base_url'))}]"
        knee = engine.get("knee_concurrency")
        yield Reading(f"{at}.knee.concurrency", "engine", t("concurrency at the knee"), _scalar(knee),
                      CONFIG, "engine.load")
        sweep = engine["sweep"] if isinstance(engine.get("sweep"), list) else []
        at_knee = [p for p in sweep if isinstance(p, dict) and p.get("concurrency") == knee]
        if at_knee:
            yield Reading(f"{at}.knee.output_tokens_per_s", "engine", t("output tokens/s at the knee"),
                          _scalar(at_knee[0].get("output_tokens_per_s")), THROUGHPUT, "engine.load",
                          spread=_spread(at_knee[0], "output_tokens_per_s"))


ROOFLINE = {
    "ceiling_tokens_per_s": lazy("decode ceiling of one sequence (memory bandwidth / bytes a token), tokens/s"),
    "measured_tokens_per_s": lazy("decode speed of one sequence, measured, tokens/s"),
    "efficiency": lazy("decode speed over its memory-bandwidth ceiling"),
    "knee_tokens_per_s": lazy("throughput at the load sweep's knee, all sequences, tokens/s"),
    "knee_ceiling_tokens_per_s": lazy("decode ceiling of a batch as large as the knee, tokens/s"),
    "knee_efficiency": lazy("throughput at the knee over its memory-bandwidth ceiling"),
}


def _roofline(r: Records) -> Iterator[Reading]:
    """engine.roofline's figures: a change of ceiling (fewer bytes, faster memory) or of the
    measured speed at the same ceiling (a setting, contention) tells a different story."""
    for engine in r.rows("engine.roofline", "engines"):
        described = str(engine.get("engine") or "")
        kind, _, rest = described.partition(" at ")
        base = rest.split(" pid ")[0]
        at = f"engine[{engine_name(kind, base if base.startswith('http') else None, engine.get('model'))}]"
        yield from _fields(f"{at}.roofline", "engine", "engine.roofline", engine, ROOFLINE, THROUGHPUT)


EXTRACTORS: tuple[Callable[[Records], Iterator[Reading]], ...] = (gpu_facts, amd_facts, npu_facts,
                                                                  engine_facts, host_facts, net_facts)

# What the issue asks to compare that no probe records yet: named in every diff, so that a
# reader knows the diff is silent about them, not that they are the same.
NOT_RECORDED: tuple[str, ...] = ()


def not_recorded(before: Records, after: Records) -> tuple[str, ...]:
    """NOT_RECORDED, and what the sides' vendors' probes do not record (AMD's versions)."""
    return NOT_RECORDED + tuple(dict.fromkeys(accel_not_recorded(before) + accel_not_recorded(after)))


def readings(report: SavedScan) -> tuple[Records, dict[str, Reading]]:
    records = Records(report)
    found: dict[str, Reading] = {}
    for extract in EXTRACTORS:
        for reading in extract(records):
            found.setdefault(reading.id, reading)  # the first of two GPUs with one UUID wins
    return records, found
