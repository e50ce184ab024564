"""engine.roofline with about half the layers in host memory (issue 31): the bytes resident in
host memory read at the host's STREAM triad, the rest at the GPU's bandwidth, on a recorded
host (the healthy EPYC 9654 capture with a llama-server at ``-ngl 16`` of 33 layers on an
A100 and engine.speed's measurement of it: tests/fixtures/build_offload_hosts.py), and ``why
slowdown`` explaining it; and vLLM's ``--cpu-offload-gb``, whose KV cache stays on the GPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from doctor.commands.why import command_args, differential
from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from doctor.why.model import CONFIRMED, RULED_OUT
from probes.engine.roofline import judge
from probes.helpers.weight_bytes import Placement, kv_read_bytes
from probes.registry import PROBES
from reports import why_text
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_offload_hosts as builder
from tests.test_roofline import H100, LLAMA, _engine, _metrics

NAME = "a100-llama-cpp-ngl-16-speed"
A100_GBPS = 1593 * 2 * 5120 / 8 / 1000  # NVML: max memory clock x 2 x bus width / 8 (MB/s -> GB/s)
STREAM_TRIAD_GBPS = 362.18  # the capture's host.memory_bandwidth STREAM triad


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    return builder.build(tmp_path_factory.mktemp("roofline-offload"), NAME)


@pytest.fixture(scope="module")
def record(host):
    probes = [p for p in PROBES if p.name in ("engine.discovery", "engine.metrics", "engine.speed",
                                              "host.memory_bandwidth", "gpu.bandwidth",
                                              "engine.roofline")]
    report = scan(RecordedHost(host), ScanOptions(level=Level.STANDARD), probes, builtin_rules())
    result = next(p for p in report.probes if p.name == "engine.roofline")
    assert result.status == "ok", result.reason
    (engine,) = result.record.engines
    return engine


@pytest.mark.slow
def test_half_the_layers_in_host_memory_are_read_at_stream_and_the_rest_at_hbm(record):
    shape = builder.LLAMA3_8B_Q4_K_M
    total = shape["file_weights_bytes"]
    host_weights = round(total * 17 / 33)  # -ngl 16 of 33 layers (llama.cpp counts the output)
    assert (record.memory, record.placed_from) == ("gpu+host", "-ngl 16")
    assert (record.weights_bytes, record.weights_host_bytes) == (total, host_weights)
    assert record.gpu_bandwidth_gbps == pytest.approx(A100_GBPS, abs=0.1)
    assert record.host_bandwidth_gbps == STREAM_TRIAD_GBPS
    # the KV cache at engine.speed's context (64 prompt + 48 / 2 generated), split as the layers
    kv = 2 * shape["kv_heads"] * shape["head_dim"] * 2 * shape["layers"] * (64 + 48 // 2)
    kv_host = round(kv * host_weights / total)
    assert record.kv_read_bytes == kv
    seconds = ((total - host_weights + kv - kv_host) / (record.gpu_bandwidth_gbps * 1e9)
               + (host_weights + kv_host) / (STREAM_TRIAD_GBPS * 1e9))
    assert record.ceiling_tokens_per_s == pytest.approx(1 / seconds, abs=0.01)
    # between all-in-host and all-on-GPU, and far nearer the host's: its bytes set the pace
    all_host = STREAM_TRIAD_GBPS * 1e9 / (total + kv)
    all_gpu = A100_GBPS * 1e9 / (total + kv)
    assert all_host < record.ceiling_tokens_per_s < all_gpu / 3
    assert record.measured_tokens_per_s == 38.5
    assert record.efficiency == pytest.approx(38.5 / record.ceiling_tokens_per_s, abs=0.001)


@pytest.mark.slow
def test_why_slowdown_names_the_offload_and_the_split_ceiling(host, record):
    diff = differential("slow", str(host), "standard", None, (),
                        command_args((), (), False, None, False))
    rows = {r.cause: r for r in diff.rows}
    assert rows["model-offloaded-to-cpu"].status == CONFIRMED
    below = rows["decode-below-ceiling"]
    assert below.status == CONFIRMED
    (finding,) = below.checks[0].findings
    assert finding.evidence["memory"] == "gpu+host" and finding.evidence["placed_from"] == "-ngl 16"
    assert finding.evidence["ceiling_tokens_per_s"] == record.ceiling_tokens_per_s
    assert f"of what its gpu+host memory allows (38.5 of {record.ceiling_tokens_per_s:.1f}" in str(
        finding.title)
    assert rows["decode-at-bandwidth-limit"].status == RULED_OUT
    text = why_text.render(diff)
    assert f"efficiency = {record.efficiency}, needs ≥ 0.8 (min_efficiency)" in text


def test_vllm_cpu_offload_keeps_its_kv_cache_on_the_gpu():
    """--cpu-offload-gb moves weights to host memory; vLLM's KV cache blocks stay in GPU
    memory, so only the weights are read from the host."""
    place = Placement("llama-3-8b", 16 * 10**9, 8 * 10**9, 1, "--cpu-offload-gb 7.45", LLAMA,
                      2.0, {})
    bw = replace(H100, bus_gbps=200.0, bus_from="test")  # a bus faster than STREAM: STREAM rules
    record = judge(_engine(), place, bw, None,
                   _metrics(itl_mean_s=0.1, prompt_tokens_mean=4096.0, generation_tokens_mean=0.0))
    kv = kv_read_bytes(LLAMA, 4096, 2.0)
    seconds = (8 * 10**9 + kv) / (H100.gpu_gbps * 1e9) + 8 * 10**9 / (H100.host_gbps * 1e9)
    assert record.kv_read_bytes == kv
    assert record.ceiling_tokens_per_s == pytest.approx(1 / seconds, abs=0.01)


# gpu.bandwidth's pinned host-to-device copy on a Gen4 x16 link: 25 GB/s of its 31.5
GEN4_H100 = replace(H100, bus_gbps=25.0, bus_from="gpu.bandwidth pinned host-to-device copy")


def test_vllm_offloaded_weights_cross_pcie_so_the_link_not_stream_sets_their_pace():
    """The GPU reads --cpu-offload-gb's weights over its PCIe link every step: at 25 GB/s,
    not the host's 100 GB/s STREAM (the ceiling priced at STREAM was 4x too high there)."""
    place = Placement("llama-3-8b", 16 * 10**9, 8 * 10**9, 1, "--cpu-offload-gb 7.45", None,
                      2.0, {})
    record = judge(_engine(), place, GEN4_H100, None, _metrics(itl_mean_s=0.5))
    seconds = 8 * 10**9 / (3000.0 * 1e9) + 8 * 10**9 / (25.0 * 1e9)
    assert record.ceiling_tokens_per_s == pytest.approx(1 / seconds, abs=0.01)
    assert (record.bus_bandwidth_gbps, record.bus_bandwidth_from) == (
        25.0, "gpu.bandwidth pinned host-to-device copy")
    at_stream = 1 / (8 * 10**9 / (3000.0 * 1e9) + 8 * 10**9 / (100.0 * 1e9))
    assert record.ceiling_tokens_per_s < at_stream / 3


