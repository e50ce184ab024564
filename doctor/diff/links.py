"""What each fact bears on: the cause ids (../shared/domain.md, doctor.vocabulary) a change of
it can explain, and which way of changing is the bad one.

A fact's template is its id with each bracketed name as ``[*]`` (``gpu[GPU-1…].pcie.width`` →
``gpu[*].pcie.width``). ``better`` says which way is good: ``higher``, ``lower``, or a value
the good side holds (``False``: the flag off). A fact with causes but no ``better`` (a driver
version) bears on them without a known good way: the diff names it, and does not call it
worse. tests/test_diff_links.py checks every cause here is in the vocabulary.
"""

from __future__ import annotations

import re
from typing import Any

from doctor.values import is_number

_NAMED = re.compile(r"\[[^\]]*\]")


class Good:
    """The good side of a fact that has one."""

    HIGHER, LOWER = "higher", "lower"

    def __init__(self, way: str, value: Any = None) -> None:
        self.way, self.value = way, value

    def direction(self, before: Any, after: Any) -> str:
        """worse | better | "" for a change from ``before`` to ``after``."""
        if self.way in (self.HIGHER, self.LOWER):
            if not is_number(before) or not is_number(after) or before == after:
                return ""
            up = after > before
            return "better" if up == (self.way == self.HIGHER) else "worse"
        was, now = _truthy(before) == _truthy(self.value), _truthy(after) == _truthy(self.value)
        if self.way == "is" and isinstance(self.value, str):
            was, now = before == self.value, after == self.value
        if was == now:
            return ""
        return "better" if now else "worse"


def _truthy(value: Any) -> bool:
    return bool(value) and value not in ("", "none", "off")


HIGHER, LOWER = Good(Good.HIGHER), Good(Good.LOWER)
OFF = Good("is", False)  # the good side is off, unset or empty

