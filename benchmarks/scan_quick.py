"""`llm-doctor scan --level quick`: wall time and peak memory on this host.

Runs the installed CLI as a user would (a new process each time, imports included) N
times and prints the median and worst wall time and the peak resident memory of the
process (ru_maxrss from wait4). Aims, on a 2-core machine: under 1.5 s and under 80 MB.
Also checks that the quick level imports neither torch nor numpy.

Usage: python benchmarks/scan_quick.py [--runs N]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def one_run() -> tuple[float, float]:
    argv = [sys.executable, "-m", "doctor.commands.cli", "scan", "--level", "quick", "--format", "json",
            "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1, 2):
        sys.exit(f"scan failed (exit {proc.returncode}): {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    one_run()  # warm the page cache for the interpreter and packages
    walls, peaks = zip(*(one_run() for _ in range(args.runs)))
    print(f"scan --level quick, {args.runs} runs on {os.cpu_count()} CPUs")
    print(f"  wall time   median {statistics.median(walls):.2f} s, worst {max(walls):.2f} s  (aim < 1.5 s)")
    print(f"  peak memory median {statistics.median(peaks):.1f} MiB, worst {max(peaks):.1f} MiB  (aim < 80 MB)")
    code = ("import sys\nfrom probes.registry import PROBES\nfrom doctor.seam.live import LiveHost\n"
            "from doctor.model import ScanOptions, Level\nfrom doctor.runner import run_probes\n"
            "run_probes(PROBES, LiveHost(), ScanOptions(level=Level.QUICK))\n"
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    print(f"  heavy modules imported at level quick: {imported.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
