"""The serving engines' metrics (probes/engine/*.py): labelled kind, endpoint, model and pid
(the engine process's: it lasts as long as the engine), joined from engine.discovery."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import (GB, MS, Table, counter, each, gauge, info, of,
                                        unexported)

FREE_TEXT = "free text for people (it may name URLs and paths), shown by the scan"


def _copy(field: str, of_probe: str, metric: str) -> tuple[str, str]:
    return field, f"a copy of {of_probe}'s {field}: llm_doctor_{metric}"


def _percentiles(prefix: str, name: str, help: str, *points: str):
    return tuple(gauge(f"{prefix}_p{p}_s", name, help, const=(("percentile", p),)) for p in points)


def _sent(path: str, prefix: str):
    """What a probe that sends requests sent each engine (its COST bounds it)."""
    return (gauge(f"{path}.prompt_tokens_sent", f"{prefix}_prompt_tokens_sent",
                  "Prompt tokens sent (as the engine counted them)"),
            gauge(f"{path}.output_tokens_received", f"{prefix}_generated_tokens",
                  "Output tokens the engine generated for the probe"),
            gauge(f"{path}.sending_s", f"{prefix}_sending_seconds",
                  "Seconds from the first request sent to the last answer's end"))


# engine.kv_cache repeats figures of engine.metrics and engine.discovery beside its own.
KV_COPIES = (
    _copy("kv_cache_use", "engine.metrics", "engine_kv_cache_usage_ratio"),
    _copy("requests_running", "engine.metrics", "engine_requests_running"),
    _copy("requests_waiting", "engine.metrics", "engine_requests_waiting"),
    _copy("preemptions_total", "engine.metrics", "engine_preemptions_total"),
    _copy("preemptions_in_window", "engine.metrics", "engine_preemptions_between_scrapes"),
    _copy("preemptions_per_s", "engine.metrics", "engine_preemptions_per_second"),
    _copy("interval_s", "engine.metrics", "engine_scrape_interval_seconds"),
    _copy("request_tokens_p99", "engine.metrics", "engine_request_tokens"),
    _copy("iteration_tokens_p95", "engine.metrics", "engine_iteration_tokens"),
    _copy("max_model_len", "engine.discovery", "engine_max_model_length_tokens"),
    _copy("max_num_batched_tokens", "engine.discovery", "engine_max_batched_tokens"),
    _copy("max_num_seqs", "engine.discovery", "engine_max_sequences"),
)

TABLES = (
    Table("engine.discovery", (
        gauge("engine_count", "engine_discovered_engines",
              "Serving engines found (process table and --endpoint)"),
        each("engines", L.engine(url="base_url", pid="pid", kind="kind", model="model")),
        info("engines", "engine_info", "Each engine: its weights' path, KV-cache dtype, and how "
             "it was found (process, endpoint, process+endpoint)", model_path="model_path",
             kv_cache_dtype="kv_cache_dtype", source="source"),
        gauge("engines.gpu_memory_utilization", "engine_gpu_memory_utilization_ratio",
              "vLLM --gpu-memory-utilization, SGLang --mem-fraction-static"),
        gauge("engines.max_num_seqs", "engine_max_sequences",
              "Concurrent sequences (vLLM --max-num-seqs, SGLang max_running_requests, llama.cpp -np)"),
        gauge("engines.max_num_batched_tokens", "engine_max_batched_tokens",
              "Tokens a step (vLLM --max-num-batched-tokens, SGLang chunked_prefill_size, llama.cpp -b)"),
        gauge("engines.block_size", "engine_block_size_tokens", "KV block size, tokens"),
        gauge("engines.max_model_len", "engine_max_model_length_tokens", "Tokens a sequence"),
        gauge("engines.tensor_parallel_size", "engine_tensor_parallel_size", "GPUs a replica"),
        gauge("engines.enforce_eager", "engine_enforce_eager", "1 when CUDA graphs are off"),
        gauge("engines.api_key_set", "engine_api_key_required", "1 when the engine asks for a key"),
        of("flag", "engines.error", "engine_pages_unreadable",
           "1 when the engine's pages could not be read (the scan says why)"),
        unexported("engines.listen", "its listening sockets: engine.exposure's listeners"),
        unexported("engines.config_from", "where each figure was read (flags, /metrics...): "
                   "provenance for people"),
        each("reachability", L.engine(url="endpoint", pid="pid", kind="kind")),
        gauge("reachability.reachable", "engine_reachable",
              "1 when the engine answered discovery as an engine (or asked for a key), 0 when "
              "it refused, hung, answered 5xx or answered as no engine"),
        info("reachability", "engine_reachability_info", "How each engine's reads ended "
             "(engine, key-required, refused, timeout, failed, http-error, not-engine, "
             "not-recorded) and where its URL came from (named, listening, flagged, default)",
             outcome="outcome", basis="basis"),
        unexported("reachability.answer", FREE_TEXT),
        unexported("reachability.tried", FREE_TEXT),
    )),
    Table("engine.metrics", (
        each("engines", L.engine(url="endpoint", kind="kind")),
        gauge("engines.interval_s", "engine_scrape_interval_seconds", "Between the two scrapes"),
        gauge("engines.kv_cache_use", "engine_kv_cache_usage_ratio", "Share of the KV cache in use"),
        gauge("engines.requests_running", "engine_requests_running", "Requests being decoded"),
        gauge("engines.requests_waiting", "engine_requests_waiting", "Requests queued"),
        counter("engines.preemptions_total", "engine_preemptions_total",
                "Preemptions since the engine started (SGLang: retractions)"),
        gauge("engines.preemptions_in_window", "engine_preemptions_between_scrapes",
              "Preemptions between the two scrapes"),
        gauge("engines.preemptions_per_s", "engine_preemptions_per_second", "Their rate"),
        gauge("engines.prefix_cache_hit_rate", "engine_prefix_cache_hit_ratio",
              "Share of prompt tokens found in the prefix cache"),
        gauge("engines.prompt_tokens_per_s", "engine_prompt_tokens_per_second", "Prefill rate"),
        gauge("engines.generation_tokens_per_s", "engine_generation_tokens_per_second",
              "Decode rate"),
        info("engines", "engine_latency_window_info", "What the latency percentiles cover: "
             "'between scrapes', else 'since start'", window="latency_window"),
        gauge("engines.latency_requests", "engine_latency_requests",
              "Requests the latency percentiles cover"),
        *_percentiles("engines.ttft", "engine_time_to_first_token_seconds",
                      "Time to first token, percentile of the engine's histogram", "50", "95", "99"),
        *_percentiles("engines.itl", "engine_inter_token_latency_seconds",
                      "Inter-token latency, percentile of the engine's histogram", "50", "95", "99"),
        *_percentiles("engines.e2e", "engine_request_latency_seconds",
                      "End-to-end request latency, percentile of the engine's histogram",
                      "50", "95", "99"),
        gauge("engines.request_tokens_p99", "engine_request_tokens",
              "Prompt and generated tokens of a request, percentile", const=(("percentile", "99"),)),
        gauge("engines.iteration_tokens_p95", "engine_iteration_tokens",
              "Tokens an engine step, percentile (vLLM)", const=(("percentile", "95"),)),
        of("pairs", "engines.cache_config", "engine_cache_config_info",
           "vllm:cache_config_info's labels worth a report", "key", "value"),
        unexported("engines.request_tokens_mix", "40 quantiles of the request length, the input "
                   "of engine.kv_cache's block-size model: a distribution, not a series"),
        unexported("engines.absent", "why a figure is absent: its series is absent, and the "
                   "scan says why"),
        of("length", "errors", "engine_scrape_errors", "Engines whose /metrics could not be read"),
    )),
    Table("engine.kv_cache", (
        each("engines", L.engine(url="endpoint", kind="kind", model="model")),
        *(unexported(f"engines.{f}", why) for f, why in KV_COPIES),
        gauge("engines.block_size", "engine_kv_block_size_tokens",
              "Tokens a KV block (cache_config, else --block-size)"),
        gauge("engines.num_gpu_blocks", "engine_kv_gpu_blocks", "KV blocks on the GPUs"),
        gauge("engines.block_waste_fraction", "engine_kv_block_waste_ratio",
              "Share of allocated KV tokens the request mix leaves empty at this block size"),
        gauge("engines.recommended_block_size", "engine_kv_recommended_block_size_tokens",
              "The block size recommended for the mix"),
        gauge("engines.waste_at_recommended", "engine_kv_block_waste_at_recommended_ratio",
              "The waste at that block size"),
        gauge("engines.request_tokens_p50", "engine_kv_request_tokens_median",
              "Median request length of the mix, tokens"),
    )),
    Table("engine.capacity", (
        each("engines", L.engine(model="model", described="engine")),
        info("engines", "engine_capacity_info", "The dtype the weights were sized at", dtype="dtype"),
        gauge("engines.params_b", "engine_model_parameters", "Parameters of the model", GB),
        gauge("engines.weights_gb", "engine_weights_bytes", "Parameters x bytes a parameter", GB),
        gauge("engines.need_gb", "engine_memory_needed_bytes",
              "Weights x 1.2 and the KV cache reserved at start", GB),
        gauge("engines.kv_gb_per_sequence", "engine_kv_bytes_per_sequence",
              "KV cache of one full-context sequence", GB),
        gauge("engines.budget_gb", "engine_memory_budget_bytes",
              "GPU memory x gpu_memory_utilization x tensor-parallel GPUs", GB),
        gauge("engines.gpu_memory_gb", "engine_gpu_memory_bytes", "One GPU's memory", GB),
        gauge("engines.gpus", "engine_gpus", "GPUs the engine spans"),
        gauge("engines.context", "engine_capacity_context_tokens", "The context sized, tokens"),
        gauge("engines.sequences", "engine_capacity_sequences",
              "Sequences whose KV cache is reserved at start"),
        gauge("engines.fits", "engine_model_fits", "1 when the model fits its budget"),
        gauge("engines.max_concurrency", "engine_max_full_context_sequences",
              "Full-context sequences that fit beside the weights"),
        of("length", "not_sized", "engine_capacity_not_sized",
           "Engines that could not be sized (the scan says why)"),
    )),
    Table("engine.load", (
        each("engines", L.engine(url="base_url", kind="kind", model="model")),
        gauge("engines.running", "engine_load_requests_running",
              "Requests being decoded now (/metrics, else llama.cpp /slots)"),
        gauge("engines.waiting", "engine_load_requests_waiting", "Requests queued now"),
        info("engines", "engine_load_info", "Where the load was read (/metrics, /slots) and the "
             "saved sweep's knee status (found, not-reached, no-data)", source="source",
             knee_status="knee_status"),
        gauge("engines.knee_concurrency", "engine_knee_concurrency",
              "Concurrency at the throughput knee 'llm-doctor load' measured"),
        of("timestamp", "engines.knee_measured_at", "engine_knee_measured_timestamp_seconds",
           "When that sweep ran"),
        unexported("engines.knee_file", "where the sweep is kept: a path for people"),
        # the saved sweep's levels are for the report's knee plot; the knee is their result
        each("engines.sweep", L.fields("concurrency")),
        *(unexported(f"engines.sweep.{name}", "a level of the saved sweep, drawn in the report; "
                     "llm_doctor_engine_knee_concurrency is their result")
          for name in ("output_tokens_per_s", "ttft_p50_ms", "usable")),
        of("flag", "engines.error", "engine_load_unreadable",
           "1 when neither /metrics nor /slots answered (the scan says why)"),
        each("models", L.fields("model")),
        gauge("models.replicas", "engine_model_replicas", "Endpoints serving the model"),
        gauge("models.running_max", "engine_model_replica_requests_running_max",
              "Running requests on its busiest replica"),
        gauge("models.running_min", "engine_model_replica_requests_running_min",
              "Running requests on its idlest replica"),
        unexported("models.busiest", "the busiest replica's URL: it moves with the load; "
                   "llm_doctor_engine_load_requests_running shows each"),
        unexported("models.idlest", "the idlest replica's URL, likewise"),
    )),
    Table("engine.exposure", (
        gauge("non_loopback_count", "engine_non_loopback_listeners",
              "Engine sockets reachable from other machines"),
        each("listeners", L.engine(url="base_url", pid="pid", kind="kind", extra=("address",))),
        gauge("listeners.non_loopback", "engine_listener_non_loopback",
              "1 for a wildcard or non-loopback address"),
        gauge("listeners.api_key_set", "engine_listener_api_key_required",
              "1 when the engine asks for an API key"),
        gauge("listeners.status", "engine_listener_unauthenticated_http_status",
              "HTTP status of /v1/models asked without credentials"),
        gauge("listeners.answered_without_auth", "engine_listener_answers_without_auth",
              "1 when it answered 2xx without credentials"),
        unexported("listeners.checked_url", "the URL asked: the endpoint's /v1/models"),
        unexported("listeners.note", f"why it could not be asked: {FREE_TEXT}"),
    )),
    Table("engine.stacks", (
        each("processes", L.engine(pid="pid", kind="kind")),
        gauge("processes.dumps", "engine_stack_dumps", "py-spy dumps that succeeded"),
        gauge("processes.samples", "engine_stack_samples", "Active-thread samples"),
        gauge("processes.logging_share", "engine_stack_logging_ratio", "Share of samples in logging"),
        gauge("processes.tokenisation_share", "engine_stack_tokenisation_ratio",
              "Share in tokenisation"),
        gauge("processes.gil_wait_share", "engine_stack_gil_wait_ratio", "Share waiting for the GIL"),
        unexported("processes.top_frames", "function names and source lines, for people"),
        of("flag", "processes.error", "engine_stack_sampling_failed",
           "1 when sampling failed (ptrace refused, py-spy missing)"),
    )),
    Table("engine.warmup", (
        each("endpoints", L.engine(url="base_url", pid="pid")),
        gauge("endpoints.uptime_s", "engine_uptime_seconds", "The engine process's age"),
        gauge("endpoints.rounds", "engine_warmup_rounds", "Rounds of requests sent"),
        gauge("endpoints.requests", "engine_warmup_requests", "Requests sent"),
        gauge("endpoints.errors", "engine_warmup_errors", "Requests that failed"),
        unexported("endpoints.first_error", f"the first failure: {FREE_TEXT}"),
        *(gauge(f"endpoints.{f}_ttft_ms", "engine_warmup_time_to_first_token_seconds",
                "Time to first token of the warm-up's requests", MS, const=(("request", r),))
          for f, r in (("first", "first"), ("steady", "steady"), ("first_round", "first_round_median"),
                       ("last_round", "last_round_median"))),
        gauge("endpoints.ttft_ratio", "engine_warmup_first_over_steady_ratio",
              "The first request's time to first token over the steady one's"),
        *(gauge(f"endpoints.{f}_itl_ms", "engine_warmup_inter_token_latency_seconds",
                "Median gap between tokens", MS, const=(("request", r),))
          for f, r in (("first", "first"), ("steady", "last_round_median"))),
        gauge("endpoints.settled", "engine_warmup_settled",
              "1 when the last round was within 15% of the one before"),
        gauge("endpoints.generated_tokens_before", "engine_warmup_generated_tokens_before",
              "Tokens the engine had generated before the warm-up's first request (its /metrics)"),
        gauge("endpoints.logical_cpus", "engine_warmup_logical_cpus",
              "Logical CPUs of the host the contention figures are out of"),
        *(gauge(f"endpoints.{f}_other_busy_cores", "engine_warmup_other_busy_cores",
                "Cores busy with other work than the engine's while the requests ran",
                const=(("request", r),))
          for f, r in (("first", "first"), ("steady", "last_round_median"))),
        *_sent("endpoints", "engine_warmup"),
        of("length", "not_sent", "engine_warmup_engines_not_sent",
           "Engines not sent to: serving requests (the scan says which)"),
    )),
    Table("engine.output", (
        each("endpoints", L.engine(url="base_url")),
        gauge("endpoints.judged", "engine_output_judged_samples", "Answers long enough to judge"),
        gauge("endpoints.repetitive", "engine_output_repetitive_samples",
              "Judged answers that loop (repeated 4-grams above 0.6)"),
        gauge("endpoints.worst_share", "engine_output_worst_repeated_ngram_ratio",
              "The most repetitive answer's share of repeated word 4-grams"),
        each("endpoints.samples", L.position("sample")),
        gauge("endpoints.samples.words", "engine_output_words", "Words in each answer"),
        gauge("endpoints.samples.repeated_ngram_share", "engine_output_repeated_ngram_ratio",
              "Each answer's share of word 4-grams repeating an earlier one"),
        of("flag", "endpoints.samples.error", "engine_output_sample_failed",
           "1 when the request failed (the scan says why)"),
        unexported("endpoints.samples.prompt", "one of the probe's fixed prompts "
                   "(probes/engine/output.py PROMPTS): its place is the sample label"),
        unexported("endpoints.samples.excerpt", "the answer's text: for people, never a series"),
        gauge("endpoints.requests", "engine_output_requests", "Requests sent"),
        *_sent("endpoints", "engine_output"),
        of("length", "not_sent", "engine_output_engines_not_sent",
           "Engines not sent to: serving requests (the scan says which)"),
    )),
)
