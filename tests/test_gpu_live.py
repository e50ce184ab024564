"""On a host without the NVIDIA driver (this machine, CI), every gpu.* probe is skipped with
the reason, and the scan's findings and exit code are what they are without the GPU probes."""

from __future__ import annotations

import pytest

from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from doctor.rules.loader import builtin_files, load_rules
from doctor.runner import run_probes
from doctor.scan import scan
from probes.registry import by_name
from tests.conftest import FIXTURE_HOSTS

GPU_PROBES = tuple(p for p in PROBES if p.name.startswith("gpu."))
HOST_PROBES = tuple(p for p in PROBES if not p.name.startswith("gpu."))


def _has_driver() -> bool:
    from doctor.seam import nvml
    from doctor.seam.host import HostReadError

    try:
        nvml.query("nvmlDeviceGetCount")
    except HostReadError:
        return False
    return True


@pytest.mark.skipif(_has_driver(), reason="this machine has an NVIDIA driver")
def test_live_gpu_probes_are_skipped_saying_what_is_missing():
    results = run_probes(GPU_PROBES, LiveHost(), ScanOptions(level=Level.FULL))
    assert len(results) == len(GPU_PROBES) >= 6
    for result in results:
        assert result.status == "skipped", (result.name, result.reason)
        assert "NVIDIA driver not loaded" in result.reason
        assert "install the driver" in result.reason


@pytest.mark.slow
def test_gpu_probes_change_nothing_on_a_host_without_gpus():
    host_dir = FIXTURE_HOSTS / "healthy-epyc-9654-vllm"
    rules = load_rules(builtin_files(), by_name())
    options = ScanOptions(level=Level.QUICK)
    with_gpu = scan(RecordedHost(host_dir), options, PROBES, rules)
    without = scan(RecordedHost(host_dir), options, HOST_PROBES, rules)
    assert [(f.rule, f.severity) for f in with_gpu.findings] == \
        [(f.rule, f.severity) for f in without.findings]
    assert with_gpu.exit_code() == without.exit_code()
    gpu = [p for p in with_gpu.probes if p.name.startswith("gpu.")]
    assert gpu and all(p.status == "skipped" for p in gpu)


@pytest.mark.slow
def test_benchmark_script_without_a_gpu_says_so_and_exits_0():
    import subprocess
    import sys

    from tests.conftest import REPO

    script = str(REPO / "benchmarks" / "gpu_probes.py")
    if not _has_driver():
        out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.startswith("no NVIDIA GPU here")
    replay = subprocess.run([sys.executable, script, "--replay",
                             str(FIXTURE_HOSTS / "a100-pcie-gen3x8")],
                            capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
    assert "GPU0 device copy (r+w)" in replay.stdout and "1935.4 GB/s" in replay.stdout


@pytest.mark.skipif(_has_driver(), reason="this machine has an NVIDIA driver")
def test_capture_of_this_host_replays_the_same_skips(tmp_path):
    from doctor.seam.recorded import RecordingHost

    options = ScanOptions(level=Level.QUICK)
    capture = RecordingHost(LiveHost(), tmp_path / "cap")
    live = run_probes(GPU_PROBES, capture, options)
    capture.save({"level": "quick"})
    replayed = run_probes(GPU_PROBES, RecordedHost(tmp_path / "cap"), options)
    assert [(r.name, r.status, r.reason) for r in replayed] == \
        [(r.name, r.status, r.reason) for r in live]
