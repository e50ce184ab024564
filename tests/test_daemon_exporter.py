"""The exporter: every item of a record on /metrics under the catalog's names and labels,
and promtool accepts the page."""

from __future__ import annotations

import base64
import dataclasses
import math
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from doctor.daemon import catalog
from doctor.daemon.catalog.rows import Table, each, gauge, unexported
from doctor.daemon.catalog import labels as L
from doctor.daemon.exporter import DoctorCollector, Snapshot
from doctor.daemon.server import serve
from doctor.daemon.settings import Settings
from doctor.model import ProbeResult
from probes.engine.discovery import DiscoveryRecord
from probes.gpu.inventory import GpuInfo, GpuInventoryRecord
from probes.gpu.memory import GpuMemory, GpuMemoryRecord, GpuProcess
from probes.gpu.thermal_power import GpuThermalPower, ThermalPowerRecord
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_normalise import EngineMetrics
from probes.engine.metrics import MetricsRecord
from probes.host.limits import LimitsRecord, ProcessLimits
from tests.daemon_helpers import finding, need

UUID = "GPU-5f0c7a2e-9c1d-00a1-b2c3-d4e5f6a7b8c9"


def _ok(name: str, record) -> ProbeResult:
    return ProbeResult(name, "ok", 0.12, None, record)


