"""The probe registry: one explicit tuple, no import side effects, no plugin scanning."""

from __future__ import annotations

from doctor.model import Level, ProbeSpec
from probes import (
    engine_exposure,
    engine_load,
    engine_output,
    engine_stacks,
    engine_warmup,
    host_cpu,
    host_cpu_load,
    host_limits,
    host_memory,
    host_memory_bandwidth,
    host_storage,
    host_sysctl,
)

PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec(
        name="host.limits",
        level=Level.QUICK,
        description="Open files, processes and locked memory limits of llm-doctor's shell and every engine process",
        reads="/proc/self/limits, /proc/<pid>/limits, /proc/<pid>/cmdline",
        timeout_s=10.0,
        run=host_limits.probe,
        summary=host_limits.summary,
    ),
    ProbeSpec(
        name="host.sysctl",
        level=Level.QUICK,
        description="Kernel settings: file-max, nr_open, listen backlogs, socket buffers, swappiness, overcommit, THP",
        reads="/proc/sys/{fs,net,vm}/..., /sys/kernel/mm/transparent_hugepage/",
        timeout_s=5.0,
        run=host_sysctl.probe,
        summary=host_sysctl.summary,
    ),
    ProbeSpec(
        name="host.cpu",
        level=Level.QUICK,
        description="CPU model, cores, sockets, NUMA nodes, AVX-512/AMX, frequency governor and energy preference, load",
        reads="/proc/cpuinfo, /proc/loadavg, /sys/devices/system/{cpu,node}/",
        timeout_s=10.0,
        run=host_cpu.probe,
        summary=host_cpu.summary,
    ),
    ProbeSpec(
        name="host.cpu_load",
        level=Level.QUICK,
        description="Processes taking the most CPU, sampled over half a second",
        reads="/proc/stat, /proc/<pid>/stat (sampled twice)",
        timeout_s=10.0,
        run=host_cpu_load.probe,
        summary=host_cpu_load.summary,
    ),
    ProbeSpec(
        name="host.memory",
        level=Level.QUICK,
        description="Total and available memory, swap in use",
        reads="/proc/meminfo",
        timeout_s=5.0,
        run=host_memory.probe,
        summary=host_memory.summary,
    ),
    ProbeSpec(
        name="host.storage",
        level=Level.QUICK,
        description="Model weights' filesystem, block device, rotational or not, free space; read throughput (standard: 1 GiB sample, full: up to 16 GiB)",
        reads="/proc/self/mountinfo, /sys/dev/block/, /sys/block/*/queue/rotational, statvfs, the weight files (O_DIRECT)",
        timeout_s=90.0,
        run=host_storage.probe,
        summary=host_storage.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="host.memory_bandwidth",
        level=Level.STANDARD,
        description="STREAM copy and triad on the CPU (torch, numpy fallback) against the DIMMs' ceiling",
        reads="/sys/devices/system/cpu/*/cache/, /proc/meminfo, dmidecode -t memory; runs a micro-kernel",
        timeout_s=180.0,
        run=host_memory_bandwidth.probe,
        summary=host_memory_bandwidth.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="engine.load",
        level=Level.QUICK,
        description="Each engine's running and waiting requests now, its throughput knee measured earlier by 'llm-doctor load', and load across replicas of one model",
        reads="GET /metrics (else llama.cpp /slots) of each engine; ~/.local/state/llm-doctor/knee-<hash>.json",
        timeout_s=15.0,
        run=engine_load.probe,
        summary=engine_load.summary,
    ),
    ProbeSpec(
        name="engine.exposure",
        level=Level.QUICK,
        description="Engines listening on a non-loopback address, and whether they answer without an API key",
        reads="engines' listening sockets (/proc/net/tcp{,6}); GET /v1/models without credentials (over loopback for 0.0.0.0)",
        timeout_s=15.0,
        run=engine_exposure.probe,
        summary=engine_exposure.summary,
    ),
    ProbeSpec(
        name="engine.stacks",
        level=Level.STANDARD,
        description="Share of a Python engine's stack samples in logging, tokenisation and waiting for the GIL (py-spy, ~4 s)",
        reads="py-spy dump --pid PID --json, 20 times (needs ptrace permission)",
        timeout_s=60.0,
        run=engine_stacks.probe,
        summary=engine_stacks.summary,
    ),
    ProbeSpec(
        name="engine.warmup",
        level=Level.STANDARD,
        description="First requests against steady-state TTFT and inter-token latency (up to 15 streamed requests of varied length), and the engine's uptime",
        reads="POST /v1/completions (streamed, 16 tokens each); /proc/<pid>/stat, /proc/uptime",
        timeout_s=60.0,
        run=engine_warmup.probe,
        summary=engine_warmup.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="engine.output",
        level=Level.STANDARD,
        description="Whether sampled output degenerates into repetition (3 streamed answers of 96 tokens, the engine's own sampling)",
        reads="POST /v1/completions (streamed)",
        timeout_s=60.0,
        run=engine_output.probe,
        summary=engine_output.summary,
        exclusive=True,
    ),
)


