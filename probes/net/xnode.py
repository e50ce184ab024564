"""net.collective: an all-reduce across hosts, its busbw against the line of the path it used.

The record of ``probes.kernels.xnode``'s JSON (``llm-doctor collective`` runs it on every
host: doctor/commands/collective.py): whether the group formed (the ranks that never joined,
named by the master), the step a failure stopped in, the socket interface the ranks bound to
and where that choice came from (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``, or the route
to the master), the line rate (``/sys/class/net/<if>/speed``, or InfiniBand's NIC rate x NICs),
the TCP stream measured between the same two addresses in the same run (the ceiling where the
interface reports no line rate: veth, bridges), busbw as nccl-tests computes it (algbw x
2(n-1)/n, decimal GB/s) and its ratio to the ceiling; with ``--pairwise`` each pair's busbw and
the suspect ranks. A scan cannot run it (it needs its peers): the command keeps its last
result in collective.json beside the daemon's state file, and the probe reads that back
(probes/helpers/collective_file.py) so that a scan and the daemon judge it, within a day of
the run. Its saved form is a saved scan with this one probe (``net.collective``), so that
``diff`` and the fleet read it like any other.
No root. Manual equivalent: nccl-tests' ``all_reduce_perf`` under ``mpirun``/``srun``, and
``iperf3`` for the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from doctor.values import finite_float
from probes.helpers import collective_file

SLOW_PAIR = 0.5  # a pair under half the best pair's busbw is slow (the health runners' cut)
_OUTCOMES = ("ok", "timeout", "failed")


@dataclass(frozen=True, slots=True)
class PairFigure:
    round: int
    ranks: tuple[int, int]
    busbw_gbps: float


@dataclass(frozen=True, slots=True)
class CrossNodeCollective:
    backend: str | None  # gloo (CPU) | nccl (GPU)
    master: str | None  # HOST:PORT of rank 0's TCP store
    rendezvous: str | None  # --master | torchrun | slurm: where the rank and world came from
    world: int | None
    ranks_here: tuple[int, ...]  # this host's ranks
    outcome: str  # ok | failed | timeout (killed at the hard limit)
    failed_step: str | None  # setup | start | rendezvous | stream | warm-up | timed
    failure: str | None  # one line: who was where, or the error
    missing_ranks: tuple[int, ...]  # ranks the master saw never join (on rank 0's host)
    interface: str | None  # the socket interface the ranks bound to
    interface_source: str | None  # "GLOO_SOCKET_IFNAME=eth1" or "the route to the master (...)"
    interface_kind: str | None  # physical | veth | bond | loopback ... (ip -d link)
    mtu: int | None
    mtu_mismatch: str | None  # the ranks' interfaces disagree on the MTU (rank 0's host)
    line_gbps: float | None  # one direction, GB/s: /sys/class/net/<if>/speed / 8000, or IB
    line_source: str | None
    stream_gbps: float | None  # TCP stream with the peer host, the slower direction, GB/s
    ceiling_gbps: float | None  # line_gbps, else stream_gbps
    ceiling_source: str | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    ratio: float | None  # busbw / ceiling
    pairs: tuple[PairFigure, ...]  # --pairwise, on rank 0's host
    suspects: tuple[int, ...]  # ranks slow in every pair they were in
    starved: str | None  # this host's CPU quota throttled its ranks during the run
    limit_s: float | None
    join_s: float | None
    total_s: float | None
    kill_latency_s: float | None
    # how old the result read from collective.json was (a scan, the daemon); None: this run
    age_s: float | None = None
    missing: dict[str, str] = field(default_factory=dict)  # absent values: why


def _text(data: Any, key: str, cut: int = 400) -> str | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value[:cut] if isinstance(value, str) else None


def _int(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(data: Any, key: str) -> float | None:
    return finite_float(data.get(key)) if isinstance(data, dict) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ranks(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(r for r in value[:1024] if isinstance(r, int) and not isinstance(r, bool))


def _pairs(value: Any) -> tuple[PairFigure, ...]:
    out = []
    for item in value[:512] if isinstance(value, list) else []:
        ranks = _ranks(item.get("pair")) if isinstance(item, dict) else ()
        busbw, number = _num(item, "busbw_gbps"), _int(item, "round")
        if len(ranks) == 2 and busbw is not None and number is not None:
            out.append(PairFigure(number, (ranks[0], ranks[1]), busbw))
    return tuple(out)


def suspects(pairs: tuple[PairFigure, ...]) -> tuple[int, ...]:
    """Ranks whose every pair is slow (under ``SLOW_PAIR`` of the best pair) while some pair
    is not: the host that drags each partner down. One pair alone names nobody: either side
    could be the slow one."""
    if len(pairs) < 2:
        return ()
    best = max(p.busbw_gbps for p in pairs)
    slow = {p.ranks for p in pairs if p.busbw_gbps < SLOW_PAIR * best}
    if not slow or len(slow) == len(pairs):
        return ()
    ranks = sorted({r for p in pairs for r in p.ranks})
    return tuple(r for r in ranks if all(p.ranks in slow for p in pairs if r in p.ranks))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CrossNodeCollective:
    """In a scan or the daemon: the last result ``llm-doctor collective`` kept on this host
    (probes/helpers/collective_file.py), judged by the same rules as the command's own. One
    host's scan cannot start its peers, so it never runs the all-reduce itself; a result that
    is absent, older than a day, from another machine or damaged is a skip saying why and
    what to run."""
    path = collective_file.DEFAULT_FILE if options.collective_file is None else options.collective_file
    try:
        result, age = collective_file.read(host, path)
    except collective_file.SavedError as exc:  # its message value, said in the report's language
        raise Skip(exc.args[0] if exc.args else str(exc)) from None
    return record(result, age_s=round(age, 1))


def record(data: dict[str, Any], age_s: float | None = None) -> CrossNodeCollective:
    """The record of the kernel's JSON; any field may be absent or hostile (a saved file).
    ``age_s``: how old the saved result is, where it was read back."""
    missing: dict[str, str] = {}
    outcome = data.get("outcome") if data.get("outcome") in _OUTCOMES else "failed"
    path, stream = _dict(data.get("path")), _dict(data.get("stream"))
    iface = _dict(path.get("interface"))
    pairs = _pairs(data.get("pairs"))
    busbw = _num(data, "busbw_gbps")
    if busbw is None:
        missing["busbw_gbps"] = f"not measured: {outcome}"
    line = _num(path, "line_gbps")
    if line is None:
        missing["line_gbps"] = _text(path, "line_source") or "no interface chosen"
    if _num(stream, "gbps") is None:
        missing["stream_gbps"] = ("measured on rank 0's host" if 0 not in _ranks(data.get("ranks_here"))
                                  else "no peer on another host, or the group never formed")
    ratio = _num(data, "ratio")
    if ratio is None:
        missing["ratio"] = missing.get("busbw_gbps") or "no ceiling"
    return CrossNodeCollective(
        backend=_text(data, "backend", 16), master=_text(data, "master", 300),
        rendezvous=_text(data, "rendezvous", 16), world=_int(data, "world"),
        ranks_here=_ranks(data.get("ranks_here")), outcome=str(outcome),
        failed_step=_text(data, "failed_step", 32), failure=_text(data, "failure"),
        missing_ranks=_ranks(data.get("missing")), interface=_text(iface, "name", 64),
        interface_source=_text(path, "source", 200), interface_kind=_text(iface, "kind", 32),
        mtu=_int(iface, "mtu"), mtu_mismatch=_text(data, "mtu_mismatch"),
        line_gbps=line, line_source=_text(path, "line_source"), stream_gbps=_num(stream, "gbps"),
        ceiling_gbps=_num(data, "ceiling_gbps"), ceiling_source=_text(data, "ceiling_source"),
        algbw_gbps=_num(data, "algbw_gbps"), busbw_gbps=busbw, ratio=ratio, pairs=pairs,
        suspects=suspects(pairs), starved=_text(data, "starved"), limit_s=_num(data, "limit_s"), join_s=_num(data, "join_s"),
        total_s=_num(data, "total_s"), kill_latency_s=_num(data, "kill_latency_s"),
        age_s=age_s, missing=missing)


def describe(r: CrossNodeCollective) -> list[str]:
    """The record for people, a few lines."""
    ranks = ",".join(map(str, r.ranks_here)) or "?"
    lines = [t("ranks {ranks} of {world} ({backend}, master {master}, from {source}): {outcome}",
               ranks=ranks, world=r.world if r.world is not None else "?",
               backend=r.backend or "?", master=r.master or "?", source=r.rendezvous or "?",
               outcome=r.outcome)]
    if r.interface:
        lines.append(t("  path: {interface} ({kind}, MTU {mtu}) chosen by {source}",
                       interface=r.interface, kind=r.interface_kind or "?",
                       mtu=r.mtu if r.mtu is not None else "?", source=r.interface_source))
    if r.missing_ranks:
        lines.append(t("  never joined: rank(s) {ranks}",
                       ranks=", ".join(map(str, r.missing_ranks))))
    if r.failure:
        lines.append(t("  {step}: {failure}", step=r.failed_step or "?", failure=r.failure))
    if r.busbw_gbps is not None:
        ceiling = (t(" = {ratio:g} of {ceiling:g} GB/s ({source})", ratio=r.ratio,
                     ceiling=r.ceiling_gbps, source=r.ceiling_source)
                   if r.ratio is not None and r.ceiling_gbps else "")
        lines.append(t("  busbw {busbw:g} GB/s{ceiling}", busbw=r.busbw_gbps, ceiling=ceiling))
    elif r.stream_gbps is not None:
        lines.append(t("  TCP stream with the peer host: {gbps:g} GB/s", gbps=r.stream_gbps))
    for note in (r.mtu_mismatch, r.starved):
        if note and note not in (r.failure or ""):
            lines.append(f"  {note}")
    for p in r.pairs:
        lines.append(t("  round {round}: ranks {a}-{b} busbw {busbw:g} GB/s", round=p.round,
                       a=p.ranks[0], b=p.ranks[1], busbw=p.busbw_gbps))
    if r.suspects:
        lines.append(t("  suspect: rank(s) {ranks} slow in every pair",
                       ranks=", ".join(map(str, r.suspects))))
    return lines


def summary(r: CrossNodeCollective) -> str:
    """One line: the first of ``describe``'s, with the busbw where it was measured (and how
    old the result is, where it was read back from collective.json)."""
    if r.busbw_gbps is None:
        line = describe(r)[0] + (f": {r.failure}" if r.failure else "")
    else:
        line = describe(r)[0] + t(": busbw {busbw:g} GB/s", busbw=r.busbw_gbps)
    return line + (t(" (saved {age} ago)", age=_ago(r.age_s)) if r.age_s is not None else "")


def _ago(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
