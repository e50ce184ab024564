"""The load generator and the knee, against the local streaming server (tests/stream_server.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from doctor.workload import knee
from doctor.workload.knee import find_knee
from doctor.workload.levels import LevelStats, Percentiles, describe, level_stats, percentiles
from doctor.workload.loadgen import (RequestTarget, LevelRun, LoadError, RequestResult, Workload,
                                     drive, run_requests)
from doctor.workload.prompts import make_prompt
from tests.stream_server import Behaviour, StreamServer


@pytest.fixture
def server(request):
    behaviour = getattr(request, "param", None) or Behaviour()
    srv = StreamServer(behaviour).start()
    yield srv
    srv.stop()


WORK = Workload(prompt_tokens=16, output_tokens=5, timeout_s=10)


def test_streams_count_tokens_and_gaps(server):
    results = run_requests(RequestTarget(server.base_url), WORK, 2, 6, 10)
    assert len(results) == 6 and all(r.ok for r in results)
    assert {r.output_tokens for r in results} == {5}
    assert all(len(r.itl_s) == 4 and len(r.stamps_s) == 5 and r.ttft_s is not None
               for r in results)
    assert results[0].text == " word" * 5
    assert results[0].prompt_tokens == 16  # from the stream's usage event
    assert results[0].cached_tokens is None  # this engine does not say


@pytest.mark.parametrize("server", [Behaviour(text=[" a", " b"])], indirect=True)
def test_chat_api_reads_delta_content(server):
    (result,) = run_requests(RequestTarget(server.base_url, api="chat"), WORK, 1, 1, 10)
    assert result.ok and result.text == " a b a b a"


@pytest.mark.parametrize("server", [Behaviour(close_after=True)], indirect=True)
def test_server_closing_kept_alive_connection_is_reconnected(server):
    """llama-server closes after every stream without a Connection: close header."""
    results = run_requests(RequestTarget(server.base_url), WORK, 1, 4, 10)
    assert [r.ok for r in results] == [True] * 4, [r.error for r in results]


@pytest.mark.parametrize("server", [Behaviour(api_key="sk-test")], indirect=True)
def test_refused_credentials_are_errors_and_a_key_is_sent(server):
    (refused,) = run_requests(RequestTarget(server.base_url), WORK, 1, 1, 10)
    assert not refused.ok and refused.status == 401 and "401" in refused.error
    (allowed,) = run_requests(RequestTarget(server.base_url, api_key="sk-test"), WORK, 1, 1, 10)
    assert allowed.ok


@pytest.mark.parametrize("server", [Behaviour(prefill_s=5.0)], indirect=True)
def test_a_request_is_bounded_by_its_timeout(server):
    (result,) = run_requests(RequestTarget(server.base_url), Workload(16, 5, timeout_s=0.3), 1, 1, 10)
    # cut by its 0.3 s, not answered after the server's 5 s of prefill
    assert not result.ok and not result.cut and "0.3 s" in result.error and result.e2e_s < 5


def test_refused_connection_is_an_error_not_an_exception():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    (result,) = run_requests(RequestTarget(f"http://127.0.0.1:{port}"), WORK, 1, 1, 5)
    assert not result.ok and result.status == 0 and result.error


@pytest.mark.parametrize("url", ["ftp://x", "http://127.0.0.1:99999", "http://h:port"])
def test_bad_url_names_the_endpoint(url):
    with pytest.raises(LoadError, match="expected http://HOST:PORT"):
        run_requests(RequestTarget(url), WORK, 1, 1, 1)


def test_runs_are_bounded_in_count_and_time(server):
    assert len(run_requests(RequestTarget(server.base_url), WORK, 4, 10, 30)) == 10
    slow = StreamServer(Behaviour(token_s=0.05)).start()
    try:
        results = run_requests(RequestTarget(slow.base_url), WORK, 2, 10**6, 0.5)
    finally:
        slow.stop()
    assert 0 < len(results) <= 2 * 3  # 0.25 s per request: no request starts after 0.5 s


# --- fresh prompts and the engine's prompt cache ---------------------------------------------

def test_prompts_of_a_run_never_share_their_first_words():
    prompts = [make_prompt(64, 7, i) for i in range(600)]
    assert len({tuple(p.split()[:2]) for p in prompts}) == 600
    assert len({p.split()[0] for p in prompts[:495]}) == 495  # the first word alone differs
    assert all(60 <= len(p.split()) <= 64 for p in prompts)
    assert make_prompt(64, 7, 3) == prompts[3]  # a seed repeats its run on purpose
    assert make_prompt(64, 8, 3) != prompts[3]


@pytest.mark.parametrize("server", [Behaviour()], indirect=True)
def test_every_run_sends_fresh_prompts_and_a_seed_repeats_one(server):
    """The old client seeded prompts with the concurrency level: every run repeated them."""
    endpoint = RequestTarget(server.base_url)
    runs = [knee.sweep(endpoint, WORK, [1, 2], 40, 20, seconds_per_level=0.2, min_requests=3)
            for _ in range(2)]
    assert runs[0].seed != runs[1].seed and len(server.prompts) >= 2 * 5
    assert len(set(server.prompts)) == len(server.prompts), "a prompt was sent twice"
    server.prompts.clear()
    a = knee.sweep(endpoint, WORK, [1], 10, 20, seconds_per_level=0.2, min_requests=3, seed=5)
    sent_a = list(server.prompts)
    server.prompts.clear()
    b = knee.sweep(endpoint, WORK, [1], 10, 20, seconds_per_level=0.2, min_requests=3, seed=5)
    assert a.seed == b.seed == 5 and server.prompts[:3] == sent_a[:3]


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(prompt_cache="usage")], indirect=True)
def test_a_second_load_run_is_not_served_from_the_prompt_cache(server, cli, tmp_path):
    """The stub caches every prompt's longest prefix shared with an earlier one, as llama.cpp
    does; the second run's share must stay under 10% (the issue saw 131 of 136 tokens)."""
    args = ("load", "--endpoint", server.base_url, "--prompt-tokens", "64", "--output-tokens",
            "3", "--levels", "1,2", "--seconds-per-level", "0.3", "--min-requests", "4",
            "--max-seconds", "20", "--no-save", "--format", "json")
    runs = [json.loads(cli(*args).stdout) for _ in range(2)]
    for document in runs:
        cache = document["prompt_cache"]
        assert cache["reported"] and cache["share"] < 0.10, cache
        assert all(lv["cached_share"] is not None for lv in document["levels"])
    repeat = cli(*args[:-2], "--seed", str(runs[1]["settings"]["seed"]))
    assert repeat.returncode == 0, repeat.stderr
    # the same seed again: every prompt is served from the cache, and the table says so
    assert "served from the engine's cache" in repeat.stdout
    line = next(x for x in repeat.stdout.splitlines() if x.startswith("prompt cache:"))
    assert float(line.split("(")[1].split("%")[0]) > 50, line  # beyond run 2's count: new


