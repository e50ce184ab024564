"""What a vLLM engine's own log says its start cost: weights, torch.compile, CUDA graphs.

The lines, as vLLM's code writes them (``logger.info`` formats; the prefix before them
varies by version, process and log handler, so each is searched within the line):

* ``Loading weights took %.2f seconds``: vllm/model_executor/model_loader/default_loader.py
* ``Model loading took %.4f GiB and %.6f seconds`` (later ``... GiB memory and ... seconds``):
  vllm/v1/worker/gpu_model_runner.py ``load_model``
* ``torch.compile takes %.2f s in total`` (later ``torch.compile took ...``, and ``torch.compile
  and initial profiling run took ...``): vllm/compilation/monitor.py
* ``Directly load the compiled graph(s) for <shape> from the cache, took %.3f s``: a hit of
  the compile cache; ``Compiling a graph for <shape> takes %.2f s``: a miss, compiled now
  (vllm/compilation/backends.py)
* ``Using cache directory: <path> for vLLM's torch.compile`` (backends.py)
* ``Graph capturing finished in %.0f secs, took %.2f GiB``: gpu_model_runner.py
  ``capture_model``

Real logs with these lines: a systemd journal of vLLM 0.11 ("Directly load the compiled
graph(s) for compile range (1, 2048) from the cache, took 1.908 s", "torch.compile takes
9.27 s in total"), and vLLM's docs/design/torch_compile.md ("Using cache directory:
~/.cache/vllm/torch_compile_cache/1517964802/rank_0_0 for vLLM's torch.compile").

Where the log holds the start before the newest one (a file appended to across restarts),
whether that one compiled too, and its cache directory, are kept beside the newest's.

The text is hostile: each line is cut at 4,096 characters and searched with bounded
patterns whose numbers are at most nine digits each side of the point (finite, never
negative). The last start in the log wins (a log appended to
across restarts holds every start; the newest is the one running).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_NUM = r"([0-9]{1,9}(?:\.[0-9]{1,9})?)"
WEIGHTS = re.compile(r"Loading weights took " + _NUM + r" ?s")
MODEL = re.compile(r"Model loading took " + _NUM + r" ?GiB(?: memory)? and " + _NUM + r" ?s")
COMPILE = re.compile(r"torch\.compile (?:takes|took|and initial profiling run took) " + _NUM + r" ?s in total")
HIT = re.compile(r"Directly load the compiled graph\(s\) for .{0,200}? from the cache, took " + _NUM)
MISS = re.compile(r"Compiling a graph for .{0,200}? takes " + _NUM + r" ?s")
GRAPHS = re.compile(r"Graph capturing finished in " + _NUM + r" ?secs")
CACHE_DIR = re.compile(r"Using cache directory: (/[^\s]{1,1024}) for vLLM's torch\.compile")
# vLLM's first line of a start (vllm/entrypoints/openai/api_server.py / cli serve)
START = re.compile(r"vLLM API server version |Initializing a V1 LLM engine")
MAX_LINE = 4096


@dataclass(frozen=True, slots=True)
class Phases:
    """The newest start's phases, in seconds; None where the log has no such line."""

    lines: int = 0  # of vLLM's phase lines found
    weights_load_s: float | None = None
    model_load_s: float | None = None
    compile_s: float | None = None
    compile_from_cache: bool | None = None  # True: every graph loaded; False: one compiled
    graph_capture_s: float | None = None
    compile_cache_dir: str | None = None
    weights_gib: float | None = None  # GPU memory the weights took (per rank), GiB
    # SGLang and TGI (probes/helpers/engine_phases_sglang.py, engine_phases_tgi.py):
    download_s: float | None = None  # TGI: its download step, first line to last
    weights_from_cache: bool | None = None  # TGI: every file already on the host
    warmup_s: float | None = None  # TGI: its warmup (prefill and CUDA graph capture)
    # vLLM: what the start before the newest one said, where the log holds it (a file appended
    # to across restarts): two cold compiles in a row on a kept cache are a cache not reused
    previous_compile_from_cache: bool | None = None
    previous_compile_cache_dir: str | None = None


def _seconds(match: re.Match[str], group: int = 1) -> float | None:
    return float(match.group(group))  # digits only, at most 9 each side: finite, >= 0


def parse(lines: list[str]) -> Phases:
    """The phases of the newest start in ``lines``."""
    now = Phases()
    for raw in lines:
        line = raw[:MAX_LINE]
        if START.search(line):
            now = Phases(previous_compile_from_cache=now.compile_from_cache,
                         previous_compile_cache_dir=now.compile_cache_dir)
            continue
        now = _one(now, line)
    return now


def _one(now: Phases, line: str) -> Phases:
    if (m := WEIGHTS.search(line)) is not None:
        return replace(now, lines=now.lines + 1, weights_load_s=_seconds(m))
    if (m := MODEL.search(line)) is not None:
        return replace(now, lines=now.lines + 1, model_load_s=_seconds(m, 2), weights_gib=_seconds(m))
    if (m := COMPILE.search(line)) is not None:
        return replace(now, lines=now.lines + 1, compile_s=_seconds(m))
    if HIT.search(line):
        # a start that compiled one graph is a miss, whatever else it loaded
        hit = True if now.compile_from_cache is None else now.compile_from_cache
        return replace(now, lines=now.lines + 1, compile_from_cache=hit)
    if MISS.search(line):
        return replace(now, lines=now.lines + 1, compile_from_cache=False)
    if (m := GRAPHS.search(line)) is not None:
        return replace(now, lines=now.lines + 1, graph_capture_s=_seconds(m))
    if (m := CACHE_DIR.search(line)) is not None:
        return replace(now, lines=now.lines + 1, compile_cache_dir=m.group(1))
    return now
