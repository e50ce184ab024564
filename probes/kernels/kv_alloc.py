"""The KV-cache allocation model: how much memory a request mix reserves against what it uses.

Two ways an engine can hold a request's keys and values:

* **paged** (vLLM's PagedAttention, SGLang, TensorRT-LLM): the cache is cut into blocks of
  ``block_tokens`` tokens and a request takes ``ceil(length / block_tokens)`` blocks, so it
  wastes less than one block (internal fragmentation only);
* **contiguous** (one reservation per request or slot, as llama.cpp's ``-c N --parallel P``
  or a naive HF cache): every request reserves the same ``reserve_tokens`` up front, and all
  it does not fill is wasted.

``simulate`` and ``simulate_contiguous`` (probes/helpers/kv_blocks.py) are pure functions of the request lengths (tokens,
prompt + output), so the engine helper, the rules' tests and a host without a GPU get the
same figures. ``probes.kernels.gpu_kv_alloc`` replays the same mix through torch's caching
allocator on a GPU, where the allocator's own rounding adds to the model's figures.

Units: bytes. ``bytes_per_token`` is the K+V size of one token across all layers, e.g.
``2 × layers × kv_heads × head_dim × dtype_bytes`` (Llama-3-8B fp16: 2×32×8×128×2 = 131072).
"""

from __future__ import annotations

import math

from probes.helpers.kv_blocks import reference_mix as reference_mix
from probes.helpers.kv_blocks import simulate as simulate
from probes.helpers.kv_blocks import simulate_contiguous as simulate_contiguous


def replay_allocator(lengths: list[int], block_tokens: int, bytes_per_token: int,
                     device: str, live_requests: int = 64) -> dict:
    """Replay the mix through torch's allocator on ``device``: one tensor per block, requests
    arriving in order and the oldest finishing once ``live_requests`` are in flight (churn).

    Returns the paged model's figures for the peak in-flight set plus, on a GPU, the caching
    allocator's ``reserved_bytes`` against ``allocated_bytes`` at the peak and
    ``allocator_overhead_fraction`` = (reserved - allocated) / reserved. On the CPU there is no
    caching allocator: the allocator fields are None. Bounded by the mix: keep
    ``bytes_per_token`` small (one layer's K+V, e.g. 4096) so the peak stays in a few GiB.
    """
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    live: list[list] = []
    peak: dict = {"reserved": 0, "allocated": 0, "lengths": []}
    in_flight: list[int] = []
    for n in lengths:
        blocks = [torch.empty(block_tokens * bytes_per_token, dtype=torch.uint8, device=device)
                  for _ in range(math.ceil(n / block_tokens))]
        live.append(blocks)
        in_flight.append(n)
        if len(live) > live_requests:
            live.pop(0)
            in_flight.pop(0)
        if cuda:
            reserved = torch.cuda.memory_reserved(device)
            if reserved >= peak["reserved"]:
                peak = {"reserved": reserved, "allocated": torch.cuda.memory_allocated(device),
                        "lengths": list(in_flight)}
        elif sum(in_flight) >= sum(peak["lengths"]):
            peak["lengths"] = list(in_flight)
    model = simulate(peak["lengths"], block_tokens, bytes_per_token)
    del live
    if not cuda:
        return {**model, "allocator_reserved_bytes": None, "allocator_allocated_bytes": None,
                "allocator_overhead_fraction": None}
    torch.cuda.empty_cache()
    return {**model, "allocator_reserved_bytes": peak["reserved"],
            "allocator_allocated_bytes": peak["allocated"],
            "allocator_overhead_fraction": round(1 - peak["allocated"] / peak["reserved"], 4)
            if peak["reserved"] else None}


def main(argv: list[str] | None = None) -> int:
    """``python -m probes.kernels.kv_alloc --device 0``: the allocator replay at 8, 16 and 32
    tokens per block over the reference mix; one JSON object."""
    import json
    import sys

    from probes.helpers.kernel_cli import OneLineParser

    parser = OneLineParser(prog="kv_alloc", description="KV-cache allocation replay")
    parser.add_argument("--device", default="cpu", help="GPU index, or 'cpu'")
    parser.add_argument("--bytes-per-token", type=int, default=4096)
    args = parser.parse_args(argv)
    device = "cpu" if args.device == "cpu" else f"cuda:{int(args.device)}"
    try:
        mix = reference_mix()
        out = {str(b): replay_allocator(mix, b, args.bytes_per_token, device) for b in (8, 16, 32)}
    except (RuntimeError, ImportError, ValueError) as exc:
        print(f"kv_alloc: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
