"""model-offloaded-to-cpu: engine.offload on recorded hosts (tests/fixtures/build_offload_hosts.py)
and on the real llama-server the suite builds, started with ``-ngl 0``.

The recorded hosts carry an A100 or an A10 in NVML and the EPYC 9654's STREAM figure, so the
estimate is checked by hand: time/token = gpu_bytes / 2039 GB/s + cpu_bytes / 362.18 GB/s.
On this machine there is no GPU: ``-ngl 0`` is all on the CPU by design, and the rule stays
silent with the reason in the record; where a GPU is present the same server is offloaded
and the rule fires."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_offload_hosts as builder
from tests.llama_server import start, stop

RULES = [r for r in builtin_rules() if r.id == "model-offloaded-to-cpu"]
# what the estimate needs: the GPU's, the engine's and host.memory_bandwidth's reads
SPECS = tuple(p for p in PROBES if p.name in ("engine.discovery", "host.memory_bandwidth",
                                              "engine.offload"))


def _scan(host, level: Level = Level.STANDARD):
    report = scan(host, ScanOptions(level=level, requests=False), SPECS, RULES)
    results = {p.name: p for p in report.probes}
    assert report.rule_errors == [], report.rule_errors
    assert results["engine.offload"].status == "ok", results["engine.offload"].reason
    return results["engine.offload"].record, report.findings


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("offload-hosts")
    for name in builder.HOSTS:
        builder.build(root, name)
    return root


@pytest.mark.slow
def test_llama_cpp_ngl_20_of_33_layers_fires_with_the_estimate(hosts):
    record, findings = _scan(RecordedHost(hosts / "a100-llama-cpp-ngl-20"))
    (item,) = record.engines
    assert (item.layers, item.layers_gpu, item.offload_from) == (33, 20, "-ngl 20")
    assert item.cpu_share == round(13 / 33, 3)
    assert item.gpu_bandwidth_gbps == 2039.0 and item.cpu_bandwidth_gbps == 362.18
    cpu = item.total_bytes * 13 / 33
    expected = 1 / ((item.total_bytes - cpu) / 1e9 / 2039.0 + cpu / 1e9 / 362.18)
    assert item.tokens_per_s == pytest.approx(expected, abs=0.1)
    assert item.tokens_per_s_on_gpu == pytest.approx(1 / (item.total_bytes / 1e9 / 2039.0), abs=0.1)
    (finding,) = findings
    assert finding.severity.name == "WARNING"
    assert "39% of Meta-Llama-3-8B-Instruct on the CPU (-ngl 20)" in finding.title
    assert f"decode estimated at {item.tokens_per_s} tokens/s" in finding.title


@pytest.mark.slow
def test_llama_cpp_ngl_999_is_silent(hosts):
    record, findings = _scan(RecordedHost(hosts / "a100-llama-cpp-ngl-999"))
    (item,) = record.engines
    assert (item.layers, item.layers_gpu, item.cpu_share) == (33, 33, 0.0)
    assert findings == []


@pytest.mark.slow
def test_ollama_with_12_of_33_in_vram_is_critical_and_its_partner_silent(hosts):
    record, findings = _scan(RecordedHost(hosts / "a10-ollama-12-of-33"))
    (item,) = record.engines
    assert item.offload_from == "/api/ps size_vram" and item.cpu_share == 0.636
    assert item.gpu_name == "NVIDIA A10" and item.gpu_bandwidth_gbps == 600.1
    assert [f.severity.name for f in findings] == ["CRITICAL"]
    assert "llama3.1:70b-instruct-q6_K" in findings[0].title
    record, findings = _scan(RecordedHost(hosts / "a10-ollama-all-gpu"))
    assert record.engines[0].cpu_share == 0.0 and findings == []


def test_vllm_cpu_offload_gb_streams_over_pcie(hosts):
    record, findings = _scan(RecordedHost(hosts / "a100-vllm-cpu-offload-gb-8"))
    (item,) = record.engines
    assert item.cpu_bytes == 8 << 30 and item.total_bytes == 26_031_728_640
    assert item.cpu_bandwidth_gbps == 31.5  # the PCIe Gen4 x16 link, below the host's 362
    assert item.slowdown is not None and item.slowdown > 10
    assert [f.rule for f in findings] == ["model-offloaded-to-cpu"]


def test_at_level_quick_the_share_is_judged_and_the_estimate_says_why_absent(hosts):
    record, findings = _scan(RecordedHost(hosts / "a100-llama-cpp-ngl-20"), Level.QUICK)
    (item,) = record.engines
    assert item.tokens_per_s is None and "--level standard" in item.missing["tokens_per_s"]
    (finding,) = findings
    assert "decode estimated" not in finding.title
    assert "--level standard" in finding.missing["tokens_per_s"]


class Recapture(RecordingHost):
    def measure(self, name, fn):
        return super().measure(name, lambda: self.live.measure(name, fn))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(builder.HOSTS))
def test_capture_of_an_offload_host_replays_the_same(name, hosts, tmp_path):
    original, found = _scan(RecordedHost(hosts / name))
    capture = Recapture(RecordedHost(hosts / name), tmp_path / "cap")
    _scan(capture)
    capture.save({"level": "standard"})
    replayed, again = _scan(RecordedHost(tmp_path / "cap"))
    assert replayed == original
    assert [(f.rule, f.severity) for f in found] == [(f.rule, f.severity) for f in again]


@pytest.mark.live
@pytest.mark.timeout(300)
def test_live_llama_server_ngl_0(tmp_path):
    """The real llama-server, every layer kept on the CPU. Without a GPU that is the only
    way it can run: silent, the record says why. With one, it is an offload: it fires."""
    server = start(tmp_path, "-ngl", "0")
    try:
        host = RecordingHost(LiveHost(), tmp_path / "cap")
        record, findings = _scan(host, Level.QUICK)
        host.save({"level": "quick"})
        replayed, _ = _scan(RecordedHost(tmp_path / "cap"), Level.QUICK)
    finally:
        stop(server)
    (item,) = [e for e in record.engines if e.engine.endswith(f"pid {server.pid}")]
    assert item.offload_from == "-ngl 0" and item.layers_gpu == 0
    assert item.layers is not None and item.cpu_share == 1.0
    mine = [f for f in findings if f.evidence.get("engine") == item.engine]
    if item.gpu_absent is not None:  # this machine: no NVIDIA driver, no GPU
        assert mine == []
        assert "no GPU on this host" in item.missing["tokens_per_s"]
    else:
        assert [f.severity.name for f in mine] == ["CRITICAL"]
    assert [e for e in replayed.engines if e.engine == item.engine] == [item]


def _edited(hosts: Path, tmp_path: Path, name: str, edit) -> RecordedHost:
    import shutil

    root = tmp_path / name
    shutil.copytree(hosts / name, root, symlinks=True)
    edit(root)
    return RecordedHost(root)


@pytest.mark.slow
@pytest.mark.parametrize("value", ["1e308", "inf", "-4", "eight", "nan"])
def test_a_cpu_offload_gb_that_is_no_size_is_named(hosts, tmp_path, value):
    def edit(root: Path) -> None:
        path = root / "fs" / "proc" / str(builder.PID) / "cmdline"
        path.write_text(path.read_text().replace("--cpu-offload-gb\0008\0",
                                                 f"--cpu-offload-gb\0{value}\0"))

    record, findings = _scan(_edited(hosts, tmp_path, "a100-vllm-cpu-offload-gb-8", edit))
    (item,) = record.engines
    assert item.cpu_bytes is None and "is not a size in GiB" in item.missing["cpu_bytes"]
    assert findings == []


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-1", "twenty", "1e999", "20.5"])
def test_an_ngl_that_is_no_count_is_named(hosts, tmp_path, value):
    def edit(root: Path) -> None:
        path = root / "fs" / "proc" / str(builder.PID) / "cmdline"
        path.write_text(path.read_text().replace("-ngl\00020\0", f"-ngl\0{value}\0"))

    record, findings = _scan(_edited(hosts, tmp_path, "a100-llama-cpp-ngl-20", edit))
    (item,) = record.engines
    assert item.layers_gpu is None and "is not a count" in item.missing["layers_gpu"]
    assert findings == []


@pytest.mark.slow
@pytest.mark.parametrize("body", [
    "not json", "[]", '{"models": {"a": 1}}', '{"models": [1, null, "x"]}',
    '{"models": [{"name": "m", "size": NaN, "size_vram": 5}]}',
    '{"models": [{"name": "m", "size": 10, "size_vram": 1e999}]}',
    '{"models": [{"name": ["m"], "size": -10, "size_vram": -20}]}',
])
def test_a_hostile_api_ps_is_named_never_a_crash(hosts, tmp_path, body):
    def edit(root: Path) -> None:
        import json

        entries = json.loads((root / "http.json").read_text())
        (entry,) = [e for e in entries if e["url"].endswith("/api/ps")]
        (root / entry["body_file"]).write_text(body)

    record, findings = _scan(_edited(hosts, tmp_path, "a10-ollama-12-of-33", edit))
    assert findings == []
    assert record.not_read or all(e.cpu_share is None for e in record.engines)
