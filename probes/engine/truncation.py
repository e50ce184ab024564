"""engine.truncation: each engine's context limit against the prompts it is sent.

A prompt longer than the context is cut (Ollama keeps its end and says nothing) or refused
(vLLM, llama.cpp answer 400): either way the answer is not to the prompt the client wrote.
Sources, per engine:

* the limit: engine.discovery's ``max_model_len`` (vLLM ``/v1/models`` max_model_len or
  ``--max-model-len``, SGLang ``context_length``, TGI ``max_total_tokens``, llama.cpp
  ``/props`` default_generation_settings.n_ctx, the context of one slot, ``-c`` / ``-np``;
  Ollama ``/api/ps`` context_length, what the loaded model was given). Ollama with no model
  loaded: ``OLLAMA_CONTEXT_LENGTH`` from ``/proc/<pid>/environ`` (that one variable), else
  its default: 2048 tokens in the releases before 0.6.x, 4096 after, and in the newest docs
  (docs/context-length.mdx) 4k, 32k or 256k by VRAM; 2048, the lowest, is assumed and said;
* the prompts: the prompt length ``llm-doctor load`` sent in its saved sweep
  (``settings.prompt_tokens`` of knee-<hash>.json), and the engine's prompt-length
  histogram (vLLM ``vllm:request_prompt_tokens``, TGI ``tgi_request_input_length``, since
  start, from the page discovery read): vLLM's buckets run 1, 2, 5, 10, ... up to
  max_model_len, so prompts piled above its highest bucket sit at the limit, cut there by
  the client.

Units: tokens, requests. No privilege for the pages; ``environ`` of another user's process
needs root. Manual equivalent: ``curl -s :11434/api/ps | jq '.models[].context_length'``;
``curl -s :8000/metrics | grep request_prompt_tokens_bucket``; ``jq .settings.prompt_tokens
~/.local/state/llm-doctor/knee-*.json``.
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass

from doctor.i18n import t
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.redact import MASK
from doctor.seam.host import Host, HostReadError
from doctor.values import count, field, page_json
from doctor.workload.knee import knee_path
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_pages import first_pages
from probes.helpers import engine_names as N
from probes.helpers.engine_flags import Engine
from probes.helpers.process_env import env_value
from probes.helpers.promtext import Page

# Ollama before 0.6.x: num_ctx 2048 unless set (Modelfile, OLLAMA_CONTEXT_LENGTH, a request's
# options.num_ctx); later releases chose 4096, the newest 4k-256k by VRAM. The lowest is assumed.
OLLAMA_DEFAULT_CTX = 2048
LIMIT_FROM = {"vllm": "max_model_len", "sglang": "context_length", "tgi": "max_total_tokens",
              "llama.cpp": "/props n_ctx (one slot)", "ollama": "/api/ps context_length"}


@dataclass(frozen=True, slots=True)
class EngineTruncation:
    base_url: str
    kind: str
    limit_tokens: int | None  # the context a prompt must fit in
    limit_from: str | None  # LIMIT_FROM's words, "OLLAMA_CONTEXT_LENGTH", "Ollama's default (assumed)"
    limit_absent: str | None  # why limit_tokens is None
    sweep_prompt_tokens: int | None  # the prompt length the saved sweep sent
    histogram_requests: int | None  # prompts the engine's histogram counted, since start
    top_bucket_from: float | None  # the highest finite bucket bound below the limit, tokens
    top_bucket_requests: int | None  # prompts above top_bucket_from
    top_bucket_share: float | None  # top_bucket_requests / histogram_requests
    error: str | None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)  # limit_tokens -> limit_absent


@dataclass(frozen=True, slots=True)
class TruncationRecord:
    engines: tuple[EngineTruncation, ...]


def _sweep_prompt_tokens(host: Host, base_url: str) -> int | None:
    try:
        document = page_json(host.read_text(str(knee_path(base_url))))
    except (HostReadError, ValueError):
        return None
    value = field(document, "settings", "prompt_tokens")
    return count(value, minimum=1) if type(value) is int else None


def _ollama_limit(host: Host, engine: Engine) -> tuple[int | None, str | None, str | None]:
    if engine.max_model_len is not None:
        return engine.max_model_len, LIMIT_FROM["ollama"], None
    if engine.pid is None:
        return None, None, "no model loaded (/api/ps) and no process to read OLLAMA_CONTEXT_LENGTH from"
    found = env_value(host, engine.pid, "OLLAMA_CONTEXT_LENGTH")
    if found.reason is not None:
        return None, None, f"/proc/{engine.pid}/environ: {found.reason}"
    if found.value == MASK:
        return None, None, "OLLAMA_CONTEXT_LENGTH masked (a recording keeps no values)"
    if found.value is None:
        return OLLAMA_DEFAULT_CTX, "Ollama's default (assumed: 2048 before 0.6.x)", None
    value = count(found.value.strip(), minimum=1)
    if value is None:
        return None, None, f"OLLAMA_CONTEXT_LENGTH={found.value[:40]!r} is not a whole number"
    return value, "OLLAMA_CONTEXT_LENGTH", None


def _histogram(host: Host, engine: Engine, limit: int | None):
    """(requests, top bucket bound, requests above it) from the page discovery read."""
    page, _ = first_pages(host).get(engine.base_url or "", (None, 0.0))
    names = N.PROMPT_LENGTH.get(engine.kind, ())
    if not isinstance(page, Page) or limit is None or not names:
        return None, None, None
    buckets = next((b for b in (page.buckets(n) for n in names) if b), ())
    if not buckets:
        return None, None, None
    total = buckets[-1][1]
    below = [(le, c) for le, c in buckets if math.isfinite(le) and le < limit]
    if not below or total <= 0:
        return count(total), None, None
    bound, under = below[-1]
    return count(total), bound, count(max(total - under, 0.0))


def _one(host: Host, engine: Engine) -> EngineTruncation:
    if engine.kind == "ollama":
        limit, limit_from, absent = _ollama_limit(host, engine)
    else:
        limit = engine.max_model_len
        limit_from = LIMIT_FROM.get(engine.kind, "max_model_len") if limit else None
        absent = None if limit else "the engine's pages and flags name no context length"
    total, bound, top = _histogram(host, engine, limit)
    return EngineTruncation(
        engine.base_url or "", engine.kind, limit, limit_from, absent,
        _sweep_prompt_tokens(host, engine.base_url or ""), total, bound, top,
        round(top / total, 4) if top is not None and total else None, engine.error,
        {"limit_tokens": absent} if limit is None and absent else {})


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> TruncationRecord:
    """Each engine's context limit beside the prompt lengths it was sent."""
    found = [e for e in found_engines(host, options, inputs).engines
             if e.base_url and e.kind != "unknown"]
    if not found:
        raise Skip(t("no engine with an HTTP endpoint: nothing names a context limit"))
    return TruncationRecord(tuple(_one(host, e) for e in found))


def summary(record: TruncationRecord) -> str:
    return t("; ").join(_one_line(e) for e in record.engines)


def _one_line(e: EngineTruncation) -> str:
    line = (t("{url}: context {limit}", url=e.base_url, limit=e.limit_tokens) if e.limit_tokens
            else t("{url}: context unknown", url=e.base_url))
    if e.sweep_prompt_tokens:
        line += t(", sweep prompts {tokens}", tokens=e.sweep_prompt_tokens)
    if e.top_bucket_share is not None and e.top_bucket_from is not None:
        line += t(", {share:.0%} of prompts above {bound:g}", share=e.top_bucket_share,
                  bound=e.top_bucket_from)
    return line
