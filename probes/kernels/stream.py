"""STREAM-style memory bandwidth: best-of-N copy and triad rates in decimal GB/s (1e9 bytes/s).

Kernels, on float64 arrays of ``array_bytes`` bytes each (the caller sizes them well over the
last-level cache, or the figure is cache bandwidth, not DRAM):

- copy  ``c = a``          counted as 16 bytes per element (read a, write c)
- triad ``a = b + q * c``  counted as 24 bytes per element (read b and c, write a); q is
  STREAM's 3 on torch and 1 on numpy (STREAM's add ``a = b + c``, see below)

Bytes are counted as McCalpin's STREAM counts them: the extra read of a write-allocate is not
counted, so, like STREAM, this is the bandwidth a program sees, not the bus traffic.

Cost is bounded, since a VM may report its host's whole L3 (480 MiB: arrays of 1.9 GiB):

- On the CPU the arrays are anonymous private mappings aligned to 2 MiB and advised
  ``MADV_HUGEPAGE``, so the first touch (a parallel fill, by the thread that later uses each
  chunk, as STREAM does) faults in 2 MiB pages rather than 4 KiB ones where the kernel's
  transparent huge pages allow it (``/sys/kernel/mm/transparent_hugepage/enabled``), except
  in a VM whose balloon reports free pages to the hypervisor, where huge pages come in slower
  (see _map_arrays).
- With ``deadline_s`` (everything from allocation to the check within it), numpy's fill
  goes in TOUCH_STEPS steps, each thread a slice of its own chunk per step, and stops after
  the step that ends past TOUCH_SHARE of it, once ``min_array_bytes`` of each array is filled
  (the caller's floor, under which the passes would read cache): the passes then use each
  chunk's filled start,
  and ``array_bytes`` in the result is that, under ``planned_array_bytes`` (a busy host's
  page faults took 38 s for 3 x 1.9 GiB). Pages never touched are never faulted in: they
  cost no memory. torch's fill is one step, never cut (see _run_torch).
- That fill is the warm-up; then timed (copy, triad) passes run until ``repeats`` are done,
  ``budget_s`` has passed, or the next pass would end past ``deadline_s``, whichever comes
  first, but at least ``MIN_REPEATS``; the best
  (fastest) pass of each kernel is reported, as STREAM does, with the spread of all the
  passes' rates ((max - min) / median): the figure's run-to-run noise floor.

A sample of the results is checked against the same recurrence replayed on scalars (STREAM's
``checkSTREAMresults``). While the timed passes run, the CPU time that other processes (and
the hypervisor's steal) took is read from ``/proc/stat``, less this process's own
(``getrusage``): ``other_busy_cores``. Memory bandwidth is shared, so a figure taken while
other work kept the CPUs busy reads low and says so.

Backends: ``torch`` (fused single-pass ATen ops, multi-threaded; also runs on ``cuda``) and
``numpy`` (no torch import, which costs ~1.4 s of CPU, more than the measurement: the arrays
are split into ``threads`` contiguous chunks run in Python threads, one ufunc call per chunk
and pass, since numpy's elementwise loops release the GIL). numpy has no fused multiply-add,
so its triad is ``np.add(b, c, out=a)``: q = 1, one pass that reads b and c and writes a, the
bytes the triad moves. Its former two-call form (``q * c`` into a cache-sized block of ``a``,
then ``+ b`` onto it while in cache) moved the same bytes from memory, but measured 0.67-0.78
of C STREAM's triad (gcc -O3 -march=native) on a 2-vCPU AMD EPYC VM, at every block size from
64 KiB to 8 MiB, where the one pass measures 0.96-1.15 of it (benchmarks/host_bandwidth.py):
each of its passes streams fewer arrays at once (2, then 1, for the one pass's 3), and each
block costs two calls per thread. On an Intel VM it had measured 0.95-1.00.

The CLI runs numpy's loops at numpy's build baseline (16-byte SSE on x86-64), as wide as C
STREAM's usual build (``gcc -O3`` with no ``-march``), not the widest numpy dispatches
(``--numpy-simd widest``): on the EPYC VM numpy's 64-byte AVX-512 triad measured 0.86-0.90 of
its 16-byte one, and gcc's ``-march=native`` triad 0.82-0.87 of its plain ``-O3`` one. numpy
picks its loops at import, so the CLI runs itself again (exec, same pid) with
``NPY_DISABLE_CPU_FEATURES`` naming the targets that numpy build dispatches (see
_numpy_at_baseline); ``simd`` in the result says which loops ran.

No root needed. Manual equivalent: ``gcc -O3 -fopenmp stream.c && OMP_NUM_THREADS=<cores>
./a.out`` (McCalpin's STREAM), or ``benchmarks/stream.c`` in this repository.
CLI: ``python -m probes.kernels.stream --array-bytes N --threads T`` prints one JSON object.
"""

