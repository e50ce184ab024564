"""Runs probes: each under its own timeout, none able to sink the scan.

Read-only probes run side by side in threads; probes that measure the machine (micro-
kernels, disk reads) run after them, one at a time, so they neither disturb the CPU
sampling nor each other. A probe that overruns its timeout is reported as ``timeout`` and
left behind on a daemon thread; its late result is ignored.

A probe that builds on another's data names it in ``ProbeSpec.needs`` (engine.metrics needs
engine.discovery): it starts when what it needs has finished, each under its own timeout,
and is handed the records of its needs as its third argument (``Inputs``, doctor/inputs.py).
When a need did not end ``ok``, the probe is skipped with the need's reason (a need not
chosen in this run, a probe run on its own, computes what it needs itself, from
probes/helpers). ``ProbeSpec.after`` orders without skipping: the probe is handed those
records when they ended ok (engine.load reads /slots when /metrics is not there).

A probe that sends requests to an engine declares what it sends (``ProbeSpec.cost``); when
the options send none (``scan --no-requests``, the daemon by default) it is skipped here,
in the call the scan and the daemon share, without running at all.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from typing import Callable, Iterable

from doctor.i18n import Speaking, current, t
from doctor.i18n.text import Text, as_text, capturing, m, said
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.model import ProbeResult, ProbeSpec, ScanOptions, Skip, no_requests

_SHAPE_ERRORS = (TypeError, KeyError, ValueError, AttributeError, IndexError, OverflowError)

OnEvent = Callable[[str, ProbeSpec, ProbeResult | None], None]


class ProbeCall(threading.Thread):
    """One probe run on its own daemon thread: the isolation boundary the scan and the
    daemon share; ``result`` is set when it ends, whatever happens inside."""

    def __init__(self, spec: ProbeSpec, host: Host, options: ScanOptions,
                 done: "queue.SimpleQueue[ProbeCall] | None" = None,
                 inputs: Inputs = NO_INPUTS) -> None:
        super().__init__(name=f"probe {spec.name}", daemon=True)
        self.spec, self.host, self.options, self.inputs = spec, host, options, inputs
        self.lang = current()  # the scan's: its results' text face (``said``) speaks it
        self.started_at = 0.0
        self.result: ProbeResult | None = None
        self._done = done  # told when the result is set

    def run(self) -> None:
        # the probe's text (its summary, a skip's reason) as message values, in English
        # whatever language the process speaks: the renderers choose (doctor/i18n/text.py)
        with Speaking(self.lang), capturing():
            self._run()

    def _run(self) -> None:
        self.started_at = time.perf_counter()
        status, reason, record = "ok", None, None
        try:
            if self.spec.cost is not None and not self.options.requests:
                raise Skip(no_requests())
            record = self.spec.run(self.host, self.options, self.inputs)
        except Skip as exc:
            status, reason = "skipped", as_text(exc.args[0]) if exc.args else ""
        except HostReadError as exc:
            status, reason = "error", exc.text()
        except MeasurementError as exc:
            status, reason = "error", exc.text()
        except RecursionError:
            status, reason = "error", t("the data read is nested too deeply to be real")
        except Exception as exc:  # the isolation boundary: a probe's bug must not sink the scan
            where = traceback.extract_tb(exc.__traceback__)[-1]
            status = "error"
            at = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}"
            if self.host.kind == "recorded" and isinstance(exc, _SHAPE_ERRORS):
                # A hand-edited or damaged recording: say so, rather than blame the probe.
                reason = t("the recording does not hold what this probe reads ({error}: "
                           "{message} at {at}); check the files against docs/recorded-host.md",
                           error=type(exc).__name__, message=str(exc)[:200], at=at)
            else:
                reason = t("internal error: {error}: {message} ({at}); please report it",
                           error=type(exc).__name__, message=str(exc)[:200], at=at)
        duration = time.perf_counter() - self.started_at
        reason = None if reason is None else said(as_text(reason))
        self.result = ProbeResult(self.spec.name, status, duration, reason, record,
                                  said(summarise(self.spec, record)) if status == "ok" else "")
        if self._done is not None:
            self._done.put(self)


def summarise(spec: ProbeSpec, record: object) -> Text:
    """The probe's one line for people, made where the probe ran so that renderers need not
    know the probes: a record its summary cannot read (a hand-written recording) says so."""
    if spec.summary is None:
        return ""
    try:
        return as_text(spec.summary(record))
    # The summary reads a record that may come from a recording of any shape: whatever it
    # trips on, the result still carries its record and the scan goes on.
    except Exception as exc:  # noqa: BLE001
        return m("(unreadable: {error}: {message})", error=type(exc).__name__,
                 message=str(exc)[:200])


def status_text(status: str) -> Text:
    """A probe's status in words for people (the status itself stays in the results)."""
    return {"ok": m("ok"), "skipped": m("skipped"), "error": m("error"),
            "timeout": m("timeout")}.get(status, status)


