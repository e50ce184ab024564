"""An engine's configuration from its command line and from its own JSON pages.

Flag names are each engine's documented CLI (vLLM ``vllm serve --help``, SGLang
``launch_server --help``, TGI ``text-generation-launcher --help``, ``llama-server --help``,
``tritonserver --help``); page fields are engine-facts.md's "Live configuration".
The command line arrives with secret values already masked; only whether an API key flag
is present is kept.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable

from doctor.engines import identity
from doctor.values import count, field, first, fraction, text



@dataclass(frozen=True, slots=True)
class Engine:
    """One serving engine. Fields are stable: other probes (engine.load, warm-up) read them."""

    pid: int | None  # None for an --endpoint engine not found in the process table
    kind: str  # vllm, sglang, tgi, llama.cpp, ollama, tensorrt-llm, triton, or "unknown"
    base_url: str | None  # http://127.0.0.1:8000 (no credentials, no path); None: no socket
    model: str | None  # served model name (/v1/models id, --served-model-name, model path)
    model_path: str | None  # local weights path from the command line or the engine
    gpu_memory_utilization: float | None  # vLLM flag / cache_config; SGLang mem_fraction_static
    max_num_seqs: int | None  # vLLM; SGLang max_running_requests; TGI max_concurrent_requests; llama.cpp -np
    max_num_batched_tokens: int | None  # vLLM; SGLang chunked_prefill_size; TGI max_batch_prefill_tokens; llama.cpp -b
    block_size: int | None  # KV block tokens: vLLM --block-size/cache_config; SGLang page_size
    max_model_len: int | None  # tokens per sequence: /v1/models, context_length, max_total_tokens, n_ctx
    kv_cache_dtype: str | None  # "auto", "fp8", "q8_0", …
    tensor_parallel_size: int | None
    enforce_eager: bool | None  # CUDA graphs off (--enforce-eager, --disable-cuda-graph)
    api_key_set: bool  # the engine asks for an API key (flag present, or /v1 answered 401)
    listen: tuple[str, ...]  # listening sockets of the process
    source: str  # "process", "endpoint" or "process+endpoint"
    config_from: tuple[str, ...]  # where the figures came from: flags, /metrics, /v1/models…
    error: str | None  # why its pages could not be read, naming the URL; None when they could
    # the version the engine states (probes/helpers/engine_version.py: vLLM /version, SGLang
    # /server_info, TGI /info, llama.cpp /props build_info); None with version_reason, why
    version: str | None = None
    version_reason: str | None = "not read: no page of the engine was read"


# figure → (flags per engine). A flag with no value (enforce_eager) is a switch.
FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    # TGI's --cuda-memory-fraction (default 1.0) keeps its own margin: not the same knob.
    "gpu_memory_utilization": {"vllm": ("--gpu-memory-utilization",),
                               "sglang": ("--mem-fraction-static",)},
    "max_num_seqs": {"vllm": ("--max-num-seqs",), "sglang": ("--max-running-requests",),
                     "tgi": ("--max-concurrent-requests",), "llama.cpp": ("-np", "--parallel")},
    "max_num_batched_tokens": {"vllm": ("--max-num-batched-tokens",),
                               "sglang": ("--chunked-prefill-size",),
                               "tgi": ("--max-batch-prefill-tokens",),
                               "llama.cpp": ("-b", "--batch-size")},
    "block_size": {"vllm": ("--block-size",), "sglang": ("--page-size",)},
    "max_model_len": {"vllm": ("--max-model-len",), "sglang": ("--context-length",),
                      "tgi": ("--max-total-tokens",), "llama.cpp": ("-c", "--ctx-size")},
    "kv_cache_dtype": {"vllm": ("--kv-cache-dtype",), "sglang": ("--kv-cache-dtype",),
                       "llama.cpp": ("-ctk", "--cache-type-k")},
    "tensor_parallel_size": {"vllm": ("--tensor-parallel-size", "-tp"),
                             "sglang": ("--tp-size", "--tp"), "tgi": ("--num-shard",)},
    "port": {"vllm": ("--port",), "sglang": ("--port",), "tgi": ("--port", "-p"),
             "llama.cpp": ("--port",), "tensorrt-llm": ("--metrics-port", "--port"),
             "triton": ("--metrics-port",)},
}
SWITCHES = {"enforce_eager": ("--enforce-eager", "--disable-cuda-graph")}
PATH_FLAGS = ("--model", "--model-path", "--model-id")  # "-m" is llama.cpp's (python's -m is not)
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "tgi": 3000, "llama.cpp": 8080,
                 "ollama": 11434, "tensorrt-llm": 8002, "triton": 8002}
FLOATS = {"gpu_memory_utilization"}
STRINGS = {"kv_cache_dtype", "model", "model_path"}
CONFIG_FIELDS = ("model", "model_path", "gpu_memory_utilization", "max_num_seqs",
                 "max_num_batched_tokens", "block_size", "max_model_len", "kv_cache_dtype",
                 "tensor_parallel_size", "enforce_eager", "api_key_set")


def _args(cmdline: str) -> list[str]:
    try:
        return shlex.split(cmdline)
    except ValueError:  # an unbalanced quote in a process title
        return cmdline.split()


def flag(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` on the command line: ``--x 5`` or ``--x=5``."""
    for name in names:
        for i, arg in enumerate(args):
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _typed(figure: str, value: Any) -> Any:
    """A flag's or a page's value as the record holds it, or None when it is not one
    (doctor/values.py): a share from 0 to 1, a string, or a whole number >= 1 (a port
    up to 65535). ``--max-model-len 1e999``, NaN or a 400-digit number are None."""
    if figure in FLOATS:
        return fraction(value)
    if figure in STRINGS:
        return text(value)
    found = count(value, minimum=1)
    if figure == "port" and found is not None and found > 65535:
        return None
    return found


