"""Fuzz kind ``endpoint``: a live scan of an engine impostor whose answers are hostile.

Each input is one impostor on loopback (tests/hostile_http.RawServer). Every page the
engine probes read (``/metrics``, ``/v1/models``, ``/props``, ``/server_info``,
``/get_server_info``, ``/info``, ``/api/ps``, ``/slots``, ``/health``, streamed
``/v1/completions``) answers with a plan drawn for that input:

* ``good``: the engine's real page (tests/engine_pages), the scan's baseline;
* ``body``: that page with wrong shapes or hostile numbers (NaN, ±Inf, ``1e999``, 400-digit
  numbers, negative counts, 100,000-deep nesting, non-UTF-8, the key echoed back);
* ``wire``: a broken exchange (not HTTP, ``HTTP/2``, 101 headers, a 1 MB header line, a
  lying Content-Length, broken chunking, a drip feed, silence, a status line echoing the key);
* ``redirect``: 301/302/303/307/308 to one of two recording servers (another port,
  ``localhost``, 127.0.0.2, https), to itself in a loop, or to no URL at all.

The scan is ``scan --level quick|standard --endpoint http://:KEY@127.0.0.1:PORT --format
json``, of this host, live: a replay (``--replay``) answers every page from the recording
and never asks the endpoint. Beyond tests/fuzz_runs.check (no traceback, hang, internal
error, invalid JSON, the key in no output), the key must reach no server but the origin:
a recording server that receives it counts as ``found-secret`` too.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.fuzz_inputs import Outside
from tests.hostile_http import Drip, RawServer, Request, response

if TYPE_CHECKING:  # tests/fuzz_runs.py names this module's trier in TRIERS
    from tests.fuzz_runs import Run, Tried

PAGES = Path(__file__).resolve().parent / "engine_pages"
ECHO = "@@KEY@@"  # replaced, when answering, by the key the request carried
HUGE = "9" * 400
NEEDLES = ("secret", "environment")
KINDS = ("vllm", "sglang", "tgi", "triton", "llama.cpp", "ollama")
PATHS = ("/metrics", "/v1/models", "/props", "/server_info", "/get_server_info", "/info",
         "/api/ps", "/slots", "/health", "/v1/completions")
# A drip or a silence ends within this (a page), or STREAM_DRIP_S (a streamed completion,
# which warm-up asks for up to 15 times): a standard scan of the impostor stays well within
# the campaign's 20 s bound even on a shared, loaded machine.
# One page of an input may stall for STALL_S instead, past the probes' 2-3 s bounds.
DRIP_S = 0.5
STREAM_DRIP_S = 0.2
STALL_S = 3.5


# --------------------------------------------------------------------------- the real pages

def _metrics(folder: str) -> tuple[str, str]:
    return tuple((PAGES / folder / f"metrics.{i}.txt").read_text() for i in (1, 2))  # type: ignore[return-value]


LLAMA_METRICS = ("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {}\n"
                 "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n"
                 "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n")
METRICS = {"vllm": _metrics("vllm-v1-kv-pressure"), "sglang": _metrics("sglang"),
           "tgi": _metrics("tgi"), "triton": _metrics("triton-trtllm"),
           "llama.cpp": (LLAMA_METRICS.format(1), LLAMA_METRICS.format(2)), "ollama": None}
JSON_PAGES: dict[str, dict[str, Any]] = {
    "/v1/models": {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model",
                                               "owned_by": "vllm", "root": "/models/qwen3-8b",
                                               "max_model_len": 32768}]},
    "/server_info": {"model_path": "/models/llama-3.1-8b-instruct", "tp_size": 1,
                     "mem_fraction_static": 0.88, "max_running_requests": 256,
                     "chunked_prefill_size": 8192, "context_length": 131072, "page_size": 1,
                     "kv_cache_dtype": "auto", "api_key": ECHO, "disable_cuda_graph": False},
    "/info": {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "max_concurrent_requests": 128,
              "max_input_tokens": 4095, "max_total_tokens": 4096,
              "max_batch_prefill_tokens": 4096, "version": "3.3.6"},
    "/props": {"total_slots": 4, "model_path": "/models/gemma.gguf",
               "default_generation_settings": {"n_ctx": 4096, "temperature": 0.8}},
    "/api/ps": {"models": [{"name": "llama3:8b", "model": "llama3:8b", "size": 6654289920,
                            "context_length": 8192}]},
    "/slots": [{"id": 0, "is_processing": True, "n_ctx": 4096},
               {"id": 1, "is_processing": False, "n_ctx": 4096}],
    "/health": {"status": "ok"},
}
JSON_PAGES["/get_server_info"] = JSON_PAGES["/server_info"]
SERVED = {  # which JSON pages each engine has (others answer 404)
    "vllm": {"/v1/models", "/health"}, "sglang": {"/server_info", "/get_server_info",
                                                  "/v1/models", "/health"},
    "tgi": {"/info", "/health"}, "triton": set(), "llama.cpp": {"/props", "/v1/models", "/slots",
                                                              "/health"},
    "ollama": {"/api/ps"},
}


def _events(rng: random.Random) -> list[Any]:
    words = [{"choices": [{"index": 0, "text": f" word{i}"}]} for i in range(rng.randint(1, 6))]
    return [*words, {"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": len(words)}}]


def _sse(events: list[Any], chunked: bool) -> bytes:
    body = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
    body += "data: [DONE]\n\n"
    if not chunked:
        return response(200, body.encode(), "Content-Type: text/event-stream")
    chunks = "".join(f"{len(part.encode()):x}\r\n{part}\r\n" for part in body.split("\n\n") if part)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
            b"\r\n\r\n" + chunks.encode() + b"0\r\n\r\n")


# --------------------------------------------------------------------------- hostile values

def _hostile_json_values(rng: random.Random) -> list[Any]:
    return [None, True, False, 0, -1, -4096, 5, 2**63, 10**400, 0.5, 1e308, float("nan"),
            float("inf"), float("-inf"), "", "x", "4096", "1e999", "NaN", HUGE, "-1",
            [], {}, [1, 2], {"a": {"b": 1}}, ["x"] * 3, ECHO, f"Bearer {ECHO}",
            "\x1b]0;pwned\x07\x1b[2J", "x" * rng.choice((1000, 100_000)), "é\u202e\ufffd"]


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc[:10]):
            out += _paths(value, (*prefix, index))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


def _json_text(doc: Any) -> str:
    """JSON as an engine might write it, NaN and Infinity included (Python's json does)."""
    return json.dumps(doc, allow_nan=True)


def mutate_json(doc: Any, rng: random.Random) -> tuple[str, str]:
    """(page text, what was done) for a JSON page made hostile."""
    whole = rng.random()
    if whole < 0.15:
        name, text = rng.choice([
            ("null", "null"), ("list", "[]"), ("number", "5"), ("string", '"models"'),
            ("deep", "[" * 100_000 + "]" * 100_000), ("deep-object", '{"a":' * 50_000 + "1" +
                                                     "}" * 50_000),
            ("truncated", _json_text(doc)[: rng.randint(1, 40)]), ("html", "<html>502</html>"),
            ("bignum", HUGE * 12), ("1e999", "1e999"), ("nan", "NaN"), ("empty", ""),
            ("echo", f'{{"error": "invalid key {ECHO}"}}')])
        return text, f"json-{name}"
    doc = json.loads(json.dumps(doc))
    done = []
    for _ in range(rng.randint(1, 4)):
        paths = _paths(doc)
        path = rng.choice(paths)
        value = rng.choice(_hostile_json_values(rng))
        doc = _set(doc, path, value)
        done.append(f"{'.'.join(map(str, path))[-18:]}={_short(value)}")
    text = _json_text(doc)
    if rng.random() < 0.2:  # numbers JSON holds but no float does
        text = text.replace("32768", rng.choice(["1e999", HUGE, "-1e999", "1E400"]))
        text = text.replace("4096", rng.choice(["1e999", HUGE, "NaN", "Infinity", "-0"]))
        done.append("num-text")
    return text, "json:" + ",".join(done)


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return (text[:8] + "…") if len(text) > 8 else text


METRIC_VALUES = ("NaN", "+Inf", "-Inf", HUGE, "1e308", "-1e308", "-5", "1e-320", "0", "-0",
                 "1e999", "0x10", "", "1_000", ECHO)
LABEL_VALUES = ("NaN", "1e999", "-1", "0", HUGE, "", ECHO, "\\n", "+Inf", "x" * 5000)


def mutate_metrics(page: str, rng: random.Random) -> tuple[str, str]:
    """(page text, what was done) for a /metrics page made hostile."""
    lines = page.splitlines()
    done = []
    for _ in range(rng.randint(1, 6)):
        samples = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
        how = rng.choice(("value", "value", "value", "label", "le", "garbage", "duplicate",
                          "type", "truncate", "echo-label", "echo-help"))
        if not samples:
            break
        i = rng.choice(samples)
        name, _, value = lines[i].rpartition(" ")
        if how == "value":
            lines[i] = f"{name} {rng.choice(METRIC_VALUES)}"
        elif how == "label" and "=\"" in lines[i]:
            head, _, rest = lines[i].partition('="')
            lines[i] = f'{head}="{rng.choice(LABEL_VALUES)}"{rest.partition(chr(34))[2]}'
        elif how == "le":
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{rng.choice(LABEL_VALUES)}"}} '
                         f"{rng.choice(METRIC_VALUES)}")
        elif how == "garbage":
            lines.insert(i, rng.choice(("<html>", "}{", "x{a=\"b\"", "\x00\xff", "# TYPE x",
                                        "a" * 70_000 + " 1", '{} 1')))
        elif how == "duplicate":
            lines[i:i] = [lines[i]] * rng.choice((2, 1000, 20_000))
        elif how == "type":
            lines.insert(i, f"# TYPE {name.partition('{')[0]} "
                            f"{rng.choice(('histogram', 'summary', 'info', 'stateset', 'counter'))}")
        elif how == "truncate":
            lines = lines[:i] + [lines[i][: rng.randint(0, len(lines[i]))]]
        elif how == "echo-label":
            lines.append(f'vllm:cache_config_info{{block_size="{ECHO}",cache_dtype="{ECHO}"}} 1')
        else:
            lines.insert(0, f"# HELP vllm:num_requests_running key {ECHO}")
        done.append(how)
    return "\n".join(lines) + "\n", "metrics:" + ",".join(done)


