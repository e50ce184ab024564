"""What the fleet rules group and compare hosts by, on /metrics: one
llm_doctor_host_fleet_info{gpu_model, gpu_count, driver_version} per host, and the engine's
throughput at its knee (llm_doctor_engine_knee_output_tokens_per_second)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pytest

from doctor.daemon.exporter import DoctorCollector, Snapshot
from doctor.model import ProbeResult, ScanOptions
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from doctor.workload import knee
from probes.engine import load as engine_load
from probes.gpu import inventory
from tests.conftest import REPO
from tests.stream_server import Behaviour, StreamServer, only_named_endpoints

HOSTS = REPO / "tests/fixtures/hosts"


def _series(*results: ProbeResult) -> dict[str, list[tuple[dict[str, str], float]]]:
    collector = DoctorCollector({})
    collector.publish(Snapshot(results={r.name: r for r in results}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _inventory(host: str) -> ProbeResult:
    record = inventory.probe(RecordedHost(str(HOSTS / host)), ScanOptions())
    return ProbeResult("gpu.inventory", "ok", 0.01, None, record)


def test_one_fleet_info_series_per_host_with_its_gpu_model_count_and_driver():
    one = _series(_inventory("h100-pcie-fleet-a"))["llm_doctor_host_fleet_info"]
    assert one == [({"gpu_model": "NVIDIA H100 PCIe", "gpu_count": "1",
                     "driver_version": "550.90.07"}, 1.0)]
    eight = _series(_inventory("h100-sxm-8x-nvswitch"))["llm_doctor_host_fleet_info"]
    assert [labels for labels, _ in eight] == [
        {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": "8", "driver_version": "550.90.07"}]


def test_a_host_with_a_failing_gpu_is_still_one_series_of_its_model():
    """gpu-row-remap-xid79: GPU 1 answers GPU_IS_LOST to its sensor reads, not its name."""
    (labels, _), = _series(_inventory("gpu-row-remap-xid79"))["llm_doctor_host_fleet_info"]
    assert labels == {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": "2",
                      "driver_version": "550.90.07"}


def test_the_knee_throughput_is_the_usable_level_at_the_knee():
    points = (engine_load.SweepPoint(1, 410.0, 120.0, True),
              engine_load.SweepPoint(2, 780.5, 130.0, True),
              engine_load.SweepPoint(4, 790.0, 260.0, False))
    assert engine_load.knee_throughput(2, points) == 780.5
    assert engine_load.knee_throughput(4, points) is None  # not judged from that level
    assert engine_load.knee_throughput(None, points) is None


@pytest.mark.slow
def test_a_saved_sweep_exports_its_knee_throughput(monkeypatch, tmp_path):
    """A sweep saved by 'llm-doctor load' for an engine served on loopback: its knee and
    the throughput measured there reach /metrics."""
    only_named_endpoints(monkeypatch)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = StreamServer(Behaviour()).start()
    try:
        _check_saved_sweep(server.base_url)
    finally:
        server.stop()


def _check_saved_sweep(url: str) -> None:
    levels = [{"concurrency": c, "output_tokens_per_s": t, "ttft_p50_ms": 80.0}
              for c, t in ((1, 400.0), (2, 760.0), (4, 772.0), (8, 770.0))]
    path = knee.knee_path(url)
    path.parent.mkdir(parents=True)
    path.write_text(__import__("json").dumps({
        "schema": knee.SCHEMA, "endpoint": url, "measured_at": "2026-11-29T10:00:00Z",
        "levels": levels, "knee": {"status": "found", "concurrency": 2}}))
    record = engine_load.probe(LiveHost(), ScanOptions(endpoints=(url,)))
    (engine,) = record.engines
    assert (engine.knee_concurrency, engine.knee_output_tokens_per_s) == (2, 760.0), engine
    series = _series(ProbeResult("engine.load", "ok", 0.01, None, record))
    ((labels, value),) = series["llm_doctor_engine_knee_output_tokens_per_second"]
    assert value == 760.0 and labels["endpoint"] == url
