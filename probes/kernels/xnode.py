"""All-reduce across hosts: this host's ranks join a group whose master may be elsewhere.

Run on every host (``python -m probes.kernels.xnode --master 10.0.0.1:29500 --rank 1 --world
2 --cpu 1``, or under torchrun or srun with no rendezvous flags: probes/helpers/rendezvous.py).
The launcher never imports torch; it

1. resolves the rendezvous, and the path: the socket interface the ranks will bind
   (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` where set, which is what is under test and
   is kept as given; else the interface holding the address the kernel routes to the master,
   which is then given to gloo/NCCL so that they cannot bind another) and its line rate
   (probes/helpers/net_path.py). An interface named but missing, down or without an address,
   or no route to the master, ends this host's part at once (step "setup"): the master then
   names this host's ranks as never joined;
2. starts one worker per local rank (probes/helpers/xnode_rank.py), each in a process group of
   its own, with a join deadline (``--join-s``, default half the hard limit) and an end
   deadline (1.5 s before the hard limit) that gloo's / the store's timeouts are set from;
3. at ``--limit-s`` kills every worker's process group (SIGKILL), as the single-host kernel does.

Prints one JSON object: ``outcome`` ok / failed / timeout, ``failure`` (one line), ``missing``
(the ranks the master saw never join), the path, the TCP stream (the ceiling when the
interface reports no line rate), busbw and its ratio to the line; with ``--pairwise`` each
pair's busbw and the suspect rank. ``{"skip": why}`` when torch is not installed.
Manual equivalent: ``torchrun --nnodes 2 ... all_reduce_perf_mpi`` (nccl-tests) or ``iperf3``
for the line.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from typing import Any

from doctor.seam.host import HostReadError
from doctor.seam.live import LiveHost
from probes.helpers import cgroups, net_path
from probes.helpers.kernel_child import kernel_env
from probes.helpers.kernel_cli import OneLineParser
from probes.helpers.rendezvous import RendezvousError, resolve
from probes.helpers import collective_ranks as ar
from probes.helpers.xnode_rank import run_rank

MIN_LIMIT_S, MAX_LIMIT_S = 5.0, 600.0
STARVED_S = 0.5  # throttled this long in one run: the quota is part of the story
END_MARGIN_S = 1.5  # the workers' own timeouts end this long before the launcher's SIGKILL


def cpu_quota(pid: int) -> dict[str, Any] | None:
    """A process's CPU quota (its cgroup, v1 or v2: probes/helpers/cgroups.py) and the
    throttled seconds its cgroup has counted; None where there is no quota or no cgroup."""
    try:
        host = LiveHost()
        q = cgroups.cpu_quota(host, cgroups.cgroup_dir(host, pid, "cpu"))
    except (HostReadError, OSError, ValueError):
        return None
    if q.quota_cpus is None:
        return None
    return {"cpus": q.quota_cpus, "where": q.directory[:200], "throttled_s": q.throttled_s}


def starved(rank: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """One line where a rank ran under a CPU quota that throttled it: the seconds of this run
    where its cgroup is the one it started in, else all its new cgroup has counted."""
    if not after or after.get("throttled_s") is None:
        return None
    same = before is not None and before.get("where") == after["where"]
    took = after["throttled_s"] - (before.get("throttled_s") or 0.0 if same and before else 0.0)
    if took < STARVED_S:
        return None
    return (f"rank {rank} is held to {after['cpus']:g} CPU by its cgroup ({after['where']}) and "
            f"was throttled {took:.1f} s" + (" of this run" if same else ""))


def _setup_failure(step: str, why: str, **extra: Any) -> dict[str, Any]:
    return {"outcome": "failed", "failed_step": step, "failure": why, "missing": [], **extra}


def choose_path(master: str, port: int, on_gpu: bool, env: dict[str, str]) -> dict[str, Any]:
    """The interface the ranks bind and its line rate; ``problem`` set where it cannot work."""
    var = "NCCL_SOCKET_IFNAME" if on_gpu else "GLOO_SOCKET_IFNAME"
    found, why = net_path.links()
    route_addr, route_why = net_path.address_towards(master, port)
    path: dict[str, Any] = {"variable": var, "route_address": route_addr}
    route_name = net_path.holding(route_addr, found) if route_addr else None
    if env.get(var, "").strip():
        path["source"] = f"{var}={env[var][:64]}"
        name, problem = net_path.pick(env[var], [str(d["ifname"]) for d in found], route_name,
                                      prefix=on_gpu)
        if name is None:
            return {**path, "problem": problem, "interface": None}
        iface = net_path.interface(name, found)
    elif route_addr is None:
        return {**path, "source": "route", "problem": route_why, "interface": None}
    else:
        path["source"] = f"the route to the master (source address {route_addr})"
        if route_name is None:
            return {**path, "problem": why or f"no interface holds {route_addr}", "interface": None}
        iface = net_path.interface(route_name, found)
    path["interface"], path["problem"] = iface, iface.get("problem") or _loopback(iface, route_addr)
    if not path["problem"] and route_addr is None:
        path["problem"] = route_why
    addresses = iface.get("addresses") or []
    path["address"] = route_addr if route_addr in addresses else next(
        (a for a in addresses if ":" not in a), addresses[0] if addresses else None)
    path.update(line_rate(iface, on_gpu, env))
    return path


def _loopback(iface: dict[str, Any], route_addr: str | None) -> str | None:
    """A loopback bind where the master is another host: no peer can reach it (NCCL's
    "Bootstrap: Using lo" after an exclusion list that left lo in)."""
    try:
        remote = route_addr is not None and not ipaddress.ip_address(route_addr).is_loopback
    except ValueError:
        remote = False
    if iface.get("kind") == "loopback" and remote:
        return f"{iface['name']} is the loopback: a rank on another host cannot reach it"
    return None


def line_rate(iface: dict[str, Any], on_gpu: bool, env: dict[str, str]) -> dict[str, Any]:
    """GB/s of the path, one direction: IB ports (NCCL) or the interface's speed."""
    ports = net_path.ib_ports() if on_gpu and env.get("NCCL_IB_DISABLE", "0") != "1" else []
    if ports:
        total = sum(p["gbit"] for p in ports)
        return {"line_gbps": round(total / 8, 3), "line_source":
                f"InfiniBand: {len(ports)} active port(s), {total:g} Gb/s together (NIC rate x NICs)"}
    speed = iface.get("speed_mbps")
    if speed:
        return {"line_gbps": round(speed / 8000, 3),
                "line_source": f"{iface['name']}: {speed} Mb/s (/sys/class/net/{iface['name']}/speed)"}
    return {"line_gbps": None, "line_source": iface.get("speed_missing") or "no speed"}


