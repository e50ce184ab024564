"""`llm-doctor why slowdown` through the real command line against the real llama.cpp
llama-server (tests/llama_server.py, gemma3-270m on this host's CPUs), first alone, then
beside CPU hogs this test starts (one spinning process a CPU the engine may use): the
differential must then name the cause, cpu-contention confirmed about this test's hogs or
this engine, and its decode judged against the ceiling and not at it. The efficiency figures
(measured tokens/s, ceiling tokens/s, their ratio) of both are printed for the report; no
speed is asserted (benchmarks/ hold speed). The run alone is engine.speed and
engine.roofline in this process with a shorter request (tests/test_roofline_live.py's): a
second `why` (about 10 s) would not fit the test-time budget.

Without the hogs the verdict is not "at the limit" on a small shared host: the ceiling is
STREAM's triad over every core, and ``-t 1`` decodes on one (the efficiency is about a
quarter to a third); what the hogs must add is the cause, named.

The CPU-quota variant puts the server in a cpu cgroup of the test's own with a quota of a
quarter of a CPU (cgroup v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``; the cgroup is made and
removed by tests/test_engine_container_live.py's ``make``) and runs ``why slow`` in this
process (the command's own ``differential``, with engine.speed's shorter request): the
quota must be the confirmed cause and the decode judged far below its ceiling."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request

import pytest

from doctor.inputs import Inputs
from doctor.model import Level, ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from probes.engine import roofline, speed
from probes.host import memory_bandwidth
from tests import live_stack
from tests import llama_server as llama
from tests.builtin_rules import builtin_rules
from tests.test_engine_container_live import make

pytestmark = [pytest.mark.live, pytest.mark.machine, pytest.mark.timeout(120)]

FIGURES = ("measured_tokens_per_s", "ceiling_tokens_per_s", "efficiency")


def _why(cli, base_url: str) -> dict:
    result = cli("why", "slowdown", "--endpoint", base_url, "--format", "json", timeout=90)
    assert result.returncode in (0, 1, 2), result.stderr[-3000:]
    return json.loads(result.stdout)


def _cause(report: dict, cause: str) -> dict:
    return next(c for c in report["causes"] if c["cause"] == cause)


def _findings(row: dict) -> list[dict]:
    return [f for r in row["rules"] for f in r["findings"]]


def _figures(report: dict, pid: int) -> str:
    """This engine's efficiency figures, from whichever decode cause judged it."""
    mine = f"pid {pid}"
    for cause in ("decode-below-ceiling", "decode-at-bandwidth-limit"):
        for f in _findings(_cause(report, cause)):
            if f["evidence"]["engine"].endswith(mine):
                return ", ".join(f"{k} {f['evidence'][k]}" for k in FIGURES) + f" ({cause})"
    items = [i for r in _cause(report, "decode-at-bandwidth-limit")["rules"] for i in r["items"]
             if i["item"].endswith(mine)]
    return f"neither decode cause confirmed: {items}"


def _short_requests(monkeypatch) -> None:
    for name, value in (("PROMPT_TOKENS", 32), ("OUTPUT_TOKENS", 16), ("WARM_PROMPT", 8),
                        ("WARM_OUTPUT", 2)):
        monkeypatch.setattr(speed, name, value)


def _roofline(base_url: str, pid: int, stream, busy_ok: bool = False) -> roofline.EngineRoofline:
    """engine.roofline of this engine, from engine.speed's short bounded request
    (``busy_ok``: sent while the engine serves others, as `--busy-ok`)."""
    host = LiveHost()
    options = ScanOptions(level=Level.QUICK, endpoints=(base_url,), busy_ok=busy_ok)
    inputs = Inputs({"host.memory_bandwidth": stream, "engine.speed": speed.probe(host, options)})
    (mine,) = [e for e in roofline.probe(host, options, inputs).engines
               if e.engine.endswith(f"pid {pid}")]
    return mine


