"""Recorded GPU hosts: a capture of one replays with the same findings and data, and mutated
NVML recordings (wrong types, missing devices, every failure reason) never crash a probe."""

from __future__ import annotations

import dataclasses
import random
import shutil

import pytest

from doctor.seam.host import Reason
from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.registry import PROBES, by_name
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.gpu_machines import gpu, nvml_entries
from tests.gpu_host import gpu_host, process_files

RULES = builtin_rules()
GPU_PROBES = tuple(p for p in PROBES if p.name.startswith("gpu."))
GPU_HOSTS = sorted(p.name for p in FIXTURE_HOSTS.iterdir() if (p / "nvml.json").is_file())


class Recapture(RecordingHost):
    """Capture a recorded host as `llm-doctor capture` captures a live one; measurements are
    taken from the source instead of being run again."""

    def measure(self, name, fn):
        return super().measure(name, lambda: self.live.measure(name, fn))


def _findings(report):
    return [(f.rule, f.severity, f.key, f.evidence) for f in report.findings]


def _gpu_records(report):
    return {p.name: (p.status, p.reason, p.record) for p in report.probes if p.name.startswith("gpu.")}


def test_there_are_seven_gpu_hosts():
    assert len(GPU_HOSTS) >= 7


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_HOSTS)
def test_capture_of_a_recorded_gpu_host_replays_the_same(name, tmp_path):
    source = RecordedHost(FIXTURE_HOSTS / name)
    level = Level.parse(source.manifest["host"].get("level", "standard"))
    options = ScanOptions(level=level)
    original = scan(source, options, PROBES, RULES)
    capture = Recapture(RecordedHost(FIXTURE_HOSTS / name), tmp_path / "cap")
    scan(capture, options, PROBES, RULES)
    capture.save({"level": level.name.lower()})
    replayed = scan(RecordedHost(tmp_path / "cap"), options, PROBES, RULES)
    assert _findings(replayed) == _findings(original)
    assert _gpu_records(replayed) == _gpu_records(original)


# 2**64 - 1: the largest integer a recording holds (a larger one refuses the recording:
# tests/test_nvml_recording_bounds.py)
WRONG = ["x", [], {}, None, -1, True, 1.5, {"busId": 7, "total": "lots"}, [None, "a"], 2**64 - 1]


def _machine_entries() -> tuple[list[dict], dict]:
    machine = {"gpus": [gpu("a100-pcie-80gb", processes=[(900, 1 << 34), (901, 1 << 33)]),
                        gpu("h100-sxm")], "topo": {(0, 1): "PIX"}}
    files = process_files({900: ("python3", "vllm serve /m --tensor-parallel-size 2")})
    return nvml_entries(machine), files


MEASUREMENTS = {"gpu.pcie.load.0": {"gen_max_seen": 4, "width_min_seen": 16},
                "gpu.bandwidth.0": {"d2d": {"gbps": 1500.0}, "h2d_pinned": {"gbps": 25.0}},
                "gpu.bandwidth.p2p": {"pairs": [{"a": 0, "b": 1, "gbps": 20.0}]},
                "gpu.first_use": {"first_s": 1.0, "warm_s": 0.0001},
                "gpu.errors.xid_watch": {"seconds": 2.0, "events": [{"gpu": 0, "xid": 79}]},
                "gpu.kv_alloc.allocator": {"16": {"allocator_overhead_fraction": 0.02}}}


def _assert_no_crash(host):
    report = scan(host, ScanOptions(level=Level.STANDARD), GPU_PROBES, RULES)
    for p in report.probes:
        assert p.status in ("ok", "skipped", "error"), (p.name, p.status, p.reason)
        assert "internal error" not in (p.reason or ""), (p.name, p.reason)
    assert report.rule_errors == []
    return report


@pytest.mark.parametrize("wrong", WRONG, ids=repr)
def test_every_value_of_the_wrong_type(wrong):
    entries, files = _machine_entries()
    mutated = [{**e, "value": wrong} if "value" in e and e["call"] != "nvmlDeviceGetCount" else e
               for e in entries]
    _assert_no_crash(gpu_host(mutated, files=files, measurements={k: wrong for k in MEASUREMENTS}))


