"""Each bandwidth figure carries its run-to-run spread (the noise floor a diff holds a change
to): the kernels measure it over their repeats, the records carry it as ``<figure>_spread``,
and recordings from before it was kept still read, with no spread."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.gpu import bandwidth as gpu_bandwidth
from probes.gpu import collective
from probes.helpers import stream_sizing
from probes.host import memory_bandwidth
from probes.kernels import allreduce, gpu_bandwidth as gpu_kernel, stream
from probes.helpers.stream_passes import Passes, timed_passes
from probes.helpers.spread import read_spread, spread
from tests.fixtures.gpu_machines import gpu, nvml_entries
from tests.gpu_host import gpu_host

HOSTS = Path(__file__).parent / "fixtures" / "hosts"
STANDARD = ScanOptions(level=Level.STANDARD)
FIGURES = ("d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")


def test_spread_is_the_range_over_the_median_and_none_for_one_run():
    assert spread([90.0, 100.0, 110.0]) == 0.2
    assert spread([100.0, 100.0]) == 0.0
    assert spread([100.0]) is None and spread([]) is None
    assert spread([0.0, 0.0]) is None  # no rate to be a fraction of


@pytest.mark.parametrize("value", [None, "0.1", True, -0.1, math.nan, math.inf, 10**400, [0.1]])
def test_a_spread_that_is_not_a_finite_fraction_reads_as_none(value):
    assert read_spread(value) is None


def test_read_spread_keeps_a_fraction():
    assert read_spread(0.031) == 0.031 and read_spread(0) == 0.0


class _Clock:
    """The kernels' perf_counter, moved only by the operations timed: a spread of known
    times, whatever else the machine runs (time.sleep overshot by 0.12 and more under load)."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def _alternating(clock: _Clock, first_s: float, second_s: float):
    calls = [0]

    def op() -> None:
        clock.now += first_s if calls[0] % 2 == 0 else second_s
        calls[0] += 1
    return op


