"""The product's public vocabulary: symptom rows and cause ids (../shared/domain.md).

These ids appear in JSON output, metric labels, alerts and reports. Add ids when a new
symptom or cause appears; never rename one. tests/test_vocabulary.py checks this list
against domain.md: its causes, in its order, then llm-doctor's own (OWN_CAUSES).
"""

import difflib

from doctor.i18n import lazy, translated

SYMPTOMS: tuple[str, ...] = (
    "startup-oom",
    "slow-first-token",
    "queueing-under-load",
    "stream-cutoff",
    "multi-gpu-imbalance",
    "garbled-output",
    "slowdown",
    "crash-under-concurrency",
    "low-gpu-utilization",
    "memory-bandwidth-bound",
    "kernel-fragmentation",
    "multi-gpu-slower-than-one",
)

# Each row in the operators' words, as a report heads it (doctor.i18n translates it: the
# Chinese is the seed articles' own words, ../shared/domain.md §1).
SYMPTOM_WORDS: dict[str, str] = {
    "startup-oom": lazy("Out of GPU memory at startup"),
    "slow-first-token": lazy("First token too slow"),
    "queueing-under-load": lazy("Requests queue as soon as concurrency rises"),
    "stream-cutoff": lazy("Generation stops mid-stream"),
    "multi-gpu-imbalance": lazy("Load uneven across GPUs"),
    "garbled-output": lazy("Output garbled or repeating"),
    "slowdown": lazy("Inference suddenly slower, slower the longer it runs"),
    "crash-under-concurrency": lazy("Crashes when concurrent requests pile up"),
    "low-gpu-utilization": lazy("Low GPU compute utilisation"),
    "memory-bandwidth-bound": lazy("GPU memory bandwidth is the limit"),
    "kernel-fragmentation": lazy("Scattered small kernels"),
    "multi-gpu-slower-than-one": lazy("Several GPUs slower than one"),
}


def symptom_words(symptom: str) -> str:
    """A symptom row in the current language's words; an unknown id as it is."""
    return translated(SYMPTOM_WORDS[symptom]) if symptom in SYMPTOM_WORDS else symptom


CAUSES: tuple[str, ...] = (
    "gpu-thermal-throttling",
    "gpu-power-throttling",
    "pcie-link-degraded",
    "pcie-topology-shared-path",
    "pcie-bandwidth-low",
    "gpu-memory-bandwidth-low",
    "gpu-hardware-errors",
    "gpu-memory-held-by-other-process",
    "gpu-persistence-mode-off",
    "host-memory-bandwidth-low",
    "fd-limit-low",
    "process-limit-low",
    "network-backlog-small",
    "swap-active",
    "cpu-powersave-governor",
    "cpu-contention",
    "verbose-logging",
    "kv-cache-pressure",
    "kv-cache-fragmentation",
    "engine-preemption",
    "engine-not-warmed-up",
    "model-on-slow-disk",
    "model-does-not-fit",
    "gpu-memory-no-headroom",
    "context-oversized",
    "batch-token-budget-small",
    "past-throughput-knee",
    "multi-gpu-load-skew",
    "output-repetition",
    "endpoint-unauthenticated",
    "shm-too-small",
    "gpu-p2p-blocked",
    "driver-runtime-mismatch",
    "nvswitch-fabric-down",
    "gpu-lost-in-container",
    "cuda-graphs-disabled",
    "model-offloaded-to-cpu",
    "cpu-quota-throttled",
    "frontend-cpu-bound",
    "too-few-slots",
    "model-reload-thrash",
    "prompt-truncation",
    "model-on-network-fs",
    "memory-cgroup-oom",
    "numa-misplaced",
    "mig-mps-misconfigured",
    "slow-quant-kernel",
    "gpu-power-capped",
    "engine-unreachable",
    # issue 30, net-gdr: GPUDirect RDMA, RDMA's locked memory, the NIC each GPU uses
    "gpudirect-rdma-off",
    "rdma-memlock-low",
    "nic-far-from-gpu",
    # issue 30, net.rdma (checks/net_rdma.toml)
    "rdma-port-down",
    "rdma-link-degraded",
    "rdma-link-errors",
    # the network NCCL and gloo use between hosts (issue 30; checks/net_nccl.toml)
    "nccl-interface-wrong",
    "nccl-ib-disabled",
    "roce-gid-index-wrong",
    "nccl-socket-fallback",
    "nccl-gdr-disabled",
    "nccl-bootstrap-loopback",
    "nccl-init-failed",
    # issue 30, the all-reduce across hosts (checks/net_collective.toml)
    "collective-rank-missing",
    "network-mtu-mismatch",
    "collective-bandwidth-low",
    "collective-slow-host",
    # issue 32, engine.features (checks/engine_features.toml)
    "spec-decode-low-acceptance",
    "lora-adapter-thrash",
    "structured-output-bottleneck",
    # issue 31, decode against the memory-bandwidth ceiling, TTFT taken apart (checks/engine_roofline.toml)
    "decode-at-bandwidth-limit",
    "decode-below-ceiling",
    "ttft-queue-dominated",
    "ttft-prefill-dominated",
    "knee-at-bandwidth-limit",
    "knee-below-bandwidth-ceiling",
    # issue 32: the platforms engines run on (checks/gpu_cdi.toml)
    "cdi-spec-stale",
    "unified-memory-overcommit",
    # issue 32 item 6, engine.cache (checks/engine_cache.toml)
    "engine-cache-ephemeral",
    "engine-cache-disk-full",
    "hf-offline-unset",
    "engine-compile-cache-missed",
    "engine-weights-load-slow",
    # issue 32 item 8, the NVLink domain across trays (checks/gpu_fabric.toml)
    "nvlink-domain-unhealthy",
    "imex-domain-not-ready",
    # issue 32 items 1-2, engine.kv_tiers (checks/engine_kv.toml)
    "kv-transfer-failing",
    "kv-transfer-ucx-tcp",
    "kv-offload-tier-small",
    "kv-offload-hashseed-unset",
    # issue 33, AMD (ROCm) hosts (checks/gpu_amd.toml)
    "numa-balancing-on",
    "iommu-not-passthrough",
    "amd-gpu-ras-errors",
    "amd-xgmi-link-degraded",
    "amd-gfx-unsupported",
    "amd-device-files-missing",
    "amd-partition-layout-mismatch",
    "amd-p2p-fine-grain-off",
    # issue 33, Huawei Ascend NPUs (checks/npu_ascend.toml)
    "npu-health-not-ok",
    "npu-network-port-down",
    "hccl-timeout-low",
    "hccl-interface-wrong",
    "npu-device-files-missing",
    "ascend-version-mismatch",
    "kv-offload-over-memory",
    "kv-offload-over-memlock",
    "kv-transfer-slow",
    "kv-transfer-config-mismatch",
    # an engine that holds requests and produces nothing (checks/engine_progress.toml)
    "engine-stalled",
)