def _timed_out(spec: ProbeSpec) -> ProbeResult:
    return ProbeResult(spec.name, "timeout", spec.timeout_s,
                       said(m("no result within {seconds:g} s", seconds=spec.timeout_s)))


def unmet(spec: ProbeSpec, results: dict[str, ProbeResult]) -> ProbeResult | None:
    """A skip for ``spec`` when something it needs ran and did not end ok, else None."""
    for name in spec.needs:
        need = results.get(name)
        if need is None or need.status == "ok":
            continue
        if need.status == "skipped":  # the same reason, so a family skipped for it reads as one
            return ProbeResult(spec.name, "skipped", 0.0, need.reason)
        return ProbeResult(spec.name, "skipped", 0.0,
                           said(m("needs {probe}, which ended {status}: {reason}", probe=name,
                                  status=status_text(need.status), reason=need.reason)))
    return None


def inputs_of(spec: ProbeSpec, results: dict[str, ProbeResult]) -> Inputs:
    """The records ``spec`` is handed: those of its needs and its ``after`` probes that
    ended ok in this run."""
    return Inputs({name: results[name].record for name in spec.needs + spec.after
                   if name in results and results[name].status == "ok"})


def _ready(spec: ProbeSpec, chosen: set[str], results: dict[str, ProbeResult]) -> bool:
    return all(n in results or n not in chosen for n in spec.needs + spec.after)


def _run_parallel(specs: list[ProbeSpec], chosen: set[str], host: Host, options: ScanOptions,
                  results: dict[str, ProbeResult], notify: OnEvent) -> None:
    """Start every probe whose needs have finished; wait for the next to finish or overrun."""
    done: queue.SimpleQueue[ProbeCall] = queue.SimpleQueue()
    waiting = list(specs)
    running: dict[str, tuple[ProbeCall, float]] = {}
    while waiting or running:
        ready = [s for s in waiting if _ready(s, chosen, results)]
        while ready:  # a skip decides at once, and may make the next probe ready
            spec = ready.pop(0)
            waiting.remove(spec)
            skipped = unmet(spec, results)
            notify("start", spec, None)
            if skipped is not None:
                results[spec.name] = skipped
                notify("done", spec, skipped)
                ready += [s for s in waiting if s not in ready and _ready(s, chosen, results)]
                continue
            call = ProbeCall(spec, host, options, done, inputs_of(spec, results))
            call.start()
            running[spec.name] = (call, time.perf_counter() + spec.timeout_s)
        if not running:
            if waiting:  # needs that can never finish: a registry error, said plainly
                for spec in waiting:
                    results[spec.name] = ProbeResult(
                        spec.name, "error", 0.0,
                        said(m("needs {probes}, which never ran", probes=", ".join(spec.needs))))
            return
        first = min(deadline for _, deadline in running.values())
        try:
            finished = [done.get(timeout=max(first - time.perf_counter(), 0))]
        except queue.Empty:
            finished = []
        now = time.perf_counter()
        for name, (call, deadline) in list(running.items()):
            if call in finished or call.result is not None:
                results[name] = call.result  # type: ignore[assignment]
            elif now >= deadline:
                results[name] = _timed_out(call.spec)
            else:
                continue
            del running[name]
            notify("done", call.spec, results[name])


def run_probes(specs: Iterable[ProbeSpec], host: Host, options: ScanOptions,
               on_event: OnEvent | None = None) -> list[ProbeResult]:
    """Run the probes allowed at ``options.level``; results in registry order."""
    notify = on_event or (lambda *_: None)
    chosen = [s for s in specs if s.level <= options.level]
    names = {s.name for s in chosen}
    results: dict[str, ProbeResult] = {}
    _run_parallel([s for s in chosen if not s.exclusive], names, host, options, results, notify)
    for spec in (s for s in chosen if s.exclusive):
        notify("start", spec, None)
        result = unmet(spec, results)
        if result is None:
            call = ProbeCall(spec, host, options, inputs=inputs_of(spec, results))
            call.start()
            call.join(spec.timeout_s)
            result = call.result if call.result is not None else _timed_out(spec)
        results[spec.name] = result
        notify("done", spec, result)
    return [results[s.name] for s in chosen]
