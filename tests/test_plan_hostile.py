"""``plan --model`` on hostile config.json files and figures: each is a one-line error naming the
file and the key (or the option), exit 3; never a traceback, a hang, or ``Infinity`` in JSON.

Each file is Mistral-7B's real config.json (tests/engine_pages/models) with one edit, the
test's story; values are written as raw JSON text, so that ``1e999``, ``NaN`` and a
5,000-digit integer reach the reader as a user's file would hold them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from doctor.workload.model_shape import ModelFileError, read_shape

MISTRAL = Path(__file__).parent / "engine_pages" / "models" / "mistral-7b-v0.1" / "config.json"
PLAN = ("--gpu-memory", "24GiB", "--context", "2048", "--concurrency", "4")
DIGITS_5000 = "7" * 5000


def config(tmp_path: Path, key: str, raw: str, within: str | None = None) -> Path:
    """Mistral's config.json with ``key`` (under ``within``, if given) set to the JSON ``raw``."""
    doc = json.loads(MISTRAL.read_text())
    if within:
        doc = {"_name_or_path": doc["_name_or_path"], within: doc}
    slot = "\u0000slot\u0000"
    (doc[within] if within else doc)[key] = slot
    model = tmp_path / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(doc, indent=2).replace(json.dumps(slot), raw))
    return model


def refused(cli, path: Path, *more: str) -> str:
    """``plan`` on ``path``: exit 3 and one line naming it, in both formats; the line."""
    for fmt in ("terminal", "json"):
        result = cli("plan", "--model", str(path), *PLAN, "--format", fmt, *more, timeout=20)
        assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert result.stderr.count("\n") == 1 and str(path) in result.stderr, result.stderr
    return result.stderr


# --------------------------------------------------------------------------- the issue's examples


@pytest.mark.slow
@pytest.mark.parametrize("key,raw,said", [
    ("num_attention_heads", "0", "num_attention_heads = 0 is out of range (a real model's is 1"),
    ("num_hidden_layers", "1e999", "num_hidden_layers = inf is not an integer"),
    ("num_hidden_layers", "1" + "0" * 400, "num_hidden_layers = a 401-digit number is out of range"),
    ("hidden_size", DIGITS_5000, "hidden_size = a 5,000-digit number is out of range"),
    ("num_key_value_heads", '"eight"', "num_key_value_heads = 'eight' is not an integer"),
    ("max_position_embeddings", '"4096"', "max_position_embeddings = '4096' is not an integer"),
    ("sliding_window", "1e999", "sliding_window = inf is not an integer"),
    ("sliding_window", "0", "sliding_window = 0 is out of range (a real model's is 1"),
    ("layer_types", '"sliding_attention"', "layer_types = 'sliding_attention' is not one "
                                           "attention type (a string) for each of the 32"),
    ("layer_types", '["full_attention"]', "layer_types = an array of 1 values is not one"),
    ("sliding_window_pattern", "0", "sliding_window_pattern = 0 is out of range"),
])
def test_the_issues_values_are_named_with_their_key(cli, tmp_path, key, raw, said):
    model = config(tmp_path, key, raw)
    line = refused(cli, model)
    assert f"{model}/config.json: {said}" in line


@pytest.mark.slow
def test_json_nested_100000_deep_is_refused(cli, tmp_path):
    for text in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000):
        (tmp_path / "config.json").write_text(text)
        assert "nested too deeply" in refused(cli, tmp_path / "config.json")


@pytest.mark.slow
@pytest.mark.parametrize("raw", ["1e999", "NaN", "Infinity"])
def test_json_never_holds_infinity_or_nan(cli, tmp_path, raw):
    """Without --context the plan takes the model's own maximum, max_position_embeddings:
    ``1e999`` was multiplied into the KV cache and printed as ``Infinity`` (exit 1)."""
    model = config(tmp_path, "max_position_embeddings", raw)
    result = cli("plan", "--model", str(model), "--gpu-memory", "24GiB", "--format", "json")
    assert result.returncode == 3 and result.stdout == ""
    assert "max_position_embeddings = " in result.stderr and "is not an integer" in result.stderr


# --------------------------------------------------------------------------- the classes

WRONG = ("0", "-1", '"eight"', '"4096"', '""', "true", "false", "[]", "{}", "[32]", "1.5",
         "32.0", "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" + "0" * 400,
         DIGITS_5000, "-" + DIGITS_5000, str(2**63), "1e308", '"\\u001b]0;x\\u0007"',
         '"\\ud800"', "[" * 500 + "]" * 500)
COUNTS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "num_key_value_heads",
          "head_dim", "intermediate_size", "max_position_embeddings")


@pytest.mark.parametrize("within", [None, "text_config"])
@pytest.mark.parametrize("key", COUNTS)
def test_every_wrong_value_at_every_count_used_names_the_key(tmp_path, key, within):
    for raw in WRONG:
        model = config(tmp_path, key, raw, within)
        with pytest.raises(ModelFileError) as error:
            read_shape(str(model))
        where = f"{within}.{key}" if within else key
        assert str(error.value).startswith(f"{model}/config.json: {where} = "), (raw, error.value)
        assert "is not an integer" in str(error.value) or "is out of range" in str(error.value)


