"""The GPU probes' metrics (probes/gpu/*.py): labelled gpu, uuid and model_name as
dcgm-exporter's are (gpu, UUID, modelName), the UUID and name joined from gpu.inventory."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import (GBPS, MHZ, MIB, Table, counter, each, gauge, info,
                                        missing, of, unexported)

GPU = L.gpu()
PAIR = L.fields("gpu_a=a", "gpu_b=b")
SENTENCE = "a sentence for people, shown by the scan and kept in its JSON report"

# nvmlClocksEventReasons (nvml.h: nvmlClocksEventReasonGpuIdle 0x1 ... DisplayClockSetting
# 0x100), with the names nvidia-smi -q prints; the same table as probes/gpu/thermal_power.py's
# REASONS (tests/test_exporter_catalog.py holds them together).
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock"),
)


XID_TEXT = (("meaning", "the XID table's text for its code (probes/helpers/xid.py)"),
            ("action", "the XID table's text for its code (probes/helpers/xid.py)"),
            ("line", "the kernel log line: free text with a timestamp"))


def _ceiling(name: str) -> str:
    return f"llm_doctor_gpu_{name}_bytes_per_second"


TABLES = (
    Table("gpu.inventory", (
        gauge("gpu_count", "gpu_devices", "NVIDIA GPUs NVML counts (nvmlDeviceGetCount)"),
        info("", "gpu_driver_info", "The NVIDIA driver (nvmlSystemGetDriverVersion) and the CUDA "
             "version it supports (nvmlSystemGetCudaDriverVersion)",
             driver_version="driver_version", cuda_version="cuda_driver_version"),
        missing("missing", "gpu_driver_value_missing", "gpu.inventory"),
        each("gpus", L.gpu("index", "uuid", "name")),
        info("gpus", "gpu_info", "Each GPU's PCI bus id and compute mode (nvmlDeviceGetPciInfo, "
             "GetComputeMode)", bus_id="bus_id", compute_mode="compute_mode"),
        unexported("gpus.memory_total_mib", "the same nvmlDeviceGetMemoryInfo total as "
                   "gpu.memory's llm_doctor_gpu_memory_total_bytes"),
        gauge("gpus.persistence_mode", "gpu_persistence_mode", "1 when persistence mode is on"),
        gauge("gpus.mig_enabled", "gpu_mig_enabled", "1 when MIG is on (nvmlDeviceGetMigMode)"),
        gauge("gpus.mig_pending", "gpu_mig_pending_enabled", "The MIG mode after the next reset"),
        missing("gpus.missing", "gpu_inventory_value_missing", "gpu.inventory"),
    )),
    Table("gpu.pcie", (
        each("gpus", GPU),
        gauge("gpus.gen_current", "gpu_pcie_link_generation",
              "PCIe generation at rest (nvmlDeviceGetCurrPcieLinkGeneration)"),
        gauge("gpus.width_current", "gpu_pcie_link_width",
              "PCIe lanes at rest (nvmlDeviceGetCurrPcieLinkWidth)"),
        gauge("gpus.gen_max", "gpu_pcie_link_generation_max",
              "Highest generation of GPU and slot together (nvmlDeviceGetMaxPcieLinkGeneration)"),
        gauge("gpus.gen_gpu_max", "gpu_pcie_link_generation_gpu_max",
              "Highest generation of the GPU alone (nvmlDeviceGetGpuMaxPcieLinkGeneration)"),
        gauge("gpus.width_max", "gpu_pcie_link_width_max", "The GPU's lanes (GetMaxPcieLinkWidth)"),
        gauge("gpus.slot_gen_max", "gpu_pcie_slot_generation_max",
              "The upstream port's max_link_speed as a generation (sysfs)"),
        gauge("gpus.slot_width_max", "gpu_pcie_slot_width_max", "The upstream port's max_link_width"),
        counter("gpus.replay_count", "gpu_pcie_replays_total",
                "PCIe link-level retries (nvmlDeviceGetPcieReplayCounter)"),
        gauge("gpus.under_load", "gpu_pcie_read_under_load",
              "1 when the link was also read during a host-to-device copy"),
        gauge("gpus.gen_loaded", "gpu_pcie_link_generation_under_load",
              "Highest generation seen during the copy"),
        gauge("gpus.width_loaded", "gpu_pcie_link_width_under_load", "Fewest lanes seen then"),
        gauge("gpus.slot_limited", "gpu_pcie_slot_limited", "1 when the slot, not the GPU, caps it"),
        gauge("gpus.width_short", "gpu_pcie_width_short",
              "1 when trained narrower than both the GPU and its slot allow"),
        gauge("gpus.gen_low_under_load", "gpu_pcie_generation_low_under_load",
              "1 when below its maximum generation while a transfer ran"),
        gauge("gpus.ceiling_trained_gbps", "gpu_pcie_trained_ceiling_bytes_per_second",
              "One direction's ceiling at the generation and width in use", GBPS),
        gauge("gpus.ceiling_capable_gbps", "gpu_pcie_capable_ceiling_bytes_per_second",
              "One direction's ceiling at the best generation and width GPU and slot allow", GBPS),
        missing("gpus.missing", "gpu_pcie_value_missing", "gpu.pcie"),
        unexported("load_reason", f"why the link was not read under load: {SENTENCE}"),
    )),
    Table("gpu.thermal_power", (
        each("gpus", GPU),
        gauge("gpus.temp_c", "gpu_temperature_celsius", "GPU temperature (nvmlDeviceGetTemperature)"),
        gauge("gpus.slowdown_c", "gpu_slowdown_temperature_celsius",
              "Where the hardware starts cutting clocks (threshold SLOWDOWN)"),
        gauge("gpus.shutdown_c", "gpu_shutdown_temperature_celsius", "Threshold SHUTDOWN"),
        gauge("gpus.max_operating_c", "gpu_max_operating_temperature_celsius", "Threshold GPU_MAX"),
        gauge("gpus.margin_c", "gpu_slowdown_margin_celsius", "Slowdown threshold minus temperature"),
        of("bits", "gpus.reasons_mask", "gpu_clock_event_reason",
           "1 for each clock-event (throttle) reason set now "
           "(nvmlDeviceGetCurrentClocksEventReasons, nvml.h names)", "reason",
           bits=CLOCK_EVENT_REASONS),
        unexported("gpus.reasons", "the names of the bits set in reasons_mask: the reason "
                   "label of llm_doctor_gpu_clock_event_reason"),
        gauge("gpus.thermal_slowdown", "gpu_thermal_slowdown",
              "1 when clocks are cut for heat (sw or hw thermal, or hw slowdown without the brake)"),
        gauge("gpus.power_capped_by_limit", "gpu_power_capped",
              "1 when clocks are held to stay under the power limit (sw_power_cap)"),
        gauge("gpus.power_brake", "gpu_power_brake",
              "1 when the external power brake is asserted (hw_power_brake_slowdown)"),
        gauge("gpus.idle", "gpu_idle", "1 when the GPU is idle (gpu_idle)"),
        gauge("gpus.sm_clock_mhz", "gpu_sm_clock_hertz", "SM clock (nvmlDeviceGetClockInfo)", MHZ),
        gauge("gpus.sm_clock_max_mhz", "gpu_sm_clock_max_hertz",
              "SM clock's maximum (nvmlDeviceGetMaxClockInfo)", MHZ),
        gauge("gpus.mem_clock_mhz", "gpu_memory_clock_hertz", "Memory clock", MHZ),
        gauge("gpus.mem_clock_max_mhz", "gpu_memory_clock_max_hertz", "Memory clock's maximum", MHZ),
        gauge("gpus.power_w", "gpu_power_usage_watts", "Power draw (nvmlDeviceGetPowerUsage)"),
        gauge("gpus.power_limit_w", "gpu_power_limit_watts",
              "Enforced power limit (nvmlDeviceGetEnforcedPowerLimit)"),
        gauge("gpus.power_default_limit_w", "gpu_power_default_limit_watts",
              "The board's default limit (nvmlDeviceGetPowerManagementDefaultLimit)"),
        gauge("gpus.limit_below_default", "gpu_power_limit_below_default",
              "1 when an operator lowered the limit below the default"),
        gauge("gpus.under_load", "gpu_thermal_sampled_under_load",
              "1 when sampled under the level-full matmul load"),
        missing("gpus.missing", "gpu_thermal_power_value_missing", "gpu.thermal_power"),
        unexported("load_reason", f"why there was no load: {SENTENCE}"),
    )),
    Table("gpu.memory", (
        each("gpus", GPU),
        gauge("gpus.total_mib", "gpu_memory_total_bytes", "Memory (nvmlDeviceGetMemoryInfo)", MIB),
        gauge("gpus.used_mib", "gpu_memory_used_bytes", "Memory in use", MIB),
        gauge("gpus.free_mib", "gpu_memory_free_bytes", "Memory free", MIB),
        gauge("gpus.used_by_engines_mib", "gpu_memory_used_by_engines_bytes",
              "Held by serving engines' processes", MIB),
        gauge("gpus.used_by_others_mib", "gpu_memory_used_by_others_bytes",
              "Held by processes that are neither an engine nor llm-doctor", MIB),
        missing("gpus.missing", "gpu_memory_value_missing", "gpu.memory"),
        each("processes", L.gpu_process()),
        gauge("processes.used_mib", "gpu_process_memory_used_bytes",
              "GPU memory each process holds (nvmlDeviceGetComputeRunningProcesses)", MIB),
        gauge("processes.is_llm_doctor", "gpu_process_is_llm_doctor",
              "1 for one of this scan's own kernels"),
        gauge("engine_count", "gpu_memory_engine_processes",
              "Engine processes on this host, holding GPU memory or not"),
    )),
    Table("gpu.errors", (
        each("gpus", GPU),
        unexported("gpus.bus_id", "the GPU's PCI bus id: a label of llm_doctor_gpu_info"),
        gauge("gpus.ecc_enabled", "gpu_ecc_enabled", "1 when ECC is on (nvmlDeviceGetEccMode)"),
        *(counter(f"gpus.ecc_{error}_{scope}", "gpu_ecc_errors_total",
                  "ECC errors (nvmlDeviceGetTotalEccErrors): volatile since the driver loaded, "
                  "aggregate over the card's life", const=(("error", error), ("scope", scope)))
          for error, scope in (("corrected", "volatile"), ("uncorrected", "volatile"),
                               ("uncorrected", "aggregate"))),
        *(counter(f"gpus.remapped_rows_{error}", "gpu_remapped_rows_total",
                  "Memory rows remapped (nvmlDeviceGetRemappedRows), for correctable or "
                  "uncorrectable errors", const=(("error", error),))
          for error in ("corrected", "uncorrected")),
        gauge("gpus.remap_pending", "gpu_row_remap_pending", "1 when a remap waits for a reset"),
        gauge("gpus.remap_failed", "gpu_row_remap_failed", "1 when a remap failed: service the card"),
        gauge("gpus.retired_pages_pending", "gpu_retired_pages_pending",
              "1 when a retired page waits for a reset (pre-Ampere)"),
        each("gpus.xids", L.fields("code", "hardware")),
        of("tally", "gpus.xids", "gpu_xid_events",
           "XID events in the kernel log for this GPU, by code; hardware: the code points at the card"),
        unexported("gpus.xids.bus", "the bus the log line names: the GPU's, whose labels it has"),
        *(unexported(f"{xids}.{f}", why) for xids in ("gpus.xids", "xids_unmatched")
          for f, why in XID_TEXT),
        unexported("gpus.hardware_xids", "the codes of the events with hardware=true: "
                   "llm_doctor_gpu_xid_events' labels"),
        missing("gpus.missing", "gpu_errors_value_missing", "gpu.errors"),
        each("xids_unmatched", L.fields("bus", "code", "hardware")),
        of("tally", "xids_unmatched", "gpu_xid_unmatched_events",
           "XID events for a bus no GPU has now (a GPU that fell off the bus), by bus and code"),
        gauge("xid_watch_s", "gpu_xid_watch_seconds", "Seconds NVML's XID events were watched"),
        unexported("xid_source", f"where XIDs were read, or why they could not be: {SENTENCE}"),
        unexported("xid_watch_reason", f"why XID events were not watched: {SENTENCE}"),
    )),
    Table("gpu.topology", (
        each("gpus", GPU),
        gauge("gpus.numa_node", "gpu_numa_node", "The GPU's NUMA node (nvmlDeviceGetNumaNodeId)"),
        info("gpus", "gpu_cpu_affinity_info", "The CPUs near the GPU (nvmlDeviceGetCpuAffinity)",
             cpus="cpu_affinity"),
        gauge("gpus.nvlinks_up", "gpu_nvlinks_up", "NVLinks in state up"),
        missing("gpus.missing", "gpu_topology_value_missing", "gpu.topology"),
        each("pairs", PAIR),
        info("pairs", "gpu_pair_info", "A GPU pair's common PCIe ancestor (PIX, PXB, PHB, NODE, "
             "SYS: nvmlDeviceGetTopologyCommonAncestor) and P2P read status (ok, or why not)",
             level="level", p2p_read="p2p_read"),
        gauge("pairs.nvlink", "gpu_pair_nvlink", "1 when P2P over NVLink is possible"),
        gauge("pairs.must_talk", "gpu_pair_must_talk",
              "1 when both are in one engine's tensor-parallel group (or no engine is known)"),
        gauge("pairs.shared_root_port", "gpu_pair_shared_root_port",
              "1 when behind one CPU root port with no working P2P"),
        gauge("pairs.crosses_sockets", "gpu_pair_crosses_sockets",
              "1 when their path crosses the inter-socket link (SYS)"),
        missing("pairs.missing", "gpu_pair_value_missing", "gpu.topology pairs"),
        of("members", "talk_group", "gpu_talk_group_member",
           "1 for each GPU in some engine's tensor-parallel group", "gpu"),
        unexported("talk_group_source", f"which engine's group it is: {SENTENCE}"),
    )),
    Table("gpu.kv_alloc", (
        info("", "gpu_kv_alloc_mix_info", "The request-length mix the KV waste is modelled on",
             mix="mix"),
        gauge("mix_requests", "gpu_kv_alloc_mix_requests", "Requests in the mix"),
        gauge("mix_median_tokens", "gpu_kv_alloc_mix_median_tokens", "Their median length, tokens"),
        each("scenarios", L.fields("block_tokens")),
        gauge("scenarios.waste_fraction", "gpu_kv_alloc_block_waste_ratio",
              "Share of reserved KV tokens left empty at this block size (the model)"),
        gauge("scenarios.allocator_overhead_fraction", "gpu_kv_alloc_allocator_overhead_ratio",
              "The torch allocator's overhead at this block size, measured on GPU 0"),
        each("engines", L.engine(pid="pid", kind="engine")),
        info("engines", "gpu_kv_alloc_engine_info", "Each engine's KV allocation: paged or "
             "contiguous, and the setting it came from", scheme="scheme", setting="setting"),
        gauge("engines.block_tokens", "gpu_kv_alloc_engine_block_tokens", "Paged: tokens a block"),
        gauge("engines.reserve_tokens", "gpu_kv_alloc_engine_slot_reserved_tokens",
              "Contiguous: tokens reserved a slot"),
        gauge("engines.waste_fraction", "gpu_kv_alloc_engine_waste_ratio",
              "KV waste on the mix with the engine's setting"),
        gauge("engines.best_waste_fraction", "gpu_kv_alloc_engine_best_waste_ratio",
              "The same with 16-token pages, for comparison"),
        unexported("allocator_reason", f"why the allocator replay did not run: {SENTENCE}"),
    )),
    Table("gpu.bandwidth", (
        each("gpus", L.gpu("index", "name")),
        gauge("gpus.d2d_gbps", "gpu_memory_copy_bytes_per_second",
              "Device-to-device copy, read and write counted", GBPS,
              ceiling=_ceiling("memory_bandwidth_ceiling")),
        gauge("gpus.d2d_ceiling_gbps", "gpu_memory_bandwidth_ceiling_bytes_per_second",
              "Memory clock x 2 x bus width", GBPS),
        gauge("gpus.d2d_ratio", "gpu_memory_copy_of_ceiling_ratio", "The copy over its ceiling"),
        unexported("gpus.d2d_ceiling_source", "the ceiling's arithmetic, for people"),
        *(gauge(f"gpus.{direction}_{memory}_gbps", "gpu_host_copy_bytes_per_second",
                "Host-device copy bandwidth", GBPS, ceiling=_ceiling("host_link_trained_ceiling"),
                const=(("direction", name), ("memory", memory)))
          for direction, name in (("h2d", "host_to_device"), ("d2h", "device_to_host"))
          for memory in ("pinned", "pageable")),
        gauge("gpus.link_gen", "gpu_host_copy_link_generation", "PCIe generation during the copy"),
        gauge("gpus.link_width", "gpu_host_copy_link_width", "PCIe lanes during the copy"),
        gauge("gpus.link_ceiling_trained_gbps", "gpu_host_link_trained_ceiling_bytes_per_second",
              "One direction's ceiling of the link as it ran", GBPS),
        gauge("gpus.link_ceiling_capable_gbps", "gpu_host_link_capable_ceiling_bytes_per_second",
              "One direction's ceiling at max generation x width", GBPS),
        gauge("gpus.h2d_ratio_trained", "gpu_host_copy_of_trained_ceiling_ratio",
              "Pinned host-to-device over the trained link's ceiling"),
        gauge("gpus.h2d_ratio_capable", "gpu_host_copy_of_capable_ceiling_ratio",
              "Pinned host-to-device over the capable link's ceiling"),
        unexported("gpus.cpus", "the CPUs the kernel ran on: the GPU's affinity, "
                   "llm_doctor_gpu_cpu_affinity_info"),
        missing("gpus.missing", "gpu_bandwidth_value_missing", "gpu.bandwidth"),
        each("peers", PAIR),
        gauge("peers.gbps", "gpu_peer_copy_bytes_per_second", "Peer-to-peer copy bandwidth", GBPS),
        gauge("peers.peer_access", "gpu_peer_access", "1 when torch can access the peer"),
        gauge("first_use_s", "gpu_first_use_seconds", "First CUDA operation in a fresh process"),
        gauge("warm_use_s", "gpu_warm_use_seconds", "The same operation once warm"),
        of("keys", "errors", "gpu_bandwidth_measurement_failed",
           "1 for each measurement that failed (the scan says why)", "measurement"),
    )),
)
