"""gpu.unified_memory and unified-memory-overcommit (issue 32, item 7) on the recorded hosts
of tests/fixtures/build_unified_memory_hosts.py: a real DGX Spark's NVML answers and
/proc/meminfo (tests/fixtures/unified_memory/PROVENANCE.md) under a vLLM at three targets."""

from __future__ import annotations

import json
import shutil

import pytest

from doctor.inputs import NO_INPUTS
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.gpu import unified_memory
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

RULES = [r for r in builtin_rules() if r.id == "unified-memory-overcommit"]
CHOSEN = tuple(p for p in PROBES if p.name in ("gpu.memory", "gpu.unified_memory"))
QUICK = ScanOptions(level=Level.QUICK)


@pytest.mark.parametrize("name,expected", [
    ("gb10-spark-vllm-095", [("unified-memory-overcommit", "critical")]),
    ("gb10-spark-vllm-default", [("unified-memory-overcommit", "warning")]),
    ("gb10-spark-vllm-075", []),
])
def test_the_engine_target_against_what_the_gb10_host_has(name, expected):
    report = scan(RecordedHost(FIXTURE_HOSTS / name), QUICK, CHOSEN, RULES)
    assert report.rule_errors == []
    probe = {p.name: p for p in report.probes}["gpu.unified_memory"]
    assert probe.status == "ok", probe.reason
    assert [(f.rule, f.severity.label) for f in report.findings
            if f.severity >= Severity.WARNING] == expected


def test_without_gpu_memory_the_probe_asks_nvml_itself():
    record = unified_memory.probe(RecordedHost(FIXTURE_HOSTS / "gb10-spark-vllm-095"), QUICK, NO_INPUTS)
    assert record.unified_gpus == (0,) and record.gpu_names == ("NVIDIA GB10",)
    # MemTotal 127600748 kB, MemAvailable 118566368 kB: the report's
    assert (record.mem_total_mib, record.mem_available_mib) == (124610, 115787)
    (engine,) = record.engines
    assert (engine.memory_fraction, engine.target_mib, engine.left_mib) == (0.95, 118380, -2593)


def _copy(tmp_path, name="gb10-spark-vllm-095"):
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def test_what_the_engine_holds_is_its_own_room(tmp_path):
    """A loaded engine's memory is out of MemAvailable already: NVML's per-process figure for
    it (GB10 reports that) is added back, so a running engine is not judged twice."""
    root = _copy(tmp_path)
    calls = json.loads((root / "nvml.json").read_text())
    for call in calls:
        if call["call"] == "nvmlDeviceGetComputeRunningProcesses":
            call["value"] = [{"pid": 7310, "usedGpuMemory": 20000 << 20}]
    (root / "nvml.json").write_text(json.dumps(calls))
    (engine,) = unified_memory.probe(RecordedHost(root), QUICK).engines
    assert (engine.held_mib, engine.room_mib, engine.left_mib) == (20000, 135787, 17407)


def test_a_gpu_with_its_own_memory_is_skipped():
    with pytest.raises(unified_memory.Skip):
        unified_memory.probe(RecordedHost(FIXTURE_HOSTS / "t4-aws-passthrough-x8"), QUICK)


def test_a_fraction_out_of_range_is_not_judged(tmp_path):
    root = _copy(tmp_path)
    cmdline = root / "fs/proc/7310/cmdline"
    cmdline.write_bytes(cmdline.read_bytes().replace(b"0.95", b"9.5"))
    (engine,) = unified_memory.probe(RecordedHost(root), QUICK).engines
    assert engine.target_mib is None and "not a fraction" in engine.missing["memory_fraction"]


def _plan(evidence: dict):
    from datetime import datetime, timezone

    from doctor.fix.plan import build_plan
    from tests.saved_scans import saved
    finding = {"rule": "unified-memory-overcommit", "cause": "unified-memory-overcommit",
               "key": "vllm", "title": "t", "severity": "critical", "evidence": evidence}
    return build_plan(saved({"host": {"hostname": "h"}, "probes": [], "findings": [finding]}), "x",
                      {}, datetime(2026, 12, 1, tzinfo=timezone.utc))


@pytest.mark.parametrize("source,removed", [
    ("--gpu-memory-utilization", ("--gpu-memory-utilization", "0.95")),
    ("vLLM default", ("--gpu-memory-utilization",)),
])
def test_the_fix_plan_swaps_the_fraction_for_the_suggested_one(source, removed):
    """The evidence of gb10-spark-vllm-095's finding (tests/rule_cases: suggested 0.86)."""
    step, = _plan({"engine": "vllm pid 7310", "fraction": 0.95, "source": source,
                   "suggested": "0.86"}).steps
    assert (step.flags.remove, step.flags.add) == (removed, ("--gpu-memory-utilization", "0.86"))


@pytest.mark.parametrize("suggested", ["0.01", "nan", "1e999", "x" * 40, None])
def test_a_saved_scan_suggesting_no_usable_fraction_gets_no_step(suggested):
    from doctor.fix.model import NoStep
    plan = _plan({"engine": "vllm pid 7310", "fraction": 0.95, "suggested": suggested})
    assert plan.steps == ()
    assert [type(n) for n in plan.no_steps] == [NoStep]
