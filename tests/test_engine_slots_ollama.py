"""too-few-slots for Ollama: a real process that reads ``ollama serve`` on its command line,
started with OLLAMA_NUM_PARALLEL in its environment, answering a real Ollama's recorded
/api/ps (tests/engine_pages/ollama_impostor.py), with four clients connected to its port.
OLLAMA_NUM_PARALLEL=1 raises the finding; 4 stays silent. There is no Ollama here: its
pages are recorded, its process and its connections are real."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from probes.engine import slots as engine_slots
from tests.builtin_rules import builtin_rules
from tests.ollama_process import start

pytestmark = pytest.mark.timeout(120)

PAGES = Path(__file__).parent / "engine_pages"
CLIENTS = 4
RULE = next(r for r in builtin_rules() if r.id == "too-few-slots")


def _impostor(tmp_path: Path, parallel: str) -> tuple[subprocess.Popen, int]:
    return start(tmp_path, "ollama", {"OLLAMA_NUM_PARALLEL": parallel, "OLLAMA_MAX_QUEUE": "512"})


def _clients(port: int) -> list[socket.socket]:
    """CLIENTS connections, each with a generate request the server holds open."""
    body = b'{"model":"llama3.2:3b","prompt":"Why is the sky blue?"}'
    head = (f"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sockets = []
    for _ in range(CLIENTS):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(head + body)
        sockets.append(client)
    return sockets


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["1", "4"])
def test_num_parallel_against_four_clients(tmp_path, parallel):
    process, port = _impostor(tmp_path, parallel)
    clients: list[socket.socket] = []
    try:
        clients = _clients(port)
        record = engine_slots.probe(LiveHost(), ScanOptions())
    finally:
        for client in clients:
            client.close()
        process.kill()
        process.wait(10)
    (mine,) = [e for e in record.engines if e.pid == process.pid]
    assert mine.kind == "ollama" and mine.base_url == f"http://127.0.0.1:{port}"
    assert mine.slots == int(parallel) and mine.slots_from == "OLLAMA_NUM_PARALLEL"
    assert mine.offered == CLIENTS and mine.offered_from == "established connections"
    assert mine.models == ("llama3.2:3b",) and mine.ctx_per_slot == 4096
    findings, errors = evaluate([RULE], [ProbeResult("engine.slots", "ok", 0.0, None,
                                                     engine_slots.SlotsRecord((mine,)))])
    assert errors == []
    if parallel == "1":
        assert [f.rule for f in findings] == ["too-few-slots"]
        assert findings[0].evidence["deferred"] == CLIENTS - 1
        assert findings[0].evidence["suggested_slots"] == CLIENTS
        assert findings[0].severity.label == "critical"
    else:
        assert findings == [] and mine.deferred == 0


def test_a_recording_keeps_this_value_and_masks_the_others(tmp_path):
    """A capture keeps the names in /proc/<pid>/environ and the values of the variables
    judged (doctor.redact.KEPT_ENV), OLLAMA_NUM_PARALLEL among them; any other value is
    masked, and a masked one is no value, with the reason."""
    from doctor.seam.recorded import RecordedHost, RecordWriter

    writer = RecordWriter(tmp_path)
    writer.file("/proc/77/environ", "HOME=/root\0OLLAMA_NUM_PARALLEL=1\0OLLAMA_ORIGINS=*\0")
    writer.save({"hostname": "t", "captured_at": "2026-12-01T00:00:00Z", "level": "quick",
                 "llm_doctor_version": "0", "model_dirs": []})
    recorded = RecordedHost(tmp_path)
    assert engine_slots.environ_value(recorded, 77, "OLLAMA_NUM_PARALLEL") == ("1", None)
    value, absent = engine_slots.environ_value(recorded, 77, "OLLAMA_ORIGINS")
    assert value is None and absent is not None and "masked" in absent
    value, absent = engine_slots.environ_value(LiveHost(), os.getpid(), "NO_SUCH_VARIABLE_H16")
    assert value is None and absent is not None and "not set" in absent