def _clients(base_url: str, count: int, stop: threading.Event) -> list[threading.Thread]:
    """``count`` clients, each sending short completions one after another until ``stop``
    (at most 40 each): with one slot, the requests beside them wait for it. 12 tokens each:
    on a CPU five times this one's the wait must still pass ttft-queue-dominated's 0.2 s."""
    def loop(i: int) -> None:
        body = json.dumps({"prompt": f"client {i} counts:", "n_predict": 12}).encode()
        for _ in range(40):
            if stop.is_set():
                return
            request = urllib.request.Request(f"{base_url}/completion", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as r:
                r.read()
    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def _fires(rule_id: str, record: roofline.EngineRoofline) -> bool:
    rule = [r for r in builtin_rules() if r.id == rule_id]
    result = ProbeResult("engine.roofline", "ok", 0.0, None, roofline.RooflineRecord((record,), ()))
    findings, errors = evaluate(rule, [result])
    assert not errors, errors
    return bool(findings)


def _ttft(label: str, e: roofline.EngineRoofline) -> str:
    return (f"{label}: TTFT {e.ttft_s} s = queue {e.queue_s} s ({e.queue_share}) + prefill "
            f"{e.prefill_s} s ({e.prefill_share}); prefill {e.prefill_tokens_per_s} tokens/s")


def _hogs_stop(hogs: list) -> None:
    for proc in hogs:
        proc.kill()
        proc.wait(10)


def test_why_slowdown_names_cpu_contention_beside_a_hog(tmp_path, cli, monkeypatch):
    _short_requests(monkeypatch)
    took = [("start", time.monotonic())]
    stream = memory_bandwidth.probe(LiveHost(), ScanOptions())
    started = llama.start(tmp_path, "-np", "1")
    took.append(("STREAM and server", time.monotonic()))
    prefix = f"ldwhy{os.getpid() % 1000}-"
    hogs: list = []
    stop = threading.Event()
    clients: list[threading.Thread] = []
    try:
        alone = _roofline(started.base_url, started.pid, stream)
        took.append(("alone", time.monotonic()))
        # one spinning process a CPU the engine may use: with one alone on a shared 2-core
        # host, neighbours' work held it at 0.486 cores (under cpu-contention's 0.5) and left
        # the engine 0.56 (over the spread rule's 0.5); with one a CPU either the hogs reach
        # half a core each or what they leave the engine is under half its thread
        hogs = [live_stack.duty_spinner(f"{prefix}{i}", 60, 1.0)
                for i in range(len(os.sched_getaffinity(started.pid)))]
        live_stack.wait_named(hogs, prefix)
        time.sleep(0.5)
        beside = _why(cli, started.base_url)
        took.append(("why beside the hog", time.monotonic()))
        _hogs_stop(hogs)
        hogs = []
        clients = _clients(started.base_url, 4, stop)
        time.sleep(0.3)  # the four in: one in the slot, three waiting
        queued = _roofline(started.base_url, started.pid, stream, busy_ok=True)
        took.append(("four clients", time.monotonic()))
    finally:
        stop.set()
        _hogs_stop(hogs)
        for thread in clients:
            thread.join(30)
        llama.stop(started)
    print("\nalone:      " + ", ".join(f"{k} {getattr(alone, k)}" for k in FIGURES)
          + f"\nbeside hog: {_figures(beside, started.pid)}\n  verdict: {beside['verdict']}"
          + "\n" + _ttft("one client", alone) + "\n" + _ttft("four clients, -np 1", queued)
          + "\n" + ", ".join(f"{what} {b - a:.1f} s" for (_, a), (what, b) in zip(took, took[1:])))
    mine = f"pid {started.pid}"
    # alone, the engine was measured against its ceiling (whatever the verdict)
    assert alone.efficiency is not None and alone.memory == "host", alone
    # beside the hog: the cause named, about this test's hog or this engine
    contention = _cause(beside, "cpu-contention")
    assert contention["status"] == "confirmed", json.dumps(contention)[:4000]
    ours = [f for f in _findings(contention)
            if str(f["evidence"].get("process", "")).startswith(prefix)
            or str(f["evidence"].get("engine", "")).endswith(mine)]
    assert ours, json.dumps(_findings(contention))[:4000]
    assert "cpu-contention" in beside["verdict"].split(";")[0], beside["verdict"]
    # and the decode speed judged against its ceiling, not "at the limit". Not asserted:
    # decode-below-ceiling itself. The STREAM triad of that run is measured beside the hog
    # too, so the ceiling can fall with the speed (45.6 against 92.9 tokens/s alone, once),
    # and beside the hog the ratio was anywhere in 0.13-0.51 in six runs on a shared 2-core
    # host; the cause, not the ratio, is what the hog reliably moves
    at_limit = _cause(beside, "decode-at-bandwidth-limit")
    judged = [i for r in at_limit["rules"] for i in r["items"] if i["item"].endswith(mine)]
    assert judged and not judged[0]["not_measured"], json.dumps(at_limit)[:4000]
    assert not any(f["evidence"]["engine"].endswith(mine) for f in _findings(at_limit))
    # TTFT: alone the prompt's compute, behind the four the wait for the one slot
    assert alone.prefill_share is not None and alone.prefill_share > alone.queue_share, alone
    assert queued.queue_share is not None and queued.queue_share > queued.prefill_share, queued
    assert _fires("ttft-queue-dominated", queued) and not _fires("ttft-queue-dominated", alone)


QUOTA_US, PERIOD_US = 25_000, 100_000  # a quarter of a CPU; the server's -t 1 wants a whole one


@pytest.mark.timeout(180)
def test_why_slow_confirms_a_cpu_quota_under_the_engine(tmp_path, monkeypatch):
    from doctor.commands.why import command_args, differential
    from reports.why_common import verdict

    _short_requests(monkeypatch)
    with make("cpu", "llm-doctor-why-quota") as sandbox:
        if sandbox.version == 2:
            sandbox.write("cpu.max", f"{QUOTA_US} {PERIOD_US}")
        else:
            sandbox.write("cpu.cfs_period_us", str(PERIOD_US))
            sandbox.write("cpu.cfs_quota_us", str(QUOTA_US))
        started = llama.start(tmp_path, "-np", "1", prefix=sandbox.prefix())
        try:
            took = time.monotonic()
            diff = differential("slow", None, "standard", None, (),
                                command_args((), (started.base_url,), False, None, False))
            took = time.monotonic() - took
        finally:
            llama.stop(started)
    rows = {r.cause: r for r in diff.rows}
    mine = f"pid {started.pid}"
    quota = rows["cpu-quota-throttled"]
    ours = [f for c in quota.checks for f in c.findings if mine in str(f.evidence["engine"])]
    below = [f for c in rows["decode-below-ceiling"].checks for f in c.findings
             if str(f.evidence["engine"]).endswith(mine)]
    print(f"\nunder a {QUOTA_US / PERIOD_US:g}-CPU quota: "
          + (", ".join(f"{k} {below[0].evidence[k]}" for k in FIGURES) if below else
             "decode-below-ceiling not confirmed") + f"\n  verdict: {verdict(diff)}; why took {took:.1f} s")
    assert quota.status == "confirmed" and ours, [str(c.why) for c in quota.checks]
    assert ours[0].evidence["quota_cpus"] == QUOTA_US / PERIOD_US
    assert "cpu-quota-throttled" in verdict(diff).split(";")[0], verdict(diff)
    # the decode judged against its ceiling: far below it (a quarter of the one core that
    # alone reaches a quarter to a third of STREAM's every-core ceiling)
    assert below, [(str(c.why), [i.parts for i in c.items]) for c in rows["decode-below-ceiling"].checks]
    assert below[0].evidence["efficiency"] < 0.25, below[0].evidence
    assert rows["decode-at-bandwidth-limit"].status != "confirmed"
