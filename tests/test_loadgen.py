"""The load generator and the knee, against the local streaming server (tests/stream_server.py)."""

from __future__ import annotations

import json
import socket

import pytest

from doctor.workload import knee
from doctor.workload.knee import LevelStats, Percentiles, find_knee, level_stats, percentiles
from doctor.workload.loadgen import Endpoint, LoadError, Workload, make_prompt, run_requests
from tests.stream_server import Behaviour, StreamServer


@pytest.fixture
def server(request):
    behaviour = getattr(request, "param", None) or Behaviour()
    srv = StreamServer(behaviour).start()
    yield srv
    srv.stop()


WORK = Workload(prompt_tokens=16, output_tokens=5, timeout_s=10)


def test_streams_count_tokens_and_gaps(server):
    results = run_requests(Endpoint(server.base_url), WORK, 2, 6, 10)
    assert len(results) == 6 and all(r.ok for r in results)
    assert {r.output_tokens for r in results} == {5}
    assert all(len(r.itl_s) == 4 and r.ttft_s is not None for r in results)
    assert results[0].text == " word" * 5
    assert results[0].prompt_tokens == 7  # from the stream's usage event


@pytest.mark.parametrize("server", [Behaviour(text=[" a", " b"])], indirect=True)
def test_chat_api_reads_delta_content(server):
    (result,) = run_requests(Endpoint(server.base_url, api="chat"), WORK, 1, 1, 10)
    assert result.ok and result.text == " a b a b a"


@pytest.mark.parametrize("server", [Behaviour(close_after=True)], indirect=True)
def test_server_closing_kept_alive_connection_is_reconnected(server):
    """llama-server closes after every stream without a Connection: close header."""
    results = run_requests(Endpoint(server.base_url), WORK, 1, 4, 10)
    assert [r.ok for r in results] == [True] * 4, [r.error for r in results]


@pytest.mark.parametrize("server", [Behaviour(api_key="sk-test")], indirect=True)
def test_refused_credentials_are_errors_and_a_key_is_sent(server):
    (refused,) = run_requests(Endpoint(server.base_url), WORK, 1, 1, 10)
    assert not refused.ok and refused.status == 401 and "401" in refused.error
    (allowed,) = run_requests(Endpoint(server.base_url, api_key="sk-test"), WORK, 1, 1, 10)
    assert allowed.ok


@pytest.mark.parametrize("server", [Behaviour(prefill_s=5.0)], indirect=True)
def test_a_request_is_bounded_by_its_timeout(server):
    (result,) = run_requests(Endpoint(server.base_url), Workload(16, 5, timeout_s=0.3), 1, 1, 10)
    assert not result.ok and "0.3 s" in result.error and result.e2e_s < 2


def test_refused_connection_is_an_error_not_an_exception():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    (result,) = run_requests(Endpoint(f"http://127.0.0.1:{port}"), WORK, 1, 1, 5)
    assert not result.ok and result.status == 0 and result.error


def test_bad_url_names_the_endpoint():
    with pytest.raises(LoadError, match="ftp://x"):
        run_requests(Endpoint("ftp://x"), WORK, 1, 1, 1)


def test_runs_are_bounded_in_count_and_time(server):
    assert len(run_requests(Endpoint(server.base_url), WORK, 4, 10, 30)) == 10
    slow = StreamServer(Behaviour(token_s=0.05)).start()
    try:
        results = run_requests(Endpoint(slow.base_url), WORK, 2, 10**6, 0.5)
    finally:
        slow.stop()
    assert 0 < len(results) <= 2 * 3  # 0.25 s per request: no request starts after 0.5 s


def test_prompts_never_share_a_prefix():
    a, b = make_prompt(64, 1), make_prompt(64, 2)
    assert a.split()[:2] != b.split()[:2]
    assert 55 <= len(a.split()) <= 70


