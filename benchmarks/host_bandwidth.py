"""Compare probes.kernels.stream with a C/OpenMP STREAM on this host (decimal GB/s).

Compiles benchmarks/stream.c with ``gcc -O3 -march=native -fopenmp`` in a temporary directory,
runs it with OMP_NUM_THREADS = the CPUs this process may use, then runs the probe with the same
thread count and array size on the torch and numpy backends, and prints copy and triad GB/s,
each backend's ratio to C, and the probe's own run time (duration_s; for C, the process's).

Default array size per array: max(4 x total L3, 256 MiB); the L3 total is the sum of
/sys/devices/system/cpu/cpu*/cache/index3/size over distinct shared_cpu_list (one per L3
instance). Three arrays are allocated per run. Takes up to about a minute.

Usage: python benchmarks/host_bandwidth.py [--array-mib N] [--threads T] [--repeats R]
                                           [--rounds K]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script from anywhere: the repository root must be importable for probes.
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from probes.kernels import stream  # noqa: E402

STREAM_C = REPO_ROOT / "benchmarks" / "stream.c"
MIN_ARRAY_BYTES = 256 * 2**20


def l3_total_bytes() -> int | None:
    """Sum of distinct L3 instances; None where sysfs shows no L3 (some VMs, ARM parts)."""
    sizes = {}
    for index_dir in glob.glob("/sys/devices/system/cpu/cpu*/cache/index3"):
        shared = Path(index_dir, "shared_cpu_list").read_text().strip()
        sizes[shared] = _parse_cache_size(Path(index_dir, "size").read_text().strip())
    return sum(sizes.values()) if sizes else None


def _parse_cache_size(text: str) -> int:
    """sysfs cache size: ``32768K`` (binary units) → bytes."""
    multipliers = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text[-1:].upper() in multipliers:
        return int(text[:-1]) * multipliers[text[-1:].upper()]
    return int(text)


def compile_stream(workdir: str) -> tuple[str | None, str]:
    """Build stream.c; return (binary path or None, why not)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "gcc not found: the C reference is skipped (apt-get install gcc)"
    binary = os.path.join(workdir, "stream")
    command = [gcc, "-O3", "-march=native", "-fopenmp", str(STREAM_C), "-o", binary, "-lm"]
    build = subprocess.run(command, capture_output=True, text=True)
    if build.returncode != 0:
        first_line = (build.stderr.strip().splitlines() or ["no output"])[0]
        return None, f"gcc failed, C reference skipped: {first_line}"
    return binary, ""


def run_c(binary: str, elements: int, threads: int, repeats: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    started = time.perf_counter()
    done = subprocess.run(
        [binary, str(elements), str(repeats)], env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    result["duration_s"] = time.perf_counter() - started
    return result


def best_of(runs: list[dict]) -> dict:
    """Best copy and triad over rounds (a VM's neighbours make single runs noisy)."""
    best = dict(runs[0])
    best["copy_gbps"] = max(run["copy_gbps"] for run in runs)
    best["triad_gbps"] = max(run["triad_gbps"] for run in runs)
    best["valid"] = all(run["valid"] for run in runs)
    best["duration_s"] = sum(run["duration_s"] for run in runs) / len(runs)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--array-mib", type=int, help="MiB per array (default: see above)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=10, help="timed passes per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per backend, interleaved")
    args = parser.parse_args()

    l3_bytes = l3_total_bytes()
    if args.array_mib:
        array_bytes = args.array_mib * 2**20
    else:
        array_bytes = max(4 * (l3_bytes or 0), MIN_ARRAY_BYTES)
    elements = array_bytes // stream.ELEMENT_BYTES
    l3_text = f"{l3_bytes / 2**20:.0f} MiB" if l3_bytes else "unknown"
    print(
        f"threads {args.threads}, array {array_bytes / 2**20:.0f} MiB x 3, L3 {l3_text}, "
        f"{args.repeats} timed passes, best of {args.rounds} rounds"
    )

    backends = ["torch", "numpy"]
    runs: dict[str, list[dict]] = {"C (gcc -O3 OpenMP)": []}
    runs.update({backend: [] for backend in backends})
    probe_runs: list[dict] = []
    notes = []
    with tempfile.TemporaryDirectory() as workdir:
        binary, why_not = compile_stream(workdir)
        if binary is None:
            notes.append(why_not)
        # Interleaved rounds, so that a noisy moment on the host hits every backend alike.
        for _ in range(args.rounds):
            if binary is not None:
                runs["C (gcc -O3 OpenMP)"].append(
                    run_c(binary, elements, args.threads, args.repeats)
                )
            probe_runs.append(run_probe())
            for backend in list(backends):
                try:
                    result = stream.measure(
                        array_bytes=array_bytes,
                        threads=args.threads,
                        repeats=args.repeats,
                        backend=backend,
                    )
                except stream.BackendUnavailableError as error:
                    notes.append(f"{backend}: {error}")
                    backends.remove(backend)
                    continue
                runs[backend].append(result)
    runs["probe host.memory_bandwidth"] = probe_runs
    print_table({name: best_of(found) for name, found in runs.items() if found})
    print("probe host.memory_bandwidth wall time (child process, torch import, allocation, "
          f"warm-up, 5 passes, dmidecode): {min(r['duration_s'] for r in probe_runs):.2f} s best, "
          f"{max(r['duration_s'] for r in probe_runs):.2f} s worst")
    for note in notes:
        print(note)
    return 0


def run_probe() -> dict:
    """The real probe, as a scan runs it (its own array size and 5 passes), timed whole."""
    from doctor.host import LiveHost
    from doctor.model import ScanOptions
    from probes import host_memory_bandwidth

    t0 = time.perf_counter()
    record = host_memory_bandwidth.probe(LiveHost(), ScanOptions())
    return {"copy_gbps": record.copy_gbps, "triad_gbps": record.triad_gbps, "valid": True,
            "duration_s": time.perf_counter() - t0, "triad_passes": 3 if record.backend == "torch" else 5}


def print_table(results: dict[str, dict]) -> None:
    reference = results.get("C (gcc -O3 OpenMP)")
    header = f"{'backend':<28} {'copy GB/s':>10} {'triad GB/s':>11} {'copy/C':>7} {'triad/C':>8}"
    print(header + f" {'duration s':>11} {'valid':>6}  note")
    for name, result in results.items():
        ratios = ["-", "-"]
        if reference is not None:
            ratios = [
                f"{result[key] / reference[key]:.2f}" for key in ("copy_gbps", "triad_gbps")
            ]
        note = ""
        if result.get("triad_passes", 3) != 3:
            note = f"triad makes {result['triad_passes']} passes, counted as 3: understates"
        print(
            f"{name:<28} {result['copy_gbps']:>10.1f} {result['triad_gbps']:>11.1f} "
            f"{ratios[0]:>7} {ratios[1]:>8} {result['duration_s']:>11.2f} "
            f"{str(result['valid']):>6}  {note}"
        )


if __name__ == "__main__":
    sys.exit(main())
