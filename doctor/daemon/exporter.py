"""The Prometheus exporter: a custom collector that turns the latest records into metrics.

Any probe's frozen record becomes gauges without code here knowing it (style.md 1):
a numeric or boolean field ``f`` of probe ``area.name`` is ``llm_doctor_area_name_f`` with
the unit its name already carries (``_bytes``, ``_gbps``, ``_mib``, ``_c``; ``_s`` is
spelled ``_seconds`` as Prometheus requires). Items of a tuple of records get labels from
their identifying fields (pid, comm, engine, uuid, index, path, name, ...), nested fields
extend the name, and a dict of numbers becomes one series per key (``key`` label).
Strings other than identifiers are never labels: command lines may hold secrets.

Beside the records: ``llm_doctor_probe_success{probe}``, ``..._probe_duration_seconds``,
one ``llm_doctor_finding`` series per active finding, ``llm_doctor_alert`` per pending or
firing alert, and a heartbeat. Checked with ``promtool check metrics`` in the tests.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from doctor import __version__
from doctor.model import Finding, ProbeResult

PREFIX = "llm_doctor"
IDENTIFYING = ("pid", "comm", "engine", "uuid", "index", "gpu", "a", "b", "bdf", "path", "mount",
               "name", "device", "model", "url")  # a, b: the two ends of a pair (GPU topology)
# promtool's lint rejects abbreviated units (s, ms, b, kb, mb, gb, m, h, d) as name parts and
# non-base units (milliseconds, kilobytes): such a field becomes its base unit, value scaled.
# Only a field's last word after an underscore is a unit ("window_s", not a pair's end "b");
# m, h and d are left alone: minutes or metres, hours, days cannot be told apart.
_BASE = {"s": ("seconds", 1.0), "sec": ("seconds", 1.0), "ms": ("seconds", 1e-3),
         "us": ("seconds", 1e-6), "ns": ("seconds", 1e-9), "b": ("bytes", 1.0),
         "kb": ("bytes", 1e3), "mb": ("bytes", 1e6), "gb": ("bytes", 1e9), "tb": ("bytes", 1e12)}
_RESERVED_SUFFIX = {"total": "overall", "count": "number", "sum": "summed", "bucket": "bucket_id"}

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]


def metric_name(*parts: str) -> str:
    """``host.cpu_load``, ``window_s`` → ``llm_doctor_host_cpu_load_window_seconds``."""
    words = [w for w in re.sub(r"[^a-zA-Z0-9_]", "_", "_".join((PREFIX, *parts))).lower().split("_")
             if w]
    if "_" in parts[-1] and words[-1] in _BASE:
        unit = _BASE[words[-1]][0]
        words[-1] = unit[:-1] if words[-2] == "per" else unit  # tokens_per_s: _per_second
    if words[-1] in _RESERVED_SUFFIX:
        words[-1] = _RESERVED_SUFFIX[words[-1]]
    return "_".join(words)


def unit_scale(field_name: str) -> float:
    """The factor from a field's unit to the base unit of its metric (``latency_ms`` → 1e-3)."""
    if "_" not in field_name:
        return 1.0
    return _BASE.get(field_name.rsplit("_", 1)[-1].lower(), ("", 1.0))[1]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _identity(item: Any) -> Labels:
    values = [(f, getattr(item, f)) for f in IDENTIFYING if hasattr(item, f)]
    return tuple((f, str(v)) for f, v in values if v is not None and not isinstance(v, (tuple, dict)))


def flatten(probe: str, record: Any) -> list[Sample]:
    """Every numeric value in ``record`` as (metric name, labels, value)."""
    out: list[Sample] = []
    _walk(record, [probe], (), out)
    return out


def _walk(value: Any, path: list[str], labels: Labels, out: list[Sample]) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _walk(getattr(value, f.name), [*path, f.name], labels, out)
        return
    number = _number(value)
    scale = unit_scale(path[-1])
    if number is not None:
        out.append((metric_name(*path), labels, number * scale))
    elif isinstance(value, dict):
        for key, item in value.items():
            n = _number(item)
            if n is not None:
                out.append((metric_name(*path), (*labels, ("key", str(key))), n * scale))
    elif isinstance(value, (tuple, list)):
        for position, item in enumerate(value):
            if dataclasses.is_dataclass(item):
                _walk_item(item, position, path, labels, out)


def _walk_item(item: Any, position: int, path: list[str], labels: Labels,
               out: list[Sample]) -> None:
    """One item of a tuple: its identifying fields become labels, the rest metrics."""
    ident = _identity(item) or (("position", str(position)),)
    taken = {k for k, _ in labels}
    # an item inside an item (a GPU's processes) names its clashing labels after its field
    renamed = tuple((f"{path[-1]}_{k}" if k in taken else k, v) for k, v in ident)
    own = {k for k, _ in ident}
    for f in dataclasses.fields(item):
        if f.name not in own:
            _walk(getattr(item, f.name), [*path, f.name], (*labels, *renamed), out)