@pytest.mark.parametrize("server", [Behaviour(prompt_cache="timings")], indirect=True)
def test_llama_cpp_cache_n_is_read(server):
    endpoint = RequestTarget(server.base_url)
    (first,) = run_requests(endpoint, WORK, 1, 1, 5, seed=3)
    (again,) = run_requests(endpoint, WORK, 1, 1, 5, seed=3)
    assert first.cached_tokens == 0 and again.cached_tokens == 16


@pytest.mark.slow
def test_a_cache_not_reported_is_said_so(server, cli):
    result = cli("load", "--endpoint", server.base_url, "--prompt-tokens", "8",
                 "--output-tokens", "2", "--levels", "1", "--seconds-per-level", "0.2",
                 "--min-requests", "2", "--max-seconds", "10", "--no-save")
    assert result.returncode == 0, result.stderr
    assert "prompt cache: not reported by the engine" in result.stdout


# --- percentiles and the two inter-token latencies --------------------------------------------

def test_percentiles_nearest_rank_and_when_they_are_the_maximum():
    p = percentiles([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert (p.p50_ms, p.p95_ms, p.p99_ms, p.samples) == (50.0, 95.0, 99.0, 100)
    assert not p.p95_is_max and not p.p99_is_max
    twelve = percentiles([i / 1000 for i in range(1, 13)])
    assert twelve.p95_ms == twelve.p99_ms == 12.0 and twelve.p95_is_max and twelve.p99_is_max
    assert describe(twelve) == "6/12/12 (p95 = p99 = max of 12)"
    assert describe(percentiles([i / 1000 for i in range(1, 51)])).endswith("(p99 = max of 50)")
    assert percentiles([]) == Percentiles(0, None, None, None, False, False)


def _result(ttft, gaps, start=0.0, ok=True, cut=False, tokens=None, prompt=16, cached=None):
    stamps = [start + ttft]
    for gap in gaps:
        stamps.append(stamps[-1] + gap)
    e2e = stamps[-1] - start
    return RequestResult(ok, 200 if ok else 0, None if ok or cut else "HTTP 500", start, ttft,
                         e2e, tokens or len(stamps), prompt, tuple(gaps), "x", cached,
                         tuple(stamps), cut)


def _run(results, concurrency=1, window=None, lags=(), cpu=0.0, closed_by="enough"):
    end = max(r.started_s + r.e2e_s for r in results)
    return LevelRun(concurrency, tuple(results), window or end, closed_by, tuple(lags), cpu)


def test_itl_pooled_and_per_request_mean_are_both_reported():
    """One long fast request and two short slow ones: pooled, the fast gaps dominate; per
    request (guidellm's and aiperf's way), each request's mean counts once."""
    fast = _result(0.1, [0.01] * 40)
    slow = [_result(0.1, [0.2, 0.2], start=s) for s in (0.0, 0.5)]
    stats = level_stats(_run([fast, *slow], concurrency=3))
    assert stats.itl_pooled.samples == 44 and stats.itl_pooled.p50_ms == 10.0
    assert stats.itl_per_request_mean.samples == 3
    assert stats.itl_per_request_mean.p50_ms == 200.0  # two of three requests are slow


def test_cut_requests_are_neither_errors_nor_samples():
    done = [_result(0.1, [0.1] * 4, start=i * 0.5) for i in range(4)]
    cut = _result(0.1, [0.1], start=2.0, ok=False, cut=True)
    failed = _result(0.1, [], start=2.1, ok=False)
    stats = level_stats(_run([*done, cut, failed], window=2.3), min_requests=4)
    assert (stats.completed, stats.cut, stats.errors) == (4, 1, 1)
    assert stats.error_rate == 0.2 and stats.first_error == "HTTP 500"
    assert stats.e2e.samples == 4 and stats.unusable is None


def test_a_level_short_of_its_minimum_is_not_judged():
    """At load average 7 the old sweep's own budget cut requests at c=2, counted them as
    100% errors and saved knee 1; now they are cut, and the level is not judged."""
    stats = level_stats(_run([_result(1.0, [0.5] * 4), _result(1.0, [0.5], start=0.1,
                                                               ok=False, cut=True)],
                             concurrency=2, closed_by="budget"), min_requests=4)
    assert stats.errors == 0 and stats.cut == 1
    assert stats.unusable == "only 1 of the 4 completed requests it needs (the time left ran out)"


def test_a_late_client_is_not_judged():
    results = [_result(0.05, [0.01] * 4, start=i * 0.1) for i in range(10)]
    late = level_stats(_run(results, window=1.0, lags=[0.02] * 50), min_requests=10)
    assert "late on average" in late.client_late and late.unusable == late.client_late
    busy = level_stats(_run(results, window=1.0, cpu=0.95), min_requests=10)
    assert "95% of a core" in busy.client_late
    quiet = level_stats(_run(results, window=1.0, lags=[0.0005] * 50), min_requests=10)
    assert quiet.unusable is None and quiet.client_late is None


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(prefill_s=0.01, token_s=0.02)], indirect=True)
def test_the_client_knows_when_its_own_loop_is_late(server):
    """A second task that holds the event loop 80 ms at a time (as a starved or saturated
    client does): the level says the client could not keep up."""
    async def main():
        async def hog():
            while True:
                await asyncio.sleep(0.01)
                time.sleep(0.08)

        task = asyncio.ensure_future(hog())
        try:
            return await drive(RequestTarget(server.base_url), Workload(8, 5, timeout_s=5), 2, 40,
                               1.5, min_requests=10, min_seconds=1.0, cut=True)
        finally:
            task.cancel()

    stats = level_stats(asyncio.run(main()), 10)
    assert stats.client_late and stats.unusable, stats


