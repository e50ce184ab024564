"""What the HTML report plots from one scan's records: each bandwidth against its ceiling, the
knee curve of the saved sweep, KV-cache use and the queue per engine, GPU temperatures,
clocks and power against their limits.

The records come from a JSON report's data (``reports.json_report.to_dict``, or a saved report
someone may have edited), so every value is read as hostile input (doctor/values.py): a value
of the wrong type or out of range is not drawn, and the row or plot says "not measured" and
why (the probe's reason, the record's ``missing`` entry or its ``errors``).
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from doctor.display import number, why
from doctor.i18n import t
from doctor.values import count, field, non_negative, text
from reports.charts import Bar, Curve, bars, curve, not_measured

MAX_ITEMS = 16  # GPUs or engines in one plot
Section = tuple[str, list[Markup]]


def _record(by_name: dict[str, dict], name: str) -> tuple[dict[str, Any] | None, str]:
    """The probe's record, or None and why there is none."""
    probe = by_name.get(name)
    if probe is None:
        return None, t("{name} did not run", name=name)
    if probe.get("status") != "ok":
        return None, text(probe.get("reason"), 300) or t("{name}: {status}", name=name,
                                                           status=text(probe.get("status"), 20))
    data = probe.get("data")
    return (data, "") if isinstance(data, dict) else (None, t("{name} kept no record", name=name))


def _items(data: dict[str, Any] | None, name: str) -> list[dict[str, Any]]:
    items = field(data, name)
    return [i for i in items[:MAX_ITEMS] if isinstance(i, dict)] if isinstance(items, list) else []


def _amount(value: float) -> str:
    return number(value, ",.0f" if value >= 100 else ".1f" if value >= 10 else ".2f")


def _missing(item: dict[str, Any], name: str) -> str:
    missing = item.get("missing")
    reason = missing.get(name) if isinstance(missing, dict) else None
    return why(reason) if reason else t("not measured")


def _svg(markup: str) -> Markup:
    return Markup(markup)  # noqa: S704 (reports/charts.py escapes every text)


class Unmeasured(Markup):
    """A plot with nothing to draw: its "not measured" box, with its title and why kept for a
    page that says what was not measured in one line instead of a box each."""

    what: str  # the plot's title (``title`` is str's method)
    why: str


def _empty(title: str, why: str) -> Markup:
    box = Unmeasured(not_measured(title, why))
    box.what, box.why = title, why or t("not measured")
    return box


def _plot(title: str, unit: str, rows: list[Bar], reason: str) -> Markup:
    """A bar plot, or "not measured" with ``reason`` when no row has a value."""
    if not any(r.parts for r in rows):
        return _empty(title, reason)
    desc = t("{title}, in {unit}. ", title=title, unit=unit) + t("; ").join(
        t("{label}: {note}", label=r.label, note=r.note) for r in rows)
    return _svg(bars(title, desc, unit, rows))


def _against(label: str, value: float | None, limits: list[tuple[str, float | None]],
             unit: str, absent: str) -> Bar:
    """A bar of ``value`` against its limits (the first one named in the note)."""
    marks = tuple((n, v) for n, v in limits if v is not None and v > 0)
    if value is None:
        return Bar(label, (), marks, absent)
    note = f"{_amount(value)} {unit}"
    if marks:
        note += t(", {percent}% of {limit}", percent=number(value / marks[0][1] * 100, '.0f'),
                  limit=_amount(marks[0][1]))
    return Bar(label, ((t("measured"), max(value, 0.0)),), marks, note)


def _gpu(item: dict[str, Any]) -> str:
    index = count(item.get("index"))
    return f"GPU{index}" if index is not None else "GPU ?"


