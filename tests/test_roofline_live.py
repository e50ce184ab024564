"""engine.speed and engine.roofline against the real llama.cpp llama-server (tests/llama_server.py),
gemma3-270m on this host's CPUs, with ``-t 1`` and ``-t 2``: the decode speed one bounded
request measures (llama.cpp's own timings), the ceiling host.memory_bandwidth's STREAM triad
allows for the GGUF's bytes a token, and their ratio. The figures are printed (speed goes in
benchmarks/, never in an assertion); what is asserted is the behaviour: the record names
the memory, the figures are finite and positive, the ratio is within what physics allows
(a sequence cannot read its weights faster than the memory gives them: at most 1.5, the
margin being STREAM's own noise on a shared host), and TTFT is taken apart with llama.cpp's
prompt time, the rest of it counted as the wait (llama.cpp publishes none)."""

from __future__ import annotations

import math

import pytest

from doctor.inputs import Inputs
from doctor.model import Level, ScanOptions
from doctor.seam.live import LiveHost
from probes.engine import roofline, speed
from probes.host import memory_bandwidth
from tests import llama_server as llama

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def stream():
    """The host's STREAM figure, measured once for both servers."""
    return memory_bandwidth.probe(LiveHost(), ScanOptions())


@pytest.mark.parametrize("threads", [1, 2], ids=["t1", "t2"])
def test_decode_against_the_bandwidth_ceiling(threads, stream, tmp_path, monkeypatch):
    # a shorter request than a scan's (it is the same code): the test-time budget is small,
    # and -t 2 on a shared 2-core host decodes at a few tokens/s
    monkeypatch.setattr(speed, "PROMPT_TOKENS", 32)
    monkeypatch.setattr(speed, "OUTPUT_TOKENS", 16)
    monkeypatch.setattr(speed, "WARM_PROMPT", 8)
    monkeypatch.setattr(speed, "WARM_OUTPUT", 2)
    started = llama.start(tmp_path, "-t", str(threads), "-np", "1")  # the last -t wins
    try:
        host = LiveHost()
        options = ScanOptions(level=Level.QUICK, endpoints=(started.base_url,))
        measured = speed.probe(host, options)
        record = roofline.probe(host, options, Inputs({"host.memory_bandwidth": stream,
                                                       "engine.speed": measured}))
    finally:
        llama.stop(started)
    (mine,) = [e for e in record.engines if f"pid {started.pid}" in e.engine]
    print(f"\n-t {threads}: decode {mine.measured_tokens_per_s} tokens/s, ceiling "
          f"{mine.ceiling_tokens_per_s} tokens/s ({mine.bytes_per_token} bytes a token at "
          f"{mine.host_bandwidth_gbps} GB/s STREAM triad), efficiency {mine.efficiency}; TTFT "
          f"{mine.ttft_s} s, prefill {mine.prefill_s} s ({mine.prefill_share}), wait {mine.queue_s} s; "
          f"prefill {mine.prefill_tokens_per_s} tokens/s")
    assert mine.memory == "host" and mine.placed_from.startswith("no GPU"), mine
    assert mine.measured_from and "timings.predicted_per_second" in mine.measured_from
    assert mine.weights_bytes and mine.weights_bytes > 0
    assert mine.kv_read_bytes and mine.kv_read_bytes > 0  # the request's context is known
    assert mine.efficiency is not None and math.isfinite(mine.efficiency)
    assert 0 < mine.efficiency <= 1.5, mine
    assert mine.prefill_s is not None and 0 < mine.prefill_s <= mine.ttft_s
    # idle: the wait is the HTTP round trip and tokenising, and with the prompt time it is TTFT
    assert mine.queue_s is not None and 0 <= mine.queue_s < mine.ttft_s
    assert mine.queue_s + mine.prefill_s == pytest.approx(mine.ttft_s, abs=1e-5)
    assert mine.prefill_tokens_per_s and mine.prefill_tokens_per_s > 0
    assert mine.prefill_ceiling_tokens_per_s is None and "CPU" in mine.missing["prefill_efficiency"]