def mutate_stream(rng: random.Random) -> tuple[bytes, str]:
    """(answer bytes, what was done) for a streamed completion made hostile."""
    events: list[Any] = _events(rng)
    how = rng.choice(("shape", "shape", "usage", "error", "junk", "deep", "echo", "raw"))
    if how == "shape":
        i = rng.randrange(len(events))
        events[i] = rng.choice([{"choices": {"0": {"text": "a"}}}, {"choices": [{"text": 5}]},
                                {"choices": [{"delta": []}]}, {"choices": "x"}, 5, "null", [],
                                {"choices": [None]}, {"choices": [{"delta": {"content": {}}}]}])
    elif how == "usage":
        events[-1] = {"usage": rng.choice([[1], "x", {"completion_tokens": 1e308,
                                                      "prompt_tokens": 10**400},
                                           {"completion_tokens": -5, "prompt_tokens": "16"},
                                           {"completion_tokens": True}])}
    elif how == "error":
        events.insert(1, {"error": rng.choice([{"message": {"deep": [1]}}, [1, 2], None, 5,
                                                f"bad key {ECHO}"])})
    elif how == "junk":
        events.insert(1, rng.choice(["{", "\x00\xff", "NaN", "data: data:", "x" * 100_000]))
    elif how == "deep":
        events.insert(1, "[" * 100_000)
    elif how == "echo":
        events.insert(0, {"choices": [{"text": f" you sent {ECHO}"}]})
    else:
        return rng.choice([
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\nabc", "huge-chunk"),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nabc", "neg-chunk"),
            (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000 + b"\r\n\r\n", "long-head"),
            ("HTTP/1.1 ²00 OK\r\n\r\n".encode(), "unicode-status"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\ndata: {}\n\n", "short-body"),
            (b"HTTP/1.1 200 OK\r\n\r\n" + b"data: " + b"x" * 300_000, "no-event-end")])
    return _sse(events, rng.random() < 0.5), f"stream:{how}"


