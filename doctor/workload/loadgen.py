"""A streaming load generator for OpenAI-compatible completion endpoints.

Raw asyncio streams over HTTP/1.1 keep-alive, one connection per concurrent worker. Why not
aiohttp or httpx: neither is a dependency yet, and on a 2-core machine the client must cost
far less than the engine it measures; a hand-rolled reader that only understands what an SSE
completion stream sends (chunked or length-delimited bodies, ``data:`` events) does about
five times the streamed requests per second of httpx (benchmarks/loadgen_ceiling.py prints
the ceiling). Every request is bounded by a timeout; every run by a request count and a
wall-clock budget.

Prompts are fresh on every run (doctor/workload/prompts.py); what the engine says it served
from its prompt cache anyway is read from the stream's last event and kept per request.

Traffic goes where the caller points it; llm-doctor's own callers only pass engine
endpoints the user named or discovery found. Manual equivalent:
``curl -N http://HOST:PORT/v1/completions -d '{"prompt": "...", "stream": true}'``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, replace
from typing import Callable
from urllib.parse import urlsplit

from doctor.endpoints import hide_keys
from doctor.i18n import t
from doctor.values import count, field
from doctor.workload.prompts import make_prompt, new_seed

LAG_TICK_S = 0.02  # how often the client checks that its own event loop wakes on time


STREAM_LIMIT = 1 << 16  # the longest line (a head, a chunk size) read from an answer


class LoadError(Exception):
    """The endpoint cannot be used at all (bad URL, refused); the message names it."""


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """Where the load generator sends requests: ``http://host:port`` plus the API path and
    request shape (not doctor.endpoints.Endpoint, the parsed URL a user names)."""

    base_url: str
    api: str = "completions"  # completions | chat
    model: str | None = None
    api_key: str | None = None  # sent as a bearer token; never recorded or printed

    @property
    def path(self) -> str:
        prefix = urlsplit(self.base_url).path.rstrip("/")
        return prefix + ("/v1/chat/completions" if self.api == "chat" else "/v1/completions")


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One streamed request, timed on the client (time.perf_counter, seconds)."""

    ok: bool
    status: int  # HTTP status; 0 when no response came
    error: str | None
    started_s: float  # since the run began
    ttft_s: float | None  # request sent -> first content event
    e2e_s: float  # request sent -> stream end (or failure, or the cut)
    output_tokens: int  # the server's usage.completion_tokens, else content events counted
    prompt_tokens: int | None  # the server's usage.prompt_tokens when it reports it
    itl_s: tuple[float, ...]  # gaps between consecutive content events
    text: str
    # Prompt tokens the engine says it served from its prompt cache: usage.prompt_tokens_details
    # .cached_tokens (OpenAI, vLLM with --enable-prompt-tokens-details, llama.cpp), else
    # llama.cpp's timings.cache_n; None when the engine does not say.
    cached_tokens: int | None = None
    stamps_s: tuple[float, ...] = ()  # each content event's arrival, since the run began
    cut: bool = False  # in flight when the client's own budget ended: neither ok nor an error
    # llama.cpp's own account of the request (its last event's ``timings``: prompt_n,
    # prompt_ms, predicted_n, predicted_ms, predicted_per_second...), the finite numbers only;
    # () from an engine that sends none
    engine_timings: tuple[tuple[str, float], ...] = ()

    @property
    def mean_itl_s(self) -> float | None:
        """This request's mean inter-token latency as guidellm and aiperf define it:
        (e2e - TTFT) / (output tokens - 1); None for a failed, cut or one-token request."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def request_body(endpoint: RequestTarget, prompt: str, max_tokens: int, fixed_length: bool,
                 temperature: float | None = 0.0) -> bytes:
    body: dict = {"max_tokens": max_tokens, "stream": True,
                  "stream_options": {"include_usage": True}}
    if temperature is not None:
        body["temperature"] = temperature
    if fixed_length:  # vLLM, SGLang and llama.cpp honour it; others stop at EOS
        body["ignore_eos"] = True
    if endpoint.model:
        body["model"] = endpoint.model
    if endpoint.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body).encode()


def _request_head(endpoint: RequestTarget, host: str, length: int) -> bytes:
    lines = [f"POST {endpoint.path} HTTP/1.1", f"Host: {host}",
             "Content-Type: application/json", "Accept: text/event-stream",
             f"Content-Length: {length}"]
    if endpoint.api_key:
        lines.append(f"Authorization: Bearer {endpoint.api_key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _event_content(event: dict) -> str | None:
    """The generated text in one streamed event (completions or chat), None if none
    (an event of another shape carries none: the stream is someone else's output)."""
    text = field(event, "choices", 0, "text")
    if not isinstance(text, str):
        text = field(event, "choices", 0, "delta", "content")
    return text if isinstance(text, str) and text else None


MAX_ANSWER_BYTES = 16 << 20  # a 32k-token stream is under 10 MB of events


class _Stream:
    """Accumulates SSE events from body bytes, stamping content events as they arrive."""

    def __init__(self, sent_at: float) -> None:
        self.sent_at = sent_at
        self.buffer = b""
        self.scanned = 0  # how far the buffer holds no event end: searched once only
        self.received = 0
        self.stamps: list[float] = []
        self.parts: list[str] = []
        self.usage: dict = {}
        self.cache_n: int | None = None  # llama.cpp's timings.cache_n
        self.timings: tuple[tuple[str, float], ...] = ()  # llama.cpp's timings, numbers only
        self.done = False
        self.error: str | None = None

    def feed(self, data: bytes, now: float) -> None:
        self.received += len(data)
        if self.received > MAX_ANSWER_BYTES:
            raise ValueError(f"answer larger than {MAX_ANSWER_BYTES >> 20} MiB")
        self.buffer += data
        while True:
            cut = self.buffer.find(b"\n\n", self.scanned)
            if cut < 0:
                self.scanned = max(len(self.buffer) - 1, 0)
                return
            block, self.buffer, self.scanned = self.buffer[:cut], self.buffer[cut + 2:], 0
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip(), now)

    def _event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):
            self.error = f"unparseable event: {payload[:80]!r}"
            return
        if not isinstance(event, dict):
            return
        if "error" in event:
            message = field(event, "error", "message")
            message = message if isinstance(message, str) else event["error"]
            self.error = (message if isinstance(message, str)
                          else "the engine sent an error event")[:200]
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        timings = event.get("timings")
        if isinstance(timings, dict) and count(timings.get("cache_n")) is not None:
            self.cache_n = count(timings.get("cache_n"))
        if isinstance(timings, dict):
            self.timings = _numbers(timings)
        text = _event_content(event)
        if text is not None:
            self.stamps.append(now)
            self.parts.append(text)

    def cached_tokens(self) -> int | None:
        """What the engine served from its prompt cache, where it says. Not llama.cpp's
        ``tokens_cached``: that is the slot's whole cache after the answer, generated tokens
        included (9 prompt + 3 generated tokens read 11 with cache_n 4)."""
        details = self.usage.get("prompt_tokens_details")
        cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
        if cached is not None:
            return cached
        return self.cache_n