def by_name() -> dict[str, ProbeSpec]:
    return {spec.name: spec for spec in PROBES}


# Serving engines (issue 7): discovery, /metrics, KV cache. Appended; see probes/engine_*.py.
from probes import engine_discovery, engine_kv, engine_metrics  # noqa: E402

PROBES += (
    ProbeSpec(
        name="engine.discovery",
        level=Level.QUICK,
        description="Serving engines from the process table and --endpoint URLs, with their configuration",
        reads="/proc/<pid>/cmdline, /proc/net/tcp{,6}; GET /metrics, /v1/models, /server_info, /info, /props, /api/ps",
        timeout_s=20.0,
        run=engine_discovery.probe,
        summary=engine_discovery.summary,
    ),
    ProbeSpec(
        name="engine.metrics",
        level=Level.QUICK,
        description="Each engine's /metrics scraped twice: KV use, queue, preemptions, token rates, TTFT/ITL/e2e p50-p99",
        reads="GET <engine>/metrics twice, 2-5 s apart (bounded: 3 s, 8 MiB a page)",
        timeout_s=30.0,
        run=engine_metrics.probe,
        summary=engine_metrics.summary,
    ),
    ProbeSpec(
        name="engine.kv_cache",
        level=Level.QUICK,
        description="KV-cache pressure, preemption rate, block-size waste for the request-length mix, recommended block size",
        reads="engine.metrics and engine.discovery (no extra reads)",
        timeout_s=35.0,
        run=engine_kv.probe,
        summary=engine_kv.summary,
    ),
)

from probes import engine_capacity  # noqa: E402

PROBES += (
    ProbeSpec(
        name="engine.capacity",
        level=Level.QUICK,
        description="Each engine's model at its configured context against its GPUs' memory (the plan command's arithmetic)",
        reads="<model_path>/config.json, NVML nvmlDeviceGetMemoryInfo(0), engine.discovery",
        timeout_s=25.0,
        run=engine_capacity.probe,
        summary=engine_capacity.summary,
    ),
)

# GPU probes (issue 6). Appended to the tuple above so the host probes keep their order.
from probes import (  # noqa: E402
    gpu_errors,
    gpu_inventory,
    gpu_memory,
    gpu_pcie,
    gpu_thermal_power,
    gpu_topology,
)

