"""Runs probes: each under its own timeout, none able to sink the scan.

Read-only probes run side by side in threads; probes that measure the machine (micro-
kernels, disk reads) run after them, one at a time, so they neither disturb the CPU
sampling nor each other. A probe that overruns its timeout is reported as ``timeout`` and
left behind on a daemon thread; its late result is ignored.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable, Iterable

from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.model import ProbeResult, ProbeSpec, ScanOptions, Skip

_SHAPE_ERRORS = (TypeError, KeyError, ValueError, AttributeError, IndexError, OverflowError)

OnEvent = Callable[[str, ProbeSpec, ProbeResult | None], None]


class ProbeCall(threading.Thread):
    """One probe run on its own daemon thread: the isolation boundary the scan and the
    daemon share; ``result`` is set when it ends, whatever happens inside."""

    def __init__(self, spec: ProbeSpec, host: Host, options: ScanOptions) -> None:
        super().__init__(name=f"probe {spec.name}", daemon=True)
        self.spec, self.host, self.options = spec, host, options
        self.started_at = 0.0
        self.result: ProbeResult | None = None

    def run(self) -> None:
        self.started_at = time.perf_counter()
        status, reason, record = "ok", None, None
        try:
            record = self.spec.run(self.host, self.options)
        except Skip as exc:
            status, reason = "skipped", str(exc)
        except HostReadError as exc:
            status, reason = "error", str(exc)
        except MeasurementError as exc:
            status, reason = "error", str(exc)
        except RecursionError:
            status, reason = "error", "the data read is nested too deeply to be real"
        except Exception as exc:  # the isolation boundary: a probe's bug must not sink the scan
            where = traceback.extract_tb(exc.__traceback__)[-1]
            status = "error"
            at = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}"
            if self.host.kind == "recorded" and isinstance(exc, _SHAPE_ERRORS):
                # A hand-edited or damaged recording: say so, rather than blame the probe.
                reason = (f"the recording does not hold what this probe reads "
                          f"({type(exc).__name__}: {str(exc)[:200]} at {at}); check the files "
                          "against docs/recorded-host.md")
            else:
                reason = (f"internal error: {type(exc).__name__}: {str(exc)[:200]} "
                          f"({at}); please report it")
        duration = time.perf_counter() - self.started_at
        self.result = ProbeResult(self.spec.name, status, duration, reason, record,
                                  summarise(self.spec, record) if status == "ok" else "")


def summarise(spec: ProbeSpec, record: object) -> str:
    """The probe's one line for people, made where the probe ran so that renderers need not
    know the probes: a record its summary cannot read (a hand-written recording) says so."""
    if spec.summary is None:
        return ""
    try:
        return spec.summary(record)
    # The summary reads a record that may come from a recording of any shape: whatever it
    # trips on, the result still carries its record and the scan goes on.
    except Exception as exc:  # noqa: BLE001
        return f"(unreadable: {type(exc).__name__}: {str(exc)[:200]})"


def _finish(call: ProbeCall, deadline: float) -> ProbeResult:
    call.join(max(deadline - time.perf_counter(), 0))
    if call.result is not None:
        return call.result
    return ProbeResult(call.spec.name, "timeout", call.spec.timeout_s,
                       f"no result within {call.spec.timeout_s:g} s")


def run_probes(specs: Iterable[ProbeSpec], host: Host, options: ScanOptions,
               on_event: OnEvent | None = None) -> list[ProbeResult]:
    """Run the probes allowed at ``options.level``; results in registry order."""
    notify = on_event or (lambda *_: None)
    chosen = [s for s in specs if s.level <= options.level]
    results: dict[str, ProbeResult] = {}

    parallel = [s for s in chosen if not s.exclusive]
    calls = []
    for spec in parallel:
        call = ProbeCall(spec, host, options)
        notify("start", spec, None)
        call.start()
        calls.append((call, time.perf_counter() + spec.timeout_s))
    for call, deadline in calls:
        results[call.spec.name] = _finish(call, deadline)
        notify("done", call.spec, results[call.spec.name])

    for spec in (s for s in chosen if s.exclusive):
        call = ProbeCall(spec, host, options)
        notify("start", spec, None)
        call.start()
        results[spec.name] = _finish(call, time.perf_counter() + spec.timeout_s)
        notify("done", spec, results[spec.name])
    return [results[s.name] for s in chosen]