def _from_flags(kind: str, cmdline: str) -> dict[str, Any]:
    args = _args(cmdline)
    found: dict[str, Any] = {}
    for figure, per_engine in FLAGS.items():
        names = per_engine.get(kind, ())
        if names:
            found[figure] = _typed(figure, flag(args, *names))
    found["enforce_eager"] = any(a in SWITCHES["enforce_eager"] for a in args) or None
    found["api_key_set"] = flag(args, "--api-key") is not None or "--api-key" in args
    path = flag(args, *PATH_FLAGS, *(("-m",) if kind == "llama.cpp" else ()))
    if path is None and "serve" in args:  # `vllm serve /models/x`
        after = args[args.index("serve") + 1:]
        path = after[0] if after and not after[0].startswith("-") else None
    found["model_path"] = path if path and path.startswith("/") else None
    found["model"] = flag(args, "--served-model-name") or path or flag(args, *PATH_FLAGS)
    return found


def _base_url(kind: str, listen: tuple[str, ...], port: int | None) -> str | None:
    """The URL to reach a process at: its flagged (else the engine's default) port among its
    sockets, else its first socket; with no socket read, the flagged or default port."""
    port = port or DEFAULT_PORTS.get(kind)
    sockets = []
    for item in listen:
        address, _, number = item.rpartition(":")
        if number.isdigit():
            sockets.append((address, int(number)))
    chosen = next((s for s in sockets if s[1] == port), sockets[0] if sockets else None)
    if chosen is None:
        if listen:
            return None
        chosen = ("127.0.0.1", port or DEFAULT_PORTS.get(kind, 0))  # sockets unreadable
    address, chosen_port = chosen
    address = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "*": "127.0.0.1"}.get(address, address)
    return f"http://{address}:{chosen_port}" if chosen_port else None


def from_process(proc) -> Engine:
    kind = proc.engine or "unknown"
    found = _from_flags(kind, proc.cmdline)
    port = found.pop("port", None)
    listen = tuple(getattr(proc, "listen", ()) or ())
    return Engine(pid=proc.pid, kind=kind, base_url=_base_url(kind, listen, port),
                  listen=listen, source="process", config_from=("flags",), error=None,
                  **{f: found.get(f) for f in CONFIG_FIELDS if f != "api_key_set"},
                  api_key_set=bool(found.get("api_key_set")))


def blank(base_url: str | None) -> Engine:
    return Engine(pid=None, kind="unknown", base_url=base_url, listen=(), source="endpoint",
                  config_from=(), error=None, api_key_set=False,
                  **{f: None for f in CONFIG_FIELDS if f != "api_key_set"})


