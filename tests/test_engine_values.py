"""Engine page values, judged (issue 16): NaN and ±Inf in every gauge, SGLang's page size 1,
and a queue with room in the KV cache.

Pages are served on loopback from tests/engine_pages (make_value_pages.py built the
scenarios): by tests/engine_pages/server.py, by a raw server, or by a real process that
carries an engine's command line (tests/engine_pages/serve_as.py), so that discovery reads
its flags from the process table as it does a real vLLM's.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.live import LiveHost
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.engine_pages.server import EngineServer
from tests.engine_pages.serve_as import SGLANG_INFO
from tests.hostile_http import RawServer, Request, response

PAGES = Path(__file__).parent / "engine_pages"
RULES = builtin_rules()
RULES_BY_ID = {r.id: r for r in RULES}
ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine.") and p.level == Level.QUICK)
KV_PROBES = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.metrics",
                                                   "engine.kv_cache"))
NOT_A_NUMBER = re.compile(r"\bNone\b|(?<![\w-])(?:nan|NaN|inf|Infinity)(?![\w-])")


@pytest.fixture
def no_local_engines(monkeypatch):
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())


def _judged(report) -> dict:
    for probe in report.probes:
        assert "internal error" not in (probe.reason or ""), (probe.name, probe.reason)
    assert report.rule_errors == []
    for finding in report.findings:
        assert not NOT_A_NUMBER.search(finding.title), finding.title
    return {p.name: p for p in report.probes}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["vllm-v1-nan-gauges", "vllm-v1-inf-gauges",
                                      "sglang-nan-gauges"])
def test_nan_and_infinite_gauges_are_no_figures_with_a_reason(no_local_engines, scenario):
    server = EngineServer().start()
    try:
        report = scan(LiveHost(), ScanOptions(level=Level.QUICK,
                                              endpoints=(f"{server.url}/{scenario}",)),
                      ENGINE_PROBES, RULES)
    finally:
        server.stop()
    probes = _judged(report)
    assert probes["engine.metrics"].status == "ok", probes["engine.metrics"].reason
    (m,) = probes["engine.metrics"].record.engines
    assert m.kv_cache_use is None and m.requests_running is None and m.requests_waiting is None
    for figure in ("kv_cache_use", "running", "waiting"):
        assert any(a.startswith(f"{figure}:") and "no finite value" in a for a in m.absent), \
            (figure, m.absent)
    (kv,) = probes["engine.kv_cache"].record.engines
    assert kv.kv_cache_use is None and kv.requests_waiting is None
    load = probes["engine.load"]
    # no figure read of the one engine is the probe's error (issue 28: it was "ok"), and it
    # says why: the gauge holds NaN or ±Inf, not "no gauge"
    assert load.status == "error", load.status
    assert "no finite value" in (load.reason or ""), load.reason
    judged = {f.rule for f in report.findings}
    assert not judged & {"kv-cache-pressure", "engine-sequence-cap-binds",
                         "engine-queue-not-kv-pressure"}, judged


def _serve(folder: str, json_pages: dict[str, object]) -> RawServer:
    pages = [(PAGES / folder / f"metrics.{i}.txt").read_bytes() for i in (1, 2)]
    scrapes = [0]

    def answer(request: Request) -> bytes:
        path = request.path.split("?")[0]
        if path == "/metrics":
            scrapes[0] += 1
            return response(200, pages[min(scrapes[0], 2) - 1], "Content-Type: text/plain")
        if path in json_pages:
            return response(200, json.dumps(json_pages[path]).encode(),
                            "Content-Type: application/json")
        return response(404, b'{"detail":"Not Found"}', "Content-Type: application/json")
    return RawServer(answer)


@pytest.mark.slow
def test_sglang_at_page_size_1_is_not_fragmentation(no_local_engines):
    """SGLang allocates KV token by token (page size 1, its default): nothing is wasted in a
    last block. Before: kv-cache-fragmentation fired, "block size 1 wastes None of the KV
    cache; use None"."""
    with _serve("sglang-calm-page-1", {"/server_info": SGLANG_INFO,
                                       "/get_server_info": SGLANG_INFO}) as server:
        report = scan(LiveHost(), ScanOptions(level=Level.QUICK, endpoints=(server.origin,)),
                      KV_PROBES, RULES)
    probes = _judged(report)
    (kv,) = probes["engine.kv_cache"].record.engines
    assert kv.kind == "sglang" and kv.block_size == 1
    assert kv.block_waste_fraction == 0.0 and kv.recommended_block_size is None
    assert report.findings == [], [f.title for f in report.findings]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Impostor:
    """tests/engine_pages/serve_as.py as a vLLM process: its command line is vLLM's."""

    def __init__(self, scenario: str, *flags: str) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, str(PAGES / "serve_as.py"), scenario, str(self.port), "--",
             "vllm", "serve", "/models/qwen3-8b", "--port", str(self.port), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)

    def __enter__(self) -> "Impostor":
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline()  # "listening", or "" when it died
        if line.strip() != "listening":
            self.__exit__()
            pytest.fail(f"serve_as.py did not start: {self.proc.stderr.read()[-500:]}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def findings(self) -> tuple[dict, list]:
        report = scan(LiveHost(), ScanOptions(level=Level.QUICK), KV_PROBES, RULES)
        probes = _judged(report)
        mine = f"127.0.0.1:{self.port}"
        (kv,) = [e for e in probes["engine.kv_cache"].record.engines if mine in e.endpoint]
        return kv, [f for f in report.findings if mine in f.title]


@pytest.mark.slow
def test_a_queue_at_max_num_seqs_with_room_in_the_cache_names_the_cap():
    """64 running, 30 waiting, KV at 0.6, vLLM started with --max-num-seqs 64: the cap binds,
    not the cache. Before: no rule fired."""
    with Impostor("vllm-v1-queue-at-max-num-seqs", "--max-num-seqs", "64") as engine:
        kv, found = engine.findings()
    assert kv.max_num_seqs == 64 and kv.requests_running == 64 and kv.requests_waiting == 30
    assert [f.rule for f in found] == ["engine-sequence-cap-binds"], [f.title for f in found]
    (finding,) = found
    assert finding.cause == "too-few-slots"
    assert ("30 requests wait with 64 running, at its cap of 64 sequences (--max-num-seqs), "
            "while the KV cache is only 60% full") in finding.title


@pytest.mark.slow
def test_the_same_queue_without_the_flag_is_the_cap_binding_at_warning():
    """Issue 28 §11: running held at 64 over both scrapes with 30 waiting and KV at 0.6 is
    the sequence cap binding, at warning, though the command line does not give the cap.
    Before: only the info rule engine-queue-not-kv-pressure fired."""
    with Impostor("vllm-v1-queue-at-max-num-seqs") as engine:
        kv, found = engine.findings()
    assert kv.max_num_seqs is None and kv.requests_running_before == 64
    assert [f.rule for f in found] == ["engine-sequence-cap-binds"], [f.title for f in found]
    (finding,) = found
    assert finding.severity.label == "warning" and finding.cause == "too-few-slots"
    assert "by a cap (--max-num-seqs) the command line does not show" in finding.title


def test_the_queue_not_kv_pressure_rule_does_not_name_kv_pressure_as_its_cause():
    """Issue 28 §11: its title says the queue is not KV pressure; its cause said it was."""
    assert RULES_BY_ID["engine-queue-not-kv-pressure"].cause == "too-few-slots"


@pytest.mark.slow
def test_a_calm_vllm_at_its_cap_stays_silent():
    with Impostor("vllm-v1-calm", "--max-num-seqs", "6") as engine:
        kv, found = engine.findings()
    assert kv.requests_running == 6 and kv.requests_waiting == 0
    assert found == [], [f.title for f in found]


@pytest.mark.slow
def test_a_counter_that_went_backwards_is_no_rate_and_says_why(no_local_engines):
    """The engine restarted between the two scrapes: its counters start again from 0."""
    first = (PAGES / "vllm-v1-calm" / "metrics.2.txt").read_text()
    second = (PAGES / "vllm-v1-calm" / "metrics.1.txt").read_text().replace(
        'vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 103.0',
        'vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 2.0')
    pages = [first, second]

    def answer(request: Request) -> bytes:
        if request.path.startswith("/metrics"):
            return response(200, pages.pop(0).encode() if len(pages) > 1 else pages[0].encode(),
                            "Content-Type: text/plain")
        return response(404, b"{}", "Content-Type: application/json")
    with RawServer(answer) as server:
        report = scan(LiveHost(), ScanOptions(level=Level.QUICK, endpoints=(server.origin,)),
                      KV_PROBES, RULES)
    probes = _judged(report)
    (m,) = probes["engine.metrics"].record.engines
    assert m.preemptions_in_window is None and m.preemptions_per_s is None
    assert m.preemptions_total == 2.0
    assert any(a.startswith("preemptions:") and "went from 103 to 2" in a for a in m.absent), m.absent
    assert m.prompt_tokens_per_s is None  # prompt tokens went back too (first page is later)
    assert not {f.rule for f in report.findings} & {"engine-preemption"}
