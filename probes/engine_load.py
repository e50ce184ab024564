"""engine.load: each engine's live concurrency, its knee measured earlier, and replica skew.

Sources: one GET of the engine's ``/metrics`` (running and waiting requests: vLLM
``vllm:num_requests_running``/``_waiting``, SGLang ``sglang:num_running_reqs``/
``num_queue_reqs``, TGI ``tgi_batch_current_size``/``tgi_queue_size``, llama.cpp
``llamacpp:requests_processing``/``requests_deferred``), else llama.cpp's ``/slots``
(slots with ``is_processing``); the sweep ``llm-doctor load`` saved for that endpoint
(``~/.local/state/llm-doctor/knee-<hash>.json``, see doctor/knee.py). Unit: requests. No
privilege needed. Manual equivalent: ``curl -s HOST:PORT/metrics | grep -E
'running|waiting|processing|deferred'`` and ``cat ~/.local/state/llm-doctor/knee-*.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from doctor.host import Host, HostReadError
from doctor.knee import knee_path
from doctor.model import ScanOptions, Skip
from probes.engine_targets import Target, targets

TIMEOUT_S = 5.0
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
           "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size",
           "llamacpp:requests_deferred")


@dataclass(frozen=True, slots=True)
class EngineLoad:
    base_url: str
    kind: str | None
    model: str | None
    running: int | None  # requests being decoded now
    waiting: int | None  # requests queued
    source: str | None  # "/metrics", "/slots", or None when neither answered
    knee_concurrency: int | None  # from the saved sweep, when its knee was found
    knee_status: str | None  # found | not-reached | no-data; None: no sweep saved
    knee_measured_at: str | None
    knee_file: str  # where the sweep is (or would be) kept
    error: str | None


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """Endpoints serving the same model: replicas a balancer spreads load over."""

    model: str
    replicas: int
    running_max: int
    running_min: int
    busiest: str
    idlest: str


@dataclass(frozen=True, slots=True)
class LoadRecord:
    engines: tuple[EngineLoad, ...]
    models: tuple[ReplicaGroup, ...]


def gauge_sum(page: str, names: tuple[str, ...]) -> int | None:
    """The sum over label sets of the first metric in ``names`` the page has."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name in names:
                    totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError):
        return None
    for name in names:
        if name in totals:
            return int(totals[name])
    return None


def _headers(target: Target) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None


def live_load(host: Host, target: Target) -> tuple[int | None, int | None, str | None, str | None]:
    """(running, waiting, source, error) from /metrics, else /slots."""
    errors = []
    try:
        page = host.http_get(f"{target.base_url}/metrics", TIMEOUT_S, 8 << 20, _headers(target))
        if page.status == 200:
            running = gauge_sum(page.body, RUNNING)
            if running is not None:
                return running, gauge_sum(page.body, WAITING), "/metrics", None
        errors.append(f"{page.url}: HTTP {page.status}, no running-requests gauge")
    except HostReadError as exc:
        errors.append(str(exc))
    try:
        slots = host.http_get(f"{target.base_url}/slots", TIMEOUT_S, 8 << 20, _headers(target))
        data = json.loads(slots.body) if slots.status == 200 else None
        if isinstance(data, list):
            return sum(bool(s.get("is_processing")) for s in data if isinstance(s, dict)), \
                None, "/slots", None
        errors.append(f"{slots.url}: HTTP {slots.status}")
    except HostReadError as exc:
        errors.append(str(exc))
    except ValueError:
        errors.append(f"{target.base_url}/slots: not JSON")
    return None, None, None, "; ".join(errors)


def saved_knee(host: Host, base_url: str) -> tuple[int | None, str | None, str | None, str]:
    """(knee concurrency, status, measured_at, file) from the saved sweep, if any."""
    path = str(knee_path(base_url))
    try:
        document = json.loads(host.read_text(path))
        knee = document["knee"]
        found = knee["concurrency"] if knee["status"] == "found" else None
        return found, knee["status"], document.get("measured_at"), path
    except HostReadError:
        return None, None, None, path
    except (ValueError, KeyError, TypeError):
        return None, "unreadable", None, path


def replica_groups(engines: list[EngineLoad]) -> tuple[ReplicaGroup, ...]:
    by_model: dict[str, list[EngineLoad]] = {}
    for engine in engines:
        if engine.model and engine.running is not None:
            by_model.setdefault(engine.model, []).append(engine)
    groups = []
    for model, members in sorted(by_model.items()):
        if len(members) < 2:
            continue
        ordered = sorted(members, key=lambda e: e.running or 0)
        groups.append(ReplicaGroup(model, len(members), ordered[-1].running or 0,
                                   ordered[0].running or 0, ordered[-1].base_url,
                                   ordered[0].base_url))
    return tuple(groups)


def served_model(host: Host, target: Target) -> str | None:
    """The target's model: from discovery, else the first id of its /v1/models."""
    if target.model:
        return target.model
    try:
        page = host.http_get(f"{target.base_url}/v1/models", TIMEOUT_S, 1 << 20, _headers(target))
        data = json.loads(page.body)["data"] if page.status == 200 else None
        return str(data[0]["id"]) if data else None
    except (HostReadError, ValueError, KeyError, IndexError, TypeError):
        return None


def probe(host: Host, options: ScanOptions) -> LoadRecord:
    """Live concurrency of every engine endpoint, against its saved knee."""
    found = targets(host, options)
    if not found:
        raise Skip("no engine endpoint: none found running, none named with --endpoint")
    engines = []
    for target in found:
        running, waiting, source, error = live_load(host, target)
        knee, status, measured_at, path = saved_knee(host, target.base_url)
        engines.append(EngineLoad(target.base_url, target.kind, served_model(host, target),
                                  running, waiting,
                                  source, knee, status, measured_at, path, error))
    return LoadRecord(tuple(engines), replica_groups(engines))


def summary(record: LoadRecord) -> str:
    return "; ".join(f"{e.base_url}: running {e.running}, waiting {e.waiting}, knee "
                     f"{e.knee_concurrency if e.knee_status == 'found' else e.knee_status or 'not measured'}"
                     for e in record.engines)
