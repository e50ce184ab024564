"""What a series is about: the label sets of a record's items, and the records they join.

A tuple of items (a record's GPUs, its engines, its processes) is declared with a Scheme:
the labels every item of it gets, always the same names (empty where an item has no
value), so that one metric never has two label sets. Labels that say what an item is, as
dcgm-exporter's do: a GPU's index, UUID and model name (the UUID and the name joined from
gpu.inventory by index); an engine's kind, endpoint (no credentials), model and pid (joined
from engine.discovery by URL or pid); a process's pid, comm and engine. Never a command
line, a prompt or free text: they may hold secrets, and every new value is a new series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from doctor.model import ProbeResult
from doctor.redact import redact_text
from doctor.seam.http import display_url

Values = tuple[str, ...]


def text(value: Any) -> str:
    """A label value: "" for None, booleans as true/false, the rest as str()."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def endpoint(url: Any) -> str:
    """An engine's URL as shown: credentials removed, and "" when it has none."""
    if not isinstance(url, str) or not url:
        return ""
    try:
        return display_url(url)
    except ValueError:  # not a URL urllib can split ("http://[::1"): masked as free text
        return redact_text(url)


_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def finding_key(key: str) -> str:
    """A finding's key as a label (the series, Alertmanager): what a rule keys by may be an
    endpoint given with its key (``http://:KEY@host``) or a name beside a secret, and a label
    is shown to everyone who reads the metrics: credentials cut out of every URL in it, then
    masked as free text."""
    return redact_text(_CREDENTIALS.sub(r"\1", key)) if key else ""


@dataclass(slots=True)
class Joins:
    """Facts one record lends another's labels, from the same snapshot."""

    gpus: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (uuid, model name)
    by_url: dict[str, Any] = field(default_factory=dict)  # base URL -> engine.discovery's Engine
    by_pid: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, results: dict[str, ProbeResult]) -> "Joins":
        joins = cls()
        inventory = _record(results, "gpu.inventory")
        for gpu in getattr(inventory, "gpus", ()) or ():
            index = getattr(gpu, "index", None)
            if isinstance(index, int):
                joins.gpus[index] = (text(getattr(gpu, "uuid", None)), text(getattr(gpu, "name", None)))
        discovery = _record(results, "engine.discovery")
        for engine in getattr(discovery, "engines", ()) or ():
            url, pid = getattr(engine, "base_url", None), getattr(engine, "pid", None)
            if isinstance(url, str) and url:
                joins.by_url.setdefault(url, engine)
            if isinstance(pid, int):
                joins.by_pid.setdefault(pid, engine)
        return joins


def _record(results: dict[str, ProbeResult], name: str) -> Any:
    result = results.get(name)
    return result.record if result is not None and result.status == "ok" else None


@dataclass(frozen=True, slots=True)
class Scheme:
    """The labels of one tuple's items.

    ``reads``: the item's fields the labels come from (what the catalog's test counts as
    declared); ``direct``: (label, field) pairs whose value is the field's, unchanged, which
    the test that walks the recorded hosts checks on every item.
    """

    labels: tuple[str, ...]
    reads: tuple[str, ...]
    make: Callable[[Any, int, Joins], Values]
    direct: tuple[tuple[str, str], ...] = ()


def _get(item: Any, name: str | None) -> Any:
    return getattr(item, name, None) if name else None


def fields(*pairs: str) -> Scheme:
    """Labels copied from fields: ``fields("path", "source")``, or ``"label=field"``."""
    named = tuple((p.split("=")[0], p.split("=")[-1]) for p in pairs)
    return Scheme(tuple(label for label, _ in named), tuple(f for _, f in named),
                  lambda item, _i, _j: tuple(text(_get(item, f)) for _, f in named), named)


def position(label: str) -> Scheme:
    """Items without an identity of their own (an engine's output samples): their place."""
    return Scheme((label,), (), lambda _item, i, _j: (str(i),))


