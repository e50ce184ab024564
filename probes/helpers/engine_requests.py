"""Before a probe sends requests to an engine: is it serving now, and what will be sent.

Source: the engine's own count of requests in flight, read once just before the first
request: GET ``/metrics`` (vLLM ``vllm:num_requests_running`` and ``_waiting``, SGLang
``sglang:num_running_reqs`` and ``num_queue_reqs``, TGI ``tgi_batch_current_size`` and
``tgi_queue_size``, llama.cpp ``llamacpp:requests_processing`` and ``requests_deferred``),
else llama.cpp's ``/slots`` (the slots with ``is_processing``). Unit: requests. No
privilege needed. Manual equivalent: ``curl -s HOST:PORT/metrics | grep -E
'running|processing|batch_current|queue|deferred'``.

An engine serving requests is not sent to (its users would pay for the measurement, and
their traffic would spoil it) unless ``--busy-ok``. The choice where an engine shows no
such count (llama-server without ``--metrics`` and ``/slots``, Ollama): it is sent to, and
its plan line says it could not be checked. Refusing would make these probes impossible
on such engines, for a cost the plan line states first and ``--no-requests`` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.model import RequestCost, ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from doctor.values import field, page_json
from probes.helpers import engine_names as N
from probes.helpers.engine_targets import Target
from probes.helpers.promtext import PageError, parse

TIMEOUT_S = 3.0
MAX_BYTES = 8 << 20
MAX_IN_FLIGHT = 1e9  # more requests in flight than any engine holds: a broken page


@dataclass(frozen=True, slots=True)
class InFlight:
    """An engine's requests in flight now, from its own pages; None with the reason."""

    requests: int | None  # running + waiting
    source: str  # "/metrics", "/slots", or why neither told


def _headers(target: Target) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None


def _from_metrics(host: Host, target: Target) -> int | str:
    url = f"{target.base_url}/metrics"
    try:
        answer = host.http_get(url, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES,
                               headers=_headers(target))
        if answer.status != 200:
            return f"{url}: HTTP {answer.status}"
        page = parse(answer.body, url)
    except (HostReadError, PageError) as exc:
        return str(exc)
    kind = N.family(N.kind_of_page(page.names()) or target.kind or "")
    running = next((v for v in (page.total(n) for n in N.RUNNING.get(kind, ())) if v is not None),
                   None)
    if running is None:
        return f"{url}: no count of running requests"
    waiting = next((v for v in (page.total(n) for n in N.WAITING.get(kind, ())) if v is not None),
                   0.0)
    found = running + waiting
    if not 0 <= found < MAX_IN_FLIGHT:  # two huge gauges overflow to inf: no count either
        return f"{url}: {found:g} requests in flight is not a count"
    return round(found)


def _from_slots(host: Host, target: Target) -> int | str:
    url = f"{target.base_url}/slots"
    try:
        answer = host.http_get(url, TIMEOUT_S, MAX_BYTES, _headers(target))
        data = page_json(answer.body) if answer.status == 200 else None
    except HostReadError as exc:
        return str(exc)
    except ValueError:
        return f"{url}: not JSON"
    if not isinstance(data, list):
        return f"{url}: " + (f"HTTP {answer.status}" if answer.status != 200 else "not a list of slots")
    return sum(field(s, "is_processing") is True for s in data)


def in_flight(host: Host, target: Target) -> InFlight:
    """The engine's running and waiting requests from /metrics, else llama.cpp's /slots."""
    found = _from_metrics(host, target)
    if isinstance(found, int):
        return InFlight(found, "/metrics")
    why = [found]
    if target.kind in (None, "llama.cpp"):
        slots = _from_slots(host, target)
        if isinstance(slots, int):
            return InFlight(slots, "/slots")
        why.append(slots)
    return InFlight(None, "; ".join(why))


def clear_to_send(host: Host, options: ScanOptions, probe: str, cost: RequestCost,
                  found: list[Target]) -> tuple[list[Target], tuple[str, ...]]:
    """The engines to send to, and why each other one is not (it is serving requests);
    every engine's plan line told to ``options.announce`` before anything is sent. Skip
    when none is left."""
    send: list[tuple[Target, str]] = []
    refused: list[str] = []  # kept in English in the record (not_sent)
    said: list[str] = []  # the same, for people: the skip reason
    for target in found:
        now = in_flight(host, target)
        if now.requests and not options.busy_ok:
            refused.append(f"{target.base_url}: the engine is serving {now.requests} requests; "
                           "--busy-ok to measure anyway")
            said.append(t("{url}: the engine is serving {requests} requests; --busy-ok to "
                          "measure anyway", url=target.base_url, requests=now.requests))
        elif now.requests is None:
            send.append((target, t("; it shows no count of requests in flight ({source}), so "
                                   "it is sent to whether or not it is serving",
                                   source=now.source)))
        else:
            send.append((target, t("; it is serving {requests} requests (--busy-ok)",
                                   requests=now.requests) if now.requests else ""))
    if not send:
        raise Skip(t("; ").join(said))
    if options.announce is not None and host.kind != "recorded":  # a replay sends nothing
        for target, note in send:  # the seconds are shared by the engines sent to
            options.announce(t("{probe} will send {url} {cost}{note} (--no-requests to send "
                               "none)", probe=probe, url=target.base_url,
                               cost=cost.text(len(send)), note=note))
    return [target for target, _ in send], tuple(refused)
