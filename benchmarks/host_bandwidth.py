"""Compare the host.memory_bandwidth probe with a C/OpenMP STREAM on this host (decimal GB/s).

Compiles benchmarks/stream.c twice in a temporary directory, ``gcc -O3 -fopenmp`` (STREAM's
usual build: 16-byte SSE2 on x86-64) and the same with ``-march=native`` (the widest vectors
here), and, in interleaved rounds (a noisy neighbour then hits all alike), runs at the same
array size and thread count:

- each C STREAM build, OMP_NUM_THREADS = threads, ``--repeats`` timed passes (STREAM's
  default 10, as many as the probe's most); the probe is compared with the build whose triad
  is the faster here (on an AMD EPYC VM, the plain one: AVX-512 measured 0.82-0.87 of it);
- the probe's kernel exactly as a scan starts it (``host_memory_bandwidth._run_kernel``: a
  child process, its backend, huge pages, passes bounded by its time budget), timed whole
  from spawn to exit: that is the probe's cost;
- with ``--backends``, the kernel with each backend (torch, numpy, and numpy with the widest
  loops it dispatches here: ``--numpy-simd widest``) forced, in a child process like the
  probe's (in this process, torch's idle OpenMP threads would spin on the cores the numpy
  threads need), with the probe's passes and budget.

It prints copy and triad GB/s (best of the rounds), each one's ratio to that C, the
per-round triad ratio to it (a fair pairing when the host's load changes between rounds),
the wall time of each run (C's includes its own first touch), each run's peak resident
memory (the probe's kernel: its VmHWM; C: wait4's ru_maxrss), each C build's add (``c = a +
b``, which is the numpy backend's triad: numpy has no fused multiply-add) beside its triad,
the cores other work kept busy during the probe's passes and during each C run, and the
load average before and after: on a shared machine a figure is only worth its neighbours'
quiet. Arrays are sized as the probe sizes them (probes/helpers/stream_sizing.py: 4x the cache
the threads reach, within the memory budget), and the cache tree and the sizing are
printed; ``--llc-mib 480`` sizes them as the probe would for threads that reach a 480 MiB
L3 (the budget still applies); ``--array-mib`` sets them directly. Three arrays are
allocated per run. Each round runs the probe first, then C at the size the probe's passes
used: where the probe's first touch was cut short (a busy host) that is under the planned
size, and the cost line says so (``--c-at-planned-size``: C at the planned size).

Usage: python benchmarks/host_bandwidth.py [--llc-mib M | --array-mib N] [--threads T]
                                           [--repeats R] [--rounds K] [--backends]
                                           [--c-binary PATH] [--c-at-planned-size]
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

from doctor.seam.host import MeasurementError  # noqa: E402
from probes.host import memory_bandwidth as host_memory_bandwidth  # noqa: E402
from doctor.seam.live import LiveHost  # noqa: E402
from probes.helpers import stream_sizing  # noqa: E402
from probes.host.memory import parse_meminfo  # noqa: E402
from probes.kernels import stream  # noqa: E402

STREAM_C = REPO_ROOT / "benchmarks" / "stream.c"


def cache_lines() -> list[str]:
    """This host's cache tree as sysfs gives it: one line per distinct level-size-CPUs."""
    seen = {}
    for index_dir in sorted(glob.glob("/sys/devices/system/cpu/cpu*/cache/index*")):
        try:
            fields = [Path(index_dir, name).read_text().strip()
                      for name in ("level", "type", "size", "shared_cpu_list")]
        except OSError:
            continue
        seen[tuple(fields)] = None
    return [f"L{level} {kind} {size} shared by CPUs {cpus}" for level, kind, size, cpus in seen]


def sizing(llc_mib: int | None, threads: int) -> tuple[stream_sizing.Sizing, str, int]:
    """The arrays' size as the probe chooses it here, or for a reached cache of ``llc_mib``,
    and the cache reached (bytes, 0 where unknown)."""
    _, reach, planned = host_memory_bandwidth.plan(LiveHost())
    cache = reach.cache_bytes or 0
    text = (f"cache the threads reach {_mib(reach.cache_bytes)} MiB (advertised "
            f"{_mib(reach.advertised_bytes)} MiB{', a VM: bounded' if reach.vm_bounded else ''})")
    if llc_mib is not None:
        available = parse_meminfo(Path("/proc/meminfo").read_text()).get("MemAvailable")
        planned = stream_sizing.size_arrays(llc_mib * 2**20, available and available * 1024,
                                            threads)
        text = f"sized for a reached cache of {llc_mib} MiB (--llc-mib); this host's: " + text
        cache = llc_mib * 2**20
    return planned, text, cache


def _mib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 2**20:.0f}"


C_BUILDS = {"C gcc -O3": [], "C gcc -O3 -march=native": ["-march=native"]}


