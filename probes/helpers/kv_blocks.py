"""The KV-cache allocation model: how much memory a request mix reserves against what it uses.

Two ways an engine can hold a request's keys and values:

* **paged** (vLLM's PagedAttention, SGLang, TensorRT-LLM): the cache is cut into blocks of
  ``block_tokens`` tokens and a request takes ``ceil(length / block_tokens)`` blocks, so it
  wastes less than one block (internal fragmentation only);
* **contiguous** (one reservation per request or slot, as llama.cpp's ``-c N --parallel P``
  or a naive HF cache): every request reserves the same ``reserve_tokens`` up front, and all
  it does not fill is wasted.

``simulate`` and ``simulate_contiguous`` are pure functions of the request lengths (tokens,
prompt + output), so engine.kv_cache, gpu.kv_alloc, the rules' tests and a host without a GPU
get the same figures; probes/kernels/kv_alloc.py replays the same mix through torch's caching
allocator on a GPU, where the allocator's own rounding adds to the model's figures.

Units: bytes. ``bytes_per_token`` is the K+V size of one token across all layers, e.g.
``2 × layers × kv_heads × head_dim × dtype_bytes`` (Llama-3-8B fp16: 2×32×8×128×2 = 131072).
"""

from __future__ import annotations

import math


def _check(lengths: list[int], bytes_per_token: int) -> None:
    if bytes_per_token <= 0:
        raise ValueError(f"bytes_per_token must be positive, got {bytes_per_token}")
    bad = [n for n in lengths if not isinstance(n, int) or n < 0]
    if bad:
        raise ValueError(f"request lengths must be non-negative integers; got {bad[:3]}")


def _result(reserved_tokens: int, used_tokens: int, bytes_per_token: int, **extra) -> dict:
    reserved = reserved_tokens * bytes_per_token
    used = used_tokens * bytes_per_token
    return {
        "reserved_bytes": reserved,
        "used_bytes": used,
        "waste_bytes": reserved - used,
        "waste_fraction": round((reserved - used) / reserved, 6) if reserved else 0.0,
        **extra,
    }


def simulate(lengths: list[int], block_tokens: int, bytes_per_token: int) -> dict:
    """Paged allocation: each request holds ``ceil(length / block_tokens)`` blocks.

    Returns ``reserved_bytes``, ``used_bytes``, ``waste_bytes``, ``waste_fraction``
    (waste / reserved, 0.0 for an empty mix), ``blocks`` and ``block_tokens``.
    Example: lengths [1, 16, 17] at 16 tokens/block take 1+1+2 = 4 blocks = 64 token slots
    for 34 used: waste 30/64.
    """
    _check(lengths, bytes_per_token)
    if block_tokens <= 0:
        raise ValueError(f"block_tokens must be positive, got {block_tokens}")
    blocks = sum(math.ceil(n / block_tokens) for n in lengths)
    return _result(blocks * block_tokens, sum(lengths), bytes_per_token,
                   blocks=blocks, block_tokens=block_tokens)


def simulate_contiguous(lengths: list[int], reserve_tokens: int | None,
                        bytes_per_token: int) -> dict:
    """Contiguous allocation: each request reserves ``reserve_tokens`` (the context length
    or slot size); ``None`` reserves the longest request's length for every request (the
    best a static reservation can do). A request longer than the reservation is counted in
    ``overflowing`` (the engine would truncate or refuse it) and uses only the reservation.
    """
    _check(lengths, bytes_per_token)
    reserve = max(lengths, default=0) if reserve_tokens is None else reserve_tokens
    if reserve < 0:
        raise ValueError(f"reserve_tokens must be non-negative, got {reserve}")
    used = sum(min(n, reserve) for n in lengths)
    return _result(reserve * len(lengths), used, bytes_per_token,
                   reserve_tokens=reserve, overflowing=sum(1 for n in lengths if n > reserve))


def reference_mix(count: int = 512, seed: int = 7) -> list[int]:
    """A request-length mix shaped like chat traffic (ShareGPT-like: log-normal, median
    ~600 tokens, long tail to 8k), generated deterministically so results are reproducible.
    """
    import random

    rng = random.Random(seed)
    return [max(1, min(8192, int(rng.lognormvariate(6.4, 0.9)))) for _ in range(count)]
