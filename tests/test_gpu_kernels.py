"""The GPU micro-kernels on CPU tensors (the same code a GPU runs), and the KV allocation model."""

from __future__ import annotations

import json

import pytest

from probes.kernels import gpu_bandwidth, gpu_first_use, gpu_link_load, gpu_sustained, kv_alloc


def test_paged_model_counts_whole_blocks():
    result = kv_alloc.simulate([1, 16, 17], block_tokens=16, bytes_per_token=2)
    assert result["blocks"] == 4
    assert result["reserved_bytes"] == 64 * 2 and result["used_bytes"] == 34 * 2
    assert result["waste_fraction"] == pytest.approx(30 / 64)


def test_contiguous_model_reserves_per_request_and_counts_overflow():
    result = kv_alloc.simulate_contiguous([100, 300, 5000], reserve_tokens=4096, bytes_per_token=1)
    assert result["reserved_bytes"] == 3 * 4096
    assert result["used_bytes"] == 100 + 300 + 4096 and result["overflowing"] == 1
    best = kv_alloc.simulate_contiguous([100, 300], None, 1)
    assert best["reserve_tokens"] == 300 and best["waste_fraction"] == pytest.approx(200 / 600)


def test_bigger_blocks_waste_more_on_short_requests_and_contiguous_wastes_most():
    mix = kv_alloc.reference_mix()
    waste = [kv_alloc.simulate(mix, b, 131072)["waste_fraction"] for b in (8, 16, 32)]
    assert waste == sorted(waste) and waste[0] < 0.05
    assert kv_alloc.simulate_contiguous(mix, 8192, 131072)["waste_fraction"] > 0.8
    assert kv_alloc.simulate([], 16, 1)["waste_fraction"] == 0.0


@pytest.mark.parametrize("bad", [dict(lengths=[-1]), dict(block_tokens=0), dict(bytes_per_token=0)])
def test_model_refuses_nonsense(bad):
    args = {"lengths": [10], "block_tokens": 16, "bytes_per_token": 2, **bad}
    with pytest.raises(ValueError):
        kv_alloc.simulate(**args)


@pytest.mark.slow
def test_allocator_replay_on_cpu_is_the_model():
    mix = [5, 40, 17, 3] * 10
    result = kv_alloc.replay_allocator(mix, 16, 64, "cpu", live_requests=8)
    assert result["allocator_overhead_fraction"] is None
    assert result["used_bytes"] == sum(mix[-8:]) * 64


def test_device_and_host_copies_on_cpu_count_bytes_as_documented():
    d2d = gpu_bandwidth.device_copy("cpu", 4 << 20, warmup=1, repeats=3, budget_s=1.0)
    assert d2d["bytes"] == 2 * (4 << 20) and d2d["gbps"] > 0 and d2d["repeats"] == 3
    h2d = gpu_bandwidth.host_copy("cpu", 4 << 20, True, True, warmup=1, repeats=3, budget_s=1.0)
    assert h2d["bytes"] == 4 << 20 and h2d["gbps"] > 0


def test_repeats_stop_at_the_budget():
    import time

    result = gpu_bandwidth.median_gbps(lambda: time.sleep(0.05), 1, "cpu", warmup=0,
                                       repeats=1000, budget_s=0.2)
    assert 1 <= result["repeats"] <= 6


@pytest.mark.slow
def test_bandwidth_cli_on_cpu(capsys):
    assert gpu_bandwidth.main(["--device", "cpu", "--budget-s", "0.2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"} <= set(out)


def test_first_use_on_cpu(capsys):
    assert gpu_first_use.main(["--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first_s"] > 0 and out["warm_s"] > 0


class _Ticks:
    """A perf_counter that moves 0.05 s each time it is read: the load's clock, whatever the
    machine's speed (how long the real one runs is benchmarks/')."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.05
        return self.now


def test_sustained_load_on_cpu_is_bounded(capsys, monkeypatch):
    monkeypatch.setattr(gpu_sustained, "time", _Ticks())
    assert gpu_sustained.main(["--device", "cpu", "--seconds", "0.3"]) == 0
    out = json.loads(capsys.readouterr().out)
    # it ran its 0.3 s and stopped at the first batch past them: two reads of the clock a
    # batch, one at the start and one at the end
    assert 0.3 <= out["seconds"] <= 0.3 + 3 * 0.05 and out["gpus"][0]["tflops"] >= 0


def test_gpu_only_kernels_say_why_without_a_gpu(capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu_link_load.main(["--device", "0", "--seconds", "0.1"]) == 1
    assert "no CUDA device" in capsys.readouterr().err
    assert gpu_bandwidth.main(["--device", "0"]) == 1
    assert "no CUDA device" in capsys.readouterr().err
