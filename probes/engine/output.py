"""engine.output: does sampled output degenerate into repetition?

Source: a few streamed completions from the engine's ``/v1/completions`` with ordinary
prompts and the engine's own default sampling (no temperature sent), 96 tokens each, one at
a time: at most ``SAMPLES`` requests within ``BUDGET_S`` shared by all endpoints. Unit: the
share of word 4-grams that repeat an earlier 4-gram in the same answer (0 = none, 1 = one
loop). No privilege needed. Manual equivalent: ask the endpoint a plain question with curl
and read the answer.

Why word 4-grams: a healthy answer repeats a few phrases (well under 20% of its 4-grams);
an engine with a broken sampler, a wrong chat template, a KV-cache corruption or a
mis-quantised model loops the same phrase until max_tokens, which lands above 80%.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import partial

from doctor.seam.host import Host
from doctor.workload.loadgen import Endpoint, LoadError, RequestResult, request_body
from doctor.model import ScanOptions, Skip
from doctor.display import text
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


@dataclass(frozen=True, slots=True)
class OutputRecord:
    endpoints: tuple[OutputEndpoint, ...]


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


def _sample(endpoint: Endpoint, prompt: str, timeout_s: float) -> OutputSample:
    import asyncio
    import time

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
                        result.text[:160], result.error)


def sample_endpoint(endpoint: Endpoint, budget_s: float = BUDGET_S) -> OutputEndpoint:
    samples = [_sample(endpoint, prompt, budget_s / SAMPLES) for prompt in PROMPTS]
    judged = [s.repeated_ngram_share for s in samples if s.repeated_ngram_share is not None]
    return OutputEndpoint(endpoint.base_url, tuple(samples), len(judged),
                          sum(share > REPETITIVE_SHARE for share in judged),
                          max(judged, default=None))


def _sampled(endpoint: Endpoint, budget_s: float) -> dict:
    return asdict(sample_endpoint(endpoint, budget_s))


def probe(host: Host, options: ScanOptions) -> OutputRecord:
    """Sample every engine endpoint's output and measure its repetition."""
    found = active_targets(host, options)
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
    return OutputRecord(tuple(out))


def summary(record: OutputRecord) -> str:
    return "; ".join(f"{e.base_url}: {e.repetitive}/{e.judged} samples repetitive "
                     f"(worst {text(e.worst_share, 'none long enough to judge')})"
                     for e in record.endpoints)
