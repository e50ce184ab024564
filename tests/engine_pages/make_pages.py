"""Build the engine pages the tests serve: two scrapes per scenario, counters moved.

Each scenario starts from a real page in source/ (README.md gives provenance), sets its
gauges, adds to its counters and puts observations into its histograms between the first
and the second scrape, exactly as an engine's counters move over a few seconds. Names,
labels, bucket bounds and TYPE lines stay those of the engine version that wrote the source.

Usage: python tests/engine_pages/make_pages.py   (rewrites tests/engine_pages/<scenario>/)
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


class Page:
    """A text page whose samples can be set, added to and observed into, line by line."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def _each(self, name: str, match: dict[str, str]):
        for i, line in enumerate(self.lines):
            m = SAMPLE.match(line)
            if not m or m.group(1) != name:
                continue
            labels = dict(LABEL.findall(m.group(2) or ""))
            if all(labels.get(k) == v for k, v in match.items()):
                yield i, m, labels, float(m.group(3))

    def _put(self, i: int, m: re.Match, value: float) -> None:
        self.lines[i] = f"{m.group(1)}{m.group(2) or ''} {float(value)!r}"

    def set(self, name: str, value: float, **match: str) -> "Page":
        hits = list(self._each(name, match))
        assert hits, f"{name} {match} not on the page"
        for i, m, _, _ in hits:
            self._put(i, m, value)
        return self

    def add(self, name: str, delta: float, **match: str) -> "Page":
        hits = list(self._each(name, match))
        assert hits, f"{name} {match} not on the page"
        for i, m, _, old in hits:
            self._put(i, m, old + delta)
        return self

    def observe(self, name: str, values: list[float], **match: str) -> "Page":
        """Record observations in a histogram: buckets with le >= v, _count and _sum."""
        for i, m, labels, old in list(self._each(f"{name}_bucket", match)):
            bound = float(labels["le"])
            self._put(i, m, old + sum(1 for v in values if v <= bound))
        self.add(f"{name}_count", len(values), **match)
        self.add(f"{name}_sum", sum(values), **match)
        return self

    def append(self, text: str) -> "Page":
        self.lines += text.strip("\n").splitlines()
        return self

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def source(name: str) -> Page:
    return Page((HERE / "source" / name).read_text())


def spread(low: float, high: float, n: int) -> list[float]:
    return [low + (high - low) * i / max(n - 1, 1) for i in range(n)]


def vllm_v1(kv_use: float, waiting: float, running: float, preempted: int,
            ttft: list[float], itl: list[float], prompt: list[float], generated: list[float],
            block_size: int = 16) -> tuple[str, str]:
    def base() -> Page:
        page = source("vllm_v1_0.33.0_generated.txt")
        page.set("vllm:kv_cache_usage_perc", kv_use).set("vllm:num_requests_waiting", waiting)
        page.set("vllm:num_requests_running", running)
        page.set("vllm:num_requests_waiting_by_reason", waiting, reason="capacity")
        if block_size != 16:
            page.lines = [line.replace('block_size="16"', f'block_size="{block_size}"')
                          for line in page.lines]
        return page.add("vllm:num_preemptions_total", 100)

    first, second = base(), base()
    n = len(ttft)
    second.add("vllm:num_preemptions_total", preempted)
    second.add("vllm:prompt_tokens_total", sum(prompt)).add("vllm:generation_tokens_total", sum(generated))
    second.add("vllm:prefix_cache_queries_total", sum(prompt)).add("vllm:prefix_cache_hits_total", sum(prompt) / 4)
    second.add("vllm:request_success_total", n, finished_reason="stop")
    second.observe("vllm:time_to_first_token_seconds", ttft)
    second.observe("vllm:inter_token_latency_seconds", itl)
    second.observe("vllm:e2e_request_latency_seconds", [t + 0.03 * g for t, g in zip(ttft, generated)])
    second.observe("vllm:request_prompt_tokens", prompt)
    second.observe("vllm:request_generation_tokens", generated)
    return first.text(), second.text()


def sglang() -> tuple[str, str]:
    first = source("sglang_40ef116.txt")
    second = source("sglang_40ef116.txt")
    second.add("sglang:prompt_tokens_total", 24_000).add("sglang:generation_tokens_total", 9_000)
    second.observe("sglang:time_to_first_token_seconds", spread(0.05, 0.9, 30))
    second.observe("sglang:time_per_output_token_seconds", spread(0.02, 0.06, 300))
    second.observe("sglang:e2e_request_latency_seconds", spread(4, 12, 30))
    return first.text(), second.text()


