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
import ctypes
import importlib.util
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import IO, Any, Iterable

from probes.helpers.kernel_child import kernel_env
from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.spread import spread

GPU_BYTES = 256 << 20
CPU_BYTES = 16 << 20
# What each step covers, in the order a worker goes through them.
STEPS = {
    "start": "starting Python and importing torch",
    "rendezvous": "joining the process group (127.0.0.1, or the master's TCP store across hosts)",
    "stream": "a plain TCP stream with a peer host, the line's ceiling (across hosts)",
    "warm-up": "the first all-reduces, where NCCL sets up its communicator and transports",
    "timed": "the timed all-reduces",
}
HOLD_S = 3600.0  # --hold-rank: that rank sleeps this long before its rendezvous (a test)
EVENT_BYTES = 64 << 10  # what a worker may print: a few events of ~100 bytes
NCCL_LOG_BYTES = 1 << 20  # the head of each worker's NCCL log: channel lines come first
KILL_WAIT_S = 5.0
EXTRA_EVENTS = ("missing", "group", "stream", "pairs")  # what a cross-host rank adds
SPREAD_BLOCKS = 5  # the timed all-reduces are timed in this many blocks, for their spread

# "host:1234:1250 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"; the brackets hold
# the CUDA device (older NCCL) or the bus id (2.12+, "0[1b000]"); net channels add [send].
_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? ?: \d+\[[0-9a-fA-F]+\] -> "
                      r"\d+\[[0-9a-fA-F]+\](?: \[(?:send|receive)\])? via (\S[^\n]*)")


def bus_bandwidth(algbw_gbps: float, n: int) -> float:
    """nccl-tests' busbw of an all-reduce: each rank sends and receives 2(n-1)/n of the data."""
    return algbw_gbps * 2 * (n - 1) / n


def transport_name(via: str) -> str:
    """"P2P/CUMEM/read" -> "P2P/CUMEM", "SHM/direct/direct" -> "SHM", "NET/IB/0/GDRDMA" ->
    "NET/IB", "P2P/direct pointer" -> "P2P/direct"."""
    parts = via.strip().split("/")
    kind = parts[0].upper()
    if kind == "SHM" or len(parts) < 2:
        return kind
    return f"{kind}/{parts[1].split()[0]}" if parts[1].split() else kind


def parse_transports(lines: Iterable[str]) -> dict[str, int]:
    """Channel connections per transport, from NCCL's ``NCCL_DEBUG=INFO`` lines."""
    counts: Counter[str] = Counter()
    for line in lines:
        match = _CHANNEL.search(line)
        if match:
            counts[transport_name(match.group(1))] += 1
    return dict(sorted(counts.items()))


def chosen_transport(counts: dict[str, int]) -> str | None:
    """The transport of most channels (ties: by name), None when NCCL logged none."""
    if not counts:
        return None
    return min(counts, key=lambda name: (-counts[name], name))


# ---- the worker: one rank ----------------------------------------------------------------

def block_sizes(count: int, blocks: int = SPREAD_BLOCKS) -> list[int]:
    """``count`` all-reduces split into up to ``blocks`` timed blocks, as even as they go:
    each block ends with a synchronisation, which one large all-reduce's time dwarfs."""
    blocks = max(1, min(blocks, count))
    size, extra = divmod(count, blocks)
    return [size + (1 if i < extra else 0) for i in range(blocks)]


def _block_spread(done: list[dict], nbytes: int, world: int) -> float | None:
    """The spread of busbw over the timed blocks, each block as slow as its slowest rank; None
    where there was one block or a rank gave no block times."""
    columns: list[list] = [c for c in (d.get("block_s") for d in done) if isinstance(c, list) and c]
    if not columns or len(columns) != len(done) or len({len(c) for c in columns}) != 1:
        return None
    slowest = [max(float(c[i]) for c in columns) for i in range(len(columns[0]))]
    return spread([bus_bandwidth(nbytes / s / 1e9, world) for s in slowest if s > 0])


