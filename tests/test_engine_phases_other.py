"""SGLang's and TGI's own start lines, read into the phase record vLLM's lines fill
(probes/helpers/engine_phases_sglang.py and engine_phases_tgi.py cite each line's source).

Real lines from public reports where one was found (the URL is beside them); the others are
built from the format string of the engine's code at the commit the module names.
"""

from __future__ import annotations

import pytest

from probes.engine import cache as cache_probe
from probes.helpers import cache_dirs as C
from probes.helpers import engine_phases_sglang as sglang
from probes.helpers import engine_phases_tgi as tgi
from probes.helpers.engine_phases import parse
from tests.fixtures import build_cache_hosts as builder

# sgl-project/sglang#4826 (a start before "elapsed=" was logged) and #12978 (two TP ranks)
SGLANG_2025 = [
    "[2025-03-27 21:33:21] server_args=ServerArgs(model_path='google/gemma-3-27b-it', tp_size=2)",
    "[2025-03-27 21:33:30 TP0] Load weight end. type=Gemma3ForConditionalGeneration, "
    "dtype=torch.bfloat16, avail mem=131.08 GB, mem usage=8.13 GB.",
    "[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB, V size: 54.12 GB",
    "[2025-11-10 19:59:09 TP1] Capture cuda graph end. Time elapsed: 11.35 s. mem usage=1.04 GB. avail mem=11.22 GB.",
    "[2025-11-10 19:59:09 TP0] Capture cuda graph end. Time elapsed: 11.39 s. mem usage=1.00 GB. avail mem=11.17 GB.",
]
# model_runner.py at 0005834c: "Load weight end. elapsed=%.2f s, type=..., avail mem=..., mem usage=..."
# and "Capture piecewise CUDA graph end. Time elapsed: ..."; the speculative workers' phases
SGLANG_NOW = [
    "[2026-08-27 03:45:38] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=2)",
    "[2026-08-27 03:45:50 TP1] Load weight end. elapsed=11.87 s, type=Qwen3ForCausalLM, avail mem=61.20 GB, mem usage=7.64 GB.",
    "[2026-08-27 03:45:50 TP0] Load weight end. elapsed=12.02 s, type=Qwen3ForCausalLM, avail mem=61.18 GB, mem usage=7.64 GB.",
    "[2026-08-27 03:45:53 TP0] Load weight end. elapsed=2.50 s, type=LlamaForCausalLMEagle3, avail mem=60.90 GB, mem usage=0.28 GB.",
    "[2026-08-27 03:46:16 TP0] Capture piecewise CUDA graph end. Time elapsed: 22.96 s. mem usage=2.84 GB. avail mem=10.88 GB.",
    "[2026-08-27 03:46:30 TP0] Capture target decode CUDA graph end. elapsed=12.26 s, mem usage=0.34 GB, avail mem=10.54 GB.",
    "[2026-08-27 03:46:32 TP0] Capture draft extend CUDA graph end. step=0, elapsed=1.10 s, mem usage=0.02 GB, avail mem=10.52 GB.",
    "[2026-08-27 03:46:33 TP0] Capture draft extend CUDA graph end. step=1, elapsed=1.20 s, mem usage=0.02 GB, avail mem=10.50 GB.",
]


def test_sglang_a_start_of_2025_has_its_weights_size_and_its_slowest_ranks_capture():
    said = sglang.parse(SGLANG_2025)
    # no elapsed= on the weights line of that version: the time is unknown, not zero
    assert (said.weights_load_s, said.weights_gib, said.graph_capture_s) == (None, 8.13, 11.39)
    assert said.lines == 3 and said.compile_s is None


def test_sglang_the_newest_start_wins_and_its_phases_add_up():
    said = sglang.parse(SGLANG_2025 + SGLANG_NOW)
    # the target's slowest rank (12.02) then the draft (2.50); each graph phase once, steps apart
    assert (said.weights_load_s, said.weights_gib) == (14.52, 7.92)
    assert said.graph_capture_s == round(22.96 + 12.26 + 1.10 + 1.20, 2)
    assert said.lines == 7


# huggingface/text-generation-inference#832 (weights already cached, launcher of 2023),
# #2572 (eight shards ready), #1838 (a file downloaded); the warmup lines are backends/v3/src/lib.rs's
TGI_CACHED = [
    '2023-08-22T18:35:50.966384Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-13b-chat-hf", revision: None }',
    "2023-08-22T18:35:50.966517Z  INFO download: text_generation_launcher: Starting download process.",
    "2023-08-22T18:35:53.722427Z  INFO text_generation_launcher: Files are already present on the host. Skipping download.",
    "2023-08-22T18:35:54.569514Z  INFO download: text_generation_launcher: Successfully downloaded weights.",
    "2024-09-25T15:04:30.420621Z  INFO shard-manager: text_generation_launcher: Shard ready in 218.618910525s rank=4",
    "2024-09-25T15:04:30.444388Z  INFO shard-manager: text_generation_launcher: Shard ready in 218.644204722s rank=0",
    "2024-09-25T15:04:31.102113Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model",
    "2024-09-25T15:05:12.602113Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 254480",
]
TGI_DOWNLOADED = [
    "2024-04-30T21:49:25.100000Z  INFO text_generation_launcher: Args {",
    "2024-04-30T21:49:25.200000Z  INFO download: text_generation_launcher: Starting check and download process for mistralai/Mixtral-8x7B-Instruct-v0.1",
    "2024-04-30T21:50:05.764569Z  INFO text_generation_launcher: Downloaded /data/models--mistralai--Mixtral-8x7B-Instruct-v0.1/snapshots/"
    "1e637f2d7cb0a9d6fb1922f305cb784995190a83/model-00008-of-00019.safetensors in 0:00:03.",
    "2024-04-30T21:51:10.200000Z  INFO download: text_generation_launcher: Successfully downloaded weights for mistralai/Mixtral-8x7B-Instruct-v0.1",
    "2024-04-30T21:52:00.000000Z  INFO shard-manager: text_generation_launcher: Shard ready in 850.5ms rank=0",
]


