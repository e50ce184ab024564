"""Run every GPU probe and micro-kernel on this machine's GPUs and print one table:
what was measured, its ceiling, the ratio, and how long it took.

    .venv/bin/python benchmarks/gpu_probes.py            # level standard, and the all-reduce
    .venv/bin/python benchmarks/gpu_probes.py --full     # adds the sustained matmul load (30 s)

The all-reduce (gpu.collective, level full) runs at either level: it is what this table is
for; gpu.peer_to_peer gives a row per pair that must talk (NVML's read/write status, the copy
read back, what blocks it). With one GPU both are skipped with that reason. On a host without an NVIDIA GPU it says so
and exits 0. Figures, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from doctor.seam.host import Host  # noqa: E402
from doctor.seam.live import LiveHost
from doctor.model import Level, ProbeSpec, ScanOptions  # noqa: E402
from probes.gpu import collective  # noqa: E402
from probes.registry import PROBES  # noqa: E402
from doctor.runner import run_probes  # noqa: E402


# The registry's entry once it lists gpu.collective; until then the same block.
ALLREDUCE = next((p for p in PROBES if p.name == "gpu.collective"), None) or ProbeSpec(
    name="gpu.collective", level=Level.FULL, description="all-reduce bus bandwidth",
    reads="torch.distributed all-reduce in child processes", timeout_s=450.0,
    run=collective.probe, summary=collective.summary, exclusive=True)


def rows_for(result) -> list[tuple[str, str, str, str]]:
    """(what, measured, ceiling, ratio) rows from one probe's record."""
    r = result.record
    out: list[tuple[str, str, str, str]] = []
    if result.name == "gpu.bandwidth":
        for g in r.gpus:
            out.append((f"GPU{g.index} device copy (r+w)", f"{g.d2d_gbps} GB/s",
                        f"{g.d2d_ceiling_gbps} GB/s", f"{g.d2d_ratio}"))
            out.append((f"GPU{g.index} H2D pinned", f"{g.h2d_pinned_gbps} GB/s",
                        f"{g.link_ceiling_trained_gbps} GB/s trained / {g.link_ceiling_capable_gbps} capable",
                        f"{g.h2d_ratio_trained} / {g.h2d_ratio_capable}"))
            out.append((f"GPU{g.index} D2H pinned", f"{g.d2h_pinned_gbps} GB/s",
                        f"{g.link_ceiling_trained_gbps} GB/s", ""))
            out.append((f"GPU{g.index} H2D / D2H pageable",
                        f"{g.h2d_pageable_gbps} / {g.d2h_pageable_gbps} GB/s", "", ""))
        for p in r.peers:
            out.append((f"P2P GPU{p.a}->GPU{p.b}", f"{p.gbps} GB/s", "", f"peer access {p.peer_access}"))
        if r.first_use_s is not None and r.warm_use_s:
            out.append(("first CUDA op, fresh process", f"{r.first_use_s:.3f} s",
                        f"warm {r.warm_use_s * 1e6:.0f} us", f"{r.first_use_s / r.warm_use_s:.0f}x"))
        out.extend((f"error {k}", v[:60], "", "") for k, v in r.errors.items())
    elif result.name == "gpu.pcie":
        for g in r.gpus:
            out.append((f"GPU{g.index} link under load", f"Gen{g.gen_loaded} x{g.width_loaded}",
                        f"Gen{g.gen_max} x{g.width_max}", f"rest Gen{g.gen_current} x{g.width_current}"))
    elif result.name == "gpu.thermal_power":
        for g in r.gpus:
            out.append((f"GPU{g.index} temp / power" + (" (load)" if g.under_load else ""),
                        f"{g.temp_c} C / {g.power_w} W", f"slowdown {g.slowdown_c} C / {g.power_limit_w} W",
                        ",".join(g.reasons) or "no reasons"))
    elif result.name == "gpu.collective":
        for g in r.groups:
            what = f"all-reduce GPU {','.join(map(str, g.gpus))} ({(g.size_bytes or 0) >> 20} MiB)"
            if g.outcome != "ok":
                out.append((what, g.outcome, f"step {g.failed_step}", (g.failure or "")[:60]))
                continue
            out.append((what, f"busbw {g.busbw_gbps} GB/s", f"{g.ceiling_gbps} GB/s {g.path}",
                        f"{g.ratio} via {g.transport}"))
    elif result.name == "gpu.peer_to_peer":  # a row per pair that must talk
        for g in r.groups:
            for p in g.pairs:
                out.append((f"P2P check GPU{p.a}-GPU{p.b} {p.path}",
                            f"read {p.p2p_read} / write {p.p2p_write}",
                            f"copy {p.functional or r.functional_source}"[:36],
                            ("; ".join(p.blockers) or "open")[:60]))
    elif result.name == "gpu.kv_alloc":
        for s in r.scenarios:
            out.append((f"KV paged block {s.block_tokens}", f"waste {s.waste_fraction:.3f}",
                        "", f"allocator overhead {s.allocator_overhead_fraction}"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also the sustained load (level full)")
    parser.add_argument("--replay", metavar="DIR", help="print a recorded host's figures instead")
    args = parser.parse_args()
    if args.replay:
        from doctor.seam.recorded import RecordedHost

        host: Host = RecordedHost(args.replay)
    else:
        host = LiveHost()
    level = Level.FULL if args.full else Level.STANDARD
    gpu = tuple(p for p in PROBES if p.name.startswith("gpu.") and p.name != "gpu.collective")
    t0 = time.perf_counter()
    results = run_probes(gpu, host, ScanOptions(level=level))
    results += run_probes((ALLREDUCE,), host, ScanOptions(level=Level.FULL))
    if all(r.status == "skipped" for r in results):
        print(f"no NVIDIA GPU here: {results[0].reason}")
        return 0
    print(f"{'probe / measurement':42} {'measured':22} {'ceiling':36} {'ratio / note':24} time")
    for r in results:
        if r.status != "ok":
            print(f"{r.name:42} {r.status}: {r.reason}")
            continue
        rows = rows_for(r) or [(r.name, "ok", "", "")]
        for i, (what, measured, ceiling, ratio) in enumerate(rows):
            took = f"{r.duration_s:.2f}s" if i == 0 else ""
            print(f"{what:42} {measured:22} {ceiling:36} {ratio:24} {took}")
    print(f"total {time.perf_counter() - t0:.1f} s, level {level.name.lower()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
