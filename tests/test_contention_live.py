"""The real llama-server (tests/llama_server.py) beside real CPU hogs: contention spread over
ten small processes is found (issue 14 §3; its warm engine's one verdict in five scans is
tests/test_warm_verdict_live.py)."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests import live_stack
from tests.builtin_rules import builtin_rules
from tests.llama_server import llama_server  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.live, pytest.mark.slow]

RULES = {r.id: r for r in builtin_rules()}


def _hogs(prefix: str, count: int, share: float, seconds: float) -> list:
    return [live_stack.duty_spinner(f"{prefix}{i}", seconds, share) for i in range(count)]


def _stop(procs: list) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(10)


def _spread_findings(cli, pid: int) -> tuple[list[dict], dict]:
    """A quick scan as a user runs it (its own process: the hogs, children of this test, are
    not its relatives); the spread findings about the engine ``pid``."""
    result = cli("scan", "--level", "quick", "--format", "json")
    assert result.returncode in (0, 1, 2), result.stderr
    report = json.loads(result.stdout)
    load = next(p for p in report["probes"] if p["name"] == "host.cpu_load")
    return [f for f in report["findings"] if f["rule"] == "cpu-contention-spread"
            and f["evidence"]["engine"].endswith(f"pid {pid}")], load


def _neighbour_hogs(load: dict) -> list[str]:
    """Processes not of this test that cpu-contention would name (half a core and more)."""
    data = load.get("data") or {}
    return [f"{p['comm']} {p['cpu_cores']:.2f}" for p in data.get("top", ())
            if not p["related"] and not p["kernel_thread"] and p.get("engine") is None
            and p["cpu_cores"] >= 0.5 and not p["comm"].startswith("ldten")]


@pytest.mark.timeout(180)
def test_ten_processes_under_half_a_core_each_are_found_as_contention(llama_server, cli):  # noqa: F811
    # Five spinning processes a CPU the engine may use: whatever else runs, each gets at most
    # a fifth of a core (under the half a core cpu-contention names), and together they leave
    # the engine less than the half of its one thread the rule asks. Hogs on a duty cycle
    # (0.4 of a core asked) left it 0.545 cores on a loaded machine: the kernel's share of a
    # duty cycle is the machine's to decide, a spinning process's is not.
    count = 5 * len(os.sched_getaffinity(llama_server.pid))
    hogs = _hogs(f"ldten{os.getpid() % 1000}-", count, 1.0, 120)
    seen: list[dict] = []
    try:
        # every hog spinning before the scan samples: on a busy machine Python's start
        # outlasted the second of sleep, and the few hogs already spinning shared the
        # cores among fewer (one took 0.58 of a core in a two-worker CI run)
        live_stack.wait_named(hogs, f"ldten{os.getpid() % 1000}-")
        time.sleep(1.0)
        # a few quick scans at most: on a shared machine one may catch a neighbour's burst
        # that cpu-contention names instead
        for _ in range(3):
            seen, load = _spread_findings(cli, llama_server.pid)
            if seen:
                break
    finally:
        _stop(hogs)
    if not seen and _neighbour_hogs(load):
        # a neighbour's test suite at half a core or more takes most of the other work: the
        # finding is then cpu-contention naming it, as designed, and spread is not the case
        pytest.skip(f"neighbours took most of the other CPU work: {_neighbour_hogs(load)}")
    assert seen, json.dumps({k: v for k, v in (load.get("data") or {}).items() if k in ("top", "engines", "busy_cores", "other_busy_cores")})[:6000]
    (finding,) = seen
    assert finding["cause"] == "cpu-contention" and finding["key"] == "llama.cpp llama-server"
    assert finding["evidence"]["other_processes"] >= count
    assert finding["evidence"]["cores_wanted"] == 1.0  # -t 1: one thread computes
    # the measurement the finding reports is the one the rule judged: under its share
    share = RULES["cpu-contention-spread"].params["min_left_share"]
    assert finding["evidence"]["cores_left"] < share * finding["evidence"]["cores_wanted"]
    hogs_seen = [p for p in load["data"]["top"] if p["comm"].startswith("ldten")]
    assert hogs_seen and all(p["cpu_cores"] < 0.5 for p in hogs_seen), hogs_seen