from __future__ import annotations

import importlib
import json
import mmap
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.stream_passes import (Passes, Run, first_touch, passes_for, peak_rss_bytes,
                                     timed_passes)

BACKENDS = ("auto", "torch", "numpy")
SCALAR = 3.0  # STREAM's scalar: torch's triad
NUMPY_SCALAR = 1.0  # numpy's triad is one np.add (module docstring)
NUMPY_SIMD = ("baseline", "widest")  # the CLI's choice of numpy's loops (module docstring)
ELEMENT_BYTES = 8  # float64
COPY_BYTES_PER_ELEMENT = 2 * ELEMENT_BYTES
TRIAD_BYTES_PER_ELEMENT = 3 * ELEMENT_BYTES
# With SCALAR = 3 the values grow as 3**k; float64 overflows near k = 646, and the check
# below needs finite values. STREAM's default is 10.
MAX_REPEATS = 100
# STREAM's tolerance for double (epsilon = 1e-13 in checkSTREAMresults).
RELATIVE_TOLERANCE = 1e-13
SAMPLE_POINTS = 1024
DEFAULT_BUDGET_S = 1.0  # for the timed passes, after the first touch
MIN_DEADLINE_S = 0.2  # --deadline-at already past on arrival: a first step and two passes
HUGE_PAGE_BYTES = 2 * 1024 * 1024  # x86-64 and arm64 (4 KiB granule) PMD size


class BackendUnavailableError(RuntimeError):
    """The requested backend or device cannot run here (torch not installed, no CUDA)."""


