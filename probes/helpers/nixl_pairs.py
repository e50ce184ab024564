"""The NIXL instances on one host that could be a prefill/decode pair, and what of their KV
configuration differs where the two must agree.

What must agree, from vLLM 0.33.0's own NIXL connector
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/``):

* ``metadata.py`` compute_nixl_compatibility_hash: the model, its dtype, the KV cache dtype
  (``cache_dtype``), the attention backend and the transfer mode (``NixlPushConnector`` writes,
  ``NixlConnector``/``NixlPullConnector`` read): two instances whose hashes differ refuse the
  handshake, and every transfer between them fails;
* ``base_worker.py`` _validate_remote_agent_handshake: the KV cache layout (``kv_cache_layout``)
  unless ``enable_permute_local_kv`` is set in ``--kv-transfer-config`` (RuntimeError
  "Heterogeneous TP expects same kv_cache_layout"), and the block size where either side
  stages through a host buffer (``kv_buffer_device: cpu``: "Heterogeneous block sizes are not
  supported with host buffer").

Which instances pair: those serving the same model with roles that can meet (a producer and a
consumer, or ``kv_both`` with either); two producers or two consumers never transfer to each
other. Sources: each instance's ``--kv-transfer-config`` (``/proc/<pid>/cmdline``) and its
``vllm:cache_config_info`` labels (``block_size``, ``cache_dtype``, ``kv_cache_layout``).
"""

from __future__ import annotations

from dataclasses import dataclass

PUSH = ("nixlpushconnector",)


@dataclass(frozen=True, slots=True)
class NixlSide:
    endpoint: str
    model: str | None
    role: str | None  # kv_producer, kv_consumer, kv_both
    mode: str  # "push" or "pull"
    cache_dtype: str | None
    block_size: str | None
    layout: str | None  # None: not set (resolved by the engine, not published)
    host_buffer: bool  # kv_buffer_device is cpu
    permute: bool  # enable_permute_local_kv


def mode_of(connector: str | None) -> str:
    return "push" if (connector or "").lower() in PUSH else "pull"


def _meet(a: NixlSide, b: NixlSide) -> bool:
    roles = {a.role, b.role}
    return a.model == b.model and a.model is not None and roles not in ({"kv_producer"}, {"kv_consumer"})


def differences(a: NixlSide, b: NixlSide) -> tuple[str, ...]:
    """What of ``a``'s configuration ``b`` does not share, as "what ours ≠ theirs (where)":
    symbols and values only, so that the record reads the same in every language."""
    out = []
    if a.mode != b.mode:
        out.append(f"kv_connector {a.mode} ≠ {b.mode} ({b.endpoint})")
    if a.cache_dtype and b.cache_dtype and a.cache_dtype != b.cache_dtype:
        out.append(f"cache_dtype {a.cache_dtype} ≠ {b.cache_dtype} ({b.endpoint})")
    if a.layout and b.layout and a.layout != b.layout and not (a.permute or b.permute):
        out.append(f"kv_cache_layout {a.layout} ≠ {b.layout} ({b.endpoint})")
    if (a.host_buffer or b.host_buffer) and a.block_size and b.block_size and a.block_size != b.block_size:
        out.append(f"block_size (kv_buffer_device=cpu) {a.block_size} ≠ {b.block_size} ({b.endpoint})")
    return tuple(out)


def mismatches(sides: list[NixlSide]) -> dict[str, tuple[str, ...]]:
    """endpoint -> what differs from the instances it could pair with on this host."""
    found: dict[str, tuple[str, ...]] = {}
    for a in sides[:64]:  # a host runs a handful of instances; bound the pairs all the same
        diffs = tuple(d for b in sides[:64] if b is not a and _meet(a, b) for d in differences(a, b))
        if diffs:
            found[a.endpoint] = diffs
    return found