def compile_stream(workdir: str, flags: list[str]) -> tuple[str | None, str]:
    """Build stream.c with -O3 -fopenmp and ``flags``; return (binary path or None, why not)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "gcc not found: the C reference is skipped (apt-get install gcc)"
    binary = os.path.join(workdir, "stream" + "".join(flags))
    command = [gcc, "-O3", *flags, "-fopenmp", str(STREAM_C), "-o", binary, "-lm"]
    build = subprocess.run(command, capture_output=True, text=True)
    if build.returncode != 0:
        first_line = (build.stderr.strip().splitlines() or ["no output"])[0]
        return None, f"gcc {' '.join(flags)} failed, that C build is skipped: {first_line}"
    return binary, ""


def run_c(binary: str, elements: int, threads: int, repeats: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    busy_before = _busy_cpu_s()
    started = time.perf_counter()
    proc = subprocess.Popen([binary, str(elements), str(repeats)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited {proc.returncode}: {err.strip()[-300:]}")
    result = json.loads(out)
    result["duration_s"] = time.perf_counter() - started
    # ru_maxrss of this child alone (its peak, or this script's where that is higher)
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024
    # As the probe's kernel reads it: all CPUs' busy time less the C run's own, in cores.
    other_s = (_busy_cpu_s() - busy_before) - (usage.ru_utime + usage.ru_stime)
    result["other_busy_cores"] = round(max(other_s, 0.0) / result["duration_s"], 2)
    return result


def _busy_cpu_s() -> float:
    """Busy CPU seconds of all CPUs (/proc/stat: all but idle and iowait, steal included)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


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
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--array-mib", type=int, help="MiB per array (default: see above)")
    size.add_argument("--llc-mib", type=int, help="size the arrays for this much L3, in MiB")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=host_memory_bandwidth.MAX_REPEATS,
                        help="C's timed passes per run (default: the probe's most)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, interleaved")
    parser.add_argument("--backends", action="store_true",
                        help="also run the kernel with torch, numpy and numpy's widest loops")
    parser.add_argument("--c-binary", help="a prebuilt stream.c binary, where there is no gcc")
    parser.add_argument("--c-at-planned-size", dest="c_at_probes_size", action="store_false",
                        help="run C at the planned size even where the probe's first touch "
                             "was cut short (default: at the size the probe's passes used)")
    args = parser.parse_args()

    planned, cache_text, cache = sizing(args.llc_mib, args.threads)
    array_bytes = args.array_mib * 2**20 if args.array_mib else planned.array_bytes
    # as the probe asks: a first touch cut short still fills 2x the cache
    floor = host_memory_bandwidth.cut_floor(cache, array_bytes)
    elements = array_bytes // stream.ELEMENT_BYTES
    print(f"threads {args.threads}, array {array_bytes / 2**20:.0f} MiB x 3, C {args.repeats} "
          f"timed passes, {args.rounds} interleaved rounds")
    print(f"sizing: {cache_text}; rule of thumb {_mib(planned.rule_array_bytes)} MiB an array, "
          f"memory budget {_mib(planned.budget_bytes)} MiB for 3 ({planned.budget_basis})"
          f"{', arrays under the rule' if planned.under_rule else ''}")
    for line in cache_lines():
        print(f"  {line}")
    load_before = os.getloadavg()

    probe_name = "probe host.memory_bandwidth"
    backends = ["torch", "numpy", NUMPY_WIDEST] if args.backends else []
    notes = []
    with tempfile.TemporaryDirectory() as workdir:
        binaries = {"C (prebuilt)": args.c_binary} if args.c_binary else {}
        for name, flags in ({} if args.c_binary else C_BUILDS).items():
            binary, why_not = compile_stream(workdir, flags)
            if binary is None:
                notes.append(why_not)
            else:
                binaries[name] = binary
        runs: dict[str, list[dict]] = {name: [] for name in [*binaries, probe_name, *backends]}
        for _ in range(args.rounds):
            probe = run_probe_kernel(array_bytes, args.threads, floor=floor)
            runs[probe_name].append(probe)
            # C at the size the probe's passes used: its first touch may have been cut short
            used = probe["elements"] if args.c_at_probes_size else elements
            for name, binary in binaries.items():
                runs[name].append(run_c(binary, used, args.threads, args.repeats))
            for backend in list(backends):
                try:
                    runs[backend].append(run_probe_kernel(array_bytes, args.threads, backend,
                                                          floor))
                except MeasurementError as error:
                    notes.append(f"{backend}: {error}")
                    backends.remove(backend)
    results = {name: best_of(found) for name, found in runs.items() if found}
    reference = max(binaries, key=lambda name: results[name]["triad_gbps"], default=None)
    print_table(results, reference)
    print_probe_cost(runs[probe_name], runs[reference] if reference else [])
    for name in binaries:
        print_c_runs(name, runs[name])
    print("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}, after: {:.2f} {:.2f} {:.2f}"
          .format(*load_before, *os.getloadavg()))
    for note in notes:
        print(note)
    return 0


NUMPY_WIDEST = "numpy, widest loops"


