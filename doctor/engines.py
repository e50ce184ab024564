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