def test_tgi_a_cached_start_its_download_step_shards_and_warmup():
    said = tgi.parse(TGI_CACHED)
    assert (said.weights_from_cache, said.download_s, said.model_load_s, said.warmup_s) == (
        True, 3.603, 218.644, 41.5)


def test_tgi_a_restart_that_downloaded_is_the_one_read():
    said = tgi.parse(TGI_CACHED + TGI_DOWNLOADED)
    assert (said.weights_from_cache, said.download_s, said.model_load_s, said.warmup_s) == (
        False, 105.0, 0.851, None)


def test_tgi_a_coloured_log_opens_a_start_too():
    # the compact format on a terminal (huggingface/text-generation-inference#1763's lines)
    said = tgi.parse(TGI_CACHED + ["\x1b[2m2024-04-18T22:43:58.111453Z\x1b[0m \x1b[32m INFO\x1b[0m "
                                   "\x1b[2mtext_generation_launcher\x1b[0m\x1b[2m:\x1b[0m Args {"])
    assert said.lines == 0 and said.model_load_s is None


def test_tgi_json_output_opens_a_start_too():
    said = tgi.parse(TGI_CACHED + ['{"timestamp":"2024-09-26T08:00:00.000000Z","level":"INFO",'
                                   '"fields":{"message":"Args {\\n    model_id: \\"x/y\\","},'
                                   '"target":"text_generation_launcher"}'])
    assert said.lines == 0 and said.model_load_s is None


@pytest.mark.parametrize("lines", [
    ["Load weight end. elapsed=1e309 s, type=X, mem usage=-3 GB.",
     "Capture cuda graph end. Time elapsed: NaN s.", "Capture cuda graph end. Time elapsed: " + "9" * 5000 + " s."],
    ["\x1b[2J" * 3000, "", "\0" * 10, "Capture " + "a " * 3000 + "cuda graph end. elapsed=3 s"],
])
def test_sglang_hostile_lines_give_no_figure(lines):
    said = sglang.parse(lines)
    assert (said.weights_load_s, said.weights_gib, said.graph_capture_s) == (None, None, None)


def test_tgi_hostile_lines_give_no_figure():
    said = tgi.parse([
        "2024-13-45T99:00:00Z INFO text_generation_launcher: Starting download process.",  # no date
        "2024-01-01T00:00:00Z INFO text_generation_launcher: Successfully downloaded weights.",
        "2024-01-01T00:00:10Z INFO Warming up model",
        "2024-01-01T00:00:05Z INFO Setting max batch total tokens to 5",  # before its start
        "Shard ready in -3s rank=0", "Shard ready in 1e309s", "Shard ready in " + "9" * 5000 + "s",
        "Downloaded relative/path in 0:00:01.", "x" * 100_000])
    assert (said.download_s, said.warmup_s, said.model_load_s, said.weights_from_cache) == (
        None, None, None, None)


def test_every_engine_whose_caches_are_read_has_its_start_lines_read():
    assert set(cache_probe.PHASE_PARSERS) == set(C.MODEL_KINDS)


# vLLM: the start before the newest one, where the log holds it (build_cache_hosts.py's lines)
def test_vllm_the_start_before_the_newest_is_kept_beside_it():
    cold = builder.COLD_LOG.splitlines()
    said = parse(cold + builder.COLD_LOG.replace("da3c862604", "5f0e1b7a22").splitlines())
    assert (said.compile_from_cache, said.previous_compile_from_cache) == (False, False)
    assert said.previous_compile_cache_dir != said.compile_cache_dir
    assert said.compile_cache_dir.startswith("/root/.cache/vllm/torch_compile_cache/5f0e1b7a22/")
    warm = parse(cold + builder.WARM_LOG.splitlines())
    assert (warm.compile_from_cache, warm.previous_compile_from_cache) == (True, False)
    assert parse(cold).previous_compile_from_cache is None  # one start: nothing before it



@pytest.mark.parametrize("value, disabled", [
    (None, False), ("0", False), ("1", True), (" 1 ", True), ("+-5", False), ("１", True),
    ("9" * 5000, False), ("yes", False), ("-1", True)])
def test_vllms_compile_cache_switch_is_read_as_vllm_reads_it(value, disabled):
    assert cache_probe.cache_switched_off(value) is disabled
