"""The catalog of exported metrics: what each probe's record is on /metrics, declared once.

Every field of every record is one row here: a metric (its name, type, base-unit
conversion and help), the tuple of items it walks (with the labels of those items,
doctor/daemon/catalog/labels.py), a label, or a field left out with the reason. A field
renamed in a probe is then a failing test (tests/test_exporter_catalog.py walks the
records' types), and a metric renamed here is a diff of tests/golden/metrics.txt: a
rename is a decision about people's dashboards, never a side effect. Regenerate the
golden file after a deliberate change with::

    python -m doctor.daemon.catalog > tests/golden/metrics.txt

Why here and not beside each record: the names are the daemon's contract with Prometheus
users, the records stay plain values that know nothing of it (style.md 1), and the daemon
imports no probe module (tests/test_import_graph.py); the test holds the two together.

Conventions (Prometheus' naming page, node_exporter, dcgm-exporter): base units in the
name (``_bytes``, ``_seconds``, ``_celsius``, ``_watts``, ``_hertz``, ``_ratio`` for 0-1
fractions, ``_bytes_per_second``), converted here (MiB × 1048576, MHz × 1e6, GB/s × 1e9,
ms × 1e-3); ``_total`` on counters only; string facts as ``_info`` series of value 1; a
bit mask as one 0/1 series per named bit; None is no series (absent is not zero), except
where a row says what None stands for (a limit of None is unlimited: +Inf).
"""

from __future__ import annotations

import re
from typing import Iterator

from doctor.daemon.catalog import engine, gpu, host
from doctor.daemon.catalog import net, net_gdr, net_nccl  # issue 30
from doctor.daemon.catalog import net_collective  # issue 30, llm-doctor collective
from doctor.daemon.catalog import gpu_platform  # issue 32, platforms
from doctor.daemon.catalog import amd  # issue 33, AMD (ROCm)
from doctor.daemon.catalog import npu  # issue 33, Huawei Ascend
from doctor.daemon.catalog.rows import KINDS, Metric, Table

TABLES: dict[str, Table] = {t.probe: t for t in (*host.TABLES, *engine.TABLES, *gpu.TABLES,
                                                  *net.TABLES, *net_gdr.TABLES, *net_nccl.TABLES,
                                                  *net_collective.TABLES, *gpu_platform.TABLES,
                                                  *amd.TABLES, *npu.TABLES)}

# Units a name must not carry (promtool's abbreviations, and the records' own spellings):
# the base unit takes their place.
_NOT_BASE = re.compile(r"_(c|w|mhz|mib|gib|kib|mb|gb|kb|gbps|mbps|ms|us|ns|s|mts|percent|perc"
                       r"|fraction|share|rate|count|sum|bucket|bits|sec|minutes|hours|days)(_|$)")
# promtool's lint (client_golang promlint, lintMetricTypeInName): a name must not hold a
# metric type as a word, whatever the series' own type ("_histogram_requests" failed
# `promtool check metrics` on every vLLM host with a prompt-length histogram).
_TYPE_WORD = re.compile(r"_(counter|gauge|histogram|summary)(_|$)")


def table(probe: str) -> Table | None:
    return TABLES.get(probe)


def metrics() -> Iterator[tuple[Table, Metric]]:
    for t in TABLES.values():
        for m in t.metrics:
            yield t, m


_BY_NAME: dict[str, Metric] = {}
for _table, _metric in metrics():
    _BY_NAME.setdefault(_metric.name, _metric)


def about(name: str) -> Metric | None:
    """The declaration behind an exported name (the first row, for a name that several
    rows share with their own ``const`` labels)."""
    return _BY_NAME.get(name)


def check() -> list[str]:
    """What breaks the conventions: an unknown kind; a name shared by rows of other types,
    labels or probes; ``_total`` off a counter or ``_info`` off an info series; a unit
    that is not a base unit; a ceiling that is no metric. Empty when all is well."""
    problems: list[str] = []
    shapes: dict[str, tuple[str, tuple[str, ...], str]] = {}
    consts: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for t, m in metrics():
        where = f"{t.probe} {m.field or '(record)'}: {m.name}"
        shape = (m.type, t.label_names(m), t.probe)
        if shapes.setdefault(m.name, shape) != shape:
            problems.append(f"{where}: shares its name with a row of another type, labels or probe")
        if (m.name, m.const) in consts:
            problems.append(f"{where}: two rows give the same series")
        consts.add((m.name, m.const))
        if m.kind not in KINDS:
            problems.append(f"{where}: unknown kind {m.kind!r}")
        if (m.kind == "counter") != m.name.endswith("_total"):
            problems.append(f"{where}: counters, and only counters, end in _total")
        if (m.kind == "info") != m.name.endswith("_info") and m.kind not in ("pairs", "members"):
            problems.append(f"{where}: string facts, and only they, are _info series")
        if _NOT_BASE.search(m.name.removeprefix("llm_doctor_")):
            problems.append(f"{where}: not a base unit, or a reserved suffix, in the name")
        if _TYPE_WORD.search(m.name):
            problems.append(f"{where}: a metric type as a word in the name (promtool refuses it)")
        if m.ceiling and m.ceiling not in _BY_NAME:
            problems.append(f"{where}: its ceiling {m.ceiling} is not a metric")
    return problems


def golden() -> str:
    """Every exported name with its type, labels, probe and field: tests/golden/metrics.txt."""
    lines = ["# The metrics llm-doctor's daemon exports from the probes' records: name, type,",
             "# labels, probe, field[, fixed labels]. Generated by",
             "#   python -m doctor.daemon.catalog > tests/golden/metrics.txt",
             "# A line that changes renames or drops a series on people's dashboards: decide it."]
    rows = sorted((m.name, m.type, ",".join(t.label_names(m)) or "-", t.probe,
                   m.field or "(record)", ",".join(f"{k}={v}" for k, v in m.const))
                  for t, m in metrics())
    for name, type_, labels, probe, field, const in rows:
        lines.append(f"{name} {type_} {labels} {probe} {field}" + (f" {const}" if const else ""))
    return "\n".join(lines) + "\n"
