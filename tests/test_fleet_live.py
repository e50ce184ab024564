"""The fleet of three, live: three 'llm-doctor daemon --replay' processes on three recorded
H100 PCIe hosts (tests/fixtures/build_gpu_fleet_hosts.py: two healthy, one whose HBM copy is
40% below theirs), scraped by one real Prometheus loaded with 'rules export --prometheus
--fleet'; the HBM outlier alert fires for the third host only, and the job: recording rules
have their values. Every process is stopped at the end, pass or fail."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import REPO
from tests.daemon_helpers import need
from tests.live_stack import Proc, daemon, get, prometheus, prometheus_query, wait_for

pytestmark = pytest.mark.live

HOSTS = REPO / "tests/fixtures/hosts"
FLEET = ("h100-pcie-fleet-a", "h100-pcie-fleet-b", "h100-pcie-fleet-hbm-low")
# a replayed host's engine looks busy (its GPU memory is held); daemon --replay lets the
# kernels' recorded results come in anyway (they cost it nothing), once at start as live
CONFIG = "[daemon]\n"
ALERT = "LlmDoctorFleetHbmBandwidthOutlier"


def _firing(url: str) -> set[str]:
    alerts = json.loads(get(url + "/api/v1/alerts"))["data"]["alerts"]
    return {a["labels"]["instance"] for a in alerts
            if a["labels"].get("alertname") == ALERT and a["state"] == "firing"}


def _value(url: str, query: str) -> float | None:
    result = prometheus_query(url, query)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_the_hbm_outlier_of_a_fleet_of_three_fires_for_that_host_only(cli, tmp_path):
    binary = need("prometheus", "prometheus")
    rules = tmp_path / "fleet-rules.yml"
    exported = cli("rules", "export", "--prometheus", "--fleet", "--outlier-for", "0s",
                   "-o", str(rules))
    assert exported.returncode == 0, exported.stderr
    procs: list[Proc] = []
    try:
        addresses = []
        for name in FLEET:
            proc, address = daemon(tmp_path, CONFIG, "--replay", str(HOSTS / name),
                                   "--interval", "1s", "--state-file", "", name=name)
            procs.append(proc)
            addresses.append(address)
        outlier = addresses[2]
        prom, url = prometheus(binary, tmp_path, addresses, rules)
        procs.append(prom)

        # each replayed daemon exports its recorded HBM copy (the kernels run at start)
        def measured():
            rows = prometheus_query(url, "llm_doctor_gpu_memory_copy_bytes_per_second")
            return {r["metric"]["instance"]: float(r["value"][1]) for r in rows} \
                if len(rows) == 3 else None

        copies = wait_for("three hosts' HBM copy bandwidth in Prometheus", measured, 120, 1.0)
        assert copies == {addresses[0]: 1702.4e9, addresses[1]: 1689.1e9, outlier: 1020.3e9}

        firing = wait_for(f"{ALERT} to fire", lambda: _firing(url), 60, 1.0)
        assert firing == {outlier}
        # and it stays the third host alone over a few more evaluations
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert _firing(url) == {outlier}
            time.sleep(1)
        alert = [a for a in json.loads(get(url + "/api/v1/alerts"))["data"]["alerts"]
                 if a["labels"]["alertname"] == ALERT][0]
        assert alert["labels"]["figure"] == "hbm_bandwidth"
        assert alert["labels"]["gpu_model"] == "NVIDIA H100 PCIe"
        assert abs(float(alert["value"]) - 1020.3 / 1689.1) < 1e-6

        # the job: recording rules, for federation
        assert wait_for("job:llm_doctor_hosts_up:sum", lambda: _value(
            url, "job:llm_doctor_hosts_up:sum") == 3, 30, 1.0)
        assert _value(url, "job:llm_doctor_hosts_per_gpu_model:count") == 3
        assert _value(url, "job:llm_doctor_gpu_memory_copy_bytes_per_second:median") == 1689.1e9
        assert _value(url, 'job:llm_doctor_findings:count{cause="gpu-memory-bandwidth-low"}') == 1
        for other in ("LlmDoctorFleetPcieBandwidthOutlier", "LlmDoctorFleetHostMemoryBandwidthOutlier"):
            assert not [a for a in json.loads(get(url + "/api/v1/alerts"))["data"]["alerts"]
                        if a["labels"]["alertname"] == other]
    finally:
        for proc in procs:
            proc.stop()
