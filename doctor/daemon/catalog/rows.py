"""The rows of the catalog: a metric, a tuple of items, a field left out; and the table
that holds one probe's rows (doctor/daemon/catalog/__init__.py says why and how)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from doctor.daemon.catalog.labels import Scheme

PREFIX = "llm_doctor_"
MIB = 1048576.0
MHZ = 1e6
GBPS = 1e9  # decimal GB/s, as the STREAM and copy kernels count
MBPS = 1e6
GB = 1e9
MS = 1e-3
INF = math.inf

Labels = tuple[tuple[str, str], ...]

# What each kind makes of the value it reads.
NUMBER = ("gauge", "counter")  # a number (a bool is 0/1), times ``scale``
KINDS = (*NUMBER,
         "flag",  # 1 when a string is set (an error), 0 when it is None; the text stays out
         "timestamp",  # an ISO 8601 time, as unix seconds
         "info",  # an item's string fields as labels, value 1
         "bits",  # an integer mask: one 0/1 series per named bit
         "members",  # a tuple of strings or numbers: one series per member, value 1
         "counts",  # a dict of numbers: one series per key
         "pairs",  # a dict of strings: one series per key and value, value 1
         "keys",  # a dict whose values are free text: one series per key, value 1
         "length",  # how many entries a tuple holds
         "tally")  # a tuple of items: how many of them have each label set


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # as exported (``_total`` included on counters)
    kind: str
    field: str  # the record field, a path through tuples ("gpus.temp_c"); info: the item path
    help: str
    scale: float = 1.0
    const: Labels = ()  # fixed labels that tell rows of one metric apart: limit="soft"
    none: float | None = None  # what None stands for; no series when None here
    labels: tuple[str, ...] = ()  # the kind's own labels (info, bits, members, counts...)
    fields: tuple[str, ...] = ()  # info: the field behind each of ``labels``
    bits: tuple[tuple[int, str], ...] = ()
    ceiling: str = ""  # the metric that is this one's ceiling (the reports draw it as a line)

    @property
    def type(self) -> str:
        return "counter" if self.kind == "counter" else "gauge"

    @property
    def kept(self) -> bool:
        """Whether the daemon's history keeps it for the reports' plots (numbers, not facts)."""
        return self.kind not in ("info", "members", "pairs", "keys")


@dataclass(frozen=True, slots=True)
class Each:
    """A tuple of items; its items' series carry ``scheme``'s labels."""

    path: str
    scheme: Scheme


@dataclass(frozen=True, slots=True)
class Unexported:
    field: str
    why: str


Row = Metric | Each | Unexported


@dataclass(frozen=True, slots=True)
class Table:
    probe: str
    rows: tuple[Row, ...]

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(r for r in self.rows if isinstance(r, Metric))

    @property
    def eaches(self) -> dict[str, Each]:
        return {r.path: r for r in self.rows if isinstance(r, Each)}

    def chain(self, path: str) -> list[Each]:
        """The tuples a walk to ``path`` passes through, outermost first (``path`` itself
        included when it is one)."""
        parts = path.split(".") if path else []
        eaches = self.eaches
        return [eaches[p] for p in (".".join(parts[:n]) for n in range(1, len(parts) + 1))
                if p in eaches]

    def label_names(self, metric: Metric) -> tuple[str, ...]:
        chain = self.chain(metric.field)
        if metric.kind not in ("info", "tally") and chain and chain[-1].path == metric.field:
            chain = chain[:-1]
        items = tuple(label for each in chain for label in each.scheme.labels)
        return items + tuple(k for k, _ in metric.const) + metric.labels

    def declared(self) -> dict[str, str]:
        """Every field path this table accounts for → how ("items", "labels", "metric NAME",
        "not exported: why")."""
        out: dict[str, str] = {}
        for row in self.rows:
            if isinstance(row, Unexported):
                out[row.field] = f"not exported: {row.why}"
            elif isinstance(row, Metric) and row.kind == "info":
                for f in row.fields:
                    out[f"{row.field}.{f}" if row.field else f] = f"label of {row.name}"
            elif isinstance(row, Metric):
                out[row.field] = f"metric {row.name}"
        for each in self.eaches.values():  # a tally counts a tuple that is also its items
            out[each.path] = "items"
            for read in each.scheme.reads:
                out[f"{each.path}.{read}"] = "labels"
        return out


# Constructors, so that a table reads one metric a line.
def gauge(field: str, name: str, help: str, scale: float = 1.0, **kw) -> Metric:
    return Metric(PREFIX + name, "gauge", field, help, scale, **kw)


def counter(field: str, name: str, help: str, **kw) -> Metric:
    return Metric(PREFIX + name, "counter", field, help, **kw)


def info(path: str, name: str, help: str, **labels: str) -> Metric:
    """``info("gpus", "gpu_info", "...", bus_id="bus_id")``: label = field of the item."""
    return Metric(PREFIX + name, "info", path, help, labels=tuple(labels),
                  fields=tuple(labels.values()))


def of(kind: str, field: str, name: str, help: str, *labels: str, **kw) -> Metric:
    """The other kinds: ``of("members", "isa", "host_cpu_flag_info", "...", "flag")``."""
    return Metric(PREFIX + name, kind, field, help, labels=labels, **kw)


def missing(field: str, name: str, what: str) -> Metric:
    """A record's ``missing`` dict (field → why it holds None): one series per absent
    value, labelled with the record's field and the reason (doctor/seam/missing.py)."""
    return of("pairs", field, name, f"{what}: a value the probe could not read (field), and "
              "why (reason: not-supported, no-permission, not-found, device-lost...)",
              "field", "reason")


def each(path: str, scheme: Scheme) -> Each:
    return Each(path, scheme)


def unexported(field: str, why: str) -> Unexported:
    return Unexported(field, why)
