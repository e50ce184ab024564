"""Fuzz kind ``engine-pages``: the values in an engine's real pages made hostile.

Each input is one engine (vLLM, SGLang, TGI, Triton + TensorRT-LLM, llama.cpp) served on
loopback from its recorded pages (tests/engine_pages). The pages keep their shape; what
changes is every figure the probes read: a share of the samples of each ``/metrics`` scrape
(gauges, counters, histogram buckets, ``_sum`` and ``_count``) and of the numbers in the
engine's JSON pages (``/v1/models``, ``/server_info``, ``/info``, ``/props``, ``/slots``)
becomes NaN, ±Inf, negative, 1e308, subnormal or 2**53 and past; ``vllm:cache_config_info``'s
labels (block size, blocks) become "NaN", "0", "1", "-16", "1e999"; and a counter may go
backwards between the two scrapes of one scan (the engine restarted: its second page counts
from a fraction of the first). tests/fuzz_endpoint.py breaks the pages' shapes and the wire;
this kind keeps both and goes after the numbers.

The scan is ``scan --level quick|standard --endpoint http://127.0.0.1:PORT --format json``,
live. Beyond tests/fuzz_runs.check (no traceback, hang, internal error, invalid JSON): no
rule error (``rule-error``) and no finding whose title says None, nan or inf
(``none-in-title``): a value that is no number is missing, with its reason.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.fuzz_endpoint import _alone, _only_the_impostor
from tests.fuzz_inputs import Outside
from tests.hostile_http import RawServer, Request, response

if TYPE_CHECKING:  # tests/fuzz_runs.py names this module's trier in TRIERS
    from tests.fuzz_runs import Run, Tried

PAGES = Path(__file__).resolve().parent / "engine_pages"
FOLDERS = {"vllm": ("vllm-v1-kv-pressure", "vllm-v1-calm", "vllm-v1-short-requests-big-blocks",
                    "vllm-v1-queue-at-max-num-seqs", "vllm-v1-spec-lora-thrash",
                    "vllm-v1-kv-nixl-offload"),  # NIXL and offload families (engine.kv_tiers)
           "sglang": ("sglang", "sglang-calm-page-1", "sglang-pd-transfer-failing"), "tgi": ("tgi",),
           "triton": ("triton-trtllm",), "llama.cpp": (None,)}
LLAMA = ("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {}\n"
         "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {}\n"
         "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {}\n"
         "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {}\n")
JSON: dict[str, dict[str, Any]] = {
    "vllm": {"/v1/models": {"object": "list", "data": [{
        "id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm",
        "root": "/models/qwen3-8b", "max_model_len": 32768}]}},
    "sglang": {"/server_info": {"model_path": "/models/llama-3.1-8b-instruct", "tp_size": 1,
                                "mem_fraction_static": 0.88, "max_running_requests": 64,
                                "chunked_prefill_size": 8192, "context_length": 131072,
                                "page_size": 1, "kv_cache_dtype": "auto",
                                "disable_cuda_graph": False, "max_total_num_tokens": 411136}},
    "tgi": {"/info": {"model_id": "meta-llama/Llama-3.1-8B-Instruct",
                      "max_concurrent_requests": 128, "max_input_tokens": 4095,
                      "max_total_tokens": 4096, "max_batch_prefill_tokens": 4096,
                      "version": "3.3.6"}},
    "triton": {},
    "llama.cpp": {"/props": {"total_slots": 4, "model_path": "/models/gemma.gguf",
                             "default_generation_settings": {"n_ctx": 4096}},
                  "/slots": [{"id": 0, "is_processing": True, "n_ctx": 4096},
                             {"id": 1, "is_processing": False, "n_ctx": 4096}]},
}
JSON["sglang"]["/get_server_info"] = JSON["sglang"]["/server_info"]
SAMPLE_VALUES = ("NaN", "+Inf", "-Inf", "-1", "-5000", "1e308", "-1e308", "1.7976931348623157e308",
                 "0", "-0", "5e-324", "9007199254740993", "1e18", "0.5", "2")
LABEL_VALUES = ("NaN", "0", "1", "-16", "1e999", "16.5", "+Inf", "9007199254740993", "256")
JSON_VALUES = (float("nan"), float("inf"), float("-inf"), -1, -4096, 0, 1, 1e308, 2**53 + 1,
               0.5, 1.5, -0.0)
# What a person reads never says these (tests/test_no_none.py says why)
NOT_A_NUMBER = re.compile(r"\bNone\b|(?<![\w-])(?:nan|NaN|inf|Infinity)(?![\w-])")


def _pages(kind: str, folder: str | None, rng: random.Random) -> tuple[str, str]:
    if folder is None:  # llama.cpp: the suite's real server writes these four
        first = [rng.randint(0, 4), rng.randint(0, 3), rng.randint(0, 10**5), rng.randint(0, 10**5)]
        second = [first[0], first[1], first[2] + rng.randint(0, 500), first[3] + rng.randint(0, 500)]
        return LLAMA.format(*first), LLAMA.format(*second)
    return tuple((PAGES / folder / f"metrics.{i}.txt").read_text() for i in (1, 2))  # type: ignore[return-value]


def hostile_page(text: str, rng: random.Random, share: float, done: list[str]) -> str:
    """The page with ``share`` of its sample values (and cache_config labels) hostile."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#") and rng.random() < share:
            head, _, _ = line.rpartition(" ")
            if head.startswith("vllm:cache_config_info") and rng.random() < 0.7:
                label = rng.choice(("block_size", "num_gpu_blocks"))
                line = re.sub(rf'{label}="[^"]*"', f'{label}="{rng.choice(LABEL_VALUES)}"', line)
                done.append(label)
            elif head:
                value = rng.choice(SAMPLE_VALUES)
                line = f"{head} {value}"
                done.append(value)
        out.append(line)
    return "\n".join(out) + "\n"


