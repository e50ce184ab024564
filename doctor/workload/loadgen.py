"""A streaming load generator for OpenAI-compatible completion endpoints.

Raw asyncio streams over HTTP/1.1 keep-alive, one connection per concurrent worker. Why not
aiohttp or httpx: neither is a dependency yet, and on a 2-core machine the client must cost
far less than the engine it measures; a hand-rolled reader that only understands what an SSE
completion stream sends (chunked or length-delimited bodies, ``data:`` events) does about
five times the streamed requests per second of httpx (benchmarks/loadgen_ceiling.py prints
the ceiling). Every request is bounded by a timeout; every run by a request count and a
wall-clock budget.

Traffic goes where the caller points it; llm-doctor's own callers only pass engine
endpoints the user named or discovery found. Manual equivalent:
``curl -N http://HOST:PORT/v1/completions -d '{"prompt": "...", "stream": true}'``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from doctor.endpoints import hide_keys
from doctor.values import count, field

# Common English words: each is one token in the tokenizers of Llama, Gemma, Qwen and GPT
# (with its leading space), so n words make a prompt of about n tokens.
WORDS = ("the of and to in is it you that he was for on are with as his they be at one have "
         "this from or had by word but what some we can out other were all there when up use "
         "your how said an each she which do their time if will way about many then them "
         "write would like so these her long make thing see him two has look more day could "
         "go come did number sound no most people my over know water than call first who may "
         "down side been now find any new work part take get place made live where after back "
         "little only round man year came show every good me give our under name very through "
         "just form sentence great think say help low line differ turn cause much mean before "
         "move right boy old too same tell does set three want air well also play small end "
         "put home read hand port large spell add even land here must big high such follow "
         "act why ask men change went light kind off need house picture try us again animal "
         "point mother world near build self earth father head stand own page should country "
         "found answer school grow study still learn plant cover food sun four between state "
         "keep eye never last let thought city tree cross farm hard start might story saw far "
         "sea draw left late run while press close night real life few north open seem "
         "together next white children begin got walk example ease paper group always music "
         "those both mark often letter until mile river car feet care second book carry took "
         "science eat room friend began idea fish mountain stop once base hear horse cut sure "
         "watch color face wood main enough plain girl usual young ready above ever red list "
         "though feel talk bird soon body dog family direct pose leave song measure door "
         "product black short numeral class wind question happen complete ship area half rock "
         "order fire south problem piece told knew pass since top whole king space heard best "
         "hour better true during hundred five remember step early hold west ground interest "
         "reach fast verb sing listen six table travel less morning ten simple several vowel "
         "toward war lay against pattern slow center love person money serve appear road map "
         "rain rule govern pull cold notice voice unit power town fine certain fly fall lead "
         "cry dark machine note wait plan figure star box noun field rest correct able pound "
         "done beauty drive stood contain front teach week final gave green quick develop "
         "ocean warm free minute strong special mind behind clear tail produce fact street "
         "inch multiply nothing course stay wheel full force blue object decide surface deep "
         "moon island foot system busy test record boat common gold possible plane stead dry "
         "wonder laugh thousand ago ran check game shape equate hot miss brought heat snow "
         "tire bring yes distant fill east paint language among").split()


STREAM_LIMIT = 1 << 16  # the longest line (a head, a chunk size) read from an answer


class LoadError(Exception):
    """The endpoint cannot be used at all (bad URL, refused); the message names it."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to send requests: ``http://host:port`` plus the API path and request shape."""

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
    e2e_s: float  # request sent -> stream end (or failure)
    output_tokens: int  # the server's usage.completion_tokens, else content events counted
    prompt_tokens: int | None  # the server's usage.prompt_tokens when it reports it
    itl_s: tuple[float, ...]  # gaps between consecutive content events
    text: str


def make_prompt(n_words: int, seed: int) -> str:
    """A prompt of about ``n_words`` tokens whose first words differ with ``seed``.

    The seed leads, so no two prompts share a prefix and an engine's prefix cache cannot
    turn a prefill measurement into a cache hit.
    """
    rng = random.Random(seed)
    words = [f"Request {seed}:"] + [rng.choice(WORDS) for _ in range(max(n_words - 3, 1))]
    return " ".join(words)


