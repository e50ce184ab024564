"""engine.warmup: is the engine cold? First requests against steady-state TTFT and ITL.

Source: timed streamed requests to the engine's OpenAI-compatible ``/v1/completions``
(client-side clock, milliseconds), and the engine process's uptime from
``/proc/<pid>/stat`` (starttime) and ``/proc/uptime``. Active and bounded: at most
``MAX_ROUNDS`` rounds of five requests of varied prompt length (16 to 256 tokens, 16 output
tokens each), sent one at a time, within ``BUDGET_S`` shared by all endpoints: ``COST``,
which the plan line states before the first request, and which the record's
``prompt_tokens_sent``, ``output_tokens_received`` and ``sending_s`` show kept. Not sent to an
engine serving requests (probes/helpers/engine_requests.py) unless ``--busy-ok``. No
privilege needed. Manual equivalent: time ``curl -N .../v1/completions -d '{"prompt": ...,
"stream": true}'`` a few times and compare the first answer with the later ones.

Every prompt starts with its own words, so a prefix cache cannot make the later rounds look
warm; what gets faster is what warm-up fixes (kernels compiled or autotuned, memory pools
allocated, CUDA graphs captured, weights paged in).

What the engine says of itself, beside the comparison: the tokens it had generated before
the first request of this probe (its own ``/metrics`` counter, read once just before:
vLLM and SGLang ``generation_tokens_total``, TGI ``tgi_request_generated_tokens_sum``,
llama.cpp ``tokens_predicted_total``), and its uptime. An engine up for minutes that has
served traffic is warm whatever one slow first request says (issue 14: CRITICAL, then OK
52 s later, on an engine up 4 minutes while another process loaded a model). No engine
exports its compile or graph-capture state as a metric, so that is not read.

Contention during the comparison: the cores busy with other work than the engine's (all
CPUs' busy time from ``/proc/stat`` less the engine process tree's and this process's own
CPU time, ``/proc/<pid>/stat``) while the first request ran and during the last round. A
first request that ran while other work took much more of the CPUs than during the steady
ones was slowed by that work, not by a cold engine. Only for an engine on this host whose
pid is known; None otherwise.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from doctor.workload.loadgen import RequestTarget, LoadError, RequestResult, Workload, run_requests
from doctor.model import RequestCost, ScanOptions, Sent, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import number
from probes.helpers import engine_names as N
from probes.helpers.engine_requests import clear_to_send
from probes.helpers.engine_startup import uptime_s
from probes.helpers.engine_targets import Target, active_targets
from probes.helpers.promtext import PageError, parse

LENGTHS = (16, 128, 32, 256, 64)  # prompt tokens: varied, as the articles' remedy asks;
# short enough that three rounds fit the budget on a CPU engine (llama.cpp, 2 cores)
OUTPUT_TOKENS = 16
MAX_ROUNDS = 3  # the probe's bound; `llm-doctor warmup` goes on until TTFT settles
BUDGET_S = 40.0
SETTLED = 0.15  # a round within 15% of the previous one (or 20 ms) has settled
METRICS_TIMEOUT_S = 3.0
# Prompt tokens beyond the words a prompt holds (each word one token with its leading space,
# doctor/workload/prompts.py): the BOS, and a first word without its space in up to three
# pieces (Gemma splits "toward" in two). Measured on llama-server with gemma3-270m: at most 2.
PROMPT_MARGIN = 3
COST = RequestCost(requests=MAX_ROUNDS * len(LENGTHS),
                   prompt_tokens=MAX_ROUNDS * (sum(LENGTHS) + PROMPT_MARGIN * len(LENGTHS)),
                   output_tokens=MAX_ROUNDS * len(LENGTHS) * OUTPUT_TOKENS, seconds=BUDGET_S)
METRICS_MAX_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class WarmupEndpoint:
    base_url: str
    pid: int | None
    uptime_s: float | None  # the engine process's age, when its pid is known
    rounds: int
    requests: int
    errors: int
    first_error: str | None
    first_ttft_ms: float | None  # the very first request this probe sent
    steady_ttft_ms: float | None  # the same prompt length in the last round
    ttft_ratio: float | None  # first / steady
    first_round_ttft_ms: float | None  # median of round one
    last_round_ttft_ms: float | None  # median of the last round
    first_itl_ms: float | None  # median gap between tokens of the first request
    steady_itl_ms: float | None  # median gap in the last round
    settled: bool  # the last round was within 15% of the one before
    # what the engine says: tokens generated before this probe's first request (its /metrics)
    generated_tokens_before: float | None = None
    logical_cpus: int | None = None  # of this host, for the contention figures
    first_other_busy_cores: float | None = None  # other work than the engine's, during the first request
    steady_other_busy_cores: float | None = None  # the same, median over the last round's requests
    # What was sent (None: a recording made before llm-doctor counted it): prompt tokens as
    # the engine said (usage.prompt_tokens), else the words sent; output tokens received
    prompt_tokens_sent: int | None = None
    output_tokens_received: int | None = None
    sending_s: float | None = None  # from the first request sent to the last answer's end


@dataclass(frozen=True, slots=True)
class WarmupRecord:
    endpoints: tuple[WarmupEndpoint, ...]
    not_sent: tuple[str, ...] = ()  # "URL: why" for each engine not sent to (serving requests)

    def sent(self) -> tuple[Sent, ...]:
        """What each engine was sent (none said for a recording that did not count it)."""
        return tuple(Sent("engine.warmup", e.base_url, e.requests, e.prompt_tokens_sent,
                          e.output_tokens_received, e.sending_s)
                     for e in self.endpoints
                     if e.prompt_tokens_sent is not None and e.output_tokens_received is not None
                     and e.sending_s is not None)


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else round(value_s * 1000, 2)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class OtherWork:
    """Cores busy with other work than the engine's, per request: all CPUs' busy time
    (``/proc/stat``) less the engine process tree's and this process's CPU time
    (``/proc/<pid>/stat``), over the request's wall time. Live only (psutil)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._psutil = psutil
        self.engine = psutil.Process(pid)
        self.me = psutil.Process()
        self.logical_cpus: int | None = psutil.cpu_count()
        self.readings: list[list[float | None]] = []  # per round, per request

    def mark(self) -> tuple[float, float, float] | None:
        ps = self._psutil
        try:
            tree = [self.engine, *self.engine.children(recursive=True)]
            engine_s = 0.0
            for proc in tree:
                try:
                    times = proc.cpu_times()
                except (ps.NoSuchProcess, ps.ZombieProcess):  # a worker that just ended
                    continue
                engine_s += times.user + times.system
            own = self.me.cpu_times()
            system = ps.cpu_times()
        except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
            return None
        busy = sum(system) - system.idle - getattr(system, "iowait", 0.0)
        return time.perf_counter(), busy, engine_s + own.user + own.system

    @staticmethod
    def cores(start: tuple[float, float, float] | None,
              end: tuple[float, float, float] | None) -> float | None:
        if start is None or end is None or end[0] - start[0] <= 0:
            return None
        other = (end[1] - start[1]) - (end[2] - start[2])
        return round(max(0.0, other) / (end[0] - start[0]), 3)


