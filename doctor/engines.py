"""Serving engines recognised from a command line: the names the product reports in.

Patterns on the whole command line (NUL turned into spaces). Order matters: the first
match names the engine. Sources: each engine's documented launch commands.
"""

from __future__ import annotations

import re

ENGINE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM v1 and SGLang retitle their worker processes (setproctitle): VLLM::EngineCore,
    # VLLM::Worker_TP0, sglang::scheduler_TP0.
    ("vllm", re.compile(r"(^|[\s/])vllm(\s+serve\b|\.entrypoints\.)|^VLLM::")),
    ("sglang", re.compile(r"\bsglang\.launch_server\b|(^|[\s/])sglang\s+serve\b|^sglang::")),
    ("tgi", re.compile(r"(^|/)text-generation-(launcher|router|server)\b")),
    ("llama.cpp", re.compile(r"(^|/)llama-server(\s|$)|\bllama_cpp\.server\b")),
    ("ollama", re.compile(r"(^|/)ollama\s+(serve|runner)\b")),
    ("tensorrt-llm", re.compile(r"(^|/)trtllm-serve\b")),
    ("triton", re.compile(r"(^|/)tritonserver\b")),
)


def engine_of(cmdline: str) -> str | None:
    """The engine a command line starts, or None. Bounded: engines' command lines are
    searched in their first 64 KiB (a pathological one must not cost a scan minutes)."""
    head = cmdline[:65536]
    for name, pattern in ENGINE_PATTERNS:
        if pattern.search(head):
            return name
    return None


def identity(kind: str, listen: tuple[str, ...] = (), model_path: str | None = None,
             pid: int | None = None) -> str:
    """An engine's identity in finding keys: its kind and its listening address
    ("llama.cpp 127.0.0.1:8080"; the lowest address when it listens on several), else the
    model it serves ("llama.cpp /models/a.gguf"), else its pid. Two engines of one kind on
    one host differ by it; one engine keeps it across restarts (a pid does not)."""
    if listen:
        return f"{kind} {sorted(listen)[0]}"
    if model_path:
        return f"{kind} {model_path}"
    return f"{kind} pid {pid}" if pid is not None else kind
