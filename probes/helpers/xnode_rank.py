"""One rank of the cross-host all-reduce (probes/kernels/xnode.py starts it): join, stream, time.

Steps, each printed as a JSON event (probes/helpers/collective_ranks.py's ``STEPS``):

- ``rendezvous``: a ``torch.distributed.TCPStore`` on the master's port (rank 0 serves it,
  every other rank connects, retrying until the join deadline). Each rank writes
  ``llmd/arrived/<rank>`` with its host and address; rank 0 waits for every rank until the
  join deadline and then writes the verdict: "go", or the ranks that never arrived, which every
  rank that did arrive reads and reports. Only then ``init_process_group`` on that same store,
  its timeout (gloo's connect and every collective's) set to what is left before the hard
  limit, so gloo gives up before the launcher's SIGKILL does.
- ``stream``: rank 0 and the first rank on another host time a plain TCP stream between the
  same two addresses, ``STREAM_S`` each way on one connection (the peer sends, then rank 0):
  the line's ceiling as TCP sees it, measured before the all-reduce so that a path that stalls
  big segments (an MTU mismatch drops every segment over the receiver's MTU, silently, without
  an ICMP) shows here even when gloo then times out.
- ``warm-up`` and ``timed``: ``collective_ranks.timed_allreduce``, over the whole group, or with
  ``--pairwise`` in pairs: round 0 pairs ranks (0,1), (2,3)...; round 1 rotates by one, (1,2),
  (3,4)... (W-1,0); a rank in a slow pair in every round it ran is the suspect host.

Results go to the store (``llmd/done/<rank>``); rank 0 gathers them (bounded) and prints the
group's figures. Every wait has a deadline; the launcher's SIGKILL is the backstop.
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import timedelta
from typing import Any, Callable

from probes.helpers.collective_ranks import Steps, bus_bandwidth, timed_allreduce
from probes.helpers.collective_ranks import emit as _emit

STREAM_S = 0.5  # each direction of the TCP stream
STREAM_GRACE_S = 2.0  # a stalled direction: the receiver gives up this long after the sender
CHUNK = 1 << 18
POLL_S = 0.05
MIN_CONNECT_S = 2.0  # a rank whose start ate its join bound still tries the master this long
READ_WAIT_S = 3.0  # the other ranks read the group's figures from rank 0's store


def pair_rounds(world: int) -> list[list[tuple[int, int]]]:
    """Round 0: (0,1), (2,3)...; round 1 (world > 2): (1,2), (3,4), ..., (world-1, 0)."""
    first = [(r, r + 1) for r in range(0, world - 1, 2)]
    if world <= 2:
        return [first]
    second = [(r, (r + 1) % world) for r in range(1, world, 2)]
    return [first, second]


def _left(by: float) -> float:
    return max(by - time.time(), 0.5)


def join(torch_dist: Any, addr: str, port: int, rank: int, world: int, join_by: float,
         end_by: float, me: dict[str, Any]) -> tuple[Any, dict[int, dict]]:
    """The store and every rank's arrival record; raises RuntimeError naming who is missing."""
    # under torchrun the agent serves the store on MASTER_PORT already; rank 0 joins it
    serve = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    try:
        store = torch_dist.TCPStore(addr, port, None, serve,
                                    timedelta(seconds=max(_left(join_by), MIN_CONNECT_S)),
                                    wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 -- torch's DistNetworkError / RuntimeError text
        text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if serve:
            raise RuntimeError(f"cannot serve the rendezvous on port {port}: {text}") from None
        raise RuntimeError(f"no master at {addr}:{port} within the join bound (rank 0 not "
                           f"started, unreachable from here, or a firewall): {text}") from None
    store.set_timeout(timedelta(seconds=_left(end_by)))
    store.set(f"llmd/arrived/{rank}", json.dumps(me))
    keys = [f"llmd/arrived/{r}" for r in range(world)]
    started = time.time()
    if rank == 0:
        while time.time() < join_by and not store.check(keys):
            time.sleep(POLL_S)
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        store.set("llmd/verdict", json.dumps({"missing": missing}))
    else:
        store.wait(["llmd/verdict"], timedelta(seconds=_left(end_by)))
    verdict = json.loads(store.get("llmd/verdict"))
    missing = [int(r) for r in verdict.get("missing", [])][:64]
    if missing:
        _emit(rank, missing=missing)
        raise RuntimeError(f"rank(s) {', '.join(map(str, missing))} of {world} never joined "
                           f"{addr}:{port} within the join bound (waited {time.time() - started:.1f} s)")
    arrivals = {r: json.loads(store.get(key)) for r, key in enumerate(keys)}
    return store, arrivals


def _pump(sock: socket.socket, seconds: float) -> None:
    """Send zeros for ``seconds`` (a send that blocks past the end stops it), then FIN."""
    data = bytes(CHUNK)
    end = time.perf_counter() + seconds
    sock.settimeout(seconds)
    try:
        while time.perf_counter() < end:
            sock.sendall(data)
    except (socket.timeout, OSError):
        pass
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _drain(sock: socket.socket, seconds: float) -> dict[str, float]:
    """Read until EOF or ``seconds`` + grace; bytes and GB/s from the first byte on."""
    got, first, end = 0, None, time.perf_counter() + seconds + STREAM_GRACE_S
    while time.perf_counter() < end:
        sock.settimeout(max(end - time.perf_counter(), 0.01))
        try:
            data = sock.recv(CHUNK)
        except (socket.timeout, OSError):
            break
        if not data:
            break
        first = first or time.perf_counter()
        got += len(data)
    took = time.perf_counter() - first if first else 0.0
    return {"bytes": got, "seconds": round(took, 4),
            "gbps": round(got / took / 1e9, 4) if took > 0 and got > CHUNK else 0.0}


def stream(store: Any, rank: int, peer: int, me: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0 and ``peer`` time a TCP stream both ways (see the module); rank 0 returns it."""
    if rank == 0:
        family = socket.AF_INET6 if ":" in me["addr"] else socket.AF_INET
        with socket.create_server((me["addr"], 0), family=family) as server:
            server.settimeout(STREAM_S + STREAM_GRACE_S * 2)
            store.set("llmd/stream", str(server.getsockname()[1]))
            conn, _ = server.accept()
        with conn:
            there = _drain(conn, STREAM_S)
            _pump(conn, STREAM_S)
            back = json.loads(store.get("llmd/stream/back"))  # the peer's receive figure
        return {"peer": peer, "to_master": there, "from_master": back,
                "gbps": min(there["gbps"], back["gbps"])}
    if rank == peer:
        port = int(store.get("llmd/stream"))
        master = json.loads(store.get("llmd/arrived/0"))["addr"]
        with socket.create_connection((master, port), timeout=STREAM_S + STREAM_GRACE_S) as conn:
            _pump(conn, STREAM_S)
            store.set("llmd/stream/back", json.dumps(_drain(conn, STREAM_S)))
    return None


def stream_peer(arrivals: dict[int, dict]) -> int | None:
    """The first rank on another host than rank 0's (its address differs), else None."""
    home = arrivals.get(0, {}).get("addr")
    return next((r for r in sorted(arrivals) if r and arrivals[r].get("addr") != home), None)


def pairwise(torch: Any, dist: Any, rank: int, world: int, device: str, nbytes: int,
             budget_s: float, enter: Callable[[str], None]) -> list[dict[str, Any]]:
    """This rank's timed all-reduce in each round's pair (see the module)."""
    rounds = pair_rounds(world)
    groups = [[dist.new_group(ranks=list(p)) for p in pairs] for pairs in rounds]  # all ranks, same order
    out = []
    for number, pairs in enumerate(rounds):
        for pair, group in zip(pairs, groups[number]):
            if rank in pair:
                done = timed_allreduce(torch, dist, rank, 2, device, nbytes, 1, 10,
                                       budget_s / len(rounds), enter, group=group)
                out.append({"round": number, "pair": list(pair), "seconds": done["seconds"]})
        dist.barrier()
    return out


def gather(store: Any, world: int, end_by: float) -> dict[int, dict]:
    """Every rank's result from the store, as many as arrive before ``end_by``."""
    keys = {r: f"llmd/done/{r}" for r in range(world)}
    while time.time() < end_by - 1 and not store.check(list(keys.values())):
        time.sleep(POLL_S)
    return {r: json.loads(store.get(k)) for r, k in keys.items() if store.check([k])}


def pair_figures(results: dict[int, dict], nbytes: int) -> list[dict[str, Any]]:
    """Each pair's busbw (its slower member's time), from the ranks' pairwise results."""
    seen: dict[tuple[int, int, int], float] = {}
    for done in results.values():
        for item in done.get("pairs", []):
            a, b = map(int, item["pair"])
            key = (int(item["round"]), a, b)
            seen[key] = max(seen.get(key, 0.0), float(item["seconds"]))
    return [{"round": k[0], "pair": [k[1], k[2]],
             "busbw_gbps": round(bus_bandwidth(nbytes / s / 1e9, 2), 4)}
            for k, s in sorted(seen.items()) if s > 0]


def share(store: Any, rank: int, world: int, end_by: float, nbytes: int,
          arrivals: dict[int, dict], line: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rank 0 gathers every rank's result and writes the group's figures; the other ranks read
    them, so that every host reports the same; rank 0 keeps its store up until they have
    (``llmd/read/<rank>``), bounded. None where the figures did not come in time."""
    if rank == 0:
        results = gather(store, world, end_by)
        group = {"ranks_done": sorted(results), "seconds": max(
            (float(d["seconds"]) for d in results.values() if "seconds" in d), default=None),
            "pairs": pair_figures(results, nbytes), "arrivals": arrivals, "stream": line}
        store.set("llmd/group", json.dumps(group))
        readers = [f"llmd/read/{r}" for r in range(1, world)]
        until = min(time.time() + READ_WAIT_S, end_by)
        while time.time() < until and not store.check(readers):
            time.sleep(POLL_S)
        return group
    try:
        store.wait(["llmd/group"], timedelta(seconds=max(min(READ_WAIT_S, end_by - time.time()), 0.1)))
        group = json.loads(store.get("llmd/group"))
        store.set(f"llmd/read/{rank}", "1")
        return group if isinstance(group, dict) else None
    except Exception:  # noqa: BLE001 -- rank 0 gone or late: this host reports its own figures
        return None


def run_rank(rank: int, world: int, device: str, master: str, port: int, nbytes: int,
             budget_s: float, join_by: float, end_by: float, me: dict[str, Any],
             pairs: bool) -> int:
    """One rank: its steps and result as JSON lines on stdout (see the module)."""
    steps = Steps(rank)
    enter = steps.enter
    try:
        import torch
        import torch.distributed as dist

        on_gpu = device.startswith("cuda")
        if on_gpu:
            if not torch.cuda.is_available():
                _emit(rank, skip=f"torch {torch.__version__} sees no CUDA device: the all-reduce "
                                 "on GPUs needs torch with CUDA (--cpu K runs gloo)")
                return 0
            torch.cuda.set_device(device)
        enter("rendezvous")
        store, arrivals = join(dist, master, port, rank, world, join_by, end_by, me)
        peer = stream_peer(arrivals)
        line = None
        if peer is not None and rank in (0, peer):
            enter("stream")
            line = stream(store, rank, peer, me)
            if line is not None:
                _emit(rank, stream=line)
        enter("rendezvous")  # gloo's / NCCL's own connections, on the same store
        dist.init_process_group("nccl" if on_gpu else "gloo", store=dist.PrefixStore("llmd/pg", store),
                                rank=rank, world_size=world,
                                timeout=timedelta(seconds=_left(end_by - 1)))
        enter("warm-up")
        if pairs:
            done: dict[str, Any] = {"pairs": pairwise(torch, dist, rank, world, device, nbytes,
                                                      budget_s, enter)}
        else:
            done = timed_allreduce(torch, dist, rank, world, device, nbytes, 2, 10, budget_s, enter)
        done["steps_s"] = steps.done()
        store.set(f"llmd/done/{rank}", json.dumps(done))
        _emit(rank, group=share(store, rank, world, end_by, nbytes, arrivals, line))
        _emit(rank, done=done)
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 -- the child's boundary: any failure is reported, named
        _emit(rank, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
              step=steps.step)
        return 1
    return 0