# llm-doctor's own causes, not in domain.md (which lists the domain's): what a doctor of
# the service must say before any of the domain's causes. Each is in CAUSES, after them.
OWN_CAUSES: tuple[str, ...] = (
    "engine-unreachable",  # a named or discovered engine refuses, hangs, or answers as none
    # issue 30, net-gdr
    "gpudirect-rdma-off",  # RDMA devices and GPUs, but no peer-memory module and no dma-buf path
    "rdma-memlock-low",  # an engine on an RDMA host with a finite locked-memory limit
    "nic-far-from-gpu",  # a GPU whose nearest RDMA NIC is across the socket link
    # issue 30, net.rdma
    "rdma-port-down",  # an InfiniBand/RoCE port not ACTIVE, or going down and retraining
    "rdma-link-degraded",  # a port trained below its peers' rate or on fewer lanes
    "rdma-link-errors",  # a port's error counters rising past published rates
    # the network NCCL and gloo use between hosts (issue 30; checks/net_nccl.toml)
    "nccl-interface-wrong",  # NCCL/gloo/Ray/VLLM_HOST_IP on a missing, down or unroutable interface or HCA
    "nccl-ib-disabled",  # NCCL_IB_DISABLE=1 / NCCL_NET=Socket where RDMA ports are up
    "roce-gid-index-wrong",  # NCCL_IB_GID_INDEX names a RoCE v1 or empty GID
    "nccl-socket-fallback",  # NCCL's log: sockets where RDMA was there
    "nccl-gdr-disabled",  # NCCL's log or NCCL_NET_GDR_LEVEL: GPUDirect RDMA not used
    "nccl-bootstrap-loopback",  # NCCL's log: bootstrap on lo in a group across hosts
    "nccl-init-failed",  # NCCL's log: its WARN lines at init
    # issue 30, net.collective (llm-doctor collective)
    "collective-rank-missing",  # a rank of a group across hosts never joined its master
    "network-mtu-mismatch",  # the ranks' interfaces on one path disagree on the MTU
    "collective-bandwidth-low",  # NCCL's busbw across hosts under half the path's line rate
    "collective-slow-host",  # one host slow in every pair of a pairwise all-reduce
    # issue 32, engine.features: serving features that slow the engine when they misfit
    "spec-decode-low-acceptance",  # speculative drafts mostly rejected: each step pays for k
    "lora-adapter-thrash",  # adapters waiting while --max-loras slots are all taken
    "structured-output-bottleneck",  # requests waiting for their grammar to compile
    # issue 31, engine.roofline
    "decode-at-bandwidth-limit",  # decode near bandwidth / bytes a token: an explanation, not a fault
    "decode-below-ceiling",  # decode under half that ceiling: something else sets the pace
    "ttft-queue-dominated",  # most of the time to first token waiting in the engine's queue
    "ttft-prefill-dominated",  # most of it computing the prompt
    "knee-at-bandwidth-limit",  # throughput's knee near what a batch that large can read: an explanation
    "knee-below-bandwidth-ceiling",  # throughput stops well below that: scheduling sets the knee
    # issue 32, gpu.cdi
    "cdi-spec-stale",  # a CDI spec naming another driver's files or GPUs NVML does not list
    # issue 32, gpu.unified_memory
    "unified-memory-overcommit",  # an engine's target over what a unified-memory host has left
    # issue 32 item 6, engine.cache
    "engine-cache-ephemeral",  # a model or compile cache on tmpfs, an emptyDir or a container's overlay
    "engine-cache-disk-full",  # a model or compile cache's filesystem nearly full
    "hf-offline-unset",  # a hub model cached locally, HF_HUB_OFFLINE unset: a restart asks the hub
    "engine-compile-cache-missed",  # two starts in a row compiled cold on a kept compile cache
    "engine-weights-load-slow",  # the engine's weights load far slower than its disk reads them
    # issue 32 item 8, gpu.fabric across trays (GB200 NVL72)
    "nvlink-domain-unhealthy",  # fabric health mask bits set, or one host's GPUs in two cliques/clusters
    "imex-domain-not-ready",  # a multi-node NVLink domain configured, nvidia-imex or its channel missing
    # issue 32 items 1-2, engine.kv_tiers
    "kv-transfer-failing",  # NIXL KV transfers failing between the scrapes: decode may serve partial KV
    "kv-transfer-ucx-tcp",  # UCX_TLS keeps KV transfers on TCP where RDMA ports are up
    "kv-offload-tier-small",  # a CPU KV tier no larger than the GPU's: copies without hits
    "kv-offload-hashseed-unset",  # LMCache, TP > 1, PYTHONHASHSEED unset: workers' keys differ
    # issue 33, AMD (ROCm) hosts
    "numa-balancing-on",  # kernel.numa_balancing on a host serving from AMD GPUs
    "iommu-not-passthrough",  # a translating IOMMU without iommu=pt: RCCL's P2P copies hang
    "amd-gpu-ras-errors",  # uncorrectable ECC errors or HBM pages retired or pending
    "amd-xgmi-link-degraded",  # an xGMI link down or trained below its peers
    "amd-gfx-unsupported",  # a gfx target ROCm does not build for, or an engine not on the GPU
    "amd-device-files-missing",  # AMD GPUs on the PCI bus, no /dev/kfd (driver, or a container's devices)
    "amd-partition-layout-mismatch",  # an engine's tensor-parallel group against CPX/DPX/QPX partitions
    "amd-p2p-fine-grain-off",  # AMD GPUs over PCIe only, HSA_FORCE_FINE_GRAIN_PCIE unset: RCCL without P2P
    # issue 33, Huawei Ascend NPUs (checks/npu_ascend.toml)
    "npu-health-not-ok",  # npu-smi's Health column not OK (Warning, Alarm, Critical)
    "npu-network-port-down",  # an NPU's RoCE port link DOWN or its net health failing (hccn_tool)
    "hccl-timeout-low",  # HCCL_CONNECT_TIMEOUT under HCCL's floor, HCCL_EXEC_TIMEOUT far under its default
    "hccl-interface-wrong",  # HCCL_SOCKET_IFNAME / HCCL_IF_IP on a missing, down or unroutable NIC
    "npu-device-files-missing",  # /dev/davinci<N>, davinci_manager, devmm_svm or hisi_hdc missing
    "ascend-version-mismatch",  # CANN, driver and firmware version files that do not list each other
    "kv-offload-over-memory",  # a pinned CPU KV tier larger than the host has left
    "kv-offload-over-memlock",  # a CPU KV tier registered with RDMA above the memlock limit
    "kv-transfer-slow",  # NIXL transfers far slower than the RDMA link allows for their bytes
    "kv-transfer-config-mismatch",  # a prefill and a decode instance whose KV configuration differs
    "engine-stalled",  # requests running, no token and no finished request between two scrapes
)

# Causes a person must read before any other finding of the same severity: a service that
# is down makes every other figure of it moot (doctor/rules/evaluate.py sorts by this).
FIRST_CAUSES: tuple[str, ...] = ("engine-unreachable", "engine-stalled")


def suggest(word: str, choices) -> str:
    """The hint every message ends with: " (did you mean 'X'?)" for the closest of
    ``choices``, or "" when none is close."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
