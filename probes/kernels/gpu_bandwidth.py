"""GPU copy micro-kernels (torch): device memory, host<->device (pinned, pageable), peer to peer.

Each kernel warms up, then times ``repeats`` copies one by one and reports the median, in
decimal GB/s (1e9 B/s), and the run-to-run ``spread`` of the copies' rates ((max - min) /
median, a fraction; None after one copy): the figure's noise floor. Timing: CUDA events on a GPU (the copy's own time on the device),
``time.perf_counter`` on the CPU (where the same code runs in the tests) and for peer copies
(which span two devices' streams; timed to both devices' synchronisation). Every loop stops at
``budget_s`` whatever the repeat count. How the figures count bytes:

* ``device_copy``: a device-to-device ``copy_`` reads and writes ``nbytes`` each: counted
  2 x nbytes, as bandwidthTest and STREAM's copy do (nvbandwidth's device_local_copy counts
  once; its 1.1 TB/s is 2.2 TB/s here);
* ``host_copy``: host-to-device or device-to-host, ``nbytes`` over the link once;
* ``peer_copy``: GPU a to GPU b, ``nbytes`` once.

Buffers: 256 MiB on a GPU (nvbandwidth uses 512 MiB; 256 keeps an 8-GPU scan short), 32 MiB
on the CPU. Run as a child of the scan (``python -m probes.kernels.gpu_bandwidth --device 0
--cpus 0-55``): the child binds itself to the GPU's own CPUs first, so pinned memory is
allocated on the GPU's NUMA node, and prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Callable

from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.spread import spread

GPU_BYTES = 256 << 20
CPU_BYTES = 32 << 20


def _timer(device: str) -> Callable[[Callable[[], object]], float]:
    """A function timing one call of ``op`` in seconds: CUDA events on a GPU, else perf_counter."""
    import torch

    if device.startswith("cuda"):
        def timed(op: Callable[[], object]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            op()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return timed

    def timed_cpu(op: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        op()
        return time.perf_counter() - t0
    return timed_cpu


def median_gbps(op: Callable[[], object], nbytes_counted: int, device: str, warmup: int = 3,
                repeats: int = 10, budget_s: float = 5.0) -> dict:
    """Warm up, then the median of up to ``repeats`` timed calls within ``budget_s``, and the
    spread of their rates."""
    timed = _timer(device)
    for _ in range(warmup):
        timed(op)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < repeats and (not samples or time.perf_counter() < deadline):
        samples.append(timed(op))
    seconds = statistics.median(samples)
    # a copy timed at 0 s (a coarse clock) has no rate: it is left out of the spread
    rates = [nbytes_counted / s for s in samples if s > 0]
    return {"gbps": round(nbytes_counted / seconds / 1e9, 2), "median_s": seconds,
            "repeats": len(samples), "bytes": nbytes_counted, "spread": spread(rates)}


def device_copy(device: str, nbytes: int, **kw) -> dict:
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    src.fill_(1)
    return median_gbps(lambda: dst.copy_(src), 2 * nbytes, device, **kw)


def host_copy(device: str, nbytes: int, to_device: bool, pinned: bool, **kw) -> dict:
    import torch

    host = torch.ones(nbytes, dtype=torch.uint8)
    if pinned and device.startswith("cuda"):
        host = host.pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if to_device:
        return median_gbps(lambda: dev.copy_(host, non_blocking=pinned), nbytes, device, **kw)
    return median_gbps(lambda: host.copy_(dev, non_blocking=pinned), nbytes, device, **kw)


def peer_copy(a: str, b: str, nbytes: int, **kw) -> dict:
    """Timed with perf_counter around the copy and both devices' synchronisation: events
    belong to one device's stream, and a peer copy involves two."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=a)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=b)

    def op() -> None:
        dst.copy_(src)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
    return median_gbps(op, nbytes, "cpu", **kw)


def bind_cpus(cpus: str | None) -> None:
    """Run on these CPUs ("0-55,112-167"), so pinned pages land on their NUMA node."""
    if not cpus:
        return
    chosen: set[int] = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        chosen.update(range(int(lo), int(hi or lo) + 1))
    os.sched_setaffinity(0, chosen & os.sched_getaffinity(0) or os.sched_getaffinity(0))


def link_during_copy(index: int, nbytes: int) -> dict:
    """The link's generation and width read while pinned host-to-device copies run (NVML):
    an idle link trains down within milliseconds, so it is read between queued copies."""
    import torch

    from doctor.seam.host import HostReadError
    from doctor.seam.nvml import query

    host = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
    for _ in range(4):
        dev.copy_(host, non_blocking=True)
    try:
        return {"gen": query("nvmlDeviceGetCurrPcieLinkGeneration", index),
                "width": query("nvmlDeviceGetCurrPcieLinkWidth", index)}
    except HostReadError:
        return {}
    finally:
        torch.cuda.synchronize(index)


def measure_device(index: int | None, budget_s: float) -> dict:
    """Every single-device kernel for GPU ``index`` (None: the CPU, for tests)."""
    import torch

    device = "cpu" if index is None else f"cuda:{index}"
    nbytes = CPU_BYTES if index is None else GPU_BYTES
    if index is not None:
        torch.cuda.set_device(index)  # events record on the current device's stream
    kw = {"budget_s": budget_s}
    out = {"device": device, "bytes": nbytes,
           "d2d": device_copy(device, nbytes, **kw),
           "h2d_pinned": host_copy(device, nbytes, True, True, **kw)}
    if index is not None:
        out["link_during_h2d"] = link_during_copy(index, nbytes)
    out["d2h_pinned"] = host_copy(device, nbytes, False, True, **kw)
    out["h2d_pageable"] = host_copy(device, nbytes, True, False, **kw)
    out["d2h_pageable"] = host_copy(device, nbytes, False, False, **kw)
    return out


def measure_peers(count: int, budget_s: float) -> dict:
    import torch

    pairs = []
    for a in range(count):
        for b in range(count):
            if a != b:
                can = torch.cuda.can_device_access_peer(a, b)
                result = peer_copy(f"cuda:{a}", f"cuda:{b}", GPU_BYTES, budget_s=budget_s)
                pairs.append({"a": a, "b": b, "peer_access": can, "gbps": result["gbps"]})
    return {"pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_bandwidth", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="0", help="GPU index, or 'cpu'")
    parser.add_argument("--peers", type=int, default=0, help="measure the P2P matrix of N GPUs")
    parser.add_argument("--cpus", default=None, help="CPU list to bind to first")
    parser.add_argument("--budget-s", type=float, default=3.0, help="per kernel, at most 30")
    args = parser.parse_args(argv)
    budget = min(max(args.budget_s, 0.1), 30.0)
    try:
        import torch

        bind_cpus(args.cpus)
        if args.peers:
            result = measure_peers(args.peers, min(budget, 1.0))  # n(n-1) pairs: keep each short
        else:
            index = None if args.device == "cpu" else int(args.device)
            if index is not None and not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device (a CPU build of torch, or no driver)")
            result = measure_device(index, budget)
    except (RuntimeError, ImportError, ValueError, OSError) as exc:
        print(f"gpu_bandwidth: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
