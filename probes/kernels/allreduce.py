"""All-reduce bus bandwidth with torch.distributed: one process per GPU (NCCL), or n on the CPU (gloo).

Run as a child of the scan (``python -m probes.kernels.allreduce --devices 0,1 --limit-s 90``,
or ``--cpu 2`` where the tests run): this launcher starts one worker process per rank, each
in a process group of its own, which rendezvous over 127.0.0.1 on a free port
(``init_process_group``), warm up, agree on an iteration count that fits ``--budget-s``, then
time that many all-reduces of one float32 buffer: 256 MiB on GPUs (nccl-tests' large-message
regime; ``all_reduce_perf -b 256M -e 256M``), 16 MiB on the CPU (gloo over loopback on a few
cores; the output states the size). Figures as nccl-tests gives them (its PERFORMANCE.md):
``algbw = bytes / time`` of one all-reduce (the slowest rank's mean), ``busbw = algbw x
2(n-1)/n``, decimal GB/s. The timed all-reduces run in up to ``SPREAD_BLOCKS`` blocks, each
timed to a synchronisation: ``busbw_gbps_spread`` is (max - min) / median of the blocks'
busbw (each block as slow as its slowest rank), the figure's run-to-run noise floor; None
with one block. The first warm-up all-reduce is checked (each rank contributes
rank+1, every element must read n(n+1)/2).

A hung NCCL ignores Python timeouts, so the launcher, which never imports torch, enforces
``--limit-s`` from outside: at the deadline it kills every worker's process group with
SIGKILL and reports how long the kill took, and which step each rank had reached (``STEPS``),
so that a hang names its step. A worker that fails ends the run at once the same way (its
peers would wait for it forever). Workers also die with the launcher (``PR_SET_PDEATHSIG``)
if something kills it first. NCCL's choice of transport comes from its ``NCCL_DEBUG=INFO``
lines (``NCCL_DEBUG_FILE``, one per worker; ``parse_transports``). Inherited ``NCCL_*`` and
``CUDA_VISIBLE_DEVICES`` are dropped from the workers' environment: the measurement is of the
host's path, and device indexes are NVML's (``CUDA_DEVICE_ORDER=PCI_BUS_ID``). Prints one JSON
object; ``{"skip": why}`` when torch is not installed. Manual equivalent: nccl-tests'
``NCCL_DEBUG=INFO all_reduce_perf -b 256M -e 256M -g <n>``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from probes.helpers.collective_ranks import (  # noqa: F401 (block_sizes, parse_transports: the tests')
    CPU_BYTES, GPU_BYTES, STEPS, Steps, block_sizes, bus_bandwidth, chosen_transport,
    parse_transports, timed_allreduce)
from probes.helpers.collective_ranks import Rank as _Rank
from probes.helpers.collective_ranks import dying_with as _dying_with
from probes.helpers.collective_ranks import emit as _emit
from probes.helpers.collective_ranks import kill as _kill
from probes.helpers.collective_ranks import nccl_lines as _nccl_lines
from probes.helpers.collective_ranks import stuck_step as _stuck_step
from probes.helpers.collective_ranks import watch as _watch
from probes.helpers.kernel_child import kernel_env
from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.spread import spread

HOLD_S = 3600.0  # --hold-rank: that rank sleeps this long before its rendezvous (a test)

# ---- the worker: one rank ----------------------------------------------------------------

def _block_spread(done: list[dict], nbytes: int, world: int) -> float | None:
    """The spread of busbw over the timed blocks, each block as slow as its slowest rank; None
    where there was one block or a rank gave no block times."""
    columns: list[list] = [c for c in (d.get("block_s") for d in done) if isinstance(c, list) and c]
    if not columns or len(columns) != len(done) or len({len(c) for c in columns}) != 1:
        return None
    slowest = [max(float(c[i]) for c in columns) for i in range(len(columns[0]))]
    return spread([bus_bandwidth(nbytes / s / 1e9, world) for s in slowest if s > 0])


def worker(rank: int, world: int, device: str, port: int, nbytes: int, warmup: int,
           iters: int, budget_s: float, hold: bool) -> int:
    """One rank: its steps and result as JSON lines on stdout."""
    steps = Steps(rank)
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        on_gpu = device.startswith("cuda")
        if on_gpu:
            if not torch.cuda.is_available():
                _emit(rank, skip=f"torch {torch.__version__} sees no CUDA device (a CPU build of "
                                 "torch, or no driver): the all-reduce needs torch with CUDA")
                return 0
            torch.cuda.set_device(device)
        if hold:
            time.sleep(HOLD_S)
        steps.enter("rendezvous")
        dist.init_process_group("nccl" if on_gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world,
                                timeout=timedelta(seconds=HOLD_S))
        steps.enter("warm-up")
        done = timed_allreduce(torch, dist, rank, world, device, nbytes, warmup, iters, budget_s,
                               steps.enter)
        _emit(rank, done={**done, "steps_s": steps.done()})
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 -- the child's boundary: any failure is reported, named
        _emit(rank, error=f"{type(exc).__name__}: {str(exc)[:300]}", step=steps.step)
        return 1
    return 0


# ---- the launcher ------------------------------------------------------------------------

def free_port() -> int:
    """A port free on 127.0.0.1 now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env(workdir: str, rank: int) -> dict[str, str]:
    env = kernel_env({k: v for k, v in os.environ.items()
                      if not k.startswith("NCCL_") and k != "CUDA_VISIBLE_DEVICES"})
    env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", NCCL_DEBUG="INFO",
               NCCL_DEBUG_SUBSYS="INIT,P2P,SHM,NET",
               NCCL_DEBUG_FILE=os.path.join(workdir, f"nccl.{rank}.log"),
               GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    return env