PROBES = PROBES + (
    ProbeSpec(
        name="gpu.inventory",
        level=Level.QUICK,
        description="NVIDIA GPUs: model, UUID, bus id, driver and CUDA versions, memory, persistence mode, MIG",
        reads="NVML: nvmlSystemGetDriverVersion, nvmlDeviceGetName/UUID/PciInfo/MemoryInfo/PersistenceMode/MigMode",
        timeout_s=15.0,
        run=gpu_inventory.probe,
        summary=gpu_inventory.summary,
    ),
    ProbeSpec(
        name="gpu.pcie",
        level=Level.QUICK,
        description="Each GPU's PCIe generation and width, as trained and as capable, read during a host-to-device copy (standard)",
        reads="NVML: nvmlDeviceGetCurr/MaxPcieLinkGeneration/Width, GetPcieReplayCounter; /sys/bus/pci/devices/<bdf> upstream port max_link_speed/width; a 1 s copy per GPU (child process)",
        timeout_s=180.0,  # per GPU: a child's torch import and CUDA context (~5-10 s cold) and 1 s of copies
        run=gpu_pcie.probe,
        summary=gpu_pcie.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="gpu.topology",
        level=Level.QUICK,
        description="GPU pairs: common PCIe ancestor (PIX/PXB/PHB/NODE/SYS), NVLink, P2P, NUMA node and CPU affinity",
        reads="NVML: nvmlDeviceGetTopologyCommonAncestor, GetP2PStatus, GetNvLinkState, GetNumaNodeId, GetCpuAffinity; engines' --tensor-parallel-size",
        timeout_s=20.0,
        run=gpu_topology.probe,
        summary=gpu_topology.summary,
    ),
    ProbeSpec(
        name="gpu.thermal_power",
        level=Level.QUICK,
        description="Temperatures against slowdown/shutdown thresholds, clock-event reasons, clocks and power against limits (full: under load)",
        reads="NVML: nvmlDeviceGetTemperature/Threshold, GetCurrentClocksEventReasons, GetClockInfo, GetPowerUsage, GetEnforcedPowerLimit; full: a 30 s matmul load (child process)",
        timeout_s=150.0,  # level full: 30 s of load, the child's start and its CUDA context
        run=gpu_thermal_power.probe,
        summary=gpu_thermal_power.summary,
        exclusive=True,  # its level-full load must not run beside the CPU sampling
    ),
    ProbeSpec(
        name="gpu.memory",
        level=Level.QUICK,
        description="GPU memory used and total, and the processes holding it, engine or not",
        reads="NVML: nvmlDeviceGetMemoryInfo, GetComputeRunningProcesses; /proc/<pid>/comm, cmdline",
        timeout_s=15.0,
        run=gpu_memory.probe,
        summary=gpu_memory.summary,
    ),
    ProbeSpec(
        name="gpu.errors",
        level=Level.QUICK,
        description="ECC errors, remapped rows or retired pages (pending, failed), XID events from the kernel log",
        reads="NVML: nvmlDeviceGetEccMode, GetTotalEccErrors, GetRemappedRows, GetRetiredPagesPendingStatus; dmesg or /var/log/kern.log; standard: NVML XID events for 2 s",
        timeout_s=15.0,
        run=gpu_errors.probe,
        summary=gpu_errors.summary,
    ),
)

from probes import gpu_bandwidth, gpu_kv_alloc  # noqa: E402

PROBES = PROBES + (
    ProbeSpec(
        name="gpu.kv_alloc",
        level=Level.QUICK,
        description="KV-cache waste of each engine's allocation (block size, per-slot reservations) on a request-length mix; standard: the GPU allocator's overhead",
        reads="engines' --block-size / --page-size / -c -np; standard: a torch allocator replay on GPU 0 (child process)",
        timeout_s=90.0,
        run=gpu_kv_alloc.probe,
        summary=gpu_kv_alloc.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="gpu.bandwidth",
        level=Level.STANDARD,
        description="Device-memory, host<->device (pinned, pageable) and peer-to-peer copy bandwidth, each against its ceiling; first-use cost",
        reads="NVML max memory clock, bus width, PCIe max generation/width, CPU affinity; torch copy kernels in child processes",
        timeout_s=300.0,
        run=gpu_bandwidth.probe,
        summary=gpu_bandwidth.summary,
        exclusive=True,
    ),
)
