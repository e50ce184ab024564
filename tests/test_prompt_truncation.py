"""prompt-truncation, with pages served on loopback by real processes.

* Ollama: a real process whose command line reads ``ollama serve`` (the impostor of
  tests/engine_pages/ollama_impostor.py) answering /api/ps from tests/engine_pages/
  ollama-num-ctx-2048 (the model loaded at num_ctx 2048) or ollama-num-ctx-8192, and a load
  sweep saved for its URL that sent 3000-token prompts: 2048 fires, 8192 stays silent;
* vLLM: the calm recorded page of tests/engine_pages/vllm-v1-calm (max_model_len 4096) with
  its prompt-length histogram edited so that most prompts sit above 2000 tokens, just under
  the limit: fires; the page as recorded (1 prompt of 22 there) stays silent.
"""

from __future__ import annotations

import json
from dataclasses import replace
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.workload.knee import knee_path
from probes.engine import truncation
from tests.builtin_rules import builtin_rules
from tests.ollama_process import start

pytestmark = pytest.mark.timeout(60)

PAGES = Path(__file__).parent / "engine_pages"
RULE = next(r for r in builtin_rules() if r.id == "prompt-truncation")


def _findings(engine: truncation.EngineTruncation):
    findings, errors = evaluate([RULE], [ProbeResult("engine.truncation", "ok", 0.0, None,
                                                     truncation.TruncationRecord((engine,)))])
    assert errors == []
    return findings


def _ollama(tmp_path: Path, pages: str, env_extra: dict[str, str]) -> tuple[subprocess.Popen, int]:
    return start(tmp_path, pages, env_extra)


def _save_sweep(base_url: str, prompt_tokens: int) -> None:
    path = knee_path(base_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "endpoint": base_url, "levels": [],
                                "settings": {"api": "completions", "prompt_tokens": prompt_tokens}}))


@pytest.mark.parametrize("ctx", [2048, 8192])
def test_ollama_context_against_the_sweep_prompts(tmp_path, monkeypatch, ctx):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    process, port = _ollama(tmp_path, f"ollama-num-ctx-{ctx}", {})
    try:
        base = f"http://127.0.0.1:{port}"
        _save_sweep(base, 3000)
        record = truncation.probe(LiveHost(), ScanOptions())
    finally:
        process.kill()
        process.wait(10)
    (mine,) = [e for e in record.engines if e.base_url == base]
    assert mine.kind == "ollama" and mine.limit_tokens == ctx
    assert mine.limit_from == "/api/ps context_length" and mine.sweep_prompt_tokens == 3000
    findings = _findings(mine)
    if ctx == 2048:
        assert [f.rule for f in findings] == ["prompt-truncation"]
        assert "a context of 2048 tokens" in findings[0].title
        assert "prompts of 3000 tokens sent" in findings[0].title
    else:
        assert findings == []


def test_ollama_with_no_model_loaded_reads_its_environment(tmp_path):
    """No model in /api/ps: the context comes from OLLAMA_CONTEXT_LENGTH, one variable read."""
    empty = tmp_path / "pages"
    empty.mkdir()
    (empty / "api_ps.json").write_text('{"models":[]}')
    (tmp_path / "run").mkdir()
    process, port = _ollama(tmp_path / "run", str(empty), {"OLLAMA_CONTEXT_LENGTH": "16384"})
    try:
        record = truncation.probe(LiveHost(), ScanOptions())
    finally:
        process.kill()
        process.wait(10)
    (mine,) = [e for e in record.engines if e.base_url == f"http://127.0.0.1:{port}"]
    assert (mine.limit_tokens, mine.limit_from) == (16384, "OLLAMA_CONTEXT_LENGTH")


class _Vllm(BaseHTTPRequestHandler):
    metrics = ""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/metrics":
            body, kind = self.metrics, "text/plain; version=0.0.4"
        elif self.path == "/v1/models":
            body, kind = json.dumps({"object": "list", "data": [{
                "id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm",
                "max_model_len": 4096}]}), "application/json"
        else:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _piled(page: str) -> str:
    """The calm page with 180 of 200 prompts between 2000 tokens and the 4096 limit."""
    def bucket(match: re.Match) -> str:
        le = float(match.group(2))
        value = 0 if le < 1000 else 20 if le <= 2000 else 200
        return f"{match.group(1)}{value}.0"
    page = re.sub(r'(vllm:request_prompt_tokens_bucket\{[^}]*le="([^"]+)"[^}]*\} )\S+',
                  lambda m: bucket(m) if m.group(2) != "+Inf" else f"{m.group(1)}200.0", page)
    return re.sub(r"(vllm:request_prompt_tokens_count\{[^}]*\} )\S+", r"\g<1>200.0", page)