def restarted(first: str, second: str, rng: random.Random) -> str:
    """The second page as an engine that restarted between the scrapes writes it: each
    counter, bucket and count a fraction of the first page's (the gauges as they were)."""
    old = {}
    for line in first.splitlines():
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            old[head] = value
    factor = rng.choice((0.0, 0.01, 0.5, 0.99))
    out = []
    for line in second.splitlines():
        head, _, value = line.rpartition(" ")
        name = head.partition("{")[0]
        if (line and not line.startswith("#") and head in old
                and name.endswith(("_total", "_bucket", "_count", "_sum"))):
            try:
                line = f"{head} {float(old[head]) * factor!r}"
            except ValueError:
                pass
        out.append(line)
    return "\n".join(out) + "\n"


def hostile_json(doc: Any, rng: random.Random, share: float, done: list[str]) -> Any:
    """The document with ``share`` of its numbers (never its shape) hostile."""
    if isinstance(doc, dict):
        return {k: hostile_json(v, rng, share, done) for k, v in doc.items()}
    if isinstance(doc, list):
        return [hostile_json(v, rng, share, done) for v in doc]
    if isinstance(doc, (int, float)) and not isinstance(doc, bool) and rng.random() < share:
        value = rng.choice(JSON_VALUES)
        done.append(repr(value))
        return value
    return doc


class Engine:
    """One engine's pages for one input: two /metrics scrapes and its JSON pages."""

    def __init__(self, rng: random.Random) -> None:
        self.kind = rng.choice(tuple(FOLDERS))
        folder = rng.choice(FOLDERS[self.kind])
        share = rng.choice((0.05, 0.3, 1.0))
        self.done: list[str] = []
        first, second = _pages(self.kind, folder, rng)
        if rng.random() < 0.3:
            second = restarted(first, second, rng)
            self.done.append("restart")
        self.metrics = [hostile_page(page, rng, share, self.done) if rng.random() < 0.9 else page
                        for page in (first, second)]
        self.json = {path: json.dumps(hostile_json(doc, rng, share, self.done), allow_nan=True)
                     for path, doc in JSON[self.kind].items()}
        self.what = f"{folder or self.kind} share={share}"
        self.scrapes = 0
        self.server = RawServer(self.answer)

    def describe(self) -> str:
        seen = sorted(set(self.done))
        return f"{self.what} values={','.join(seen)[:120]}"

    def answer(self, request: Request) -> bytes:
        path = request.path.split("?")[0].rstrip("/")
        if path == "/metrics":
            page = self.metrics[min(self.scrapes, 1)]
            self.scrapes += 1
            return response(200, page.encode(), "Content-Type: text/plain; version=0.0.4")
        if path in self.json:
            return response(200, self.json[path].encode(), "Content-Type: application/json")
        if path == "/health":
            return response(200, b"", "Content-Type: application/json")
        return response(404, b'{"detail":"Not Found"}', "Content-Type: application/json")


def judged(stdout: str) -> tuple[list[str], list[str]]:
    """(rule errors, titles saying None/nan/inf) of a scan's JSON report."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return [], []  # fuzz_runs.check counts invalid JSON
    if not isinstance(data, dict):
        return [], []
    errors = [str(e) for e in data.get("rule_errors") or ()]
    titles = [str(f.get("title")) for f in data.get("findings") or () if isinstance(f, dict)]
    return errors, [t for t in titles if NOT_A_NUMBER.search(t)]


def try_engine_pages(base: Path, work: Path, rng: random.Random, out: Outside, n: int,
                     bound_s: float, runner: Callable[[list[str], float, Path], "Run"],
                     evaluate_share: float) -> list["Tried"]:
    """One engine with hostile values, one live scan of it, the checks."""
    from tests.fuzz_runs import Tried, check

    engine = Engine(random.Random(rng.getrandbits(64)))
    try:
        level = "standard" if rng.random() < 0.2 else "quick"
        argv = ["scan", "--level", level, "--endpoint", engine.server.origin, "--format", "json",
                "--no-progress"]
        out.reset()
        with _only_the_impostor():
            run = _alone(runner)(argv, bound_s, work)
        touched = out.touched()
        verdict = check(run, out, True, (), touched)
        errors, titles = judged(run.stdout) if run.rc in (0, 1, 2) else ([], [])
        if errors:
            verdict.add("rule-error")
        if titles:
            verdict.add("none-in-title")
        shown = "; ".join((errors + titles)[:1])[:160]
        what = (f"{level} {engine.describe()}" + (f" [{shown}]" if shown else "")
                + (f" [read outside: {', '.join(touched[:3])}]" if touched else ""))
        return [Tried("engine-pages", what, argv, run, verdict)]
    finally:
        engine.server.close()
