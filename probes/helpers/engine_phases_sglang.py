"""What an SGLang engine's own log says its start cost: weights load and CUDA graph capture.

The lines, as SGLang's code writes them (python/sglang/srt/model_executor/model_runner.py at
sgl-project/sglang commit 0005834cdb2a5b7472789ccbf0d3361b5cf853b8; the prefix before them,
``[2025-11-10 19:59:09 TP1] ``, varies by version, rank and log handler, so each is searched
within the line):

* ``Load weight end. elapsed=%.2f s, type=<class>, [<quant>, ]avail mem=%.2f GB, mem usage=%.2f GB.``
  (``load_model``; before the end of 2025 without ``elapsed=``: ``Load weight end.
  type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=131.08 GB, mem
  usage=8.13 GB.``, sgl-project/sglang#4826). ``GB`` is ``get_available_gpu_memory``'s, bytes
  over 2**30: GiB. A speculative engine loads a draft model after the target, with its own
  ``type=``.
* ``Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB.``
  (``init_decode_cuda_graph``; real: ``[2025-11-10 19:59:09 TP1] Capture cuda graph end. Time
  elapsed: 11.35 s. mem usage=1.04 GB. avail mem=11.22 GB.``, sgl-project/sglang#12978) and
  ``Capture piecewise CUDA graph end. Time elapsed: ...`` (``init_prefill_cuda_graph``); later
  versions name the phase and write ``elapsed=``: ``Capture target decode CUDA graph end.
  elapsed=%.2f s, ...``, ``Capture draft extend CUDA graph end. step=%d, elapsed=%.2f s, ...``
  (the speculative workers).
* ``server_args=ServerArgs(`` opens a start (the launcher logs its arguments first).

Every tensor-parallel rank logs its own lines, at the same time: a phase is the slowest rank's
(the largest figure of one kind), and the kinds add up (a draft model loads after the target,
each graph phase captures after the other). SGLang runs no torch.compile unless started with
``--enable-torch-compile``, and then inside the graph capture: there is no compile line.

Hostile text as in engine_phases.py: lines cut at 4,096 characters, bounded patterns, numbers
of at most nine digits each side of the point; the last start in the log wins.
"""

from __future__ import annotations

import re
from dataclasses import replace

from probes.helpers.engine_phases import MAX_LINE, Phases

_NUM = r"([0-9]{1,9}(?:\.[0-9]{1,9})?)"
START = re.compile(r"server_args=ServerArgs\(")
WEIGHTS = re.compile(r"Load weight end\.(?: elapsed=" + _NUM + r" ?s,)?(?: type=([A-Za-z0-9_]{1,200}),)?")
WEIGHTS_GIB = re.compile(r"mem usage=" + _NUM + r" ?GB")
GRAPH = re.compile(r"Capture (?:([a-z ]{1,40}) )?(?:cuda|CUDA|npu|cpu) graph end\.(?: step=([0-9]{1,4}),)? "
                   r"(?:Time elapsed: |elapsed=)" + _NUM + r" ?s")


def parse(lines: list[str]) -> Phases:
    """The phases of the newest SGLang start in ``lines``."""
    found = 0
    weights: dict[str, tuple[float | None, float | None]] = {}  # model class -> (s, GiB)
    graphs: dict[tuple[str, str], float] = {}  # (phase, step) -> s
    for raw in lines:
        line = raw[:MAX_LINE]
        if START.search(line):
            found, weights, graphs = 0, {}, {}
            continue
        if (m := WEIGHTS.search(line)) is not None:
            found += 1
            gib = WEIGHTS_GIB.search(line, m.end())
            seconds, size = weights.get(m.group(2) or "", (None, None))
            weights[m.group(2) or ""] = (_most(seconds, m.group(1)), _most(size, gib.group(1) if gib else None))
        elif (m := GRAPH.search(line)) is not None:
            found += 1
            key = ((m.group(1) or "").lower(), m.group(2) or "")
            graphs[key] = max(graphs.get(key, 0.0), float(m.group(3)))
    return _phases(found, weights, graphs)


def _most(now: float | None, said: str | None) -> float | None:
    """The larger of ``now`` and the figure ``said`` (digits only: finite, >= 0)."""
    if said is None:
        return now
    return float(said) if now is None else max(now, float(said))


def _total(values: list[float | None]) -> float | None:
    """The sum, or None where one is unknown (a line of SGLang before late 2025 has no
    elapsed=) or there is none."""
    known = [v for v in values if v is not None]
    return round(sum(known), 2) if known and len(known) == len(values) else None


def _phases(found: int, weights: dict[str, tuple[float | None, float | None]],
            graphs: dict[tuple[str, str], float]) -> Phases:
    return replace(Phases(), lines=found,
                   weights_load_s=_total([s for s, _ in weights.values()]),
                   weights_gib=_total([g for _, g in weights.values()]),
                   graph_capture_s=_total(list(graphs.values())))