@pytest.mark.parametrize("reason", list(Reason), ids=lambda r: r.value)
def test_every_call_failing_with_each_reason(reason):
    entries, files = _machine_entries()
    mutated = [e if e["call"] == "nvmlDeviceGetCount" else
               {"call": e["call"], "args": e["args"], "error": reason.value} for e in entries]
    report = _assert_no_crash(gpu_host(mutated, files=files))
    inventory = next(p for p in report.probes if p.name == "gpu.inventory")
    assert inventory.status == "ok"
    assert inventory.record.gpus[0].missing["name"] == reason.value


@pytest.mark.parametrize("reason", list(Reason), ids=lambda r: r.value)
def test_device_count_failing_with_each_reason(reason):
    report = _assert_no_crash(gpu_host([{"call": "nvmlDeviceGetCount", "args": [],
                                         "error": reason.value}]))
    for p in report.probes:
        if reason == Reason.LIBRARY_MISSING:
            assert p.status == "skipped" and "NVIDIA driver" in p.reason
        elif by_name()[p.name].needs:  # what it builds on ended in that error: it says so
            assert p.status == "skipped" and "which ended error" in p.reason
        else:
            assert p.status == "error" and reason.value in p.reason


@pytest.mark.parametrize("count", [4, 2**62, "8", -1, True, None, 2.0])
def test_device_count_wrong_or_more_than_recorded(count):
    entries, files = _machine_entries()
    entries = [{**e, "value": count} if e["call"] == "nvmlDeviceGetCount" else e for e in entries]
    report = _assert_no_crash(gpu_host(entries, files=files))
    if count in (4, 2**62):  # devices 2 and up were never recorded: no probe asks for them
        inventory = next(p for p in report.probes if p.name == "gpu.inventory")
        assert inventory.status == "error"
        assert (f"nvml.json entry #1: nvmlDeviceGetCount is {count}, but the recording holds "
                "answers for devices 0, 1 (none for device 2)") in inventory.reason


@pytest.mark.parametrize("seed", range(25))
def test_random_mutations(seed):
    rng = random.Random(seed)
    entries, files = _machine_entries()
    mutated = []
    for e in entries:
        roll = rng.random()
        if roll < 0.15:
            continue  # dropped from the recording
        if roll < 0.35:
            e = {"call": e["call"], "args": e["args"], "value": rng.choice(WRONG)}
        elif roll < 0.5:
            e = {"call": e["call"], "args": e["args"], "error": rng.choice(list(Reason)).value}
        mutated.append(e)
    measurements = {k: (rng.choice(WRONG) if rng.random() < 0.5 else v) for k, v in MEASUREMENTS.items()}
    _assert_no_crash(gpu_host(mutated, files=files, measurements=measurements))


def test_a_hand_edited_nvml_json_that_is_not_a_list_is_a_clear_error(tmp_path):
    from doctor.seam.recorded import RecordedHostError

    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "h100-thermal-88c", root)
    (root / "nvml.json").write_text('{"call": "nvmlDeviceGetCount"}')
    with pytest.raises(RecordedHostError, match="nvml.json"):
        RecordedHost(root)


def test_records_are_frozen_values():
    report = scan(RecordedHost(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch"), ScanOptions(level=Level.QUICK),
                  GPU_PROBES, RULES)
    for p in report.probes:
        if p.record is not None:
            assert dataclasses.is_dataclass(p.record)
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(p.record, dataclasses.fields(p.record)[0].name, None)


@pytest.mark.parametrize("name", GPU_HOSTS)
def test_json_report_of_a_gpu_host_follows_the_schema(name):
    import json

    import jsonschema

    from reports.json_report import render
    from tests.conftest import REPO

    source = RecordedHost(FIXTURE_HOSTS / name)
    level = Level.parse(source.manifest["host"].get("level", "standard"))
    report = json.loads(render(scan(source, ScanOptions(level=level), PROBES, RULES)))
    jsonschema.validate(report, json.loads((REPO / "docs" / "report-schema.json").read_text()))
    gpu = {p["name"]: p for p in report["probes"] if p["name"].startswith("gpu.")}
    assert gpu["gpu.inventory"]["status"] == "ok"
