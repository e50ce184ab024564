"""engine.slots: the parallel slots of llama.cpp and Ollama against the concurrency they get.

llama.cpp's server decodes at most ``total_slots`` sequences at once (``-np``/``--parallel``);
a request beyond them is deferred until a slot frees. Ollama runs ``OLLAMA_NUM_PARALLEL``
requests per loaded model and queues the rest. Sources, per engine:

* llama.cpp: ``GET /props`` (``total_slots``), ``GET /slots`` (each slot's ``is_processing``
  and ``n_ctx``, the context of one slot: ``-c`` divided by the slots), the deferred requests
  of engine.metrics' second scrape (``llamacpp:requests_deferred``, a gauge), ``-c`` from
  its command line;
* Ollama: ``OLLAMA_NUM_PARALLEL`` read from ``/proc/<pid>/environ`` (that one variable
  only; another user's process needs root), ``GET /api/ps`` (the models loaded and their
  ``context_length``; it carries no count of requests in flight), and the client
  connections established to its port (``/proc/net/tcp{,6}``, state ESTABLISHED) as the
  concurrency it is offered (idle keep-alive connections of a pooling proxy count too: the
  rule's ``for`` window in the daemon, and the saved sweep's measured wait, temper that);
* both: the sweep ``llm-doctor load`` saved for the endpoint (engine.load's reader): time to
  first token at concurrency 1 and at the highest level above the slots, the wait a slot
  costs.

Units: slots, requests, tokens, milliseconds. No privilege for the pages; ``environ`` of
another user's process needs root. Manual equivalent: ``curl -s :8080/props | jq
.total_slots; curl -s :8080/slots | jq '[.[].is_processing]'; curl -s :8080/metrics | grep
deferred``; for Ollama ``tr '\\0' '\\n' < /proc/$(pgrep -f 'ollama serve')/environ | grep
OLLAMA_NUM_PARALLEL`` and ``ss -tn state established '( sport = :11434 )'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor import display
from doctor.i18n import t
from doctor.redact import MASK
from doctor.seam.host import Host, HostReadError
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.values import count, field
from probes.helpers.engine_discovery import found as found_engines, with_discovery
from probes.helpers.engine_reach import Reachability
from probes.helpers.engine_scrape import MetricsRecord, scraped, with_metrics
from probes.helpers.engine_sweep import SweepPoint, saved_sweep
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_reads import argv_of, json_page
from probes.helpers.process_env import env_value

TIMEOUT_S = 5.0
TCP_ESTABLISHED = "01"  # include/net/tcp_states.h
KINDS = ("llama.cpp", "ollama")
# Ollama's FAQ: OLLAMA_NUM_PARALLEL "defaults to 1" (releases of 2024 chose 4 or 1 by memory;
# an unset variable on one of those is judged as 1, the lower of the two)
OLLAMA_DEFAULT_PARALLEL = 1


@dataclass(frozen=True, slots=True)
class EngineSlots:
    base_url: str
    kind: str  # llama.cpp or ollama
    pid: int | None
    slots: int | None  # llama.cpp /props total_slots (else -np); Ollama OLLAMA_NUM_PARALLEL
    slots_from: str | None  # "/props total_slots", "-np", "OLLAMA_NUM_PARALLEL"
    slots_absent: str | None  # why slots is None
    busy: int | None  # llama.cpp /slots entries with is_processing; None for Ollama
    deferred: int | None  # llama.cpp llamacpp:requests_deferred; Ollama: offered - slots
    offered: int | None  # llama.cpp busy + deferred; Ollama client connections to its port
    offered_from: str | None  # "/slots + /metrics", "established connections"
    ctx_per_slot: int | None  # llama.cpp /slots n_ctx (-c / -np); Ollama /api/ps context_length
    ctx_total: int | None  # llama.cpp -c / --ctx-size as started
    sweep_concurrency: int | None  # the saved sweep's highest usable level above the slots
    ttft_c1_ms: float | None  # the saved sweep's TTFT p50 at concurrency 1
    ttft_at_sweep_ms: float | None  # ... at sweep_concurrency
    wait_ratio: float | None  # ttft_at_sweep_ms / ttft_c1_ms
    suggested_slots: int | None  # the concurrency seen: slots that would serve it at once
    suggested_ctx: int | None  # -c keeping today's context per slot at suggested_slots
    models: tuple[str, ...]  # Ollama /api/ps: the models loaded
    error: str | None  # pages that could not be read, each naming its URL


@dataclass(frozen=True, slots=True)
class SlotsRecord:
    engines: tuple[EngineSlots, ...]


def environ_value(host: Host, pid: int, name: str) -> tuple[str | None, str | None]:
    """(value, why absent) of one variable of ``/proc/<pid>/environ`` (only ``name`` is
    kept: probes/helpers/process_env.py). A recording keeps the values of
    doctor.redact.KEPT_ENV only; any other comes back masked, and a masked one is no value."""
    path = f"/proc/{pid}/environ"
    found = env_value(host, pid, name)
    if found.reason is not None:
        return None, f"{path}: {found.reason}"
    if found.value == MASK:
        return None, f"{name} masked in {path} (a recording keeps no values)"
    if found.value is None:
        return None, f"{name} not set in {path} (Ollama's default applies)"
    return found.value, None


def established_to(host: Host, port: int) -> int | None:
    """Client connections established to local ``port`` (/proc/net/tcp and tcp6), or None
    when neither table can be read."""
    seen, read_any = 0, False
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = host.read_text(path).splitlines()
        except HostReadError:
            continue
        read_any = True
        for line in lines[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != TCP_ESTABLISHED or ":" not in fields[1]:
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
            except ValueError:
                continue
            seen += local_port == port
    return seen if read_any else None


def _deferred(host: Host, options: ScanOptions, inputs: Inputs, base_url: str) -> int | None:
    return deferred_of(scraped(host, options, inputs), base_url)


def deferred_of(metrics: MetricsRecord, base_url: str) -> int | None:
    """The requests waiting for a slot at engine.metrics' second scrape of ``base_url``."""
    for item in metrics.engines:
        if item.endpoint.rsplit("/metrics", 1)[0] == base_url:
            return count(item.requests_waiting)  # a gauge: 3.0; NaN or 2.5 is no count
    return None


