"""engine.capacity on recorded hosts written with RecordWriter: the engine's own model and card."""

from __future__ import annotations

from pathlib import Path

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
