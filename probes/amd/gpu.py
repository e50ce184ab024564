"""amd.gpu: each AMD GPU's facts through AMD SMI: temperature against its limits, clocks,
power against its cap, memory, the PCIe link, RAS/ECC counts and bad pages, xGMI links,
compute and memory partition modes, the gfx architecture, and the processes holding memory.

Source: amdsmi (doctor/seam/amdsmi.py; a recording's amdsmi.json): ``amdsmi_get_gpu_asic_info``
(market name, ``target_graphics_version`` gfx942…), ``amdsmi_get_gpu_device_bdf``,
``amdsmi_get_temp_metric`` (HOTSPOT, the junction sensor: MI300X reports no EDGE sensor;
CURRENT, CRITICAL, EMERGENCY), ``amdsmi_get_clock_info`` (GFX, MEM: MHz),
``amdsmi_get_power_info`` (socket_power, W), ``amdsmi_get_power_cap_info`` (power_cap and
default_power_cap in µW, as rsmi_dev_power_cap_get gives them), ``amdsmi_get_violation_status``
(MI300 and later: active_ppt_pwr, active_socket_thrm… 1 while the limit holds the clocks),
``amdsmi_get_gpu_memory_usage`` / ``_total`` (VRAM, bytes), ``amdsmi_get_pcie_info``
(pcie_speed in MT/s, width; max from pcie_static), ``amdsmi_get_gpu_total_ecc_count``,
``amdsmi_get_gpu_bad_page_info``, ``amdsmi_get_gpu_xgmi_link_status`` (U up, D down, X
disabled), ``amdsmi_get_link_metrics`` (per xGMI link bit_rate, Gb/s), ``amdsmi_get_gpu_compute_partition``
(SPX, DPX, QPX, CPX), ``amdsmi_get_gpu_memory_partition`` (NPS1, NPS4),
``amdsmi_get_gpu_process_list`` (bytes there, MiB here), ``amdsmi_get_gpu_activity``
(gfx_activity, %), ``amdsmi_get_gpu_driver_info`` (driver_name, driver_version: "amdgpu",
"6.18.3"), ``amdsmi_get_gpu_vbios_info`` (version, part_number: what ``amd-smi static
--vbios`` prints as VBIOS, in later releases as IFWI).

Field names are those of the NVIDIA records where the fact is the same (``temp_c``,
``slowdown_c``, ``power_limit_w``, ``gen_current``, ``width_max``, ``used_mib``…); every
record says its ``vendor``. Meaning not settled without the hardware: amdsmi's CRITICAL
hotspot limit is taken as the slowdown threshold (the amdgpu hwmon ``temp2_crit``, where the
SMU starts to throttle) and EMERGENCY as shutdown (``temp2_emergency``). No root needed
(the user must open /dev/kfd and /dev/dri). Manual equivalent: ``amd-smi static --json``,
``amd-smi metric --json``, ``amd-smi xgmi``, ``amd-smi partition``, ``amd-smi bad-pages``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions
from doctor.seam.host import Host
from probes.helpers.amd_cli import Absent
from probes.helpers.amd_common import AmdReader, Query, amd_source
from probes.helpers.amd_partitions import partitions, physical_of
from probes.helpers.amd_pcie import link_fields
from probes.helpers.processes import process_table
from probes.helpers.virtualization import detect as detect_virtualization

VENDOR = "amd"
MIB = 1 << 20
# pcie_speed (MT/s, amdsmi_pcie_metric_t) -> PCIe generation
PCIE_GENERATIONS = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}
XGMI_LINK_TYPE = 2  # AMDSMI_LINK_TYPE_XGMI (amdsmi_link_type_t); the CLI prints "XGMI"
LIMIT_SLACK = 0.98  # a cap within 2% of the default is the default (gpu-power-capped's slack)
MAX_LIST = 64  # bad pages or links kept per GPU: a recording's list is not trusted to be short


@dataclass(frozen=True, slots=True)
class XgmiLink:
    gpu: int
    link: int  # position in amdsmi's list
    status: str | None  # "up" | "down" | "disabled" (amdsmi_get_gpu_xgmi_link_status U/D/X)
    peer_bdf: str | None
    bit_rate_gbit: int | None  # amdsmi_link_metrics_t bit_rate


@dataclass(frozen=True, slots=True)
class AmdProcess:
    gpu: int
    pid: int
    name: str  # comm from /proc, else amdsmi's name, else "not visible"
    engine: str | None
    used_mib: int | None  # memory_usage.vram_mem
    is_llm_doctor: bool
    vendor: str = VENDOR
    mps_server: bool = False  # no MPS on AMD: the NVIDIA rule's field, always False


@dataclass(frozen=True, slots=True)
class AmdGpu:
    index: int
    vendor: str
    bus_id: str | None  # amdsmi_get_gpu_device_bdf: "0000:05:00.0"
    name: str | None  # asic market_name: "AMD Instinct MI300X"
    gfx_arch: str | None  # asic target_graphics_version: "gfx942"
    temp_c: int | None  # HOTSPOT CURRENT
    slowdown_c: int | None  # HOTSPOT CRITICAL (see the module's note)
    shutdown_c: int | None  # HOTSPOT EMERGENCY
    margin_c: int | None  # slowdown_c - temp_c
    thermal_slowdown: bool  # violation status: a thermal limit holds the clocks now
    power_capped_by_limit: bool  # violation status active_ppt_pwr
    sm_clock_mhz: int | None  # GFX clk (the name NVIDIA's records use for the core clock)
    sm_clock_max_mhz: int | None
    mem_clock_mhz: int | None
    mem_clock_max_mhz: int | None
    power_w: float | None  # socket_power
    power_limit_w: float | None  # power_cap
    power_default_limit_w: float | None  # default_power_cap
    limit_below_default: bool
    total_mib: int | None
    used_mib: int | None
    gen_current: int | None
    width_current: int | None
    gen_max: int | None
    width_max: int | None
    replay_count: int | None
    ecc_corrected: int | None  # amdsmi_get_gpu_total_ecc_count, since the driver loaded
    ecc_uncorrected: int | None
    ecc_deferred: int | None
    bad_pages: int | None  # pages retired (amdsmi_get_gpu_bad_page_info entries)
    bad_pages_pending: int | None  # entries whose status is not "reserved" yet
    compute_partition: str | None  # "SPX" | "DPX" | "QPX" | "CPX"
    memory_partition: str | None  # "NPS1" | "NPS4"
    xgmi_links_down: int  # of this GPU's links in the record's xgmi_links
    missing: dict[str, str]
    # the physical GPU this logical one is a partition of: its PCI address without the
    # function, which holds the partition's number (probes/helpers/amd_partitions.py)
    physical_id: str | None = None
    # the fields below are the NVIDIA records' (gpu.thermal_power), so that its rules read
    # AMD GPUs too (checks/gpu.toml each_also); what AMD does not report is None or False
    reasons: tuple[str, ...] = ()  # active violations: "socket_thermal", "ppt_power", …
    idle: bool = False  # AMD SMI reports no idle reason
    power_brake: bool = False  # no external power-brake signal is reported on AMD
    work_seen: str | None = None  # "power-at-limit" or "gpu-busy", as gpu.thermal_power says it
    util_gpu_pct: int | None = None  # amdsmi_get_gpu_activity gfx_activity
    # llm-doctor runs no load on AMD GPUs: True when the GPU was busy with its own work at the
    # read (work_seen), so that its link stood at its working level (probes/helpers/amd_pcie.py)
    under_load: bool = False
    max_operating_c: int | None = None  # no such threshold in AMD SMI
    target_c: int | None = None  # no such threshold in AMD SMI
    margin_source: str | None = None  # "slowdown-threshold" with margin_c
    # gpu.pcie's fields (checks/gpu.toml pcie-link-degraded reads AMD GPUs too): the link is
    # judged only while the GPU was busy (probes/helpers/amd_pcie.py), against its slot
    on_vm: bool | None = None
    slot_width_max: int | None = None  # the upstream port's max_link_width
    slot_known: bool = False
    width_short: bool = False
    gen_low_under_load: bool = False
    gen_loaded: int | None = None  # no copy is run on AMD GPUs: never measured
    width_loaded: int | None = None
    ceiling_trained_gbps: float | None = None
    ceiling_capable_gbps: float | None = None
    form_factor: str | None = None  # "module" (OAM, an APU's socket), "card", None: the name
    # amdsmi_get_gpu_driver_info: the kernel driver and its version (amdgpu's, not ROCm's)
    driver_name: str | None = None
    driver_version: str | None = None
    # amdsmi_get_gpu_vbios_info: the board's firmware image (amd-smi's VBIOS / IFWI block)
    vbios_version: str | None = None
    vbios_part_number: str | None = None


@dataclass(frozen=True, slots=True)
class AmdRecord:
    vendor: str
    gpus: tuple[AmdGpu, ...]
    processes: tuple[AmdProcess, ...]
    xgmi_links: tuple[XgmiLink, ...]  # every GPU's, flat: the rules judge them one by one
    # compute partitions (probes/helpers/amd_partitions.py): in CPX one MI300X is 8 logical GPUs
    logical_gpus: int = 0
    physical_gpus: int | None = None  # None: a GPU's PCI address was not read
    partitions_per_gpu: int | None = None  # logical GPUs on the physical GPU that has most
    partitions_uneven: bool = False  # a mode set on some physical GPUs only
    compute_partition: str | None = None  # the physical GPUs' modes: "CPX", or "SPX, CPX"
    # where the facts came from: "amdsmi" (the library) or "amd-smi" (the CLI's text, when
    # the library does not load: probes/helpers/amd_cli.py), and what of that text was not read
    source: str = "amdsmi"
    source_notes: dict[str, str] = field(default_factory=dict)


def _watts_micro(value: int | None) -> float | None:
    return None if value is None else round(value / 1e6, 1)


def _temps(r: AmdReader, i: int) -> tuple[int | None, int | None, int | None]:
    temp = r.integer("temp_c", "amdsmi_get_temp_metric", i, "HOTSPOT", "CURRENT")
    slow = r.integer("slowdown_c", "amdsmi_get_temp_metric", i, "HOTSPOT", "CRITICAL")
    shut = r.integer("shutdown_c", "amdsmi_get_temp_metric", i, "HOTSPOT", "EMERGENCY")
    return temp, slow, shut


def _pcie(r: AmdReader, i: int) -> dict[str, Any]:
    info = r.mapping("pcie", "amdsmi_get_pcie_info", i) or {}
    static = info.get("pcie_static") if isinstance(info.get("pcie_static"), dict) else None
    metric = info.get("pcie_metric") if isinstance(info.get("pcie_metric"), dict) else None
    speed = r.item("gen_current", metric, "pcie_speed")
    gen = PCIE_GENERATIONS.get(speed) if speed is not None else None
    if speed is not None and gen is None:
        r.missing["gen_current"] = f"unknown PCIe speed {speed} MT/s"
    return {"gen_current": gen, "width_current": r.item("width_current", metric, "pcie_width"),
            "gen_max": r.item("gen_max", static, "pcie_interface_version"),
            "width_max": r.item("width_max", static, "max_pcie_width"),
            "replay_count": r.item("replay_count", metric, "pcie_replay_count")}


def _bad_pages(r: AmdReader, i: int) -> tuple[int | None, int | None]:
    pages = r.sequence("bad_pages", "amdsmi_get_gpu_bad_page_info", i)
    if pages is None:
        return None, None
    statuses = [str(p.get("status", "")).lower() if isinstance(p, dict) else "" for p in pages]
    pending = sum(1 for s in statuses if "pending" in s)  # AMDSMI_MEM_PAGE_STATUS_PENDING
    return len(pages), pending


def _xgmi(r: AmdReader, i: int) -> tuple[XgmiLink, ...]:
    status = r.mapping("xgmi_links", "amdsmi_get_gpu_xgmi_link_status", i)
    metrics = r.mapping("xgmi_metrics", "amdsmi_get_link_metrics", i)
    words = {"U": "up", "D": "down", "X": "disabled"}
    found_states = (status or {}).get("status")
    found_links = (metrics or {}).get("links")
    states: list = found_states if isinstance(found_states, list) else []
    links: list = found_links if isinstance(found_links, list) else []
    xgmi = [link for link in links if isinstance(link, dict)
            and link.get("link_type") in (XGMI_LINK_TYPE, "XGMI")]
    out = []
    for n in range(min(max(len(states), len(xgmi)), MAX_LIST)):
        state = words.get(states[n]) if n < len(states) and isinstance(states[n], str) else None
        link = xgmi[n] if n < len(xgmi) else {}
        rate = link.get("bit_rate")
        bdf = link.get("bdf")
        out.append(XgmiLink(gpu=i, link=n, status=state,
                            peer_bdf=bdf if isinstance(bdf, str) else None,
                            bit_rate_gbit=rate if isinstance(rate, int) and not isinstance(rate, bool) else None))
    return tuple(out)


# amdsmi_violation_status_t's active flags (MI300 and later) -> the reason's name here
VIOLATIONS = {"active_prochot_thrm": "prochot_thermal", "active_socket_thrm": "socket_thermal",
              "active_vr_thrm": "vr_thermal", "active_hbm_thrm": "hbm_thermal",
              "active_ppt_pwr": "ppt_power"}
BUSY_PCT = 10  # gpu.thermal_power's: a share of time the GFX engine ran that shows work


def _violations(r: AmdReader, i: int) -> tuple[str, ...]:
    v = r.mapping("reasons", "amdsmi_get_violation_status", i) or {}
    return tuple(name for key, name in VIOLATIONS.items() if v.get(key) is True or v.get(key) == 1)


def _work_seen(power: float | None, limit: float | None, util: int | None) -> str | None:
    if power is not None and limit and power >= 0.9 * limit:
        return "power-at-limit"
    return "gpu-busy" if util is not None and util >= BUSY_PCT else None


def _versions(r: AmdReader, i: int) -> tuple[str | None, str | None, str | None, str | None]:
    """The driver's and the VBIOS's versions, as text (a version is compared, never computed)."""
    driver = r.mapping("driver_version", "amdsmi_get_gpu_driver_info", i)
    vbios = r.mapping("vbios_version", "amdsmi_get_gpu_vbios_info", i)
    if driver is None and "driver_version" in r.missing:
        r.missing["driver_name"] = r.missing["driver_version"]
    if vbios is None and "vbios_version" in r.missing:
        r.missing["vbios_part_number"] = r.missing["vbios_version"]
    return (r.word("driver_name", driver, "driver_name"),
            r.word("driver_version", driver, "driver_version"),
            r.word("vbios_version", vbios, "version"), r.word("vbios_part_number", vbios, "part_number"))


def read_gpu(host: Host, i: int, on_vm: bool | None = None,
             query: Query | None = None) -> tuple[AmdGpu, tuple[XgmiLink, ...]]:
    """GPU ``i``'s record and its xGMI links (kept flat in the probe's record); ``query``
    answers the amdsmi calls (the library's, or amd-smi's text: probes/helpers/amd_cli.py)."""
    r = AmdReader(host, query)
    asic = r.mapping("gfx_arch", "amdsmi_get_gpu_asic_info", i) or {}
    temp, slow, shut = _temps(r, i)
    gfx = r.mapping("sm_clock_mhz", "amdsmi_get_clock_info", i, "GFX")
    mem = r.mapping("mem_clock_mhz", "amdsmi_get_clock_info", i, "MEM")
    power = r.item("power_w", r.mapping("power_w", "amdsmi_get_power_info", i), "socket_power", (int, float))
    cap = r.mapping("power_limit_w", "amdsmi_get_power_cap_info", i)
    limit = _watts_micro(r.item("power_limit_w", cap, "power_cap"))
    default = _watts_micro(r.item("power_default_limit_w", cap, "default_power_cap"))
    total = r.integer("total_mib", "amdsmi_get_gpu_memory_total", i, "VRAM")
    used = r.integer("used_mib", "amdsmi_get_gpu_memory_usage", i, "VRAM")
    ecc = r.mapping("ecc", "amdsmi_get_gpu_total_ecc_count", i)
    reasons = _violations(r, i)
    util = r.item("util_gpu_pct", r.mapping("util_gpu_pct", "amdsmi_get_gpu_activity", i), "gfx_activity")
    pages, pending = _bad_pages(r, i)
    name, arch = asic.get("market_name"), asic.get("target_graphics_version")
    for key, value in (("name", name), ("gfx_arch", arch)):
        if isinstance(value, Absent):  # amd-smi's text without it (probes/helpers/amd_cli.py)
            r.missing[key] = value.reason
    links = _xgmi(r, i)
    power_f = None if power is None else float(power)
    bus_id = r.text("bus_id", "amdsmi_get_gpu_device_bdf", i)
    pcie = _pcie(r, i)
    work = _work_seen(power_f, limit, util)
    judged = link_fields(host, bus_id, pcie, work is not None, on_vm, r.missing,
                         name if isinstance(name, str) else None)
    driver_name, driver_version, vbios_version, vbios_part = _versions(r, i)
    gpu = AmdGpu(
        index=i, vendor=VENDOR, bus_id=bus_id, physical_id=physical_of(bus_id),
        name=name if isinstance(name, str) and name != "N/A" else None,
        gfx_arch=arch if isinstance(arch, str) and arch.startswith("gfx") else None,
        temp_c=temp, slowdown_c=slow, shutdown_c=shut,
        margin_c=slow - temp if slow is not None and temp is not None else None,
        thermal_slowdown=any(name.endswith("_thermal") for name in reasons),
        power_capped_by_limit="ppt_power" in reasons, reasons=reasons, util_gpu_pct=util,
        margin_source="slowdown-threshold" if slow is not None and temp is not None else None,
        sm_clock_mhz=r.item("sm_clock_mhz", gfx, "clk"), sm_clock_max_mhz=r.item("sm_clock_max_mhz", gfx, "max_clk"),
        mem_clock_mhz=r.item("mem_clock_mhz", mem, "clk"), mem_clock_max_mhz=r.item("mem_clock_max_mhz", mem, "max_clk"),
        power_w=power_f, power_limit_w=limit, power_default_limit_w=default,
        limit_below_default=bool(limit and default and limit < LIMIT_SLACK * default),
        total_mib=None if total is None else total // MIB, used_mib=None if used is None else used // MIB,
        **pcie, **judged, driver_name=driver_name, driver_version=driver_version,
        vbios_version=vbios_version, vbios_part_number=vbios_part,
        ecc_corrected=r.item("ecc_corrected", ecc, "correctable_count"),
        ecc_uncorrected=r.item("ecc_uncorrected", ecc, "uncorrectable_count"),
        ecc_deferred=r.item("ecc_deferred", ecc, "deferred_count"),
        bad_pages=pages, bad_pages_pending=pending,
        compute_partition=r.text("compute_partition", "amdsmi_get_gpu_compute_partition", i),
        memory_partition=r.text("memory_partition", "amdsmi_get_gpu_memory_partition", i),
        xgmi_links_down=sum(link.status == "down" for link in links), missing=dict(r.missing),
        work_seen=work)
    return gpu, links


def _processes(host: Host, i: int, table: dict, own: int, query: Query) -> list[AmdProcess]:
    r = AmdReader(host, query)
    out = []
    for entry in (r.sequence("processes", "amdsmi_get_gpu_process_list", i) or [])[:4096]:
        pid = entry.get("pid") if isinstance(entry, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool):
            continue
        usage = entry.get("memory_usage") if isinstance(entry.get("memory_usage"), dict) else {}
        vram = usage.get("vram_mem")
        proc = table.get(pid)
        named = entry.get("name") if isinstance(entry.get("name"), str) else None
        out.append(AmdProcess(
            gpu=i, pid=pid, name=proc.comm if proc else (named or "not visible")[:64],
            engine=proc.engine if proc else None,
            used_mib=vram // MIB if isinstance(vram, int) and not isinstance(vram, bool) else None,
            is_llm_doctor=pid == own))
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> AmdRecord:
    count, query, cli = amd_source(host)
    table = {p.pid: p for p in process_table(host)}
    own = os.getpid() if host.kind == "live" else -1
    on_vm = detect_virtualization(host).virtual_machine
    read = [read_gpu(host, i, on_vm, query) for i in range(count)]
    processes = tuple(p for i in range(count) for p in _processes(host, i, table, own, query))
    parts = partitions((g.bus_id, g.compute_partition) for g, _ in read)
    return AmdRecord(vendor=VENDOR, gpus=tuple(g for g, _ in read), processes=processes,
                     xgmi_links=tuple(link for _, links in read for link in links),
                     logical_gpus=parts.logical_gpus, physical_gpus=parts.physical_gpus,
                     partitions_per_gpu=parts.partitions_per_gpu, partitions_uneven=parts.uneven,
                     compute_partition=parts.compute_partition,
                     source="amd-smi" if cli else "amdsmi", source_notes=dict(cli.notes) if cli else {})


def summary(record: AmdRecord) -> str:
    names = sorted({g.name or "?" for g in record.gpus})
    arch = sorted({g.gfx_arch or "?" for g in record.gpus})
    hot = max((g.temp_c for g in record.gpus if g.temp_c is not None), default=None)
    return t("{count} AMD GPUs ({names}, {arch}); hottest {hot} °C; {ue} uncorrectable ECC errors",
             count=len(record.gpus), names=", ".join(names), arch=", ".join(arch),
             hot=hot if hot is not None else "?",
             ue=sum(g.ecc_uncorrected or 0 for g in record.gpus)) + (
        "; " + t("read from the amd-smi command's text (no AMD SMI library)") if record.source == "amd-smi" else "")