def _page(*results: ProbeResult) -> str:
    collector = DoctorCollector({})
    collector.publish(Snapshot(results={r.name: r for r in results}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def _series(page: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _limits(*rows: ProcessLimits) -> ProbeResult:
    return _ok("host.limits", LimitsRecord(rows, sum(r.role == "engine" for r in rows)))


SHELL = ProcessLimits(None, "llm-doctor", None, "shell", 1048576, 1048576, 63000, 63000,
                      8388608, 8388608)
ENGINE = ProcessLimits(4242, "llama-server", "llama.cpp", "engine", 1024, 1024, None, None,
                       None, None)


def test_items_with_other_labels_than_the_first_are_all_exported():
    """The shell's row (no pid) and an engine's (pid, engine): the old exporter kept the
    first label set it saw and dropped the engine's row."""
    page = _page(_limits(SHELL, ENGINE))
    assert any('comm="llama-server"' in line for line in page.splitlines()
               if line.startswith("llm_doctor_host_"))
    soft = {labels["comm"]: value for labels, value in
            _series(page)["llm_doctor_host_process_open_files_limit"] if labels["limit"] == "soft"}
    assert soft == {"llm-doctor": 1048576, "llama-server": 1024}
    engine_row = next(labels for labels, _ in _series(page)["llm_doctor_host_process_open_files_limit"]
                      if labels["comm"] == "llama-server")
    assert engine_row == {"pid": "4242", "comm": "llama-server", "engine": "llama.cpp",
                          "role": "engine", "endpoint": "", "model": "", "limit": "soft"}
    shell_row = next(labels for labels, _ in _series(page)["llm_doctor_host_process_open_files_limit"]
                     if labels["comm"] == "llm-doctor")
    assert shell_row["pid"] == "" and shell_row["engine"] == ""  # the same label names, empty


def test_none_is_no_series_except_where_it_means_unlimited():
    series = _series(_page(_limits(SHELL, ENGINE)))
    processes = {labels["comm"]: value for labels, value in series["llm_doctor_host_process_processes_limit"]
                 if labels["limit"] == "hard"}
    assert processes["llama-server"] == math.inf  # RLIMIT_NPROC unlimited
    gpu = ThermalPowerRecord((GpuThermalPower(0, None, 87, 92, None, None, None, (), False, False,
                                              False, False, None, None, None, None, None, None,
                                              None, False, False, {"temp_c": "device-lost"}),),
                             None)
    series = _series(_page(_ok("gpu.thermal_power", gpu)))
    assert "llm_doctor_gpu_temperature_celsius" not in series  # absent is not zero
    assert series["llm_doctor_gpu_slowdown_temperature_celsius"][0][1] == 87
    missing = series["llm_doctor_gpu_thermal_power_value_missing"][0][0]
    assert (missing["field"], missing["reason"]) == ("temp_c", "device-lost")


def _thermal(index: int, mask: int | None) -> GpuThermalPower:
    return GpuThermalPower(index, 71, 87, 92, None, 16, mask, (), False, False, False, False,
                           1980, 1980, 2619, 2619, 350.5, 700.0, 700.0, False, False, {})


def test_units_are_base_units_and_gpu_series_carry_uuid_and_model_from_the_inventory():
    inventory = GpuInventoryRecord(1, "550.54.15", "12.4", (GpuInfo(
        0, "NVIDIA H100 80GB HBM3", UUID, "00000000:18:00.0", 81559, True, False, False,
        "default", {}),), {})
    memory = GpuMemoryRecord((GpuMemory(0, 81559, 71680, 9879, 51200, 20480, {}),),
                             (GpuProcess(0, 4410, "python3", "vllm", 51200, False),
                              GpuProcess(0, 9001, "trainer", None, 20480, False)), 1)
    series = _series(_page(_ok("gpu.inventory", inventory), _ok("gpu.memory", memory),
                           _ok("gpu.thermal_power", ThermalPowerRecord((_thermal(0, 0x44),), None))))
    gpu = {"gpu": "0", "uuid": UUID, "model_name": "NVIDIA H100 80GB HBM3"}
    assert series["llm_doctor_gpu_temperature_celsius"] == [(gpu, 71.0)]
    assert series["llm_doctor_gpu_sm_clock_hertz"] == [(gpu, 1.98e9)]
    assert series["llm_doctor_gpu_power_usage_watts"] == [(gpu, 350.5)]
    assert series["llm_doctor_gpu_memory_used_bytes"] == [(gpu, 71680 * 1048576.0)]
    held = {labels["comm"]: value for labels, value in series["llm_doctor_gpu_process_memory_used_bytes"]}
    assert held == {"python3": 51200 * 1048576.0, "trainer": 20480 * 1048576.0}  # the 20 GiB one too
    info = series["llm_doctor_gpu_info"][0][0]
    assert info["bus_id"] == "00000000:18:00.0" and info["uuid"] == UUID
    driver = series["llm_doctor_gpu_driver_info"][0][0]
    assert driver == {"driver_version": "550.54.15", "cuda_version": "12.4"}


def test_clock_event_reasons_are_one_series_per_named_bit():
    series = _series(_page(_ok("gpu.thermal_power", ThermalPowerRecord(
        (_thermal(0, 0x44 | 0x1000),), None))))
    reasons = {labels["reason"]: value for labels, value in series["llm_doctor_gpu_clock_event_reason"]}
    assert reasons["sw_power_cap"] == reasons["hw_thermal_slowdown"] == 1.0
    assert reasons["gpu_idle"] == reasons["hw_power_brake_slowdown"] == 0.0
    assert len([r for r in reasons if not r.startswith("bit_")]) == 9
    assert reasons["bit_12"] == 1.0  # a bit newer than the table is named by its number


def _metrics(endpoint: str, preemptions: float) -> EngineMetrics:
    return EngineMetrics(endpoint, "vllm", 3.0, 0.41, 6.0, 0.0, preemptions, 0.0, 0.0, None, None,
                         None, "since start", 20.0, 0.06, 0.095, 0.099, None, None, None, None,
                         None, None, None, (), None, {"block_size": "16"}, ())


def _engine(pid: int, base_url: str, model: str) -> Engine:
    return Engine(pid, "vllm", base_url, model, None, 0.9, 256, None, 16, None, None, None, None,
                  False, (), "process", ("flags",), None)


def test_engine_series_carry_kind_endpoint_model_and_pid_and_counters_are_counters():
    discovery = DiscoveryRecord((_engine(48213, "http://127.0.0.1:8000", "llama-3-8b"),
                                 _engine(48999, "http://127.0.0.1:8001", "qwen-7b")), 2)
    metrics = MetricsRecord((_metrics("http://127.0.0.1:8000/metrics", 103.0),
                             _metrics("http://127.0.0.1:8001/metrics", 7.0)), ())
    page = _page(_ok("engine.discovery", discovery), _ok("engine.metrics", metrics))
    series = _series(page)
    use = {labels["model"]: (labels, value) for labels, value in
           series["llm_doctor_engine_kv_cache_usage_ratio"]}
    assert use["llama-3-8b"] == ({"kind": "vllm", "endpoint": "http://127.0.0.1:8000",
                                  "model": "llama-3-8b", "pid": "48213"}, 0.41)
    assert use["qwen-7b"][0]["pid"] == "48999"
    assert "# TYPE llm_doctor_engine_preemptions_total counter" in page
    assert {v for _, v in series["llm_doctor_engine_preemptions_total"]} == {103.0, 7.0}
    ttft = {labels["percentile"]: value for labels, value in
            series["llm_doctor_engine_time_to_first_token_seconds"] if labels["model"] == "qwen-7b"}
    assert ttft == {"50": 0.06, "95": 0.095, "99": 0.099}


def test_two_items_with_the_same_identity_are_told_apart_not_dropped():
    twice = MetricsRecord((_metrics("http://127.0.0.1:8000/metrics", 1.0),
                           _metrics("http://127.0.0.1:8000/metrics", 2.0)), ())
    series = _series(_page(_ok("engine.metrics", twice)))["llm_doctor_engine_preemptions_total"]
    assert sorted(value for _, value in series) == [1.0, 2.0]
    assert sorted(labels["kind"] for labels, _ in series) == ["vllm", "vllm#2"]


@dataclass(frozen=True, slots=True)
class Plugin:
    url: str
    depth: int


def test_a_record_the_catalog_does_not_know_is_counted_not_dropped_silently(monkeypatch):
    series = _series(_page(_ok("engine.plugin", Plugin("http://x", 3))))
    assert series["llm_doctor_exporter_unexported_values"] == [
        ({"probe": "engine.plugin", "why": "undeclared-field"}, 2.0)]
    monkeypatch.setitem(catalog.TABLES, "engine.plugin", Table("engine.plugin", (
        gauge("depth", "engine_plugin_depth", "Depth"),
        unexported("url", "a URL"))))
    series = _series(_page(_ok("engine.plugin", Plugin("http://x", 3))))
    assert series["llm_doctor_engine_plugin_depth"] == [({}, 3.0)]
    assert "llm_doctor_exporter_unexported_values" not in series


def test_a_value_of_the_wrong_type_is_counted():
    broken = LimitsRecord((ProcessLimits(None, "llm-doctor", None, "shell", "lots", 1, 1, 1, 1, 1),), 0)  # type: ignore[arg-type]
    series = _series(_page(_ok("host.limits", broken)))
    assert series["llm_doctor_exporter_unexported_values"] == [
        ({"probe": "host.limits", "why": "not-a-number"}, 1.0)]


def test_scheme_labels_are_fixed_per_metric():
    scheme = L.fields("pid", "comm")
    table = Table("x.y", (each("rows", scheme), gauge("rows.n", "x_n", "n")))
    assert table.label_names(table.metrics[0]) == ("pid", "comm")


def _collector() -> DoctorCollector:
    collector = DoctorCollector({"gpu.thermal_power": "GPUs: temperatures, clocks"})
    collector.publish(Snapshot(
        results={"gpu.thermal_power": _ok("gpu.thermal_power",
                                          ThermalPowerRecord((_thermal(0, 0x4),), None)),
                 "host.limits": _limits(SHELL, ENGINE),
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
    assert 'llm_doctor_probe_duration_seconds{probe="gpu.thermal_power"} 0.12' in page
    assert 'llm_doctor_gpu_clock_event_reason{gpu="0",model_name="",reason="sw_power_cap",uuid=""} 1.0' in page
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


def test_label_values_from_the_host_are_escaped_and_read_back_unchanged():
    """comm and model names come from the host: quotes, backslashes, newlines, any script."""
    odd = 'a"b\\c\nd{e}=é,🙂'
    engine = ProcessLimits(77, odd, "vllm", "engine", 1024, 1024, 1, 1, 1, 1)
    discovery = DiscoveryRecord((_engine(77, "http://u:secret@127.0.0.1:9/", odd),), 1)
    page = _page(_limits(SHELL, engine), _ok("engine.discovery", discovery))
    series = _series(page)
    assert {labels["comm"] for labels, _ in series["llm_doctor_host_process_open_files_limit"]} \
        == {"llm-doctor", odd}
    info = series["llm_doctor_engine_info"][0][0]
    assert info["model"] == odd and info["endpoint"] == "http://127.0.0.1:9/"
    assert "secret" not in page
    promtool = need("promtool", "prometheus")
    lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                          text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("key", ["http://:sk-live-0123456789abcdef@127.0.0.1:8000",
                                 "https://ops:hunter2hunter2@gw.example:443/v1",
                                 "worker --api-key sk-live-0123456789abcdef"])
def test_a_finding_key_with_a_secret_reaches_neither_metrics_nor_alertmanager(key):
    """A rule keyed by the endpoint (warm-up, exposure) keys by the URL it was given: its key
    must not ride out in a label."""
    from doctor.daemon.alerts import AlertTracker
    from doctor.daemon.sinks import alert_payload

    f = dataclasses.replace(finding(key=key), key=key)
    registry = CollectorRegistry(auto_describe=False)
    collector = DoctorCollector({})
    registry.register(collector)
    alert = AlertTracker({}).observe([f], {f.rule}, 0.0).fired[0]
    collector.publish(Snapshot(results={}, findings=[f],
                               alerts=[(f.rule, key, f.cause, "warning", "firing")]))
    page = generate_latest(registry).decode()
    labels = alert_payload(alert, "h", 0.0, 60.0)["labels"]
    for shown in (page, labels["key"]):
        assert "0123456789abcdef" not in shown and "hunter2" not in shown
    assert "127.0.0.1:8000" in page or "gw.example" in page or "worker" in page


@pytest.mark.slow
def test_a_label_no_writer_can_write_is_made_writable_and_the_scrape_answers():
    """A lone surrogate (a hostile recording's measurements.json can hold "\\udcff") or a
    10 MB string in a label: the page is still written (it answered 500 to every scrape)."""
    from doctor.daemon.exporter import MAX_LABEL
    from tests.daemon_helpers import finding

    collector = DoctorCollector({})
    hostile = "GPU-\udcff-0"
    collector.publish(Snapshot(findings=[finding(key=hostile), finding(key="k" * 10_000_000),
                                         finding(key="k" * 10_000_001)], evaluations=1))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    page = generate_latest(registry).decode()
    keys = [s.labels["key"] for fam in text_string_to_metric_families(page)
            if fam.name == "llm_doctor_finding" for s in fam.samples]
    assert "GPU-\ufffd-0" in keys
    assert sorted(len(k) for k in keys if k.startswith("kkk")) == [MAX_LABEL]  # met once cut