def _round(endpoint: RequestTarget, index: int, deadline: float,
           before: list[RequestResult], watch: OtherWork | None = None) -> list[RequestResult]:
    """One request of each length, one at a time; none started that would likely not finish
    by ``deadline`` (less time left than twice the longest request so far)."""
    out: list[RequestResult] = []
    readings: list[float | None] = []
    for position, length in enumerate(LENGTHS):
        left = deadline - time.monotonic()
        longest = max((r.e2e_s for r in before + out if r.ok), default=0.0)
        if left <= max(0.5, 2 * longest):
            break
        workload = Workload(prompt_tokens=length, output_tokens=OUTPUT_TOKENS, timeout_s=left)
        start = watch.mark() if watch else None
        out += run_requests(endpoint, workload, 1, 1, left,
                            seed=int(time.time() * 1000) % 10**9 + index * 10 + position)
        if watch:
            readings.append(watch.cores(start, watch.mark()))
    if watch and out:
        watch.readings.append(readings)
    return out


def settled(previous: list[RequestResult], last: list[RequestResult]) -> bool:
    before = _median([r.ttft_s for r in previous if r.ttft_s is not None])
    now = _median([r.ttft_s for r in last if r.ttft_s is not None])
    if before is None or now is None:
        return False
    return abs(now - before) <= max(SETTLED * before, 0.020)


def measure(endpoint: RequestTarget, max_rounds: int, budget_s: float,
            until_settled: bool = False,
            on_round: Callable[[int, list[RequestResult]], None] | None = None,
            watch: OtherWork | None = None) -> list[list[RequestResult]]:
    """Rounds of varied-length requests; stops at ``max_rounds``, the budget, or (when
    ``until_settled``) once a round is within 15% of the one before (at least two rounds)."""
    deadline = time.monotonic() + budget_s
    rounds: list[list[RequestResult]] = []
    while len(rounds) < max_rounds and deadline - time.monotonic() > 1.0:
        done = _round(endpoint, len(rounds), deadline, [r for rnd in rounds for r in rnd], watch)
        if not done:
            break
        rounds.append(done)
        if on_round:
            on_round(len(rounds), rounds[-1])
        if all(not r.ok for r in rounds[-1]):
            break
        if until_settled and len(rounds) >= 2 and settled(rounds[-2], rounds[-1]):
            break
    return rounds


def prompt_tokens(rounds: list[list[RequestResult]]) -> int:
    """The prompt tokens the rounds sent: the engine's count, else the prompt's words."""
    return sum(r.prompt_tokens if r.prompt_tokens is not None else length
               for rnd in rounds for r, length in zip(rnd, LENGTHS))