def _emit(rank: int, **event: Any) -> None:
    sys.stdout.write(json.dumps({"rank": rank, **event}) + "\n")
    sys.stdout.flush()


def timed_allreduce(torch: Any, dist: Any, rank: int, world: int, device: str, nbytes: int,
                    warmup: int, iters: int, budget_s: float, enter: Any,
                    group: Any = None) -> dict[str, Any]:
    """The checked first all-reduce, the warm-up, the agreed count and the timed blocks of one
    joined group (``group``: a sub-group, None the whole); enters step "timed" through
    ``enter``. Returns the rank's seconds per all-reduce, the count and the block times."""
    on_gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    x = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(x, group=group)
    members = dist.get_process_group_ranks(group) if group is not None else range(world)
    expected = float(sum(r + 1 for r in members))
    if not bool((x == expected).all()):
        raise RuntimeError(f"wrong all-reduce result: expected {expected:g} everywhere, got "
                           f"{float(x.min()):g}..{float(x.max()):g}")
    sync()
    t0 = time.perf_counter()
    for _ in range(warmup):
        dist.all_reduce(x, group=group)
    sync()
    per = (time.perf_counter() - t0) / max(warmup, 1)
    # every rank must run the same count, or the last all-reduce waits forever
    agreed = torch.tensor([max(1, min(iters, int(budget_s / max(per, 1e-6))))],
                          dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=group)
    count = int(agreed.item())
    enter("timed")
    blocks = []  # seconds per all-reduce, block by block (the spread's repeats)
    t0 = time.perf_counter()
    for size in block_sizes(count):
        start = time.perf_counter()
        for _ in range(size):
            dist.all_reduce(x, group=group)
        sync()
        blocks.append((time.perf_counter() - start) / size)
    elapsed = time.perf_counter() - t0
    return {"seconds": elapsed / count, "iterations": count, "block_s": blocks}


def worker(rank: int, world: int, device: str, port: int, nbytes: int, warmup: int,
           iters: int, budget_s: float, hold: bool) -> int:
    """One rank: its steps and result as JSON lines on stdout."""
    step, began, steps_s = "start", time.perf_counter(), {}

    def enter(name: str) -> None:
        nonlocal step, began
        now = time.perf_counter()
        steps_s[step] = round(now - began, 4)
        step, began = name, now
        _emit(rank, step=name)

    _emit(rank, step=step)
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
        enter("rendezvous")
        dist.init_process_group("nccl" if on_gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world,
                                timeout=timedelta(seconds=HOLD_S))
        enter("warm-up")
        done = timed_allreduce(torch, dist, rank, world, device, nbytes, warmup, iters, budget_s,
                               enter)
        steps_s[step] = round(time.perf_counter() - began, 4)
        _emit(rank, done={**done, "steps_s": steps_s})
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 -- the child's boundary: any failure is reported, named
        _emit(rank, error=f"{type(exc).__name__}: {str(exc)[:300]}", step=step)
        return 1
    return 0


# ---- the launcher ------------------------------------------------------------------------