def _sweep(host: Host, base_url: str, slots: int | None):
    return sweep_wait(saved_sweep(host, base_url)[1], slots)


def sweep_wait(points: tuple[SweepPoint, ...],
               slots: int | None) -> tuple[int | None, float | None, float | None]:
    """(level, TTFT at 1, TTFT at that level) from the saved sweep's points: its highest
    usable level above the slots (the one that waited for slots), else Nones."""
    usable = [p for p in points if p.usable and p.ttft_p50_ms]
    first = next((p for p in usable if p.concurrency == 1), None)
    above = [p for p in usable if slots is not None and p.concurrency > slots]
    if first is None or not above:
        return None, None, None
    top = max(above, key=lambda p: p.concurrency)
    return top.concurrency, first.ttft_p50_ms, top.ttft_p50_ms


def suggested_slots(slots: int | None, offered: int | None, level: int | None) -> int | None:
    """The slots that would serve at once the concurrency seen (offered now, or the sweep's
    level that waited), when that is more than the engine has; None otherwise."""
    wanted = max(offered or 0, level or 0)
    return wanted if slots and wanted > slots else None


def _llama(host: Host, options: ScanOptions, inputs: Inputs, engine: Engine,
           base_url: str, silent: str | None = None) -> EngineSlots:
    errors: list[str] = [silent] if silent else []
    props = None if silent else json_page(host, f"{base_url}/props", errors, TIMEOUT_S)
    slots_page = None if silent else json_page(host, f"{base_url}/slots", errors, TIMEOUT_S)
    args = argv_of(host, engine.pid)
    slots = count(field(props, "total_slots"), minimum=1)
    slots_from = "/props total_slots" if slots else None
    if slots is None and (flagged := count(flag(args, "-np", "--parallel"), minimum=1)):
        slots, slots_from = flagged, "-np"
    busy = ctx_slot = None
    if isinstance(slots_page, list):
        busy = sum(field(s, "is_processing") is True for s in slots_page)
        ctx_slot = count(field(slots_page, 0, "n_ctx"), minimum=1)
    elif slots_page is not None:
        errors.append(f"{base_url}/slots: not a list of slots")
    ctx_slot = ctx_slot or count(field(props, "default_generation_settings", "n_ctx"), minimum=1)
    deferred = _deferred(host, options, inputs, base_url)
    offered = busy + (deferred or 0) if busy is not None else None
    level, ttft1, ttft_n = _sweep(host, base_url, slots)
    suggested = suggested_slots(slots, offered, level)
    return EngineSlots(
        base_url, "llama.cpp", engine.pid, slots, slots_from,
        None if slots else "neither /props total_slots nor -np could be read", busy, deferred,
        offered, "/slots + /metrics" if offered is not None else None, ctx_slot,
        count(flag(args, "-c", "--ctx-size"), minimum=1), level, ttft1, ttft_n,
        round(ttft_n / ttft1, 2) if ttft1 and ttft_n else None, suggested,
        suggested * ctx_slot if suggested and ctx_slot else None, (), "; ".join(errors) or None)