def triton() -> tuple[str, str]:
    first = source("triton_trtllm_0b9d7d5.txt")
    second = source("triton_trtllm_0b9d7d5.txt")
    for page, fraction in ((first, 0.4875), (second, 0.52)):
        page.set("nv_trt_llm_kv_cache_block_metrics", fraction, kv_cache_block_type="fraction")
    second.set("nv_trt_llm_request_metrics", 3, request_type="waiting")
    second.set("nv_trt_llm_request_metrics", 12, request_type="active")
    second.add("nv_inference_request_success", 40)
    return first.text(), second.text()


# TGI: no sample in the reference pages; written from TGI's router/src/server.rs metric
# names and its histogram buckets (metrics-exporter-prometheus defaults), marked synthetic.
TGI = """# TYPE tgi_queue_size gauge
tgi_queue_size {queue}
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 12800
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 16000
# TYPE tgi_request_count counter
tgi_request_count {count}
# TYPE tgi_request_success counter
tgi_request_success {count}
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{{le="0.5"}} {d05}
tgi_request_duration_bucket{{le="1"}} {d1}
tgi_request_duration_bucket{{le="2.5"}} {d25}
tgi_request_duration_bucket{{le="5"}} {count}
tgi_request_duration_bucket{{le="+Inf"}} {count}
tgi_request_duration_sum {dsum}
tgi_request_duration_count {count}
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{{le="0.01"}} 0
tgi_request_mean_time_per_token_duration_bucket{{le="0.025"}} {d1}
tgi_request_mean_time_per_token_duration_bucket{{le="0.05"}} {count}
tgi_request_mean_time_per_token_duration_bucket{{le="+Inf"}} {count}
tgi_request_mean_time_per_token_duration_sum {tsum}
tgi_request_mean_time_per_token_duration_count {count}
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{{le="100"}} {d05}
tgi_request_input_length_bucket{{le="1000"}} {count}
tgi_request_input_length_bucket{{le="+Inf"}} {count}
tgi_request_input_length_sum {isum}
tgi_request_input_length_count {count}
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{{le="100"}} {d05}
tgi_request_generated_tokens_bucket{{le="1000"}} {count}
tgi_request_generated_tokens_bucket{{le="+Inf"}} {count}
tgi_request_generated_tokens_sum {gsum}
tgi_request_generated_tokens_count {count}
"""


def tgi() -> tuple[str, str]:
    pages = []
    for n, queue in ((100, 0), (140, 4)):
        pages.append(TGI.format(queue=queue, count=n, d05=n // 4, d1=n // 2, d25=3 * n // 4,
                                dsum=1.6 * n, tsum=0.03 * n, isum=400 * n, gsum=180 * n))
    return pages[0], pages[1]


def vllm_v1_features() -> tuple[str, str]:
    """The calm engine serving with ngram speculation (k=4, vLLM 0.33.0's own SpecDecodingProm
    families, source/vllm_v1_0.33.0_features_generated.txt) and LoRA at --max-loras 2: 600
    drafts between the scrapes keep 150 tokens (1.25 a step, 6 % of the drafted), and a newer
    LoRA series, still with both slots taken and 'chat' and 'qa' waiting."""
    calm = SCENARIOS["vllm-v1-calm"]()
    first, second = (Page(text).append(source("vllm_v1_0.33.0_features_generated.txt").text())
                     for text in calm)
    spec = "vllm:spec_decode_num_"
    second.add(spec + "drafts_total", 600).add(spec + "draft_tokens_total", 2400)
    second.add(spec + "accepted_tokens_total", 150)
    for pos, n in enumerate((110, 30, 10, 0)):
        second.add(spec + "accepted_tokens_per_pos_total", n, position=str(pos))
    # loggers.py sets the gauge to the current time for each new label set
    second.append('vllm:lora_requests_info{max_lora="2",running_lora_adapters="summarise,sql",'
                  'waiting_lora_adapters="chat,qa"} 1.7966156075932755e+09')
    return first.text(), second.text()