def launch(devices: list[str], nbytes: int, limit_s: float, budget_s: float,
           hold_rank: int | None = None) -> dict[str, Any]:
    """Run one all-reduce group over ``devices`` ("cuda:0", or "cpu" once per rank) within
    ``limit_s``; the JSON result (see the module)."""
    started = time.perf_counter()
    deadline = started + limit_s
    world, on_gpu = len(devices), devices[0].startswith("cuda")
    warmup, iters = (5, 20) if on_gpu else (2, 10)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="llm-doctor-allreduce-") as workdir:
        ranks: list[_Rank] = []
        sel = selectors.DefaultSelector()
        try:
            for rank, device in enumerate(devices):
                argv = [sys.executable, "-m", "probes.kernels.allreduce", "--worker",
                        "--rank", str(rank), "--world", str(world), "--device", device,
                        "--port", str(port), "--bytes", str(nbytes), "--warmup", str(warmup),
                        "--iters", str(iters), "--budget-s", str(budget_s)]
                if rank == hold_rank:
                    argv.append("--hold")
                stderr = open(os.path.join(workdir, f"stderr.{rank}"), "w+b")
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr,
                                        stdin=subprocess.DEVNULL, env=_worker_env(workdir, rank),
                                        process_group=0, preexec_fn=_dying_with(os.getpid()))
                ranks.append(_Rank(rank, proc, stderr))
                assert proc.stdout is not None
                os.set_blocking(proc.stdout.fileno(), False)
                sel.register(proc.stdout, selectors.EVENT_READ, ranks[-1])
            outcome, failure = _watch(sel, ranks, deadline)
        finally:
            kill_s = _kill(ranks) if any(r.proc.poll() is None for r in ranks) else None
            for r in ranks:
                r.stderr.close()
                if r.proc.stdout is not None:
                    r.proc.stdout.close()
            sel.close()
        transports = _nccl_lines(workdir) if on_gpu else []
    if outcome == "skip":
        return {"skip": failure}
    return _result(devices, nbytes, ranks, outcome, failure, transports, limit_s,
                   kill_s if outcome != "ok" else None, time.perf_counter() - started)


