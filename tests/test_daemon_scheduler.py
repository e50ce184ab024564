"""The scheduler: cheap probes on the beat, a hung probe never started twice, kernels alone."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from doctor.daemon.history import History
from doctor.daemon.scheduler import Scheduler
from doctor.model import Level, ProbeSpec, ScanOptions, Skip

RELEASE = threading.Event()
KERNEL_GO = threading.Event()  # holds the test kernel running until the test has looked
CALLS: dict[str, int] = {}


@dataclass(frozen=True, slots=True)
class Reading:
    value_c: float


def _counting(name: str, hang: bool = False, busy_s: float = 0.0):
    def run(host, options, inputs=None) -> Reading:
        CALLS[name] = CALLS.get(name, 0) + 1
        time.sleep(busy_s)
        if name == "t.kernel":
            KERNEL_GO.wait(20)
        if hang:
            RELEASE.wait(30)  # bounded: the test releases it
        return Reading(41.0)
    return run


def _spec(name: str, hang: bool = False, exclusive: bool = False, timeout_s: float = 0.2,
          busy_s: float = 0.0):
    return ProbeSpec(name, Level.QUICK, "test probe", "nothing", timeout_s,
                     _counting(name, hang, busy_s), exclusive=exclusive)


def _finished(scheduler: Scheduler, names, timeout_s: float = 20.0) -> None:
    """Wait (bounded) until the calls of ``names`` have their results: no sleeps to tune."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        calls = [scheduler.slots[n].call for n in names]
        if all(c is None or c.result is not None for c in calls):
            return
        time.sleep(0.01)
    raise AssertionError(f"{names} did not finish within {timeout_s} s")


def _beat(scheduler: Scheduler, now: float, serving: bool = False, wait_for=None):
    """As Daemon.beat: cheap probes, wait for them, collect (0.3 s later on the beat's
    clock), then the kernels."""
    cycle = scheduler.start_due(now, serving)
    _finished(scheduler, [n for n in cycle.started if n in (wait_for or cycle.started)])
    done = scheduler.collect(now + 0.3)
    return cycle, scheduler.start_kernels(now + 0.3, serving), done


def test_a_hung_probe_is_reported_still_running_and_not_started_again():
    CALLS.clear()
    RELEASE.clear()
    specs = (_spec("t.ok"), _spec("t.hang", hang=True))
    scheduler = Scheduler(specs, host=None, options=ScanOptions(level=Level.QUICK),
                          interval_s=1.0, kernel_interval_s=0)
    threads = threading.active_count()
    outcomes = []
    for i in range(5):
        cycle, _, done = _beat(scheduler, float(i), wait_for=["t.ok"])
        outcomes.append({r.name: (r.status, r.reason) for r in cycle.results + done})
    try:
        assert CALLS == {"t.ok": 5, "t.hang": 1}
        assert outcomes[0]["t.hang"] == ("timeout", "no result within 0.2 s")
        assert outcomes[3]["t.hang"][0] == "timeout"
        assert "still running since" in outcomes[3]["t.hang"][1]
        assert "not started again" in outcomes[3]["t.hang"][1]
        assert all(o["t.ok"] == ("ok", None) for o in outcomes)
        assert threading.active_count() <= threads + 1  # the one hung thread, not one per beat
    finally:
        RELEASE.set()


def test_micro_kernels_run_alone_and_not_while_serving():
    CALLS.clear()
    specs = (_spec("t.cheap", busy_s=0.15), _spec("t.kernel", exclusive=True, timeout_s=5))
    scheduler = Scheduler(specs, None, ScanOptions(level=Level.QUICK), 1.0, kernel_interval_s=0)
    _, kernels, _ = _beat(scheduler, 0.0, serving=True)
    assert [(r.name, r.status) for r in kernels.results] == [("t.kernel", "skipped")]
    assert "serving" in kernels.results[0].reason and "t.kernel" not in CALLS
    scheduler.request_kernels()  # SIGUSR1
    scheduler.kernels_while_serving = True
    cycle = scheduler.start_due(1.0, True)
    # the beat's cheap probe still runs (it takes 0.15 s): the kernel waits for it
    assert cycle.started == ["t.cheap"] and scheduler.start_kernels(1.0, True).started == []
    _finished(scheduler, ["t.cheap"])
    scheduler.collect(1.2)
    assert scheduler.start_kernels(1.3, True).started == ["t.kernel"]
    # while the kernel runs, the cheap probes of the next beat wait their turn
    KERNEL_GO.clear()
    assert scheduler.start_due(2.0, True).started == []
    KERNEL_GO.set()
    _finished(scheduler, ["t.kernel"])
    assert [r.name for r in scheduler.collect(2.3)] == ["t.kernel"] and CALLS["t.kernel"] == 1
    assert scheduler.start_due(2.4, True).started == ["t.cheap"]


