"""engine.progress and engine-stalled against the real llama.cpp llama-server
(tests/llama_server.py): in the middle of one long generation, its token counters stand still (llama.cpp adds to them when a slot's task ends)
while its llama_decode() counter moves, so the rule reads the latter and stays silent. A
rule that read llama.cpp's tokens would call every long generation a stall."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from probes.engine import progress
from tests import llama_server as llama
from tests.builtin_rules import builtin_rules

pytestmark = [pytest.mark.live, pytest.mark.machine, pytest.mark.timeout(180)]

RULE = next(r for r in builtin_rules() if r.id == "engine-stalled")


def _record(base_url: str) -> progress.ProgressRecord:
    """This server's engine only: the scan also finds the other llama-servers of this machine."""
    found = progress.probe(LiveHost(), ScanOptions(endpoints=(base_url,), requests=False))
    return progress.ProgressRecord(tuple(e for e in found.engines if e.endpoint == f"{base_url}/metrics"))


def _stalled(record: progress.ProgressRecord) -> list:
    found, errors = evaluate([RULE], [ProbeResult("engine.progress", "ok", 0.0, None, record)])
    assert errors == []
    return found


def _generate(base_url: str) -> None:
    """One generation longer than the scan's window (900 tokens, end of text ignored)."""
    body = json.dumps({"prompt": "Once upon a time", "n_predict": 900, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{base_url}/completion", body, {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=120).read()
    except OSError:  # the server is stopped under it at the test's end
        pass


def test_llama_server_mid_generation_is_not_a_stall(tmp_path):
    server = llama.start(tmp_path)
    try:
        threading.Thread(target=_generate, args=(server.base_url,), daemon=True).start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until its slot is busy
            with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=5) as page:
                if "llamacpp:requests_processing 1" in page.read().decode():
                    break
            time.sleep(0.1)
        busy = _record(server.base_url)
        [engine] = busy.engines
        print("mid-generation:", engine)
        assert engine.requests_running_before == engine.requests_running == 1
        # llama.cpp counts a request's generated tokens at its end (its prompt's, 5 tokens,
        # when the prompt is in): a window holds far more steps than counted tokens
        assert engine.tokens_in_window is not None and engine.tokens_in_window <= 5
        assert engine.steps_in_window and engine.steps_in_window > 20
        assert _stalled(busy) == []
    finally:  # killed, not terminated: llama-server finishes the generation first (10 s)
        server.process.kill()
        server.process.wait(10)
