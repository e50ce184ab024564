"""What an engine was told about P2P: NCCL's switches, vLLM's flag, and vLLM's cached verdict.

Sources, for one engine process: ``NCCL_P2P_DISABLE``, ``NCCL_P2P_LEVEL``, ``NCCL_IB_DISABLE``,
``CUDA_VISIBLE_DEVICES``, ``VLLM_CACHE_ROOT`` and ``XDG_CACHE_HOME`` from its environment
(probes/helpers/process_env.py: one variable at a time; root or the engine's user);
``--disable-custom-all-reduce`` from its command line; and vLLM's cache of its own P2P test,
``<VLLM_CACHE_ROOT>/gpu_p2p_access_cache_for_<CUDA_VISIBLE_DEVICES>.json`` (default root
``~/.cache/vllm`` of the engine's user, or ``$XDG_CACHE_HOME/vllm``; visible devices default
"0,1,...,n-1"), a JSON object of ``"i->j": true|false`` over the visible devices' order.
vLLM trusts the file without testing again: a stale False turns its custom all-reduce off,
a stale True where P2P is blocked hangs it. Manual equivalent:
``cat ~/.cache/vllm/gpu_p2p_access_cache_for_*.json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of
from probes.helpers.process_env import env_value, home_of
from probes.helpers.processes import Process

CACHE_PREFIX = "gpu_p2p_access_cache_for_"
MAX_CACHE_BYTES = 64 * 1024  # 64 GPUs' 4,032 entries fit in ~100 KiB; vLLM's hosts in 1 KiB
_KEY = re.compile(r"^(\d{1,3})->(\d{1,3})$")
ENV_NAMES = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE")


@dataclass(frozen=True, slots=True)
class CacheVerdict:
    a: int  # NVML index of the source GPU (the visible list mapped back)
    b: int
    p2p: bool  # what vLLM's test found and cached


@dataclass(frozen=True, slots=True)
class EngineP2p:
    pid: int
    engine: str
    nccl_p2p_disable: str | None  # the value as set; None: not set (or see missing)
    nccl_p2p_level: str | None
    nccl_ib_disable: str | None
    custom_all_reduce_disabled: bool  # --disable-custom-all-reduce on its command line
    cache_file: str | None  # vLLM's P2P cache file, where one exists
    cache: tuple[CacheVerdict, ...]
    missing: dict[str, str] = field(default_factory=dict)


def _visible(text: str | None, count: int) -> tuple[str, tuple[int, ...] | None]:
    """The visible-device string vLLM names the file with, and the NVML indexes it maps to
    (None when it lists UUIDs or MIG devices: the file is still read, not mapped)."""
    visible = text if text else ",".join(str(i) for i in range(count))
    parts = visible.split(",")
    if all(p.strip().isdigit() for p in parts):
        return visible, tuple(int(p) for p in parts)
    return visible, None


def parse_cache(text: str, order: tuple[int, ...] | None) -> tuple[tuple[CacheVerdict, ...], str | None]:
    """vLLM's cache as verdicts by NVML index, or () and why it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return (), f"not JSON ({exc.msg} at line {exc.lineno})"
    except (ValueError, RecursionError):  # undecodable text; nesting deeper than Python's stack
        return (), "not JSON"
    if not isinstance(data, dict):
        return (), f"a JSON {type(data).__name__}, not an object of \"i->j\": true|false"
    out = []
    for key, value in data.items():
        m = _KEY.match(str(key))
        if not m or not isinstance(value, bool):
            return (), f"entry {str(key)[:40]!r}: {str(value)[:20]!r} is not \"i->j\": true|false"
        i, j = int(m[1]), int(m[2])
        if order is not None:
            if i >= len(order) or j >= len(order):
                return (), f"entry {key!r} names a device past the {len(order)} visible"
            i, j = order[i], order[j]
        out.append(CacheVerdict(i, j, value))
    return tuple(sorted(out, key=lambda v: (v.a, v.b))), None


def _cache(host: Host, proc: Process, env: dict[str, str | None], count: int,
           missing: dict[str, str]) -> tuple[str | None, tuple[CacheVerdict, ...]]:
    root = env.get("VLLM_CACHE_ROOT")
    if not root:
        base = env.get("XDG_CACHE_HOME")
        if not base:
            home, why = home_of(host, proc.pid)
            if home is None:
                missing["cache_file"] = why or "no home"
                return None, ()
            base = f"{home.rstrip('/')}/.cache"
        root = f"{base.rstrip('/')}/vllm"
    visible, order = _visible(env.get("CUDA_VISIBLE_DEVICES"), count)
    name = f"{CACHE_PREFIX}{visible}.json"
    try:
        listing = host.list_files(root)
    except HostReadError as exc:
        if reason_of(exc) != "not-found":
            missing["cache_file"] = f"{root}: {reason_of(exc)}"
        return None, ()
    path = f"{root}/{name}"
    if name not in listing:
        return None, ()
    if listing[name] > MAX_CACHE_BYTES:
        missing["cache_file"] = f"{path} is {listing[name]:,} bytes, over {MAX_CACHE_BYTES:,}: not read"
        return path, ()
    try:
        text = host.read_text(path)
    except HostReadError as exc:
        missing["cache_file"] = f"{path}: {reason_of(exc)}"
        return path, ()
    verdicts, why = parse_cache(text[:MAX_CACHE_BYTES], order)
    if why:
        missing["cache_file"] = f"{path}: {why}"
    return path, verdicts


def engine_p2p(host: Host, proc: Process, count: int) -> EngineP2p:
    missing: dict[str, str] = {}
    env: dict[str, str | None] = {}
    for name in (*ENV_NAMES, "CUDA_VISIBLE_DEVICES", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME"):
        got = env_value(host, proc.pid, name)
        env[name] = got.value
        if got.reason:
            missing["environ"] = got.reason
    cache_file: str | None = None
    cache: tuple[CacheVerdict, ...] = ()
    if proc.engine == "vllm":
        cache_file, cache = _cache(host, proc, env, count, missing)
    return EngineP2p(
        pid=proc.pid, engine=proc.engine or "?",
        nccl_p2p_disable=env["NCCL_P2P_DISABLE"], nccl_p2p_level=env["NCCL_P2P_LEVEL"],
        nccl_ib_disable=env["NCCL_IB_DISABLE"],
        custom_all_reduce_disabled="--disable-custom-all-reduce" in proc.cmdline.split(),
        cache_file=cache_file, cache=cache, missing=missing)