def test_a_probe_waits_in_the_beat_for_what_it_needs():
    CALLS.clear()
    base = _spec("t.base", busy_s=0.2, timeout_s=5)
    user = ProbeSpec("t.user", Level.QUICK, "needs t.base", "nothing", 5, _counting("t.user"),
                     needs=("t.base",))
    scheduler = Scheduler((base, user), None, ScanOptions(level=Level.QUICK), 1.0, kernel_interval_s=0)
    cycle = scheduler.start_due(0.0, False)
    assert cycle.started == ["t.base"] and scheduler.waiting() == ["t.user"]
    assert scheduler.start_waiting(0.05).started == []  # t.base is still running
    _finished(scheduler, ["t.base"])
    assert [r.name for r in scheduler.collect(0.3)] == ["t.base"]
    assert scheduler.start_waiting(0.3).started == ["t.user"] and scheduler.waiting() == []
    _finished(scheduler, ["t.user"])
    assert [(r.name, r.status) for r in scheduler.collect(0.5)] == [("t.user", "ok")]
    assert CALLS == {"t.base": 1, "t.user": 1}


def test_a_probe_whose_need_timed_out_is_skipped_in_the_beat():
    RELEASE.clear()
    base = _spec("t.stuck", hang=True, timeout_s=0.1)
    user = ProbeSpec("t.after", Level.QUICK, "needs t.stuck", "nothing", 5, _counting("t.after"),
                     needs=("t.stuck",))
    scheduler = Scheduler((base, user), None, ScanOptions(level=Level.QUICK), 1.0, kernel_interval_s=0)
    try:
        scheduler.start_due(0.0, False)
        assert [r.status for r in scheduler.collect(0.2)] == ["timeout"]
        skipped = scheduler.start_waiting(0.2).results
        assert [(r.name, r.status) for r in skipped] == [("t.after", "skipped")]
        assert skipped[0].reason.startswith("needs t.stuck, which ended timeout")
    finally:
        RELEASE.set()


def test_history_is_bounded_in_points_and_series():
    history = History(window_s=60, max_series=3, max_points=6)
    for t in range(0, 600):  # ten minutes at one point a second
        history.add(float(t), [("m", (("pid", str(t // 100)),), float(t))])
    assert len(history) <= 3
    points = history.series("m")[(("pid", "5"),)]
    assert len(points) <= 8 and points[-1] == (599.0, 599.0)
    assert all(t >= 599 - 60 for t, _ in points)


_NO_THREADS = """
import json, resource
from pathlib import Path
from tests.test_daemon_scheduler import _spec
from doctor.daemon.scheduler import Scheduler
from doctor.model import Level, ScanOptions

scheduler = Scheduler((_spec("t.a"), _spec("t.b")), None, ScanOptions(level=Level.QUICK), 1.0, 0)
size = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("VmSize:")) * 1024
_, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 20), hard))  # no room for an 8 MiB stack
starved = scheduler.start_due(0.0, False)
resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
again = scheduler.start_due(1.0, False)
print(json.dumps({"results": [[r.name, r.status, r.reason] for r in starved.results],
                  "started": starved.started, "again": again.started}))
"""


def test_a_probe_whose_thread_cannot_start_is_its_error_and_the_next_beat_tries_again():
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    out = subprocess.run([sys.executable, "-c", _NO_THREADS], capture_output=True, text=True,
                         timeout=60, cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["started"] == [] and [r[:2] for r in found["results"]] == [
        ["t.a", "error"], ["t.b", "error"]]
    assert "cannot start a thread for this probe" in found["results"][0][2]
    assert found["again"] == ["t.a", "t.b"]


def test_a_probe_is_handed_the_records_of_its_needs_and_after_as_in_a_scan():
    """The daemon hands inputs as the runner does: this beat's record of a need, the last
    record of an ``after`` probe that ended ok (here a kernel's, from an earlier run), and
    nothing of one that did not end ok."""
    KERNEL_GO.set()
    handed: list[dict[str, object]] = []

    def user(host, options, inputs=None) -> Reading:
        handed.append(dict(inputs.records))
        return Reading(1.0)

    def failing(host, options, inputs=None) -> Reading:
        raise Skip("not on this host")

    base = ProbeSpec("t.base", Level.QUICK, "a need", "nothing", 5, lambda *a: Reading(7.0))
    kernel = _spec("t.kernel", exclusive=True, timeout_s=5)
    broken = ProbeSpec("t.broken", Level.QUICK, "fails", "nothing", 5, failing)
    spec = ProbeSpec("t.user", Level.QUICK, "needs t.base", "nothing", 5, user,
                     needs=("t.base",), after=("t.kernel", "t.broken"))
    scheduler = Scheduler((base, kernel, broken, spec), None, ScanOptions(level=Level.QUICK),
                          1.0, kernel_interval_s=0)
    scheduler.start_due(0.0, False)  # the first beat: the kernel has not run yet
    _finished(scheduler, ["t.base", "t.broken"])
    scheduler.collect(0.1)
    scheduler.start_waiting(0.1)  # (or started in start_due, where its needs were that quick)
    assert scheduler.waiting() == []
    _finished(scheduler, ["t.user"])
    scheduler.collect(0.2)
    assert scheduler.start_kernels(0.2, False).started == ["t.kernel"]
    _finished(scheduler, ["t.kernel"])
    scheduler.collect(0.3)
    scheduler.start_due(1.0, False)  # the next beat: the kernel's record is there now
    _finished(scheduler, ["t.base", "t.broken"])
    scheduler.collect(1.1)
    scheduler.start_waiting(1.1)
    _finished(scheduler, ["t.user"])
    assert scheduler.waiting() == []
    assert handed == [{"t.base": Reading(7.0)},
                      {"t.base": Reading(7.0), "t.kernel": Reading(41.0)}]
