"""Hold a GPU's PCIe link busy with host-to-device copies and read its generation and width
meanwhile (NVML), so that a link that trains down at idle is judged as it runs.

Runs as a child of the scan: ``python -m probes.kernels.gpu_link_load --device 0
--seconds 1``; prints one JSON object: ``gen_max_seen``, ``width_min_seen``, ``samples``,
``copy_gbps`` (pinned host-to-device, decimal GB/s, a by-product, not the bandwidth probe).
Needs torch with CUDA and the NVIDIA driver; exits 1 with one line otherwise. Bounded by
``--seconds`` (at most 10) and 64 MiB of pinned memory.
"""

from __future__ import annotations

import json
import sys
import time

from probes.helpers.kernel_cli import OneLineParser

BUFFER_BYTES = 64 << 20


def measure(device: int, seconds: float) -> dict:
    import torch

    from doctor.seam.host import HostReadError
    from doctor.seam.nvml import query

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device (a CPU build of torch, or no driver)")
    src = torch.empty(BUFFER_BYTES, dtype=torch.uint8).pin_memory()
    dst = torch.empty(BUFFER_BYTES, dtype=torch.uint8, device=f"cuda:{device}")
    gens, widths, copied = [], [], 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(8):  # queue copies, then read the link while they run
            dst.copy_(src, non_blocking=True)
        copied += 8 * BUFFER_BYTES
        try:
            gens.append(query("nvmlDeviceGetCurrPcieLinkGeneration", device))
            widths.append(query("nvmlDeviceGetCurrPcieLinkWidth", device))
        except HostReadError as exc:
            raise RuntimeError(str(exc)) from None
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    return {"gen_max_seen": max(gens), "width_min_seen": min(widths), "samples": len(gens),
            "copy_gbps": round(copied / elapsed / 1e9, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_link_load", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:
        result = measure(args.device, min(max(args.seconds, 0.1), 10.0))
    except (RuntimeError, ImportError) as exc:
        print(f"gpu_link_load: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