def bandwidth(by_name: dict[str, dict]) -> Section:
    memory, memory_why = _record(by_name, "host.memory_bandwidth")
    rows = []
    if memory is not None:
        ceilings = [(t("DIMM ceiling"), non_negative(memory.get("ceiling_gbps")))]
        platform = non_negative(memory.get("platform_ceiling_gbps"))
        if platform is not None and platform != ceilings[0][1]:
            ceilings.append((t("every channel filled"), platform))
        rows = [_against(name, non_negative(memory.get(f"{name}_gbps")), ceilings, "GB/s",
                         t("not measured")) for name in ("triad", "copy")]
        memory_why = text(memory.get("ceiling_reason"), 300) or t("no bandwidth in the record")
    plots = [_plot(t("Host memory bandwidth (STREAM)"), "GB/s", rows, memory_why)]
    if _record(by_name, "gpu.inventory")[0] is None:  # no GPU looked at: no GPU plot
        return t("Bandwidth against its ceiling"), plots
    gpus, gpu_why = _record(by_name, "gpu.bandwidth")
    errors = field(gpus, "errors")
    errors = errors if isinstance(errors, dict) else {}

    def absent(item: dict[str, Any]) -> str:
        said = text(errors.get(f"gpu.bandwidth.{item.get('index')}"), 300)
        return t("not measured") if said is None else said.partition(": ")[2] or said

    items = _items(gpus, "gpus")
    reason = next((absent(i) for i in items), gpu_why or t("no GPU in the record"))
    rows = [_against(_gpu(i), non_negative(i.get("d2d_gbps")),
                     [(t("ceiling (clock × bus width)"), non_negative(i.get("d2d_ceiling_gbps")))],
                     "GB/s", t("not measured")) for i in items]
    plots.append(_plot(t("GPU memory bandwidth (device to device)"), "GB/s", rows, reason))
    rows = []
    for item in items:
        links = [(t("link as trained"), non_negative(item.get("link_ceiling_trained_gbps"))),
                 (t("link as capable"), non_negative(item.get("link_ceiling_capable_gbps")))]
        for way in ("h2d", "d2h"):
            rows.append(_against(f"{_gpu(item)} {way}", non_negative(item.get(f"{way}_pinned_gbps")),
                                 links, "GB/s", t("not measured")))
    plots.append(_plot(t("PCIe bandwidth, pinned memory (h2d: host to GPU)"), "GB/s", rows, reason))
    return t("Bandwidth against its ceiling"), plots


def _endpoint(url: Any) -> str:
    shown = text(url, 300) or t("engine")
    return shown.removeprefix("http://").removeprefix("https://").removesuffix("/metrics")


def knee(by_name: dict[str, dict]) -> Section:
    load, load_why = _record(by_name, "engine.load")
    engines = _items(load, "engines")
    title = t("Throughput knee: output tokens/s and TTFT by concurrency")
    if not engines:
        return t("Throughput knee"), [_empty(title, load_why or t("no engine"))]
    plots = []
    for engine in engines:
        name = t("Throughput knee of {endpoint}", endpoint=_endpoint(engine.get("base_url")))
        points = sorted((p for p in _items({"s": field(engine, "sweep")}, "s")
                         if count(p.get("concurrency"), minimum=1) is not None),
                        key=lambda p: int(p["concurrency"]))
        if not points:
            status = text(engine.get("knee_status"), 40)
            reason = (t("the saved sweep is from an older llm-doctor: run llm-doctor load again")
                      if status == "outdated" else
                      t("no saved sweep: run llm-doctor load {url}", url=text(engine.get("base_url"), 300)))
            plots.append(_empty(name, reason))
            continue
        levels = [int(p["concurrency"]) for p in points]
        throughput = tuple(non_negative(p.get("output_tokens_per_s")) for p in points)
        ttft = tuple(non_negative(p.get("ttft_p50_ms")) for p in points)
        if all(v is None for v in throughput + ttft):
            plots.append(_empty(name, t("the saved sweep has no level with a "
                                        "throughput or a TTFT")))
            continue
        found = count(engine.get("knee_concurrency"), minimum=1)
        desc = t("; ").join(t("concurrency {level}: {throughput}, TTFT p50 {ttft}", level=c,
                                throughput=_said(tps, "tokens/s"), ttft=_said(ms, "ms"))
                              for c, tps, ms in zip(levels, throughput, ttft))
        desc += t("; knee at {level}", level=found) if found else t("; no knee found")
        plots.append(_svg(curve(name, desc, t("concurrency (requests in flight)"), levels,
                                Curve(t("output tokens/s"), throughput), Curve(t("TTFT p50 (ms)"), ttft),
                                found, [p.get("usable") is False for p in points])))
    return t("Throughput knee"), plots


def _said(value: float | None, unit: str) -> str:
    return t("not measured") if value is None else f"{_amount(value)} {unit}"