def _worker_env(workdir: str, rank: int, path: dict[str, Any], on_gpu: bool) -> dict[str, str]:
    """This process's environment, the user's NCCL_*/GLOO_* kept (they are under test); the
    chosen interface given where the user named none."""
    env = kernel_env(dict(os.environ))
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if not env.get(path["variable"]) and path.get("interface"):
        env[path["variable"]] = path["interface"]["name"]
    if on_gpu:
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NVML's indexes, as gpu.collective
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET")
        env["NCCL_DEBUG_FILE"] = os.path.join(workdir, f"nccl.{rank}.log")
    return env


def launch(rv: Any, devices: list[str], nbytes: int, limit_s: float, budget_s: float,
           join_s: float, pairwise: bool, path: dict[str, Any]) -> dict[str, Any]:
    """Start this host's ranks and watch them to the hard limit (see the module)."""
    started, epoch = time.perf_counter(), time.time()
    on_gpu = devices[0].startswith("cuda")
    iface = path.get("interface") or {}
    me = {"host": os.uname().nodename[:64], "addr": path.get("address"),
          "ifname": iface.get("name"), "mtu": iface.get("mtu")}
    with tempfile.TemporaryDirectory(prefix="llm-doctor-xnode-") as workdir:
        ranks: list[ar.Rank] = []
        sel = selectors.DefaultSelector()
        try:
            for i, device in enumerate(devices):
                rank = rv.rank + i
                argv = [sys.executable, "-m", "probes.kernels.xnode", "--worker",
                        "--rank", str(rank), "--world", str(rv.world), "--device", device,
                        "--master-addr", rv.master_addr, "--port", str(rv.master_port),
                        "--bytes", str(nbytes), "--budget-s", str(budget_s),
                        "--join-by", repr(epoch + join_s),
                        "--end-by", repr(epoch + limit_s - END_MARGIN_S), "--me", json.dumps(me)]
                argv += ["--pairwise"] if pairwise else []
                stderr = open(os.path.join(workdir, f"stderr.{rank}"), "w+b")
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr,
                                        stdin=subprocess.DEVNULL,
                                        env=_worker_env(workdir, rank, path, on_gpu),
                                        process_group=0, preexec_fn=ar.dying_with(os.getpid()))
                ranks.append(ar.Rank(rank, proc, stderr))
                assert proc.stdout is not None
                os.set_blocking(proc.stdout.fileno(), False)
                sel.register(proc.stdout, selectors.EVENT_READ, ranks[-1])
            quota = [cpu_quota(r.proc.pid) for r in ranks]
            outcome, failure = ar.watch(sel, ranks, started + limit_s)
            notes = [starved(r.rank, q, cpu_quota(r.proc.pid)) for r, q in zip(ranks, quota)]
        finally:
            kill_s = ar.kill(ranks) if any(r.proc.poll() is None for r in ranks) else None
            for r in ranks:
                r.stderr.close()
                if r.proc.stdout is not None:
                    r.proc.stdout.close()
            sel.close()
        nccl = ar.nccl_lines(workdir) if on_gpu else []
    if outcome == "skip":
        return {"skip": failure}
    out = result(rv, devices, nbytes, ranks, outcome, failure, nccl, limit_s, join_s,
                 kill_s if outcome != "ok" else None, time.perf_counter() - started, path)
    out["starved"] = "; ".join(n for n in notes if n) or None
    if out["starved"] and out["failure"]:
        out["failure"] = f"{out['failure']}; {out['starved']}"
    return out


