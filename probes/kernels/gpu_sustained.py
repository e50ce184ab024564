"""Level full: a sustained matrix-multiply load on every GPU, sampling clocks, temperature,
power and clock-event reasons meanwhile (throttling that only shows under load).

``python -m probes.kernels.gpu_sustained --gpus 8 --seconds 30`` runs bf16 GEMMs (8192^2 on
a GPU, as gpu-burn does; 256^2 fp32 with ``--device cpu`` for tests) back to back on each
device for ``--seconds`` (at most 120), reading NVML every 0.5 s, and prints one JSON object:
per GPU the worst moment (``temp_c_max``, ``sm_clock_mhz_min``, ``power_w_max``), the OR of
every reason mask seen without the idle bit (``reasons_mask_any``), the sample count and the TFLOP/s achieved.
"""

from __future__ import annotations

import json
import sys
import time

from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.kernel_child import run_kernel

SAMPLE_EVERY_S = 0.5
DEFAULT_SECONDS = 30.0


def _sample(index: int) -> dict:
    from doctor.seam.host import HostReadError
    from doctor.seam.nvml import query

    out = {}
    for key, call, args in (("temp_c", "nvmlDeviceGetTemperature", (0,)),
                            ("sm_clock_mhz", "nvmlDeviceGetClockInfo", (1,)),
                            ("power_mw", "nvmlDeviceGetPowerUsage", ()),
                            ("reasons", "nvmlDeviceGetCurrentClocksEventReasons", ())):
        try:
            out[key] = query(call, index, *args)
        except HostReadError:
            out[key] = None
    return out


def _fold(samples: list[dict]) -> dict:
    def values(key):
        return [s[key] for s in samples if isinstance(s.get(key), int)]
    temps, clocks, power, reasons = (values(k) for k in ("temp_c", "sm_clock_mhz", "power_mw", "reasons"))
    mask = 0
    for r in reasons:
        mask |= r & ~0x1  # GpuIdle: set in samples before the load ramps; not true of the load
    return {"samples": len(samples), "temp_c_max": max(temps, default=None),
            "sm_clock_mhz_min": min(clocks, default=None),
            "power_w_max": round(max(power) / 1000, 1) if power else None,
            "reasons_mask_any": mask if reasons else None}


def run_load(devices: list[str], seconds: float, size: int) -> dict:
    import torch

    dtype = torch.bfloat16 if devices[0].startswith("cuda") else torch.float32
    mats = [(torch.randn(size, size, device=d, dtype=dtype),
             torch.randn(size, size, device=d, dtype=dtype)) for d in devices]
    samples: list[list[dict]] = [[] for _ in devices]
    flops = [0.0 for _ in devices]
    start = next_sample = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i, (a, b) in enumerate(mats):
            for _ in range(4):
                torch.mm(a, b)
            flops[i] += 4 * 2 * size ** 3
        now = time.perf_counter()
        if now >= next_sample and devices[0].startswith("cuda"):
            for i in range(len(devices)):
                samples[i].append(_sample(i))
            next_sample = now + SAMPLE_EVERY_S
        if devices[0].startswith("cuda"):
            for d in devices:  # every device: an unsynchronised one would queue unbounded work
                torch.cuda.synchronize(d)
    elapsed = time.perf_counter() - start
    return {"seconds": round(elapsed, 2), "size": size,
            "gpus": [{**_fold(s), "tflops": round(f / elapsed / 1e12, 1)}
                     for s, f in zip(samples, flops)]}


def run_child(count: int, seconds: float = DEFAULT_SECONDS) -> dict:
    """Run the load in a child process (the scan's own process stays CUDA-free)."""
    return run_kernel("gpu_sustained", "--gpus", str(count), "--seconds", str(seconds),
                      timeout_s=seconds + 60)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="gpu_sustained", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (tests)")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    args = parser.parse_args(argv)
    seconds = min(max(args.seconds, 0.1), 120.0)
    try:
        import torch

        if args.device == "cpu":
            result = run_load(["cpu"], seconds, 256)
        else:
            if not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device (a CPU build of torch, or no driver)")
            result = run_load([f"cuda:{i}" for i in range(args.gpus)], seconds, 8192)
    except (RuntimeError, ImportError) as exc:
        print(f"gpu_sustained: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
