"""engine.load: each engine's live concurrency, its knee measured earlier, and replica skew.

Replica skew is judged only between engines the user says are replicas behind one front
(``[scan] replicas`` in the config: groups of endpoint URLs; two engines serving the same
model file are no replicas by that alone, issue 28), that serve the same model, and over
the window between engine.metrics' two scrapes: requests finished (vLLM, SGLang, TGI
counters) else prompt + generated tokens (llama.cpp counts no requests), never one
snapshot of the requests in flight.

Sources: running and waiting requests from engine.metrics' second scrape of ``/metrics``
(normalised across engines: vLLM ``vllm:num_requests_running``/``_waiting``, SGLang,
TGI, llama.cpp ``llamacpp:requests_processing``/``requests_deferred``), else llama.cpp's
``/slots`` (slots with ``is_processing``); the sweep ``llm-doctor load`` saved for that endpoint
(``~/.local/state/llm-doctor/knee-<hash>.json``, see doctor/workload/knee.py). Unit: requests.
No privilege needed. Manual equivalent: ``curl -s HOST:PORT/metrics | grep -E
'running|waiting|processing|deferred'`` and ``cat ~/.local/state/llm-doctor/knee-*.json``.

The sweep's levels travel with the knee (concurrency, output tokens/s, TTFT p50 ms; at most
MAX_SWEEP_LEVELS of them), so that a report can draw the curve the knee was read from.

A sweep saved by an llm-doctor before schema ``llm-doctor/load/2`` is not used: its knee was
taken from one time-boxed level, with the client's own cut-off requests counted as errors
and prompts the engine's cache had seen, so it may be the client's knee, not the engine's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from doctor.i18n import lazy, t
from doctor.seam.host import Host, HostReadError, read_error_text
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.values import count, field, page_json, text
from doctor import display
from probes.helpers.engine_scrape import for_engine, scraped, with_metrics
from probes.helpers.engine_sweep import MAX_SWEEP_LEVELS as MAX_SWEEP_LEVELS
from probes.helpers.engine_sweep import SweepPoint, saved_sweep
from probes.helpers.engine_sweep import knee_throughput as knee_throughput
from probes.helpers.engine_sweep import saved_knee as saved_knee
from probes.helpers.engine_sweep import sweep_points as sweep_points
from probes.helpers.engine_targets import Target, targets
from probes.helpers.knee_ceiling import no_knee_reason

TIMEOUT_S = 5.0
# `llm-doctor load` doubles concurrency from 1 (or runs the --levels asked for): 32 levels
# is past any sweep it makes; a saved file with more is someone else's, and is cut here.


@dataclass(frozen=True, slots=True)
class EngineLoad:
    base_url: str
    kind: str | None
    model: str | None
    running: int | None  # requests being decoded now
    waiting: int | None  # requests queued
    source: str | None  # "/metrics", "/slots", or None when neither answered
    knee_concurrency: int | None  # from the saved sweep, when its knee was found
    # found | not-reached | no-data, unreadable, outdated (an older schema); None: none saved
    knee_status: str | None
    knee_measured_at: str | None
    knee_file: str  # where the sweep is (or would be) kept
    error: str | None
    sweep: tuple[SweepPoint, ...] = ()  # the saved sweep's levels, in the order measured
    # output tokens/s of the sweep's level at the knee (the fleet's outlier rules compare it)
    knee_output_tokens_per_s: float | None = None
    # work between engine.metrics' two scrapes, interval_s apart: requests finished, and
    # prompt + generated tokens; None where the engine has no such counter
    requests_in_window: float | None = None
    tokens_in_window: float | None = None
    interval_s: float | None = None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)  # field -> why it is None


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """Endpoints the user says one balancer spreads load over ([scan] replicas), serving
    the same model, with the work each did in the window between the scrapes."""

    model: str
    replicas: int
    running_max: int  # requests in flight at the second scrape (a snapshot: not judged)
    running_min: int
    busiest: str  # by the work done in the window (by the snapshot when none is counted)
    idlest: str
    # "requests" (finished, from a counter) or "tokens" (prompt + generated) in the window;
    # None: no member's counters moved or could be read, so skew is not judged
    measure: str | None = None
    served_max: float | None = None
    served_min: float | None = None
    interval_s: float | None = None  # the shortest window of the members
    members: tuple[str, ...] = ()  # the replicas' base URLs, sorted: the group's identity


@dataclass(frozen=True, slots=True)
class LoadRecord:
    engines: tuple[EngineLoad, ...]
    models: tuple[ReplicaGroup, ...]


def _headers(target: Target) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None


def _from_metrics(host: Host, options: ScanOptions, target: Target, inputs: Inputs):
    """engine.metrics' scrape of this endpoint (its record when it ran, else scraped once at
    the probe's start: ``with_metrics``), or its error."""
    found = for_engine(scraped(host, options, inputs), target.base_url)
    return f"{target.base_url}/metrics: not scraped" if found is None else found


