"""The noise floors of the bandwidth figures on this machine: each figure measured ten times
side by side, its spread over the runs beside the per-run spread its kernel reports.

A diff of two scans (``llm-doctor diff``) calls a figure SAME when its change lies inside the
figure's noise floor, the ``<figure>_spread`` the kernel reported (the range of its timed
repeats over their median). This prints, for every figure that runs here, the median, min
and max over ``--runs`` runs, their spread ((max - min) / median), and the kernel's own
per-run spread (median and max over the runs): where the run-to-run spread stays inside the
per-run one, the per-run spread is a fair floor. The runs are interleaved (one of each
figure per round), so a neighbour's load falls on all figures alike:

- host memory bandwidth: ``host.memory_bandwidth`` exactly as a scan runs it (a child STREAM
  kernel, its sizing, backend and time budget), copy and triad;
- the GPU copy kernels (``probes/kernels/gpu_bandwidth.py``) on ``--gpu-device``: a GPU index
  where torch sees CUDA, else ``cpu``, where the same code copies 32 MiB buffers in host
  memory (the kernels' timing and arithmetic, not a GPU's bandwidth: the table says so);
- the all-reduce (``probes/kernels/allreduce.py``): NCCL over every GPU where there are two
  or more, else gloo over 2 CPU ranks on loopback (16 MiB).

It also prints which machine: hostname, CPU model, logical CPUs, torch, the load average
before and after. Usage: python benchmarks/noise_floors.py [--runs N] [--skip host,gpu,
collective]. A benchmark that prints figures, not a test; about 10 s a round on 2 vCPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(  # the kernels' child processes import probes
    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)

from doctor.model import Level, ScanOptions  # noqa: E402
from doctor.seam.host import MeasurementError  # noqa: E402
from doctor.seam.live import LiveHost  # noqa: E402
from probes.gpu import collective  # noqa: E402
from probes.helpers.kernel_child import run_kernel  # noqa: E402
from probes.host import memory_bandwidth  # noqa: E402
from probes.helpers.spread import read_spread, spread  # noqa: E402

COPIES = ("d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")
PARTS = ("host", "gpu", "collective")

Sample = tuple[float, float | None]  # (the figure, the spread its kernel reported)


def _host(figures: dict[str, list[Sample]], busy: list[float]) -> None:
    record = memory_bandwidth.probe(LiveHost(), ScanOptions(level=Level.STANDARD))
    if record.other_busy_cores is not None:
        busy.append(record.other_busy_cores)
    label = f"host.memory_bandwidth ({record.backend}, {record.threads} threads)"
    figures.setdefault(f"{label} copy_gbps", []).append((record.copy_gbps,
                                                         record.copy_gbps_spread))
    figures.setdefault(f"{label} triad_gbps", []).append((record.triad_gbps,
                                                          record.triad_gbps_spread))


def _gpu(figures: dict[str, list[Sample]], device: str) -> None:
    data = run_kernel("gpu_bandwidth", "--device", device, timeout_s=120.0)
    where = "the CPU device: host-memory copies" if device == "cpu" else f"GPU {device}"
    for copy in COPIES:
        part = data.get(copy) or {}
        figures.setdefault(f"gpu.bandwidth {copy}_gbps ({where})", []).append(
            (float(part["gbps"]), read_spread(part.get("spread"))))


def _collective(figures: dict[str, list[Sample]], gpus: int) -> None:
    host = LiveHost()
    if gpus >= 2:
        data = collective.measure(host, "noise", collective.kernel_args(tuple(range(gpus))),
                                  collective.LIMIT_S)
        group = collective.group_record(tuple(range(gpus)), data,
                                        collective.PathCeiling(None, None, "", None), {})
        label = f"gpu.collective busbw_gbps (NCCL, {gpus} GPUs)"
    else:
        group = collective.on_cpu(host, ranks=2, limit_s=60)
        label = "gpu.collective busbw_gbps (gloo, 2 CPU ranks, 16 MiB)"
    if group.busbw_gbps is None:
        raise MeasurementError(f"all-reduce {group.outcome}: {group.failure}")
    figures.setdefault(label, []).append((group.busbw_gbps, group.busbw_gbps_spread))


def _torch() -> tuple[str, int]:
    try:
        import torch
    except ImportError:
        return "not installed", 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return torch.__version__, count


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def table(figures: dict[str, list[Sample]]) -> list[str]:
    rows = [f"{'figure':<70} {'n':>2} {'median':>9} {'min':>9} {'max':>9} {'spread':>7}  "
            f"{'per-run spread (median, max)':>28}"]
    for name, samples in figures.items():
        values = [v for v, _ in samples]
        own = [s for _, s in samples if s is not None]
        per_run = (f"{_fmt(statistics.median(own), '.3f')}, {_fmt(max(own), '.3f')}"
                   if own else "none reported")
        rows.append(f"{name:<70} {len(values):>2} {statistics.median(values):>9.2f} "
                    f"{min(values):>9.2f} {max(values):>9.2f} {_fmt(spread(values), '.3f'):>7}  "
                    f"{per_run:>28}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each figure (2-50)")
    parser.add_argument("--skip", default="", help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--gpu-device", default=None, help="GPU index or cpu (default: 0 "
                        "where torch sees CUDA, else cpu)")
    args = parser.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if not 2 <= args.runs <= 50 or skip - set(PARTS):
        parser.error(f"--runs must be 2-50 and --skip among {', '.join(PARTS)}")
    torch_version, gpus = _torch()
    device = args.gpu_device or ("0" if gpus else "cpu")
    print(f"machine: {platform.node()}, {_cpu_model()}, {os.cpu_count()} logical CPUs, "
          f"Python {platform.python_version()}, torch {torch_version}, {gpus} CUDA GPU(s)")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures: dict[str, list[Sample]] = {}
    busy: list[float] = []  # cores other work kept busy during each STREAM run's passes
    failures: list[str] = []
    started = time.perf_counter()
    for _ in range(args.runs):
        for part, run in (("host", lambda: _host(figures, busy)), ("gpu", lambda: _gpu(figures, device)),
                          ("collective", lambda: _collective(figures, gpus))):
            if part in skip:
                continue
            try:
                run()
            except (MeasurementError, KeyError, TypeError, ValueError) as exc:
                failures.append(f"{part}: {exc}")
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.runs} rounds in {time.perf_counter() - started:.0f} s")
    print("\n".join(table(figures)))
    if busy:
        print(f"other work during the STREAM passes: median {statistics.median(busy):.2f} cores, "
              f"max {max(busy):.2f} (/proc/stat, the kernel's other_busy_cores)")
    for failure in failures:
        print(f"failed: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
