"""What a scan sends an engine (issue 14 §4): each probe that sends requests declares its
cost and keeps it, says so before its first request and what it sent after, skips an engine
serving requests unless --busy-ok, and --no-requests (or [scan] requests = false, or the
daemon unless [daemon] requests = true) sends none while the engine's pages are still read.
Against the loopback streaming server, which counts the requests and prompts it gets."""

from __future__ import annotations

import json
import time

import pytest

from doctor.commands.setup import load_daemon
from doctor.config import ConfigError
from doctor.daemon.scheduler import Scheduler
from doctor.model import NO_REQUESTS, Level, ProbeResult, ScanOptions, Skip
from doctor.runner import run_probes
from doctor.seam.live import LiveHost
from probes.engine import output as engine_output
from probes.engine import speed as engine_speed
from probes.engine import warmup as engine_warmup
from probes.registry import PROBES, by_name
from tests.stream_server import Behaviour, StreamServer, only_named_endpoints

COSTLY = ("engine.warmup", "engine.output", "engine.speed")


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch):
    only_named_endpoints(monkeypatch)


@pytest.fixture
def server():
    served = StreamServer(Behaviour(prefill_s=0.005, token_s=0.001)).start()
    yield served
    served.stop()


def _words(server: StreamServer) -> int:
    return sum(len(p.split()) for p in server.prompts)


def _options(server: StreamServer, lines: list | None = None, **kw) -> ScanOptions:
    def announce(line: str) -> None:  # what the server had been sent when the line came
        lines.append((line, server.requests))

    return ScanOptions(endpoints=(server.base_url,), announce=announce if lines is not None
                       else None, **kw)


def test_every_probe_that_sends_requests_declares_its_cost():
    costly = {s.name for s in PROBES if s.cost is not None}
    assert costly == set(COSTLY)
    for name in COSTLY:
        cost = by_name()[name].cost
        assert cost.requests > 0 and cost.prompt_tokens > 0 and cost.output_tokens > 0
        assert 0 < cost.seconds < by_name()[name].timeout_s


@pytest.mark.parametrize("module, name", [(engine_warmup, "engine.warmup"),
                                          (engine_output, "engine.output"),
                                          (engine_speed, "engine.speed")])
def test_what_is_sent_never_exceeds_the_declared_cost_and_is_reported(server, module, name):
    lines: list = []
    record = module.probe(LiveHost(), _options(server, lines))
    cost = module.COST
    assert 0 < server.requests <= cost.requests
    assert _words(server) <= cost.prompt_tokens  # the server counts a word as a token
    assert server.generated <= cost.output_tokens
    (sent,) = record.sent()  # what the report says was sent: the server's own counts
    assert (sent.requests, sent.prompt_tokens, sent.output_tokens) == (
        server.requests, _words(server), server.generated)
    assert 0 < sent.seconds <= cost.seconds
    assert f"sent {server.base_url} {server.requests} requests" in module.summary(record)
    # one plan line, told before the first request reached the server
    assert lines == [(f"{name} will send {server.base_url} {cost.text()} "
                      "(--no-requests to send none)", 0)]


@pytest.mark.slow
def test_warmup_stops_sending_at_its_time_bound(monkeypatch):
    slow = StreamServer(Behaviour(prefill_s=0.3, token_s=0.01)).start()  # ~0.45 s a request
    try:
        monkeypatch.setattr(engine_warmup, "BUDGET_S", 2.0)
        started = time.monotonic()
        record = engine_warmup.probe(LiveHost(), ScanOptions(endpoints=(slow.base_url,)))
        (sent,) = record.sent()
        assert time.monotonic() - started < 4.0 and sent.seconds <= 2.2
        assert sent.requests == slow.requests < engine_warmup.COST.requests
    finally:
        slow.stop()


def test_a_server_serving_requests_is_not_sent_to_and_busy_ok_measures_it(server):
    server.running += 2  # its /metrics now says llamacpp:requests_processing 2
    with pytest.raises(Skip) as skipped:
        engine_warmup.probe(LiveHost(), _options(server))
    assert str(skipped.value) == (f"{server.base_url}: the engine is serving 2 requests; "
                                  "--busy-ok to measure anyway")
    assert server.requests == 0
    lines: list = []
    record = engine_output.probe(LiveHost(), _options(server, lines, busy_ok=True))
    assert record.endpoints[0].requests == server.requests == engine_output.SAMPLES
    assert len(lines) == 1 and "it is serving 2 requests (--busy-ok)" in lines[0][0]


def test_an_engine_showing_no_count_is_sent_to_and_the_plan_line_says_so(server):
    behind = f"{server.base_url}/behind"  # /behind/metrics and /behind/slots: 404
    lines: list = []
    options = ScanOptions(endpoints=(behind,), announce=lambda line: lines.append(line))
    record = engine_output.probe(LiveHost(), options)
    assert record.endpoints[0].requests == server.requests == engine_output.SAMPLES
    (line,) = lines
    assert line.startswith(f"engine.output will send {behind} at most 3 requests")
    assert "shows no count of requests in flight" in line and "HTTP 404" in line


@pytest.mark.slow
def test_no_requests_skips_the_probes_that_send_and_still_reads_the_pages(server):
    chosen = tuple(s for s in PROBES if s.name in ("engine.discovery", "engine.metrics", *COSTLY))
    results = {r.name: r for r in run_probes(chosen, LiveHost(),
                                             _options(server, requests=False))}
    assert server.requests == 0
    for name in COSTLY:
        assert (results[name].status, results[name].reason) == ("skipped", NO_REQUESTS)
    (scraped,) = results["engine.metrics"].record.engines  # its /metrics was read
    assert scraped.endpoint == f"{server.base_url}/metrics"


