"""engine.load, engine.exposure and engine.output against local streaming servers and planted records."""

from __future__ import annotations

import json
import threading

import pytest

from doctor.workload import knee
from doctor.rules.evaluate import evaluate
from doctor.seam.host import HttpResponse
from doctor.seam.live import LiveHost
from doctor.workload.loadgen import RequestTarget, Workload, run_requests
from doctor.model import Level, ProbeResult, ScanOptions
from doctor.seam.recorded import RecordedHost, RecordWriter
from probes.engine import exposure as engine_exposure, load as engine_load, output as engine_output
from probes.helpers.engine_targets import Target
from tests.builtin_rules import builtin_rules
from tests.stream_server import Behaviour, StreamServer, only_named_endpoints

RULES = {r.id: r for r in builtin_rules()}


def _findings(rule_id, probe_name, record):
    found, errors = evaluate([RULES[rule_id]], [ProbeResult(probe_name, "ok", 0.1, None, record)])
    assert errors == []
    return found


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch):
    only_named_endpoints(monkeypatch)


@pytest.fixture
def servers():
    started = []

    def start(**kw):
        started.append(StreamServer(Behaviour(**kw)).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def _busy(server, concurrency, seconds=3.0):
    """Keep ``concurrency`` slow requests (8 s) in flight on ``server`` in the background:
    longer than engine.metrics' two scrapes 3 s apart."""
    thread = threading.Thread(target=run_requests, daemon=True, args=(
        RequestTarget(server.base_url), Workload(8, 80, timeout_s=20), concurrency, concurrency,
        seconds))
    thread.start()
    return thread


def _wait_running(server, n):
    import time

    deadline = time.monotonic() + 5
    while server.running < n and time.monotonic() < deadline:
        time.sleep(0.02)


def _levels(*points):
    """Levels of a sweep, (concurrency, tokens/s, e2e s) each, as level_stats makes them."""
    from doctor.workload.levels import level_stats
    from doctor.workload.loadgen import LevelRun, RequestResult

    made = []
    for concurrency, tokens_per_s, e2e in points:
        stamps = tuple(i / tokens_per_s for i in range(int(tokens_per_s * 10)))
        one = RequestResult(True, 200, None, 0.0, 0.01, e2e, len(stamps), 8, (), "", None,
                            stamps)
        done = RequestResult(True, 200, None, 0.0, 0.01, e2e, 2, 8, (), "", None, (0.0, 0.01))
        made.append(level_stats(LevelRun(concurrency, (one,) + (done,) * 11, 10.0, "enough"),
                                12))
    return made


@pytest.mark.slow
def test_live_concurrency_past_a_saved_knee(servers, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = servers(token_s=0.1)
    levels = _levels((1, 10, 0.1), (2, 19, 0.1), (4, 19.5, 0.3), (8, 19, 0.6))
    found = knee.find_knee(levels)
    assert found.concurrency == 2, found
    knee.save_sweep(knee.sweep_json(server.base_url.replace("127.0.0.1", "localhost"), {},
                                    levels, found, "2026-11-29T10:00:00Z"))
    busy = _busy(server, 5)
    _wait_running(server, 5)
    record = engine_load.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    busy.join()
    (engine,) = record.engines
    assert (engine.running, engine.source, engine.knee_concurrency) == (5, "/metrics", 2)
    assert engine.model == "stub-model"
    (finding,) = _findings("past-throughput-knee", "engine.load", record)
    assert finding.severity.label == "critical" and finding.evidence["offered"] == 5


@pytest.mark.slow
def test_a_knee_saved_by_the_old_method_is_not_used(servers, monkeypatch, tmp_path):
    """Schema llm-doctor/load/1 took its knee from the client's cut-off requests counted as
    errors (the issue's "-np 1" at load average 7): the rule must not judge from it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = servers()
    path = knee.knee_path(server.base_url)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": "llm-doctor/load/1", "measured_at": "2026-11-29",
                                "knee": {"status": "found", "concurrency": 1}}))
    record = engine_load.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    (engine,) = record.engines
    assert (engine.knee_status, engine.knee_concurrency) == ("outdated", None)
    assert "run llm-doctor load again" in engine_load.summary(record)
    assert _findings("past-throughput-knee", "engine.load", record) == []
    for bad in ({"schema": knee.SCHEMA, "knee": {"status": "found", "concurrency": "4"}},
                {"schema": knee.SCHEMA, "knee": []}, [1, 2]):
        path.write_text(json.dumps(bad))
        assert engine_load.saved_knee(LiveHost(), server.base_url)[:2] == (None, "unreadable")


@pytest.mark.slow
def test_no_saved_knee_stays_silent(servers, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = servers()
    record = engine_load.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    assert record.engines[0].knee_status is None and record.engines[0].running == 0
    assert record.engines[0].knee_file.startswith(str(tmp_path))
    assert _findings("past-throughput-knee", "engine.load", record) == []


def _working(server, concurrency, seconds):
    """Requests on ``server`` through ``seconds``: its token counter moves through
    engine.metrics' window."""
    thread = threading.Thread(target=run_requests, daemon=True, args=(
        RequestTarget(server.base_url), Workload(8, 40, timeout_s=20), concurrency, concurrency,
        seconds))
    thread.start()
    return thread


@pytest.mark.slow
def test_declared_replicas_with_uneven_work_over_the_window(servers):
    busy_one, idle_one = servers(token_s=0.01), servers(token_s=0.01)
    busy = _working(busy_one, 12, 12.0)  # 1,200 tokens/s at most, the scrapes 5 s apart
    _wait_running(busy_one, 6)
    urls = (busy_one.base_url, idle_one.base_url)
    record = engine_load.probe(LiveHost(), ScanOptions(level=Level.FULL, endpoints=urls,
                                                       replicas=(urls,)))
    busy.join()
    (group,) = record.models
    assert group.replicas == 2 and group.measure == "tokens" and group.served_min == 0
    assert group.served_max >= 256 and group.members == tuple(sorted(urls))
    (finding,) = _findings("multi-gpu-load-skew", "engine.load", record)
    assert finding.evidence["busiest"] == busy_one.base_url


@pytest.mark.slow
def test_two_servers_of_one_model_not_declared_replicas_are_no_group(servers):
    """Issue 28 §7: the same model on two endpoints, load on one: independent servers, not
    replicas behind a bad balancer. Before: grouped by model and judged on one snapshot."""
    busy_one, idle_one = servers(token_s=0.1), servers(token_s=0.1)
    busy = _busy(busy_one, 6)
    _wait_running(busy_one, 6)
    record = engine_load.probe(LiveHost(), ScanOptions(
        level=Level.QUICK, endpoints=(busy_one.base_url, idle_one.base_url)))
    busy.join()
    assert record.models == ()
    assert record.engines[0].running == 6 or record.engines[1].running == 6


@pytest.mark.slow
def test_even_replicas_stay_silent(servers):
    a, b = servers(), servers()
    urls = (a.base_url, b.base_url)
    record = engine_load.probe(LiveHost(), ScanOptions(level=Level.QUICK, endpoints=urls,
                                                       replicas=(urls,)))
    assert len(record.models) == 1 and _findings("multi-gpu-load-skew", "engine.load", record) == []


def _target(server, address, api_key_set=False):
    return Target(server.base_url, 1234, "vllm", None, api_key_set, (address,))


def test_wildcard_listener_answering_without_a_key(servers):
    """0.0.0.0:PORT is asked over loopback; the stub answers /v1/models without a key."""
    server = servers()
    exposure = engine_exposure.judge(LiveHost(), _target(server, f"0.0.0.0:{server.port}"),
                                     f"0.0.0.0:{server.port}")
    assert exposure.checked_url == f"http://127.0.0.1:{server.port}/v1/models"
    assert exposure.non_loopback and exposure.answered_without_auth and exposure.status == 200
    record = engine_exposure.ExposureRecord((exposure,), 1)
    (finding,) = _findings("endpoint-unauthenticated", "engine.exposure", record)
    assert finding.severity.label == "critical"


def test_wildcard_listener_asking_for_a_key_stays_silent(servers):
    server = servers(api_key="sk-x")
    exposure = engine_exposure.judge(LiveHost(), _target(server, f"[::]:{server.port}", True),
                                     f"0.0.0.0:{server.port}")
    assert exposure.status == 401 and exposure.answered_without_auth is False
    assert _findings("endpoint-unauthenticated", "engine.exposure",
                     engine_exposure.ExposureRecord((exposure,), 1)) == []


def test_loopback_only_engine_is_not_exposed(servers):
    server = servers()
    record = engine_exposure.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    assert record.non_loopback_count == 0 and record.listeners[0].answered_without_auth
    assert _findings("endpoint-unauthenticated", "engine.exposure", record) == []


def test_planted_non_loopback_address_from_a_recorded_host(tmp_path):
    """A capture of a host whose engine listens on 10.0.0.5:8000 only (no traffic sent)."""
    writer = RecordWriter(tmp_path)
    writer.http("http://10.0.0.5:8000/v1/models",
                HttpResponse("http://10.0.0.5:8000/v1/models", 200, "application/json",
                             json.dumps({"data": [{"id": "llama"}]}), 0.01))
    writer.save({"level": "quick"})
    target = Target("http://10.0.0.5:8000", 77, "vllm", "llama", False, ("10.0.0.5:8000",))
    exposure = engine_exposure.judge(RecordedHost(tmp_path), target, "10.0.0.5:8000")
    assert exposure.non_loopback and exposure.answered_without_auth
    assert _findings("endpoint-unauthenticated", "engine.exposure",
                     engine_exposure.ExposureRecord((exposure,), 1))


def test_output_that_loops_is_found(servers):
    server = servers(tokens=96, text=[" I", " am", " here", "."], honour_max_tokens=False)
    record = engine_output.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    (endpoint,) = record.endpoints
    assert endpoint.judged == 3 and endpoint.worst_share > 0.9
    (finding,) = _findings("output-repetition", "engine.output", record)
    assert "I am here" in finding.evidence["excerpt"]


def test_varied_output_stays_silent(servers):
    words = [f" w{i}" for i in range(200)]
    server = servers(tokens=96, text=words, honour_max_tokens=False)
    record = engine_output.probe(LiveHost(), ScanOptions(endpoints=(server.base_url,)))
    assert record.endpoints[0].worst_share == 0.0
    assert _findings("output-repetition", "engine.output", record) == []


def test_repeated_ngram_share():
    assert engine_output.repeated_ngram_share("one two") is None
    assert engine_output.repeated_ngram_share("a b c d e f g h i j") == 0.0
    assert engine_output.repeated_ngram_share("go " * 40) > 0.9


def test_an_engine_asking_for_a_key_is_not_sent_completions(servers, monkeypatch):
    """The active probes skip it with the way to give the key, instead of measuring 401s."""
    from doctor.model import Skip
    from probes.helpers import engine_targets
    from probes.engine import warmup as engine_warmup

    server = servers(api_key="sk-x")
    keyed = Target(server.base_url, None, "vllm", None, True, ())
    monkeypatch.setattr(engine_targets, "targets", lambda host, options, inputs=None: (keyed,))
    with pytest.raises(Skip, match="http://:KEY@HOST:PORT"):
        engine_warmup.probe(LiveHost(), ScanOptions())
    with pytest.raises(Skip, match="asks for an API key"):
        engine_output.probe(LiveHost(), ScanOptions())
    given = Target(server.base_url, None, "vllm", None, True, (), api_key="sk-x")
    monkeypatch.setattr(engine_targets, "targets", lambda host, options, inputs=None: (given,))
    (endpoint,) = engine_warmup.probe(LiveHost(), ScanOptions()).endpoints
    assert endpoint.errors == 0


@pytest.mark.slow
def test_capture_then_replay_gives_the_same_records(servers, tmp_path, monkeypatch):
    """What a capture keeps of the active probes is what a replay returns, unchanged."""
    from doctor.seam.recorded import RecordingHost
    from probes.engine import warmup as engine_warmup

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    server = servers(prefill_s=0.005, cold_requests=1, cold_extra_s=0.3)
    options = ScanOptions(endpoints=(server.base_url,))
    # in the scan's order: the read-only probes, then those that send (runner: exclusive last)
    probes = (engine_load.probe, engine_exposure.probe, engine_warmup.probe, engine_output.probe)
    recording = RecordingHost(LiveHost(), tmp_path / "cap")
    live = [probe(recording, options) for probe in probes]
    recording.save({"level": "standard"})
    server.stop()  # the replay must not need the engine
    replay = [probe(RecordedHost(tmp_path / "cap"), options) for probe in probes]
    assert replay == live
    assert live[2].endpoints[0].first_ttft_ms >= 300
