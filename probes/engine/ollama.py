"""engine.ollama: each Ollama server's settings, the models it has loaded, and their churn.

Sources, per ``ollama serve`` engine.discovery found:

* the settings it was started with, one variable at a time from ``/proc/<pid>/environ``
  (probes/helpers/process_env.py; another user's process needs root): OLLAMA_NUM_PARALLEL,
  OLLAMA_MAX_LOADED_MODELS, OLLAMA_KEEP_ALIVE (a Go duration, ``5m``, or seconds; negative
  keeps models loaded for ever; unset: 5 minutes), OLLAMA_CONTEXT_LENGTH,
  OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE. An unset one is named in ``settings_unset``:
  Ollama's default applies;
* ``GET /api/version``, ``GET /api/tags`` (the models pulled), ``GET /api/ps`` (the models
  loaded: ``size`` and ``size_vram`` in bytes, ``context_length``, ``expires_at``) read twice:
  discovery's read, then this probe's, at least READ_INTERVAL_S later. Between the two, a
  model that appears was loaded, one that goes was unloaded, one whose context_length moved
  was reloaded for a request with another ``num_ctx``, and one whose ``expires_at`` moved
  served a request: its new ``expires_at`` less the first read's clock bounds the keep-alive
  that request carried (its ``keep_alive``, else OLLAMA_KEEP_ALIVE);
* the clock at each read (``host.measure``, so a replay of a capture judges the same);
* ``ollama runner`` processes in the process table (one per loaded model).

Units: bytes, tokens, seconds. Manual equivalent: ``curl -s :11434/api/ps | jq; curl -s
:11434/api/version; tr '\\0' '\\n' < /proc/$(pgrep -f 'ollama serve')/environ | grep ^OLLAMA_``.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime

from doctor.i18n import t
from doctor.model import Level, ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.redact import MASK
from doctor.seam.host import Host, MeasurementError
from doctor.values import count, field, non_negative, number, text
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_pages import ollama_ps_pages
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_reads import json_page
from probes.helpers.process_env import env_value
from probes.helpers.processes import engine_processes

TIMEOUT_S = 3.0
MAX_MODELS = 64  # of /api/ps and /api/tags: a server with more is cut here
READ_INTERVAL_S = {Level.QUICK: 2.0, Level.STANDARD: 3.0, Level.FULL: 5.0}
DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's FAQ: "models are kept in memory for 5 minutes"
SETTINGS = ("OLLAMA_NUM_PARALLEL", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_KEEP_ALIVE",
            "OLLAMA_CONTEXT_LENGTH", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE")
_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class OllamaModel:
    name: str
    size_bytes: int | None  # /api/ps size: weights and KV cache, GPU and CPU together
    size_vram_bytes: int | None  # /api/ps size_vram: the part in GPU memory
    context_length: int | None  # /api/ps context_length: the num_ctx it was loaded with
    expires_at: str | None  # /api/ps expires_at, as Ollama wrote it
    expires_in_s: float | None  # expires_at less the clock at this read


@dataclass(frozen=True, slots=True)
class OllamaEngine:
    base_url: str
    pid: int | None
    version: str | None  # /api/version
    num_parallel: int | None  # OLLAMA_NUM_PARALLEL as set
    max_loaded_models: int | None  # OLLAMA_MAX_LOADED_MODELS as set
    keep_alive: str | None  # OLLAMA_KEEP_ALIVE as set ("5m", "-1", "0")
    keep_alive_s: float | None  # its seconds (unset: 300); None when for ever or unknown
    keep_alive_forever: bool | None  # a negative keep-alive: never unloaded
    context_length: int | None  # OLLAMA_CONTEXT_LENGTH as set
    flash_attention: bool | None  # OLLAMA_FLASH_ATTENTION as set
    kv_cache_type: str | None  # OLLAMA_KV_CACHE_TYPE as set (f16, q8_0, q4_0)
    settings_unset: tuple[str, ...]  # variables not set: Ollama's default applies
    settings_absent: str | None  # why the environment could not be read (then all are None)
    loaded: tuple[OllamaModel, ...]  # /api/ps at this probe's read
    available: int | None  # models pulled (/api/tags)
    runners: int  # `ollama runner` processes in the process table
    read_interval_s: float | None  # between discovery's /api/ps and this probe's
    loads: tuple[str, ...]  # models loaded between the two reads
    unloads: tuple[str, ...]  # models unloaded between them
    context_changes: tuple[str, ...]  # models reloaded with another context_length
    requests_seen: int | None  # models whose expires_at moved: they served a request
    request_keep_alive_s: float | None  # the shortest keep-alive such a request carried, at most
    error: str | None  # pages that could not be read, each naming its URL


@dataclass(frozen=True, slots=True)
class OllamaRecord:
    engines: tuple[OllamaEngine, ...]


def keep_alive_seconds(value: str) -> tuple[float | None, bool | None]:
    """(seconds, for ever) of a keep-alive as Ollama reads it: whole seconds (``300``) or a
    Go duration (``5m``, ``1h30m``, ``-1m``); negative is for ever. (None, None): not one."""
    raw = value.strip()
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if re.fullmatch(r"[0-9]+", body):
        seconds = float(body)
    elif body and _DURATION.sub("", body) == "":
        seconds = sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(body))
    else:
        return None, None
    if not math.isfinite(seconds):
        return None, None
    return (None, True) if sign < 0 and seconds > 0 else (seconds, False)


def _bool(value: str) -> bool | None:
    """Go's strconv.ParseBool, which Ollama's envconfig uses."""
    return {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}.get(
        value.strip().lower())


def _settings(host: Host, pid: int | None) -> tuple[dict[str, str | None], tuple[str, ...], str | None]:
    if pid is None:
        return {}, (), "no process: an --endpoint's settings are not readable here"
    values: dict[str, str | None] = {}
    unset = []
    for name in SETTINGS:
        found = env_value(host, pid, name)
        if found.reason is not None:
            return {}, (), f"/proc/{pid}/environ: {found.reason}"
        if found.value == MASK:
            values[name] = None  # a recording made before it kept this variable
        elif found.value is None:
            unset.append(name)
        else:
            values[name] = found.value
    return values, tuple(unset), None


def _clock(host: Host, name: str, at: float | None = None) -> float | None:
    """Unix time at a read (``at``: its time.monotonic(), else now), recorded with a capture
    so its replay judges the same."""
    def now() -> dict[str, float]:
        ago = time.monotonic() - at if at is not None else 0.0
        return {"unix_s": round(time.time() - ago, 3)}
    try:
        measured = host.measure(name, now)
    except MeasurementError:
        return None
    value = number(field(measured, "unix_s"))
    return value if value is not None and value > 0 else None


def _unix(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp[:64])
    except ValueError:
        return None
    if moment.tzinfo is None or moment.year < 1970:  # Go's zero time: no expiry given
        return None
    return moment.timestamp()


def _models(ps: object, clock: float | None) -> tuple[OllamaModel, ...]:
    listed = field(ps, "models")
    found = []
    for item in listed[:MAX_MODELS] if isinstance(listed, list) else ():
        name = text(field(item, "name"), 200) or text(field(item, "model"), 200)
        if not name:
            continue
        expires = text(field(item, "expires_at"), 64)
        at = _unix(expires)
        found.append(OllamaModel(
            name, count(field(item, "size")), count(field(item, "size_vram")),
            count(field(item, "context_length"), minimum=1), expires,
            round(at - clock, 1) if at is not None and clock is not None else None))
    return tuple(found)


def _changes(first: tuple[OllamaModel, ...], second: tuple[OllamaModel, ...], clock1: float | None):
    before = {m.name: m for m in first}
    after = {m.name: m for m in second}
    loads = tuple(n for n in after if n not in before)
    unloads = tuple(n for n in before if n not in after)
    context = tuple(n for n in after if n in before and before[n].context_length
                    and after[n].context_length and before[n].context_length != after[n].context_length)
    served = [n for n in after if n in before and n not in context
              and before[n].expires_at != after[n].expires_at]
    bounds = [at - clock1 for n in served + list(context) + list(loads)
              if (at := _unix(after[n].expires_at)) is not None and clock1 is not None]
    return loads, unloads, context, len(served), (round(max(min(bounds), 0.0), 1) if bounds else None)


def _runners(host: Host) -> int:
    return sum(1 for p in engine_processes(host)
               if p.engine == "ollama" and p.cmdline.split()[1:2] == ["runner"])


def _wait(host: Host, options: ScanOptions, since: float | None) -> None:
    wanted = READ_INTERVAL_S[options.level]
    if host.kind == "live" and since is not None:
        time.sleep(min(max(wanted - (time.monotonic() - since), 0.0), wanted))


def _one(host: Host, options: ScanOptions, engine: Engine) -> OllamaEngine:
    base = engine.base_url or ""
    errors: list[str] = []
    values, unset, absent = _settings(host, engine.pid)
    keep = values.get("OLLAMA_KEEP_ALIVE")
    keep_s, forever = keep_alive_seconds(keep) if keep is not None else (
        (DEFAULT_KEEP_ALIVE_S, False) if "OLLAMA_KEEP_ALIVE" in unset else (None, None))
    first_ps, first_at = ollama_ps_pages(host).get(base, (None, None))
    clock1 = _clock(host, f"engine.ollama clock 1 {base}", first_at)
    _wait(host, options, first_at)
    version = text(field(json_page(host, f"{base}/api/version", errors, TIMEOUT_S), "version"), 40)
    tags = field(json_page(host, f"{base}/api/tags", errors, TIMEOUT_S), "models")
    ps = json_page(host, f"{base}/api/ps", errors, TIMEOUT_S)
    clock2 = _clock(host, f"engine.ollama clock 2 {base}")
    loaded = _models(ps, clock2)
    compared = first_ps is not None and ps is not None
    loads, unloads, context, served, bound = (
        _changes(_models(first_ps, clock1), loaded, clock1) if compared else ((), (), (), None, None))
    interval = (round(clock2 - clock1, 3) if clock1 is not None and clock2 is not None
                else None) if compared else None
    parallel = values.get("OLLAMA_NUM_PARALLEL")
    most = values.get("OLLAMA_MAX_LOADED_MODELS")
    ctx = values.get("OLLAMA_CONTEXT_LENGTH")
    flash = values.get("OLLAMA_FLASH_ATTENTION")
    return OllamaEngine(
        base, engine.pid, version,
        count(parallel, minimum=1) if parallel is not None else None,
        count(most, minimum=0) if most is not None else None,
        text(keep, 40) if keep is not None else None, keep_s, forever,
        count(ctx, minimum=1) if ctx is not None else None,
        _bool(flash) if flash is not None else None,
        text(values.get("OLLAMA_KV_CACHE_TYPE"), 20), unset, absent, loaded,
        min(len(tags), MAX_MODELS) if isinstance(tags, list) else None, _runners(host),
        non_negative(interval), loads, unloads, context, served, bound,
        "; ".join(errors) or None)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> OllamaRecord:
    """Each Ollama server's settings and models, read twice a few seconds apart."""
    found = [e for e in found_engines(host, options, inputs).engines
             if e.kind == "ollama" and e.base_url]
    if not found:
        raise Skip(t("no Ollama server: none running (`ollama serve`), none named with --endpoint"))
    return OllamaRecord(tuple(_one(host, options, e) for e in found))


def summary(record: OllamaRecord) -> str:
    parts = []
    for e in record.engines:
        keep = (t("for ever") if e.keep_alive_forever else f"{e.keep_alive_s:g} s"
                if e.keep_alive_s is not None else t("unknown"))
        churn = len(e.loads) + len(e.unloads) + len(e.context_changes)
        if e.available is not None:
            line = t("{url}: Ollama {version}, {loaded} loaded of {available}, keep-alive {keep}",
                     url=e.base_url, version=e.version or "?", loaded=len(e.loaded),
                     available=e.available, keep=keep)
        else:
            line = t("{url}: Ollama {version}, {loaded} loaded, keep-alive {keep}",
                     url=e.base_url, version=e.version or "?", loaded=len(e.loaded), keep=keep)
        parts.append(line + (t(", {churn} load events between reads", churn=churn) if churn else ""))
    return t("; ").join(parts)