def vllm_v1_kv() -> tuple[str, str]:
    """The calm engine as one instance of a prefill/decode pair with CPU offload: vLLM 0.33.0's
    own NIXL families and offload info gauge (source/vllm_v1_0.33.0_kv_generated.txt, a CPU
    tier of 29,127 tokens against the calm page's 70,560 on the GPU); 20 transfers between the
    scrapes, 2 of them failed (one a notification)."""
    calm = SCENARIOS["vllm-v1-calm"]()
    first, second = (Page(text).append(source("vllm_v1_0.33.0_kv_generated.txt").text())
                     for text in calm)
    second.observe("vllm:nixl_xfer_time_seconds", [0.02] * 16 + [0.3, 0.4, 0.9, 2.5])
    second.add("vllm:nixl_num_failed_transfers_total", 2)
    second.add("vllm:nixl_num_failed_notifications_total", 1)
    return first.text(), second.text()


def sglang_pd() -> tuple[str, str]:
    """The SGLang engine as the prefill instance of a PD pair: SGLang 0.5.23's own transfer
    families (source/sglang_0.5.23_kv_generated.txt); 10 transfers of 48 MiB between the
    scrapes, one of them 900 ms, and 2 requests whose transfer failed."""
    first, second = (Page(text).append(source("sglang_0.5.23_kv_generated.txt").text()) for text in sglang())
    second.observe("sglang:kv_transfer_latency_ms", [20.0] * 9 + [900.0])
    second.observe("sglang:kv_transfer_total_mb", [48.0] * 10)
    second.observe("sglang:kv_transfer_speed_gb_s", [48 / 1024 / 0.02] * 9 + [48 / 1024 / 0.9])
    second.add("sglang:num_transfer_failed_reqs_total", 2)
    return first.text(), second.text()


def vllm_v1_stalled() -> tuple[str, str]:
    """The same page scraped twice, 3 s apart: 8 requests running at both, not one counter
    moved (no token, no finished request), the queue grown from 5 to 7: a wedged engine."""
    def base(waiting: float) -> Page:
        page = source("vllm_v1_0.33.0_generated.txt")
        page.set("vllm:kv_cache_usage_perc", 0.41).set("vllm:num_requests_running", 8)
        page.set("vllm:num_requests_waiting", waiting)
        return page.set("vllm:num_requests_waiting_by_reason", waiting, reason="capacity")
    return base(5).text(), base(7).text()


SCENARIOS = {
    # KV at 0.99, 12 waiting, 15 preemptions between scrapes, slow first tokens
    "vllm-v1-kv-pressure": lambda: vllm_v1(
        0.99, 12, 48, 15, ttft=spread(1.5, 6.0, 20), itl=spread(0.04, 0.2, 400),
        prompt=spread(900, 1900, 20), generated=spread(120, 480, 20)),
    # a calm engine: 41 % of the cache, nobody waiting, no new preemption
    "vllm-v1-calm": lambda: vllm_v1(
        0.41, 0, 6, 0, ttft=spread(0.03, 0.09, 20), itl=spread(0.012, 0.03, 400),
        prompt=spread(900, 1900, 20), generated=spread(120, 480, 20)),
    # short chat turns in blocks of 128 tokens: the last block of each is mostly empty
    "vllm-v1-short-requests-big-blocks": lambda: vllm_v1(
        0.6, 0, 20, 0, ttft=spread(0.03, 0.09, 20), itl=spread(0.012, 0.03, 400),
        prompt=spread(12, 45, 20), generated=spread(3, 9, 20), block_size=128),
    # the calm engine with ngram speculation keeping few drafts and LoRA adapters waiting
    "vllm-v1-spec-lora-thrash": lambda: vllm_v1_features(),
    # one instance of a NIXL prefill/decode pair with a CPU offload tier smaller than its GPU's
    "vllm-v1-kv-nixl-offload": lambda: vllm_v1_kv(),
    # a wedged engine: requests held at both scrapes, its counters unchanged
    "vllm-v1-stalled": vllm_v1_stalled,
    "sglang": sglang,
    # the prefill instance of an SGLang PD pair whose transfers fail
    "sglang-pd-transfer-failing": sglang_pd,
    "tgi": tgi,
    "triton-trtllm": triton,
}


def main() -> None:
    for name, build in SCENARIOS.items():
        first, second = build()
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        (folder / "metrics.1.txt").write_text(first)
        (folder / "metrics.2.txt").write_text(second)
        print(f"{folder}: 2 scrapes")


if __name__ == "__main__":
    main()
