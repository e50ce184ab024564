"""The Prometheus exporter: a custom collector that turns the latest records into metrics.

What a record becomes is declared in doctor/daemon/catalog/ (one row per field: name,
type, unit conversion, help, the labels of its items); this module walks a record along
those rows. Every item of a tuple reaches /metrics: items share their metric's label set
(a label an item has no value for is empty), and two items that would give the same series
are told apart by ``#2``, ``#3``... on their first label, never dropped. A field the catalog
does not declare (a record from a probe added without its rows) is counted in
``llm_doctor_exporter_unexported_values{probe, why}``, as is a value of the wrong type.

Beside the records: ``llm_doctor_probe_success{probe}``, ``..._probe_duration_seconds``,
one ``llm_doctor_finding`` series per active finding, ``llm_doctor_alert`` per pending or
firing alert, and a heartbeat. Checked with ``promtool check metrics`` in the tests.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from doctor import __version__
from doctor.daemon import catalog
from doctor.daemon.catalog.labels import Joins, finding_key, text
from doctor.daemon.catalog.rows import NUMBER, Each, Metric, Table
from doctor.model import Finding, ProbeResult

PREFIX = "llm_doctor"

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]
Series = tuple[Metric, Labels, float]


def _sample(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


class _Walk:
    """One record along its table's rows; ``wrong`` counts what could not be exported."""

    def __init__(self, table: Table, joins: Joins) -> None:
        self.table, self.joins = table, joins
        self.eaches = table.eaches
        self.wrong: Counter[str] = Counter()

    def reach(self, obj: Any, path: str) -> Iterator[tuple[Any, Labels]]:
        """The values at ``path``, with the labels of the items passed on the way (an item
        tuple at the end of ``path`` is walked into as well)."""
        yield from self._reach(obj, path.split(".") if path else [], "", ())

    def _reach(self, obj: Any, parts: list[str], at: str, labels: Labels
               ) -> Iterator[tuple[Any, Labels]]:
        if not parts:
            yield obj, labels
            return
        here = f"{at}.{parts[0]}" if at else parts[0]
        value = getattr(obj, parts[0], None)
        each = self.eaches.get(here)
        if each is None:
            yield from self._reach(value, parts[1:], here, labels)
            return
        for item, own in self.items(value, each):
            yield from self._reach(item, parts[1:], here, labels + own)

    def items(self, value: Any, each: Each) -> list[tuple[Any, Labels]]:
        """The tuple's items with their labels; a label set seen before gets ``#n``."""
        out: list[tuple[Any, Labels]] = []
        seen: Counter[tuple[str, ...]] = Counter()
        for i, item in enumerate(value if isinstance(value, (tuple, list)) else ()):
            values = each.scheme.make(item, i, self.joins)
            seen[values] += 1
            if seen[values] > 1:
                values = (f"{values[0]}#{seen[values]}", *values[1:])
            out.append((item, tuple(zip(each.scheme.labels, values))))
        return out

    def series(self, record: Any) -> Iterator[Series]:
        for metric in self.table.metrics:
            if metric.kind == "tally":
                parent, _, last = metric.field.rpartition(".")
                for obj, labels in self.reach(record, parent):
                    yield from self._tally(metric, getattr(obj, last, None), labels)
                continue
            for value, labels in self.reach(record, metric.field):
                yield from self._values(metric, value, labels + metric.const)

    def _tally(self, metric: Metric, value: Any, labels: Labels) -> Iterator[Series]:
        """Items that share a label set are counted together (XID events of one code)."""
        scheme = self.eaches[metric.field].scheme
        counts = Counter(scheme.make(item, i, self.joins)
                         for i, item in enumerate(value if isinstance(value, (tuple, list)) else ()))
        for values, n in counts.items():
            yield metric, labels + tuple(zip(scheme.labels, values)) + metric.const, float(n)

    def _values(self, m: Metric, value: Any, labels: Labels) -> Iterator[Series]:
        kind = m.kind
        if kind == "info":
            values = [getattr(value, f, None) for f in m.fields]
            if any(v is not None for v in values):
                yield m, labels + tuple(zip(m.labels, map(text, values))), 1.0
        elif kind == "flag":
            yield m, labels, 0.0 if value is None or value == "" else 1.0
        elif value is None:
            if m.none is not None:
                yield m, labels, m.none
        elif kind in NUMBER:
            number = _sample(value)
            if number is None:
                self.wrong["not-a-number"] += 1
            else:
                yield m, labels, number * m.scale
        elif kind == "timestamp":
            yield from self._timestamp(m, value, labels)
        elif kind == "bits":
            yield from self._bits(m, value, labels)
        elif kind == "length" and isinstance(value, (tuple, list)):
            yield m, labels, float(len(value))
        elif kind == "members" and isinstance(value, (tuple, list)):
            for member in dict.fromkeys(map(text, value)):
                yield m, labels + ((m.labels[0], member),), 1.0
        elif kind in ("counts", "pairs", "keys") and isinstance(value, dict):
            yield from self._mapping(m, value, labels)
        else:
            self.wrong[f"not-a-{'list' if kind in ('length', 'members') else 'dict'}"] += 1

    def _timestamp(self, m: Metric, value: Any, labels: Labels) -> Iterator[Series]:
        try:
            seconds = datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):  # not ISO 8601, or a year out of range
            self.wrong["not-a-time"] += 1
            return
        yield m, labels, seconds

    def _bits(self, m: Metric, value: Any, labels: Labels) -> Iterator[Series]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.wrong["not-a-mask"] += 1
            return
        for bit, name in m.bits:
            yield m, labels + ((m.labels[0], name),), 1.0 if value & bit else 0.0
        rest = value & ~sum(bit for bit, _ in m.bits)
        for n in range(min(rest.bit_length(), 64)):  # bits newer than the table: named by number
            if rest >> n & 1:
                yield m, labels + ((m.labels[0], f"bit_{n}"),), 1.0

    def _mapping(self, m: Metric, value: dict, labels: Labels) -> Iterator[Series]:
        for key, item in value.items():
            if m.kind == "pairs":
                yield m, labels + tuple(zip(m.labels, (text(key), text(item)))), 1.0
            elif m.kind == "keys":
                yield m, labels + ((m.labels[0], text(key)),), 1.0
            elif (number := _sample(item)) is not None:
                yield m, labels + ((m.labels[0], text(key)),), number * m.scale
            else:
                self.wrong["not-a-number"] += 1