def _result(devices: list[str], nbytes: int, ranks: list[_Rank], outcome: str,
            failure: str | None, nccl_lines: list[str], limit_s: float,
            kill_s: float | None, total_s: float) -> dict[str, Any]:
    world = len(devices)
    out: dict[str, Any] = {
        "backend": "nccl" if devices[0].startswith("cuda") else "gloo", "devices": devices,
        "n": world, "bytes": nbytes,
        "size_note": None if devices[0].startswith("cuda") else
        f"CPU (gloo) at {nbytes >> 20} MiB; a GPU all-reduce runs {GPU_BYTES >> 20} MiB",
        "outcome": outcome, "failure": failure, "failed_step": None,
        "ranks": [{"rank": r.rank, "step": r.step, "done": r.done is not None} for r in ranks],
        "limit_s": limit_s, "kill_latency_s": None if kill_s is None else round(kill_s, 4),
        "total_s": round(total_s, 3),
    }
    counts = parse_transports(nccl_lines)
    out["transports"], out["transport"] = counts, chosen_transport(counts)
    if outcome == "timeout":
        step, who = _stuck_step(ranks)
        out["failed_step"] = step
        out["failure"] = f"no result within the {limit_s:g} s limit: {who}; killed"
    elif outcome == "failed":
        out["failed_step"] = next((r.step or "start" for r in ranks if r.failure()), None)
    if outcome != "ok":
        return out
    done = [r.done for r in ranks if r.done is not None]
    seconds = max(float(d["seconds"]) for d in done)  # the collective is as slow as its slowest rank
    steps: dict[str, float] = {}
    for d in done:
        for name, took in (d.get("steps_s") or {}).items():
            steps[name] = max(steps.get(name, 0.0), float(took))
    algbw = nbytes / seconds / 1e9
    out.update(seconds=seconds, iterations=min(int(d["iterations"]) for d in done),
               algbw_gbps=round(algbw, 3), busbw_gbps=round(bus_bandwidth(algbw, world), 3),
               busbw_gbps_spread=_block_spread(done, nbytes, world), steps_s=steps)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="allreduce", description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default=None, help="GPU indexes (NVML's), e.g. 0,1,2,3")
    parser.add_argument("--cpu", type=int, default=0, help="N ranks on the CPU with gloo")
    parser.add_argument("--bytes", type=int, default=None, help="message size (default: 256 MiB "
                        "on GPUs, 16 MiB on the CPU)")
    parser.add_argument("--limit-s", type=float, default=90.0, help="hard limit, 1-600 s")
    parser.add_argument("--budget-s", type=float, default=5.0, help="for the timed all-reduces")
    parser.add_argument("--hold-rank", type=int, default=None,
                        help="that rank never joins (sleeps before its rendezvous): a test")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("--rank", "--world", "--port", "--warmup", "--iters"):
        parser.add_argument(name, type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    budget = min(max(args.budget_s, 0.1), 60.0)
    if args.worker:
        return worker(args.rank, args.world, args.device, args.port, args.bytes or CPU_BYTES,
                      args.warmup, args.iters, budget, args.hold)
    if importlib.util.find_spec("torch") is None:
        print(json.dumps({"skip": f"torch is not installed for {sys.executable} "
                                  "(`pip install torch`): the all-reduce runs on torch.distributed"}))
        return 0
    try:
        if args.devices:
            devices = [f"cuda:{int(i)}" for i in args.devices.split(",")]
        else:
            devices = ["cpu"] * args.cpu
    except ValueError:
        parser.error(f"--devices {args.devices!r}: GPU indexes separated by commas, e.g. 0,1")
    if len(devices) < 2 or len(devices) > 64:
        parser.error("an all-reduce needs 2 to 64 ranks (--devices 0,1 or --cpu 2)")
    if args.hold_rank is not None and not 0 <= args.hold_rank < len(devices):
        parser.error(f"--hold-rank {args.hold_rank}: ranks are 0-{len(devices) - 1}")
    nbytes = args.bytes or (GPU_BYTES if args.devices else CPU_BYTES)
    if not 4 <= nbytes <= 8 << 30:
        parser.error(f"--bytes {nbytes}: between 4 and 8 GiB")
    try:
        result = launch(devices, nbytes - nbytes % 4, min(max(args.limit_s, 1.0), 600.0), budget,
                        args.hold_rank)
    except OSError as exc:
        print(f"allreduce: cannot start the workers: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
