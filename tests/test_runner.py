"""A probe that fails, hangs or skips never sinks the scan; each gets its status and time."""

from __future__ import annotations

import time
from dataclasses import dataclass

from doctor.seam.live import LiveHost
from doctor.model import Level, ProbeSpec, ScanOptions, Skip
from doctor.runner import run_probes


@dataclass(frozen=True, slots=True)
class Value:
    x: int


def ok(host, options, inputs=None):
    return Value(1)


def skip(host, options, inputs=None):
    raise Skip("no GPU on this host")


def unreadable(host, options, inputs=None):
    return host.read_text("/nonexistent/proc/file")


def buggy(host, options, inputs=None):
    return {}["missing"]


def hang(host, options, inputs=None):
    time.sleep(30)


def spec(name, fn, level=Level.QUICK, timeout_s=5.0, exclusive=False):
    return ProbeSpec(name, level, "test probe", "nothing", timeout_s, fn, exclusive)


def test_every_outcome_is_recorded_and_the_scan_goes_on():
    specs = (
        spec("t.hang", hang, timeout_s=0.3),
        spec("t.ok", ok),
        spec("t.skip", skip),
        spec("t.unreadable", unreadable),
        spec("t.buggy", buggy),
        spec("t.exclusive", ok, exclusive=True),
        spec("t.standard", ok, level=Level.STANDARD),
    )
    events = []
    t0 = time.perf_counter()
    results = run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK),
                         lambda event, s, r: events.append((event, s.name)))
    assert time.perf_counter() - t0 < 5  # the hung probe did not hold the scan
    by = {r.name: r for r in results}
    assert list(by) == ["t.hang", "t.ok", "t.skip", "t.unreadable", "t.buggy", "t.exclusive"]
    assert by["t.hang"].status == "timeout" and "0.3 s" in by["t.hang"].reason
    assert by["t.ok"].status == "ok" and by["t.ok"].record == Value(1)
    assert (by["t.skip"].status, by["t.skip"].reason) == ("skipped", "no GPU on this host")
    assert by["t.unreadable"].status == "error"
    assert by["t.unreadable"].reason == "/nonexistent/proc/file: not-found"
    assert by["t.buggy"].status == "error"
    assert "internal error: KeyError" in by["t.buggy"].reason
    assert "test_runner.py" in by["t.buggy"].reason
    assert all(r.duration_s >= 0 for r in results)
    assert ("start", "t.exclusive") in events and ("done", "t.exclusive") in events


def test_levels_choose_probes():
    specs = (spec("a.quick", ok), spec("a.standard", ok, Level.STANDARD), spec("a.full", ok, Level.FULL))
    names = lambda level: [r.name for r in run_probes(specs, LiveHost(), ScanOptions(level=level))]
    assert names(Level.QUICK) == ["a.quick"]
    assert names(Level.STANDARD) == ["a.quick", "a.standard"]
    assert names(Level.FULL) == ["a.quick", "a.standard", "a.full"]


def _recording(name, order, fn=ok):
    def run(host, options, inputs=None):
        order.append(("start", name))
        try:
            return fn(host, options, inputs)
        finally:
            order.append(("end", name))
    return run


def test_a_probe_starts_after_what_it_needs_under_its_own_timeout():
    order: list[tuple[str, str]] = []

    def slow(host, options, inputs=None):
        time.sleep(0.4)  # longer than the dependent's own timeout: it must not count
        return Value(2)

    specs = (ProbeSpec("t.base", Level.QUICK, "base", "nothing", 5.0, _recording("t.base", order, slow)),
             ProbeSpec("t.user", Level.QUICK, "user", "nothing", 0.3, _recording("t.user", order),
                       needs=("t.base",)),
             ProbeSpec("t.free", Level.QUICK, "free", "nothing", 5.0, _recording("t.free", order)))
    results = {r.name: r for r in run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))}
    assert [r.status for r in results.values()] == ["ok", "ok", "ok"]
    assert order.index(("end", "t.base")) < order.index(("start", "t.user"))
    assert order.index(("start", "t.free")) < order.index(("end", "t.base"))  # not held back