def test_throughput_counts_tokens_inside_the_window_with_its_spread():
    results = [_result(0.0, [0.1] * 9, start=i * 1.0) for i in range(10)]  # 10 tok/s steady
    stats = level_stats(_run(results, window=10.0))
    assert (stats.measured_from_s, stats.measured_to_s) == (0.9, 9.9)  # first to last done
    assert stats.output_tokens_per_s == pytest.approx(10.0, rel=0.02)
    assert len(stats.throughput_windows) in (8, 9) and stats.throughput_se < 0.5
    half = level_stats(_run(results, window=5.0))  # tokens after the close are not counted
    assert half.output_tokens_per_s == pytest.approx(10.0, rel=0.05)


def test_requests_that_ended_together_span_no_cycle():
    """Four slots' first requests all end at 0.45 s: so far there is no cycle between two
    completions, and the figure is over the whole time (it read 304 tok/s for 15)."""
    results = [_result(0.1, [0.05] * 7) for _ in range(4)]
    results += [RequestResult(False, 0, None, 0.45, None, 0.1, 0, None, (), "", None,
                              (), True)] * 4
    stats = level_stats(_run(results, concurrency=4, window=0.55))
    assert (stats.measured_from_s, stats.measured_to_s) == (0.0, 0.55)
    assert stats.output_tokens_per_s == pytest.approx(32 / 0.55, rel=0.01)


