"""engine.roofline's judging part, as records and plain values (no host): the ceiling from the
bytes a token reads and the memory they live in, the efficiency, TTFT taken apart; the means
engine.metrics now keeps from vLLM's histograms; the figures in the diff. The live figures
are tests/test_roofline_live.py's."""

from __future__ import annotations

import pytest

from doctor.diff.compare import compare
from doctor.diff.model import CHANGED
from doctor.workload.model_shape import ModelShape
from probes.engine.roofline import Bandwidths, judge
from probes.helpers.compute_peaks import dense_peak
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_normalise import EngineMetrics, normalise
from probes.helpers.promtext import parse
from probes.helpers.speed_record import SpeedEndpoint
from probes.helpers.weight_bytes import Placement, kv_read_bytes
from tests.saved_scans import saved

GIB = 1 << 30
# Llama-3-8B's shape: 32 layers, 8 KV heads of 128
LLAMA = ModelShape("llama-3-8b", "config.json", 32, 32, 8, 128, 8_030_000_000, "bf16", None,
                   8192, None, 0, None)
# gemma-3-270m: 18 layers, one KV head of 256, 5 of 6 layers local with a 512-token window
GEMMA = ModelShape("gemma-3-270m", "x.gguf", 18, 4, 1, 256, 268_000_000, None, 253_113_024,
                   32768, 512, 15, "gguf")


def _engine(kind: str = "vllm", **kw) -> Engine:
    values = dict(pid=4242, kind=kind, base_url="http://127.0.0.1:8000", model="m", model_path=None,
                  gpu_memory_utilization=None, max_num_seqs=None, max_num_batched_tokens=None,
                  block_size=None, max_model_len=None, kv_cache_dtype=None, tensor_parallel_size=None,
                  enforce_eager=None, api_key_set=False, listen=(), source="process",
                  config_from=(), error=None)
    return Engine(**{**values, **kw})


def _speed(**kw) -> SpeedEndpoint:
    values = dict(base_url="http://127.0.0.1:8000", kind="llama.cpp", requests=2, error=None,
                  prompt_tokens=64, output_tokens=48, ttft_s=0.55, itl_mean_s=0.05,
                  engine_prompt_ms=548.0, engine_prompt_n=64, engine_predicted_per_second=17.7,
                  engine_predicted_n=48, prompt_tokens_sent=83, output_tokens_received=56,
                  sending_s=4.0)
    return SpeedEndpoint(**{**values, **kw})


H100 = Bandwidths(True, "NVIDIA H100 80GB HBM3", 3000.0, "gpu.bandwidth device copy", 100.0, {})
CPU_ONLY = Bandwidths(False, None, None, None, 12.0, {})


def test_kv_read_counts_every_global_layer_and_a_local_one_up_to_its_window():
    assert kv_read_bytes(LLAMA, 1000, 2.0) == 2 * 8 * 128 * 2 * 32 * 1000
    # gemma: 3 global layers read 4,000 tokens, 15 local ones their 512
    assert kv_read_bytes(GEMMA, 4000, 2.0) == 2 * 1 * 256 * 2 * (3 * 4000 + 15 * 512)


def test_an_h100_engine_at_nine_tenths_of_its_hbm_ceiling():
    place = Placement("llama-3-8b", 16 * 10**9, 0, 1, "--cpu-offload-gb 0", None, 2.0, {})
    # 16 GB a token at 3,000 GB/s: 187.5 tokens/s; an ITL of 5.926 ms is 168.75
    metrics = _metrics(itl_mean_s=1 / 168.75, requests_running=1.0)
    record = judge(_engine(), place, H100, None, metrics)
    assert record.memory == "gpu" and record.ceiling_tokens_per_s == 187.5
    assert record.efficiency == pytest.approx(0.9, abs=0.001)
    assert "kv_read_bytes" in record.missing  # no shape: the weights only, and it says so


def test_half_the_layers_in_host_memory_set_the_pace():
    place = Placement("llama-3-8b", 16 * 10**9, 8 * 10**9, 1, "-ngl 16", None, 2.0, {})
    record = judge(_engine("llama.cpp"), place, H100, _speed(engine_predicted_per_second=10.0), None)
    # 8 GB at 3,000 GB/s + 8 GB at 100 GB/s = 0.08267 s a token
    assert record.memory == "gpu+host" and record.ceiling_tokens_per_s == pytest.approx(12.1, abs=0.01)
    assert record.efficiency == pytest.approx(10.0 / 12.1, abs=0.002)
    assert record.concurrency == 1.0 and "predicted_per_second" in record.measured_from