class Connection:
    """One keep-alive HTTP/1.1 connection that sends streamed completion requests."""

    def __init__(self, endpoint: RequestTarget, timeout_s: float) -> None:
        parts = urlsplit(endpoint.base_url)
        try:
            port = parts.port
        except ValueError:  # a port out of range or not a number
            port = -1
        if parts.scheme != "http" or not parts.hostname or port == -1:
            raise LoadError(t("{url}: expected http://HOST:PORT (https endpoints: put a local "
                              "proxy in front, or use its http port)", url=endpoint.base_url))
        self.endpoint = endpoint
        self.host, self.port = parts.hostname, port or 80
        self.authority = parts.netloc
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reused = False  # the last exchange went over a connection opened before it
        self.stream: _Stream | None = None  # the exchange in progress, or the last one

    async def close(self) -> None:
        if self.writer is not None:
            writer, self.reader, self.writer = self.writer, None, None
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:  # reset by the server: closed either way
                pass

    async def send(self, body: bytes, t0: float) -> RequestResult:
        """Send one request and read its stream to the end; never raises for the server."""
        stream = self.stream = _Stream(time.perf_counter())
        status = 0
        try:
            try:
                status = await asyncio.wait_for(self._exchange(body, stream), self.timeout_s)
            except (ConnectionError, asyncio.IncompleteReadError):
                if not self.reused or status or stream.stamps:
                    raise
                # The server closed the kept-alive connection between requests (llama-server
                # does after each stream, without saying so): reconnect and send once more.
                await self.close()
                stream.sent_at = time.perf_counter()
                status = await asyncio.wait_for(self._exchange(body, stream), self.timeout_s)
        except asyncio.TimeoutError:
            stream.error = f"no complete answer within {self.timeout_s:g} s"
        except asyncio.LimitOverrunError:
            stream.error = f"an answer line longer than {STREAM_LIMIT} bytes"
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            stream.error = f"{type(exc).__name__}: {exc}"[:200]
        if stream.error:
            await self.close()
        return self._hidden(_result(stream, status, t0, time.perf_counter()))

    def cut_result(self, t0: float) -> RequestResult:
        """The request in flight, as the client cut it off: what it streamed so far."""
        assert self.stream is not None
        return self._hidden(_result(self.stream, 0, t0, time.perf_counter(), cut=True))

    def _hidden(self, result: RequestResult) -> RequestResult:
        """An engine that echoes the key: it goes no further."""
        if not self.endpoint.api_key:
            return result
        keys = (self.endpoint.api_key,)
        return replace(result, text=hide_keys(result.text, keys),
                       error=result.error and hide_keys(result.error, keys))

    async def _exchange(self, body: bytes, stream: _Stream) -> int:
        self.reused = self.writer is not None
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port,
                                                                     limit=STREAM_LIMIT)
        assert self.reader is not None
        self.writer.write(_request_head(self.endpoint, self.authority, len(body)) + body)
        status, headers = await _read_head(self.reader)
        if status >= 400:
            stream.error = f"HTTP {status}"
        await _read_body(self.reader, headers, stream)
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")  # at most STREAM_LIMIT bytes
    lines = head.decode("latin-1").split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not (fields[1].isascii() and fields[1].isdigit()) or len(fields[1]) != 3:
        raise ValueError(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(fields[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str],
                     stream: _Stream) -> None:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if not 0 <= size <= MAX_ANSWER_BYTES:
                raise ValueError(f"a chunk of {size} bytes")
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            data = await reader.readexactly(size + 2)
            stream.feed(data[:-2].replace(b"\r\n", b"\n"), time.perf_counter())
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            data = await reader.read(min(left, 65536))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            stream.feed(data.replace(b"\r\n", b"\n"), time.perf_counter())
        stream.feed(b"\n\n", time.perf_counter())
    else:  # read until the server closes
        while data := await reader.read(65536):
            stream.feed(data.replace(b"\r\n", b"\n"), time.perf_counter())
        stream.feed(b"\n\n", time.perf_counter())
        headers["connection"] = "close"


def _result(stream: _Stream, status: int, t0: float, now: float,
            cut: bool = False) -> RequestResult:
    stamps = stream.stamps
    ttft = stamps[0] - stream.sent_at if stamps else None
    gaps = tuple(b - a for a, b in zip(stamps, stamps[1:]))
    usage_tokens = count(stream.usage.get("completion_tokens"))
    error = None if cut else stream.error
    if error is None and not stamps and not cut:
        error = "the stream carried no generated text"
    return RequestResult(
        ok=error is None and not cut, status=status, error=error,
        started_s=stream.sent_at - t0, ttft_s=ttft, e2e_s=now - stream.sent_at,
        output_tokens=usage_tokens if usage_tokens is not None and not cut else len(stamps),
        prompt_tokens=count(stream.usage.get("prompt_tokens")), itl_s=gaps,
        text="".join(stream.parts), cached_tokens=stream.cached_tokens(),
        stamps_s=tuple(s - t0 for s in stamps), cut=cut, engine_timings=stream.timings)


def _numbers(values: dict) -> tuple[tuple[str, float], ...]:
    """An engine's ``timings`` object as (name, value) pairs: finite numbers under short
    names only, at most 32 (an answer is the engine's, not to be trusted)."""
    kept = [(k, float(v)) for k, v in values.items()
            if isinstance(k, str) and len(k) <= 40 and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)]
    return tuple(kept[:32])


