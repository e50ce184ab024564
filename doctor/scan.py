"""One scan: run the probes on a host, evaluate the rules, return the report."""

from __future__ import annotations

import time

from doctor.config import Config
from doctor.seam.host import Host
from doctor.model import ProbeSpec, ScanOptions, ScanReport
from doctor.rules.loader import Rule
from doctor.rules.evaluate import evaluate
from doctor.runner import OnEvent, run_probes


def scan(host: Host, options: ScanOptions, probes: tuple[ProbeSpec, ...], rules: list[Rule],
         config: Config | None = None, on_event: OnEvent | None = None) -> ScanReport:
    started = time.time()
    t0 = time.perf_counter()
    host.new_scan()
    results = run_probes(probes, host, options, on_event)
    findings, rule_errors = evaluate(rules, results, config)
    return ScanReport(
        host=host.describe(),
        level=options.level,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        duration_s=round(time.perf_counter() - t0, 3),
        probes=results,
        findings=findings,
        rule_errors=rule_errors,
    )
