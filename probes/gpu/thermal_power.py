"""gpu.thermal_power: temperatures against their thresholds, clock-event reasons, clocks
against their maxima, power against its limit; sampled under load at level full.

Source: NVML ``nvmlDeviceGetTemperature``, ``GetTemperatureThreshold`` (shutdown, slowdown,
GPU max operating), ``GetCurrentClocksEventReasons`` (``…ThrottleReasons`` on drivers before
R535; doctor/seam/nvml.py falls back), ``GetClockInfo`` / ``GetMaxClockInfo`` (SM, memory),
``GetPowerUsage``, ``GetEnforcedPowerLimit``, ``GetPowerManagementDefaultLimit`` (mW there,
W here), ``GetUtilizationRates`` (is work running), ``GetMarginTemperature`` (R555+: the
distance to the nearest slowdown threshold, the only thermal figure Blackwell and the RTX
4000 SFF Ada give: no absolute slowdown threshold) and ``GetTemperatureThreshold``
ACOUSTIC_CURR (the board's target temperature, where it has one). No root needed. Manual equivalent: ``nvidia-smi -q -d TEMPERATURE,PERFORMANCE,POWER,CLOCK``.

A clock-event reason on an idle card is not a symptom: an RTX 3090 in P8 at 0% use drawing
35 of 350 W reports the SW power-cap bit. ``work_seen`` says what shows the clocks serve
work: the level-full load, power within 10% of the limit, or the GPU busy (10% or more).

Reasons are decoded so that one cause is one flag: a hardware slowdown for the power brake
(an external power-supply signal) is power, not thermal; the generic "HW slowdown" bit is
attributed to whichever of its two causes is also set. At level full,
``probes.kernels.gpu_sustained`` (run in a child process, LOAD_SECONDS long) runs a bounded matrix-multiply load while sampling these.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, MeasurementError
from doctor.model import Level, ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import Reader, gpu_count, watts
from probes.helpers.kernel_child import run_kernel

# nvmlClocksEventReasons (nvml.h); names as nvidia-smi -q prints them.
REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock",
}
SENSOR_GPU = 0  # NVML_TEMPERATURE_GPU
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_GPU_MAX = 0, 1, 3
THRESHOLD_TARGET = 5  # NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR: nvidia-smi's "GPU Target Temperature"
POWER_NEAR_LIMIT = 0.9  # drawing 90% of the enforced limit: the cap is what holds the clocks
BUSY_PCT = 10  # nvmlUtilization_t.gpu: share of the last sample period a kernel ran
CLOCK_SM, CLOCK_MEM = 1, 2

LOAD_SECONDS = 30.0  # the sustained load at level full (the kernel's own default)


def decode_reasons(mask: int | None) -> tuple[str, ...]:
    if mask is None:
        return ()
    return tuple(name for bit, name in REASONS.items() if mask & bit)


@dataclass(frozen=True, slots=True)
class GpuThermalPower:
    index: int
    temp_c: int | None  # nvmlDeviceGetTemperature(GPU)
    slowdown_c: int | None  # threshold SLOWDOWN: the hardware starts cutting clocks
    shutdown_c: int | None  # threshold SHUTDOWN
    max_operating_c: int | None  # threshold GPU_MAX (None on most consumer boards)
    margin_c: int | None  # slowdown_c - temp_c, else NVML's own margin (margin_source)
    reasons_mask: int | None  # nvmlDeviceGetCurrentClocksEventReasons
    reasons: tuple[str, ...]  # decoded, e.g. ("sw_power_cap",)
    thermal_slowdown: bool  # sw or hw thermal, or hw slowdown with no power brake
    power_capped_by_limit: bool  # sw_power_cap: clocks held to stay under the power limit
    power_brake: bool  # hw_power_brake_slowdown: external power-supply signal
    idle: bool
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    mem_clock_mhz: int | None
    mem_clock_max_mhz: int | None
    power_w: float | None
    power_limit_w: float | None  # enforced limit
    power_default_limit_w: float | None  # the board's default limit
    limit_below_default: bool  # an operator lowered the limit (nvidia-smi -pl)
    under_load: bool  # values below are from the level-full load, not at rest
    missing: dict[str, str]
    # "slowdown-threshold" (slowdown_c - temp_c) or "nvml-margin" (nvmlDeviceGetMarginTemperature,
    # boards that give no absolute threshold); None with margin_c
    margin_source: str | None = None
    target_c: int | None = None  # the board's target temperature (acoustic threshold)
    util_gpu_pct: int | None = None  # nvmlDeviceGetUtilizationRates .gpu, at rest
    # what shows the GPU works, so that a clock-event reason is a symptom: "sustained-load"
    # (level full), "power-at-limit", "gpu-busy"; None on an idle card
    work_seen: str | None = None


@dataclass(frozen=True, slots=True)
class ThermalPowerRecord:
    gpus: tuple[GpuThermalPower, ...]
    load_reason: str | None  # why no load was run or what stopped it


def _reasons_flags(mask: int | None) -> dict[str, bool]:
    m = mask or 0
    brake = bool(m & 0x80)
    return {
        "thermal_slowdown": bool(m & 0x60) or (bool(m & 0x8) and not brake),
        "power_capped_by_limit": bool(m & 0x4),
        "power_brake": brake,
        "idle": bool(m & 0x1),
    }


def _pick(data: dict, key: str, default, kinds: tuple = (int,)):
    value = data.get(key)
    return value if isinstance(value, kinds) and not isinstance(value, bool) else default


def _margin(r: Reader, index: int, temp: int | None,
            slowdown: int | None) -> tuple[int | None, str | None]:
    if slowdown is not None and temp is not None:
        return slowdown - temp, "slowdown-threshold"
    margin = r.integer("margin_c", "nvmlDeviceGetMarginTemperature", index)
    return (margin, "nvml-margin") if margin is not None else (None, None)


def _work_seen(under_load: bool, power: float | None, limit: float | None,
               util: int | None) -> str | None:
    if under_load:
        return "sustained-load"
    if power is not None and limit and power >= POWER_NEAR_LIMIT * limit:
        return "power-at-limit"
    if util is not None and util >= BUSY_PCT:
        return "gpu-busy"
    return None


def read_gpu(host: Host, index: int, load: dict | None) -> GpuThermalPower:
    r = Reader(host)
    temp = r.integer("temp_c", "nvmlDeviceGetTemperature", index, SENSOR_GPU)
    slowdown = r.integer("slowdown_c", "nvmlDeviceGetTemperatureThreshold", index, THRESHOLD_SLOWDOWN)
    mask = r.integer("reasons_mask", "nvmlDeviceGetCurrentClocksEventReasons", index)
    sm = r.integer("sm_clock_mhz", "nvmlDeviceGetClockInfo", index, CLOCK_SM)
    power = watts(r.integer("power_w", "nvmlDeviceGetPowerUsage", index))
    if load:  # the load's worst moment replaces the reading at rest
        temp = _pick(load, "temp_c_max", temp)
        mask = _pick(load, "reasons_mask_any", mask)
        sm = _pick(load, "sm_clock_mhz_min", sm)
        power = _pick(load, "power_w_max", power, (int, float))
    limit = watts(r.integer("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", index))
    default = watts(r.integer("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", index))
    util = r.item("util_gpu_pct", r.mapping("util_gpu_pct", "nvmlDeviceGetUtilizationRates", index), "gpu")
    margin, margin_source = _margin(r, index, temp, slowdown)
    return GpuThermalPower(
        index=index, temp_c=temp, slowdown_c=slowdown,
        shutdown_c=r.integer("shutdown_c", "nvmlDeviceGetTemperatureThreshold", index, THRESHOLD_SHUTDOWN),
        max_operating_c=r.integer("max_operating_c", "nvmlDeviceGetTemperatureThreshold", index,
                              THRESHOLD_GPU_MAX),
        margin_c=margin, margin_source=margin_source,
        target_c=r.integer("target_c", "nvmlDeviceGetTemperatureThreshold", index, THRESHOLD_TARGET),
        util_gpu_pct=util, work_seen=_work_seen(load is not None, power, limit, util),
        reasons_mask=mask, reasons=decode_reasons(mask), **_reasons_flags(mask),
        sm_clock_mhz=sm,
        sm_clock_max_mhz=r.integer("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", index, CLOCK_SM),
        mem_clock_mhz=r.integer("mem_clock_mhz", "nvmlDeviceGetClockInfo", index, CLOCK_MEM),
        mem_clock_max_mhz=r.integer("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", index, CLOCK_MEM),
        power_w=power, power_limit_w=limit, power_default_limit_w=default,
        # 2% slack: some boards report an enforced limit a watt or two off the default
        limit_below_default=bool(limit and default and limit < default * 0.98),
        under_load=load is not None,
        missing=r.missing,
    )


def _load(host: Host, options: ScanOptions, count: int) -> tuple[dict, str | None]:
    if options.level < Level.FULL:
        return {}, "sampled at rest; level full adds a sustained load"
    try:
        samples = host.measure("gpu.thermal_power.load", lambda: run_kernel(
            "gpu_sustained", "--gpus", str(count), "--seconds", str(LOAD_SECONDS),
            timeout_s=LOAD_SECONDS + 60))
    except MeasurementError as exc:
        return {}, str(exc)
    per_gpu = samples.get("gpus") if isinstance(samples, dict) else None
    if not isinstance(per_gpu, list):
        return {}, "the load measurement holds no per-GPU samples"
    return {i: g for i, g in enumerate(per_gpu) if isinstance(g, dict)}, None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> ThermalPowerRecord:
    count = gpu_count(host)
    loads, reason = _load(host, options, count)
    return ThermalPowerRecord(gpus=tuple(read_gpu(host, i, loads.get(i)) for i in range(count)),
                              load_reason=reason)


def summary(record: ThermalPowerRecord) -> str:
    parts = []
    for g in record.gpus:
        active = [n for n in g.reasons if n != "gpu_idle"]
        parts.append(t("GPU{index} {temp} C, {power}/{limit} W", index=g.index,
                       temp=g.temp_c if g.temp_c is not None else "?",
                       power=g.power_w if g.power_w is not None else "?",
                       limit=g.power_limit_w or "?")
                     + (f" [{', '.join(active)}]" if active else ""))
    return t("; ").join(parts)
