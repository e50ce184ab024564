"""A small OpenAI-style streaming server on loopback, for tests and the load-generator benchmark.

It models an engine with ``slots`` sequences decoded together: a request waits for a free
slot, takes ``prefill_s`` before its first token, then one token every ``token_s``. With
``slots=None`` and no delays it is the trivial endpoint that benchmarks/loadgen_ceiling.py
measures the client against. It also answers GET /v1/models, /health, and /metrics with
llama.cpp's ``llamacpp:requests_processing``, and can demand an API key.

Run alone: ``python -m tests.stream_server [--tokens N]`` prints ``PORT`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from dataclasses import dataclass


@dataclass
class Behaviour:
    tokens: int = 4  # events per stream when the request does not ask for max_tokens
    honour_max_tokens: bool = True
    slots: int | None = None  # None: unlimited
    prefill_s: float = 0.0
    token_s: float = 0.0
    cold_requests: int = 0  # the first N requests take cold_extra_s more before their first token
    cold_extra_s: float = 0.0
    api_key: str | None = None
    text: str = " word"  # each event's text; a list cycles through several
    model: str = "stub-model"
    close_after: bool = False  # close the connection after each answer without saying so
    # A prompt cache as engines keep one: each prompt's longest common prefix (in words) with
    # any earlier prompt is "served from the cache", and said in the usage event
    # (prompt_tokens_details.cached_tokens, as vLLM and llama.cpp do), in llama.cpp's
    # timings.cache_n, or not at all (None).
    prompt_cache: str | None = None


class StreamServer:
    """Serve in a background thread (tests) or in the foreground (benchmark)."""

    def __init__(self, behaviour: Behaviour | None = None, host: str = "127.0.0.1") -> None:
        self.behaviour = behaviour or Behaviour()
        self.host = host
        self.port = 0
        self.requests = 0
        self.running = 0
        self.generated = 0  # tokens streamed: its /metrics counter, as llama.cpp's
        self.prompts: list[str] = []  # every prompt received, in order
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start_async(self) -> None:
        if self.behaviour.slots:
            self._slots = asyncio.Semaphore(self.behaviour.slots)
        self._server = await asyncio.start_server(self._client, self.host, 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self) -> "StreamServer":
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start_async())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        """Close the listener, cancel the connections, stop and close the loop."""
        if self._loop is None:
            return

        async def shutdown() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        self._loop = None

    async def _client(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                await self._answer(method, path, headers, body, writer)
                if self.behaviour.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:  # stop() while a stream was running
            pass
        finally:
            writer.close()

    async def _answer(self, method, path, headers, body, writer) -> None:
        b = self.behaviour
        if b.api_key and headers.get("authorization") != f"Bearer {b.api_key}":
            _plain(writer, 401, b'{"error": "invalid api key"}')
        elif method == "GET" and path == "/v1/models":
            _plain(writer, 200, json.dumps({"object": "list", "data": [{"id": b.model}]}).encode())
        elif method == "GET" and path == "/health":
            _plain(writer, 200, b'{"status": "ok"}')
        elif method == "GET" and path == "/metrics":
            page = (f"# TYPE llamacpp:requests_processing gauge\n"
                    f"llamacpp:requests_processing {self.running}\n"
                    f"# TYPE llamacpp:tokens_predicted_total counter\n"
                    f"llamacpp:tokens_predicted_total {self.generated}\n").encode()
            _plain(writer, 200, page, "text/plain; version=0.0.4")
        elif method == "POST" and path.endswith("/completions"):
            await self._stream(json.loads(body or b"{}"), writer)
        else:
            _plain(writer, 404, b'{"error": "not found"}')
        await writer.drain()

    def _cached_words(self, prompt: str) -> int:
        words = prompt.split()
        best = 0
        for earlier in self.prompts[-1000:]:
            shared = 0
            for a, b in zip(words, earlier.split()):
                if a != b:
                    break
                shared += 1
            best = max(best, shared)
        return best

    async def _stream(self, request: dict, writer) -> None:
        b = self.behaviour
        self.requests += 1
        prompt = str(request.get("prompt") or (request.get("messages") or [{}])[-1].get(
            "content", ""))
        cached = self._cached_words(prompt)
        self.prompts.append(prompt)
        cold = self.requests <= b.cold_requests
        n = int(request.get("max_tokens", b.tokens)) if b.honour_max_tokens else b.tokens
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if self._slots is not None:
            await self._slots.acquire()
        self.running += 1
        try:
            delay = b.prefill_s + (b.cold_extra_s if cold else 0.0)
            if delay:
                await asyncio.sleep(delay)
            texts = b.text if isinstance(b.text, list) else [b.text]
            chat = "messages" in request
            for i in range(n):
                if b.token_s and i:
                    await asyncio.sleep(b.token_s)
                text = texts[i % len(texts)]
                choice = {"delta": {"content": text}} if chat else {"text": text}
                _chunk(writer, b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
                self.generated += 1
                if b.token_s:
                    await writer.drain()
                if writer.transport.is_closing():  # the client went away: stop, as engines do
                    return
        finally:
            self.running -= 1
            if self._slots is not None:
                self._slots.release()
        last: dict = {"choices": [], "usage": {"prompt_tokens": len(prompt.split()),
                                               "completion_tokens": n}}
        if b.prompt_cache == "usage":
            last["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        elif b.prompt_cache == "timings":
            last["timings"] = {"cache_n": cached, "prompt_n": len(prompt.split()) - cached}
        _chunk(writer, b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")


def _chunk(writer, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _plain(writer, status: int, body: bytes, content_type: str = "application/json") -> None:
    writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4)
    args = parser.parse_args()
    server = StreamServer(Behaviour(tokens=args.tokens, honour_max_tokens=False))

    async def run() -> None:
        await server.start_async()
        print(server.port, flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()


def only_named_endpoints(monkeypatch) -> None:
    """Tests against this server see only the endpoints they name, not the engines that
    happen to run on a shared machine (another test's llama-server, someone's vLLM)."""
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())
