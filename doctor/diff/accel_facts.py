"""The facts of AMD GPUs and Huawei Ascend NPUs for ``diff`` (issue 33): what doctor/diff/facts.py
compares for NVIDIA's, read from amd.gpu/amd.host and the npu.* probes' records.

The vendor is in the id: ``amd.gpu[<bus id>]`` (AMD SMI gives no UUID the probe keeps; the
bus id survives a reboot and a driver reload) and ``amd.host`` for ROCm's host settings;
``npu[<npu>-<chip>]`` (npu-smi's NPU and chip numbers: a 310B SoC has no bus id),
``npu.port[<device>]`` for its RoCE port, and ``npu.driver``, ``npu.firmware``,
``npu.cann[<package>]`` for its versions. A fact both vendors have is named as NVIDIA's
(``…power_limit_w``, ``…pcie.width``, ``…memory_total_mib``), so it reads alike.

Left out as for NVIDIA: what moves every second (temperature, power draw, clocks now,
utilisation, memory in use). AMD's versions: ``amd.driver.version`` (the amdgpu driver the
GPUs report: one host-wide fact, as NVIDIA's ``gpu.driver.version``, so an upgrade is one
change, not one per GPU), ``amd.gpu[<bus id>].vbios.version`` (each board's own firmware) and
``amd.host.rocm_version`` (the installed ROCm release).
"""

from __future__ import annotations

from typing import Any, Iterator

from doctor.diff.model import CONFIG, FLAG, Reading
from doctor.i18n import lazy, t, translated

Data = dict[str, Any]


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(sorted(str(_scalar(v)) for v in value))
    return str(value)


def _named(value: Any) -> str:
    """A name from a record as a bracketed id part: its text, at most 64 characters, no
    bracket (a hostile record must not forge another fact's id)."""
    text = str(value)[:64]
    return text.replace("[", "(").replace("]", ")")


def _read(at: str, family: str, probe: str, row: Data, names: dict[str, tuple[str, Any]]
          ) -> Iterator[Reading]:
    """``names``: the record's field → (the fact's name after ``at``, its label)."""
    for key, (name, label) in names.items():
        if key in row:
            yield Reading(f"{at}.{name}", family, translated(label), _scalar(row[key]), CONFIG, probe)


# --------------------------------------------------------------------------- AMD

AMD_GPU = {  # amd.gpu's field → (fact, label); NVIDIA's fact names where the fact is theirs
    "name": ("name", lazy("model")),
    "gfx_arch": ("gfx_arch", lazy("GPU architecture (gfx target)")),
    "total_mib": ("memory_total_mib", lazy("memory, MiB")),
    "power_limit_w": ("power_limit_w", lazy("power cap, W")),
    "power_default_limit_w": ("power_default_limit_w", lazy("default power cap, W")),
    "sm_clock_max_mhz": ("sm_clock_max_mhz", lazy("GFX clock maximum, MHz")),
    "mem_clock_max_mhz": ("mem_clock_max_mhz", lazy("memory clock maximum, MHz")),
    "width_current": ("pcie.width", lazy("PCIe link width")),
    "gen_max": ("pcie.gen_max", lazy("PCIe generation (link's maximum)")),
    "width_max": ("pcie.width_max", lazy("PCIe width (maximum)")),
    "slowdown_c": ("slowdown_c", lazy("hotspot slowdown limit, °C")),
    "shutdown_c": ("shutdown_c", lazy("hotspot shutdown limit, °C")),
    "ecc_uncorrected": ("ecc_uncorrected", lazy("uncorrectable ECC errors (since the driver loaded)")),
    "bad_pages": ("bad_pages", lazy("retired HBM pages")),
    "bad_pages_pending": ("bad_pages_pending", lazy("retired HBM pages waiting for a reset")),
    "compute_partition": ("compute_partition", lazy("compute partition mode (SPX, CPX)")),
    "memory_partition": ("memory_partition", lazy("memory partition mode (NPS)")),
    "xgmi_links_down": ("xgmi_links_down", lazy("xGMI links down")),
    "vbios_version": ("vbios.version", lazy("VBIOS (IFWI) version")),
}
AMD_HOST = {
    "amd_gpus": ("gpus", lazy("AMD GPUs on the PCI bus")),
    "gfx_targets": ("gfx_targets", lazy("gfx targets KFD lists")),
    "numa_balancing": ("numa_balancing", "kernel.numa_balancing"),
    "iommu_mode": ("iommu_mode", lazy("IOMMU mode")),
    "iommu_cmdline": ("iommu_cmdline", lazy("IOMMU on the kernel command line")),
    "kfd_present": ("kfd_present", lazy("/dev/kfd present")),
    "rocm_version": ("rocm_version", lazy("ROCm release (/opt/rocm/.info/version)")),
}


