"""engine.progress and engine-stalled on real readings: the accelerators' busy figures of the
engine's devices (NVIDIA through NVML on tests/fixtures/build_frontend_hosts.py's H100s, AMD
from amd.gpu's record of the recorded MI300X host, Ascend from npu.devices' record of
npu-smi's own table), and vLLM 0.33.0's page scraped twice (tests/engine_pages/vllm-v1-stalled:
the same page, counters unchanged; vllm-v1-calm: counters moved).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from doctor.commands.setup import load_setup, open_host, scan_options
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import Level, ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from doctor.why.differential import build, candidates, probes_needed
from doctor.why.model import RULED_OUT
from probes.amd import gpu as amd_gpu
from probes.engine import progress
from probes.helpers import accel_busy
from probes.helpers.engine_normalise import normalise
from probes.helpers.promtext import parse
from probes.npu import devices as npu_devices
from probes.registry import by_name
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures import build_ascend_hosts, build_frontend_hosts
from tests.fixtures.build_frontend_hosts import API

PAGES = Path(__file__).parent / "engine_pages"
BASE = "http://127.0.0.1:8000"
QUICK = ScanOptions(level=Level.QUICK)
RULE = next(r for r in builtin_rules() if r.id == "engine-stalled")
SPECS = by_name()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> dict[str, RecordedHost]:
    root = tmp_path_factory.mktemp("progress")
    return {"tenant": RecordedHost(build_frontend_hosts.build(root, "h100x2-vllm-pinned-beside-a-busy-tenant")),
            "ascend": RecordedHost(build_ascend_hosts.build("ascend-910b2c-vllm-holds-hbm", root))}


def scraped(scenario: str, order: tuple[int, int] = (1, 2)):
    first, second = ((PAGES / scenario / f"metrics.{i}.txt").read_text() for i in order)
    return normalise("vllm", f"{BASE}/metrics", parse(first, "first"), parse(second, "second"), 3.0)


def findings(record: progress.ProgressRecord):
    found, errors = evaluate([RULE], [ProbeResult("engine.progress", "ok", 0.0, None, record)])
    assert errors == []
    return found


def test_nvidia_figure_is_of_the_gpu_the_engine_holds_not_the_tenants(hosts):
    host = hosts["tenant"]
    busy = accel_busy.read(host, NO_INPUTS)
    assert busy.why is None
    devices, scope = accel_busy.of_engine(host, busy, API)  # its EngineCore child holds GPU 0
    assert scope == "engine" and [(d.vendor, d.index, d.busy_pct) for d in devices] == [("nvidia", 0, 20.0)]
    everyone, scope = accel_busy.of_engine(host, busy, None)  # an --endpoint engine: no pid
    assert scope == "host" and [d.busy_pct for d in everyone] == [20.0, 95.0]


def test_ascend_aicore_of_the_chip_vllm_ascend_holds(hosts):
    host = hosts["ascend"]
    busy = accel_busy.read(host, Inputs({"npu.devices": npu_devices.probe(host, QUICK)}))
    devices, scope = accel_busy.of_engine(host, busy, 124528)  # npu-smi lists it on NPU 0
    assert scope == "engine" and [(d.vendor, d.index, d.busy_pct) for d in devices] == [("huawei", 0, 0.0)]


def test_amd_figure_needs_every_gpu_and_reads_gfx_activity():
    host = RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x")
    record = amd_gpu.probe(host, QUICK)
    unread = accel_busy.read(host, Inputs({"amd.gpu": record}))
    # the capture holds no amdsmi_get_gpu_activity: not read, and said, never 0
    assert unread.devices == () and "amd.gpu: device 0 gave no util_gpu_pct" in (unread.why or "")
    planted = dataclasses.replace(record, gpus=tuple(
        dataclasses.replace(g, util_gpu_pct=0 if g.index == 5 else 100) for g in record.gpus))
    busy = accel_busy.read(host, Inputs({"amd.gpu": planted}))
    assert [(d.vendor, d.busy_pct) for d, _ in busy.devices] == [("amd", 0 if i == 5 else 100) for i in range(8)]


def test_the_same_page_twice_with_requests_running_is_a_stall_and_says_the_gpu(hosts):
    host = hosts["tenant"]
    record = progress.judge(host, (scraped("vllm-v1-stalled"),), {BASE: API},
                            accel_busy.read(host, NO_INPUTS))
    engine = record.engines[0]
    assert (engine.requests_running_before, engine.requests_running, engine.tokens_in_window,
            engine.requests_in_window) == (8.0, 8.0, 0.0, 0.0)
    [finding] = findings(record)
    assert finding.severity.label == "critical"
    assert finding.evidence["devices"] == "GPU 0" and finding.evidence["busy"] == "20%"
    assert "busy 20%" in str(finding.title)


def test_no_accelerator_read_still_fires_and_says_why():
    m = scraped("vllm-v1-stalled")
    record = progress.ProgressRecord((progress.view(m, None, (), "host", "NVIDIA: no driver"),))
    [finding] = findings(record)
    assert finding.evidence["busy_unread"] == "NVIDIA: no driver"
    assert record.engines[0].missing["busy_max_pct"] == "NVIDIA: no driver"


def test_counters_that_moved_are_silent(hosts):
    host = hosts["tenant"]
    record = progress.judge(host, (scraped("vllm-v1-calm"),), {BASE: API}, accel_busy.read(host, NO_INPUTS))
    assert record.engines[0].tokens_in_window and findings(record) == []


def _why(name: str, symptom: str):
    rules, config = load_setup(None)
    chosen = candidates(symptom, rules)
    host = open_host(str(FIXTURE_HOSTS / name))
    options = scan_options(config, None, host=host, no_requests=True)
    report = scan(host, options, tuple(SPECS[n] for n in probes_needed(chosen, SPECS)), chosen, config)
    return build(symptom, chosen, report.probes, report.findings, SPECS, options.level,
                 options.requests, config)


@pytest.mark.slow  # two recorded hosts scanned for the symptom's rules, ~0.6 s
def test_why_names_the_stall_first_on_the_stalled_host_and_rules_it_out_on_the_calm_one():
    stalled = _why("vllm-v1-stalled", "stream-cutoff")
    assert stalled.likely and stalled.likely[0].cause == "engine-stalled"
    calm = _why("vllm-v1-calm", "queueing-under-load")
    [row] = [r for r in calm.rows if r.cause == "engine-stalled"]
    assert row.status == RULED_OUT


def test_counters_that_went_down_a_restart_are_not_judged_and_say_why():
    m = scraped("vllm-v1-calm", order=(2, 1))  # the second page counts less: the engine restarted
    record = progress.ProgressRecord((progress.view(m, None, (), "host", None),))
    engine = record.engines[0]
    assert engine.tokens_in_window is None and "restarted" in engine.missing["tokens_in_window"]
    assert findings(record) == []