def result(rv: Any, devices: list[str], nbytes: int, ranks: list[ar.Rank], outcome: str,
           failure: str | None, nccl_lines: list[str], limit_s: float, join_s: float,
           kill_s: float | None, total_s: float, path: dict[str, Any]) -> dict[str, Any]:
    """The launcher's JSON (see the module)."""
    extra = ranks[0].extra if ranks else {}  # rank 0's where it runs here, else this host's first
    missing = [int(r) for r in extra.get("missing", []) if isinstance(r, int)]
    counts = ar.parse_transports(nccl_lines)
    out: dict[str, Any] = {
        "mode": "pairwise" if any(r.done and "pairs" in r.done for r in ranks) else "group",
        "backend": "nccl" if devices[0].startswith("cuda") else "gloo",
        "master": f"{rv.master_addr}:{rv.master_port}", "rendezvous": rv.source,
        "world": rv.world, "ranks_here": [r.rank for r in ranks], "bytes": nbytes,
        "outcome": outcome, "failure": failure, "failed_step": None, "missing": missing,
        "path": path, "limit_s": limit_s, "join_s": join_s,
        "kill_latency_s": None if kill_s is None else round(kill_s, 4), "total_s": round(total_s, 3),
        "transports": counts, "transport": ar.chosen_transport(counts),
        "stream": extra.get("stream") or _group(extra).get("stream"),
        "ranks": [{"rank": r.rank, "step": r.step, "done": r.done is not None} for r in ranks],
    }
    if outcome == "timeout":
        step, who = ar.stuck_step(ranks)
        out["failed_step"] = step
        out["failure"] = f"no result within the {limit_s:g} s limit: {who}; killed"
    elif outcome == "failed":
        out["failed_step"] = next((r.step or "start" for r in ranks if r.failure()), None)
    group = _group(extra)
    out["pairs"] = group.get("pairs") or []
    out["arrivals"] = group.get("arrivals") or {}
    out["mtu_mismatch"] = mtu_mismatch(out["arrivals"])
    done = [r.done for r in ranks if r.done]
    seconds = group.get("seconds") or max((float(d["seconds"]) for d in done if "seconds" in d),
                                          default=None)
    if outcome == "ok" and seconds:
        algbw = nbytes / float(seconds) / 1e9
        out.update(seconds=seconds, algbw_gbps=round(algbw, 4),
                   busbw_gbps=round(ar.bus_bandwidth(algbw, rv.world), 4))
    out.update(ceiling(path, out["stream"], out.get("busbw_gbps")))
    return out


def _group(extra: dict[str, Any]) -> dict[str, Any]:
    group = extra.get("group")
    return group if isinstance(group, dict) else {}


def mtu_mismatch(arrivals: Any) -> str | None:
    """One line where the ranks' interfaces disagree on the MTU, else None. TCP's MSS hides a
    mismatch on a direct link (each side sends what the other advertised); a switch or a
    tunnel in between drops what exceeds its MTU, and RDMA and UDP do not negotiate."""
    if not isinstance(arrivals, dict):
        return None
    mtus = {str(r): a.get("mtu") for r, a in arrivals.items()
            if isinstance(a, dict) and isinstance(a.get("mtu"), int)}
    if len(set(mtus.values())) < 2:
        return None
    return "MTU differs between ranks: " + ", ".join(
        f"rank {r} {arrivals[r].get('ifname')} {m}" for r, m in sorted(mtus.items())[:16])


