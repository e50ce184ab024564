"""Judging is a function of records: engine.kv_cache's ``judge`` takes engine.discovery's and
engine.metrics' records and nothing else, and engine.slots' judging parts take the saved
sweep's points and engine.metrics' record, so their tables are tested without a host (issue 29).
The figures are worked by hand from the paged-allocation model (probes/helpers/kv_blocks.py):
a request of L tokens holds ceil(L / block) blocks."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from doctor.inputs import Inputs
from doctor.model import ScanOptions, Skip
from probes.engine import kv_cache, offload
from probes.engine import slots as slots_probe
from probes.helpers.engine_discovery import DiscoveryRecord, found
from probes.helpers.engine_flags import blank
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import MetricsRecord, for_engine, scraped
from probes.helpers.engine_sweep import SweepPoint
from probes.helpers.stream_record import MemoryBandwidthRecord

URL = "http://127.0.0.1:8000"


def metrics(**given) -> EngineMetrics:
    """An engine's scrape with every figure absent but those given."""
    base = {f.name: None for f in fields(EngineMetrics)}
    base.update(endpoint=f"{URL}/metrics", kind="vllm", interval_s=2.0, request_tokens_mix=(),
                cache_config={}, absent=())
    base.update(given)
    return EngineMetrics(**base)


def discovery(**config) -> DiscoveryRecord:
    engine = replace(blank(URL), kind="vllm", **config)
    return DiscoveryRecord((engine,), 1)


# (request-length mix (the last point is the p99, left out), block size from /metrics,
#  block size from discovery, expected waste, recommended block, its waste)
TABLE = [
    # 16-token blocks: 10 → 1 block (6 empty), 20 → 2 (12 empty), 30 → 2 (2 empty): 20/80
    ((10.0, 20.0, 30.0, 999.0), "16", None, 0.25, 16, 0.25),
    # the block size discovery read (--block-size 32) when the page has none: 3 blocks of
    # 32 for 60 tokens, 36/96; the recommendation stays 16 (20/80)
    ((10.0, 20.0, 30.0, 999.0), None, 32, 0.375, 16, 0.25),
    # whole blocks waste nothing
    ((16.0, 32.0, 64.0, 999.0), "16", None, 0.0, 16, 0.0),
    # SGLang's page size 1: token by token, nothing to recommend
    ((10.0, 20.0, 30.0, 999.0), "1", None, 0.0, None, None),
    # a median of long context (≥ 4096) moves to 32 where that wastes under 2 %
    ((8192.0, 8192.0, 8192.0, 9999.0), "16", None, 0.0, 32, 0.0),
]


@pytest.mark.parametrize("mix,page_block,flag_block,waste,recommended,at_recommended", TABLE)
def test_kv_cache_judges_block_waste_from_records(mix, page_block, flag_block, waste,
                                                  recommended, at_recommended):
    scrape = metrics(request_tokens_mix=mix, kv_cache_use=0.5,
                     cache_config={"block_size": page_block} if page_block else {})
    (engine,) = kv_cache.judge(discovery(block_size=flag_block),
                               MetricsRecord((scrape,), ())).engines
    assert (engine.block_waste_fraction, engine.recommended_block_size,
            engine.waste_at_recommended) == (waste, recommended, at_recommended)
    assert engine.kv_cache_use == 0.5 and engine.request_tokens_p50 == mix[1]


def test_kv_cache_takes_the_limits_discovery_read_for_the_engine_it_scraped():
    record = discovery(max_model_len=8192, max_num_seqs=64, max_num_batched_tokens=2048)
    (engine,) = kv_cache.judge(record, MetricsRecord((metrics(),), ())).engines
    assert (engine.max_model_len, engine.max_num_seqs, engine.max_num_batched_tokens) == (
        8192, 64, 2048)
    elsewhere = metrics(endpoint="http://10.0.0.9:8000/metrics")  # discovery did not find it
    (other,) = kv_cache.judge(record, MetricsRecord((elsewhere,), ())).engines
    assert (other.max_model_len, other.block_size, other.block_waste_fraction) == (None, None, None)


def test_kv_cache_with_no_scrape_is_skipped_saying_so():
    with pytest.raises(Skip, match="/metrics page could be read"):
        kv_cache.judge(discovery(), MetricsRecord((), (f"{URL}/metrics: timeout (no answer)",)))


def test_a_probe_handed_its_needs_reads_them_and_not_the_host():
    """The records in the inputs are what the helpers give: the host is never asked (a
    host that fails every read would say so)."""

    class NoHost:
        kind = "live"

        def __getattr__(self, name):
            raise AssertionError(f"the host was asked for {name}")

    scrape = metrics(request_tokens_mix=(10.0, 20.0, 30.0, 999.0),
                     cache_config={"block_size": "16"})
    inputs = Inputs({"engine.discovery": discovery(), "engine.metrics": MetricsRecord((scrape,), ())})
    assert found(NoHost(), ScanOptions(), inputs).engines == discovery().engines
    assert scraped(NoHost(), ScanOptions(), inputs).engines == (scrape,)
    (engine,) = kv_cache.probe(NoHost(), ScanOptions(), inputs).engines
    assert engine.block_waste_fraction == 0.25


def test_one_engine_s_scrape_or_its_error_by_base_url():
    good = metrics()
    record = MetricsRecord((good,), ("http://127.0.0.1:9000/metrics: timeout (no answer in 3 s)",))
    assert for_engine(record, URL) is good and for_engine(record, URL + "/") is good
    assert for_engine(record, "http://127.0.0.1:9000") == record.errors[0]
    assert for_engine(record, "http://127.0.0.1:9001") is None


