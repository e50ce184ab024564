"""Each engine's /metrics names for the figures llm-doctor reads (engine-facts.md).

One table per engine: the normalised figure → the names that carry it, newest first (an
engine renames metrics across versions). A figure an engine does not export has a reason
instead of a name, so the report can say so rather than show a zero.
Sources: vLLM 0.33 ``vllm/v1/metrics/loggers.py`` and 0.6 docs (V0), SGLang 0.5
``production_metrics.md``, TGI ``router/src/server.rs``, llama.cpp ``tools/server``,
TensorRT-LLM backend README.
"""

from __future__ import annotations

# Gauges (fractions and counts of requests).
KV_USE = {
    "vllm": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "sglang": ("sglang:token_usage",),
    "llama.cpp": ("llamacpp:kv_cache_usage_ratio",),  # removed upstream in 2025
}
RUNNING = {
    "vllm": ("vllm:num_requests_running",),
    "sglang": ("sglang:num_running_reqs",),
    "tgi": ("tgi_batch_current_size",),
    "llama.cpp": ("llamacpp:requests_processing",),
}
WAITING = {
    "vllm": ("vllm:num_requests_waiting",),
    "sglang": ("sglang:num_queue_reqs",),
    "tgi": ("tgi_queue_size",),
    "llama.cpp": ("llamacpp:requests_deferred",),
    "triton": ("nv_inference_pending_request_count",),
}
# Counters: rates over the scrape interval.
PREEMPTIONS = {
    "vllm": ("vllm:num_preemptions_total",),
    "sglang": ("sglang:num_retracted_requests_total",),
}
PROMPT_TOKENS = {
    "vllm": ("vllm:prompt_tokens_total",),
    "sglang": ("sglang:prompt_tokens_total",),
    "tgi": ("tgi_request_input_length_sum",),
    "llama.cpp": ("llamacpp:prompt_tokens_total",),
}
GENERATION_TOKENS = {
    "vllm": ("vllm:generation_tokens_total",),
    "sglang": ("sglang:generation_tokens_total",),
    "tgi": ("tgi_request_generated_tokens_sum",),
    "llama.cpp": ("llamacpp:tokens_predicted_total",),
}
# Requests finished (a counter; llama.cpp exports none: its tokens tell its work instead).
REQUESTS_DONE = {
    "vllm": ("vllm:request_success_total",),
    "sglang": ("sglang:num_requests_total",),
    "tgi": ("tgi_request_success",),
}
# Engine steps (counters): llama.cpp's llama_decode() calls, one a generated token of each
# busy slot or a batch of prompt; vLLM's tokens-per-step histogram, observed once a step
# (its _count). llama.cpp's token counters grow only when a slot's task ends (measured on
# llama-server: n_decode_total 29 -> 114 in 3 s of one generation while
# tokens_predicted_total stayed 0), so its steps are what shows it works mid-request.
STEPS = {
    "llama.cpp": ("llamacpp:n_decode_total",),
    "vllm": ("vllm:iteration_tokens_total_count",),
}
# Histograms (base names, without _bucket).
TTFT = {
    "vllm": ("vllm:time_to_first_token_seconds",),
    "sglang": ("sglang:time_to_first_token_seconds",),
}
INTER_TOKEN = {
    "vllm": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "sglang": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "tgi": ("tgi_request_mean_time_per_token_duration",),
}
E2E = {
    "vllm": ("vllm:e2e_request_latency_seconds",),
    "sglang": ("sglang:e2e_request_latency_seconds",),
    "tgi": ("tgi_request_duration",),
}
# The parts of the time to first token (histograms, base names). vLLM: the wait in its
# scheduler's queue (queued -> scheduled) and prefill (scheduled -> first token), each a
# histogram beside TTFT (vllm/v1/metrics/loggers.py); SGLang: the queue wait only
# (sglang/srt/metrics/collector.py: its prefill is one stage of per_stage_req_latency).
QUEUE_TIME = {
    "vllm": ("vllm:request_queue_time_seconds",),
    "sglang": ("sglang:queue_time_seconds",),
}
PREFILL_TIME = {"vllm": ("vllm:request_prefill_time_seconds",)}
PROMPT_LENGTH = {
    "vllm": ("vllm:request_prompt_tokens",),
    "tgi": ("tgi_request_input_length",),
}
GENERATION_LENGTH = {
    "vllm": ("vllm:request_generation_tokens",),
    "tgi": ("tgi_request_generated_tokens",),
}
ITERATION_TOKENS = {"vllm": ("vllm:iteration_tokens_total",)}

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llama.cpp": "llama.cpp",
                "triton": "Triton", "tensorrt-llm": "TensorRT-LLM", "ollama": "Ollama"}

# Name prefixes that identify an engine from its page, checked in this order.
PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"),
            ("llamacpp:", "llama.cpp"), ("nv_trt_llm_", "tensorrt-llm"),
            ("nv_inference_", "triton"))


def family(kind: str) -> str:
    """The name table an engine reads: TensorRT-LLM behind Triton exports Triton's page."""
    return "triton" if kind == "tensorrt-llm" else kind


def kind_of_page(names: set[str]) -> str | None:
    """The engine a /metrics page comes from, by the prefixes of its sample names."""
    for prefix, kind in PREFIXES:
        if any(n.startswith(prefix) for n in names):
            return kind
    return None


def absent_reason(kind: str, what: str) -> str:
    return f"{ENGINE_NAMES.get(kind, kind)} exports no {what}"