def ceiling(path: dict[str, Any], stream: Any, busbw: float | None) -> dict[str, Any]:
    """The line the busbw is held against: the interface's rate, else the TCP stream's."""
    gbps, source = path.get("line_gbps"), path.get("line_source")
    if not gbps and isinstance(stream, dict) and stream.get("gbps"):
        gbps = stream["gbps"]
        source = (f"a TCP stream with rank {stream.get('peer')}, its slower direction; "
                  f"{source or 'no line rate'}")
    ratio = round(busbw / gbps, 3) if busbw and gbps else None
    return {"ceiling_gbps": gbps, "ceiling_source": source, "ratio": ratio}


def _worker(args: argparse.Namespace) -> int:
    return run_rank(args.rank, args.world, args.device, args.master_addr, args.port,
                    args.bytes or ar.CPU_BYTES, min(max(args.budget_s, 0.1), 60.0), args.join_by,
                    args.end_by, json.loads(args.me), args.pairwise)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="xnode", description=__doc__.splitlines()[0])
    parser.add_argument("--master", default=None, help="HOST:PORT of rank 0's rendezvous")
    parser.add_argument("--rank", type=int, default=None, help="this host's first rank")
    parser.add_argument("--world", type=int, default=None, help="ranks in all, every host's")
    parser.add_argument("--devices", default=None, help="this host's GPUs (NVML indexes), NCCL")
    parser.add_argument("--cpu", type=int, default=0, help="K ranks on this host's CPU, gloo")
    parser.add_argument("--bytes", type=int, default=None, help="message size")
    parser.add_argument("--limit-s", type=float, default=60.0, help="hard limit, 5-600 s")
    parser.add_argument("--join-s", type=float, default=None, help="join bound (half the limit)")
    parser.add_argument("--budget-s", type=float, default=3.0, help="for the timed all-reduces")
    parser.add_argument("--pairwise", action="store_true", help="pairs, rotated: the bad host")
    for name in ("--master-addr", "--device", "--me"):
        parser.add_argument(name, default="", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    for name in ("--join-by", "--end-by"):
        parser.add_argument(name, type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    print(json.dumps(run(args)))
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole launcher for parsed arguments: setup failures as results, never raised."""
    limit = min(max(args.limit_s, MIN_LIMIT_S), MAX_LIMIT_S)
    join_s = min(max(args.join_s or limit / 2, 1.0), limit - END_MARGIN_S - 1)
    try:
        rv = resolve(args.master, args.rank, args.world, os.environ)
    except RendezvousError as exc:
        return _setup_failure("setup", str(exc))
    try:
        if args.devices == "local":  # torchrun / srun: one rank a process, its GPU by local rank
            visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
            # srun --gpus-per-task=1 leaves each task one visible GPU: its index 0
            devices = [f"cuda:{0 if len(visible) == 1 else rv.local_rank}"]
        elif args.devices:
            devices = [f"cuda:{int(i)}" for i in args.devices.split(",")]
        else:
            devices = ["cpu"] * (args.cpu or 1)
    except ValueError:
        return _setup_failure("setup", f"--devices {args.devices[:40]!r}: GPU indexes, e.g. 0,1")
    if rv.rank + len(devices) > rv.world:
        return _setup_failure("setup", f"ranks {rv.rank}-{rv.rank + len(devices) - 1} here but "
                              f"the world is {rv.world}: --rank N starts this host's ranks")
    nbytes = args.bytes or (ar.GPU_BYTES if args.devices else ar.CPU_BYTES)
    if not 4 <= nbytes <= 8 << 30:
        return _setup_failure("setup", f"--bytes {nbytes}: between 4 and 8 GiB")
    path = choose_path(rv.master_addr, rv.master_port, bool(args.devices), dict(os.environ))
    if path.get("problem"):
        return _setup_failure("setup", f"{path['source']}: {path['problem']}", path=path,
                              ranks_here=list(range(rv.rank, rv.rank + len(devices))),
                              master=f"{rv.master_addr}:{rv.master_port}", world=rv.world)
    if importlib.util.find_spec("torch") is None:
        return {"skip": f"torch is not installed for {sys.executable} (`pip install torch`): "
                        "the all-reduce runs on torch.distributed"}
    try:
        return launch(rv, devices, nbytes - nbytes % 4, limit, min(max(args.budget_s, 0.1), 60.0),
                      join_s, args.pairwise, path)
    except OSError as exc:
        return _setup_failure("start", f"cannot start the workers: {exc.strerror or exc}")


if __name__ == "__main__":
    sys.exit(main())
