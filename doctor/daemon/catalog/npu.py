"""The Huawei Ascend probes' metrics (probes/npu/*.py, issue 33), each series labelled with
``vendor="huawei"`` and the chip (``npu``: its place in npu-smi's table, ``npu_id``,
``chip_id``, ``model_name``): npu-smi's MB read as MiB, its W, °C and % converted to base
units. The vendor-neutral ``gpu_*`` series of the same facts are the lead's join (issue 33's
report lists which fields match which gpu.* row).
"""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import MIB, Table, each, gauge, info, missing, of, unexported

CHIP = L.fields("vendor", "npu=index", "npu_id", "chip_id", "model_name=name")
CHIP_ONLY = L.fields("vendor", "npu=index", "npu_id", "chip_id")
PROCESS = L.fields("vendor", "npu=index", "npu_id", "chip_id", "pid", "comm=name", "engine")
PORT = L.fields("vendor", "device", "npu_id", "chip_id")
NODE = L.fields("path", "role")
ENGINE = L.fields("engine", "kind", "pid")
CHECK = L.fields("engine", "pid", "variable")
PACKAGE = L.fields("kind", "path")

TABLES = (
    Table("npu.devices", (
        info("", "npu_smi_info", "npu-smi's version (the driver package's)",
             vendor="vendor", version="smi_version"),
        each("chips", CHIP),
        info("chips", "npu_chip_info", "An Ascend chip's bus id, Phy-ID and the health word "
             "npu-smi prints (OK, Warning, Alarm, Critical)", bus_id="bus_id", phy_id="phy_id",
             health="health"),
        gauge("chips.temp_c", "npu_temperature_celsius", "Chip temperature (npu-smi Temp(C))"),
        gauge("chips.power_w", "npu_power_watts", "Power (npu-smi Power(W))"),
        gauge("chips.aicore_util_pct", "npu_aicore_utilization_ratio",
              "Share of time the AI cores were busy (npu-smi AICore(%))", 0.01),
        gauge("chips.memory_used_mib", "npu_memory_used_bytes",
              "Device memory in use: HBM-Usage where the chip has HBM, else Memory-Usage", MIB),
        gauge("chips.memory_total_mib", "npu_memory_total_bytes", "Device memory", MIB),
        unexported("chips.memory_kind", "HBM or DDR: a word; the help of the memory series says it"),
        unexported("chips.health_error_code", "npu-smi -t health's code: the finding shows it"),
        unexported("chips.health_error_info", "a sentence: the finding shows it"),
        missing("chips.missing", "npu_value_missing", "npu.devices"),
        each("processes", PROCESS),
        unexported("processes.index", "the npu label says it"),
        unexported("processes.visible", "whether /proc/<pid> was seen: the engine label is empty when not"),
        unexported("processes.gpu", "the npu label says it (gpu.memory's name for the rules)"),
        unexported("processes.is_llm_doctor", "always false on an NPU"),
        unexported("processes.mps_server", "always false on an NPU"),
        each("visible_processes", PROCESS),
        *(unexported(f"visible_processes.{f}", "the processes' series say it: these are those whose pid this scan sees")
          for f in ("vendor", "npu_id", "chip_id", "index", "pid", "name", "used_mib", "visible",
                    "engine", "gpu", "is_llm_doctor", "mps_server")),
        gauge("processes.used_mib", "npu_process_memory_used_bytes",
              "Device memory each process holds (npu-smi's process table)", MIB),
        unexported("problems", "table lines npu-smi printed that could not be read: the scan shows them"),
    )),
    Table("npu.network", (
        unexported("vendor", "the vendor label of every npu series"),
        each("ports", PORT),
        info("ports", "npu_port_info", "An NPU port's link state, net health and address "
             "(hccn_tool -link, -net_health, -ip)", link="link", net_health="net_health",
             address="address"),
        unexported("ports.vendor", "a label"),
        unexported("ports.link_reason", "why hccn_tool gave no link state: the scan shows it"),
        unexported("ports.net_health_reason", "why no net health: the scan shows it"),
        unexported("ports.netmask", "the address's mask: the finding shows it"),
        unexported("ports.address_reason", "why no address: the scan shows it"),
    )),
    Table("npu.errors", (
        unexported("vendor", "the vendor label of every npu series"),
        each("chips", CHIP_ONLY),
        unexported("chips.vendor", "a label"),
        *(gauge(f"chips.ecc_{kind}_{scope}", "npu_hbm_ecc_errors",
                "HBM ECC errors (npu-smi info -t ecc): single-bit corrected, double-bit "
                "uncorrected; volatile is the count without 'Aggregate', aggregate the 'Aggregate "
                "Total' one", const=(("error", kind), ("scope", scope)))
          for kind in ("corrected", "uncorrected") for scope in ("volatile", "aggregate")),
        *(gauge(f"chips.isolated_pages_{kind}", "npu_hbm_isolated_pages",
                "HBM pages isolated after ECC errors (npu-smi info -t ecc)",
                const=(("error", kind),)) for kind in ("corrected", "uncorrected")),
        missing("chips.missing", "npu_errors_value_missing", "npu.errors"),
    )),
    Table("npu.topology", (
        unexported("vendor", "the vendor label of every npu series"),
        each("pairs", L.fields("a", "b")),
        info("pairs", "npu_pair_link_info", "How two Ascend NPUs are connected "
             "(npu-smi info -t topo: HCCS, PIX, PXB, PHB, SYS, NA)", link="link"),
        each("affinity", L.fields("npu")),
        info("affinity", "npu_cpu_affinity_info", "The CPUs near an NPU (npu-smi info -t topo, "
             "CPU Affinity)", cpus="cpus"),
        unexported("problems", "rows npu-smi printed that could not be read: the scan shows them"),
    )),
    Table("npu.device_files", (
        unexported("vendor", "the vendor label of every npu series"),
        unexported("chips_from", "where the chips came from: a sentence"),
        each("nodes", NODE),
        gauge("nodes.present", "npu_device_node_present",
              "1 when the Ascend device node exists in this scan's /dev"),
        unexported("nodes.reason", "why stat failed: the finding shows it"),
    )),
    Table("npu.versions", (
        info("", "npu_software_info", "The Ascend driver and firmware versions "
             "(/usr/local/Ascend/{driver,firmware}/version.info)", vendor="vendor",
             driver_version="driver_version", driver_innerversion="driver_innerversion",
             firmware_version="firmware_version"),
        unexported("driver_compatible", "a list of release lines: the finding shows it"),
        unexported("firmware_range", "a range of versions: the finding shows it"),
        gauge("firmware_fits", "npu_firmware_fits_driver",
              "1 when the firmware lies in the driver's compatible_version_fw range"),
        each("packages", PACKAGE),
        info("packages", "npu_cann_info", "A CANN package (toolkit, nnae) and its version",
             version="version", innerversion="innerversion"),
        unexported("packages.compatible", "a list of release lines: the finding shows it"),
        gauge("packages.fits_driver", "npu_cann_fits_driver",
              "1 when the package's compatible_version and the driver's agree"),
        missing("missing", "npu_versions_value_missing", "npu.versions"),
    )),
    Table("npu.hccl_env", (
        unexported("vendor", "always huawei: HCCL is Ascend's"),
        each("engines", ENGINE),
        gauge("engines.connect_timeout_s", "npu_hccl_connect_timeout_seconds",
              "HCCL_CONNECT_TIMEOUT in the engine's environment"),
        gauge("engines.exec_timeout_s", "npu_hccl_exec_timeout_seconds",
              "HCCL_EXEC_TIMEOUT in the engine's environment"),
        unexported("engines.env", "environment values: free text"),
        unexported("engines.env_reason", "why the environment could not be read"),
        unexported("engines.not_numbers", "variable names: the finding shows them"),
        each("checks", CHECK),
        unexported("checks.problem", "a word: the finding says it"),
        unexported("checks.value", "the variable's value: free text"),
        unexported("checks.detail", "a sentence"),
        unexported("checks.matched", "interface names: the finding shows them"),
        unexported("interfaces_reason", "a sentence"),
        missing("missing", "npu_hccl_value_missing", "npu.hccl_env"),
    )),
    Table("npu.hccl_log", (
        unexported("vendor", "always huawei: HCCL is Ascend's"),
        each("logs", L.fields("path", "source")),
        gauge("logs.size_bytes", "npu_hccl_log_size_bytes", "The log's size"),
        gauge("logs.bytes_read", "npu_hccl_log_read_bytes", "Bytes read of it (its first MiB and last 2 MiB)"),
        gauge("logs.skipped_bytes", "npu_hccl_log_skipped_bytes", "Bytes between the head and the tail, not read"),
        of("flag", "logs.error", "npu_hccl_log_unread", "1 when the log could not be read (the scan says why)"),
        gauge("logs.failure_lines", "npu_hccl_log_error_lines", "HCCL's error lines in what was read"),
        each("logs.failures", L.fields("failure=kind")),
        gauge("logs.failures.count", "npu_hccl_log_failure_lines",
              "HCCL's error lines by kind (port-down, connect-timeout, exec-timeout, watchdog-timeout)"),
        unexported("logs.failures.code", "HCCL's error code (EI0006...): the finding shows it"),
        unexported("logs.failures.line", "the first line of a failure: free text, shown by the scan"),
        gauge("logs.failures.timeout_s", "npu_hccl_log_timeout_seconds",
              "The timeout HCCL's line says it waited (timeout[120], timeout:1836)"),
        unexported("missing", "field -> why it is absent: free text, shown by the scan"),
    )),
)