def amd_facts(r: Any) -> Iterator[Reading]:
    """``r``: doctor.diff.facts.Records, one side's records."""
    names: dict[Any, str] = {}
    drivers: set[str] = set()
    for gpu in r.rows("amd.gpu", "gpus"):
        at = f"amd.gpu[{_named(gpu.get('bus_id') or '#' + str(gpu.get('index')))}]"
        names[gpu.get("index") if isinstance(gpu.get("index"), int) else None] = at
        yield from _read(at, "gpu", "amd.gpu", gpu, AMD_GPU)
        if gpu.get("driver_version") is not None:
            drivers.add(_named(gpu["driver_version"]))
    if names:  # every GPU answers the one loaded amdgpu; two versions would both show
        yield Reading("amd.driver.version", "gpu", t("AMD GPU driver version (amdgpu)"),
                      ",".join(sorted(drivers)) or None, CONFIG, "amd.gpu")
    if "amd.gpu" in r.data:
        others: dict[str, int] = dict.fromkeys(names.values(), 0)
        for proc in r.rows("amd.gpu", "processes"):
            if not proc.get("engine") and not proc.get("is_llm_doctor"):
                at = names.get(proc.get("gpu"), f"amd.gpu[#{_named(proc.get('gpu'))}]")
                others[at] = others.get(at, 0) + 1
        for at, n in others.items():
            yield Reading(f"{at}.memory.other_processes", "gpu", t("other processes on the GPU"), n,
                          CONFIG, "amd.gpu")
    for link in r.rows("amd.gpu", "xgmi_links"):
        gpu = names.get(link.get("gpu"), f"amd.gpu[#{_named(link.get('gpu'))}]")
        at = f"{gpu}.xgmi[{_named(link.get('link'))}]"
        yield from _read(at, "gpu", "amd.gpu", link, {
            "status": ("status", lazy("xGMI link status")),
            "bit_rate_gbit": ("bit_rate_gbit", lazy("xGMI link bit rate, Gb/s")),
            "peer_bdf": ("peer", lazy("xGMI link's peer (bus id)"))})
    yield from _read("amd.host", "gpu", "amd.host", r.data.get("amd.host", {}), AMD_HOST)


# --------------------------------------------------------------------------- Ascend

NPU_CHIP = {
    "name": ("name", lazy("model")),
    "bus_id": ("bus_id", lazy("PCIe bus id")),
    "health": ("health", lazy("NPU health (npu-smi)")),
    "memory_total_mib": ("memory_total_mib", lazy("memory, MiB")),
    "memory_kind": ("memory_kind", lazy("memory kind (HBM, DDR)")),
}
NPU_ERRORS = {
    "ecc_uncorrected_aggregate": ("ecc_uncorrected_aggregate", lazy("uncorrected ECC errors (lifetime)")),
    "isolated_pages_uncorrected": ("isolated_pages_uncorrected",
                                   lazy("HBM pages isolated after double-bit errors")),
    "isolated_pages_corrected": ("isolated_pages_corrected",
                                 lazy("HBM pages isolated after single-bit errors")),
}
NPU_VERSIONS = {
    "driver_version": ("driver.version", lazy("Ascend driver version")),
    "driver_innerversion": ("driver.innerversion", lazy("Ascend driver inner version")),
    "firmware_version": ("firmware.version", lazy("Ascend firmware version")),
    "firmware_fits": ("firmware.fits_driver", lazy("firmware within the driver's range")),
}
NPU_PORT = {
    "link": ("link", lazy("NPU network port link (hccn_tool)")),
    "net_health": ("net_health", lazy("NPU network port health (hccn_tool)")),
    "address": ("address", lazy("NPU network port address")),
}


def _chip(row: Data) -> str:
    return f"npu[{_named(row.get('npu_id'))}-{_named(row.get('chip_id'))}]"


