"""engine.output: does sampled output degenerate into repetition?

Source: a few streamed completions from the engine's ``/v1/completions`` with ordinary
prompts and the engine's own default sampling (no temperature sent), 96 tokens each, one at
a time: at most ``SAMPLES`` requests within ``BUDGET_S`` shared by all endpoints (``COST``,
stated before the first request; not sent to an engine serving requests unless
``--busy-ok``, probes/helpers/engine_requests.py). Unit: the
share of word 4-grams that repeat an earlier 4-gram in the same answer (0 = none, 1 = one
loop). No privilege needed. Manual equivalent: ask the endpoint a plain question with curl
and read the answer.

Why word 4-grams: a healthy answer repeats a few phrases (well under 20% of its 4-grams);
an engine with a broken sampler, a wrong chat template, a KV-cache corruption or a
mis-quantised model loops the same phrase until max_tokens, which lands above 80%.

The output tokens are bounded by what the requests ask for (``max_tokens``, honoured by
every engine llm-doctor knows); an engine that streamed past it would still be cut by the
time bound, each answer's share of it (``BUDGET_S / SAMPLES``).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from functools import partial

from doctor.i18n import t
from doctor.seam.host import Host
from doctor.workload.loadgen import RequestTarget, LoadError, RequestResult, request_body
from doctor.model import RequestCost, ScanOptions, Sent, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import text
from probes.helpers.engine_requests import clear_to_send
from probes.helpers.engine_targets import active_targets

PROMPTS = (
    "Write a short paragraph explaining how a refrigerator keeps food cold.",
    "Describe the water cycle to a ten year old in a few sentences.",
    "List three differences between a city and a village, and explain each one.",
)
SAMPLES = len(PROMPTS)
OUTPUT_TOKENS = 96
BUDGET_S = 45.0
NGRAM = 4
WORD = re.compile(r"\w+|[^\w\s]")
# Prompt tokens: a tokenizer makes at most one token of each byte of the prompt (byte-level
# BPE, SentencePiece with byte fallback), and a BOS. On gemma3-270m the prompts are 13-16.
COST = RequestCost(requests=SAMPLES,
                   prompt_tokens=sum(len(p.encode()) + 1 for p in PROMPTS),
                   output_tokens=SAMPLES * OUTPUT_TOKENS, seconds=BUDGET_S)


@dataclass(frozen=True, slots=True)
class OutputSample:
    prompt: str
    words: int
    repeated_ngram_share: float | None  # None: too short to judge (under 2 x NGRAM words)
    excerpt: str  # the answer's first 160 characters, for the evidence
    error: str | None


@dataclass(frozen=True, slots=True)
class OutputEndpoint:
    base_url: str
    samples: tuple[OutputSample, ...]
    judged: int  # samples long enough to judge
    repetitive: int  # judged samples above REPETITIVE_SHARE
    worst_share: float | None
    # What was sent (None: a recording made before llm-doctor counted it): prompt tokens as
    # the engine said (usage.prompt_tokens), else the prompt's words; output tokens received
    requests: int | None = None
    prompt_tokens_sent: int | None = None
    output_tokens_received: int | None = None
    sending_s: float | None = None


@dataclass(frozen=True, slots=True)
class OutputRecord:
    endpoints: tuple[OutputEndpoint, ...]
    not_sent: tuple[str, ...] = ()  # "URL: why" for each engine not sent to (serving requests)

    def sent(self) -> tuple[Sent, ...]:
        """What each engine was sent (none said for a recording that did not count it)."""
        return tuple(Sent("engine.output", e.base_url, e.requests, e.prompt_tokens_sent,
                          e.output_tokens_received, e.sending_s)
                     for e in self.endpoints
                     if e.requests is not None and e.prompt_tokens_sent is not None
                     and e.output_tokens_received is not None and e.sending_s is not None)


# A numbered list repeats its lead-in ("The main difference is that ...") and lands near
# 0.5 on a 270M model; a loop of one phrase lands above 0.8.
REPETITIVE_SHARE = 0.6


def repeated_ngram_share(text: str, n: int = NGRAM) -> float | None:
    """The share of word n-grams that already occurred earlier in ``text``."""
    words = [w.lower() for w in WORD.findall(text)]
    if len(words) < 2 * n:
        return None
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    seen: set[tuple[str, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return round(repeats / len(grams), 3)


def _sample(endpoint: RequestTarget, prompt: str, timeout_s: float) -> tuple[OutputSample, RequestResult]:
    import asyncio

    from doctor.workload.loadgen import Connection

    async def one() -> RequestResult:
        connection = Connection(endpoint, timeout_s)
        try:
            body = request_body(endpoint, prompt, OUTPUT_TOKENS, fixed_length=False,
                                temperature=None)
            return await connection.send(body, time.perf_counter())
        finally:
            await connection.close()

    result = asyncio.run(one())
    share = repeated_ngram_share(result.text)  # a stream cut by the timeout is judged too
    return OutputSample(prompt, len(WORD.findall(result.text)), share,
                        result.text[:160], result.error), result


def sample_endpoint(endpoint: RequestTarget, budget_s: float = BUDGET_S) -> OutputEndpoint:
    started = time.monotonic()
    done = [_sample(endpoint, prompt, budget_s / SAMPLES) for prompt in PROMPTS]
    sending_s = time.monotonic() - started
    samples = [sample for sample, _ in done]
    judged = [s.repeated_ngram_share for s in samples if s.repeated_ngram_share is not None]
    return OutputEndpoint(endpoint.base_url, tuple(samples), len(judged),
                          sum(share > REPETITIVE_SHARE for share in judged),
                          max(judged, default=None), requests=len(done),
                          prompt_tokens_sent=sum(r.prompt_tokens if r.prompt_tokens is not None
                                                 else len(prompt.split())
                                                 for (_, r), prompt in zip(done, PROMPTS)),
                          output_tokens_received=sum(r.output_tokens for _, r in done),
                          sending_s=round(sending_s, 3))


def _sampled(endpoint: RequestTarget, budget_s: float) -> dict:
    return asdict(sample_endpoint(endpoint, budget_s))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> OutputRecord:
    """Sample the output of every engine endpoint not serving requests now (unless
    ``options.busy_ok``) and measure its repetition."""
    found, not_sent = clear_to_send(host, options, "engine.output", COST,
                                    active_targets(host, options, inputs))
    out = []
    for target in found:
        try:
            data = host.measure(f"engine.output {target.base_url}",
                                partial(_sampled, target.endpoint(), BUDGET_S / len(found)))
        except LoadError as exc:
            raise Skip(str(exc)) from None
        # never change the measured dict: a capture saves that very object
        samples = tuple(OutputSample(**s) for s in data["samples"])
        out.append(OutputEndpoint(**{**data, "samples": samples}))
    return OutputRecord(tuple(out), not_sent)


def summary(record: OutputRecord) -> str:
    parts = [t("{url}: {repetitive}/{judged} samples repetitive (worst {worst})",
               url=e.base_url, repetitive=e.repetitive, judged=e.judged,
               worst=text(e.worst_share, t("none long enough to judge")))
             for e in record.endpoints]
    return t("; ").join([*parts, *(sent.text() for sent in record.sent()), *record.not_sent])