def test_a_need_that_did_not_end_ok_skips_the_probe_with_its_reason():
    specs = (spec("t.none", skip), spec("t.slow", hang, timeout_s=0.2),
             ProbeSpec("t.a", Level.QUICK, "a", "nothing", 5.0, ok, needs=("t.none",)),
             ProbeSpec("t.b", Level.QUICK, "b", "nothing", 5.0, ok, needs=("t.slow",)),
             ProbeSpec("t.c", Level.QUICK, "c", "nothing", 5.0, ok, exclusive=True, needs=("t.none",)))
    results = {r.name: r for r in run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))}
    assert (results["t.a"].status, results["t.a"].reason) == ("skipped", "no GPU on this host")
    assert results["t.b"].status == "skipped"
    assert results["t.b"].reason.startswith("needs t.slow, which ended timeout")
    assert (results["t.c"].status, results["t.c"].reason) == ("skipped", "no GPU on this host")


def test_a_skip_passes_down_a_chain_of_needs():
    """engine.kv_cache needs engine.metrics, which needs engine.discovery: when discovery
    skips, both skip with its reason (and nothing waits for a probe that will never run)."""
    specs = (spec("t.first", skip),
             ProbeSpec("t.second", Level.QUICK, "b", "nothing", 5.0, ok, needs=("t.first",)),
             ProbeSpec("t.third", Level.QUICK, "c", "nothing", 5.0, ok, needs=("t.first", "t.second")))
    results = run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))
    assert [(r.status, r.reason) for r in results] == [("skipped", "no GPU on this host")] * 3


def test_a_probe_run_without_its_need_runs_on_its_own():
    specs = (ProbeSpec("t.user", Level.QUICK, "user", "nothing", 5.0, ok, needs=("t.absent",)),)
    assert [r.status for r in run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))] == ["ok"]


def test_a_chain_skipped_at_its_root_is_skipped_all_along_with_the_root_reason():
    """engine.discovery skipped → engine.metrics skipped at once → engine.kv_cache, which
    needs both, is ready in the same round and skipped too (it was 'which never ran' when
    nothing else was running, as at level quick on a recorded host)."""
    specs = (spec("t.root", skip),
             ProbeSpec("t.mid", Level.QUICK, "mid", "nothing", 5.0, ok, needs=("t.root",)),
             ProbeSpec("t.leaf", Level.QUICK, "leaf", "nothing", 5.0, ok, needs=("t.root", "t.mid")),
             ProbeSpec("t.tip", Level.QUICK, "tip", "nothing", 5.0, ok, needs=("t.leaf",)))
    results = run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))
    assert [(r.name, r.status, r.reason) for r in results] == [
        (name, "skipped", "no GPU on this host") for name in ("t.root", "t.mid", "t.leaf", "t.tip")]


def test_a_probe_is_handed_the_records_of_its_needs_and_of_its_after_probes_that_ended_ok():
    """The data flows through the registry: the runner hands each probe the records of what
    it needs (and of its ``after`` probes when they ended ok), by name, not a shared cache."""
    seen: dict[str, dict] = {}

    def reader(name):
        def run(host, options, inputs=None):
            seen[name] = dict(inputs.records)
            return Value(len(inputs.records))
        return run

    specs = (spec("t.base", ok), spec("t.none", skip),
             ProbeSpec("t.user", Level.QUICK, "user", "nothing", 5.0, reader("t.user"),
                       needs=("t.base",), after=("t.none",)),
             ProbeSpec("t.tail", Level.QUICK, "tail", "nothing", 5.0, reader("t.tail"),
                       exclusive=True, needs=("t.user",), after=("t.base",)),
             ProbeSpec("t.alone", Level.QUICK, "alone", "nothing", 5.0, reader("t.alone")))
    results = {r.name: r for r in run_probes(specs, LiveHost(), ScanOptions(level=Level.QUICK))}
    assert [r.status for r in results.values()] == ["ok", "skipped", "ok", "ok", "ok"]
    assert seen["t.user"] == {"t.base": results["t.base"].record}  # t.none skipped: absent
    assert seen["t.tail"] == {"t.user": Value(1), "t.base": results["t.base"].record}
    assert seen["t.alone"] == {}


def test_inputs_give_a_record_of_the_kind_asked_or_none():
    from doctor.inputs import NO_INPUTS, Inputs

    inputs = Inputs({"t.base": Value(1), "t.odd": {"x": 1}})
    assert inputs.get("t.base", Value) == Value(1)
    assert inputs.get("t.odd", Value) is None  # a recording of another shape reads as absent
    assert inputs.get("t.absent", Value) is None and NO_INPUTS.get("t.base", Value) is None
    assert "t.base" in inputs and "t.absent" not in inputs
