"""Runs probes on schedules suited to their cost, without ever stacking a hung probe.

Cheap read-only probes run every ``interval_s``; probes marked ``exclusive`` (micro-kernels,
disk reads) run every ``kernel_interval_s`` (0: only on demand, SIGUSR1), alone, and not
while an engine is serving unless the settings allow it. Each probe runs on its own thread
through ``doctor.runner``'s call object, so its exceptions map exactly as in a scan.

A probe still running when it falls due again is not started again: the scheduler reports
it as ``timeout`` with the reason "still running ... not started again", so a hung read
costs one thread, not one per interval. A probe whose thread cannot start (the process at
its thread or address-space limit) is an ``error`` of that probe; the beat goes on. Micro-kernels already run in child processes
(probes/kernels/) that their own timeouts kill.

A probe that needs another (``ProbeSpec.needs``) waits, when both are due, until that one
has finished this beat, then starts (``start_waiting``), or is skipped with its reason. It is
handed the records of its ``needs`` and ``after`` as a scan hands them (``runner.inputs_of``),
from the latest result the scheduler holds of each: this beat's for the cheap probes, the last
run's for an exclusive one (a STREAM figure measured when the kernels last ran).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.seam.host import Host
from doctor.model import ProbeResult, ProbeSpec, ScanOptions
from doctor.runner import ProbeCall, inputs_of, unmet  # the runner's boundary, reused as is
from doctor.i18n import t


@dataclass(slots=True)
class _Slot:
    spec: ProbeSpec
    next_due: float = 0.0
    call: ProbeCall | None = None
    started: float = 0.0
    timeout_reported: bool = False
    waiting: bool = False  # due, but a probe it needs has not finished this beat
    last: ProbeResult | None = None


@dataclass(slots=True)
class Cycle:
    """What one cycle started and finished: results in registry order."""

    started: list[str] = field(default_factory=list)
    results: list[ProbeResult] = field(default_factory=list)


class Scheduler:
    """Starts due probes and collects their results; never blocks on a probe."""

    def __init__(self, specs: tuple[ProbeSpec, ...], host: Host, options: ScanOptions,
                 interval_s: float, kernel_interval_s: float,
                 kernels_while_serving: bool = False) -> None:
        chosen = [s for s in specs if s.level <= options.level]
        self.slots = {s.name: _Slot(s) for s in chosen}
        self.host, self.options = host, options
        self.interval_s, self.kernel_interval_s = interval_s, kernel_interval_s
        self.kernels_while_serving = kernels_while_serving
        self.kernels_requested = True  # exclusive probes run once at start

    def reconfigure(self, specs: tuple[ProbeSpec, ...], options: ScanOptions, interval_s: float,
                    kernel_interval_s: float, kernels_while_serving: bool) -> None:
        """After a reload: keep the slots (and any hung call) of probes still chosen."""
        chosen = [s for s in specs if s.level <= options.level]
        self.slots = {s.name: self.slots.get(s.name) or _Slot(s) for s in chosen}
        self.options = options
        self.interval_s, self.kernel_interval_s = interval_s, kernel_interval_s
        self.kernels_while_serving = kernels_while_serving

    def request_kernels(self) -> None:
        """Run the exclusive probes at the next opportunity (SIGUSR1)."""
        self.kernels_requested = True

    def running(self) -> list[str]:
        return [n for n, s in self.slots.items() if s.call is not None and s.call.is_alive()]

    def busy(self) -> list[str]:
        """Running and not yet given up on (a hung probe is running but not busy)."""
        return [n for n, s in self.slots.items() if self._busy(s)]

    def start_due(self, now: float, serving: bool) -> Cycle:
        """Start the cheap probes that are due; the exclusive ones when nothing else runs."""
        cycle = Cycle()
        if any(s.spec.exclusive and self._busy(s) for s in self.slots.values()):
            return cycle  # a micro-kernel owns the machine: the cheap probes wait their turn
        due = [s for s in self.slots.values() if not s.spec.exclusive and s.next_due <= now]
        for slot in due:
            slot.waiting = bool(slot.spec.needs or slot.spec.after)
        for slot in due:
            if not slot.waiting:
                self._start_or_report(slot, now, self.interval_s, cycle)
        for slot in due:
            if slot.waiting:
                slot.next_due = now + self.interval_s
        return self._start_ready(now, cycle)

    def waiting(self) -> list[str]:
        return [n for n, s in self.slots.items() if s.waiting]

    def start_waiting(self, now: float) -> Cycle:
        """Start the waiting probes whose needs have finished (skip those whose needs failed)."""
        return self._start_ready(now, Cycle())

    def _start_ready(self, now: float, cycle: Cycle) -> Cycle:
        for slot in self.slots.values():
            if not slot.waiting or any(self._pending(self.slots[n])
                                       for n in slot.spec.needs + slot.spec.after if n in self.slots):
                continue
            slot.waiting = False
            skipped = unmet(slot.spec, {n: s.last for n, s in self.slots.items() if s.last})
            if skipped is not None:
                slot.last = skipped
                cycle.results.append(skipped)
                continue
            every = slot.next_due - now if slot.next_due > now else self.interval_s
            self._start_or_report(slot, now, every, cycle)
        return cycle

    def _pending(self, slot: _Slot) -> bool:
        """Waiting, busy, or finished but not collected: its result is not yet the one the
        probes after it are judged by (``unmet``) and handed (``inputs_of``)."""
        return slot.waiting or self._busy(slot) or (
            slot.call is not None and slot.call.result is not None and not slot.timeout_reported)

    def start_kernels(self, now: float, serving: bool) -> Cycle:
        """Start exclusive probes when due (or requested) and no other probe is busy."""
        cycle = Cycle()
        due = [s for s in self.slots.values() if s.spec.exclusive
               and (self.kernels_requested or (self.kernel_interval_s > 0 and s.next_due <= now))]
        if not due:
            return cycle
        if serving and not self.kernels_while_serving:
            for slot in due:
                slot.next_due = now + (self.kernel_interval_s or self.interval_s)
                cycle.results.append(ProbeResult(
                    slot.spec.name, "skipped", 0.0,
                    "an engine is serving: micro-kernels wait (daemon.kernels_while_serving)"))
            self.kernels_requested = False
            return cycle
        if any(self._busy(s) for s in self.slots.values()):
            return cycle  # the beat's cheap probes first: the daemon calls this after them
        self.kernels_requested = False
        skipped = unmet(due[0].spec, {n: s.last for n, s in self.slots.items() if s.last})
        if skipped is not None:
            due[0].next_due, due[0].last = now + (self.kernel_interval_s or self.interval_s), skipped
            cycle.results.append(skipped)
            return cycle
        self._start_or_report(due[0], now, self.kernel_interval_s, cycle)  # one at a time
        return cycle

    def collect(self, now: float) -> list[ProbeResult]:
        """Results of calls that finished, and a timeout for each that overran (once)."""
        out = []
        for slot in self.slots.values():
            call = slot.call
            if call is None:
                continue
            if call.result is not None:
                if not slot.timeout_reported:
                    out.append(call.result)  # a late result after a timeout is ignored
                    slot.last = call.result
                slot.call = None
            elif not slot.timeout_reported and now - slot.started > slot.spec.timeout_s:
                slot.timeout_reported = True
                slot.last = ProbeResult(slot.spec.name, "timeout", slot.spec.timeout_s,
                                        t("no result within {timeout:g} s",
                                          timeout=slot.spec.timeout_s))
                out.append(slot.last)
        return out

    def _busy(self, slot: _Slot) -> bool:
        """Running and not yet given up on: a hung probe does not hold the others back."""
        return slot.call is not None and slot.call.is_alive() and not slot.timeout_reported

    def _start_or_report(self, slot: _Slot, now: float, every: float, cycle: Cycle) -> None:
        slot.next_due = now + every
        if slot.call is not None and slot.call.is_alive():
            if slot.timeout_reported:  # hung: say so on every beat, start nothing
                cycle.results.append(ProbeResult(
                    slot.spec.name, "timeout", now - slot.started,
                    t("still running since {seconds:.0f} s ago; not started again",
                      seconds=now - slot.started)))
            return
        slot.call = ProbeCall(slot.spec, self.host, self.options, inputs=inputs_of(
            slot.spec, {n: s.last for n, s in self.slots.items() if s.last is not None}))
        slot.started, slot.timeout_reported = now, False
        try:
            slot.call.start()
        except RuntimeError as exc:  # "can't start new thread": this probe, not the beat, fails
            slot.call = None
            cycle.results.append(ProbeResult(
                slot.spec.name, "error", 0.0,
                t("cannot start a thread for this probe ({error}): the daemon is at its thread or "
                  "address-space limit (ulimit -u, ulimit -v); tried again at its next run",
                  error=exc)))
            return
        cycle.started.append(slot.spec.name)