def gpu(index: str = "index", *own: str) -> Scheme:
    """gpu, uuid, model_name: the index from ``index``, the rest joined from gpu.inventory
    (else the item's own ``uuid``/``name`` where it has them: ``own`` names them)."""

    def make(item: Any, _i: int, joins: Joins) -> Values:
        number = _get(item, index)
        uuid, name = joins.gpus.get(number, ("", "")) if isinstance(number, int) else ("", "")
        return (text(number), uuid or text(_get(item, "uuid" if "uuid" in own else None)),
                name or text(_get(item, "name" if "name" in own else None)))

    return Scheme(("gpu", "uuid", "model_name"), (index, *own), make, (("gpu", index),))


def gpu_process() -> Scheme:
    """A process holding GPU memory: its GPU's labels, then pid, comm and engine."""
    on = gpu("gpu")

    def make(item: Any, i: int, joins: Joins) -> Values:
        return (*on.make(item, i, joins), text(_get(item, "pid")), text(_get(item, "name")),
                text(_get(item, "engine")))

    return Scheme((*on.labels, "pid", "comm", "engine"), ("gpu", "pid", "name", "engine"), make,
                  (("gpu", "gpu"), ("pid", "pid"), ("comm", "name"), ("engine", "engine")))


_CAPACITY_LABEL = re.compile(r"(?P<kind>\S+) at (?P<url>\S+)(?: pid (?P<pid>\d+))?")


def engine(url: str | None = None, pid: str | None = None, kind: str | None = None,
           model: str | None = None, described: str | None = None,
           extra: tuple[str, ...] = ()) -> Scheme:
    """kind, endpoint, model, pid (then ``extra`` fields as labels of their own).

    What the item says of itself comes first; the rest is joined from engine.discovery,
    found by the item's URL (a ``/metrics`` URL names its engine's base URL) or its pid.
    ``described``: a field holding engine.capacity's "vllm at URL pid N" label instead.
    """

    def make(item: Any, _i: int, joins: Joins) -> Values:
        own_url, own_pid = _get(item, url), _get(item, pid)
        own_kind, own_model = _get(item, kind), _get(item, model)
        said = _CAPACITY_LABEL.fullmatch(text(_get(item, described))) if described else None
        if said:
            own_kind, own_url = said["kind"], None if said["url"] == "None" else said["url"]
            own_pid = int(said["pid"]) if said["pid"] else None
        base = own_url.removesuffix("/metrics") if isinstance(own_url, str) else None
        found = joins.by_url.get(base or "") or (joins.by_pid.get(own_pid)
                                                 if isinstance(own_pid, int) else None)
        return (text(own_kind or _get(found, "kind")),
                endpoint(base or _get(found, "base_url")),
                text(own_model or _get(found, "model")),
                text(own_pid if own_pid is not None else _get(found, "pid")),
                *(text(_get(item, e)) for e in extra))

    reads = tuple(f for f in (url, pid, kind, model, described) if f) + extra
    direct = tuple((label, f) for label, f in (("kind", kind), ("model", model), ("pid", pid))
                   if f) + tuple((e, e) for e in extra)
    return Scheme(("kind", "endpoint", "model", "pid", *extra), reads, make, direct)


def limits_process() -> Scheme:
    """A process whose limits were read: pid, comm, engine (its kind) and role, then the
    engine's endpoint and model joined from engine.discovery by pid, so that two engines of
    one kind are told apart by what outlives a restart (where they listen, else their
    model), not only by a pid."""
    own = fields("pid", "comm", "engine", "role")

    def make(item: Any, i: int, joins: Joins) -> Values:
        pid = _get(item, "pid")
        found = joins.by_pid.get(pid) if isinstance(pid, int) and _get(item, "engine") else None
        return (*own.make(item, i, joins), endpoint(_get(found, "base_url")),
                text(_get(found, "model")))

    return Scheme((*own.labels, "endpoint", "model"), own.reads, make, own.direct)