def test_a_cpu_host_without_its_stream_figure_has_no_ceiling_and_says_why():
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU: all in host memory", GEMMA, 2.0, {})
    missing = Bandwidths(False, None, None, None, None, {"host_bandwidth_gbps": "not measured"})
    record = judge(_engine("llama.cpp"), place, missing, _speed(), None)
    assert record.ceiling_tokens_per_s is None and record.efficiency is None
    assert record.missing["ceiling_tokens_per_s"] == "not measured"
    assert record.measured_tokens_per_s == 17.7  # measured all the same


def test_llama_cpp_ttft_is_its_prompt_time_and_the_rest_is_the_wait():
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU", GEMMA, 2.0, {})
    record = judge(_engine("llama.cpp"), place, CPU_ONLY, _speed(), None)
    # idle: 548 ms of a 550 ms first token computing the prompt, 2 ms of HTTP
    assert record.prefill_s == 0.548 and record.queue_s == pytest.approx(0.002)
    assert record.prefill_share == pytest.approx(0.996, abs=0.001) and record.queue_share == 0.004
    assert record.rest_s is None and "queue" in record.missing["rest_s"]
    # the request's context: 64 + 48 / 2 tokens
    assert record.context_tokens == 88 and record.kv_read_bytes == kv_read_bytes(GEMMA, 88, 2.0)


def test_llama_cpp_behind_other_requests_for_its_one_slot_is_queue_dominated():
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU", GEMMA, 2.0, {})
    # -np 1 and four clients: 1.8 s before the first token, 150 ms of it the prompt
    record = judge(_engine("llama.cpp"), place, CPU_ONLY, _speed(ttft_s=1.8, engine_prompt_ms=150.0), None)
    assert (record.queue_s, record.prefill_s) == (1.65, 0.15)
    assert (record.queue_share, record.prefill_share) == (0.917, 0.083)
    assert "queue is the rest" in record.ttft_from


def test_llama_cpp_prompt_time_past_the_client_ttft_is_capped_not_negative():
    # the engine's clock and the client's disagree by a millisecond: no negative wait
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU", GEMMA, 2.0, {})
    record = judge(_engine("llama.cpp"), place, CPU_ONLY, _speed(ttft_s=0.5, engine_prompt_ms=501.0), None)
    assert (record.queue_s, record.prefill_s, record.prefill_share) == (0.0, 0.5, 1.0)


def test_llama_cpp_without_a_prompt_time_is_not_taken_apart():
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU", GEMMA, 2.0, {})
    record = judge(_engine("llama.cpp"), place, CPU_ONLY, _speed(engine_prompt_ms=None), None)
    assert record.ttft_s == 0.55 and record.queue_s is None and record.queue_share is None
    assert "prompt time" in record.missing["queue_s"]


def test_no_measurement_at_all_is_absent_with_a_reason_not_zero():
    place = Placement("m", 10**9, 0, 1, "-ngl all", None, 2.0, {})
    record = judge(_engine(), place, H100, _speed(error="HTTP 500"), None)
    assert record.measured_tokens_per_s is None and record.efficiency is None
    assert record.missing["measured_tokens_per_s"] == "HTTP 500"
    assert record.ttft_s is None and "ttft_s" in record.missing


