"""Fuzz kind ``plan``: hostile config.json and GGUF files through ``llm-doctor plan``.

Each input is derived from a real one by a named mutation:

* config.json (the Llama-2 and Mistral configs of tests/engine_pages/models): a key the
  planner reads (or any key, or one of ``text_config`` or ``quantization_config``) given a
  wrong type, zero, a negative, NaN or Infinity, 1e999, a huge or 5,000-digit integer, deep
  nesting, control characters or a lone surrogate; the key deleted; the bytes damaged
  (truncation, non-UTF-8, garbage, nesting 100,000 deep, 8 MB).
* GGUF: a Llama header written here (``gguf_bytes``: metadata, a vocabulary, a tensor table)
  with every field type at each key the planner reads, counts and lengths huge, zero or far
  beyond the file, arrays nested deep, unknown types, wrong magic or version, truncation at
  every structural boundary, flipped bytes.
* either file made a FIFO, ``/dev/zero``, a directory, a link out of the model's directory,
  a link to itself or to nothing.

Each runs as ``llm-doctor plan --model PATH --gpu-memory 24GiB --context 2048 --concurrency 4
[--format json]`` (one in five without ``--context``: the file's maximum context is then
used), PATH the file or its directory, and must hold what tests/fuzz_runs.check
holds of any run, and more: exit 0 only beside "fits", 1 only beside "does NOT fit" (never
2), and exit 3 with one line on stderr that names the input.

Links out of the model's directory are followed, as a Hugging Face cache's snapshot links to
its blobs, so reads outside are not counted; what a target holds is never shown (the outside
files' marker is looked for in every output).
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.fuzz_inputs import Outside, mutate_bytes

if TYPE_CHECKING:  # tests/fuzz_runs.py imports this module from its TRIERS
    from tests.fuzz_runs import Run, Tried

MODELS = Path(__file__).parent / "engine_pages" / "models"
ARGV = ["--gpu-memory", "24GiB", "--context", "2048", "--concurrency", "4"]
NEEDLES = ("outside", "environment")

# --------------------------------------------------------------------------- a GGUF writer

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
            BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


@dataclass(frozen=True)
class Raw:
    """Bytes written as they are where a value goes: lengths that lie, unknown types."""

    data: bytes


def encode(kind: int, value: Any) -> bytes:
    """One GGUF value of type ``kind`` (an array's value is ``(inner type, items)``)."""
    if isinstance(value, Raw):
        return value.data
    if kind == STR:
        data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        return struct.pack("<Q", len(data)) + data
    if kind == ARR:
        inner, items = value
        return struct.pack("<IQ", inner, len(items)) + b"".join(encode(inner, v) for v in items)
    return struct.pack(_FORMATS[kind], value)


def nested_array(depth: int) -> Raw:
    """An array holding an array ... ``depth`` deep around one uint32, built without recursion."""
    return Raw(struct.pack("<IQ", ARR, 1) * (depth - 1) + struct.pack("<IQI", U32, 1, 7))


def gguf_bytes(kvs: list[tuple[str, int, Any]], tensors: list[tuple[str, tuple[int, ...], int]] = (),  # type: ignore[assignment]
               version: int = 3, magic: bytes = b"GGUF",
               counts: tuple[int, int] | None = None) -> tuple[bytes, list[int]]:
    """A GGUF header (ggml docs/gguf.md) and the offsets where each of its fields ends.

    ``kvs``: (key, type, value); ``tensors``: (name, dimensions, ggml type), data offset 0;
    ``counts``: (tensors, key/values) declared instead of the true ones.
    """
    out, ends = bytearray(), []

    def put(data: bytes) -> None:
        out.extend(data)
        ends.append(len(out))

    put(magic)
    put(struct.pack("<I", version))
    n_tensors, n_kvs = counts or (len(tensors), len(kvs))
    put(struct.pack("<Q", n_tensors))
    put(struct.pack("<Q", n_kvs))
    for key, kind, value in kvs:
        put(encode(STR, key))
        put(struct.pack("<I", kind))
        if kind == ARR and not isinstance(value, Raw):
            put(struct.pack("<IQ", value[0], len(value[1])))
            for item in value[1]:
                put(encode(value[0], item))
        else:
            put(encode(kind, value))
    for name, dims, ggml_type in tensors:
        put(encode(STR, name))
        put(struct.pack("<I", len(dims)))
        for d in dims:
            put(struct.pack("<Q", d))
        put(struct.pack("<IQ", ggml_type, 0))
    return bytes(out), ends


def llama_kvs(vocab: int = 100) -> list[tuple[str, int, Any]]:
    """A Llama-2-7B-shaped header with 8 KV heads; its vocabulary is long enough to be skipped."""
    return [("general.architecture", STR, "llama"), ("general.name", STR, "fuzz-llama-7b"),
            ("llama.context_length", U32, 4096), ("llama.embedding_length", U32, 4096),
            ("llama.block_count", U32, 32), ("llama.feed_forward_length", U32, 11008),
            ("llama.attention.head_count", U32, 32), ("llama.attention.head_count_kv", U32, 8),
            ("llama.attention.key_length", U32, 128),
            ("tokenizer.ggml.tokens", ARR, (STR, [f"tok{i}" for i in range(vocab)])),
            ("tokenizer.ggml.scores", ARR, (F32, [0.0] * vocab)),
            ("general.tags", ARR, (STR, ["llama", "fuzz"]))]


LLAMA_TENSORS = [("token_embd.weight", (4096, 32000), 12), ("blk.0.attn_q.weight", (4096, 4096), 12),
                 ("output_norm.weight", (4096,), 0)]
USED_GGUF_KEYS = ("general.architecture", "general.name", "llama.context_length",
                  "llama.embedding_length", "llama.block_count", "llama.attention.head_count",
                  "llama.attention.head_count_kv", "llama.attention.key_length")

# Every field type, with values wrong for a count, a name or a length.
GGUF_VALUES: tuple[tuple[int, Any], ...] = (
    (F32, float("inf")), (F32, float("nan")), (F32, 32.0), (F64, 1e308), (F64, float("-inf")),
    (STR, "eight"), (STR, "4096"), (STR, ""), (STR, "\x1b]0;pwned\x07"), (STR, b"\xff\xfe\xc3("),
    (STR, "x" * 100_000), (BOOL, True), (BOOL, False), (U64, 2**64 - 1), (U64, 2**40),
    (I64, -1), (I64, -(2**63)), (I32, -(2**31)), (U32, 0), (U32, 2**32 - 1), (U8, 0), (I8, -5),
    (U16, 65535), (I16, -1), (ARR, (U32, [1, 2, 3])), (ARR, (U32, [7] * 100)), (ARR, (STR, [])),
    (U32, 10_000), (U64, 100_000), (U64, 1_000_000), (U64, 2**32), (U64, 2**32 + 1),  # the limits
)


def _short(value: Any) -> str:
    return repr(value)[:30]


def _mutate_gguf(rng: random.Random) -> tuple[bytes, str]:
    kvs, tensors = llama_kvs(rng.choice((10, 100, 1000))), list(LLAMA_TENSORS)
    op = rng.choice(("value", "value", "value", "delete", "count", "array-length",
                     "string-length", "nested", "unknown-type", "tensor", "magic", "truncate",
                     "truncate", "flip", "garbage", "issue-41", "empty"))
    counts, version, magic = None, 3, b"GGUF"
    what = op
    if op in ("value", "delete"):
        at = rng.randrange(len(kvs)) if rng.random() < 0.2 else \
            [k for k, *_ in kvs].index(rng.choice(USED_GGUF_KEYS))
        if op == "delete":
            what = f"delete:{kvs[at][0]}"
            del kvs[at]
        else:
            kind, value = rng.choice(GGUF_VALUES)
            kvs[at] = (kvs[at][0], kind, value)
            what = f"value:{kvs[at][0]}={kind}:{_short(value)}"
    elif op == "count":
        n = rng.choice((0, 1, 2**32, 2**63, 2**64 - 1, len(kvs) + 1, len(kvs) - 1, 10**6))
        counts = (n, len(kvs)) if rng.random() < 0.5 else (len(tensors), n)
        what = f"count:{counts}"
    elif op == "array-length":
        inner = rng.choice((U64, U8, STR, ARR, F32))
        n = rng.choice((2**28, 2**32, 2**40, 2**64 - 1, 1001, 10**7))
        kvs[9] = ("tokenizer.ggml.tokens", ARR, Raw(struct.pack("<IQ", inner, n) + b"\0" * 16))
        what = f"array-length:{inner}x{n}"
    elif op == "string-length":
        n = rng.choice((2**20, 2**20 + 1, 2**32, 2**64 - 1, 1000, 10**5))
        key = rng.choice(("general.name", "general.architecture"))
        at = [k for k, *_ in kvs].index(key)
        kvs[at] = (key, STR, Raw(struct.pack("<Q", n) + b"abc"))
        what = f"string-length:{key}={n}"
    elif op == "nested":
        depth = rng.choice((2, 4, 5, 50, 5000))
        kvs.insert(rng.randrange(len(kvs) + 1), ("fuzz.nested", ARR, nested_array(depth)))
        what = f"nested:{depth}"
    elif op == "unknown-type":
        kind = rng.choice((13, 255, 2**31, 2**32 - 1))
        if rng.random() < 0.5:
            kvs[2] = ("llama.context_length", kind, Raw(b"\0" * 8))
        else:
            kvs[9] = ("tokenizer.ggml.tokens", ARR, Raw(struct.pack("<IQ", kind, 3) + b"\0" * 24))
        what = f"unknown-type:{kind}"
    elif op == "tensor":
        dims = rng.choice(((), (0,), (2**64 - 1,), (2**32, 2**32), (2**63, 2, 2), (1,) * 5,
                           (1,) * 9, (2**40, 2**40, 2**40)))
        tensors[rng.randrange(len(tensors))] = ("fuzz.weight", dims, rng.choice((0, 12, 2**32 - 1)))
        what = f"tensor:{dims}"
    elif op == "magic":
        magic, version = rng.choice(((b"GGUG", 3), (b"\0\0\0\0", 3), (b"GGUF", 0), (b"GGUF", 1),
                                     (b"GGUF", 4), (b"GGUF", 2**32 - 1), (b"GGUF", 2)))
        what = f"magic:{magic!r}:{version}"
    elif op == "issue-41":  # the header: one key, an array of 2^28 uint64 declared
        return (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + encode(STR, "a")
                + struct.pack("<IIQ", ARR, U64, 2**28)), op
    elif op == "empty":
        return b"", op
    data, ends = gguf_bytes(kvs, tensors, version, magic, counts)
    if op == "truncate":
        cut = max(0, rng.choice(ends) + rng.choice((-1, 0, 0, 1)))
        return data[:cut], f"truncate:{cut}/{len(data)}"
    if op == "flip":
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        return bytes(damaged), op
    if op == "garbage":
        return b"GGUF" + rng.randbytes(rng.randrange(37, 4096)), op
    return data, what


# --------------------------------------------------------------------------- config.json

USED_CONFIG_KEYS = ("num_hidden_layers", "num_attention_heads", "hidden_size",
                    "num_key_value_heads", "head_dim", "vocab_size", "intermediate_size",
                    "tie_word_embeddings", "max_position_embeddings", "torch_dtype",
                    "_name_or_path", "quantization_config", "text_config")
_DIGITS = "9" * 5000


def wrong_json() -> tuple[str, ...]:
    """JSON texts wrong for a count, a flag, a name or a table."""
    return ("0", "-1", "-32", '"eight"', '"4096"', '""', "true", "false", "null", "[]", "{}",
            "[32]", "1.5", "32.0", "1e999", "-1e999", "NaN", "Infinity", "-Infinity",
            "1" + "0" * 400, _DIGITS, "-" + _DIGITS, str(2**63), str(2**64), "1e308",
            '"\\u001b]0;pwned\\u0007"', '"\\ud800"', '"' + "x" * 100_000 + '"',
            "[" * 2000 + "]" * 2000, '{"a": ' * 300 + "1" + "}" * 300,
            '{"quant_method": 5, "bits": "four"}', '{"bits": 1e999}', '{"w_bit": -4}',
            "10000", "100000", "1000000", "10000000", "4294967296", "4294967297")  # the limits


_SLOT = "\u0000fuzz-slot\u0000"


def _with(doc: dict, path: tuple[str, ...], text: str) -> str:
    """``doc`` as JSON with the value at ``path`` written as the raw JSON ``text``."""
    parent = doc
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = _SLOT
    return json.dumps(doc, indent=2).replace(json.dumps(_SLOT), text, 1)


def _mutate_config(rng: random.Random) -> tuple[bytes, str]:
    source = rng.choice(sorted(MODELS.glob("*/config.json")))
    doc = json.loads(source.read_text())
    op = rng.choice(("value", "value", "value", "text-config", "quant", "delete", "bytes",
                     "deep-object"))
    if op == "text-config":  # a multimodal config: the decoder's shape under text_config
        doc = {"_name_or_path": doc.get("_name_or_path"), "text_config": doc}
        key = rng.choice(USED_CONFIG_KEYS[:9])
        text = rng.choice(wrong_json())
        return _with(doc, ("text_config", key), text).encode(), f"text_config.{key}={text[:30]}"
    if op == "quant":
        key = rng.choice(("quant_method", "bits", "w_bit"))
        text = rng.choice(wrong_json())
        return (_with(doc, ("quantization_config", key), text).encode(),
                f"quantization_config.{key}={text[:30]}")
    if op == "delete":
        key = rng.choice(USED_CONFIG_KEYS[:3])
        doc.pop(key, None)
        return json.dumps(doc).encode(), f"delete:{key}"
    if op == "bytes":
        data, how = mutate_bytes(json.dumps(doc, indent=2).encode(), rng, "json")
        return data, f"bytes:{how}"
    if op == "deep-object":
        n = rng.choice((500, 5000, 100_000))
        return (b'{"a": ' * n + b"1" + b"}" * n), f"deep-object:{n}"
    key = rng.choice(USED_CONFIG_KEYS) if rng.random() < 0.85 else rng.choice(sorted(doc))
    text = rng.choice(wrong_json())
    return _with(doc, (key,), text).encode(), f"{key}={text[:30]}"


# --------------------------------------------------------------------------- files and runs

FILE_OPS = ("fifo", "dev-zero", "dir", "link-out", "link-self", "dangling")


def _place(model: Path, name: str, rng: random.Random, out: Outside,
           make: Callable[[random.Random], tuple[bytes, str]]) -> str:
    """The model file ``model/name``: mutated bytes, or (one in seven) not a plain file."""
    target = model / name
    if rng.random() < 1 / 7:
        op = rng.choice(FILE_OPS)
        if op == "fifo":
            os.mkfifo(target)
        elif op == "dev-zero":
            target.symlink_to("/dev/zero")
        elif op == "dir":
            target.mkdir()
        elif op == "link-out":
            target.symlink_to(out.root / rng.choice(("sentinel.txt", "sentinel.json")))
        elif op == "link-self":
            target.symlink_to(name)
        else:
            target.symlink_to(model / "no-such-file")
        return f"file:{op}"
    data, what = make(rng)
    target.write_bytes(data)
    return what


def try_plan(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
             runner: Callable[[list[str], float, Path], Run],
             evaluate_share: float) -> list[Tried]:
    from tests.fuzz_runs import Tried, check

    model = work / "model"
    model.mkdir()
    if rng.random() < 0.5:
        name, what = "config.json", "config:" + _place(model, "config.json", rng, out, _mutate_config)
    else:
        name, what = "model.gguf", "gguf:" + _place(model, "model.gguf", rng, out, _mutate_gguf)
    path = model if rng.random() < 0.6 else model / name
    fmt = rng.choice(("terminal", "json"))
    # one in five without --context: the model's own maximum is then multiplied in
    given = ARGV if rng.random() < 0.8 else [a for a in ARGV if a not in ("--context", "2048")]
    argv = ["plan", "--model", str(path), *given, *(["--format", "json"] if fmt == "json" else [])]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, fmt == "json", NEEDLES)
    for problem in plan_problems(run, fmt, str(path)):
        verdict.add(problem)
    return [Tried("plan", f"{what} ({'dir' if path == model else 'file'}, {fmt})", argv, run,
                  verdict)]


def plan_problems(run: Run, fmt: str, path: str) -> list[str]:
    """What ``plan`` must hold beyond any command: exit 0 and 1 only beside their verdict,
    never 2, and exit 3 with one line on stderr naming the input."""
    if run.rc is None:
        return []
    if run.rc == 2:
        return ["exit-2"]
    if run.rc in (0, 1):
        if fmt == "json":
            try:
                fits = json.loads(run.stdout).get("fits")
            except (ValueError, AttributeError):
                return []  # check() counts it as invalid JSON
            return [] if fits is (run.rc == 0) else ["false-verdict"]
        said = ("does NOT fit" in run.stdout, ": fits\n" in run.stdout)
        return [] if said == (run.rc == 1, run.rc == 0) else ["false-verdict"]
    if run.rc == 3 and (path not in run.stderr or run.stderr.strip().count("\n")):
        return ["unclear-error"]
    return []

