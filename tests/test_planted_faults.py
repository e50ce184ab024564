"""Faults planted in a copy of the healthy recorded host: each edit is the test's story.

The healthy host (tests/fixtures/hosts/healthy-epyc-9654-vllm) raises nothing at warning
or above. Each test copies it, changes what one broken machine would show, and checks that
exactly that cause is found, with its symptom rows and the measured evidence.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from doctor.model import Severity
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import replay

HEALTHY = FIXTURE_HOSTS / "healthy-epyc-9654-vllm"
ENGINE_PID = 48213


@pytest.fixture
def host(tmp_path):
    copy = tmp_path / "host"
    shutil.copytree(HEALTHY, copy, symlinks=True)
    return copy


def raised(path, level=None):
    report = replay(path, level)
    assert report.rule_errors == []
    return [f for f in report.findings if f.severity >= Severity.WARNING], report


def edit(path, pattern, replacement):
    text = path.read_text()
    new = re.sub(pattern, replacement, text, flags=re.M)
    assert new != text, f"{pattern!r} not found in {path}"
    path.write_text(new)


@pytest.mark.slow
def test_the_healthy_host_raises_nothing(host):
    findings, report = raised(host)
    assert findings == []
    # A CPU-side capture without the NVIDIA driver or the engine's pages: those probes skip,
    # with their reasons; none fails.
    assert all(p.status in ("ok", "skipped") for p in report.probes), \
        [(p.name, p.status, p.reason) for p in report.probes]
    assert all(p.status == "ok" for p in report.probes if p.name.startswith("host."))


@pytest.mark.slow
def test_engine_started_with_1024_open_files(host):
    edit(host / f"fs/proc/{ENGINE_PID}/limits", r"^(Max open files\s+)1048576 ", r"\g<1>1024    ")
    (finding,), _ = raised(host)
    assert (finding.rule, finding.cause, finding.severity) == ("fd-limit-low", "fd-limit-low", Severity.CRITICAL)
    assert finding.symptoms == ("crash-under-concurrency", "queueing-under-load")
    assert finding.evidence["process"] == f"python3 pid {ENGINE_PID}"
    assert finding.evidence["role"] == "engine"
    assert (finding.evidence["nofile_soft"], finding.evidence["nofile_hard"]) == (1024, 1048576)


@pytest.mark.slow
def test_old_kernel_listen_backlog(host):
    (host / "fs/proc/sys/net/core/somaxconn").write_text("128\n")
    (finding,), _ = raised(host)
    assert finding.rule == "network-backlog-small" and finding.evidence["somaxconn"] == 128
    assert finding.symptoms == ("queueing-under-load",)


@pytest.mark.slow
def test_swap_in_use(host):
    edit(host / "fs/proc/meminfo", r"^SwapTotal:\s+\d+ kB", "SwapTotal:       8388608 kB")
    edit(host / "fs/proc/meminfo", r"^SwapFree:\s+\d+ kB", "SwapFree:        3145728 kB")
    (finding,), _ = raised(host)
    assert finding.rule == "swap-active" and finding.severity == Severity.CRITICAL
    assert finding.evidence["swap_used_mib"] == 5120


@pytest.mark.slow
def test_one_cpu_left_in_powersave(host):
    (host / "fs/sys/devices/system/cpu/cpu7/cpufreq/scaling_governor").write_text("powersave\n")
    (finding,), _ = raised(host)
    assert finding.rule == "cpu-powersave-governor"
    assert finding.evidence["governors"] == {"performance": 191, "powersave": 1}


@pytest.mark.slow
def test_a_stray_process_takes_the_cpu(host):
    data = json.loads((host / "measurements.json").read_text())
    data["host.cpu_load"]["top"].insert(0, {"pid": 777, "comm": "ffmpeg", "cmdline": "ffmpeg -i in.mp4 out.webm",
                                            "cpu_cores": 11.5, "related": False})
    (host / "measurements.json").write_text(json.dumps(data))
    (finding,), _ = raised(host)
    assert finding.rule == "cpu-contention" and finding.symptoms == ("slowdown",)
    assert finding.evidence["process"] == "ffmpeg pid 777" and finding.evidence["cpu_cores"] == 11.5
    assert finding.evidence["engines_running"] == 1


@pytest.mark.slow
def test_half_the_memory_channels_measured(host):
    data = json.loads((host / "measurements.json").read_text())
    data["host.memory_bandwidth.stream"]["triad_gbps"] = 150.0
    (host / "measurements.json").write_text(json.dumps(data))
    (finding,), _ = raised(host)
    assert finding.rule == "host-memory-bandwidth-low"
    assert finding.evidence["triad_gbps"] == 150.0 and finding.evidence["ceiling_gbps"] == 460.8
    assert finding.evidence["ratio"] == round(150.0 / 460.8, 3)


@pytest.mark.slow
def test_dimms_downclocked(host):
    dmi = next((host / "commands").iterdir())
    edit(dmi, r"Configured Memory Speed: 4800 MT/s", "Configured Memory Speed: 3600 MT/s")
    findings, _ = raised(host)
    assert [f.rule for f in findings] == ["host-memory-dimms-downclocked"]
    assert findings[0].evidence["configured_mts"] == 3600 and findings[0].evidence["rated_mts"] == 4800


@pytest.mark.slow
def test_weights_moved_to_a_slow_disk(host):
    data = json.loads((host / "measurements.json").read_text())
    read = data["host.storage.read:/models/llama-3-8b-instruct"]
    read.update(read_mbps=140.0, seconds=read["bytes_read"] / 140e6)
    (host / "measurements.json").write_text(json.dumps(data))
    (host / "fs/sys/block/nvme0n1/queue/rotational").write_text("1\n")
    (finding,), _ = raised(host)
    assert finding.rule == "model-on-slow-disk"
    assert finding.evidence["device"] == "nvme0n1 (rotational)"
    assert finding.evidence["source"] == f"vllm pid {ENGINE_PID}"
    weights = 4976698672 + 4999802720 + 4915916176 + 1168138808  # the four shards in host.toml
    assert finding.evidence["weights_gb"] == round(weights / 1e9, 2)
    assert finding.evidence["load_time_s"] == round(weights / 140e6, 1)


@pytest.mark.slow
def test_an_unreadable_file_is_an_error_and_the_scan_goes_on(host):
    edit(host / "host.toml", r"^\[errors\]$", '[errors]\n"/proc/self/limits" = "no-permission"')
    findings, report = raised(host)
    status = {p.name: (p.status, p.reason) for p in report.probes}
    assert status["host.limits"] == ("error", "/proc/self/limits: no-permission (recorded)")
    assert findings == []
    others = [p for p in report.probes if p.name != "host.limits"]
    assert all(p.status in ("ok", "skipped") for p in others), \
        [(p.name, p.status, p.reason) for p in others]


@pytest.mark.slow
def test_quick_level_skips_measurements(host):
    findings, report = raised(host, "quick")
    names = [p.name for p in report.probes]
    assert "host.memory_bandwidth" not in names
    storage = next(p for p in report.probes if p.name == "host.storage")
    assert storage.record.paths[0].read_mbps is None
    assert storage.record.paths[0].read_reason == "not measured at level quick"
    assert storage.record.paths[0].missing["read_mbps"] == "not measured at level quick"