# engine.slots: the saved sweep's points (engine.load's SweepPoint records) and engine.metrics'
# record judged without a host.
SWEEP = (SweepPoint(1, 50.0, 100.0, True), SweepPoint(2, 90.0, 110.0, True),
         SweepPoint(4, 95.0, 400.0, True), SweepPoint(8, 96.0, 900.0, False))


@pytest.mark.parametrize("points,slots,expected", [
    (SWEEP, 2, (4, 100.0, 400.0)),  # 8 was not usable: 4 is the highest level above 2 slots
    (SWEEP, 1, (4, 100.0, 400.0)),
    (SWEEP, 4, (None, None, None)),  # no usable level above the slots: no wait measured
    (SWEEP, None, (None, None, None)),  # slots unknown
    (SWEEP[1:], 1, (None, None, None)),  # no level at concurrency 1 to compare with
    ((), 2, (None, None, None)),
])
def test_slots_reads_the_wait_from_the_sweep_points(points, slots, expected):
    assert slots_probe.sweep_wait(points, slots) == expected


@pytest.mark.parametrize("slots,offered,level,expected", [
    (2, 5, None, 5),  # five offered to two slots: five would serve them at once
    (2, None, 4, 4),  # nothing offered now; the sweep waited at 4
    (4, 3, 2, None),  # enough slots
    (None, 9, 9, None),  # slots unknown: nothing to suggest
    (2, 3, 6, 6),
])
def test_slots_suggests_what_the_concurrency_seen_needs(slots, offered, level, expected):
    assert slots_probe.suggested_slots(slots, offered, level) == expected


def test_slots_takes_the_deferred_requests_from_the_metrics_record():
    record = MetricsRecord((metrics(endpoint="http://127.0.0.1:8080/metrics", kind="llama.cpp",
                                    requests_waiting=3.0),
                            metrics(endpoint="http://127.0.0.1:8081/metrics", kind="llama.cpp",
                                    requests_waiting=2.5)), ())
    assert slots_probe.deferred_of(record, "http://127.0.0.1:8080") == 3
    assert slots_probe.deferred_of(record, "http://127.0.0.1:8081") is None  # 2.5 is no count
    assert slots_probe.deferred_of(record, "http://127.0.0.1:9999") is None


# engine.offload: the tokens/s estimate from the bytes on each side and the two bandwidths
# (a GPU's memory ceiling, host.memory_bandwidth's STREAM figure), no host.
@pytest.mark.parametrize("total,cpu,gpu_gbps,cpu_gbps,expected", [
    # 6 GB at 1000 GB/s + 4 GB at 100 GB/s = 46 ms a token, against 10 ms all on the GPU
    (10e9, 4e9, 1000.0, 100.0, (21.7, 100.0, 4.6)),
    (10e9, 0, 1000.0, None, (100.0, 100.0, 1.0)),  # nothing on the CPU: no CPU figure needed
    (10e9, 4e9, None, 100.0, (None, None, None)),  # no GPU ceiling: not estimated
    (10e9, 4e9, 1000.0, None, (None, None, None)),  # weights on the CPU, no STREAM figure
    (None, None, 1000.0, 100.0, (None, None, None)),  # the model's bytes unknown
])
def test_offload_estimates_tokens_per_second_from_values(total, cpu, gpu_gbps, cpu_gbps, expected):
    missing: dict[str, str] = {}
    gpu = offload.GpuSide(None, "H100", gpu_gbps, 64.0,
                          {} if gpu_gbps else {"gpu_bandwidth_gbps": "no clock from NVML"})
    assert offload.estimate(total, cpu, gpu, cpu_gbps, missing) == expected
    if expected[0] is None:  # each absent figure says why
        assert set(missing) == {"tokens_per_s", "tokens_per_s_on_gpu", "slowdown"}
        if gpu_gbps is None:
            assert missing["slowdown"] == "no clock from NVML"


def stream(**given) -> MemoryBandwidthRecord:
    """host.memory_bandwidth's record with every figure absent (or zero) but those given."""
    base = {f.name: None for f in fields(MemoryBandwidthRecord)}
    base.update(backend="numpy", threads=2, array_bytes=1 << 28, copy_gbps=0.0, triad_gbps=0.0,
                kernel_s=1.0, empty_channels=(), vm_cache_bounded=False)
    base.update(given)
    return MemoryBandwidthRecord(**base)


@pytest.mark.parametrize("handed,expected", [
    # the unrounded figure the record keeps for it, not the rounded triad_gbps it shows
    ({"host.memory_bandwidth": stream(triad_gbps=362.18, stream_gbps=362.1849)}, (362.1849, None)),
    ({"host.memory_bandwidth": stream(stream_gbps=0.0)}, (None, "host.memory_bandwidth gave 0.0")),
    ({}, (None, "host memory bandwidth not measured in this scan "
               "(host.memory_bandwidth runs at `--level standard`)")),
    ({"host.memory_bandwidth": "a recording of another shape"},
     (None, "host memory bandwidth not measured in this scan "
            "(host.memory_bandwidth runs at `--level standard`)")),
])
def test_offload_takes_the_stream_figure_from_host_memory_bandwidth_s_record(handed, expected):
    assert offload.host_bandwidth(Inputs(handed)) == expected
