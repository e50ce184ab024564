"""engine.warmup and `llm-doctor warmup`, against the local streaming server made cold."""

from __future__ import annotations

import json
import os

import pytest

from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.model import ProbeResult, ScanOptions, Skip
from probes.engine import warmup as engine_warmup
from tests.builtin_rules import builtin_rules
from tests.stream_server import Behaviour, StreamServer, only_named_endpoints

RULE = [r for r in builtin_rules() if r.id == "engine-not-warmed-up"]


def _served(behaviour):
    server = StreamServer(behaviour).start()
    return server


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch):
    only_named_endpoints(monkeypatch)


@pytest.fixture
def cold():
    """An engine whose first two requests wait 0.6 s more for their first token."""
    server = _served(Behaviour(prefill_s=0.01, token_s=0.002, cold_requests=2,
                               cold_extra_s=0.6))
    yield server
    server.stop()


@pytest.fixture
def warm():
    server = _served(Behaviour(prefill_s=0.01, token_s=0.002))
    yield server
    server.stop()


def _probe(server):
    record = engine_warmup.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    return record, evaluate(RULE, [ProbeResult("engine.warmup", "ok", 1.0, None, record)])[0]


@pytest.mark.slow
def test_a_cold_engine_is_found_and_judged(cold):
    record, findings = _probe(cold)
    (endpoint,) = record.endpoints
    assert endpoint.rounds == engine_warmup.MAX_ROUNDS and endpoint.errors == 0
    assert endpoint.first_ttft_ms >= 600 and endpoint.steady_ttft_ms < 200
    assert endpoint.ttft_ratio >= 3
    assert endpoint.first_itl_ms is not None and endpoint.steady_itl_ms is not None
    assert [f.rule for f in findings] == ["engine-not-warmed-up"]
    assert findings[0].evidence["endpoint"] == cold.base_url


@pytest.mark.slow
def test_a_warm_engine_stays_silent(warm):
    record, findings = _probe(warm)
    assert record.endpoints[0].ttft_ratio < 3 and findings == []


def test_no_endpoint_is_a_skip_with_its_reason():
    with pytest.raises(Skip, match="--endpoint"):
        engine_warmup.probe(LiveHost(), ScanOptions())


def test_uptime_from_proc():
    uptime = engine_warmup.uptime_of(LiveHost(), os.getpid())
    assert uptime is not None and 0 <= uptime < 24 * 3600


@pytest.mark.slow
def test_warmup_command_stops_once_ttft_settles(cold, cli):
    result = cli("warmup", "--endpoint", cold.base_url, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["settled"] and 2 <= summary["rounds"] < 8
    assert summary["first_ttft_ms"] > summary["steady_ttft_ms"]
    assert "round 1: median TTFT" in result.stderr


def test_warmup_command_names_an_endpoint_that_does_not_answer(cli):
    result = cli("warmup", "--endpoint", "http://127.0.0.1:9", "--max-seconds", "3")
    assert result.returncode == 3 and "http://127.0.0.1:9: every request failed" in result.stderr


@pytest.mark.slow
def test_the_tokens_the_engine_had_generated_are_read_before_the_probe_sends(cold):
    first, _ = _probe(cold)
    assert first.endpoints[0].generated_tokens_before == 0.0  # a fresh engine: nothing served
    sent = cold.generated
    assert sent == first.endpoints[0].requests * engine_warmup.OUTPUT_TOKENS
    second, _ = _probe(cold)
    assert second.endpoints[0].generated_tokens_before == float(sent)  # what it said before the second


@pytest.mark.slow
def test_an_engine_that_says_it_is_warm_is_not_called_cold(cold):
    """Up for minutes (its uptime) with traffic served (its own counter): a slow first
    request is not a cold engine (issue 14). The record is what the probe measured, with
    the engine's uptime and counter as an engine up 4 minutes would give them."""
    import dataclasses

    record, findings = _probe(cold)
    assert [f.rule for f in findings] == ["engine-not-warmed-up"]
    warm = dataclasses.replace(record.endpoints[0], uptime_s=240.0, generated_tokens_before=52000.0)
    results = [ProbeResult("engine.warmup", "ok", 1.0, None, engine_warmup.WarmupRecord((warm,)))]
    assert evaluate(RULE, results)[0] == []