def test_with_tensor_parallel_each_gpu_pulls_its_share_over_its_own_link():
    """--cpu-offload-gb is per GPU: two GPUs each read half the host bytes over their own
    links at once, and host memory serves both (the slower of the two bounds)."""
    place = Placement("llama-3-70b", 140 * 10**9, 40 * 10**9, 2, "--cpu-offload-gb 18.6", None,
                      2.0, {})
    record = judge(_engine(tensor_parallel_size=2), place, GEN4_H100, None, _metrics(itl_mean_s=1.0))
    links = 40 * 10**9 / 2 / (25.0 * 1e9)  # 0.8 s; host memory: 40 GB at 100 GB/s, 0.4 s
    seconds = 100 * 10**9 / 2 / (3000.0 * 1e9) + links
    assert record.ceiling_tokens_per_s == pytest.approx(1 / seconds, abs=0.01)
    fast_links = judge(_engine(tensor_parallel_size=2), place, replace(H100, bus_gbps=63.0), None,
                       _metrics(itl_mean_s=1.0))
    seconds = 100 * 10**9 / 2 / (3000.0 * 1e9) + 40 * 10**9 / (100.0 * 1e9)  # STREAM's 0.4 s
    assert fast_links.ceiling_tokens_per_s == pytest.approx(1 / seconds, abs=0.01)


def test_no_pcie_figure_leaves_a_vllm_offload_ceiling_unjudged_with_the_reason():
    place = Placement("llama-3-8b", 16 * 10**9, 8 * 10**9, 1, "--cpu-offload-gb 7.45", None,
                      2.0, {})
    bw = replace(H100, missing={"bus_gbps": "GPU 0: no PCIe link generation or width from NVML"})
    record = judge(_engine(), place, bw, None, _metrics(itl_mean_s=0.5))
    assert record.ceiling_tokens_per_s is None and record.efficiency is None
    assert "no PCIe link" in record.missing["ceiling_tokens_per_s"]


def test_llama_cpp_offloaded_layers_run_on_the_cpu_at_stream_whatever_the_bus():
    place = Placement("llama-3-8b", 16 * 10**9, 8 * 10**9, 1, "-ngl 16", None, 2.0, {})
    record = judge(_engine("llama.cpp"), place, GEN4_H100, None, _metrics(itl_mean_s=0.5))
    assert record.ceiling_tokens_per_s == pytest.approx(12.1, abs=0.01)
    assert record.bus_bandwidth_gbps is None