def _ollama(host: Host, engine: Engine, base_url: str, silent: str | None = None) -> EngineSlots:
    errors: list[str] = [silent] if silent else []
    slots: int | None = None
    absent: str | None = "no process: OLLAMA_NUM_PARALLEL is read from its environment"
    unset = False
    if engine.pid is not None:
        value, absent = environ_value(host, engine.pid, "OLLAMA_NUM_PARALLEL")
        slots = count(value, minimum=1) if value is not None else None
        if value is not None and slots is None:
            absent = f"OLLAMA_NUM_PARALLEL={value[:40]!r} is not a whole number of at least 1"
        elif value is None and absent and absent.startswith("OLLAMA_NUM_PARALLEL not set"):
            slots, absent, unset = OLLAMA_DEFAULT_PARALLEL, None, True
    ps = None if silent else json_page(host, f"{base_url}/api/ps", errors, TIMEOUT_S)
    models = field(ps, "models")
    loaded = [m for m in models[:64] if isinstance(m, dict)] if isinstance(models, list) else []
    port = count(base_url.rsplit(":", 1)[-1].split("/")[0], minimum=1)
    offered = established_to(host, port) if port else None
    level, ttft1, ttft_n = _sweep(host, base_url, slots)
    suggested = suggested_slots(slots, offered, level)
    return EngineSlots(
        base_url, "ollama", engine.pid, slots,
        ("OLLAMA_NUM_PARALLEL unset (default 1)" if unset else "OLLAMA_NUM_PARALLEL") if slots else None,
        None if slots else absent, None,
        max(0, offered - slots) if offered is not None and slots else None, offered,
        "established connections" if offered is not None else None,
        count(field(loaded[0], "context_length"), minimum=1) if loaded else None, None,
        level, ttft1, ttft_n, round(ttft_n / ttft1, 2) if ttft1 and ttft_n else None,
        suggested, None, tuple(str(m.get("name"))[:200] for m in loaded if m.get("name")),
        "; ".join(errors) or None)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> SlotsRecord:
    """The slots of every llama.cpp and Ollama engine against the concurrency offered."""
    inputs = with_discovery(host, options, inputs)  # handed over, else found here once
    discovered = found_engines(host, options, inputs)
    found = [e for e in discovered.engines if e.kind in KINDS and e.base_url]
    if not found:
        raise Skip(t("no llama.cpp or Ollama engine: only they serve from a fixed number of slots"))
    if any(e.kind == "llama.cpp" for e in found):  # their deferred requests: one scrape for all
        inputs = with_metrics(host, options, inputs)
    # an engine that gave discovery no HTTP answer (refused, hung, still loading) is asked
    # nothing more: a stopped llama-server cost this probe two 5 s timeouts a scan
    silent = {e.base_url: _not_asked(r) for e in found
              if (r := discovered.unanswered(e.base_url)) is not None}
    return SlotsRecord(tuple(
        _llama(host, options, inputs, e, e.base_url, silent.get(e.base_url)) if e.kind == "llama.cpp"
        else _ollama(host, e, e.base_url, silent.get(e.base_url)) for e in found if e.base_url))


def _not_asked(reached: Reachability) -> str:
    return t("{url}: not asked, engine.discovery got no answer ({answer}); see engine-unreachable",
             url=reached.endpoint, answer=reached.answer)


def summary(record: SlotsRecord) -> str:
    absent = t("not reported")
    return t("; ").join(
        t("{url}: {slots} slots, busy {busy}, deferred {deferred}", url=e.base_url,
          slots=display.text(e.slots, e.slots_absent), busy=display.text(e.busy, absent),
          deferred=display.text(e.deferred, absent))
        for e in record.engines)
