"""The catalog rows of the platform probes of issue 32: gpu.cdi (probes/gpu/cdi.py), the
container device specs against the running driver and GPUs."""

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
)