def _whole(value: float | None) -> int | None:
    """A request count from a gauge (6.0, a mean over ranks 6.5 → 6); None for no count."""
    return None if value is None else count(round(value))


def window_work(host: Host, options: ScanOptions, target: Target,
                inputs: Inputs = NO_INPUTS) -> tuple[float | None, float | None, float | None]:
    """(requests finished, tokens, seconds) between engine.metrics' two scrapes."""
    got = _from_metrics(host, options, target, inputs)
    if isinstance(got, str):
        return None, None, None
    return got.requests_in_window, got.tokens_in_window, got.interval_s


def live_load(host: Host, options: ScanOptions, target: Target,
              inputs: Inputs = NO_INPUTS) -> tuple[int | None, int | None, str | None, str | None]:
    """(running, waiting, source, error): engine.metrics' normalised gauges, else /slots."""
    errors = []
    got = _from_metrics(host, options, target, inputs)
    if isinstance(got, str):
        errors.append(got)
    elif (running := _whole(got.requests_running)) is not None:
        return running, _whole(got.requests_waiting), "/metrics", None
    else:  # engine.metrics says why: not exported, NaN or infinite, negative
        why = next((a.partition(": ")[2] for a in got.absent
                    if a.startswith(("running:", "requests_running:"))), "")
        errors.append(f"{target.base_url}/metrics: no running-requests figure"
                      + (f" ({why})" if why else ""))
    try:
        slots = host.http_get(f"{target.base_url}/slots", TIMEOUT_S, 8 << 20, _headers(target))
        data = page_json(slots.body) if slots.status == 200 else None
        if isinstance(data, list):
            return sum(field(s, "is_processing") is True for s in data), None, "/slots", None
        errors.append(f"{slots.url}: " + (f"HTTP {slots.status}" if slots.status != 200
                                          else "not a list of slots"))
    except HostReadError as exc:
        errors.append(str(exc))
    except ValueError:
        errors.append(f"{target.base_url}/slots: not JSON")
    return None, None, None, "; ".join(errors)


def replica_groups(engines: list[EngineLoad],
                   declared: tuple[tuple[str, ...], ...]) -> tuple[ReplicaGroup, ...]:
    """One group per declared set of replicas with two or more members found, all serving
    one model (members serving different models are no replicas of each other)."""
    by_url = {e.base_url: e for e in engines}
    groups = []
    for urls in declared:
        members = [by_url[u] for u in dict.fromkeys(urls) if u in by_url]
        models = {e.model for e in members if e.model}
        if len(members) < 2 or len(models) > 1 or any(e.running is None for e in members):
            continue
        groups.append(_group(next(iter(models), "?"), members))
    return tuple(groups)


def _group(model: str, members: list[EngineLoad]) -> ReplicaGroup:
    measure, work = _work(members)
    ordered = (sorted(members, key=lambda e: work[e.base_url]) if work
               else sorted(members, key=lambda e: e.running or 0))
    running = [e.running or 0 for e in members]
    windows = [e.interval_s for e in members if e.interval_s]
    return ReplicaGroup(model, len(members), max(running), min(running),
                        ordered[-1].base_url, ordered[0].base_url, measure,
                        max(work.values()) if work else None,
                        min(work.values()) if work else None,
                        min(windows) if windows else None,
                        tuple(sorted(e.base_url for e in members)))