OK_HEAD = b"HTTP/1.1 200 OK\r\n"


def wire(rng: random.Random, good: bytes, drip_s: float = DRIP_S) -> tuple[bytes | Drip, str]:
    """A broken exchange: (what the server sends, its name); a drip lasts ``drip_s``."""
    name = rng.choice(("not-http", "http2", "preface", "status-1000", "101-headers", "1mb-header",
                       "lying-length", "huge-length", "bad-chunk", "cut-chunk", "long-chunk-line",
                       "close", "100-loop", "drip-head", "drip-body", "drip-whole", "silence",
                       "non-utf8",
                       "empty-200", "echo-status", "echo-header", "half-head", "lf-only"))
    answers: dict[str, Callable[[], bytes | Drip]] = {
        "not-http": lambda: b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        "http2": lambda: b"HTTP/2 200\r\ncontent-length: 2\r\n\r\nok",
        "preface": lambda: b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64",
        "status-1000": lambda: b"HTTP/1.1 1000 X\r\n\r\n",
        "101-headers": lambda: OK_HEAD + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n",
        "1mb-header": lambda: OK_HEAD + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
        "lying-length": lambda: OK_HEAD + b"Content-Length: 100000\r\n\r\n" + good[-200:],
        "huge-length": lambda: OK_HEAD + b"Content-Length: 99999999999999\r\n\r\n" + good[-200:],
        "bad-chunk": lambda: OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
        "cut-chunk": lambda: OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n1000\r\nshort",
        "long-chunk-line": lambda: OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 70000,
        "close": lambda: b"",
        "100-loop": lambda: b"HTTP/1.1 100 Continue\r\n\r\n" * 5000,
        # 20 pieces, each after drip_s / 20: cut in the head, cut in the body, or complete
        "drip-head": lambda: [(bytes([b]), drip_s / 20) for b in good[:20]],
        "drip-body": lambda: [(good[:200], 0.0)] + [(good[i:i + 1], drip_s / 20)
                                                    for i in range(200, 220)],
        "drip-whole": lambda: [(good[i * len(good) // 20:(i + 1) * len(good) // 20], drip_s / 20)
                               for i in range(20)],
        "silence": lambda: [(b"", drip_s)],
        "non-utf8": lambda: response(200, bytes(rng.randrange(256) for _ in range(3000))),
        "empty-200": lambda: response(200, b""),
        "echo-status": lambda: f"HTTP/1.1 2x0 {ECHO} no\r\n\r\n".encode(),
        "echo-header": lambda: response(200, good[-100:], f"Content-Type: text/{ECHO}"),
        "half-head": lambda: OK_HEAD + b"Content-Length: 5",
        "lf-only": lambda: good.replace(b"\r\n", b"\n"),
    }
    return answers[name](), name


# --------------------------------------------------------------------------- one impostor

class Impostor:
    """The origin's answers for one input, drawn once per path, answered on each request."""

    def __init__(self, rng: random.Random, kind: str, prefix: str,
                 recorders: tuple[RawServer, RawServer]) -> None:
        self.rng, self.kind, self.prefix, self.recorders = rng, kind, prefix, recorders
        self.plans: dict[str, str] = {}
        self.seen: dict[str, int] = {}
        self.server = RawServer(self.answer, max_drip_s=STALL_S)
        self.stalled = False  # one stall per input, on a page, not on a stream
        for path in PATHS:
            self.plans[path] = rng.choices(("good", "body", "wire", "redirect"),
                                           (0.4, 0.3, 0.2, 0.1))[0]
        self.done: dict[str, str] = {}

    def describe(self) -> str:
        bad = [f"{p.strip('/').split('/')[-1]}={self.done.get(p, self.plans[p])}"
               for p in PATHS if self.plans[p] != "good"]
        return f"{self.kind} " + " ".join(bad)

    def good(self, path: str) -> bytes:
        if path == "/metrics":
            pages = METRICS[self.kind]
            if pages is None:
                return response(404, b"404 page not found\n")
            count = self.seen.get(path, 0)
            return response(200, pages[min(count, 1)].encode(), "Content-Type: text/plain")
        if path == "/v1/completions":
            return _sse(_events(self.rng), self.rng.random() < 0.5)
        if path in JSON_PAGES and path in SERVED[self.kind]:
            return response(200, _json_text(JSON_PAGES[path]).encode(),
                            "Content-Type: application/json")
        return response(404, b'{"detail":"Not Found"}', "Content-Type: application/json")

    def answer(self, request: Request) -> bytes | Drip:
        path = request.path.split("?")[0]
        if self.prefix and path.startswith(self.prefix):
            path = path[len(self.prefix):]
        path = path.rstrip("/") or "/"
        if path not in self.plans:  # a same-origin redirect's target: the real page
            path = path.rsplit("/moved", 1)[0]
            plan = "good"
        else:
            plan = self.plans[path]
        try:
            answer = self._answer(path, plan)
        finally:
            self.seen[path] = self.seen.get(path, 0) + 1
        token = request.headers.get("authorization", "").partition(" ")[2]
        if isinstance(answer, bytes):
            return answer.replace(ECHO.encode(), token.encode("latin-1"))
        return [(data.replace(ECHO.encode(), token.encode("latin-1")), wait) for data, wait in answer]

    def _answer(self, path: str, plan: str) -> bytes | Drip:
        rng = self.rng
        good = self.good(path)
        if plan == "good" or path not in self.plans:
            return good
        if plan == "wire" and path != "/v1/completions" and not self.stalled and rng.random() < 0.05:
            self.stalled = True
            self.done[path] = "w:stall"
            return [(b"", STALL_S)]
        if plan == "wire":
            answer, name = wire(rng, good, STREAM_DRIP_S if path == "/v1/completions" else DRIP_S)
            self.done[path] = f"w:{name}"
            return answer
        if plan == "redirect":
            return self._redirect(path)
        if path == "/metrics" and METRICS[self.kind] is not None:
            page = METRICS[self.kind][min(self.seen.get(path, 0), 1)]  # type: ignore[index]
            text, name = mutate_metrics(page, rng)
            self.done[path] = f"b:{name[:30]}"
            return response(200, text.encode("utf-8", "surrogateescape"), "Content-Type: text/plain")
        if path == "/v1/completions":
            answer, name = mutate_stream(rng)
            self.done[path] = f"b:{name}"
            return answer
        doc = JSON_PAGES.get(path, {"status": "ok"})
        text, name = mutate_json(doc, rng)
        self.done[path] = f"b:{name[:30]}"
        return response(200, text.encode("utf-8", "surrogateescape"), "Content-Type: application/json")

    def _redirect(self, path: str) -> bytes:
        rng = self.rng
        one, two = self.recorders
        where, location = rng.choice([
            ("port", f"http://127.0.0.1:{one.port}{path}"),
            ("localhost", f"http://localhost:{one.port}{path}"),
            ("127.0.0.2", f"http://127.0.0.2:{two.port}{path}"),
            ("https", f"https://127.0.0.1:{self.server.port}{path}"),
            ("https-port", f"https://127.0.0.1:{one.port}{path}"),
            ("scheme-relative", f"//127.0.0.1:{one.port}{path}"),
            ("same", f"{self.prefix}{path}/moved"),
            ("loop", f"{self.prefix}{path}"),
            ("junk", rng.choice(["http://[::1", "ftp://127.0.0.1/", "http://127.0.0.1:99999/",
                                 "http://:80/", "\x00", "/é", "http://" + "a" * 70000])),
            ("echo", f"http://127.0.0.1:{one.port}/?key={ECHO}"),
        ])
        status = rng.choice((301, 302, 303, 307, 308))
        self.done[path] = f"r:{status}-{where}"
        return response(status, b"moved", f"Location: {location}", reason="Moved")


@contextlib.contextmanager
def _only_the_impostor():
    """The scan (a fork of this process) sees no engine process of this host: engines
    other people run here (a test's llama-server) are neither measured nor loaded."""
    import probes.helpers.engine_discovery as discovery

    kept = discovery.engine_processes
    discovery.engine_processes = lambda host: ()
    try:
        yield
    finally:
        discovery.engine_processes = kept


_UNSHARE = (("unshare", "--pid", "--fork", "--mount-proc", "--"),
            ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--"))


@functools.cache
def _unshare() -> tuple[str, ...] | None:
    for prefix in _UNSHARE:
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


def _alone(runner: Callable[[list[str], float, Path], "Run"]):
    """The runner, or for a new interpreter (which a patch of this process does not reach)
    the same run in a PID namespace of its own, where no engine process is seen; where
    namespaces are not allowed, the fork instead."""
    from tests import fuzz_runs

    if runner is not fuzz_runs.run_subprocess:
        return runner
    prefix = _unshare()
    if prefix is None:
        return fuzz_runs.run_forked

    def run(argv: list[str], bound_s: float, work: Path) -> "Run":
        t0 = time.perf_counter()
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "doctor.commands.cli", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, cwd=fuzz_runs.REPO,
                                env={**os.environ, "PYTHONPATH": str(fuzz_runs.REPO)})
        try:
            out, err = proc.communicate(timeout=bound_s)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            rc = None
        return fuzz_runs.Run(rc, out, err, time.perf_counter() - t0)
    return run


def _recorder(request: Request) -> bytes:
    return response(200, b"recorded\n")


def _arrived(recorders: tuple[RawServer, ...], key: str) -> list[str]:
    """Where the key went that it must not: the requests to the recording servers that
    carry it, as a Bearer token, as a Basic pair, anywhere in their bytes."""
    found = []
    for server in recorders:
        for request in server.requests:
            raw = request.raw.decode("latin-1")
            basic = request.headers.get("authorization", "").partition(" ")[2]
            try:
                decoded = base64.b64decode(basic + "==").decode("latin-1")
            except ValueError:
                decoded = ""
            if key in raw or key in decoded:
                found.append(f"{server.origin}{request.path[:40]}")
    return found


def try_endpoint(base: Path, work: Path, rng: random.Random, out: Outside, n: int,
                 bound_s: float, runner: Callable[[list[str], float, Path], "Run"],
                 evaluate_share: float) -> list["Tried"]:
    """One impostor, one live scan of it, the checks."""
    from tests.fuzz_runs import Tried, check

    key = out.secret
    kind = rng.choice(KINDS)
    prefix = "/llm" if rng.random() < 0.1 else ""
    level = "standard" if rng.random() < 0.2 else "quick"
    recorders = (RawServer(_recorder), RawServer(_recorder, host="127.0.0.2"))
    # its own generator: the servers' threads draw from it while the scan runs
    impostor = Impostor(random.Random(rng.getrandbits(64)), kind, prefix, recorders)
    try:
        port = impostor.server.port
        url = rng.choice([f"http://:{key}@127.0.0.1:{port}", f"http://fuzz:{key}@127.0.0.1:{port}",
                          f"http://{key}@127.0.0.1:{port}", f"http://:{key}@127.0.0.1:{port}/metrics",
                          f"127.0.0.1:{port}" if rng.random() < 0.1 else f"http://:{key}@127.0.0.1:{port}"])
        url += prefix if "/metrics" not in url else ""
        argv = ["scan", "--level", level, "--endpoint", url, "--format", "json", "--no-progress"]
        out.reset()
        with _only_the_impostor():
            run = _alone(runner)(argv, bound_s, work)
        verdict = check(run, out, True, NEEDLES, out.touched())
        leaked = _arrived(recorders, key)
        if leaked:
            verdict.add("found-secret")
        what = (f"[key sent to {leaked[0]}] " if leaked else "") + f"{level} {impostor.describe()}"
        return [Tried("endpoint", what, [a.replace(key, "KEY") for a in argv], run, verdict)]
    finally:
        impostor.server.close()
        for server in recorders:
            server.close()