# template → (causes, good way or None)
LINKS: dict[str, tuple[tuple[str, ...], Good | None]] = {
    "gpu.driver.version": (("driver-runtime-mismatch",), None),
    "gpu.driver.cuda": (("driver-runtime-mismatch",), None),
    "gpu[*].name": ((), None),
    "gpu[*].pcie.width": (("pcie-link-degraded", "pcie-bandwidth-low"), HIGHER),
    "gpu[*].pcie.width_max": (("pcie-link-degraded",), HIGHER),
    "gpu[*].pcie.gen_max": (("pcie-link-degraded", "pcie-bandwidth-low"), HIGHER),
    "gpu[*].pcie.gen_loaded": (("pcie-link-degraded",), HIGHER),
    "gpu[*].pcie.width_loaded": (("pcie-link-degraded",), HIGHER),
    "gpu[*].power_limit_w": (("gpu-power-capped", "gpu-power-throttling"), HIGHER),
    "gpu[*].sm_clock_max_mhz": (("gpu-power-capped",), HIGHER),
    "gpu[*].mem_clock_max_mhz": (("gpu-memory-bandwidth-low",), HIGHER),
    "gpu[*].persistence_mode": (("gpu-persistence-mode-off",), Good("is", True)),
    "gpu[*].mig_enabled": (("mig-mps-misconfigured",), None),
    "gpu[*].compute_mode": (("mig-mps-misconfigured",), None),
    "gpu[*].ecc_enabled": (("gpu-hardware-errors",), None),
    "gpu[*].ecc_uncorrected_aggregate": (("gpu-hardware-errors",), LOWER),
    "gpu[*].remapped_rows_corrected": (("gpu-hardware-errors",), LOWER),
    "gpu[*].remapped_rows_uncorrected": (("gpu-hardware-errors",), LOWER),
    "gpu[*].remap_pending": (("gpu-hardware-errors",), OFF),
    "gpu[*].numa_node": (("numa-misplaced",), None),
    "gpu[*].memory.held_by_others_mib": (("gpu-memory-held-by-other-process",), LOWER),
    "gpu[*].memory.other_processes": (("gpu-memory-held-by-other-process",), LOWER),
    "gpu[*].bandwidth.d2d_gbps": (("gpu-memory-bandwidth-low",), HIGHER),
    "gpu[*].bandwidth.h2d_pinned_gbps": (("pcie-bandwidth-low", "pcie-link-degraded"), HIGHER),
    "gpu[*].bandwidth.d2h_pinned_gbps": (("pcie-bandwidth-low", "pcie-link-degraded"), HIGHER),
    "gpu.topology[*].level": (("pcie-topology-shared-path", "gpu-p2p-blocked"), None),
    "gpu.topology[*].p2p_read": (("gpu-p2p-blocked",), Good("is", "ok")),
    "gpu.iommu_mode": (("gpu-p2p-blocked",), None),
    "pcie.bridge[*].acs": (("gpu-p2p-blocked",), OFF),
    "gpu.collective[*].busbw_gbps": (("gpu-p2p-blocked", "pcie-topology-shared-path"), HIGHER),
    "host.sysctl.vm_swappiness": (("swap-active",), LOWER),
    "host.sysctl.fs_file_max": (("fd-limit-low",), HIGHER),
    "host.sysctl.fs_nr_open": (("fd-limit-low",), HIGHER),
    "host.sysctl.net_core_somaxconn": (("network-backlog-small",), HIGHER),
    "host.sysctl.net_ipv4_tcp_max_syn_backlog": (("network-backlog-small",), HIGHER),
    "host.memory.swap_used_mib": (("swap-active",), LOWER),
    "host.memory.swap_total_mib": (("swap-active",), None),
    "host.cpu.governor": (("cpu-powersave-governor",), Good("is", "performance")),
    "host.limits[*].nofile_soft": (("fd-limit-low",), HIGHER),
    "host.limits[*].nproc_soft": (("process-limit-low",), HIGHER),
    "host.memory_bandwidth.triad_gbps": (("host-memory-bandwidth-low",), HIGHER),
    "host.memory_bandwidth.copy_gbps": (("host-memory-bandwidth-low",), HIGHER),
    "model[*].read_mbps": (("model-on-slow-disk",), HIGHER),
    "model[*].rotational": (("model-on-slow-disk",), OFF),
    "model[*].network_fs": (("model-on-network-fs",), OFF),
    # another config at the same path is another model (or a changed max_position_embeddings,
    # rope scaling, dtype): it bears on what the engine can hold, no way of it is the good one
    "model[*].config_hash": (("context-oversized", "kv-cache-pressure"), None),
    "engine[*].flag.enforce_eager": (("cuda-graphs-disabled",), OFF),
    # flags of the whole argv that a cause names (../shared/domain.md)
    "engine[*].argv.--disable-custom-all-reduce": (("gpu-p2p-blocked",), OFF),
    "engine[*].flag.gpu_memory_utilization": (("gpu-memory-no-headroom", "kv-cache-pressure"), None),
    "engine[*].flag.max_num_seqs": (("too-few-slots",), None),
    "engine[*].flag.max_num_batched_tokens": (("batch-token-budget-small",), HIGHER),
    "engine[*].flag.max_model_len": (("context-oversized", "prompt-truncation"), None),
    "engine[*].flag.block_size": (("kv-cache-fragmentation",), None),
    "engine[*].flag.kv_cache_dtype": (("kv-cache-pressure",), None),
    "engine[*].flag.tensor_parallel_size": (("multi-gpu-load-skew",), None),
    # a new engine release brings its own torch and CUDA runtime (the upgrade regressions of
    # the engines' trackers): named at warning, worse only by what was measured with it
    "engine[*].version": (("driver-runtime-mismatch",), None),
    "engine[*].torch_version": (("driver-runtime-mismatch",), None),
    "engine[*].runtime_cuda": (("driver-runtime-mismatch",), None),
    # no cause of the vocabulary is a NCCL release: the change is named, bearing on none
    "engine[*].nccl_version": ((), None),
    "engine[*].numa.cpus_elsewhere": (("numa-misplaced",), OFF),
    "engine[*].cgroup.cpu_quota_cpus": (("cpu-quota-throttled",), HIGHER),
    "engine[*].cgroup.memory_limit_bytes": (("memory-cgroup-oom",), HIGHER),
    "engine[*].cgroup.shm_bytes": (("shm-too-small",), HIGHER),
    "engine[*].num_parallel": (("too-few-slots",), HIGHER),
    "engine[*].context_length": (("prompt-truncation",), None),
    "engine[*].keep_alive": (("model-reload-thrash",), None),
    "engine[*].kv_cache_type": (("kv-cache-pressure",), None),
    "engine[*].knee.output_tokens_per_s": (("past-throughput-knee",), HIGHER),
    "engine[*].knee.concurrency": (("past-throughput-knee",), HIGHER),
    # issue 30, net.rdma (doctor/diff/net_facts.py)
    "rdma[*].state": (("rdma-port-down",), Good("is", "ACTIVE")),
    "rdma[*].rate_gbits": (("rdma-link-degraded",), HIGHER),
    "rdma[*].width": (("rdma-link-degraded",), HIGHER),
    "rdma[*].link_layer": ((), None),
    "rdma[*].netdev_mtu": ((), None),
    # issue 30, net.collective (llm-doctor collective's saved scan)
    "collective[*].busbw_gbps": (("collective-bandwidth-low", "collective-slow-host"), HIGHER),
    "collective[*].ratio": (("collective-bandwidth-low",), HIGHER),
    "collective[*].outcome": (("collective-rank-missing", "nccl-interface-wrong"),
                              Good("is", "ok")),
    "collective[*].interface": (("nccl-interface-wrong",), None),
    "collective[*].mtu": (("network-mtu-mismatch",), None),
    # issue 33, AMD GPUs (doctor/diff/accel_facts.py): NVIDIA's facts under AMD's names
    "amd.gpu[*].gfx_arch": (("amd-gfx-unsupported",), None),
    "amd.gpu[*].power_limit_w": (("gpu-power-capped", "gpu-power-throttling"), HIGHER),
    "amd.gpu[*].sm_clock_max_mhz": (("gpu-power-capped",), HIGHER),
    "amd.gpu[*].mem_clock_max_mhz": (("gpu-memory-bandwidth-low",), HIGHER),
    "amd.gpu[*].pcie.width": (("pcie-link-degraded", "pcie-bandwidth-low"), HIGHER),
    "amd.gpu[*].pcie.width_max": (("pcie-link-degraded",), HIGHER),
    "amd.gpu[*].pcie.gen_max": (("pcie-link-degraded", "pcie-bandwidth-low"), HIGHER),
    "amd.gpu[*].ecc_uncorrected": (("amd-gpu-ras-errors",), LOWER),
    "amd.gpu[*].bad_pages": (("amd-gpu-ras-errors",), LOWER),
    "amd.gpu[*].bad_pages_pending": (("amd-gpu-ras-errors",), LOWER),
    "amd.gpu[*].xgmi_links_down": (("amd-xgmi-link-degraded",), LOWER),
    "amd.gpu[*].xgmi[*].status": (("amd-xgmi-link-degraded",), Good("is", "up")),
    "amd.gpu[*].xgmi[*].bit_rate_gbit": (("amd-xgmi-link-degraded",), HIGHER),
    "amd.gpu[*].memory.other_processes": (("gpu-memory-held-by-other-process",), LOWER),
    # a partition mode is the engine's layout to match, no mode is the good one
    "amd.gpu[*].compute_partition": ((), None),
    "amd.gpu[*].memory_partition": ((), None),
    "amd.host.gpus": ((), HIGHER),
    "amd.host.gfx_targets": (("amd-gfx-unsupported",), None),
    "amd.host.numa_balancing": (("numa-balancing-on",), OFF),
    "amd.host.iommu_mode": (("iommu-not-passthrough",), Good("is", "passthrough")),
    "amd.host.iommu_cmdline": (("iommu-not-passthrough",), None),
    "amd.host.kfd_present": (("amd-device-files-missing",), Good("is", True)),
    # the ROCm release decides which gfx targets its libraries are built for (a release drops
    # or adds targets); the amdgpu driver and a board's VBIOS bear on no cause llm-doctor
    # names: they are named as changes, without a cause
    "amd.host.rocm_version": (("amd-gfx-unsupported",), None),
    "amd.driver.version": ((), None),
    "amd.gpu[*].vbios.version": ((), None),
    # issue 33, Huawei Ascend NPUs
    "npu[*].health": (("npu-health-not-ok",), Good("is", "OK")),
    "npu[*].memory.other_processes": (("gpu-memory-held-by-other-process",), LOWER),
    "npu[*].ecc_uncorrected_aggregate": (("gpu-hardware-errors",), LOWER),
    "npu[*].isolated_pages_uncorrected": (("gpu-hardware-errors",), LOWER),
    "npu[*].isolated_pages_corrected": (("gpu-hardware-errors",), LOWER),
    "npu.driver.version": (("ascend-version-mismatch",), None),
    "npu.driver.innerversion": (("ascend-version-mismatch",), None),
    "npu.firmware.version": (("ascend-version-mismatch",), None),
    "npu.firmware.fits_driver": (("ascend-version-mismatch",), Good("is", True)),
    "npu.cann[*].version": (("ascend-version-mismatch",), None),
    "npu.cann[*].innerversion": (("ascend-version-mismatch",), None),
    "npu.cann[*].fits_driver": (("ascend-version-mismatch",), Good("is", True)),
    "npu.device_file[*].present": (("npu-device-files-missing",), Good("is", True)),
    "npu.port[*].link": (("npu-network-port-down",), Good("is", "UP")),
    "npu.port[*].net_health": (("npu-network-port-down",), Good("is", "Success")),
    "npu.port[*].address": (("hccl-interface-wrong",), None),
    # HCCL's variables in an engine's environment: a connect timeout below 120 s fails ranks
    # that start late; an exec timeout of 0 waits for ever, so its good way is not "higher"
    "engine[*].hccl.HCCL_CONNECT_TIMEOUT": (("hccl-timeout-low",), HIGHER),
    "engine[*].hccl.HCCL_EXEC_TIMEOUT": (("hccl-timeout-low",), None),
    "engine[*].hccl.HCCL_SOCKET_IFNAME": (("hccl-interface-wrong",), None),
    "engine[*].hccl.HCCL_IF_IP": (("hccl-interface-wrong",), None),
}
# The engine's latency percentiles: lower is better; they bear on no one cause, they are the
# symptom the other changes explain.
for _name in ("ttft", "itl", "e2e"):
    for _p in ("p50", "p95", "p99"):
        LINKS[f"engine[*].latency.{_name}_{_p}_s"] = ((), LOWER)


def template(fact_id: str) -> str:
    return _NAMED.sub("[*]", fact_id)


def link(fact_id: str) -> tuple[tuple[str, ...], Good | None]:
    return LINKS.get(template(fact_id), ((), None))