PAGE = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {n}
vllm:time_to_first_token_seconds_sum {ttft}
vllm:time_to_first_token_seconds_count {n}
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{{le="+Inf"}} {n}
vllm:request_queue_time_seconds_sum {queue}
vllm:request_queue_time_seconds_count {n}
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{{le="+Inf"}} {n}
vllm:request_prefill_time_seconds_sum {prefill}
vllm:request_prefill_time_seconds_count {n}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 1
"""


def test_vllm_ttft_parts_are_the_means_between_the_scrapes():
    first = parse(PAGE.format(n=10, ttft=5.0, queue=1.0, prefill=3.0), "1")
    # ten more requests: 30 s of TTFT, 24 in the queue, 4 in prefill
    second = parse(PAGE.format(n=20, ttft=35.0, queue=25.0, prefill=7.0), "2")
    m = normalise("vllm", "http://x/metrics", first, second, 3.0)
    assert (m.ttft_mean_s, m.queue_mean_s, m.prefill_mean_s) == (3.0, 2.4, 0.4)
    assert m.means_window == "between scrapes"
    place = Placement("m", 10**9, 0, 1, "-", None, 2.0, {})
    record = judge(_engine(), place, H100, None, m)
    assert (record.queue_share, record.prefill_share, record.rest_s) == (0.8, 0.133, 0.2)
    # the engine's own means; unmoved counters give the means since it started
    still = normalise("vllm", "http://x/metrics", second, second, 3.0)
    assert still.ttft_mean_s == 1.75 and still.means_window == "since start"


def test_sglang_publishes_no_prefill_histogram_and_the_record_says_so():
    page = parse(PAGE.format(n=4, ttft=4.0, queue=1.0, prefill=1.0)
                 .replace("vllm:time_to_first", "sglang:time_to_first")
                 .replace("vllm:request_queue_time", "sglang:queue_time")
                 .replace("vllm:num_requests_running", "sglang:num_running_reqs"), "p")
    m = normalise("sglang", "http://x/metrics", page, page, 3.0)
    assert m.queue_mean_s == 0.25 and m.prefill_mean_s is None
    assert any(a.startswith("prefill_time:") for a in m.absent)


def _metrics(**kw) -> EngineMetrics:
    empty = parse("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n", "p")
    from dataclasses import replace
    return replace(normalise("vllm", "http://x/metrics", empty, empty, 3.0), **kw)


def _scan(measured: float, ceiling: float) -> dict:
    engine = {"engine": "llama.cpp at http://127.0.0.1:8080 pid 1", "kind": "llama.cpp",
              "ceiling_tokens_per_s": ceiling, "measured_tokens_per_s": measured,
              "efficiency": round(measured / ceiling, 3)}
    return {"probes": [{"name": "engine.roofline", "data": {"engines": [engine], "not_judged": []}}]}


def test_the_diff_names_a_fall_in_decode_speed_at_the_same_ceiling():
    diff = compare(saved(_scan(40.0, 47.8)), saved(_scan(17.7, 47.8)))
    changed = {f.id: f for f in diff.facts if f.status == CHANGED}
    at = "engine[llama.cpp@127.0.0.1:8080].roofline"
    assert set(changed) == {f"{at}.measured_tokens_per_s", f"{at}.efficiency"}
    assert changed[f"{at}.efficiency"].before == 0.837 and changed[f"{at}.efficiency"].after == 0.37


# --- the recorded H100 hosts (tests/fixtures/build_roofline_hosts.py) -----------------------

ROOFLINE_PROBES = ("engine.discovery", "engine.metrics", "host.memory_bandwidth", "gpu.bandwidth",
                   "engine.roofline")


def _findings(name: str, level: str) -> dict[str, tuple[str, dict]]:
    from doctor.model import Level, ScanOptions
    from doctor.scan import scan
    from doctor.seam.recorded import RecordedHost
    from probes.registry import PROBES
    from tests.builtin_rules import builtin_rules
    from tests.conftest import FIXTURE_HOSTS

    probes = [p for p in PROBES if p.name in ROOFLINE_PROBES]
    report = scan(RecordedHost(FIXTURE_HOSTS / name), ScanOptions(level=Level.parse(level)), probes,
                  builtin_rules())
    return {f.rule: (f.severity.name.lower(), f.evidence) for f in report.findings}


def test_an_h100_vllm_at_nine_tenths_of_its_hbm_copy_is_at_the_limit_not_at_fault():
    found = _findings("h100-pcie-vllm-at-hbm-limit", "standard")
    assert set(found) == {"decode-at-bandwidth-limit"}
    severity, evidence = found["decode-at-bandwidth-limit"]
    assert severity == "info" and evidence["efficiency"] == 0.9
    assert evidence["gpu_bandwidth_gbps"] == 1702.4  # gpu.bandwidth's recorded copy, not NVML's


def test_the_same_engine_at_three_tenths_on_a_throttled_h100_is_the_fault():
    found = _findings("h100-thermal-vllm-below-ceiling", "quick")
    assert set(found) == {"decode-below-bandwidth-ceiling"}
    assert found["decode-below-bandwidth-ceiling"][1]["efficiency"] == 0.3


# --- engine.speed's measurement, as a capture keeps it (and a person may edit it) ------------

def test_a_recorded_speed_measurement_comes_back_as_it_was_measured():
    from dataclasses import asdict

    from probes.engine.speed import checked
    assert checked(asdict(_speed()), "http://x") == _speed()


@pytest.mark.parametrize("edit", [
    {"ttft_s": "fast"}, {"engine_predicted_per_second": float("nan")}, {"requests": -1},
    {"output_tokens_received": None}, {"kind": 7}, {"planted": 1}, "not a dict"])
def test_an_edited_speed_measurement_is_refused_in_one_line(edit):
    from dataclasses import asdict

    from doctor.seam.host import MeasurementError
    from probes.engine.speed import checked
    data = {**asdict(_speed()), **edit} if isinstance(edit, dict) else edit
    with pytest.raises(MeasurementError, match="engine.speed http://x: "):
        checked(data, "http://x")


def test_an_engine_engine_speed_did_not_send_to_says_why_it_has_no_speed():
    from probes.engine.roofline import _not_sent
    from probes.helpers.speed_record import SpeedRecord
    record = SpeedRecord((_speed(base_url="http://127.0.0.1:8080"),),
                         ("http://127.0.0.1:9000: the engine is serving 3 requests; --busy-ok",))
    assert _not_sent(record, "http://127.0.0.1:8080") is None
    assert "serving 3 requests" in _not_sent(record, "http://127.0.0.1:9000")
    assert "--requests-to all" in _not_sent(record, "http://127.0.0.1:7000")
    assert _not_sent(None, "http://127.0.0.1:7000") is None  # did not run: the default reason
    place = Placement("m", 10**9, 10**9, 1, "no GPU", None, 2.0, {})
    judged = judge(_engine("llama.cpp"), place, CPU_ONLY, None, None, _not_sent(record, "http://x"))
    assert "--requests-to all" in judged.missing["measured_tokens_per_s"]


def test_prefill_on_an_h100_against_its_dense_bf16_peak():
    place = Placement("llama-3-8b", 16 * 10**9, 0, 1, "--cpu-offload-gb 0", LLAMA, 2.0, {})
    # 2,000 prompt tokens in 0.25 s: 8,000 tokens/s; 989 TFLOPS / (2 x 8.03e9) = 61,581 tokens/s
    metrics = _metrics(prefill_mean_s=0.25, prompt_tokens_mean=2000.0, itl_mean_s=0.01)
    record = judge(_engine(), place, H100, None, metrics)
    assert (record.compute_peak_tflops, record.compute_peak_from) == (989.0, "NVIDIA H100 SXM datasheet")
    assert record.prefill_tokens_per_s == 8000.0 and record.prefill_ceiling_tokens_per_s == 61581.6
    assert record.prefill_efficiency == 0.13 and "prefill time" in record.prefill_from


def test_prefill_with_tensor_parallel_counts_every_card():
    place = Placement("llama-3-8b", 16 * 10**9, 0, 2, "--tensor-parallel-size 2", LLAMA, 2.0, {})
    record = judge(_engine(), place, H100, None, _metrics(prefill_mean_s=0.25, prompt_tokens_mean=2000.0))
    assert record.prefill_ceiling_tokens_per_s == 123163.1


def test_a_cpu_engine_has_its_prefill_speed_and_no_compute_ceiling_with_the_reason():
    place = Placement("gemma", 253_113_024, 253_113_024, 1, "no GPU", GEMMA, 2.0, {})
    record = judge(_engine("llama.cpp"), place, CPU_ONLY, _speed(), None)
    assert record.prefill_tokens_per_s == 116.8  # 64 prompt tokens in 548 ms
    assert record.prefill_ceiling_tokens_per_s is None and record.prefill_efficiency is None
    assert "CPU" in record.missing["prefill_ceiling_tokens_per_s"]


def test_an_unknown_card_has_no_compute_peak_and_says_so():
    place = Placement("llama-3-8b", 16 * 10**9, 0, 1, "-ngl all", LLAMA, 2.0, {})
    odd = Bandwidths(True, "NVIDIA GeForce GTX 1080", 320.0, "NVML ceiling", 20.0, {})
    record = judge(_engine("llama.cpp"), place, odd, _speed(), None)
    assert record.compute_peak_tflops is None and "GTX 1080" in record.missing["prefill_efficiency"]


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA L40S", 362.0), ("NVIDIA L40", 181.0), ("NVIDIA L4", 121.0), ("NVIDIA A10", 125.0),
    ("NVIDIA GeForce RTX 4090", 165.2), ("AMD Instinct MI300X", 1307.4), ("NVIDIA A10G", None),
    ("Tesla T4", None), (None, None)])
def test_dense_peaks_match_the_longest_name_first(name, tflops):
    assert dense_peak(name)[0] == tflops
