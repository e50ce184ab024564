"""The verify scan's verdicts: fixed, not fixed, needs a restart, not applied, unknown."""

from __future__ import annotations

from datetime import datetime, timezone

from doctor.fix.apply import Outcome
from doctor.fix.plan import build_plan
from tests.saved_scans import saved
from doctor.fix.verify import FIXED, NEEDS_RESTART, NOT_APPLIED, NOT_FIXED, UNKNOWN, judge

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
FINDINGS = [
    {"rule": "network-backlog-small", "cause": "network-backlog-small", "key": "", "title": "t",
     "evidence": {"somaxconn": 128}},
    {"rule": "swap-swappiness-high", "cause": "swap-active", "key": "", "title": "t",
     "evidence": {"swappiness": 60}},
    {"rule": "fd-limit-low", "cause": "fd-limit-low", "key": "engine vllm", "title": "t",
     "evidence": {"process": "python3 pid 7", "role": "engine"}},
    {"rule": "cuda-graphs-disabled", "cause": "cuda-graphs-disabled", "key": "vllm at x", "title": "t",
     "evidence": {"engine": "vllm at x pid 7"}},
]
PROBES = {"network-backlog-small": ("host.sysctl",), "swap-swappiness-high": ("host.memory", "host.sysctl"),
          "fd-limit-low": ("host.limits",), "cuda-graphs-disabled": ("engine.discovery",)}
SCAN = {"host": {"hostname": "h"}, "findings": FINDINGS, "probes": [
    {"name": "engine.container", "status": "ok", "data": {"engines": [{"pid": 7, "cgroup": "/system.slice/vllm.service"}]}}]}


def _after(findings, failed=()):
    names = ("host.sysctl", "host.memory", "host.limits", "engine.discovery")
    return saved({"findings": findings,
                  "probes": [{"name": n, "status": "error" if n in failed else "ok"} for n in names]})


def test_verdicts():
    plan = build_plan(saved(SCAN), "x", PROBES, NOW)
    outcomes = [Outcome(s.id, "shown" if s.flags else "applied", "") for s in plan.steps]
    # the backlog is gone, swappiness is still raised, the engine keeps its limit until restart
    got = judge(plan, outcomes, _after([FINDINGS[1], FINDINGS[2], FINDINGS[3]]))
    assert got == {"01-network-backlog-small": FIXED, "02-swap-swappiness-high": NOT_FIXED,
                   "03-fd-limit-low": NEEDS_RESTART, "04-cuda-graphs-disabled": NOT_APPLIED}


def test_a_failed_probe_proves_nothing():
    plan = build_plan(saved(SCAN), "x", PROBES, NOW)
    outcomes = [Outcome(s.id, "applied", "") for s in plan.steps]
    got = judge(plan, outcomes, _after([], failed=("host.sysctl",)))
    assert got["01-network-backlog-small"] == UNKNOWN and got["03-fd-limit-low"] == FIXED
