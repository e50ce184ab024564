"""engine.progress: whether each engine moved while it held requests, and how busy its accelerators are.

An engine whose collective hangs (NCCL, RCCL, HCCL waiting on a rank), whose tensor-parallel
worker died, or whose kernel is stuck still answers HTTP: its /health says 200 and its
/metrics page is served, with requests running and counters that no longer move. This
probe puts beside engine.metrics' two scrapes (requests running at both, tokens and
finished requests between them) what the engine's accelerators were doing: a collective
that waits spins its devices at 100 %, a device whose rank never joined sits at 0 %, and a
host side that stopped launching work leaves them all idle.

Sources: engine.metrics' record (the two scrapes, SCRAPE_INTERVAL_S apart) and
engine.discovery's (the engine's pid); the accelerators' busy figures through
probes/helpers/accel_busy.py: NVIDIA NVML ``nvmlDeviceGetUtilizationRates`` read now,
AMD amd.gpu's ``util_gpu_pct`` (gfx_activity), Ascend npu.devices' ``aicore_util_pct``
(AICore(%)), each with its process list, which names the devices the engine's process tree
holds. Units: requests, tokens, percent. No privilege needed. Manual equivalent:
``curl -s :8000/metrics | grep -E 'num_requests_running|_tokens_total'`` twice, and
``nvidia-smi --query-gpu=index,utilization.gpu --format=csv`` (``amd-smi metric -u``,
``npu-smi info``).
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.display import text
from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from probes.helpers import accel_busy
from probes.helpers.accel_busy import Accelerator, Busy
from probes.helpers.engine_discovery import found
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import scraped, with_metrics


@dataclass(frozen=True, slots=True)
class EngineProgress:
    endpoint: str  # the /metrics URL
    kind: str
    pid: int | None  # the engine's process (engine.discovery); None for an --endpoint only
    interval_s: float  # between the two scrapes
    requests_running: float | None  # at the second scrape
    requests_running_before: float | None  # at the first
    requests_waiting: float | None
    tokens_in_window: float | None  # prompt + generated tokens between the scrapes
    requests_in_window: float | None  # requests finished between them
    # engine steps between them: llama.cpp's llama_decode() calls (llamacpp:n_decode_total;
    # its token counters grow only when a request ends), vLLM's (vllm:iteration_tokens_total
    # _count); None for the other engines
    steps_in_window: float | None
    # the engine's accelerators: those its process tree holds ("engine"), else every one the
    # host has ("host": NVML or the vendor's tool listed none of its processes)
    accelerators: tuple[Accelerator, ...]
    busy_scope: str | None  # "engine" | "host"; None with no figure
    busy_max_pct: float | None
    busy_min_pct: float | None
    missing: dict[str, str]  # field -> why it is None


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    engines: tuple[EngineProgress, ...]


def view(m: EngineMetrics, pid: int | None, devices: tuple[Accelerator, ...], scope: str,
         why_not_busy: str | None) -> EngineProgress:
    """One engine's progress over the window beside its accelerators' busy figures."""
    missing: dict[str, str] = {}
    for name, value, what in (("tokens_in_window", m.tokens_in_window, t("prompt- or generated-token counter")),
                              ("requests_in_window", m.requests_in_window, t("finished-requests counter")),
                              ("requests_running", m.requests_running, t("running-requests gauge")),
                              ("steps_in_window", m.steps_in_window, t("engine-step counter"))):
        if value is None and (name != "steps_in_window" or m.kind in ("llama.cpp", "vllm")):
            said = [a.split(": ", 1)[1] for a in m.absent
                    if a.split(": ", 1)[0] in _FIGURES[name] and ": " in a]
            missing[name] = said[0] if said else t(
                "the page has no {what}, or it went down between the scrapes (the engine restarted)", what=what)
    busy = [d.busy_pct for d in devices]
    if not busy:
        missing["busy_max_pct"] = missing["busy_min_pct"] = why_not_busy or t("not read")
    return EngineProgress(
        endpoint=m.endpoint, kind=m.kind, pid=pid, interval_s=m.interval_s,
        requests_running=m.requests_running, requests_running_before=m.requests_running_before,
        requests_waiting=m.requests_waiting, tokens_in_window=m.tokens_in_window,
        requests_in_window=m.requests_in_window,
        steps_in_window=m.steps_in_window, accelerators=devices,
        busy_scope=scope if busy else None, busy_max_pct=max(busy) if busy else None,
        busy_min_pct=min(busy) if busy else None, missing=missing)


# the names engine_normalise gives its absent figures ("figure: reason"), per field here
_FIGURES = {"tokens_in_window": ("prompt_tokens", "generation_tokens"),
            "requests_in_window": ("requests_done",), "requests_running": ("running",),
            "steps_in_window": ("steps",)}


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> ProgressRecord:
    """engine.metrics' and engine.discovery's records (its needs) beside the accelerators."""
    inputs = with_metrics(host, options, inputs)  # handed over, else read here once
    metrics = scraped(host, options, inputs)
    if not metrics.engines:
        raise Skip(t("no engine's /metrics page could be read (see engine.metrics)"))
    pids = {e.base_url: e.pid for e in found(host, options, inputs).engines}
    busy = accel_busy.read(host, inputs)
    return judge(host, metrics.engines, pids, busy)


def judge(host: Host, engines: tuple[EngineMetrics, ...], pids: dict[str | None, int | None],
          busy: Busy) -> ProgressRecord:
    out = []
    for m in engines:
        pid = pids.get(m.endpoint.rsplit("/metrics", 1)[0])
        devices, scope = accel_busy.of_engine(host, busy, pid)
        out.append(view(m, pid, devices, scope, busy.why))
    return ProgressRecord(tuple(out))


def summary(record: ProgressRecord) -> str:
    na = t("n/a")
    parts = []
    for e in record.engines:
        busy = (na if e.busy_max_pct is None else
                t("{low}-{high}%", low=text(e.busy_min_pct, na, ".0f"), high=text(e.busy_max_pct, na, ".0f")))
        parts.append(t("{kind}: running {running}, {tokens} tokens and {done} requests done in {interval} s; "
                       "accelerators busy {busy}", kind=e.kind, running=text(e.requests_running, na, "g"),
                       tokens=text(e.tokens_in_window, na, "g"), done=text(e.requests_in_window, na, "g"),
                       interval=text(e.interval_s, na, "g"), busy=busy))
    return t("; ").join(parts)
