"""Prometheus pages: parsing, histogram_quantile's arithmetic, normalising, block waste."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from probes.helpers.promtext import PageError, bucket_delta, parse, quantile
from probes.engine.kv_cache import recommend_block, waste_fraction
from probes.helpers.engine_names import kind_of_page
from probes.helpers.engine_normalise import normalise

PAGES = Path(__file__).parent / "engine_pages"
INF = math.inf


def test_quantile_interpolates_inside_the_bucket_as_prometheus_does():
    buckets = ((0.1, 10.0), (0.5, 20.0), (INF, 20.0))
    assert quantile(0.5, buckets) == pytest.approx(0.1)  # rank 10 ends the first bucket
    assert quantile(0.75, buckets) == pytest.approx(0.3)  # 0.1 + 0.4 * 5/10
    assert quantile(0.25, buckets) == pytest.approx(0.05)  # the first bucket starts at 0


def test_quantile_edges():
    assert quantile(0.99, ((1.0, 1.0), (INF, 10.0))) == 1.0  # in +Inf: the highest bound
    assert quantile(0.5, ((1.0, 0.0), (INF, 0.0))) is None  # no observation
    assert quantile(0.5, ((1.0, 3.0), (2.0, 5.0))) is None  # no +Inf bucket
    assert quantile(0.5, ((1.0, 4.0), (2.0, 3.0), (INF, 4.0))) == 0.5  # rank 2 of 4 in (0, 1]


def test_bucket_delta_and_restart():
    before, after = ((1.0, 2.0), (INF, 4.0)), ((1.0, 5.0), (INF, 9.0))
    assert bucket_delta(before, after) == ((1.0, 3.0), (INF, 5.0))
    restarted = ((1.0, 1.0), (INF, 1.0))
    assert bucket_delta(after, restarted) == restarted


def test_garbage_is_a_page_error_naming_the_source():
    with pytest.raises(PageError, match=r"^http://x/metrics: not a Prometheus text page"):
        parse("<html>502</html>", "http://x/metrics")


def test_engine_recognised_from_its_names():
    for scenario, kind in (("vllm-v1-calm", "vllm"), ("sglang", "sglang"), ("tgi", "tgi"),
                           ("triton-trtllm", "tensorrt-llm")):
        page = parse((PAGES / scenario / "metrics.1.txt").read_text(), scenario)
        assert kind_of_page(page.names()) == kind


def test_vllm_counters_become_rates_and_histograms_use_the_window():
    first = parse((PAGES / "vllm-v1-kv-pressure" / "metrics.1.txt").read_text(), "a")
    second = parse((PAGES / "vllm-v1-kv-pressure" / "metrics.2.txt").read_text(), "b")
    m = normalise("vllm", "u", first, second, 3.0)
    assert m.preemptions_in_window == 15 and m.preemptions_per_s == 5.0
    assert m.latency_window == "between scrapes" and m.latency_requests == 20
    assert m.cache_config["block_size"] == "16" and m.cache_config["num_gpu_blocks"] == "4410"
    assert m.generation_tokens_per_s == pytest.approx(sum(range(120, 481, 360 // 19 + 1)) / 3, rel=0.1)
    same = normalise("vllm", "u", second, second, 3.0)  # nothing moved: since start
    assert same.latency_window == "since start" and same.preemptions_in_window == 0


def test_v0_names_are_read():
    page = parse("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n"
                 "vllm:num_requests_waiting{model_name=\"m\"} 2\n"
                 "vllm:gpu_prefix_cache_hit_rate{model_name=\"m\"} -1\n", "v0")
    m = normalise("vllm", "u", page, page, 2.0)
    assert m.kv_cache_use == 0.5 and m.requests_waiting == 2
    assert m.prefix_cache_hit_rate is None  # -1: prefix caching off


def test_block_waste():
    assert waste_fraction([16.0, 32.0], 16) == 0
    assert waste_fraction([17.0], 16) == pytest.approx(15 / 32, abs=1e-5)
    assert waste_fraction([16.2], 16) == pytest.approx(15 / 32, abs=1e-5)  # 16.2 tokens take 17 slots
    assert recommend_block(tuple([40.0] * 10)) == (16, pytest.approx(8 / 48, abs=1e-5))
    assert recommend_block(tuple([8000.0] * 10))[0] == 32