def npu_facts(r: Any) -> Iterator[Reading]:
    """``r``: doctor.diff.facts.Records, one side's records."""
    devices = r.data.get("npu.devices", {})
    if "smi_version" in devices:
        yield Reading("npu.smi.version", "gpu", t("npu-smi version"), _scalar(devices["smi_version"]),
                      CONFIG, "npu.devices")
    chips = r.rows("npu.devices", "chips")
    for chip in chips:
        yield from _read(_chip(chip), "gpu", "npu.devices", chip, NPU_CHIP)
    if "npu.devices" in r.data:
        others = {_chip(c): 0 for c in chips}
        for proc in r.rows("npu.devices", "processes"):
            if not proc.get("engine"):
                others[_chip(proc)] = others.get(_chip(proc), 0) + 1
        for at, n in others.items():
            yield Reading(f"{at}.memory.other_processes", "gpu", t("other processes on the NPU"), n,
                          CONFIG, "npu.devices")
    for chip in r.rows("npu.errors", "chips"):
        yield from _read(_chip(chip), "gpu", "npu.errors", chip, NPU_ERRORS)
    versions = r.data.get("npu.versions", {})
    yield from _read("npu", "gpu", "npu.versions", versions, NPU_VERSIONS)
    for package in r.rows("npu.versions", "packages"):
        at = f"npu.cann[{_named(package.get('kind'))}]"
        yield from _read(at, "gpu", "npu.versions", package, {
            "version": ("version", lazy("CANN package version")),
            "innerversion": ("innerversion", lazy("CANN package inner version")),
            "fits_driver": ("fits_driver", lazy("CANN package compatible with the driver"))})
    for node in r.rows("npu.device_files", "nodes"):
        at = f"npu.device_file[{_named(node.get('path'))}]"
        yield from _read(at, "gpu", "npu.device_files", node,
                         {"present": ("present", lazy("device node present"))})
    for pair in r.rows("npu.topology", "pairs"):
        at = f"npu.topology[{_named(pair.get('a'))}-{_named(pair.get('b'))}]"
        yield from _read(at, "gpu", "npu.topology", pair,
                         {"link": ("link", lazy("path between the pair (npu-smi info -t topo)"))})
    for port in r.rows("npu.network", "ports"):
        yield from _read(f"npu.port[{_named(port.get('device'))}]", "net", "npu.network", port, NPU_PORT)
    yield from hccl_facts(r)


# probes/npu/hccl_env.py's VARIABLES (the diff reads records, never a probe's module)
HCCL_VARIABLES = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_SOCKET_IFNAME", "HCCL_IF_IP",
                  "HCCL_IF_BASE_PORT", "HCCL_BUFFSIZE", "HCCL_INTRA_ROCE_ENABLE",
                  "HCCL_INTRA_PCIE_ENABLE", "ASCEND_RT_VISIBLE_DEVICES")
HCCL_SECONDS = {"HCCL_CONNECT_TIMEOUT": "connect_timeout_s", "HCCL_EXEC_TIMEOUT": "exec_timeout_s"}


def hccl_facts(r: Any) -> Iterator[Reading]:
    """Each engine's HCCL variables (npu.hccl_env), as an engine's flags are: unset is None,
    so setting one is ADDED; a timeout as the whole seconds the probe read from it."""
    for engine in r.rows("npu.hccl_env", "engines"):
        at = r.engine_of_pid(engine.get("pid"), _named(engine.get("engine")))
        env = engine["env"] if isinstance(engine.get("env"), dict) else {}
        for name in HCCL_VARIABLES:
            seconds = engine.get(HCCL_SECONDS.get(name, ""))
            value = seconds if isinstance(seconds, int) and not isinstance(seconds, bool) else env.get(name)
            yield Reading(f"{at}.hccl.{name}", "net", name, _scalar(value), FLAG, "npu.hccl_env",
                          flag=f"{name}=")


def not_recorded(r: Any) -> tuple[str, ...]:
    """What a diff of this side cannot compare for its vendor because no probe records it:
    nothing now for AMD (amd.gpu records the driver and VBIOS, amd.host the ROCm release) or
    Ascend; the hook stays for a vendor whose probe lacks a fact."""
    return ()