def test_percentiles_nearest_rank():
    p = percentiles([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert (p.p50_ms, p.p95_ms, p.p99_ms) == (50.0, 95.0, 99.0)
    assert percentiles([]) == Percentiles(None, None, None)


def _level(c, tps, p95):
    pct = Percentiles(p95 / 2, p95, p95)
    return LevelStats(c, 10, 0, 0.0, 1.0, tps / 10, tps, None, pct, pct, pct, None)


def test_knee_is_where_throughput_stops_rising_and_latency_grows():
    levels = [_level(1, 100, 100), _level(2, 190, 105), _level(4, 350, 115),
              _level(8, 370, 220), _level(16, 372, 450)]
    found = find_knee(levels)
    # 4 already gives 94% of the best throughput; at 8 the p95 latency doubles for 6% more
    assert (found.status, found.concurrency, found.recommended_max_num_seqs) == ("found", 4, 4)
    assert "115" in found.explanation and "220" in found.explanation


def test_a_plateau_without_latency_growth_is_not_a_knee():
    levels = [_level(1, 100, 100), _level(2, 200, 100), _level(4, 210, 105)]
    assert find_knee(levels).status == "not-reached"


def test_knee_not_reached_while_throughput_rises():
    levels = [_level(1, 100, 100), _level(2, 200, 100), _level(4, 400, 110)]
    found = find_knee(levels)
    assert found.status == "not-reached" and found.concurrency == 4
    assert "--max-concurrency" in found.explanation


def test_knee_needs_usable_levels():
    bad = LevelStats(1, 4, 4, 1.0, 1.0, 0, 0, None, *(Percentiles(None, None, None),) * 3, "x")
    assert find_knee([bad]).status == "no-data"


@pytest.mark.parametrize("server", [Behaviour(slots=4, prefill_s=0.02, token_s=0.01)],
                         indirect=True)
def test_sweep_finds_the_slot_limit_as_the_knee(server):
    """An engine decoding 4 sequences at once: throughput doubles to 4, then only queues."""
    levels = knee.sweep(Endpoint(server.base_url), Workload(16, 8, timeout_s=10), 32, 2000, 20)
    found = find_knee(levels)
    assert found.status == "found" and found.concurrency == 4, [
        (lv.concurrency, lv.output_tokens_per_s, lv.e2e.p95_ms) for lv in levels]
    assert levels[-1].concurrency == 8  # it stopped once the knee was confirmed


def test_level_stats_count_errors():
    from doctor.workload.loadgen import RequestResult

    ok = RequestResult(True, 200, None, 0.0, 0.01, 0.1, 5, 7, (0.02,) * 4, "x")
    bad = RequestResult(False, 500, "HTTP 500", 0.0, None, 0.05, 0, None, (), "")
    stats = level_stats(2, [ok, ok, bad])
    assert stats.errors == 1 and stats.error_rate == pytest.approx(0.3333, abs=1e-3)
    assert stats.first_error == "HTTP 500" and stats.ttft.p50_ms == 10.0


def test_load_command_saves_the_knee_where_the_rule_reads_it(server, cli, tmp_path):
    result = cli("load", "--endpoint", server.base_url + "/", "--prompt-tokens", "16",
                 "--output-tokens", "4", "--max-concurrency", "2", "--max-seconds", "6",
                 "--format", "json", "-o", str(tmp_path / "out.json"),
                 env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    assert [lv["concurrency"] for lv in document["levels"]] == [1, 2]
    saved = list((tmp_path / "state" / "llm-doctor").glob("knee-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["endpoint"] == server.base_url
    assert "past-throughput-knee" in result.stderr


def test_load_command_unreachable_endpoint_exits_3(cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("load", "--endpoint", f"http://127.0.0.1:{port}", "--max-seconds", "5",
                 "--max-concurrency", "1", "--no-save")
    assert result.returncode == 3
    assert f"127.0.0.1:{port}: every request failed" in result.stderr
    assert "Traceback" not in result.stderr


def test_load_command_rejects_a_bad_url(cli):
    result = cli("load", "--endpoint", "https://localhost:8000", "--no-save")
    assert result.returncode == 3 and "expected http://HOST:PORT" in result.stderr


def test_slow_levels_run_long_enough_for_their_percentiles():
    assert knee.level_seconds(0.1, 1, 170, False) == knee.LEVEL_SECONDS  # fast engine: 15 s
    assert knee.level_seconds(3.0, 1, 170, False) == 36.0  # 12 requests of 3 s
    assert knee.level_seconds(3.0, 1, 50, False) == 25.0  # never past half what is left
    assert knee.level_seconds(3.0, 1, 20, True) == 20.0  # the last level may use it all


@pytest.mark.parametrize("server", [Behaviour(api_key="sk-secret-123")], indirect=True)
def test_load_command_takes_a_key_from_the_url_and_never_shows_it(server, cli, tmp_path):
    url = server.base_url.replace("http://", "http://:sk-secret-123@")
    result = cli("load", "--endpoint", url, "--prompt-tokens", "8", "--output-tokens", "2",
                 "--max-concurrency", "1", "--max-seconds", "5", "--format", "json",
                 env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["levels"][0]["errors"] == 0
    saved = next((tmp_path / "llm-doctor").glob("knee-*.json")).read_text()
    assert "sk-secret-123" not in result.stdout + result.stderr + saved