def summarise(base_url: str, pid: int | None, uptime_s: float | None,
              rounds: list[list[RequestResult]], sending_s: float | None = None) -> WarmupEndpoint:
    flat = [r for rnd in rounds for r in rnd]
    errors = [r for r in flat if not r.ok]
    first, last = rounds[0][0], rounds[-1][0]
    steady_gaps = [g for r in rounds[-1] if r.ok for g in r.itl_s]
    first_ttft = first.ttft_s if first.ok else None
    steady_ttft = last.ttft_s if last.ok and len(rounds) > 1 else None
    ratio = round(first_ttft / steady_ttft, 2) if first_ttft and steady_ttft else None
    return WarmupEndpoint(
        base_url=base_url, pid=pid, uptime_s=uptime_s, rounds=len(rounds), requests=len(flat),
        errors=len(errors), first_error=errors[0].error if errors else None,
        first_ttft_ms=_ms(first_ttft), steady_ttft_ms=_ms(steady_ttft), ttft_ratio=ratio,
        first_round_ttft_ms=_ms(_median([r.ttft_s for r in rounds[0] if r.ttft_s is not None])),
        last_round_ttft_ms=_ms(_median([r.ttft_s for r in rounds[-1] if r.ttft_s is not None])),
        first_itl_ms=_ms(_median(list(first.itl_s))), steady_itl_ms=_ms(_median(steady_gaps)),
        settled=len(rounds) > 1 and settled(rounds[-2], rounds[-1]),
        prompt_tokens_sent=prompt_tokens(rounds),
        output_tokens_received=sum(r.output_tokens for r in flat),
        sending_s=None if sending_s is None else round(sending_s, 3))


def uptime_of(host: Host, pid: int | None) -> float | None:
    """Seconds since the process started (probes/helpers/engine_startup.py)."""
    return uptime_s(host, pid)


def generated_tokens(host: Host, target: Target) -> float | None:
    """The tokens the engine says it has generated since it started (its /metrics counter);
    None when the page cannot be read or carries no such counter."""
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    try:
        answer = host.http_get(f"{target.base_url}/metrics", timeout_s=METRICS_TIMEOUT_S,
                               max_bytes=METRICS_MAX_BYTES, headers=headers)
        page = parse(answer.body, f"{target.base_url}/metrics") if answer.status == 200 else None
    except (HostReadError, PageError):
        return None
    if page is None:
        return None
    kind = N.kind_of_page(page.names())
    for name in N.GENERATION_TOKENS.get(N.family(kind or ""), ()):
        value = page.total(name)
        if value is not None:
            return value
    return None


def _other_work(pid: int | None) -> OtherWork | None:
    """The contention watch for an engine on this host; None without its pid or psutil."""
    if pid is None:
        return None
    try:
        import psutil
    except ImportError:
        return None
    try:
        return OtherWork(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def _measure_one(host: Host, target: Target, budget_s: float = BUDGET_S) -> WarmupEndpoint:
    def run() -> dict:
        from dataclasses import asdict, replace

        uptime_s = uptime_of(host, target.pid)  # before: the measurement's own start
        generated = generated_tokens(host, target)  # before its own requests
        watch = _other_work(target.pid)
        started = time.monotonic()
        rounds = measure(target.endpoint(), MAX_ROUNDS, budget_s, watch=watch)
        result = summarise(target.base_url, target.pid, uptime_s, rounds,
                           time.monotonic() - started)
        readings = watch.readings if watch else []
        if watch and readings and len(readings) == len(rounds):
            result = replace(result, logical_cpus=watch.logical_cpus,
                             first_other_busy_cores=readings[0][0] if readings[0] else None,
                             steady_other_busy_cores=(_median_of(readings[-1])
                                                      if len(rounds) > 1 else None))
        return asdict(replace(result, generated_tokens_before=generated))

    # The measurement as a whole is what a capture keeps and a replay returns.
    return WarmupEndpoint(**host.measure(f"engine.warmup {target.base_url}", run))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> WarmupRecord:
    """First against steady-state latency for every engine endpoint found or named that is
    not serving requests now (unless ``options.busy_ok``)."""
    found, not_sent = clear_to_send(host, options, "engine.warmup", COST,
                                    active_targets(host, options, inputs))
    out = []
    for target in found:
        try:
            # one budget for all engines, so the probe stays within its timeout
            out.append(_measure_one(host, target, BUDGET_S / len(found)))
        except LoadError as exc:
            raise Skip(str(exc)) from None
    return WarmupRecord(tuple(out), not_sent)


def _ms_text(value: float | None, error: str | None) -> str:
    if value is not None:
        return f"{number(value, 'g')} ms"
    return t("not measured ({why})", why=error or t("no answer"))


def summary(record: WarmupRecord) -> str:
    parts = [t("{url}: first TTFT {first}, steady {steady} (the same prompt length in the last "
               "round)", url=e.base_url,
               first=_ms_text(e.first_ttft_ms, e.first_error),
               steady=_ms_text(e.steady_ttft_ms, e.first_error)) for e in record.endpoints]
    return t("; ").join([*parts, *(sent.text() for sent in record.sent()), *record.not_sent])