def request_body(endpoint: Endpoint, prompt: str, max_tokens: int, fixed_length: bool,
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


def _request_head(endpoint: Endpoint, host: str, length: int) -> bytes:
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
        text = _event_content(event)
        if text is not None:
            self.stamps.append(now)
            self.parts.append(text)


class Connection:
    """One keep-alive HTTP/1.1 connection that sends streamed completion requests."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        parts = urlsplit(endpoint.base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise LoadError(f"{endpoint.base_url}: expected http://HOST:PORT "
                            "(https endpoints: put a local proxy in front, or use its http port)")
        self.endpoint = endpoint
        self.host, self.port = parts.hostname, parts.port or 80
        self.authority = parts.netloc
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reused = False  # the last exchange went over a connection opened before it

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
        sent_at = time.perf_counter()
        stream = _Stream(sent_at)
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
                sent_at = stream.sent_at = time.perf_counter()
                status = await asyncio.wait_for(self._exchange(body, stream), self.timeout_s)
        except asyncio.TimeoutError:
            stream.error = f"no complete answer within {self.timeout_s:g} s"
        except asyncio.LimitOverrunError:
            stream.error = f"an answer line longer than {STREAM_LIMIT} bytes"
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            stream.error = f"{type(exc).__name__}: {exc}"[:200]
        if stream.error:
            await self.close()
        result = _result(stream, status, sent_at - t0, time.perf_counter() - sent_at)
        if self.endpoint.api_key:  # an engine that echoes the key: it goes no further
            keys = (self.endpoint.api_key,)
            result = replace(result, text=hide_keys(result.text, keys),
                             error=result.error and hide_keys(result.error, keys))
        return result

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


def _result(stream: _Stream, status: int, started_s: float, e2e_s: float) -> RequestResult:
    stamps = stream.stamps
    ttft = stamps[0] - stream.sent_at if stamps else None
    gaps = tuple(b - a for a, b in zip(stamps, stamps[1:]))
    usage_tokens = count(stream.usage.get("completion_tokens"))
    error = stream.error
    if error is None and not stamps:
        error = "the stream carried no generated text"
    return RequestResult(
        ok=error is None, status=status, error=error, started_s=started_s, ttft_s=ttft,
        e2e_s=e2e_s,
        output_tokens=usage_tokens if usage_tokens is not None else len(stamps),
        prompt_tokens=count(stream.usage.get("prompt_tokens")), itl_s=gaps,
        text="".join(stream.parts))


@dataclass(frozen=True, slots=True)
class Workload:
    """What each request asks for."""

    prompt_tokens: int = 512
    output_tokens: int = 64
    fixed_length: bool = True  # ignore_eos, so every request generates output_tokens
    timeout_s: float = 60.0
    temperature: float | None = 0.0


async def run_level(endpoint: Endpoint, workload: Workload, concurrency: int,
                    max_requests: int, max_seconds: float, seed: int = 0) -> list[RequestResult]:
    """``concurrency`` workers send requests back to back until either bound is reached.

    No request starts after ``max_seconds``; those in flight finish (within their timeout).
    """
    t0 = time.perf_counter()
    deadline = t0 + max_seconds
    counter = iter(range(max_requests))
    results: list[RequestResult] = []

    async def worker() -> None:
        connection = Connection(endpoint, workload.timeout_s)
        try:
            for index in counter:
                if time.perf_counter() >= deadline:
                    return
                prompt = make_prompt(workload.prompt_tokens, seed * 1_000_003 + index)
                body = request_body(endpoint, prompt, workload.output_tokens,
                                    workload.fixed_length, workload.temperature)
                results.append(await connection.send(body, t0))
        finally:
            await connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def run_requests(endpoint: Endpoint, workload: Workload, concurrency: int, max_requests: int,
                 max_seconds: float, seed: int = 0) -> list[RequestResult]:
    """Synchronous entry point for probes and commands (one event loop per call)."""
    Connection(endpoint, workload.timeout_s)  # raises LoadError for a bad URL up front
    return asyncio.run(run_level(endpoint, workload, concurrency, max_requests, max_seconds,
                                 seed))