def test_throughput_leaves_out_the_ramp_and_a_cycle_cut_in_its_prefill():
    """Four slots, all four requests in step: 0.1 s of prefill, then 8 tokens in 0.35 s. The
    level closes 0.08 s into the third cycle's prefill; the figure is the cycles' own."""
    results = [_result(0.1, [0.05] * 7, start=cycle * 0.45) for cycle in range(2) for _ in
               range(4)]
    in_prefill = RequestResult(False, 0, None, 0.9, None, 0.08, 0, None, (), "", None, (), True)
    results += [in_prefill] * 4
    stats = level_stats(_run(results, concurrency=4, window=0.98))
    assert stats.output_tokens_per_s == pytest.approx(4 * 8 / 0.45, rel=0.01)


# --- the knee ----------------------------------------------------------------------------------

def _level(c, tps, e2e_ms=100.0, se=None, unusable=None):
    pct = Percentiles(20, e2e_ms, e2e_ms, e2e_ms, False, True)
    return LevelStats(c, 10, 12, 10, 0, 2, 0.0, 15.0, 1.0, 15.0, "enough", 1.0, tps, (tps,), se,
                      float(c),
                      None, None, None, None, pct, pct, pct, pct, 1.0, 2.0, 0.01, None, unusable,
                      None)


def test_knee_needs_a_level_past_the_flat_one():
    levels = [_level(1, 100), _level(2, 190), _level(4, 350, 115), _level(8, 355, 220)]
    found = find_knee(levels)
    assert found.status == "not-reached" and found.recommended_concurrency is None
    assert "one more level must confirm" in found.explanation
    found = find_knee([*levels, _level(16, 352, 450)])
    assert (found.status, found.concurrency, found.recommended_max_num_seqs) == ("found", 4, 4)
    assert "115" in found.explanation and "450" in found.explanation