def _undeclared(table: Table | None, record: Any) -> int:
    """How many of the record's fields (through its items) the table does not account for."""
    declared = table.declared() if table else {}
    count = 0

    def visit(obj: Any, at: str) -> None:
        nonlocal count
        for f in dataclasses.fields(obj):
            path = f"{at}.{f.name}" if at else f.name
            value = getattr(obj, f.name, None)
            if path not in declared:
                count += 1
            elif declared[path] == "items" and isinstance(value, (tuple, list)) and value \
                    and dataclasses.is_dataclass(value[0]):
                visit(value[0], path)

    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        visit(record, "")
    return count


def series(results: dict[str, ProbeResult]) -> tuple[list[Series], Counter[tuple[str, str]]]:
    """Every record's series, and what could not be exported: (probe, why) → how many."""
    joins = Joins.of(results)
    out: list[Series] = []
    wrong: Counter[tuple[str, str]] = Counter()
    for probe, result in results.items():
        if result.status != "ok" or result.record is None:
            continue
        table = catalog.table(probe)
        undeclared = _undeclared(table, result.record)
        if undeclared:
            wrong[(probe, "undeclared-field")] += undeclared
        if table is None:
            continue
        walk = _Walk(table, joins)
        out.extend(walk.series(result.record))
        for why, n in walk.wrong.items():
            wrong[(probe, why)] += n
    return out, wrong


