"""The exporter turns any probe record into metrics, and promtool accepts the page."""

from __future__ import annotations

import base64
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from doctor.daemon.exporter import DoctorCollector, Snapshot, flatten, metric_name
from doctor.daemon.server import serve
from doctor.daemon.settings import Settings
from doctor.model import ProbeResult
from tests.daemon_helpers import finding, need


@dataclass(frozen=True, slots=True)
class Clocks:
    sm_mhz: int
    max_sm_mhz: int | None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: int


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    name: str
    temp_c: int
    power_draw_w: float
    persistence: bool
    clocks: Clocks
    throttle_reasons: dict[str, int]
    processes: tuple[GpuProcess, ...]
    latency_ms: float


@dataclass(frozen=True, slots=True)
class GpuRecord:
    driver_version: str
    count: int
    devices: tuple[Gpu, ...]
    topology: tuple[tuple[str, ...], ...]


def record() -> GpuRecord:
    gpu = Gpu(0, "GPU-abc", "H100", 71, 350.5, True, Clocks(1980, None), {"thermal": 1},
              (GpuProcess(4242, "python3", 70000),), 2.5)
    return GpuRecord("550.54", 1, (gpu,), (("", "GPU0"), ("GPU0", "X")))


def test_nested_records_become_labelled_gauges_with_units_in_names():
    samples = {(name, labels): value for name, labels, value in flatten("gpu.devices", record())}
    gpu = (("uuid", "GPU-abc"), ("index", "0"), ("name", "H100"))
    assert samples[("llm_doctor_gpu_devices_devices_temp_c", gpu)] == 71
    assert samples[("llm_doctor_gpu_devices_devices_clocks_sm_mhz", gpu)] == 1980
    assert samples[("llm_doctor_gpu_devices_devices_persistence", gpu)] == 1.0
    assert samples[("llm_doctor_gpu_devices_devices_throttle_reasons", (*gpu, ("key", "thermal")))] == 1
    process = (*gpu, ("pid", "4242"), ("processes_name", "python3"))
    assert samples[("llm_doctor_gpu_devices_devices_processes_used_mib", process)] == 70000
    # milliseconds become the base unit, with the value scaled
    assert samples[("llm_doctor_gpu_devices_devices_latency_seconds", gpu)] == 0.0025
    # _count is reserved for histograms: renamed; None (not reported) is absent, not zero
    assert ("llm_doctor_gpu_devices_number", ()) in samples
    assert not any("max_sm_mhz" in name for name, _ in samples)
    # strings that are not identities never become labels or values
    assert not any("driver_version" in name for name, _ in samples)


@pytest.mark.parametrize("parts, name", [
    (("host.cpu_load", "window_s"), "llm_doctor_host_cpu_load_window_seconds"),
    (("host.limits", "engine_count"), "llm_doctor_host_limits_engine_number"),
    (("engine.vllm", "requests_total"), "llm_doctor_engine_vllm_requests_overall"),
    (("engine.metrics", "tokens_per_s"), "llm_doctor_engine_metrics_tokens_per_second"),
    (("gpu.topology", "b"), "llm_doctor_gpu_topology_b"),  # a pair's end, not bytes
])
def test_metric_names_pass_promtool_lint_rules(parts, name):
    assert metric_name(*parts) == name


def _collector() -> DoctorCollector:
    collector = DoctorCollector({"gpu.devices": "GPUs: temperatures, clocks"})
    collector.publish(Snapshot(
        results={"gpu.devices": ProbeResult("gpu.devices", "ok", 0.12, None, record()),
                 "host.broken": ProbeResult("host.broken", "timeout", 10.0, "no result")},
        findings=[finding(), finding(key="other pid 7")],
        alerts=[("cpu-contention", "stress pid 42", "cpu-contention", "warning", "firing")],
        evaluated_at=1_700_000_000.0, evaluations=3))
    return collector


def _scrape(url: str, headers: dict | None = None, context=None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.read().decode()


def _served(settings: Settings):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_collector())
    return serve(registry, settings)


def test_a_real_scrape_passes_promtool_check_metrics():
    promtool = need("promtool", "prometheus")
    server, _ = _served(Settings(listen="127.0.0.1:0"))
    try:
        page = _scrape(f"http://127.0.0.1:{server.server_address[1]}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert 'llm_doctor_probe_success{probe="host.broken"} 0.0' in page
    assert 'llm_doctor_probe_duration_seconds{probe="gpu.devices"} 0.12' in page
    assert ('llm_doctor_finding{cause="cpu-contention",key="other pid 7",rule="cpu-contention",'
            'severity="warning",symptoms="slowdown"} 1.0') in page
    assert 'alertstate="firing"' in page and "llm_doctor_last_evaluation_timestamp_seconds" in page
    lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                          text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_basic_auth_refuses_without_the_password(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    server, _ = _served(Settings(listen="127.0.0.1:0", basic_auth_user="prom",
                                 basic_auth_password_file=str(secret)))
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        with pytest.raises(urllib.error.HTTPError, match="401"):
            _scrape(url)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            _scrape(url, {"Authorization": "Basic " + base64.b64encode(b"prom:wrong").decode()})
        good = {"Authorization": "Basic " + base64.b64encode(b"prom:s3cret").decode()}
        assert "llm_doctor_probe_success" in _scrape(url, good)
    finally:
        server.shutdown()
        server.server_close()


def test_tls_serves_https(tmp_path):
    import ssl

    openssl = need("openssl", "openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    server, _ = _served(Settings(listen="127.0.0.1:0", tls_cert_file=str(cert),
                                 tls_key_file=str(key)))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False
        page = _scrape(f"https://127.0.0.1:{server.server_address[1]}/metrics", context=context)
        assert "llm_doctor_build_info" in page
    finally:
        server.shutdown()
        server.server_close()