def test_throughput_still_rising_8_to_15_percent_is_no_knee():
    """The issue's sweep: peers saw +8-15% up to c=4, guidellm no knee; the old rule said 1."""
    levels = [_level(1, 25.0), _level(2, 28.0), _level(4, 30.5)]
    found = find_knee(levels)
    assert found.status == "not-reached" and found.concurrency == 4
    assert "still rises at c=4" in found.explanation
    assert find_knee([*levels, _level(8, 30.9), _level(16, 30.2)]).concurrency == 4


def test_a_rise_within_the_noise_is_not_a_rise():
    noisy = [_level(1, 100, se=6), _level(2, 112, se=6), _level(4, 108, se=6)]
    assert find_knee(noisy).concurrency == 1  # +12% with a ±17% noise band: flat
    quiet = [_level(1, 100, se=1), _level(2, 112, se=1), _level(4, 108, se=1)]
    assert find_knee(quiet).status == "not-reached"  # the same rise, beyond the noise


def test_levels_not_judged_cannot_make_a_knee():
    levels = [_level(1, 100), _level(2, 20, unusable="only 1 of the 4 completed requests"),
              _level(4, 40, unusable="its event loop woke 9 ms late"), _level(8, 190)]
    found = find_knee(levels)
    assert found.status == "not-reached" and found.concurrency == 8
    assert found.left_out == ("c=2: only 1 of the 4 completed requests",
                              "c=4: its event loop woke 9 ms late")
    assert find_knee([_level(1, 0, unusable="no request completed")]).status == "no-data"


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(slots=4, prefill_s=0.05, token_s=0.025)],
                         indirect=True)
def test_sweep_finds_the_slot_limit_as_the_knee(server):
    """An engine decoding 4 sequences at once: throughput doubles to 4, then only queues.
    Requests of 0.23 s and levels of 2 s: the client's turnaround between two requests of a
    worker (a few ms, more on a loaded machine: a slot idles then at c=4, not at c=8) stays
    under the 5% that counts as a rise."""
    result = knee.sweep(RequestTarget(server.base_url), Workload(16, 8, timeout_s=10),
                        knee.concurrency_levels(64), 2000, 60, seconds_per_level=2.0)
    found = find_knee(result.levels)
    assert found.status == "found" and found.concurrency == 4, [
        (lv.concurrency, lv.output_tokens_per_s, lv.unusable) for lv in result.levels]
    assert [lv.concurrency for lv in result.levels] == [1, 2, 4, 8, 16]  # two past the knee
    assert result.stopped == "the knee was confirmed"
    assert all(lv.completed >= max(10, 2 * lv.concurrency) for lv in result.levels)
    assert all(lv.errors == 0 for lv in result.levels)


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(slots=1, prefill_s=0.05, token_s=0.5)],
                         indirect=True)