def _work(members: list[EngineLoad]) -> tuple[str | None, dict[str, float]]:
    """The work every member did in the window, in the one measure they all count:
    requests finished where every member counts them, else tokens; ({}) otherwise."""
    for measure, of in (("requests", lambda e: e.requests_in_window),
                        ("tokens", lambda e: e.tokens_in_window)):
        work = {e.base_url: of(e) for e in members}
        if all(v is not None for v in work.values()):
            return measure, {url: float(v) for url, v in work.items() if v is not None}
    return None, {}


def served_model(host: Host, target: Target) -> str | None:
    """The target's model: from discovery, else the first id of its /v1/models."""
    if target.model:
        return target.model
    try:
        page = host.http_get(f"{target.base_url}/v1/models", TIMEOUT_S, 1 << 20, _headers(target))
        return text(field(page_json(page.body), "data", 0, "id")) if page.status == 200 else None
    except (HostReadError, ValueError):
        return None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> LoadRecord:
    """Live concurrency of every engine endpoint, against its saved knee."""
    inputs = with_metrics(host, options, inputs)  # handed over, else read here once
    found = targets(host, options, inputs)
    if not found:
        raise Skip(t("no engine endpoint: none found running, none named with --endpoint"))
    engines = []
    for target in found:
        running, waiting, source, error = live_load(host, options, target, inputs)
        (knee, status, measured_at, path), points = saved_sweep(host, target.base_url)
        engines.append(EngineLoad(target.base_url, target.kind, served_model(host, target),
                                  running, waiting,
                                  source, knee, status, measured_at, path, error, points,
                                  knee_throughput(knee, points),
                                  *window_work(host, options, target, inputs),
                                  missing=_missing(target.base_url, knee, status, path, running,
                                                   error)))
    if all(e.running is None and e.error and e.knee_status is None for e in engines):
        # nothing read of any engine, live or saved: not "ok" with every read an error in
        # its text (issue 28). Live, the probe failed; a recording that holds none of the
        # engines' pages and no saved sweep has nothing to judge: skipped, saying so. One
        # that read a saved sweep (the knees llm-doctor diff compares) keeps its record.
        errors = "; ".join(e.error for e in engines if e.error)
        if host.kind == "live":
            raise HostReadError(engines[0].base_url, "failed", errors)
        said = t("; ").join(map(read_error_text, errors.split("; ")))  # each read, as people read it
        raise Skip(t("the recording holds none of the engines' load figures and no saved sweep "
                     "({errors})", errors=said))
    return LoadRecord(tuple(engines), replica_groups(engines, options.replicas))


def _missing(base_url: str, knee: int | None, status: str | None, path: str,
             running: int | None, error: str | None) -> dict[str, str]:
    """Why the figures past-throughput-knee judges are None, with what measures them."""
    out: dict[str, str] = {}
    if knee is None:
        out["knee_concurrency"] = no_knee_reason(status, path, base_url)
    if running is None:
        out["running"] = error or lazy("neither /metrics nor llama.cpp's /slots was read")
    return out


def _knee_text(engine: EngineLoad) -> str:
    if engine.knee_status == "found":
        return str(engine.knee_concurrency)
    if engine.knee_status == "outdated":
        return t("outdated (measured by an older llm-doctor: run llm-doctor load again)")
    words = {None: t("not measured"), "": t("not measured"), "unreadable": t("unreadable"),
             "not-reached": t("not-reached"), "no-data": t("no-data")}
    return words.get(engine.knee_status, engine.knee_status or "")


def summary(record: LoadRecord) -> str:
    return t("; ").join(_one_line(e) for e in record.engines)


def _one_line(e: EngineLoad) -> str:
    # the record keeps the reads' errors in English, joined by "; "
    error = t("; ").join(map(read_error_text, e.error.split("; "))) if e.error else e.error
    return t("{url}: running {running}, waiting {waiting}, knee {knee}", url=e.base_url,
             running=display.text(e.running, error), waiting=display.text(e.waiting, error),
             knee=_knee_text(e))
