"""The real llama.cpp llama-server (tests/llama_server.py), started cold: found from its
command line and socket, warm-up measured, its /metrics read, its output sampled, and a
bounded load sweep with its knee."""

from __future__ import annotations

import json
import threading
import time

import pytest

from doctor.workload import knee
from doctor.seam.live import LiveHost
from doctor.workload.loadgen import RequestTarget, Workload, run_requests
from doctor.model import ScanOptions
from probes.engine import (
    exposure as engine_exposure,
    load as engine_load,
    output as engine_output,
    warmup as engine_warmup,
)
from probes.helpers.engine_targets import Target, targets
from tests.llama_server import SLOTS, llama_server, private_llama_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


def _age_s(pid: int) -> float:
    """The process's age on the clock engine.warmup reads (/proc/uptime less its start)."""
    from probes.helpers.engine_startup import USER_HZ

    with open(f"/proc/{pid}/stat") as stat, open("/proc/uptime") as uptime:
        start = int(stat.read().rsplit(")", 1)[-1].split()[19])
        return float(uptime.read().split()[0]) - start / USER_HZ


def test_warmup_of_a_cold_server(private_llama_server):  # noqa: F811
    # A server of its own: cold whatever ran before, and sent nothing by any other test.
    # A larger budget than a scan's: on a shared 2-core machine a request can take seconds.
    server = private_llama_server
    target = Target(server.base_url, server.pid, "llama.cpp", None, False, ())
    before = _age_s(server.pid)
    endpoint = engine_warmup._measure_one(LiveHost(), target, budget_s=120)
    after = _age_s(server.pid)
    assert endpoint.errors == 0, endpoint.first_error
    assert endpoint.rounds >= 2 and endpoint.first_ttft_ms > 0 and endpoint.steady_ttft_ms > 0
    assert endpoint.first_itl_ms > 0 and endpoint.steady_itl_ms > 0
    assert endpoint.generated_tokens_before == 0  # cold: nothing generated before
    # its uptime is the process's age when measured: between the ages read around it
    # (the probe rounds to 0.1 s)
    assert endpoint.pid == server.pid
    assert before - 0.05 <= endpoint.uptime_s <= after + 0.05, (before, endpoint.uptime_s, after)


@pytest.fixture(scope="module")
def found(llama_server):  # noqa: F811
    """This server as discovery finds it (once: other engines on a shared machine may be
    slow to answer discovery's questions)."""
    return [t for t in targets(LiveHost(), ScanOptions()) if t.pid == llama_server.pid]


def test_found_from_its_process_and_socket(llama_server, found):  # noqa: F811
    assert len(found) == 1
    assert found[0].kind == "llama.cpp" and found[0].base_url == llama_server.base_url
    assert found[0].listen == (f"127.0.0.1:{llama_server.port}",)


def test_live_running_requests_from_its_metrics(llama_server, found):  # noqa: F811
    busy = threading.Thread(target=run_requests, daemon=True, args=(
        RequestTarget(llama_server.base_url), Workload(16, 96, timeout_s=90), 2, 2, 90))
    busy.start()
    # 96 tokens each: longer than engine.metrics' two scrapes 3 s apart
    deadline, seen = time.monotonic() + 30, 0
    while time.monotonic() < deadline and not seen:
        running, _, source, error = engine_load.live_load(LiveHost(), ScanOptions(), found[0])
        assert source == "/metrics", error
        seen = running or 0
        time.sleep(0.2)
    busy.join(120)
    assert 1 <= seen <= SLOTS


def test_loopback_server_is_not_exposed(llama_server, found):  # noqa: F811
    (address,) = found[0].listen
    listener = engine_exposure.judge(LiveHost(), found[0], address)
    assert listener.non_loopback is False and listener.status == 200


def test_output_is_sampled(llama_server):  # noqa: F811
    found = engine_output.sample_endpoint(RequestTarget(llama_server.base_url), budget_s=180)
    assert [s.error for s in found.samples] == [None] * 3
    # the model samples its answers (no temperature is sent), so how long each is, is its
    # own: one came back in 10 words, and one in a fresh-clone CI run in none (its first
    # token the end). Each answer is read (its words are those of its text), and judged
    # exactly when it is long enough to have 4-grams to compare, never guessed from less.
    assert all((s.words == 0) == (s.excerpt.strip() == "") for s in found.samples), found.samples
    assert any(s.words > 0 for s in found.samples), found.samples
    for sample in found.samples:
        short = sample.words < 2 * engine_output.NGRAM
        assert (sample.repeated_ngram_share is None) == short, sample
    assert found.judged == sum(s.repeated_ngram_share is not None for s in found.samples)
    assert found.output_tokens_received >= found.requests == 3


def test_bounded_sweep_and_its_knee(llama_server):  # noqa: F811
    """Concurrency 1 and 2 with 48-token prompts (the full sweep against guidellm's is
    benchmarks/knee_vs_guidellm.py: benchmarks are not timed tests); the prompt length the
    server counted, the cache it reported, and no knee from two levels."""
    result = knee.sweep(RequestTarget(llama_server.base_url), Workload(48, 8, timeout_s=60),
                        [1, 2], max_requests=100, max_seconds=90, seconds_per_level=1,
                        min_requests=4)
    levels = result.levels
    assert levels and levels[0].concurrency == 1, result.stopped
    assert all(lv.errors == 0 for lv in levels), [lv.first_error for lv in levels]
    judged = [lv for lv in levels if lv.unusable is None]
    assert judged, [lv.unusable for lv in levels]
    assert all(lv.ttft.p50_ms and lv.itl_pooled.p95_ms and lv.itl_per_request_mean.p50_ms
               and lv.e2e.p99_ms for lv in judged)
    assert 30 <= levels[0].prompt_tokens_mean <= 70  # ~1 token per word for Gemma
    assert all(lv.cached_share is not None and lv.cached_share < 0.10 for lv in judged)
    found = knee.find_knee(levels)
    assert found.status == "not-reached" and found.recommended_concurrency is None


def test_a_second_run_is_not_served_from_the_prompt_cache(llama_server, cli):  # noqa: F811
    """The issue: the second run's prompts were the first run's, and llama.cpp's cache
    served 131 of 136 tokens of each. Two runs now stay under 10%; the same --seed again
    shows that the share is read from what the server says."""
    args = ("load", "--endpoint", llama_server.base_url, "--prompt-tokens", "64",
            "--output-tokens", "2", "--levels", "1", "--seconds-per-level", "1",
            "--min-requests", "3", "--max-seconds", "90", "--no-save", "--format", "json")
    runs = []
    for _ in range(2):
        result = cli(*args, timeout=150)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout))
    cache = runs[1]["prompt_cache"]
    assert cache["reported"] and cache["share"] < 0.10, cache
    again = cli(*args, "--seed", str(runs[1]["settings"]["seed"]), timeout=150)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["prompt_cache"]["share"] > 0.5
