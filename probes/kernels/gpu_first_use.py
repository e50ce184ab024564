"""First-use cost: the first CUDA operation in a fresh process against the same one warm.

Run as a fresh child (``python -m probes.kernels.gpu_first_use --device 0``): times, with
``time.perf_counter``, importing torch, the first allocate-and-add on the device (CUDA
context creation, module loading; seconds without persistence mode), then the median of
five more of the same operation (microseconds). Prints one JSON object. ``--device cpu`` runs
the same steps on the CPU (for tests; no context to create there).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from probes.helpers.kernel_cli import OneLineParser


def measure(device: str) -> dict:
    t0 = time.perf_counter()
    import torch

    imported = time.perf_counter()

    def op() -> None:
        x = torch.ones(1024, device=device)
        (x + 1).sum().item()  # .item() waits for the device

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device (a CPU build of torch, or no driver)")
    t1 = time.perf_counter()
    op()
    first = time.perf_counter() - t1
    warm = []
    for _ in range(5):
        t = time.perf_counter()
        op()
        warm.append(time.perf_counter() - t)
    warm_s = statistics.median(warm)
    return {"device": device, "import_s": round(imported - t0, 4), "first_s": round(first, 6),
            "warm_s": round(warm_s, 6), "ratio": round(first / warm_s, 1) if warm_s else None}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_first_use", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="0", help="GPU index, or 'cpu'")
    args = parser.parse_args(argv)
    device = "cpu" if args.device == "cpu" else f"cuda:{int(args.device)}"
    try:
        result = measure(device)
    except (RuntimeError, ImportError) as exc:
        print(f"gpu_first_use: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