def _scan_json(cli, server, tmp_path, *args):
    report = tmp_path / "scan.json"
    result = cli("scan", "--endpoint", server.base_url, "--format", "json", "-o", str(report),
                 "--no-progress", *args, private_pids=True, timeout=240)
    assert result.returncode in (0, 1, 2), result.stderr
    return {p["name"]: p for p in json.loads(report.read_text())["probes"]}, result.stderr


@pytest.mark.slow
def test_scan_no_requests_sends_none_and_reads_metrics(cli, server, tmp_path):
    probes, stderr = _scan_json(cli, server, tmp_path, "--no-requests")
    assert server.requests == 0
    assert all(probes[n]["status"] == "skipped" and "--no-requests" in probes[n]["reason"]
               for n in COSTLY)
    assert probes["engine.metrics"]["status"] == "ok"
    assert probes["engine.metrics"]["data"]["engines"][0]["requests_running"] == 0
    assert "will send" not in stderr and "no request was sent to an engine" in stderr


@pytest.mark.slow
def test_config_requests_false_sends_none(cli, server, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[scan]\nrequests = false\n")
    probes, _ = _scan_json(cli, server, tmp_path, "--config", str(config))
    assert server.requests == 0 and probes["engine.warmup"]["status"] == "skipped"


@pytest.mark.slow
def test_scan_says_what_it_will_send_and_what_it_sent(cli, server, tmp_path):
    probes, stderr = _scan_json(cli, server, tmp_path)
    warmup = probes["engine.warmup"]["data"]["endpoints"][0]
    senders = [probes[name]["data"]["endpoints"][0] for name in COSTLY]
    assert server.requests == sum(e["requests"] for e in senders)
    assert _words(server) == sum(e["prompt_tokens_sent"] for e in senders)
    assert server.generated == sum(e["output_tokens_received"] for e in senders)
    lines = stderr.splitlines()
    plan = lines.index(f"engine.warmup will send {server.base_url} "
                       f"{engine_warmup.COST.text()} (--no-requests to send none)")
    done = lines.index(f"engine.warmup sent {server.base_url} {warmup['requests']} requests, "
                       f"{warmup['prompt_tokens_sent']:,} prompt + "
                       f"{warmup['output_tokens_received']:,} output tokens in "
                       f"{warmup['sending_s']:.1f} s")
    assert plan < done


# machine: should the refusal regress, it would scan this machine (tests/tiers.py)
@pytest.mark.machine
def test_a_config_requests_that_is_not_a_boolean_is_exit_3(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[scan]\nrequests = \"no\"\n")
    result = cli("scan", "--config", str(config), "--level", "quick")
    assert result.returncode == 3 and f"{config}:2: scan.requests" in result.stderr
    assert "must be true or false" in result.stderr and "Traceback" not in result.stderr


def _daemon_warmup(tmp_path, server, body: str) -> ProbeResult:
    """engine.warmup as the daemon's scheduler runs it at start, with this config."""
    config = tmp_path / "c.toml"
    config.write_text(body)
    loaded = load_daemon(str(config), (), {"endpoints": (server.base_url,)})
    specs = tuple(s for s in PROBES if s.name in ("engine.discovery", "engine.warmup"))
    scheduler = Scheduler(specs, LiveHost(), loaded.options, 60.0, 3600.0,
                          loaded.settings.kernels_while_serving)
    scheduler.start_due(time.monotonic(), serving=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        results = scheduler.collect(time.monotonic())
        results += scheduler.start_kernels(time.monotonic(), serving=True).results
        for result in results:
            if result.name == "engine.warmup":
                return result
        time.sleep(0.05)
    raise AssertionError("the daemon never ran engine.warmup")


@pytest.mark.slow
def test_the_daemon_sends_no_request_unless_configured_to(server, tmp_path):
    # kernels_while_serving: the measurements run beside a serving engine, yet sending
    # completions to it is a separate choice, off even where [scan] sends them
    quiet = _daemon_warmup(tmp_path, server, "[scan]\nrequests = true\n"
                           "[daemon]\nkernels_while_serving = true\n")
    assert (quiet.status, quiet.reason, server.requests) == ("skipped", NO_REQUESTS, 0)
    sent = _daemon_warmup(tmp_path, server, "[daemon]\nkernels_while_serving = true\n"
                          "requests = true\n")
    assert sent.status == "ok" and server.requests == sent.record.endpoints[0].requests > 0


def test_a_daemon_requests_that_is_not_a_boolean_names_its_key(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[daemon]\nrequests = 1\n")
    with pytest.raises(ConfigError, match="daemon.requests = 1: must be true or false"):
        load_daemon(str(config), (), {})


@pytest.mark.slow
def test_quick_sends_nothing(server):
    run_probes(PROBES, LiveHost(), _options(server, level=Level.QUICK))
    assert server.requests == 0


@pytest.mark.parametrize("running, deferred", [("NaN", "0"), ("-3", "0"), ("1e308", "1e308"),
                                               ("+Inf", "0"), ("1e999", "0")])
def test_a_count_that_is_not_one_is_no_count(running, deferred):
    from probes.helpers.engine_requests import in_flight
    from probes.helpers.engine_targets import Target
    from tests.hostile_http import RawServer, response

    page = (f"llamacpp:requests_processing {running}\n"
            f"llamacpp:requests_deferred {deferred}\n").encode()
    with RawServer(lambda r: response(200, page) if r.path == "/metrics"
                   else response(404, b"")) as raw:
        found = in_flight(LiveHost(), Target(raw.origin, None, "llama.cpp", None, False, ()))
    assert found.requests is None and "/slots: HTTP 404" in found.source
