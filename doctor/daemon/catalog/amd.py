"""The catalog rows of the AMD probes of issue 33: amd.gpu (probes/amd/gpu.py), each AMD GPU
through AMD SMI, and amd.host (probes/amd/host.py), the host settings ROCm needs. Every
series carries ``vendor="amd"``; the facts NVIDIA's series also give keep their units
(``_celsius``, ``_watts``, ``_hertz``, ``_bytes``)."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import GBPS, Table, each, gauge, info, missing, of, unexported

MIB = 1 << 20
MHZ = 1e6
AMD_GPU = L.fields("gpu=index", "vendor", "bus_id", "model_name=name")

TABLES: tuple[Table, ...] = (
    Table("amd.gpu", (
        unexported("vendor", "the vendor label of every series below"),
        unexported("source", "where the facts came from (amdsmi, or amd-smi's text when the library "
                   "did not load): the same series either way; the scan's summary says it"),
        unexported("source_notes", "the lines of amd-smi's text that were not read: the scan's notes"),
        each("gpus", AMD_GPU),
        info("gpus", "amd_gpu_info", "Each AMD GPU's gfx target (amdsmi_get_gpu_asic_info "
             "target_graphics_version) and partition modes (compute: SPX/DPX/QPX/CPX, memory: NPS1/NPS4)",
             gfx_arch="gfx_arch", compute_partition="compute_partition",
             memory_partition="memory_partition"),
        info("gpus", "amd_gpu_version_info", "Each AMD GPU's driver (amdsmi_get_gpu_driver_info "
             "driver_name, driver_version) and VBIOS/IFWI (amdsmi_get_gpu_vbios_info version, "
             "part_number)", driver="driver_name", driver_version="driver_version",
             vbios_version="vbios_version", vbios_part_number="vbios_part_number"),
        gauge("gpus.temp_c", "amd_gpu_temperature_celsius", "Hotspot (junction) temperature "
              "(amdsmi_get_temp_metric HOTSPOT CURRENT)"),
        gauge("gpus.slowdown_c", "amd_gpu_temperature_slowdown_celsius",
              "Hotspot critical limit (HOTSPOT CRITICAL, hwmon temp2_crit)"),
        gauge("gpus.shutdown_c", "amd_gpu_temperature_shutdown_celsius",
              "Hotspot emergency limit (HOTSPOT EMERGENCY, hwmon temp2_emergency)"),
        gauge("gpus.margin_c", "amd_gpu_temperature_margin_celsius",
              "Critical limit minus the temperature"),
        gauge("gpus.thermal_slowdown", "amd_gpu_thermal_violation",
              "1 while a thermal limit holds the clocks (amdsmi_get_violation_status active_*_thrm)"),
        gauge("gpus.power_capped_by_limit", "amd_gpu_power_violation",
              "1 while the power cap holds the clocks (violation status active_ppt_pwr)"),
        unexported("gpus.idle", "always False: AMD SMI reports no idle reason (the NVIDIA rules' field)"),
        unexported("gpus.power_brake", "always False on AMD (the NVIDIA rules' field)"),
        unexported("gpus.work_seen", "a word for the rules: power at the cap, or the GPU busy"),
        of("members", "gpus.reasons", "amd_gpu_violation_info",
           "An active violation (amdsmi_get_violation_status: socket_thermal, ppt_power...)", "reason"),
        gauge("gpus.util_gpu_pct", "amd_gpu_gfx_activity_ratio", "GFX engine activity "
              "(amdsmi_get_gpu_activity gfx_activity)", 0.01),
        unexported("gpus.under_load", "no load is run on AMD GPUs: True when the GPU was busy at the "
                   "read, a word for the rules (probes/helpers/amd_pcie.py)"),
        unexported("gpus.max_operating_c", "always None: AMD SMI has no such threshold"),
        unexported("gpus.target_c", "always None: AMD SMI has no such threshold"),
        unexported("gpus.margin_source", "a word for the rules: how margin_c was found"),
        gauge("gpus.sm_clock_mhz", "amd_gpu_gfx_clock_hertz", "GFX clock (amdsmi_get_clock_info GFX)", MHZ),
        gauge("gpus.sm_clock_max_mhz", "amd_gpu_gfx_clock_max_hertz", "GFX clock's maximum", MHZ),
        gauge("gpus.mem_clock_mhz", "amd_gpu_memory_clock_hertz", "Memory clock (MEM)", MHZ),
        gauge("gpus.mem_clock_max_mhz", "amd_gpu_memory_clock_max_hertz", "Memory clock's maximum", MHZ),
        gauge("gpus.power_w", "amd_gpu_power_usage_watts", "Socket power (amdsmi_get_power_info)"),
        gauge("gpus.power_limit_w", "amd_gpu_power_cap_watts", "Power cap (amdsmi_get_power_cap_info)"),
        gauge("gpus.power_default_limit_w", "amd_gpu_power_cap_default_watts", "The board's default cap"),
        gauge("gpus.limit_below_default", "amd_gpu_power_cap_lowered", "1 when the cap is below the default"),
        gauge("gpus.total_mib", "amd_gpu_memory_total_bytes", "VRAM (amdsmi_get_gpu_memory_total)", MIB),
        gauge("gpus.used_mib", "amd_gpu_memory_used_bytes", "VRAM in use (amdsmi_get_gpu_memory_usage)", MIB),
        gauge("gpus.gen_current", "amd_gpu_pcie_link_generation", "PCIe generation (from pcie_speed)"),
        gauge("gpus.width_current", "amd_gpu_pcie_link_width", "PCIe lanes"),
        gauge("gpus.gen_max", "amd_gpu_pcie_link_generation_max", "PCIe generation the GPU supports"),
        gauge("gpus.width_max", "amd_gpu_pcie_link_width_max", "PCIe lanes the GPU supports"),
        gauge("gpus.replay_count", "amd_gpu_pcie_replays", "PCIe replays (pcie_replay_count)"),
        gauge("gpus.slot_width_max", "amd_gpu_pcie_slot_width_max", "The upstream port's max_link_width"),
        gauge("gpus.width_short", "amd_gpu_pcie_width_short",
              "1 when the link ran narrower than GPU and slot allow while the GPU was busy"),
        gauge("gpus.gen_low_under_load", "amd_gpu_pcie_generation_low_under_load",
              "1 when the link ran below the generation GPU and slot allow while the GPU was busy"),
        gauge("gpus.ceiling_trained_gbps", "amd_gpu_pcie_trained_ceiling_bytes_per_second",
              "One direction's ceiling at the generation and width read", GBPS),
        gauge("gpus.ceiling_capable_gbps", "amd_gpu_pcie_capable_ceiling_bytes_per_second",
              "One direction's ceiling at the best generation and width GPU and slot allow", GBPS),
        unexported("gpus.gen_loaded", "the generation read while the GPU was busy: "
                   "amd_gpu_pcie_link_generation at that read"),
        unexported("gpus.width_loaded", "the width read while the GPU was busy: "
                   "amd_gpu_pcie_link_width at that read"),
        unexported("gpus.slot_known", "whether slot_width_max could be read: "
                   "llm_doctor_amd_gpu_pcie_slot_width_max is absent when not"),
        unexported("gpus.on_vm", "a fact of the machine: host.cpu's virtual_machine"),
        unexported("gpus.form_factor", "card or module, read from the market name: what the "
                   "fix step may ask hands to do"),
        unexported("gpus.physical_id", "the PCI address without the partition's function digit: "
                   "bus_id says it"),
        gauge("gpus.ecc_corrected", "amd_gpu_ecc_corrected_errors",
              "Correctable ECC errors since the driver loaded (amdsmi_get_gpu_total_ecc_count)"),
        gauge("gpus.ecc_uncorrected", "amd_gpu_ecc_uncorrected_errors", "Uncorrectable ECC errors"),
        gauge("gpus.ecc_deferred", "amd_gpu_ecc_deferred_errors", "Deferred ECC errors"),
        gauge("gpus.bad_pages", "amd_gpu_retired_pages", "HBM pages retired (amdsmi_get_gpu_bad_page_info)"),
        gauge("gpus.bad_pages_pending", "amd_gpu_retired_pages_pending", "Retired pages waiting for a reset"),
        gauge("gpus.xgmi_links_down", "amd_gpu_xgmi_links_down", "xGMI links amdsmi reports down"),
        missing("gpus.missing", "amd_gpu_value_missing", "amd.gpu"),
        gauge("logical_gpus", "amd_gpu_logical_gpus", "GPUs AMD SMI enumerates (an MI300X in CPX is 8)"),
        gauge("physical_gpus", "amd_gpu_physical_gpus",
              "Physical GPUs they are partitions of (PCI addresses without the function digit)"),
        gauge("partitions_per_gpu", "amd_gpu_partitions_per_gpu",
              "Logical GPUs on the physical GPU that has most"),
        gauge("partitions_uneven", "amd_gpu_partitions_uneven",
              "1 when physical GPUs hold different numbers of partitions"),
        unexported("compute_partition", "the physical GPUs' modes: amd_gpu_info's compute_partition per GPU"),
        each("xgmi_links", L.fields("gpu", "link", "peer_bdf")),
        info("xgmi_links", "amd_gpu_xgmi_link_info", "An xGMI link's status (up, down, disabled: "
             "amdsmi_get_gpu_xgmi_link_status)", status="status"),
        gauge("xgmi_links.bit_rate_gbit", "amd_gpu_xgmi_link_speed_bytes_per_second",
              "An xGMI link's rate (amdsmi_get_link_metrics bit_rate, Gb/s, here in bytes)", 1e9 / 8),
        each("processes", L.fields("gpu", "vendor", "pid", "comm=name", "engine")),
        gauge("processes.used_mib", "amd_gpu_process_memory_bytes",
              "VRAM each process holds (amdsmi_get_gpu_process_list memory_usage.vram_mem)", MIB),
        unexported("processes.is_llm_doctor", "llm-doctor's own kernels hold memory only during a scan"),
        unexported("processes.mps_server", "always False on AMD (the NVIDIA rule's field)"),
    )),
    Table("amd.host", (
        info("", "amd_host_info", "The host's ROCm settings: IOMMU mode (off, passthrough, "
             "translated) and its kernel command-line options", vendor="vendor",
             iommu_mode="iommu_mode", iommu_cmdline="iommu_cmdline"),
        info("", "amd_host_rocm_info", "The installed ROCm release (/opt/rocm/.info/version, "
             "else /opt/rocm/core/.info/version)", vendor="vendor", rocm_version="rocm_version"),
        gauge("amd_gpus", "amd_host_pci_gpus", "AMD display or accelerator functions on the PCI bus"),
        of("members", "gfx_targets", "amd_host_gfx_target_info",
           "A gfx target of the KFD topology (gfx_target_version)", "gfx"),
        gauge("numa_balancing", "amd_host_numa_balancing", "/proc/sys/kernel/numa_balancing (0 off)"),
        gauge("iommu_groups", "amd_host_iommu_groups", "Directories in /sys/kernel/iommu_groups"),
        gauge("kfd_present", "amd_host_kfd_present", "1 when /dev/kfd (the ROCm runtime's device) is there"),
        missing("missing", "amd_host_value_missing", "amd.host"),
        gauge("render_nodes", "amd_host_render_nodes", "/dev/dri/renderD* nodes present (one per GPU)"),
        gauge("xgmi_peer_links", "amd_host_xgmi_peer_links",
              "xGMI links between GPU nodes in the KFD topology (each direction; 0 on PCIe-only GPUs)"),
        each("engines", L.fields("pid", "engine", "name")),
        info("engines", "amd_host_engine_rocm_info", "An engine's ROCm environment "
             "(HSA_OVERRIDE_GFX_VERSION, HSA_FORCE_FINE_GRAIN_PCIE)", gfx_override="gfx_override",
             fine_grain_pcie="fine_grain_pcie"),
        gauge("engines.holds_kfd", "amd_host_engine_holds_kfd", "1 when the engine holds /dev/kfd open"),
        gauge("engines.holds_render", "amd_host_engine_holds_render_node",
              "1 when the engine holds a /dev/dri/renderD* node open"),
        gauge("engines.in_gpu_groups", "amd_host_engine_in_gpu_groups",
              "1 when the engine runs as root or in the render or video group"),
        unexported("engines.uid", "the engine's user: in the finding's evidence"),
        gauge("engines.tensor_parallel", "amd_host_engine_tensor_parallel_size",
              "--tensor-parallel-size / -tp / --tp-size"),
        gauge("engines.pipeline_parallel", "amd_host_engine_pipeline_parallel_size",
              "--pipeline-parallel-size / -pp / --pp-size"),
        gauge("engines.visible_gpus", "amd_host_engine_visible_gpus",
              "GPUs its ROCR_, HIP_ or CUDA_VISIBLE_DEVICES lists (the fewest)"),
        unexported("engines.visible_from", "the variable that gave visible_gpus, in the finding"),
        missing("engines.missing", "amd_host_engine_value_missing", "amd.host's engines"),
        unexported("kernel_log_source", "where the kernel log was read, shown by the scan"),
        each("kernel_lines", L.fields("bus", "kind")),
        gauge("kernel_lines.count", "amd_host_kernel_lines", "amdgpu's RAS, reset and ring-timeout "
              "lines in the kernel log, by GPU and kind (probes/helpers/xid.py)"),
        gauge("kernel_lines.hardware", "amd_host_kernel_lines_hardware", "1 when the kind points at the GPU"),
        unexported("kernel_lines.meaning", "a sentence for people, in the finding"),
        unexported("kernel_lines.action", "a sentence for people, in the finding"),
        unexported("kernel_lines.last_line", "a log line, in the finding's evidence"),
    )),
)