@pytest.mark.parametrize("key,raw,said", [
    ("tie_word_embeddings", '"false"', "tie_word_embeddings = 'false' is not true or false"),
    ("tie_word_embeddings", "0", "tie_word_embeddings = 0 is not true or false"),
    ("torch_dtype", "16", "torch_dtype = 16 is not a string"),
    ("_name_or_path", "[1]", "_name_or_path = an array of 1 values is not a string"),
    ("vocab_size", "-5", "vocab_size = -5 is out of range"),
    ("quantization_config", "4", "quantization_config = 4 is not an object"),
    ("quantization_config", '{"bits": "four"}', "quantization_config.bits = 'four' is not an"),
    ("quantization_config", '{"w_bit": 1e999}', "quantization_config.w_bit = inf is not an"),
    ("quantization_config", '{"quant_method": 8}', "quantization_config.quant_method = 8 is not"),
    ("num_attention_heads", "64", "hidden_size = 4096 over num_attention_heads = 64 gives"),
])
def test_flags_names_tables_and_derived_figures_are_checked(tmp_path, key, raw, said):
    model = config(tmp_path, key, raw)
    if key == "num_attention_heads":  # no head_dim given: it is hidden_size / heads
        doc = json.loads((model / "config.json").read_text())
        doc["hidden_size"] = 32
        (model / "config.json").write_text(json.dumps(doc))
        said = "hidden_size = 32 over num_attention_heads = 64 gives a head_dim of 0"
    with pytest.raises(ModelFileError, match=said):
        read_shape(str(model))


@pytest.mark.slow
@pytest.mark.parametrize("key,raw", [("rope_theta", DIGITS_5000), ("initializer_range", "NaN"),
                                     ("sliding_window", "null"), ("architectures", "[" * 500 +
                                                                   "]" * 500),
                                     ("num_key_value_heads", "null"), ("head_dim", "null")])
def test_keys_not_used_or_null_do_not_stop_the_plan(cli, tmp_path, key, raw):
    model = config(tmp_path, key, raw)
    result = cli("plan", "--model", str(model), *PLAN, "--format", "json")
    plan = json.loads(result.stdout)
    assert result.returncode == (0 if plan["fits"] else 1), result.stderr
    kv_heads = 32 if key == "num_key_value_heads" else 8  # null: one KV head per head
    assert plan["kv_bytes_per_layer_token"] * 32 == 32 * kv_heads * 128 * 2 * 2


@pytest.mark.slow
@pytest.mark.parametrize("make,said", [
    (lambda p: os.mkfifo(p), "the model's config.json is not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "the model's config.json is not a regular file"),
    (lambda p: p.mkdir(), "the model's config.json is a directory"),
    (lambda p: p.symlink_to(p.name), "Too many levels of symbolic links"),
    (lambda p: p.symlink_to(p.parent / "gone.json"), "No such file or directory"),
    (lambda p: p.write_bytes(b'{"a": "\xff"}'), "config.json:1: byte 0xff at column 8 is not UTF-8"),
    (lambda p: p.write_bytes(b" " * (5 << 20)), "is 5,242,880 bytes; the limit is 4,194,304"),
    (lambda p: p.write_text("[1, 2]"), "not a Hugging Face config.json (a JSON object)"),
])
def test_a_config_json_that_is_no_readable_file_is_refused(cli, tmp_path, make, said):
    """A FIFO or /dev/zero in the model's directory is refused before any read (the old
    reader's isfile() sent a FIFO on to "holds neither config.json nor a .gguf")."""
    (tmp_path / "model").mkdir()
    make(tmp_path / "model" / "config.json")
    assert said in refused(cli, tmp_path / "model")


@pytest.mark.slow
def test_a_name_with_control_characters_or_a_lone_surrogate_is_shown_escaped(cli, tmp_path):
    model = config(tmp_path, "_name_or_path", '"evil\\u001b]0;pwned\\u0007\\ud800"')
    for fmt in ("terminal", "json"):
        result = cli("plan", "--model", str(model), *PLAN, "--format", fmt,
                     env={"PYTHONIOENCODING": "utf-8:strict"})
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "evil" in result.stdout


@pytest.mark.parametrize("option,value,said", [
    ("--gpu-memory-utilization", "nan", "--gpu-memory-utilization"),
    ("--gpu-memory", "9" * 400 + "GB", "is out of range: give from 1 byte to 1 PiB"),
    ("--gpu-memory", "0", "is out of range"),
    ("--context", "9" * 400, "--context"),
    ("--concurrency", "9" * 400, "--concurrency"),
])
def test_figures_given_on_the_command_line_are_bounded(cli, option, value, said):
    args = {"--gpu-memory": "24GiB", "--context": "2048", "--concurrency": "4"}
    args[option] = value
    result = cli("plan", "--model", str(MISTRAL), *(x for kv in args.items() for x in kv))
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert said in result.stderr


def test_figures_each_in_range_but_together_beyond_any_model_are_refused(tmp_path):
    doc = json.loads(MISTRAL.read_text())
    doc.update(num_hidden_layers=10_000, intermediate_size=10_000_000)  # 1.2 quadrillion
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="num_hidden_layers = 10000 with hidden_size = 4096 "
                                             "and intermediate_size = 10000000 gives 1.23e"):
        read_shape(str(tmp_path))