def measure(
    *,
    array_bytes: int,
    threads: int,
    repeats: int = 5,
    backend: str = "auto",
    device: str = "cpu",
    budget_s: float = DEFAULT_BUDGET_S,
    deadline_s: float | None = None,
    min_array_bytes: int = 0,
) -> dict:
    """Run copy and triad; return a JSON-serialisable dict of the best rates.

    Keys: backend, device, threads, dtype, array_bytes (per array, as allocated: elements * 8),
    elements, repeats (timed passes that ran: at most ``repeats``, fewer when ``budget_s`` ran
    out, never under MIN_REPEATS or ``repeats`` if smaller), copy_gbps, triad_gbps,
    copy_best_s, triad_best_s, copy_gbps_spread and triad_gbps_spread (each kernel's run-to-run
    spread over the timed passes: (max - min) / median of the passes' rates, a fraction; None
    after one pass), triad_passes (memory passes the backend's triad really makes:
    3, as STREAM counts), triad_scalar (q in a = b + q * c: 3 on torch, 1 on numpy), simd (the
    loops that ran: numpy's enabled dispatch targets or "baseline ...", torch's CPU capability;
    None on a GPU), planned_array_bytes (asked for; array_bytes is less where the first touch
    was cut at TOUCH_SHARE of ``deadline_s``), touch_cut (it was), valid, huge_pages
    (MADV_HUGEPAGE was accepted; None on a GPU), timed_s (wall time of the timed passes),
    peak_rss_bytes (this process's peak resident memory, interpreter included; None where
    /proc is unreadable), other_busy_cores (CPU time other processes and steal took during
    the timed passes, in cores; None where /proc/stat is unreadable), duration_s (wall time of
    allocation, first touch, timed passes and check). Three arrays are mapped: 3 *
    planned_array_bytes of address space, 3 * array_bytes of memory.

    Raises ValueError for bad arguments, BackendUnavailableError when the backend or device
    cannot run, MemoryError when the arrays cannot be allocated. duration_s does not include
    importing torch.
    """
    called = time.perf_counter()  # deadline_s counts from here: torch's import is inside it
    elements = _validate(array_bytes, threads, repeats, backend, device, budget_s)
    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"deadline_s must be positive, not {deadline_s}")
    floor = min_array_bytes / (elements * ELEMENT_BYTES)  # a cut touch fills this much
    if backend == "auto":
        # Only torch reaches a GPU: with no torch, device cuda fails below saying so.
        backend = "torch" if device != "cpu" or _torch_importable() else "numpy"
    if backend == "numpy" and device != "cpu":
        raise ValueError(f"backend 'numpy' runs on the cpu only, not on device {device!r}")
    if backend == "torch":
        torch = _import_torch()
        # The clock starts after the import (about a second on first use): it times the
        # measurement, not the interpreter loading a library.
        started = time.perf_counter()
        run = _run_torch(torch, elements, threads, passes_for(repeats, budget_s, deadline_s,
                                                                called, floor), device)
    else:
        started = time.perf_counter()
        run = _run_numpy(elements, threads,
                         passes_for(repeats, budget_s, deadline_s, called, floor))
    used = run.elements if run.elements is not None else elements
    return {
        "backend": backend,
        "device": device,
        # On a GPU the host thread count does not apply: absent, not zero.
        "threads": None if device.startswith("cuda") else threads,
        "dtype": "float64",
        "array_bytes": used * ELEMENT_BYTES,
        "elements": used,
        "planned_array_bytes": elements * ELEMENT_BYTES,
        "touch_cut": used < elements,
        "repeats": run.ran,
        "copy_gbps": COPY_BYTES_PER_ELEMENT * used / run.copy_best_s / 1e9,
        "triad_gbps": TRIAD_BYTES_PER_ELEMENT * used / run.triad_best_s / 1e9,
        "copy_best_s": run.copy_best_s,
        "triad_best_s": run.triad_best_s,
        "copy_gbps_spread": run.copy_spread,
        "triad_gbps_spread": run.triad_spread,
        "triad_passes": 3,
        "triad_scalar": NUMPY_SCALAR if backend == "numpy" else SCALAR,
        "simd": run.simd,
        "valid": run.valid,
        "huge_pages": run.huge_pages,
        "timed_s": run.timed_s,
        "other_busy_cores": run.other_busy_cores,
        "duration_s": time.perf_counter() - started,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def _validate(
    array_bytes: int, threads: int, repeats: int, backend: str, device: str, budget_s: float
) -> int:
    """Check the arguments; return the element count per array."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if array_bytes < ELEMENT_BYTES:
        raise ValueError(f"array_bytes must be at least {ELEMENT_BYTES}, not {array_bytes}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"repeats must be between 1 and {MAX_REPEATS}, not {repeats}")
    if not (device == "cpu" or re.fullmatch(r"cuda(:\d+)?", device)):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', not {device!r}")
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, not {budget_s}")
    return array_bytes // ELEMENT_BYTES


def _torch_importable() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _expected(iterations: int, scalar: float) -> tuple[float, float]:
    """Values of a and c after ``iterations`` (copy, triad) pairs from a=1, b=2, c=0."""
    a, b, c = 1.0, 2.0, 0.0
    for _ in range(iterations):
        c = a
        a = b + scalar * c
    return a, c


def _close(values: list[float], expected: float) -> bool:
    return all(abs(value - expected) <= RELATIVE_TOLERANCE * abs(expected) for value in values)


def _sample_indices(bounds: list[tuple[int, int]]) -> list[int]:
    """Evenly spaced indices of every [start, stop) of ``bounds`` (the threads' chunks, as the
    passes used them) plus both ends of each (where split bugs show)."""
    elements = sum(stop - start for start, stop in bounds)
    step = max(elements // SAMPLE_POINTS, 1)
    indices: set[int] = set()
    for start, stop in bounds:
        if stop > start:
            indices.update(range(start, stop, step))
            indices.update((start, stop - 1))
    return sorted(indices)


def _chunk_bounds(elements: int, threads: int, offset: int = 0) -> list[tuple[int, int]]:
    """``threads`` contiguous [start, stop) ranges covering ``elements`` from ``offset``, as
    np.array_split does."""
    size, extra = divmod(elements, threads)
    bounds, start = [], offset
    for index in range(threads):
        stop = start + size + (1 if index < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _map_arrays(elements: int) -> tuple[list[mmap.mmap], bool]:
    """Three anonymous private mappings with room for a 2 MiB-aligned array each (the array's
    offset in its mapping is _aligned_offset of the mapping's address), and whether they were
    advised MADV_HUGEPAGE.

    Private, not mmap's default MAP_SHARED: a shared anonymous mapping is shmem, which
    MADV_HUGEPAGE does not reach. Huge pages are not asked for where free memory goes back to
    the hypervisor (_free_pages_reported): there the first touch of 3 GiB took 6.5-9.1 s with
    huge pages against 2.7-3.7 s with 4 KiB pages (2-vCPU Firecracker VM, 8 s idle between
    runs). Pages are not touched here: the caller's parallel fill places them.
    """
    size = elements * ELEMENT_BYTES + HUGE_PAGE_BYTES
    try:
        maps = [mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                for _ in range(3)]
    except OSError as error:  # ENOMEM where overcommit is strict
        raise _out_of_memory(elements) from error
    if not hasattr(mmap, "MADV_HUGEPAGE") or _free_pages_reported():
        return maps, False
    try:
        for mapping in maps:
            mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # EINVAL: THP compiled out
        return maps, False
    return maps, True


def _free_pages_reported(base: str = "/sys/bus/virtio/devices") -> bool:
    """Whether a virtio balloon reports free pages to the hypervisor, which then drops them.

    /sys/bus/virtio/devices/*/device 0x0005 is the balloon; its ``features`` string holds one
    character per feature bit, and bit 5 is VIRTIO_BALLOON_F_REPORTING (virtio 1.2, 5.5.3).
    Free page reporting hands back free blocks of 2 MiB and more: a huge page is then faulted
    in from the host 4 KiB at a time, slower than 4 KiB pages that come from what the guest
    kept. World-readable; manual equivalent: ``grep . /sys/bus/virtio/devices/*/features``.
    """
    try:
        devices = os.listdir(base)
    except OSError:
        return False
    for device in devices:
        try:
            with open(f"{base}/{device}/device") as kind, open(f"{base}/{device}/features") as bits:
                if kind.read().strip() == "0x0005" and bits.read()[5:6] == "1":
                    return True
        except OSError:
            continue
    return False


def _aligned_offset(address: int) -> int:
    """Bytes from ``address`` to the next 2 MiB boundary: a huge page covers the array's start."""
    return -address % HUGE_PAGE_BYTES


def _import_torch():
    try:
        import torch
    except ImportError as error:
        raise BackendUnavailableError(
            "backend 'torch' needs PyTorch: install it (pip install torch) or use backend 'numpy'"
        ) from error
    return torch


def _run_torch(torch, elements: int, threads: int, passes: Passes, device: str) -> Run:
    on_cuda = device.startswith("cuda")
    if on_cuda and not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"device {device!r} is not available: torch.cuda.is_available() is False "
            "(a CPU build of torch, or no NVIDIA driver)"
        )
    sync = (lambda: torch.cuda.synchronize(device)) if on_cuda else (lambda: None)
    previous_threads = torch.get_num_threads()
    if not on_cuda:
        torch.set_num_threads(threads)
    try:
        (a, b, c), huge = _allocate_torch(torch, elements, device)

        # fill_ runs on the same intra-op thread pool and static split as the kernels, so
        # this is STREAM's parallel first touch: pages land near the thread that uses them.
        # In one step: slices would be split among the threads otherwise than the whole
        # array is, so it is never cut (the budget bounds it: torch runs on many threads).
        a.fill_(1.0)
        b.fill_(2.0)
        c.fill_(0.0)
        # Single-pass fused ATen kernels: copy_ is one vectorised read+write; add with alpha
        # computes b + alpha * c in one loop (no temporary for SCALAR * c).
        run = timed_passes(
            lambda: c.copy_(a), lambda: torch.add(b, c, alpha=SCALAR, out=a), passes, sync
        )
        sync()
        index = torch.tensor(_sample_indices(_chunk_bounds(elements, threads)), device=device)
        a_values = a.index_select(0, index).tolist()
        c_values = c.index_select(0, index).tolist()
    finally:
        torch.set_num_threads(previous_threads)
    a_expected, c_expected = _expected(run.ran, SCALAR)
    valid = _close(a_values, a_expected) and _close(c_values, c_expected)
    simd = None if on_cuda else torch.backends.cpu.get_cpu_capability()
    return replace(run, valid=valid, huge_pages=huge, simd=simd)


def _allocate_torch(torch, elements: int, device: str):
    """Three uninitialised float64 arrays and whether they sit in huge pages (None on a GPU).

    On the CPU they are views of _map_arrays' mappings (torch.frombuffer shares the memory);
    a failed allocation becomes MemoryError.
    """
    if device == "cpu":
        maps, huge = _map_arrays(elements)
        arrays = []
        for mapping in maps:
            base = torch.frombuffer(mapping, dtype=torch.uint8)
            offset = _aligned_offset(base.data_ptr())
            arrays.append(torch.frombuffer(mapping, dtype=torch.float64, count=elements,
                                           offset=offset))
        return tuple(arrays), huge
    try:
        return tuple(torch.empty(elements, dtype=torch.float64, device=device)
                     for _ in range(3)), None
    except RuntimeError as error:
        # torch reports a failed CUDA allocation as torch.OutOfMemoryError (a RuntimeError).
        cuda_oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
        if isinstance(error, cuda_oom) or "allocate memory" in str(error):
            raise _out_of_memory(elements) from error
        raise


def _out_of_memory(elements: int) -> MemoryError:
    gib = 3 * elements * ELEMENT_BYTES / 2**30
    return MemoryError(
        f"cannot allocate 3 arrays ({gib:.2f} GiB in all): use a smaller array_bytes"
    )


def _numpy_arrays(np, elements: int):
    maps, huge = _map_arrays(elements)
    arrays = []
    for mapping in maps:
        base = np.frombuffer(mapping, dtype=np.uint8)
        offset = _aligned_offset(base.ctypes.data)
        arrays.append(np.frombuffer(mapping, dtype=np.float64, count=elements, offset=offset))
    return arrays, huge


def _run_numpy(elements: int, threads: int, passes: Passes) -> Run:
    import numpy as np

    (a, b, c), huge = _numpy_arrays(np, elements)

    def fill(a_part, b_part, c_part):
        a_part.fill(1.0)
        b_part.fill(2.0)
        c_part.fill(0.0)

    def copy(a_part, b_part, c_part):
        # numpy's own vectorised loop (+x is x, bit for bit), like the triad's and like C
        # STREAM's compiled loop: np.copyto is glibc's memmove, whose store kind flips at a
        # threshold glibc sets from the L3 that CPUID reports (on a VM, the host's: 240 MiB
        # here, so 1 thread would stream past the cache where 2 do not), and whose loop
        # measured 0.77-0.85 of this one on a 2-vCPU AMD EPYC VM.
        np.positive(a_part, out=c_part)

    def triad(a_part, b_part, c_part):
        # One pass, q = 1 (NUMPY_SCALAR): numpy has no fused multiply-add, and s*c then + b
        # is two passes even when blocked to stay in cache (module docstring).
        np.add(b_part, c_part, out=a_part)

    with ThreadPoolExecutor(max_workers=threads) as pool:

        def parallel(kernel):
            # .result() re-raises a worker's exception here instead of losing it.
            for future in [pool.submit(kernel, *chunk) for chunk in chunks]:
                future.result()

        def fill_parts(parts: list[tuple[int, int]]) -> None:
            # STREAM's first touch: each thread its own chunk, a slice of it per step
            for future in [pool.submit(fill, a[lo:hi], b[lo:hi], c[lo:hi]) for lo, hi in parts]:
                future.result()

        used = first_touch(fill_parts, _chunk_bounds(elements, threads), passes)
        chunks = [(a[start:stop], b[start:stop], c[start:stop]) for start, stop in used]
        run = timed_passes(lambda: parallel(copy), lambda: parallel(triad), passes, lambda: None)
    index = np.array(_sample_indices(used), dtype=np.int64)
    a_expected, c_expected = _expected(run.ran, NUMPY_SCALAR)
    valid = _close(a[index].tolist(), a_expected) and _close(c[index].tolist(), c_expected)
    return replace(run, valid=valid, huge_pages=huge, simd=_numpy_simd(),
                   elements=sum(stop - start for start, stop in used))


def _numpy_umath():
    """numpy's C core, where its CPU dispatch is told (numpy 2 moved it to numpy._core)."""
    try:
        return importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:
        return importlib.import_module("numpy.core._multiarray_umath")


def _numpy_simd() -> str:
    """numpy's dispatch targets in use, or ``baseline <its baseline>`` where none is."""
    umath = _numpy_umath()
    features = getattr(umath, "__cpu_features__", {})
    enabled = [t for t in getattr(umath, "__cpu_dispatch__", []) if features.get(t)]
    return " ".join(enabled) or " ".join(["baseline", *getattr(umath, "__cpu_baseline__", [])])


def _numpy_at_baseline() -> None:
    """Run this command again, in this process (exec), with numpy's dispatch targets off.

    numpy reads ``NPY_DISABLE_CPU_FEATURES`` when it is imported, and the names it accepts are
    its build's (X86_V3, X86_V4, AVX512_ICL in numpy 2.4; AVX2, AVX512_SKX... in numpy 1.x;
    newer numpy ignores the whole variable when one name is not among its dispatch targets),
    so they are read from the numpy that will run. The variable, once set, marks the second
    run; where numpy cannot be imported or dispatches nothing, the command goes on as it is.
    Manual equivalent: ``python -c "import numpy; numpy.show_runtime()"``.
    """
    if "NPY_DISABLE_CPU_FEATURES" in os.environ:
        return
    try:
        targets = list(getattr(_numpy_umath(), "__cpu_dispatch__", []))
    except ImportError:
        return
    if targets:
        env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(targets))
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m probes.kernels.stream",
        description="STREAM-style copy and triad bandwidth (decimal GB/s), printed as JSON.",
    )
    parser.add_argument("--array-bytes", type=int, required=True, help="bytes per array (3 arrays)")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="stop the timed passes after this many seconds (at least 2 run)")
    deadline = parser.add_mutually_exclusive_group()
    deadline.add_argument("--deadline-s", type=float, default=None,
                          help="allocation, first touch, passes and check within this many "
                               "seconds: the touch stops at half of it, the passes before it")
    parser.add_argument("--min-array-bytes", type=int, default=0,
                        help="a first touch cut by the deadline still fills this much of "
                             "each array (below it the passes may read cache)")
    deadline.add_argument("--deadline-at", type=float, default=None,
                          help="the same, by this Unix time (the caller's clock: its spawn "
                               "and this interpreter's start count too)")
    parser.add_argument("--numpy-simd", choices=NUMPY_SIMD, default="baseline",
                        help="numpy's loops: its build baseline (as wide as C STREAM's usual "
                             "build) or the widest it dispatches here")
    args = parser.parse_args(argv)
    if args.backend == "numpy" and args.numpy_simd == "baseline" and argv is None:
        _numpy_at_baseline()  # argv None: this is the command line, not a caller's process
    deadline_s = args.deadline_s
    if args.deadline_at is not None:
        # Whatever the start took, the kernel keeps MIN_DEADLINE_S: two passes must run.
        deadline_s = max(args.deadline_at - time.time(), MIN_DEADLINE_S)
    try:
        result = measure(
            array_bytes=args.array_bytes,
            threads=args.threads,
            repeats=args.repeats,
            backend=args.backend,
            device=args.device,
            budget_s=args.budget_s,
            deadline_s=deadline_s,
            min_array_bytes=args.min_array_bytes,
        )
    except (ValueError, MemoryError, RuntimeError) as error:
        # Expected failures (bad value, no torch, no CUDA, out of memory): one line, no
        # traceback. RuntimeError also covers torch's own device errors.
        one_line = " ".join(str(error).split())  # torch's CUDA errors span several lines
        print(f"{parser.prog}: error: {one_line}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
