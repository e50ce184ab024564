"""Where a cross-host collective meets: the master's address and port, this process's rank
and the world size, from the command line, torchrun's variables or Slurm's.

Three sources, the first that is complete wins, in this order:

- the command line: ``--master HOST:PORT --rank N --world W``;
- torchrun (and torch.distributed's env:// init): ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``;
- Slurm (``srun``): ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the master is
  ``MASTER_ADDR`` where set, else ``SLURM_LAUNCH_NODE_IPADDR`` (the node srun ran on, which
  Slurm sets for every task), else the first host of ``SLURM_STEP_NODELIST`` /
  ``SLURM_JOB_NODELIST`` (``gpu[01-04,07]`` -> ``gpu01``); the port ``MASTER_PORT`` where set,
  else one derived from the job id (``PORT_BASE + SLURM_JOB_ID % PORT_SPAN``), the same on
  every task of the job and different for jobs running side by side.

Pure functions of their arguments: no read of the host, so a test gives them any environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

MAX_WORLD = 1024
PORT_BASE, PORT_SPAN = 20000, 20000  # Slurm without MASTER_PORT: 20000-39999 by job id
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]")


class RendezvousError(ValueError):
    """One line: which value was wrong and what to pass instead."""


@dataclass(frozen=True, slots=True)
class Rendezvous:
    master_addr: str  # host name or address (IPv6 without brackets)
    master_port: int
    rank: int  # this process's first rank
    world: int  # ranks in the whole group, every host's
    local_rank: int  # the device index on this host (LOCAL_RANK / SLURM_LOCALID), else 0
    source: str  # "--master", "torchrun" or "slurm": where the values came from


def parse_master(text: str) -> tuple[str, int]:
    """``"10.0.0.1:29500"``, ``"node01:29500"`` or ``"[fd00::1]:29500"`` -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not _HOST.fullmatch(host):
        raise RendezvousError(f"--master {text[:80]!r}: HOST:PORT, e.g. 10.0.0.1:29500 or "
                              "[fd00::1]:29500")
    return host.strip("[]"), _port(port, "--master's port")


def _port(text: str, what: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise RendezvousError(f"{what} {text[:20]!r}: a TCP port, 1-65535")
    return int(text)


def _number(text: str | None, what: str, low: int, high: int) -> int:
    if text is None or not text.strip().isdigit() or not low <= int(text) <= high:
        raise RendezvousError(f"{what} {str(text)[:20]!r}: a whole number, {low}-{high}")
    return int(text)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: ``gpu[01-04,07],cpu1`` -> ``gpu01``."""
    match = re.match(r"\s*([A-Za-z0-9.\-]+)(?:\[([0-9]+)[^\]]*\])?([A-Za-z0-9.\-]*)", nodelist)
    if not match or not match.group(1):
        raise RendezvousError(f"SLURM_STEP_NODELIST {nodelist[:80]!r}: no host in it")
    return match.group(1) + (match.group(2) or "") + (match.group(3) or "")


def _slurm_master(env: Mapping[str, str]) -> tuple[str, int]:
    addr = env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR")
    if not addr:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodes:
            raise RendezvousError("under Slurm but no SLURM_LAUNCH_NODE_IPADDR or node list: "
                                  "run it with srun, or pass --master HOST:PORT")
        addr = first_host(nodes)
    if env.get("MASTER_PORT"):
        return addr, _port(env["MASTER_PORT"], "MASTER_PORT")
    job = _number(env.get("SLURM_JOB_ID"), "SLURM_JOB_ID", 0, 1 << 62)
    return addr, PORT_BASE + job % PORT_SPAN


def resolve(master: str | None, rank: int | None, world: int | None,
            env: Mapping[str, str]) -> Rendezvous:
    """The rendezvous from the first complete source (see the module); RendezvousError."""
    if master is not None or rank is not None or world is not None:
        if master is None or rank is None or world is None:
            raise RendezvousError("--master, --rank and --world go together: e.g. "
                                  "--master 10.0.0.1:29500 --rank 1 --world 2")
        addr, port = parse_master(master)
        out = Rendezvous(addr, port, rank, world, 0, "--master")
    elif "RANK" in env and "WORLD_SIZE" in env:
        if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
            raise RendezvousError("RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT "
                                  "is not: torchrun sets all four")
        out = Rendezvous(env["MASTER_ADDR"].strip("[]"), _port(env["MASTER_PORT"], "MASTER_PORT"),
                         _number(env["RANK"], "RANK", 0, MAX_WORLD - 1),
                         _number(env["WORLD_SIZE"], "WORLD_SIZE", 1, MAX_WORLD),
                         _number(env.get("LOCAL_RANK", "0"), "LOCAL_RANK", 0, MAX_WORLD - 1),
                         "torchrun")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        addr, port = _slurm_master(env)
        out = Rendezvous(addr, port, _number(env["SLURM_PROCID"], "SLURM_PROCID", 0, MAX_WORLD - 1),
                         _number(env["SLURM_NTASKS"], "SLURM_NTASKS", 1, MAX_WORLD),
                         _number(env.get("SLURM_LOCALID", "0"), "SLURM_LOCALID", 0, MAX_WORLD - 1),
                         "slurm")
    else:
        raise RendezvousError("no rendezvous: pass --master HOST:PORT --rank N --world W, or run "
                              "under torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) or "
                              "srun (SLURM_PROCID, SLURM_NTASKS)")
    if not 2 <= out.world <= MAX_WORLD:
        raise RendezvousError(f"world {out.world}: an all-reduce across hosts needs 2 to "
                              f"{MAX_WORLD} ranks")
    if not 0 <= out.rank < out.world:
        raise RendezvousError(f"rank {out.rank}: ranks are 0-{out.world - 1} in a world of {out.world}")
    return out
