"""Five warm-up measurements of the warm engine under other load give one verdict (issue 14 §3).

The engine must be warm by the rule's own words: up ``warm_uptime_s`` (60 s) and past
``warm_generated_tokens``. The test sleeps until the session's shared llama-server
(tests/llama_server.py) is that old; this module's name sorts after the other modules that
share that server, so in a whole run it has been up for minutes and no sleep is left.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from doctor.model import ProbeResult
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from probes.engine import warmup as engine_warmup
from probes.helpers.engine_targets import Target
from tests import live_stack
from tests.builtin_rules import builtin_rules
from tests.llama_server import llama_server  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.live, pytest.mark.slow]

RULES = {r.id: r for r in builtin_rules()}


def _stop(procs: list) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(10)


def _generate(base_url: str, tokens: int) -> None:
    body = json.dumps({"prompt": "Write about the sea.", "max_tokens": tokens,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310 (loopback)
        answer.read()


@pytest.mark.timeout(600)
def test_a_warm_engine_under_other_load_gives_one_verdict_in_five_scans(llama_server, monkeypatch):  # noqa: F811
    # two rounds a scan, the fewest that compare a first request with steady ones: the five
    # verdicts are the test, and a third round made each scan half as long again
    monkeypatch.setattr(engine_warmup, "MAX_ROUNDS", 2)
    uptime = engine_warmup.uptime_of(LiveHost(), llama_server.pid) or 0.0
    for _ in range(10):  # traffic served: enough generated tokens, whatever ran before
        _generate(llama_server.base_url, 64)
    time.sleep(max(0.0, RULES["engine-not-warmed-up"].params["warm_uptime_s"] + 1 - uptime))
    target = Target(llama_server.base_url, llama_server.pid, "llama.cpp", None, False, ())
    # other load that comes and goes: a process pool starting workers, as a model loading is
    hogs = [live_stack.duty_spinner(f"ldburst{i}", 400, 0.6, new_pid_every_s=3 + i) for i in range(3)]
    verdicts, endpoints = [], []
    try:
        for _ in range(5):
            endpoint = engine_warmup._measure_one(LiveHost(), target)
            record = engine_warmup.WarmupRecord((endpoint,))
            findings, errors = evaluate([RULES["engine-not-warmed-up"]],
                                        [ProbeResult("engine.warmup", "ok", 1.0, None, record)])
            assert errors == []
            endpoints.append(endpoint)
            verdicts.append(tuple(f.severity.label for f in findings))
    finally:
        _stop(hogs)
    shown = [(e.first_ttft_ms, e.steady_ttft_ms, e.ttft_ratio, e.first_other_busy_cores,
              e.steady_other_busy_cores) for e in endpoints]
    print("first, steady TTFT ms, ratio, other work first, steady (cores):", shown)
    assert verdicts == [()] * 5, shown  # warm: one verdict, and it is OK
    for e in endpoints:
        assert e.errors == 0, e.first_error
        assert e.rounds >= 2 and e.ttft_ratio is not None  # a comparison was made
        assert e.uptime_s is not None and e.uptime_s >= 60
        assert e.generated_tokens_before is not None and e.generated_tokens_before >= 500
        assert e.first_other_busy_cores is not None and e.logical_cpus