def run_probe_kernel(array_bytes: int, threads: int, backend: str | None = None,
                     floor: int = 0) -> dict:
    """The probe's kernel as a scan runs it (child process, its backend and budget), timed whole."""
    started = time.perf_counter()
    if backend == NUMPY_WIDEST:
        result = run_widest_numpy(array_bytes, threads, floor)
    else:
        result = host_memory_bandwidth._run_kernel(array_bytes, threads, backend, floor)
    result["kernel_s"] = result["duration_s"]  # allocation, first touch, passes, check
    result["duration_s"] = time.perf_counter() - started  # spawn, import, touch, passes, exit
    return result


def run_widest_numpy(array_bytes: int, threads: int, floor: int) -> dict:
    """The probe's numpy kernel with the widest loops numpy dispatches here, not its baseline."""
    argv = [sys.executable, "-m", "probes.kernels.stream", "--array-bytes", str(array_bytes),
            "--threads", str(threads), "--repeats", str(host_memory_bandwidth.MAX_REPEATS),
            "--budget-s", str(host_memory_bandwidth.BUDGET_S),
            "--deadline-at", repr(time.time() + host_memory_bandwidth.TIME_BUDGET_S
                                  - host_memory_bandwidth.EXIT_S),
            "--min-array-bytes", str(floor), "--backend", "numpy",
            "--numpy-simd", "widest"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=host_memory_bandwidth.KERNEL_TIMEOUT_S)
    if done.returncode != 0:
        raise MeasurementError(f"the STREAM kernel failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def print_probe_cost(probe_runs: list[dict], c_runs: list[dict]) -> None:
    walls = [r["duration_s"] for r in probe_runs]
    peaks = [r.get("peak_rss_bytes") or 0 for r in probe_runs]
    print(f"probe time (child process spawn to exit, as a scan pays it): best {min(walls):.2f} s,"
          f" worst {max(walls):.2f} s; peak memory (VmHWM) {max(peaks) / 2**20:.0f} MiB; "
          f"arrays {[round(r['array_bytes'] / 2**20) for r in probe_runs]} MiB"
          f"{' (first touch cut short)' if any(r.get('touch_cut') for r in probe_runs) else ''}; "
          f"backend {probe_runs[0]['backend']}, "
          f"passes {[r['repeats'] for r in probe_runs]}, "
          f"huge pages {probe_runs[0].get('huge_pages')}, loops {probe_runs[0].get('simd')}")
    print("where it went, per run: start (spawn, imports) / first touch / timed passes, s: "
          + ", ".join(f"{r['duration_s'] - r['kernel_s']:.2f}/{r['kernel_s'] - r['timed_s']:.2f}/"
                      f"{r['timed_s']:.2f}" for r in probe_runs))
    print("other work during the probe's passes (cores): "
          + ", ".join(f"{r.get('other_busy_cores')}" for r in probe_runs))
    if c_runs:
        pairs = [f"{p['triad_gbps'] / c['triad_gbps']:.2f}" for p, c in zip(probe_runs, c_runs)]
        print(f"triad probe/C per round: {', '.join(pairs)}")


def print_c_runs(name: str, c_runs: list[dict]) -> None:
    line = f"{name}: other work during each run (cores) " + ", ".join(
        f"{r['other_busy_cores']}" for r in c_runs)
    line += f"; peak memory {max(r['peak_rss_bytes'] for r in c_runs) / 2**20:.0f} MiB"
    adds = [r["add_gbps"] for r in c_runs if "add_gbps" in r]
    if adds:  # a --c-binary built from an older stream.c has no add
        triad = max(r["triad_gbps"] for r in c_runs)
        line += (f"; add (c = a + b, the numpy backend's triad) best {max(adds):.1f} GB/s, "
                 f"add/triad {max(adds) / triad:.2f}")
    print(line)


def print_table(results: dict[str, dict], reference_name: str | None) -> None:
    reference = results[reference_name] if reference_name else None
    header = f"{'backend':<28} {'copy GB/s':>10} {'triad GB/s':>11} {'copy/C':>7} {'triad/C':>8}"
    print(header + f" {'duration s':>11} {'valid':>6}  note")
    for name, result in results.items():
        ratios = ["-", "-"]
        if reference is not None:
            ratios = [
                f"{result[key] / reference[key]:.2f}" for key in ("copy_gbps", "triad_gbps")
            ]
        note = "the reference: the faster C triad here" if name == reference_name else ""
        if result.get("triad_passes", 3) != 3:
            note = f"triad makes {result['triad_passes']} passes, counted as 3: understates"
        print(
            f"{name:<28} {result['copy_gbps']:>10.1f} {result['triad_gbps']:>11.1f} "
            f"{ratios[0]:>7} {ratios[1]:>8} {result['duration_s']:>11.2f} "
            f"{str(result['valid']):>6}  {note}"
        )


if __name__ == "__main__":
    sys.exit(main())