def engines(by_name: dict[str, dict]) -> Section:
    kv, kv_why = _record(by_name, "engine.kv_cache")
    items = _items(kv, "engines")
    if not items:
        metrics, metrics_why = _record(by_name, "engine.metrics")
        items, kv_why = _items(metrics, "engines"), kv_why or metrics_why
    rows = []
    for item in items:
        use = non_negative(item.get("kv_cache_use"))
        use = use * 100 if use is not None and 0 <= use <= 1 else None
        bar = _against(_endpoint(item.get("endpoint")), use, [(t("full"), 100.0)], "%",
                       _missing(item, "kv_cache_use"))
        rows.append(Bar(bar.label, bar.parts, bar.marks, t("{percent}% used", percent=number(use, ".0f")))
                    if use is not None else bar)
    plots = [_plot(t("KV cache use per engine"), t("% of the cache's blocks"), rows,
                   kv_why or t("no engine with a KV-cache gauge"))]
    load, load_why = _record(by_name, "engine.load")
    seqs = {_endpoint(i.get("endpoint")): count(i.get("max_num_seqs"), minimum=1) for i in items}
    rows = []
    for engine in _items(load, "engines"):
        name = _endpoint(engine.get("base_url"))
        running, waiting = count(engine.get("running")), count(engine.get("waiting"))
        limits = [(t("max sequences"), seqs.get(name)),
                  (t("knee"), count(engine.get("knee_concurrency"), minimum=1))]
        marks = tuple((n, float(v)) for n, v in limits if v is not None)
        if running is None:
            rows.append(Bar(name, (), marks, t("not read")))
            continue
        parts = ((t("running"), float(running)), (t("waiting"), float(waiting or 0)))
        note = t("{running} running, ", running=running) + (
            t("waiting not read") if waiting is None else t("{waiting} waiting", waiting=waiting))
        rows.append(Bar(name, parts, marks, note))
    plots.append(_plot(t("Requests running and waiting per engine"), t("requests"), rows,
                       load_why or t("no engine answered")))
    return t("KV cache and queue"), plots


def gpus(by_name: dict[str, dict]) -> Section:
    thermal, reason = _record(by_name, "gpu.thermal_power")
    items = _items(thermal, "gpus")
    reason = reason or t("no GPU in the record")
    rows = []
    for item in items:
        temp, slowdown = non_negative(item.get("temp_c")), non_negative(item.get("slowdown_c"))
        bar = _against(_gpu(item), temp, [(t("slowdown"), slowdown),
                                          (t("shutdown"), non_negative(item.get("shutdown_c"))),
                                          (t("max operating"), non_negative(item.get("max_operating_c")))],
                       "°C", _missing(item, "temp_c"))
        if temp is not None and slowdown is not None:
            bar = Bar(bar.label, bar.parts, bar.marks,
                      t("{temp} °C, {margin} °C under slowdown", temp=number(temp, ".0f"),
                        margin=number(slowdown - temp, ".0f")))
        rows.append(bar)
    plots = [_plot(t("GPU temperature against its slowdown and shutdown limits"), "°C", rows, reason)]
    rows = [_against(f"{_gpu(i)} {name}", non_negative(i.get(f"{key}_clock_mhz")),
                     [(t("max clock"), non_negative(i.get(f"{key}_clock_max_mhz")))], "MHz",
                     _missing(i, f"{key}_clock_mhz"))
            for i in items for key, name in (("sm", "SM"), ("mem", t("memory")))]
    plots.append(_plot(t("GPU clocks against their maximum (SM and memory)"), "MHz", rows, reason))
    rows = [_against(_gpu(i), non_negative(i.get("power_w")),
                     [(t("power limit"), non_negative(i.get("power_limit_w"))),
                      (t("default limit"), non_negative(i.get("power_default_limit_w")))], "W",
                     _missing(i, "power_w")) for i in items]
    plots.append(_plot(t("GPU power draw against its limit"), "W", rows, reason))
    return t("GPU temperature, clocks and power"), plots


def sections(probes: list[dict[str, Any]]) -> list[Section]:
    """The report's plots, a section each; the GPU sections only where the scan looked for
    GPUs, and the engine ones only where it looked for engines, so a CPU host's report is not
    a wall of "not measured"."""
    by_name = {p["name"]: p for p in probes if isinstance(p, dict) and isinstance(p.get("name"), str)}
    out = [bandwidth(by_name)]
    if (_record(by_name, "engine.load")[0] is not None or _record(by_name, "engine.metrics")[0]
            or _items(_record(by_name, "engine.discovery")[0], "engines")):  # found, not measured
        out += [knee(by_name), engines(by_name)]
    if _record(by_name, "gpu.thermal_power")[0] is not None:
        out.append(gpus(by_name))
    return out