def families(rows: list[Series]) -> list[Any]:
    """The metric families of those series, one per name, in the catalog's order."""
    out: dict[str, Any] = {}
    for metric, labels, value in rows:
        family = out.get(metric.name)
        if family is None:
            names = [k for k, _ in labels]
            make = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            family = out[metric.name] = make(metric.name, metric.help, labels=names)
        family.add_metric([v for _, v in labels], value)
    return list(out.values())


MAX_LABEL = 1024  # characters: a model path or a GPU name fits; a 10 MB string does not
_SURROGATE = re.compile("[\ud800-\udfff]")  # not UTF-8: the exposition writer raises on it


def _cut(value: str) -> str:
    return value if len(value) <= MAX_LABEL else value[:MAX_LABEL - 1] + "…"


def writable(family: Any) -> Any:
    """``family`` with every label value one the exposition writer can write (a lone
    surrogate from a hostile file as U+FFFD, cut at MAX_LABEL characters) and no series twice
    (two values that meet once cut): one such label answered every scrape with a 500."""
    seen: set[tuple] = set()
    kept = []
    for sample in family.samples:
        labels = {k: _SURROGATE.sub("\ufffd", _cut(v)) for k, v in sample.labels.items()}
        identity = (sample.name, tuple(sorted(labels.items())))
        if identity not in seen:
            seen.add(identity)
            kept.append(sample._replace(labels=labels))
    family.samples = kept
    return family


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
        self._samples: list[Sample] = []
        self._lock = threading.Lock()

    def publish(self, snapshot: Snapshot) -> None:
        """Replace what scrapes see; the families are built here, once per evaluation, so
        that a scrape only writes them out."""
        rows, wrong = series(snapshot.results)
        built = [writable(f) for f in (*families(rows), self._unexported(wrong),
                                        *self._probes(snapshot), *self._findings(snapshot),
                                        *self._heartbeat(snapshot))]
        kept = [(m.name, labels, value)
                for m, labels, value in rows if m.kept and math.isfinite(value)]
        with self._lock:
            self.snapshot, self._families, self._samples = snapshot, built, kept

    def samples(self) -> list[Sample]:
        """The records' numeric samples, for the history (string facts are left out)."""
        with self._lock:
            return list(self._samples)

    def collect(self) -> Iterator[Any]:
        with self._lock:
            built = self._families
        yield from built
        now = GaugeMetricFamily(f"{PREFIX}_scrape_timestamp_seconds",
                                "Unix time at which this scrape was answered")
        now.add_metric([], time.time())
        yield now

    def _unexported(self, wrong: Counter[tuple[str, str]]) -> Any:
        family = GaugeMetricFamily(
            f"{PREFIX}_exporter_unexported_values",
            "Values of the last records the exporter could not export: a field its catalog "
            "does not declare (undeclared-field), or a value of the wrong type",
            labels=["probe", "why"])
        for (probe, why), n in sorted(wrong.items()):
            family.add_metric([probe, why], float(n))
        return family

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
                                    "One series per finding of the last evaluation, or kept by the "
                                    "hysteresis of an alert still pending or firing (value 1)",
                                    labels=labels)
        seen = set()
        for f in snap.findings:
            values = (f.rule, f.cause, f.severity.label, ",".join(f.symptoms),
                      finding_key(f.identity))
            if values not in seen:
                seen.add(values)
                finding.add_metric(list(values), 1.0)
        alert = GaugeMetricFamily(f"{PREFIX}_alert",
                                  "The daemon's own alerts: pending or firing, after their 'for'",
                                  labels=["rule", "key", "cause", "severity", "alertstate"])
        for rule, key, cause, severity, state in snap.alerts:
            alert.add_metric([rule, finding_key(key), cause, severity, state], 1.0)
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
