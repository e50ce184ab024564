"""too-few-slots against the real llama.cpp llama-server (tests/llama_server.py): ``-np 1``
under a concurrency of 4 from the load generator raises it, ``-np 4`` under the same load
stays silent. Each server first gets a bounded sweep at concurrency 1 and 4 (saved where
engine.load reads it, under a temporary XDG_STATE_HOME), so that the finding carries the
wait a slot costs: the first token at concurrency 4 against concurrency 1."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.workload import knee
from doctor.workload.loadgen import RequestTarget, Workload, run_requests
from probes.engine import load as engine_load, slots as engine_slots
from tests import llama_server as llama
from tests.builtin_rules import builtin_rules
from tests.llama_server import llama_server  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

CONCURRENCY = 4
RULE = next(r for r in builtin_rules() if r.id == "too-few-slots")


@pytest.fixture(params=[1, 4], ids=["np1", "np4"])
def server(request, tmp_path):
    """A llama-server of its own with -np N (the last -np on its command line wins)."""
    started = llama.start(tmp_path, "-np", str(request.param))
    try:
        yield request.param, started
    finally:
        llama.stop(started)


def _json(url: str):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _saved_sweep(base_url: str) -> None:
    """Concurrency 1 and 4, short prompts and answers, bounded in requests and time."""
    result = knee.sweep(RequestTarget(base_url), Workload(32, 8, timeout_s=60), [1, CONCURRENCY],
                        max_requests=40, max_seconds=90, seconds_per_level=1, min_requests=4)
    assert result.levels, result.stopped
    document = knee.sweep_json(base_url, {}, result.levels, knee.find_knee(result.levels),
                               "2026-12-01T00:00:00Z", result.stopped)
    knee.save_sweep(document)


def _under_load(base_url: str):
    """The probe's record of this server while CONCURRENCY requests are sent to it."""
    load = threading.Thread(target=run_requests, daemon=True, args=(
        RequestTarget(base_url), Workload(16, 64, timeout_s=90), CONCURRENCY, 2 * CONCURRENCY, 60))
    load.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the load has reached the server
            if any(s.get("is_processing") for s in _json(f"{base_url}/slots")):
                break
            time.sleep(0.1)
        record = engine_slots.probe(LiveHost(), ScanOptions())
    finally:
        load.join(150)
    (mine,) = [e for e in record.engines if e.base_url == base_url]
    return record, mine


def test_slots_against_a_concurrency_of_four(server, tmp_path, monkeypatch):
    slots, started = server
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _json(f"{started.base_url}/props")["total_slots"] == slots
    _saved_sweep(started.base_url)
    record, mine = _under_load(started.base_url)
    _, points = engine_load.saved_sweep(LiveHost(), started.base_url)
    print(f"-np {slots}: busy {mine.busy}, deferred {mine.deferred}, TTFT p50 "
          + ", ".join(f"c={p.concurrency} {p.ttft_p50_ms} ms" for p in points))
    assert mine.slots == slots and mine.slots_from == "/props total_slots"
    assert mine.ctx_total == llama.CONTEXT
    assert mine.ctx_per_slot == llama.CONTEXT // slots
    others = tuple(e for e in record.engines if e.base_url != started.base_url)
    result = ProbeResult("engine.slots", "ok", 0.0, None,
                         engine_slots.SlotsRecord((mine,)) if others else record)
    findings, errors = evaluate([RULE], [result])
    assert errors == []
    if slots == 1:
        assert mine.busy == 1 and mine.deferred is not None and mine.deferred >= 1
        assert mine.wait_ratio is not None and mine.wait_ratio > 1.5
        assert [f.rule for f in findings] == ["too-few-slots"]
        evidence = findings[0].evidence
        assert evidence["suggested_slots"] == CONCURRENCY
        assert evidence["suggested_ctx"] == CONCURRENCY * llama.CONTEXT
    else:
        assert mine.deferred == 0 and mine.sweep_concurrency is None
        assert findings == []


def test_a_capture_replays_to_the_same_record(llama_server, tmp_path):  # noqa: F811
    """What engine.slots reads (/props, /slots, /metrics twice, the process table, the
    saved sweep's absence) is kept by a capture: its replay gives the same record."""
    from doctor.seam.recorded import RecordedHost, RecordingHost

    capture = RecordingHost(LiveHost(), tmp_path / "cap")
    live = engine_slots.probe(capture, ScanOptions())
    capture.save({"level": "standard", "llm_doctor_version": "0", "model_dirs": []})
    replayed = engine_slots.probe(RecordedHost(tmp_path / "cap"), ScanOptions())
    mine = [e for e in live.engines if e.base_url == llama_server.base_url]
    assert len(mine) == 1 and mine[0].slots == llama.SLOTS
    assert replayed == live
