"""engine.discovery: command lines, endpoints, recorded hosts, and a real llama-server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from doctor.rules.loader import builtin_files, load_rules
from probes.registry import by_name
from doctor.scan import scan
from probes.engine.discovery import discover
from probes.helpers.engine_named import public_base
from probes.helpers.engine_flags import _from_flags
from tests import engine_pages
from tests.conftest import FIXTURE_HOSTS

gemma_gguf = engine_pages.gemma_gguf  # a fixture
ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine."))
LLAMA_SERVER = Path(os.environ.get("LLM_DOCTOR_CACHE", Path.home() / ".cache" / "llm-doctor")) \
    / "llama-server-0.3.36" / "bin" / "llama-server"


def test_vllm_flags():
    got = _from_flags("vllm", "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model "
                      "/models/llama-3-8b --gpu-memory-utilization=0.97 --max-num-seqs 256 "
                      "--max-num-batched-tokens 2048 --block-size 32 --max-model-len 32768 "
                      "--kv-cache-dtype fp8 -tp 2 --enforce-eager --port 8001 --api-key ***")
    assert got["gpu_memory_utilization"] == 0.97 and got["max_num_seqs"] == 256
    assert got["max_num_batched_tokens"] == 2048 and got["block_size"] == 32
    assert got["max_model_len"] == 32768 and got["kv_cache_dtype"] == "fp8"
    assert got["tensor_parallel_size"] == 2 and got["enforce_eager"] is True
    assert got["port"] == 8001 and got["api_key_set"] is True
    assert got["model_path"] == "/models/llama-3-8b"


def test_vllm_serve_positional_model_and_no_key():
    got = _from_flags("vllm", "vllm serve /models/qwen3-8b --served-model-name qwen")
    assert got["model_path"] == "/models/qwen3-8b" and got["model"] == "qwen"
    assert got["api_key_set"] is False and got["enforce_eager"] is None


@pytest.mark.parametrize("kind,cmdline,want", [
    ("sglang", "python -m sglang.launch_server --model-path /m --mem-fraction-static 0.9 "
               "--max-running-requests 64 --context-length 8192 --tp 4 --disable-cuda-graph",
     {"gpu_memory_utilization": 0.9, "max_num_seqs": 64, "max_model_len": 8192,
      "tensor_parallel_size": 4, "enforce_eager": True}),
    ("tgi", "text-generation-launcher --model-id /data/m --max-concurrent-requests 128 "
            "--max-total-tokens 4096 --num-shard 2 --port 3001",
     {"max_num_seqs": 128, "max_model_len": 4096, "tensor_parallel_size": 2, "port": 3001}),
    ("llama.cpp", "llama-server -m /m.gguf -c 8192 -np 4 -b 512 -ctk q8_0 --port 8081",
     {"max_model_len": 8192, "max_num_seqs": 4, "max_num_batched_tokens": 512,
      "kv_cache_dtype": "q8_0", "port": 8081, "model_path": "/m.gguf"}),
])
def test_other_engines_flags(kind, cmdline, want):
    got = _from_flags(kind, cmdline)
    assert {k: got[k] for k in want} == want


def test_endpoint_urls_lose_credentials_and_page_paths():
    assert public_base("http://:sk-1@127.0.0.1:8000/metrics") == "http://127.0.0.1:8000"
    assert public_base("127.0.0.1:8000/v1") == "http://127.0.0.1:8000"
    assert public_base("http://[::1]:30000/") == "http://[::1]:30000"
    assert public_base("http://gw.local/llm/v1/models") == "http://gw.local/llm"


def test_recorded_vllm_host_engine_config_from_flags_and_its_page():
    host = RecordedHost(FIXTURE_HOSTS / "vllm-v1-kv-pressure")
    host.new_scan()
    (engine,) = discover(host, ScanOptions())
    assert (engine.pid, engine.kind, engine.base_url) == (48213, "vllm", "http://127.0.0.1:8000")
    assert engine.max_num_seqs == 256 and engine.gpu_memory_utilization == 0.9
    assert engine.block_size == 16 and engine.api_key_set is True
    assert engine.model_path == "/models/llama-3-8b-instruct"
    assert engine.config_from == ("flags", "/metrics") and engine.error is None


@pytest.fixture
def llama_server(gemma_gguf):
    """The real llama-server (.ci/build-llama-server) serving gemma on an ephemeral port."""
    if not LLAMA_SERVER.is_file():
        pytest.skip(f"{LLAMA_SERVER} not built: run .ci/build-llama-server")
    proc = subprocess.Popen([str(LLAMA_SERVER), "-m", str(gemma_gguf), "--host", "127.0.0.1",
                             "--port", "0", "--metrics", "-c", "2048", "-np", "2", "-t", "1",
                             "--no-webui"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    port = None
    while port is None and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(match.group(1)) if match else None
    if port is None:
        proc.kill()
        pytest.fail("llama-server did not start listening within 60 s")
    yield proc, port
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.mark.live
def test_a_running_llama_server_is_found_without_being_told(llama_server, gemma_gguf):
    proc, port = llama_server
    rules = load_rules(builtin_files(), by_name())
    report = scan(LiveHost(), ScanOptions(level=Level.QUICK), ENGINE_PROBES, rules)
    probes = {p.name: p for p in report.probes}
    engine = next(e for e in probes["engine.discovery"].record.engines if e.pid == proc.pid)
    assert engine.kind == "llama.cpp" and engine.base_url == f"http://127.0.0.1:{port}"
    assert engine.listen == (f"127.0.0.1:{port}",)
    assert engine.max_num_seqs == 2 and engine.max_model_len == 1024  # 2048 over 2 slots
    assert engine.model_path == str(gemma_gguf) and engine.api_key_set is False
    assert "/props" in engine.config_from
    metrics = next(m for m in probes["engine.metrics"].record.engines
                   if m.endpoint == f"http://127.0.0.1:{port}/metrics")
    assert metrics.kind == "llama.cpp" and metrics.requests_waiting == 0
    assert "ttft: llama.cpp exports no time-to-first-token histogram" in metrics.absent
    assert metrics.prompt_tokens_per_s == 0 and metrics.interval_s >= 2


def test_a_worker_process_yields_to_the_server_that_holds_the_socket(monkeypatch):
    from probes.helpers.processes import Process

    table = (Process(100, "VLLM::EngineCore", "VLLM::EngineCore", "vllm", ()),
             Process(90, "python3", "vllm serve /models/m --port 8000 --max-num-seqs 64", "vllm",
                     ("0.0.0.0:8000",)),
             Process(110, "VLLM::Worker_TP1", "VLLM::Worker_TP1", "vllm", ()))
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: table)
    monkeypatch.setattr("probes.helpers.engine_discovery.ask_engine", lambda host, e, headers, reached: e)
    host = LiveHost()
    host.new_scan()
    (engine,) = discover(host, ScanOptions())
    assert engine.pid == 90 and engine.max_num_seqs == 64 and engine.base_url == "http://127.0.0.1:8000"