def as_dict(engine: Engine) -> dict[str, Any]:
    return {f: getattr(engine, f) for f in CONFIG_FIELDS}


def merge(found: dict[str, Any], new: dict[str, Any]) -> None:
    """What the engine reports wins over its flags; absent figures, and values that are
    no figure (a string for a count, NaN, 1e999), change nothing."""
    for key, value in new.items():
        if key not in CONFIG_FIELDS or value is None:
            continue
        if key in ("api_key_set", "enforce_eager"):
            found[key] = bool(value)
        elif (typed := _typed(key, value)) is not None:
            found[key] = typed


def from_cache_config(labels: dict[str, str]) -> dict[str, Any]:
    """vllm:cache_config_info labels (vLLM's CacheConfig)."""
    return {"block_size": labels.get("block_size"),
            "gpu_memory_utilization": labels.get("gpu_memory_utilization"),
            "kv_cache_dtype": labels.get("cache_dtype")}


def _v1_models(data: Any) -> dict[str, Any]:
    """OpenAI /v1/models: vLLM and SGLang add max_model_len; owned_by names the engine."""
    model = first(data, "data")
    if not model:
        return {}
    kind = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp"}.get(
        text(model.get("owned_by")) or "")
    root = text(model.get("root"))
    return {"kind": kind, "model": model.get("id"), "max_model_len": model.get("max_model_len"),
            "model_path": root if root and root.startswith("/") else None}


def _sglang_info(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or "mem_fraction_static" not in data:
        return {}
    # /server_info also carries the api_key itself: only whether it is set is kept.
    return {"kind": "sglang", "gpu_memory_utilization": data.get("mem_fraction_static"),
            "max_num_seqs": data.get("max_running_requests"),
            "max_num_batched_tokens": data.get("chunked_prefill_size"),
            "max_model_len": data.get("context_length"), "block_size": data.get("page_size"),
            "kv_cache_dtype": data.get("kv_cache_dtype"),
            "tensor_parallel_size": data.get("tp_size"),
            "model_path": data.get("model_path"), "api_key_set": bool(data.get("api_key")) or None,
            "enforce_eager": data.get("disable_cuda_graph") is True or None}


def _tgi_info(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or "model_id" not in data or "max_total_tokens" not in data:
        return {}
    return {"kind": "tgi", "model": data.get("model_id"),
            "max_model_len": data.get("max_total_tokens"),
            "max_num_seqs": data.get("max_concurrent_requests"),
            "max_num_batched_tokens": data.get("max_batch_prefill_tokens")}


def _llamacpp_props(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or "total_slots" not in data:
        return {}
    return {"kind": "llama.cpp", "max_num_seqs": data.get("total_slots"),
            "max_model_len": field(data, "default_generation_settings", "n_ctx"),
            "model_path": data.get("model_path")}


def _ollama_ps(data: Any) -> dict[str, Any]:
    if not isinstance(field(data, "models"), list):
        return {}
    model = first(data, "models")
    return {"kind": "ollama", "model": model.get("name"),
            "max_model_len": model.get("context_length")}


Reader = Callable[[Any], dict[str, Any]]
PAGES: dict[str, tuple[tuple[str, Reader], ...]] = {
    "vllm": (("/v1/models", _v1_models),),
    "sglang": (("/server_info", _sglang_info), ("/get_server_info", _sglang_info),
               ("/v1/models", _v1_models)),
    "tgi": (("/info", _tgi_info),),
    "llama.cpp": (("/props", _llamacpp_props), ("/v1/models", _v1_models)),
    "ollama": (("/api/ps", _ollama_ps),),
    "tensorrt-llm": (), "triton": (),
}
# An --endpoint whose /metrics named no engine: ask the pages that identify one.
PROBE_ORDER: tuple[tuple[str, Reader], ...] = (
    ("/v1/models", _v1_models), ("/props", _llamacpp_props), ("/info", _tgi_info),
    ("/server_info", _sglang_info), ("/api/ps", _ollama_ps))


def identity_of(proc) -> str:
    """A process's engine identity for finding keys (doctor/engines.py's ``identity``): its
    kind and listening address, else its model path from the command line, else its pid."""
    engine = from_process(proc)
    return identity(engine.kind, engine.listen, engine.model_path or engine.model, proc.pid)
