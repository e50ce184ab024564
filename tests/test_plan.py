"""llm-doctor plan: the articles' worked examples (domain.md §3) on real model shapes.

000 §2.1's figures: 7B FP16 ≈ 14 GB of weights on a 24 GB card, INT8 ≈ 7 GB on a 16 GB
card, INT4 ≈ 3.5 GB on an 8 GB card; "~4 GB of KV for 16 sequences at 2048 tokens"; 13B
FP16 = 26 GB does not fit 24 GB, and 32 sequences push it to INT4 under 40 GB. The
config.json files are the real models' (tests/engine_pages/models/README.md).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from doctor.workload.gguf import GGUFError, read_header
from doctor.workload.model_shape import ModelFileError, read_shape
from doctor.workload.plan import make_plan, parse_size
from tests import engine_pages

gemma_gguf = engine_pages.gemma_gguf  # a fixture

MODELS = Path(__file__).parent / "engine_pages" / "models"
LLAMA7 = MODELS / "llama-2-7b-hf"
LLAMA13 = MODELS / "llama-2-13b-hf"
MISTRAL7 = MODELS / "mistral-7b-v0.1"
GiB = 1 << 30


def test_sizes():
    assert parse_size("24GiB") == 24 * GiB
    assert parse_size("24 GB") == 24_000_000_000
    assert parse_size("80G") == 80_000_000_000
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_llama_2_shapes_and_parameter_counts():
    seven, thirteen = read_shape(str(LLAMA7)), read_shape(str(LLAMA13 / "config.json"))
    assert (seven.layers, seven.kv_heads, seven.head_dim) == (32, 32, 128)
    assert (thirteen.layers, thirteen.kv_heads, thirteen.head_dim) == (40, 40, 128)
    assert round(seven.params / 1e9, 2) == 6.74  # the model card's 6.74 B
    assert round(thirteen.params / 1e9, 2) == 13.02


@pytest.mark.parametrize("dtype,weights_gb,card", [("fp16", 14, "24GB"), ("int8", 7, "16GB"),
                                                    ("int4", 3.5, "8GB")])
def test_7b_weights_at_each_precision_fit_the_articles_card(dtype, weights_gb, card):
    plan = make_plan(read_shape(str(LLAMA7)), parse_size(card), dtype=dtype, kv_dtype="fp16",
                     context=2048, concurrency=1, gpu_memory_utilization=1.0)
    assert plan.weights_bytes / 1e9 == pytest.approx(weights_gb, rel=0.05)
    assert plan.fits


def test_the_4_gb_of_kv_is_a_grouped_query_7b():
    # 16 sequences x 2048 tokens: 4.3 GB with 8 KV heads (Mistral-7B), but 17.2 GB with
    # Llama-2-7B's 32, which then does not fit 24 GB at 16 sequences: the plan says 6.
    gqa = make_plan(read_shape(str(MISTRAL7)), parse_size("24GB"), dtype="fp16", context=2048,
                    concurrency=16, gpu_memory_utilization=1.0)
    assert gqa.kv_cache_bytes / 1e9 == pytest.approx(4.3, abs=0.05)
    assert gqa.fits
    mha = make_plan(read_shape(str(LLAMA7)), parse_size("24GB"), dtype="fp16", context=2048,
                    concurrency=16, gpu_memory_utilization=1.0)
    assert mha.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2
    assert mha.kv_cache_bytes / 1e9 == pytest.approx(17.2, abs=0.05)
    assert not mha.fits and mha.max_concurrency == 7


def test_13b_fp16_does_not_fit_24_gb_and_int4_fits_under_40_gb():
    shape = read_shape(str(LLAMA13))
    fp16 = make_plan(shape, parse_size("24GB"), dtype="fp16", context=512, concurrency=1,
                     gpu_memory_utilization=1.0)
    assert fp16.weights_bytes / 1e9 == pytest.approx(26, rel=0.01)
    assert not fp16.fits and fp16.max_concurrency == 0
    assert any("weights alone do not fit" in n for n in fp16.notes)
    # 32 sequences add "10+ GB" of KV: at 512 tokens each, 13.4 GB
    int4 = make_plan(shape, parse_size("40GB"), dtype="int4", context=512, concurrency=32,
                     gpu_memory_utilization=1.0)
    assert int4.kv_cache_bytes / 1e9 == pytest.approx(13.4, abs=0.1)
    assert int4.fits and int4.need_bytes < 40e9


def test_kv_dtype_halves_the_cache():
    shape = read_shape(str(MISTRAL7))
    fp16 = make_plan(shape, 24 * GiB, dtype="fp16", context=4096, concurrency=8)
    fp8 = make_plan(shape, 24 * GiB, dtype="fp16", kv_dtype="fp8", context=4096, concurrency=8)
    assert fp8.kv_cache_bytes * 2 == fp16.kv_cache_bytes
    assert fp8.max_concurrency >= 2 * fp16.max_concurrency


def test_gemma_gguf_metadata(gemma_gguf):
    shape = read_shape(str(gemma_gguf))
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (18, 1, 256)
    assert shape.params == 268_098_176 and shape.max_context == 32768
    plan = make_plan(shape, 8 * GiB, context=8192, concurrency=4)
    assert plan.dtype == "gguf" and plan.weights_bytes == gemma_gguf.stat().st_size
    assert plan.engine == "llama.cpp" and (plan.global_layers, plan.local_layers) == (3, 15)
    assert plan.kv_bytes_per_layer_token == 1 * 256 * 2 * 2
    assert plan.kv_bytes_per_token == 3 * 1024  # past the window only the global layers grow
    # llama-server -c 32768 -np 4 logs 96.00 MiB (8192 cells, 3 layers, 4/4 seqs) and
    # 60.00 MiB (1024 cells, 15 layers, 4/4 seqs)
    assert plan.kv_cache_bytes == (96 + 60) << 20
    assert plan.fits


def test_truncated_gguf_names_the_file_and_offset(gemma_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gemma_gguf.read_bytes()[:300_000])  # inside the tokenizer's vocabulary
    with pytest.raises(GGUFError, match=r"cut.gguf: truncated at byte \d+"):
        read_header(str(cut))
    with pytest.raises(ModelFileError, match="cut.gguf: truncated"):
        read_shape(str(cut))


def test_corrupt_gguf_counts_are_refused(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + struct.pack("<Q", 1 << 40)
                    + b"\0" * 64)  # room for the one tensor and key declared: the string is wrong
    with pytest.raises(ModelFileError, match="bad.gguf: a string of .* corrupt"):
        read_shape(str(bad))


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    import os

    os.mkfifo(tmp_path / "model.gguf")  # opening it would block until a writer came
    with pytest.raises(ModelFileError, match="model.gguf: not a regular file"):
        read_shape(str(tmp_path / "model.gguf"))


def test_an_empty_gguf_is_called_not_gguf_not_bad_json(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"")
    with pytest.raises(ModelFileError, match="model.gguf: not a GGUF file"):
        read_shape(str(tmp_path / "model.gguf"))


def test_garbage_json_names_the_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "num_hidden_layers": 32,\n  oops\n}')
    with pytest.raises(ModelFileError, match=r"config.json: line 3: not valid JSON"):
        read_shape(str(bad))
    bad.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelFileError, match="config.json: num_hidden_layers is missing"):
        read_shape(str(bad))


@pytest.mark.slow
def test_plan_command_json_and_exit_codes(cli, gemma_gguf, tmp_path):
    result = cli("plan", "--model", str(MISTRAL7), "--gpu-memory", "24GiB", "--dtype", "fp16",
                 "--context", "2048", "--concurrency", "16", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["fits"] is True and data["kv_bytes_per_layer_token"] * 32 == 131072
    assert data["kv_cache_bytes"] == 131072 * 2048 * 16  # 2,048 tokens: inside the window
    result = cli("plan", "--model", str(LLAMA13), "--gpu-memory", "24GiB")
    assert result.returncode == 1 and "does NOT fit" in result.stdout
    result = cli("plan", "--model", str(gemma_gguf), "--gpu-memory", "8GiB", "--context", "4096")
    assert result.returncode == 0 and "Gemma 3 270m" in result.stdout
    garbage = tmp_path / "config.json"
    garbage.write_text("not json")
    result = cli("plan", "--model", str(garbage), "--gpu-memory", "24GiB")
    assert result.returncode == 3 and "not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("plan", "--model", str(MISTRAL7), "--gpu-memory", "lots")
    assert result.returncode == 3 and "not a size" in result.stderr


def test_a_quantized_config_sizes_its_quantized_weights(tmp_path):
    config = json.loads((MISTRAL7 / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    plan = make_plan(read_shape(str(tmp_path)), 8 * GiB, context=2048)
    assert plan.dtype == "int4" and plan.weights_bytes / 1e9 == pytest.approx(3.6, abs=0.05)