def test_the_time_budget_cuts_requests_it_does_not_fail_them(server, cli, tmp_path):
    """An engine of one slot, 2.05 s a request, and 16.5 s in all: after the warm-up's two
    and c=1's three requests (10.25 s) about 6 s are left, c=2 starts (its four requests
    would take 4.1 s two at a time, more than the warm-up's slowest request could make it),
    and the budget ends it with requests in flight (one slot: they take 8.2 s); they are cut,
    counted apart, not errors, the level is not judged and no knee is saved. The margins are
    seconds on either side, so a busy machine's slower requests do not move the outcome
    (at 0.85 s a request and 6 s in all, they were 0.05 s)."""
    result = cli("load", "--endpoint", server.base_url, "--prompt-tokens", "8",
                 "--output-tokens", "5", "--levels", "1,2", "--seconds-per-level", "1",
                 "--min-requests", "3", "--max-seconds", "16.5", "--format", "json",
                 env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [lv["concurrency"] for lv in document["levels"]] == [1, 2], document["stopped"]
    assert all(lv["errors"] == 0 for lv in document["levels"]), document["levels"]
    c2 = document["levels"][1]
    assert c2["cut"] >= 1 and c2["closed_by"] == "budget" and "time left" in c2["unusable"]
    assert document["knee"]["status"] != "found"
    assert document["knee"]["recommended_concurrency"] is None


@pytest.mark.slow
def test_load_command_saves_the_knee_where_the_rule_reads_it(server, cli, tmp_path):
    result = cli("load", "--endpoint", server.base_url + "/", "--prompt-tokens", "16",
                 "--output-tokens", "4", "--max-concurrency", "2", "--max-seconds", "10",
                 "--seconds-per-level", "0.5", "--format", "json", "-o",
                 str(tmp_path / "out.json"), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    assert [lv["concurrency"] for lv in document["levels"]] == [1, 2]
    assert document["schema"] == knee.SCHEMA and isinstance(document["settings"]["seed"], int)
    saved = list((tmp_path / "state" / "llm-doctor").glob("knee-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["endpoint"] == server.base_url
    assert "past-throughput-knee" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(token_s=0.05)], indirect=True)
def test_load_table_names_its_percentiles_and_both_itls(server, cli):
    result = cli("load", "--endpoint", server.base_url, "--prompt-tokens", "8",
                 "--output-tokens", "4", "--levels", "1", "--seconds-per-level", "0.2",
                 "--min-requests", "12", "--max-seconds", "10", "--no-save")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert "itl_pooled" in header and "itl_per_request_mean" in header
    assert row.split()[3] == "12" and "*" in row  # 12 done: p95 and p99 are the maximum
    assert "* = the largest sample" in result.stdout
    assert "--seed" in result.stdout
    # a first result once the level's time is up, while it runs on to its 12 requests
    assert "concurrency 1: so far" in result.stderr and "of the 12 requests" in result.stderr


@pytest.mark.slow
def test_load_command_unreachable_endpoint_exits_3(cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("load", "--endpoint", f"http://127.0.0.1:{port}", "--max-seconds", "5",
                 "--max-concurrency", "1", "--no-save")
    assert result.returncode == 3
    assert f"127.0.0.1:{port}: every request failed" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_load_command_rejects_a_bad_url(cli):
    result = cli("load", "--endpoint", "https://localhost:8000", "--no-save")
    assert result.returncode == 3 and "expected http://HOST:PORT" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (("load", "--max-seconds", "nan"), "'nan' is not a finite number"),
    (("load", "--seconds-per-level", "inf"), "not in the range"),
    (("load", "--request-timeout", "NaN"), "'NaN' is not a finite number"),
    (("warmup", "--max-seconds", "nan"), "'nan' is not a finite number"),
    (("load", "--levels", "1,x"), "expected concurrency levels such as 1,2,4,8"),
    (("load", "--levels", "1,1"), "a level is given twice"),
    (("load", "--levels", "0,2"), "each from 1 to 4096"),
    (("load", "--levels", "1,2", "--max-concurrency", "4"), "not both"),
])
def test_bad_numbers_are_refused_with_exit_3(cli, args, message):
    result = cli(*args, "--endpoint", "http://127.0.0.1:9")
    assert result.returncode == 3 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_slow_levels_are_not_started_when_they_cannot_finish():
    assert knee._too_long(1, 10, 3.0, 20.0)  # 10 requests of 3 s one at a time: 30 s
    assert not knee._too_long(4, 10, 3.0, 20.0)  # four at a time: 7.5 s at best
    assert not knee._too_long(1, 10, None, 20.0)  # nothing measured yet: try


@pytest.mark.slow
@pytest.mark.parametrize("server", [Behaviour(api_key="sk-secret-123")], indirect=True)
def test_load_command_takes_a_key_from_the_url_and_never_shows_it(server, cli, tmp_path):
    url = server.base_url.replace("http://", "http://:sk-secret-123@")
    result = cli("load", "--endpoint", url, "--prompt-tokens", "8", "--output-tokens", "2",
                 "--max-concurrency", "1", "--max-seconds", "5", "--seconds-per-level", "0.2",
                 "--format", "json", env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["levels"][0]["errors"] == 0
    saved = next((tmp_path / "llm-doctor").glob("knee-*.json")).read_text()
    assert "sk-secret-123" not in result.stdout + result.stderr + saved