@dataclass(frozen=True, slots=True)
class Workload:
    """What each request asks for."""

    prompt_tokens: int = 512
    output_tokens: int = 64
    fixed_length: bool = True  # ignore_eos, so every request generates output_tokens
    timeout_s: float = 60.0
    temperature: float | None = 0.0


@dataclass(frozen=True, slots=True)
class LevelRun:
    """What one level sent, and how the client itself kept up while it ran."""

    concurrency: int
    results: tuple[RequestResult, ...]
    window_s: float  # first send -> the level closed (no request started after), seconds
    closed_by: str  # enough (count and time reached) | budget (the time bound) | requests (all sent)
    client_lag_s: tuple[float, ...] = ()  # how late the event loop woke, every LAG_TICK_S
    client_cpu_s: float = 0.0  # CPU time of the client's event-loop thread over the level
    seed: int = 0
    first_index: int = 0
    requests_used: int = 0  # prompt indices taken, sent or not


class _Progress:
    """A level's running counts, shared by its workers (one event loop: no locks)."""

    def __init__(self) -> None:
        self.completed = 0
        self.taken = 0  # prompt indices taken from the counter
        self.closed_at: float | None = None
        self.closed_by = "requests"


async def drive(endpoint: RequestTarget, workload: Workload, concurrency: int, max_requests: int,
                max_seconds: float, seed: int | None = None, first_index: int = 0,
                min_requests: int | None = None, min_seconds: float = 0.0,
                cut: bool = False,
                on_progress: Callable[[LevelRun], None] | None = None) -> LevelRun:
    """``concurrency`` workers send requests back to back until the level closes.

    It closes at ``max_seconds``, or earlier once ``min_requests`` completed and
    ``min_seconds`` passed; no request starts after that, and none past ``max_requests``.
    With ``cut`` the requests still in flight at the close are cut off (their connection
    closed, so the engine stops them too) and marked ``cut``; without, they finish within
    their timeout. Meanwhile the client times its own event loop: a loop that wakes late
    stamps every token late and sends the next request late. ``on_progress`` gets the level
    so far at ``min_seconds`` and as often again while it runs on to its minimum count.
    """
    seed = new_seed() if seed is None else seed
    t0 = time.perf_counter()
    cpu0 = time.thread_time()
    closed = asyncio.Event()
    state = _Progress()
    counter = iter(range(max_requests))
    results: list[RequestResult] = []
    lags: list[float] = []

    def close(reason: str) -> None:
        if not closed.is_set():
            state.closed_at, state.closed_by = time.perf_counter(), reason
            closed.set()

    def enough() -> None:
        if (min_requests is not None and state.completed >= min_requests
                and time.perf_counter() - t0 >= min_seconds):
            close("enough")

    async def timer() -> None:
        if min_requests is not None and min_seconds < max_seconds:
            await asyncio.sleep(min_seconds)
            enough()
        await asyncio.sleep(max(0.0, t0 + max_seconds - time.perf_counter()))
        close("budget")

    def so_far(end: float, reason: str) -> LevelRun:
        return LevelRun(concurrency, tuple(results), max(end - t0, 1e-9), reason, tuple(lags),
                        time.thread_time() - cpu0, seed, first_index, state.taken)

    async def report() -> None:
        while on_progress is not None and min_seconds > 0:
            await asyncio.sleep(min_seconds)
            if closed.is_set():
                return
            on_progress(so_far(time.perf_counter(), "running"))

    async def watch_lag() -> None:
        while not closed.is_set():
            before = time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            lags.append(max(0.0, time.perf_counter() - before - LAG_TICK_S))

    async def one(connection: Connection, body: bytes) -> RequestResult | None:
        """The request's result; None when it was cut (the cut result is recorded)."""
        request = asyncio.ensure_future(connection.send(body, t0))
        closing = asyncio.ensure_future(closed.wait())
        await asyncio.wait({request, closing}, return_when=asyncio.FIRST_COMPLETED)
        closing.cancel()
        if request.done() or not cut:
            return await request
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        results.append(connection.cut_result(t0))
        await connection.close()
        return None

    async def worker() -> None:
        connection = Connection(endpoint, workload.timeout_s)
        try:
            for index in counter:
                state.taken = index + 1
                if closed.is_set():
                    return
                prompt = make_prompt(workload.prompt_tokens, seed, first_index + index)
                body = request_body(endpoint, prompt, workload.output_tokens,
                                    workload.fixed_length, workload.temperature)
                result = await one(connection, body)
                if result is None:
                    return
                results.append(result)
                state.completed += result.ok
                enough()
        finally:
            await connection.close()

    helpers = [asyncio.ensure_future(task()) for task in (timer, watch_lag, report)]
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    end = state.closed_at or max((t0 + r.started_s + r.e2e_s for r in results), default=t0)
    return so_far(end, state.closed_by)


def run_level(endpoint: RequestTarget, workload: Workload, concurrency: int, max_requests: int,
              max_seconds: float, **options) -> LevelRun:
    """Synchronous entry point for one level of a sweep (one event loop per call)."""
    Connection(endpoint, workload.timeout_s)  # raises LoadError for a bad URL up front
    return asyncio.run(drive(endpoint, workload, concurrency, max_requests, max_seconds,
                             **options))


def run_requests(endpoint: RequestTarget, workload: Workload, concurrency: int, max_requests: int,
                 max_seconds: float, seed: int | None = None) -> list[RequestResult]:
    """Requests back to back: none starts after ``max_seconds``, those in flight finish.

    Synchronous entry point for probes and commands; prompts are fresh unless ``seed`` is given.
    """
    return list(run_level(endpoint, workload, concurrency, max_requests, max_seconds,
                          seed=seed).results)