@pytest.mark.parametrize("piled", [True, False])
def test_vllm_prompts_piled_under_max_model_len(piled):
    page = (PAGES / "vllm-v1-calm" / "metrics.2.txt").read_text()
    _Vllm.metrics = _piled(page) if piled else page
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Vllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        record = truncation.probe(LiveHost(), ScanOptions(endpoints=(base,)))
    finally:
        server.shutdown()
        server.server_close()
    (mine,) = [e for e in record.engines if e.base_url == base]
    assert mine.kind == "vllm" and mine.limit_tokens == 4096
    assert mine.top_bucket_from == 2000.0
    findings = _findings(mine)
    if piled:
        assert (mine.histogram_requests, mine.top_bucket_requests) == (200, 180)
        assert [f.rule for f in findings] == ["prompt-truncation"]
        assert "90% of prompts above 2000 tokens" in findings[0].title
    else:
        assert (mine.histogram_requests, mine.top_bucket_requests) == (22, 1)
        assert findings == []


def test_a_recording_keeps_ollama_context_length(tmp_path):
    """A capture keeps OLLAMA_CONTEXT_LENGTH's value (doctor.redact.KEPT_ENV): a replay of
    an Ollama with no model loaded judges the same context as the live scan."""
    from doctor.seam.recorded import RecordedHost, RecordWriter
    from probes.helpers.engine_flags import blank

    writer = RecordWriter(tmp_path)
    writer.file("/proc/77/environ", "HOME=/root\0OLLAMA_CONTEXT_LENGTH=2048\0SECRET=x\0")
    writer.save({"hostname": "t", "captured_at": "2026-12-01T00:00:00Z", "level": "quick",
                 "llm_doctor_version": "0", "model_dirs": []})
    engine = replace(blank("http://127.0.0.1:11434"), kind="ollama", pid=77)
    assert truncation._ollama_limit(RecordedHost(tmp_path), engine) == (
        2048, "OLLAMA_CONTEXT_LENGTH", None)


class _Llama(BaseHTTPRequestHandler):
    n_ctx = 2048

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        pages = {"/props": {"total_slots": 4, "model_path": "/models/gemma.gguf",
                            "default_generation_settings": {"n_ctx": self.n_ctx}},
                 "/slots": [{"id": i, "is_processing": False, "n_ctx": self.n_ctx} for i in range(4)]}
        if self.path not in pages:
            self.send_error(404)
            return
        data = json.dumps(pages[self.path]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("n_ctx", [2048, 8192])
def test_llama_cpp_slot_context_against_the_sweep_prompts(tmp_path, monkeypatch, n_ctx):
    """llama-server -c 8192 -np 4 gives each slot 2048 tokens (its /props n_ctx): the sweep's
    3000-token prompts do not fit one; -c 32768 -np 4 (8192 a slot) stays silent."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _Llama.n_ctx = n_ctx
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Llama)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        _save_sweep(base, 3000)
        record = truncation.probe(LiveHost(), ScanOptions(endpoints=(base,)))
    finally:
        server.shutdown()
        server.server_close()
    (mine,) = [e for e in record.engines if e.base_url == base]
    assert (mine.kind, mine.limit_tokens, mine.limit_from) == ("llama.cpp", n_ctx, "/props n_ctx (one slot)")
    findings = _findings(mine)
    assert [f.rule for f in findings] == (["prompt-truncation"] if n_ctx == 2048 else [])


def test_a_limit_not_known_says_why_for_the_rule_and_why():
    """vllm-v1-calm names no context length: limit_tokens None with limit_absent as its
    reason in `missing`, which `why` shows instead of "has no value"."""
    from doctor.model import ScanOptions
    from doctor.seam.recorded import RecordedHost
    from tests.conftest import FIXTURE_HOSTS
    record = truncation.probe(RecordedHost(FIXTURE_HOSTS / "vllm-v1-calm"), ScanOptions())
    (engine,) = record.engines
    assert engine.limit_tokens is None and engine.limit_absent
    assert engine.missing == {"limit_tokens": engine.limit_absent}