def free_port() -> int:
    """A port free on 127.0.0.1 now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dying_with(parent: int):
    """What a worker runs between fork and exec: SIGKILL when ``parent`` (the launcher) dies."""
    def preexec() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the launcher died before the prctl took hold
            os._exit(1)
    return preexec


def _worker_env(workdir: str, rank: int) -> dict[str, str]:
    env = kernel_env({k: v for k, v in os.environ.items()
                      if not k.startswith("NCCL_") and k != "CUDA_VISIBLE_DEVICES"})
    env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", NCCL_DEBUG="INFO",
               NCCL_DEBUG_SUBSYS="INIT,P2P,SHM,NET",
               NCCL_DEBUG_FILE=os.path.join(workdir, f"nccl.{rank}.log"),
               GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    return env


class _Rank:
    """What the launcher knows of one worker: its process, last step, result or error."""

    def __init__(self, rank: int, proc: subprocess.Popen, stderr: IO[bytes]) -> None:
        self.rank, self.proc, self.stderr = rank, proc, stderr
        self.step: str | None = None  # None: it printed nothing yet
        self.done: dict | None = None
        self.error: str | None = None
        self.skip: str | None = None  # the rank cannot run here at all (torch without CUDA)
        self.extra: dict[str, Any] = {}  # across hosts: the master's view (probes/kernels/xnode.py)
        self.buffer, self.read = b"", 0

    def feed(self, data: bytes) -> None:
        self.read += len(data)
        if self.read > EVENT_BYTES:
            return
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a library's own print: not an event
            if not isinstance(event, dict):
                continue
            if isinstance(event.get("step"), str) and event["step"] in STEPS:
                self.step = event["step"]
            if isinstance(event.get("done"), dict):
                self.done = event["done"]
            if isinstance(event.get("error"), str):
                self.error = event["error"]
            if isinstance(event.get("skip"), str):
                self.skip = event["skip"]
            for key in EXTRA_EVENTS:
                if key in event:
                    self.extra[key] = event[key]

    def failure(self) -> str | None:
        """Why this rank failed, once it has exited non-zero or said so."""
        if self.error:
            return self.error
        code = self.proc.poll()
        if code is None or code == 0:
            return None
        self.stderr.seek(0)
        tail = self.stderr.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        return (tail[-1][:300] if tail else "") or f"exited {code}"


def _kill(ranks: list[_Rank]) -> float:
    """SIGKILL every worker's process group; seconds until all are gone (reaped, groups empty)."""
    t0 = time.perf_counter()
    for r in ranks:
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for r in ranks:
        try:
            r.proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.perf_counter() + KILL_WAIT_S
    for r in ranks:  # what a worker started (its group) dies with it
        while time.perf_counter() < deadline:
            try:
                os.killpg(r.proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.001)
    return time.perf_counter() - t0


def _stuck_step(ranks: list[_Rank]) -> tuple[str, str]:
    """(the step the group was in, one line naming which rank was where)."""
    order = list(STEPS)
    reached = [order.index(r.step) if r.step else -1 for r in ranks]
    step = order[max(max(reached), 0)]
    behind = [f"rank {r.rank} never reached it (" + (f"still {STEPS[r.step]}" if r.step
                                                      else "no sign of life") + ")"
              for r, at in zip(ranks, reached) if at < order.index(step)]
    if behind:
        return step, f"stuck in {step} ({STEPS[step]}): {', '.join(behind)}"
    return step, f"stuck in {step} ({STEPS[step]}): all {len(ranks)} ranks in it"


def _nccl_lines(workdir: str) -> list[str]:
    lines: list[str] = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("nccl."):
            with open(os.path.join(workdir, name), "rb") as f:
                lines += f.read(NCCL_LOG_BYTES).decode("utf-8", "replace").splitlines()
    return lines


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


def _watch(sel: selectors.BaseSelector, ranks: list[_Rank],
           deadline: float) -> tuple[str, str | None]:
    """Read the workers' events until all are done, one fails, or the deadline passes."""
    while True:
        skipped = next((r for r in ranks if r.skip), None)
        if skipped is not None:
            return "skip", skipped.skip
        failed = next((r for r in ranks if r.failure()), None)
        if failed is not None:
            return "failed", f"rank {failed.rank} failed in {failed.step or 'start'}: {failed.failure()}"
        if all(r.proc.poll() == 0 for r in ranks) and not sel.get_map():
            missing = [r.rank for r in ranks if r.done is None]
            if missing:
                return "failed", f"rank {missing[0]} exited without a result"
            return "ok", None
        left = deadline - time.perf_counter()
        if left <= 0:
            return "timeout", None
        for key, _ in sel.select(timeout=min(left, 0.2)):
            rank: _Rank = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if data:
                rank.feed(data)
            else:
                sel.unregister(key.fileobj)
        if not sel.get_map():
            for r in ranks:  # every pipe closed: wait for the exits within the deadline
                try:
                    r.proc.wait(timeout=max(min(deadline - time.perf_counter(), 0.2), 0.001))
                except subprocess.TimeoutExpired:
                    pass


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