@pytest.mark.slow
def test_copies_that_alternate_in_speed_give_that_spread(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(gpu_kernel, "time", clock)
    # rates 1/0.02 and 1/0.04 in turn: (50 - 25) / 37.5 = 0.67
    result = gpu_kernel.median_gbps(_alternating(clock, 0.02, 0.04), 1, "cpu", warmup=0,
                                    repeats=6, budget_s=5.0)
    assert result["repeats"] == 6 and result["spread"] == pytest.approx(2 / 3, abs=1e-3)


def test_one_copy_has_no_spread():
    result = gpu_kernel.median_gbps(lambda: None, 1, "cpu", warmup=0, repeats=1)
    assert result["repeats"] == 1 and result["spread"] is None


@pytest.mark.slow
def test_each_gpu_copy_on_the_cpu_reports_its_spread(capsys):
    assert gpu_kernel.main(["--device", "cpu", "--budget-s", "0.2"]) == 0
    out = json.loads(capsys.readouterr().out)
    for figure in FIGURES:
        assert out[figure]["repeats"] >= 2 and out[figure]["spread"] >= 0, figure


def test_stream_passes_give_each_kernels_spread(monkeypatch):
    from probes.helpers import stream_passes as _passes

    clock = _Clock()
    monkeypatch.setattr(_passes, "time", clock)

    def triad() -> None:
        clock.now += 0.02
    run = timed_passes(_alternating(clock, 0.01, 0.03), triad, Passes(4, 10.0), lambda: None)
    assert run.ran == 4 and run.copy_best_s == pytest.approx(0.01)
    assert run.copy_spread == pytest.approx(1.0, abs=1e-3)  # (100 - 33.3) / 66.7
    assert run.triad_spread == pytest.approx(0.0)


def test_stream_reports_the_spread_of_both_kernels():
    result = stream.measure(array_bytes=4 << 20, threads=1, repeats=5, backend="numpy")
    assert result["repeats"] >= 2 and result["valid"]
    assert result["copy_gbps_spread"] >= 0 and result["triad_gbps_spread"] >= 0
    one = stream.measure(array_bytes=4 << 20, threads=1, repeats=1, backend="numpy")
    assert one["repeats"] == 1 and one["copy_gbps_spread"] is None


def test_allreduce_blocks_split_the_timed_runs_evenly():
    assert allreduce.block_sizes(10) == [2, 2, 2, 2, 2]
    assert allreduce.block_sizes(7) == [2, 2, 1, 1, 1]
    assert allreduce.block_sizes(1) == [1]


def test_allreduce_spread_takes_each_block_at_its_slowest_rank():
    done = [{"block_s": [1.0, 2.0, 1.0]}, {"block_s": [1.0, 1.0, 1.25]}]
    # slowest per block: 1.0, 2.0, 1.25 s -> busbw 2, 1, 1.6 (n = 2, 2 bytes): (2 - 1) / 1.6
    assert allreduce._block_spread(done, 2_000_000_000, 2) == pytest.approx(0.625, abs=1e-4)
    assert allreduce._block_spread([{"block_s": [1.0]}], 2, 2) is None
    assert allreduce._block_spread([{"block_s": [1.0, 2.0]}, {}], 2, 2) is None
    assert allreduce._block_spread([{"block_s": [1.0, 2.0]}, {"block_s": [1.0]}], 2, 2) is None


@pytest.mark.slow
def test_allreduce_on_the_cpu_carries_its_spread_into_the_record():
    g = collective.on_cpu(LiveHost(), ranks=2, limit_s=60)
    assert g.outcome == "ok", g.failure
    assert g.busbw_gbps_spread is not None and g.busbw_gbps_spread >= 0


def test_a_collective_recording_without_a_spread_has_none():
    ceiling = collective.PathCeiling("NV18", 450.0, "test", True)
    data = {"outcome": "ok", "n": 2, "busbw_gbps": 360.0}
    assert collective.group_record((0, 1), data, ceiling, {}).busbw_gbps_spread is None
    kept = collective.group_record((0, 1), {**data, "busbw_gbps_spread": 0.012}, ceiling, {})
    assert kept.busbw_gbps_spread == 0.012 and kept.busbw_gbps == 360.0


def _copy(gbps: float, spread_value: object = None, with_spread: bool = True) -> dict:
    out = {"gbps": gbps, "median_s": 0.01, "repeats": 10, "bytes": 1}
    return {**out, "spread": spread_value} if with_spread else out


def _gpu_host(copies: dict) -> RecordedHost:
    machine = {"gpus": [gpu("h100-sxm", cpus="0-55,112-167")]}
    measure = {"device": "cuda:0", "bytes": 268435456,
               "link_during_h2d": {"gen": 5, "width": 16}, **copies}
    return gpu_host(nvml_entries(machine), measurements={
        "gpu.bandwidth.0": measure, "gpu.first_use": {"first_s": 2.4, "warm_s": 0.00004}})


def test_gpu_copy_spreads_travel_from_the_measurement_into_the_record():
    spreads = dict(zip(FIGURES, (0.004, 0.011, 0.013, 0.08, 0.09)))
    record = gpu_bandwidth.probe(_gpu_host({f: _copy(100.0, s) for f, s in spreads.items()}),
                                 STANDARD)
    g = record.gpus[0]
    assert {f: getattr(g, f"{f}_gbps_spread") for f in FIGURES} == spreads
    assert g.d2d_gbps == 100.0 and record.errors == {}


def test_gpu_copies_recorded_without_or_with_a_broken_spread_read_as_none():
    old = gpu_bandwidth.probe(_gpu_host({f: _copy(100.0, with_spread=False) for f in FIGURES}),
                              STANDARD).gpus[0]
    hostile = gpu_bandwidth.probe(_gpu_host({f: _copy(100.0, v) for f, v in zip(
        FIGURES, ("wide", -1, True, [0.1], {"x": 1}))}), STANDARD).gpus[0]
    for g in (old, hostile):
        assert all(getattr(g, f"{f}_gbps_spread") is None for f in FIGURES)
        assert g.d2d_gbps == 100.0 and g.d2d_ratio == 0.03


def test_the_recorded_gpu_hosts_still_read_with_no_spread():
    record = gpu_bandwidth.probe(RecordedHost(HOSTS / "a100-pcie-gen3x8"), STANDARD)
    assert record.gpus and all(g.d2d_gbps for g in record.gpus)
    assert all(g.d2d_gbps_spread is None for g in record.gpus)


def test_a_recorded_stream_run_without_spreads_still_reads(tmp_path):
    before = memory_bandwidth.probe(RecordedHost(HOSTS / "this-vm-epyc-2cpu"), STANDARD)
    assert before.copy_gbps == 39.59 and before.copy_gbps_spread is None
    assert before.triad_gbps_spread is None
    copy = tmp_path / "host"
    shutil.copytree(HOSTS / "this-vm-epyc-2cpu", copy, symlinks=True)
    path = copy / "measurements.json"
    measured = json.loads(path.read_text())
    measured["host.memory_bandwidth.stream"].update(copy_gbps_spread=0.05, triad_gbps_spread=0.07)
    path.write_text(json.dumps(measured))
    after = memory_bandwidth.probe(RecordedHost(copy), STANDARD)
    assert (after.copy_gbps_spread, after.triad_gbps_spread) == (0.05, 0.07)
    assert after.copy_gbps == before.copy_gbps


@pytest.mark.slow
def test_a_live_stream_spread_is_captured_and_replayed(tmp_path, monkeypatch):
    monkeypatch.setattr(stream_sizing, "MIN_ARRAY_BYTES", 16 << 20)
    monkeypatch.setattr(stream_sizing, "read_cache_tree", lambda host: {})
    recording = RecordingHost(LiveHost(), tmp_path / "capture")
    live = memory_bandwidth.probe(recording, STANDARD)
    recording.save({"level": "standard"})
    assert live.repeats and live.repeats >= 2
    assert live.copy_gbps_spread is not None and live.triad_gbps_spread is not None
    replayed = memory_bandwidth.probe(RecordedHost(tmp_path / "capture"), STANDARD)
    assert replayed == live
