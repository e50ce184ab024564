"""What a Text Generation Inference launcher's own log says its start cost: the weights'
download, the shards' load, and the warmup.

The lines, as TGI's code writes them (huggingface/text-generation-inference commit
db931fcf42da018a3657580c64bf2720f167f9ab; the launcher logs through ``tracing_subscriber``'s
compact format, ``2024-12-11T18:26:36.207682Z  INFO shard-manager: text_generation_launcher:
...``, or JSON with ``--json-output``, so each is searched within the line):

* ``Args {`` opens a start: launcher/src/main.rs ``main`` logs ``{:#?}`` of its arguments first;
* ``Starting check and download process for <id>`` (before mid-2024 ``Starting download
  process.``) and ``Successfully downloaded weights for <id>`` (before ``Successfully
  downloaded weights.``): launcher/src/main.rs ``download_convert_model``; the download's
  seconds are the difference of the two lines' timestamps;
* ``Files are already present on the host. Skipping download.``
  (server/text_generation_server/cli.py ``download_weights``): every file was cached;
  ``Downloaded <path> in H:MM:SS.`` (server/text_generation_server/utils/hub.py): one was not
  (real: ``Downloaded /data/models--mistralai--Mixtral-8x7B-Instruct-v0.1/snapshots/.../
  model-00008-of-00019.safetensors in 0:00:03.``, huggingface/text-generation-inference#1838);
* ``Shard ready in {:?}`` (launcher/src/main.rs ``shard_manager``: a Rust ``Duration``'s
  Debug form, ``55.201097835s``, ``850.5ms``), one per rank, all started together: the slowest
  rank is the shards' start (the Python server's start and its weights load; real:
  ``Shard ready in 218.618910525s rank=4``, huggingface/text-generation-inference#2572);
* ``Warming up model`` and ``Setting max batch total tokens to <n>`` (backends/v3/src/lib.rs):
  the warmup between them, by their timestamps; it runs a prefill of the largest batch and
  captures the CUDA graphs (server/text_generation_server/models/flash_causal_lm.py ``warmup``).

Hostile text as in engine_phases.py: lines cut at 4,096 characters, bounded patterns; a
timestamp that is not a date, or a pair of them out of order, gives no figure.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone

from probes.helpers.engine_phases import MAX_LINE, Phases

_NUM = r"([0-9]{1,9}(?:\.[0-9]{1,9})?)"
# a terminal's log has colour codes between the target and the message (issue #1763's lines)
START = re.compile(r"(?:text_generation_launcher.{0,40}?|\"message\":\")Args \{")
DOWNLOAD_BEGIN = re.compile(r"Starting (?:check and )?download process")
DOWNLOAD_END = re.compile(r"Successfully downloaded weights")
ALL_CACHED = re.compile(r"Files are already present on the host\. Skipping download\.")
DOWNLOADED = re.compile(r"Downloaded /[^\s]{1,1024} in [0-9]{1,6}:[0-9]{2}:[0-9]{2}")
SHARD_READY = re.compile(r"Shard ready in " + _NUM + r"(s|ms|µs|us|ns)\b")
WARMUP_BEGIN = re.compile(r"Warming up model")
WARMUP_END = re.compile(r"Setting max batch total tokens to [0-9]{1,12}")
STAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z")
UNIT_S = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def stamp(line: str) -> float | None:
    """Seconds since the epoch of the line's first RFC 3339 UTC timestamp; None without one
    or where it is no date (month 13)."""
    m = STAMP.search(line)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        at = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError:
        return None
    return at.timestamp() + float("0." + (m.group(7) or "0"))


def _between(begin: float | None, end: float | None) -> float | None:
    if begin is None or end is None or end < begin:
        return None
    return round(end - begin, 3)


def parse(lines: list[str]) -> Phases:
    """The phases of the newest TGI start in ``lines``."""
    now = Phases()
    marks: dict[str, float | None] = {}  # the timestamps of the lines that open a step
    for raw in lines:
        line = raw[:MAX_LINE]
        if START.search(line):
            now, marks = Phases(), {}
            continue
        now, marks = _one(now, marks, line)
    return now


def _one(now: Phases, marks: dict[str, float | None], line: str) -> tuple[Phases, dict[str, float | None]]:
    """``now`` with what ``line`` says; ``marks`` holds the timestamps of opening lines."""
    if DOWNLOAD_BEGIN.search(line) or WARMUP_BEGIN.search(line):
        which = "download" if DOWNLOAD_BEGIN.search(line) else "warmup"
        return replace(now, lines=now.lines + 1), {**marks, which: stamp(line)}
    if DOWNLOAD_END.search(line):
        return replace(now, lines=now.lines + 1, download_s=_between(marks.get("download"), stamp(line))), marks
    if WARMUP_END.search(line):
        return replace(now, lines=now.lines + 1, warmup_s=_between(marks.get("warmup"), stamp(line))), marks
    if ALL_CACHED.search(line):
        # one file downloaded earlier in this start makes it a miss, whatever else was cached
        cached = True if now.weights_from_cache is None else now.weights_from_cache
        return replace(now, lines=now.lines + 1, weights_from_cache=cached), marks
    if DOWNLOADED.search(line):
        return replace(now, lines=now.lines + 1, weights_from_cache=False), marks
    if (m := SHARD_READY.search(line)) is not None:
        seconds = round(float(m.group(1)) * UNIT_S[m.group(2)], 3)
        slowest = seconds if now.model_load_s is None else max(now.model_load_s, seconds)
        return replace(now, lines=now.lines + 1, model_load_s=slowest), marks
    return now, marks
