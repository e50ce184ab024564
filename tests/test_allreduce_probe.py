"""gpu.collective (probes/gpu/collective.py): the all-reduce really runs (gloo, two processes
on the CPU), a peer that never joins is killed at the hard limit with its step named, and
recorded GPU hosts give the ceiling, the ratio and the skips."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions, Skip
from doctor.seam.live import LiveHost
from probes.gpu import collective
from tests.fixtures.gpu_machines import gpu, nvml_entries
from tests.gpu_host import gpu_host

FULL = ScanOptions(level=Level.FULL)


def _workers() -> set[int]:
    """Live all-reduce workers on this machine (their command line names the module)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if b"probes.kernels.allreduce\0--worker" in cmdline and state != "Z":
            out.add(int(entry))
    return out


@pytest.mark.slow
def test_gloo_with_two_processes_really_runs():
    t0 = time.perf_counter()
    g = collective.on_cpu(LiveHost(), ranks=2, limit_s=60)
    took = time.perf_counter() - t0
    assert g.outcome == "ok", g.failure
    assert g.backend == "gloo" and g.n == 2 and g.size_bytes == 16 << 20
    assert g.busbw_gbps is not None and g.busbw_gbps > 0
    assert g.busbw_gbps == pytest.approx(g.algbw_gbps)  # 2(n-1)/n = 1 for two ranks
    assert g.algbw_gbps == pytest.approx(g.size_bytes / g.seconds / 1e9, rel=1e-2)
    assert g.iterations >= 1 and set(g.steps_s) == {"start", "rendezvous", "warm-up", "timed"}
    assert "CPU" in g.size_note and g.kill_latency_s is None and g.failed_step is None
    assert g.ratio is None and g.missing["ratio"] == "the CPU: no GPU path"
    assert "busbw" in collective.describe(g)
    print(f"gloo 2 ranks 16 MiB: busbw {g.busbw_gbps} GB/s, {g.seconds * 1e3:.1f} ms an "
          f"all-reduce, steps {g.steps_s}, total {took:.1f} s")


@pytest.mark.slow
def test_a_peer_that_never_joins_is_killed_at_the_hard_limit_and_the_step_named():
    before = _workers()
    limit = 20.0  # rank 0's torch import takes ~5 s on this loaded machine: it reaches rendezvous
    t0 = time.perf_counter()
    g = collective.on_cpu(LiveHost(), ranks=2, limit_s=limit, hold_rank=1)
    took = time.perf_counter() - t0
    assert g.outcome == "timeout"
    assert g.failed_step == "rendezvous"
    assert "rank 1 never reached it" in g.failure and f"{limit:g} s limit" in g.failure
    assert g.busbw_gbps is None and g.missing["busbw_gbps"] == "not measured: timeout"
    # killed at the limit, not before, and by the launcher, which reported it (the outcome
    # and the step above); how long the kill took is the machine's, printed below
    assert g.kill_latency_s is not None and g.kill_latency_s >= 0
    assert g.total_s >= limit
    assert _workers() - before == set()  # both workers are gone, the sleeping one included
    line = collective.describe(g)
    assert line.startswith("2 CPU ranks: timeout (kill took") and "rendezvous" in line
    print(f"hard limit {limit:g} s: ended after {took:.2f} s, kill latency "
          f"{g.kill_latency_s * 1e3:.0f} ms")


def _two_gpus(model: str, level: str = "PXB", p2p: str = "OK", version: int | None = None,
              measured: object = None):
    extra = [] if version is None else [("nvmlDeviceGetNvLinkVersion", [None, 0], version)]
    machine = {"gpus": [gpu(model, extra=extra), gpu(model, extra=extra)],
               "topo": {(0, 1): level}, "p2p": {(0, 1): p2p}}
    return gpu_host(nvml_entries(machine),
                    measurements=None if measured is None else {"gpu.collective.0-1": measured})


HEALTHY_H100 = {"backend": "nccl", "n": 2, "bytes": 256 << 20, "outcome": "ok",
                "seconds": 0.00075, "iterations": 20, "algbw_gbps": 357.9, "busbw_gbps": 357.9,
                "transport": "P2P/CUMEM", "transports": {"P2P/CUMEM": 48}, "limit_s": 90.0,
                "steps_s": {"start": 6.1, "rendezvous": 0.4, "warm-up": 2.2, "timed": 0.02},
                "total_s": 12.3}


