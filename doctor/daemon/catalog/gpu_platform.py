"""The catalog rows of the platform probes of issue 32: gpu.cdi (probes/gpu/cdi.py), the
container device specs against the running driver and GPUs, and gpu.unified_memory
(probes/gpu/unified_memory.py), engines' memory targets on a GPU sharing the host's memory."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import Table, each, gauge, info, missing, of, unexported

TABLES: tuple[Table, ...] = (
    Table("gpu.cdi", (
        info("", "gpu_cdi_runtime_info", "The NVIDIA container runtime's mode "
             "(/etc/nvidia-container-runtime/config.toml [nvidia-container-runtime] mode: "
             "legacy, cdi, csv, auto)", mode="runtime_mode"),
        gauge("stale_specs", "gpu_cdi_stale_specs",
              "CDI specs naming another driver's files or GPUs NVML does not list"),
        of("members", "toolkit_spec_dirs", "gpu_cdi_toolkit_spec_dir_info",
           "A directory the NVIDIA container runtime reads CDI specs from "
           "([nvidia-container-runtime.modes.cdi] spec-dirs)", "directory"),
        unexported("spec_dirs", "the directories read: the default ones and the toolkit's; each "
                   "spec's path label names its directory"),
        unexported("driver_version", "gpu.inventory's llm_doctor_gpu_driver_info"),
        unexported("gpu_uuids", "gpu.inventory's uuid label on llm_doctor_gpu_info"),
        unexported("gpu_count", "gpu.inventory's llm_doctor_gpu_devices"),
        missing("missing", "gpu_cdi_value_missing", "gpu.cdi"),
        each("specs", L.fields("spec=path")),
        info("specs", "gpu_cdi_spec_info", "A CDI spec file (/etc/cdi, /var/run/cdi): its kind, "
             "CDI version and the driver version its files name (libcuda.so.<version>)",
             kind="kind", cdi_version="cdi_version", driver_version="driver_version",
             driver_source="driver_source"),
        of("length", "specs.device_names", "gpu_cdi_spec_devices",
           "Devices the spec names (index, UUID and 'all' each count)"),
        gauge("specs.driver_stale", "gpu_cdi_spec_driver_stale",
              "1 when the spec's driver files are not the running driver's (nvmlSystemGetDriverVersion)"),
        of("members", "specs.unknown_devices", "gpu_cdi_spec_unknown_device_info",
           "A GPU UUID or index the spec names that NVML does not list", "device"),
        unexported("specs.error", "a sentence for people: why the file is not a spec llm-doctor "
                   "reads; shown by the scan and kept in its JSON report"),
    )),
    Table("gpu.unified_memory", (
        of("members", "unified_gpus", "gpu_unified_memory_gpu_info",
           "A GPU whose memory NVML does not support: it allocates the host's (GB10)", "gpu"),
        unexported("gpu_names", "gpu.inventory's name label on llm_doctor_gpu_info"),
        unexported("mem_total_mib", "host.memory's llm_doctor_host_memory_total_bytes"),
        unexported("mem_available_mib", "host.memory's llm_doctor_host_memory_available_bytes"),
        missing("missing", "gpu_unified_memory_value_missing", "gpu.unified_memory"),
        each("engines", L.fields("pid", "engine", "name")),
        gauge("engines.memory_fraction", "gpu_unified_memory_engine_target_ratio",
              "The engine's memory fraction (vLLM --gpu-memory-utilization, 0.9 by default; "
              "SGLang --mem-fraction-static)"),
        info("engines", "gpu_unified_memory_engine_target_info",
             "Where the engine's memory fraction came from", source="fraction_source"),
        gauge("engines.target_mib", "gpu_unified_memory_engine_target_bytes",
              "The engine's memory target: its fraction of MemTotal", scale=1 << 20),
        gauge("engines.held_mib", "gpu_unified_memory_engine_held_bytes",
              "What NVML says the engine and its children hold", scale=1 << 20),
        gauge("engines.room_mib", "gpu_unified_memory_engine_room_bytes",
              "MemAvailable plus what the engine holds: what it can have", scale=1 << 20),
        gauge("engines.left_mib", "gpu_unified_memory_engine_left_bytes",
              "What the host keeps once the engine has its target (negative: over)", scale=1 << 20),
        missing("engines.missing", "gpu_unified_memory_engine_value_missing",
                "gpu.unified_memory's engines"),
    )),
)