@dataclass(slots=True)
class Snapshot:
    """What the collector exports: replaced as a whole after each evaluation."""

    results: dict[str, ProbeResult] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    alerts: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # rule,key,cause,severity,state
    evaluated_at: float = 0.0
    evaluations: int = 0


class DoctorCollector(Collector):
    """Reads the latest snapshot on each scrape; never runs a probe itself."""

    def __init__(self, descriptions: dict[str, str]) -> None:
        self.descriptions = descriptions
        self.snapshot = Snapshot()
        self._families: list[Any] = []
        self._lock = threading.Lock()

    def publish(self, snapshot: Snapshot) -> None:
        """Replace what scrapes see; the families are built here, once per evaluation, so
        that a scrape only writes them out."""
        families = [*self._records(snapshot), *self._probes(snapshot), *self._findings(snapshot),
                    *self._heartbeat(snapshot)]
        with self._lock:
            self.snapshot, self._families = snapshot, families

    def samples(self) -> list[Sample]:
        """The records' samples, for the history."""
        with self._lock:
            snap = self.snapshot
        out: list[Sample] = []
        for name, result in snap.results.items():
            if result.status == "ok" and result.record is not None:
                out.extend(flatten(name, result.record))
        return out

    def collect(self) -> Iterator[Any]:
        with self._lock:
            families = self._families
        yield from families
        now = GaugeMetricFamily(f"{PREFIX}_scrape_timestamp_seconds",
                                "Unix time at which this scrape was answered")
        now.add_metric([], time.time())
        yield now

    def _records(self, snap: Snapshot) -> Iterator[Any]:
        families: dict[str, GaugeMetricFamily] = {}
        shapes: dict[str, list[str]] = {}
        seen: set[tuple[str, Labels]] = set()
        for probe, result in snap.results.items():
            if result.status != "ok" or result.record is None:
                continue
            for name, labels, value in flatten(probe, result.record):
                if (name, labels) in seen:
                    continue  # two items with the same identity: the first one wins
                seen.add((name, labels))
                family = families.get(name)
                if family is None:
                    help_text = f"{probe}: {self.descriptions.get(probe, probe)}"
                    shapes[name] = [k for k, _ in labels]
                    family = families[name] = GaugeMetricFamily(name, help_text,
                                                                labels=shapes[name])
                if [k for k, _ in labels] != shapes[name]:
                    continue  # a record whose items disagree on identity: keep the first shape
                family.add_metric([v for _, v in labels], value)
        yield from families.values()

    def _probes(self, snap: Snapshot) -> Iterator[Any]:
        success = GaugeMetricFamily(f"{PREFIX}_probe_success",
                                    "1 when the probe's last run returned a record, else 0",
                                    labels=["probe"])
        duration = GaugeMetricFamily(f"{PREFIX}_probe_duration_seconds",
                                     "Wall time of the probe's last run", labels=["probe"])
        status = GaugeMetricFamily(f"{PREFIX}_probe_status",
                                   "The probe's last outcome (ok, skipped, error, timeout) as 1",
                                   labels=["probe", "status"])
        for name, result in snap.results.items():
            success.add_metric([name], 1.0 if result.status == "ok" else 0.0)
            duration.add_metric([name], round(result.duration_s, 6))
            status.add_metric([name, result.status], 1.0)
        yield from (success, duration, status)

    def _findings(self, snap: Snapshot) -> Iterator[Any]:
        labels = ["rule", "cause", "severity", "symptoms", "key"]
        finding = GaugeMetricFamily(f"{PREFIX}_finding",
                                    "One series per finding of the last evaluation (value 1)",
                                    labels=labels)
        seen = set()
        for f in snap.findings:
            values = (f.rule, f.cause, f.severity.label, ",".join(f.symptoms), f.identity)
            if values not in seen:
                seen.add(values)
                finding.add_metric(list(values), 1.0)
        alert = GaugeMetricFamily(f"{PREFIX}_alert",
                                  "The daemon's own alerts: pending or firing, after their 'for'",
                                  labels=["rule", "key", "cause", "severity", "alertstate"])
        for rule, key, cause, severity, state in snap.alerts:
            alert.add_metric([rule, key, cause, severity, state], 1.0)
        yield from (finding, alert)

    def _heartbeat(self, snap: Snapshot) -> Iterator[Any]:
        beat = GaugeMetricFamily(f"{PREFIX}_last_evaluation_timestamp_seconds",
                                 "Unix time of the daemon's last rule evaluation (its heartbeat)")
        beat.add_metric([], snap.evaluated_at)
        yield beat
        count = CounterMetricFamily(f"{PREFIX}_evaluations", "Rule evaluations since start")
        count.add_metric([], float(snap.evaluations))
        yield count
        info = GaugeMetricFamily(f"{PREFIX}_build_info", "llm-doctor's version", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