def test_an_nvlink_pair_is_judged_against_its_links():
    host = _two_gpus("h100-sxm", version=6, measured=HEALTHY_H100)  # NVML_NVLINK_VERSION_4_0
    record = collective.probe(host, FULL)
    (g,) = record.groups
    assert g.gpus == (0, 1) and g.path == "NV18" and g.p2p_capable is True
    assert g.ceiling_gbps == 450.0 and "NVLink 4.0 x 18 links" in g.ceiling_source
    assert g.ratio == pytest.approx(357.9 / 450, abs=1e-3)
    assert g.transport == "P2P/CUMEM" and g.transports == {"P2P/CUMEM": 48}
    assert collective.summary(record) == "GPU 0,1: busbw 357.9 GB/s = 0.795 of 450 GB/s (NV18) via P2P/CUMEM"


def test_a_pcie_pair_is_judged_against_its_link_and_an_unknown_version_says_why():
    staged = {**HEALTHY_H100, "busbw_gbps": 7.8, "algbw_gbps": 7.8, "transport": "SHM",
              "transports": {"SHM": 8}}
    (g,) = collective.probe(_two_gpus("a100-pcie-80gb", "PXB", measured=staged), FULL).groups
    assert g.path == "PXB" and g.ceiling_gbps == 31.5 and g.ratio == pytest.approx(0.248, abs=1e-3)
    assert g.p2p_capable is True and "PCIe link as capable" in g.ceiling_source
    (g,) = collective.probe(_two_gpus("h100-sxm", version=9, measured=HEALTHY_H100), FULL).groups
    assert g.ratio is None and "no per-link rate" in g.missing["ceiling_gbps"]


def test_a_pair_across_sockets_or_without_p2p_is_not_p2p_capable():
    (g,) = collective.probe(_two_gpus("l40s", "SYS", measured=HEALTHY_H100), FULL).groups
    assert g.p2p_capable is False and g.path == "SYS"
    (g,) = collective.probe(_two_gpus("l40s", "PXB", p2p="CNS", measured=HEALTHY_H100), FULL).groups
    assert g.p2p_capable is False


def test_a_recorded_timeout_replays_as_a_timeout():
    hung = {"backend": "nccl", "n": 2, "bytes": 256 << 20, "outcome": "timeout",
            "failed_step": "warm-up", "limit_s": 90.0, "kill_latency_s": 0.012, "total_s": 90.01,
            "failure": "no result within the 90 s limit: stuck in warm-up (...): all 2 ranks in it; killed"}
    (g,) = collective.probe(_two_gpus("a100-pcie-80gb", measured=hung), FULL).groups
    assert (g.outcome, g.failed_step, g.kill_latency_s) == ("timeout", "warm-up", 0.012)
    assert g.busbw_gbps is None and g.ratio is None


def test_a_kernel_that_failed_outright_is_a_failed_group_not_a_crash():
    host = _two_gpus("a100-pcie-80gb")  # nothing recorded for the measurement
    (g,) = collective.probe(host, FULL).groups
    assert g.outcome == "failed" and g.failure


def test_one_gpu_is_skipped_with_that_reason():
    host = gpu_host(nvml_entries({"gpus": [gpu("h100-pcie")]}))
    with pytest.raises(Skip, match="one GPU: an all-reduce needs two or more"):
        collective.probe(host, FULL)


def test_without_torch_the_probe_is_skipped_with_that_reason():
    host = _two_gpus("a100-pcie-80gb", measured={"skip": "torch is not installed for /usr/bin/python3"})
    with pytest.raises(Skip, match="torch is not installed"):
        collective.probe(host, FULL)


@pytest.mark.parametrize("measured", [
    {"outcome": "done"}, {"outcome": "ok", "busbw_gbps": float("nan")},
    {"outcome": "ok", "busbw_gbps": "fast", "transports": {"SHM": "x"}, "steps_s": [1]},
    {"outcome": "ok", "busbw_gbps": 10 ** 400, "n": True, "failure": 7},
    {"outcome": "ok", "busbw_gbps": float("inf"), "transports": {"SHM": float("nan")}},
], ids=["unknown-outcome", "nan", "wrong-types", "huge", "inf"])
def test_a_kernel_result_of_any_shape_gives_a_record(measured):
    """What the live kernel printed (json.loads takes NaN and 1e999), or a recording holds."""
    ceiling = collective.PathCeiling("PXB", 31.5, "test", True)
    g = collective.group_record((0, 1), measured, ceiling, {})
    assert g.outcome in ("ok", "failed") and g.n == 2
    assert g.busbw_gbps is None and g.ratio is None and g.transports == {}
    assert collective.describe(g)


@pytest.mark.parametrize("measured", [[1, 2], "ok", {"outcome": ["ok"]}])
def test_a_recording_of_another_shape_is_a_failed_group(measured):
    (g,) = collective.probe(_two_gpus("a100-pcie-80gb", measured=measured), FULL).groups
    assert g.outcome == "failed" and g.failure and g.busbw_gbps is None
