"""Ranks of a torch.distributed all-reduce, for the kernels that run them (probes/kernels/
allreduce.py on one host, probes/kernels/xnode.py across hosts): the worker's timed loop and
JSON events, and the launcher's side: each rank's process and what it said (``Rank``), the
watch to the hard limit (``watch``), the SIGKILL of every rank's process group (``kill``), and
which step a stuck group was in (``stuck_step``); NCCL's transports from its INFO lines.

Figures as nccl-tests gives them (its PERFORMANCE.md): ``algbw = bytes / time`` of one
all-reduce, ``busbw = algbw x 2(n-1)/n``, decimal GB/s. torch is imported by the worker only
(it is handed in): the launchers never import it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import IO, Any, Iterable

GPU_BYTES = 256 << 20  # nccl-tests' large-message regime (all_reduce_perf -b 256M -e 256M)
CPU_BYTES = 16 << 20  # gloo on a few cores: the output states the size
# What each step covers, in the order a worker goes through them.
STEPS = {
    "start": "starting Python and importing torch",
    "rendezvous": "joining the process group (127.0.0.1, or the master's TCP store across hosts)",
    "stream": "a plain TCP stream with a peer host, the line's ceiling (across hosts)",
    "warm-up": "the first all-reduces, where NCCL sets up its communicator and transports",
    "timed": "the timed all-reduces",
}
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


def block_sizes(count: int, blocks: int = SPREAD_BLOCKS) -> list[int]:
    """``count`` all-reduces split into up to ``blocks`` timed blocks, as even as they go:
    each block ends with a synchronisation, which one large all-reduce's time dwarfs."""
    blocks = max(1, min(blocks, count))
    size, extra = divmod(count, blocks)
    return [size + (1 if i < extra else 0) for i in range(blocks)]


def emit(rank: int, **event: Any) -> None:
    sys.stdout.write(json.dumps({"rank": rank, **event}) + "\n")
    sys.stdout.flush()


class Steps:
    """Which step (``STEPS``) a rank is in, each step announced as a JSON event as it begins,
    and the seconds each took: a rank that fails names its step, and the launcher names the
    step a hung rank was in (``stuck_step``). ``enter`` is what ``timed_allreduce`` calls."""

    def __init__(self, rank: int) -> None:
        self.rank, self.step, self.began = rank, "start", time.perf_counter()
        self.seconds: dict[str, float] = {}
        emit(rank, step=self.step)

    def enter(self, name: str) -> None:
        self.done()
        self.step, self.began = name, time.perf_counter()
        emit(self.rank, step=name)

    def done(self) -> dict[str, float]:
        """The seconds of every step so far, the current one up to now."""
        self.seconds[self.step] = round(time.perf_counter() - self.began, 4)
        return self.seconds


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


def dying_with(parent: int):
    """What a worker runs between fork and exec: SIGKILL when ``parent`` (the launcher) dies."""
    def preexec() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the launcher died before the prctl took hold
            os._exit(1)
    return preexec


class Rank:
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


def kill(ranks: list[Rank]) -> float:
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


def stuck_step(ranks: list[Rank]) -> tuple[str, str]:
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


def nccl_lines(workdir: str) -> list[str]:
    lines: list[str] = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("nccl."):
            with open(os.path.join(workdir, name), "rb") as f:
                lines += f.read(NCCL_LOG_BYTES).decode("utf-8", "replace").splitlines()
    return lines


def watch(sel: selectors.BaseSelector, ranks: list[Rank],
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
            rank: Rank = key.data
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


