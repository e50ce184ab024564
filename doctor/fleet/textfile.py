"""node_exporter's textfile collector: a scan's or the daemon's series as a ``.prom`` file.

For hosts that already run node_exporter and want no second port: node_exporter
(``--collector.textfile.directory=DIR``) reads every ``DIR/*.prom`` at each scrape and serves
its series beside its own. ``llm-doctor scan --format prom -o DIR/llm-doctor.prom`` writes
one; ``llm-doctor daemon --textfile DIR/llm-doctor.prom`` rewrites one after every beat.
The file is written as node_exporter's documentation asks, to a temporary file in the same
folder, then renamed (doctor/output.write_atomic): the temporary name is
``.llm-doctor.prom.XXXXXXXX``, which does not end in ``.prom``, so a scrape never reads half
a file.

The series are the daemon exporter's (doctor/daemon/exporter.py), with its names, labels
and help, so dashboards and the rules ``llm-doctor rules export --prometheus`` writes work
on either: ``llm_doctor_finding{rule, cause, severity, symptoms, key}``,
``llm_doctor_probe_success{probe}``, ``..._probe_duration_seconds``, ``..._probe_status``,
the records' series of the catalog (doctor/daemon/catalog/), ``..._build_info`` and
``..._last_evaluation_timestamp_seconds`` (when the rules were evaluated: the exported
LlmDoctorStale alert fires when it is over five minutes old). Left out: the scrape's own
timestamp (node_exporter answers the scrape, not llm-doctor), and for a scan the daemon's
alerts and its count of evaluations (a scan has neither). Added:

* ``llm_doctor_textfile_written_timestamp_seconds``: when the file was written, for a
  staleness alert on a file whose writer stopped (node_exporter's own
  ``node_textfile_mtime_seconds{file}`` says the same from the file's mtime);
* ``llm_doctor_scan_exit_code``: the verdict, as ``llm-doctor scan`` exits for these
  findings (0 nothing at warning or above, 1 a warning, 2 a critical finding);
* ``llm_doctor_scan_duration_seconds``, for a scan.

A finding's title and evidence never go into a label (every new value is a new series, and
evidence may hold what a secret scan would mask); the finding's key is redacted as the
exporter's is. Label values are escaped by prometheus-client's writer; one that cannot be
written as UTF-8 (a lone surrogate from a hostile file) or is longer than ``MAX_LABEL``
characters is made writable here, and a series that then repeats one already written is
left out: node_exporter would drop it anyway and log a gathering error at every scrape
(``promhttp_metric_handler_errors_total{cause="gathering"}``).
"""

from __future__ import annotations

import calendar
import re
import time
from typing import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from doctor.daemon.exporter import PREFIX, DoctorCollector, Snapshot
from doctor.model import Finding, ScanReport, Severity

WRITTEN = f"{PREFIX}_textfile_written_timestamp_seconds"
MAX_LABEL = 1024  # characters: a model path or a GPU name fits; a 10 MB string from a hostile file does not
_SURROGATE = re.compile("[\ud800-\udfff]")  # not UTF-8: the writer would raise on it
# the daemon's series a textfile leaves out: node_exporter answers the scrape, not llm-doctor
_NOT_IN_ANY = {f"{PREFIX}_scrape_timestamp_seconds"}
_NOT_IN_A_SCAN = _NOT_IN_ANY | {f"{PREFIX}_alert", f"{PREFIX}_evaluations"}


class _Families(Collector):
    """Families built once, written once."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def exit_code(findings: Iterable[Finding]) -> int:
    """As ``ScanReport.exit_code``: 0 nothing at warning or above, 1 warning, 2 critical."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    return 0 if worst <= Severity.INFO else 1 if worst == Severity.WARNING else 2


def _label(value: str) -> str:
    if len(value) > MAX_LABEL:
        value = value[:MAX_LABEL - 1] + "…"
    return _SURROGATE.sub("\ufffd", value)


def _writable(families: Iterable[Metric]) -> list[Metric]:
    """Every family with its label values writable, its repeated series and empty families
    left out (a textfile holds what is, not the names of what could be)."""
    out = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
        samples = []
        for sample in family.samples:
            labels = {k: _label(str(v)) for k, v in sample.labels.items()}
            key = (sample.name, tuple(sorted(labels.items())))
            if key not in seen:
                seen.add(key)
                samples.append(sample._replace(labels=labels))
        if samples:  # a copy: the daemon's collector goes on serving its own families
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = samples
            out.append(copy)
    return out


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text)
    family.add_metric([], value)
    return family


def _text(families: Iterable[Metric], findings: list[Finding], written_at: float,
          extra: tuple[Metric, ...] = ()) -> str:
    verdict = _gauge(f"{PREFIX}_scan_exit_code",
                     "What 'llm-doctor scan' exits with for these findings: 0 nothing at "
                     "warning or above, 1 a warning, 2 a critical finding",
                     float(exit_code(findings)))
    written = _gauge(WRITTEN, "Unix time at which llm-doctor wrote this textfile", written_at)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(_writable([*families, verdict, *extra, written])))
    return generate_latest(registry).decode("utf-8")


def _evaluated_at(report: ScanReport, fallback: float) -> float:
    """When the scan's rules were evaluated: at its end (started_at is whole seconds, UTC)."""
    try:
        started = calendar.timegm(time.strptime(report.started_at, "%Y-%m-%dT%H:%M:%SZ"))
    except (ValueError, OverflowError):
        return fallback
    return started + report.duration_s


def scan_text(report: ScanReport, written_at: float | None = None) -> str:
    """A scan's findings, probe status and records as a textfile."""
    now = time.time() if written_at is None else written_at
    collector = DoctorCollector({})
    collector.publish(Snapshot(results={r.name: r for r in report.probes},
                               findings=list(report.findings),
                               evaluated_at=_evaluated_at(report, now)))
    kept = [f for f in collector.collect() if f.name not in _NOT_IN_A_SCAN]
    duration = _gauge(f"{PREFIX}_scan_duration_seconds", "Wall time of the scan",
                      round(report.duration_s, 6))
    return _text(kept, report.findings, now, (duration,))


def daemon_text(collector: DoctorCollector, written_at: float) -> str:
    """What the daemon's /metrics serves now, as a textfile (its alerts and evaluations too)."""
    kept = [f for f in collector.collect() if f.name not in _NOT_IN_ANY]
    return _text(kept, collector.snapshot.findings, written_at)
