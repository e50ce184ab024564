"""What names the two sides of a diff and the engines on them: each side dated by when its
state was taken (a recording's capture, not its replay), an engine by its kind and address
(two llama-servers are two engines), and a figure one side never measured (a baseline taken
before the start-up kernels) neither ADDED nor REMOVED."""

from __future__ import annotations

import copy

from doctor.diff.compare import compare
from doctor.diff.model import ADDED, INCOMPLETE, REMOVED
from tests.test_diff import probe, saved

HOST = "healthy-epyc-9654-vllm"  # captured 2026-11-27T20:31:15Z, STREAM measured
STREAM = "host.memory_bandwidth.triad_gbps"


def _second_engine(report: dict, pid: int, port: int, nofile: int) -> None:
    """A second vLLM beside the first, as engine.discovery and host.limits record one."""
    discovery = probe(report, "engine.discovery")
    other = copy.deepcopy(discovery["engines"][0])
    other.update(pid=pid, base_url=f"http://127.0.0.1:{port}")
    discovery["engines"].append(other)
    limits = probe(report, "host.limits")
    row = copy.deepcopy(next(p for p in limits["processes"] if p["role"] == "engine"))
    row.update(pid=pid, nofile_soft=nofile, nofile_hard=nofile)
    limits["processes"].append(row)


def test_two_engines_of_one_kind_are_two_limits_facts_by_their_address():
    """Before, both engines' limits were ``host.limits[vllm]``: the second was dropped (the
    first of one id wins), so its limit lowered to 256 was no change at all."""
    before, after = saved(HOST), saved(HOST)
    _second_engine(before, 50001, 8001, 1048576)
    _second_engine(after, 50002, 8001, 256)  # restarted (a new pid), its limit lowered
    diff = compare(before, after)
    ids = {f.id for f in diff.facts if f.id.startswith("host.limits[")}
    assert {"host.limits[vllm@127.0.0.1:8000].nofile_soft",
            "host.limits[vllm@127.0.0.1:8001].nofile_soft"} <= ids
    (lowered,) = [f for f in diff.changes if f.id.startswith("host.limits[")
                  and f.id.endswith(".nofile_soft")]
    assert lowered.id == "host.limits[vllm@127.0.0.1:8001].nofile_soft"
    assert (lowered.before, lowered.after) == (1048576, 256)


def test_an_engine_without_an_address_is_named_by_its_model():
    before, after = saved(HOST), saved(HOST)
    for report in (before, after):
        probe(report, "engine.discovery")["engines"][0]["base_url"] = None
    ids = {f.id for f in compare(before, after).facts}
    assert "host.limits[vllm@/models/llama-3-8b-instruct].nofile_soft" in ids
    assert "engine[vllm@/models/llama-3-8b-instruct].kind" in ids


def test_each_side_is_dated_by_its_capture_not_by_the_replay():
    before, after = saved(HOST), saved(HOST)
    after["host"]["captured_at"] = "2026-12-01T08:00:00Z"
    diff = compare(before, after)
    assert diff.before.started_at == "2026-11-27T20:31:15Z"
    assert diff.after.started_at == "2026-12-01T08:00:00Z"


def test_a_live_side_is_dated_by_its_scan():
    before, after = saved(HOST), saved(HOST)
    after["host"] = {"kind": "live", "hostname": after["host"]["hostname"]}
    after["started_at"] = "2026-12-06T10:00:00Z"
    assert compare(before, after).after.started_at == "2026-12-06T10:00:00Z"


def test_a_figure_the_baseline_never_measured_is_incomplete_not_added():
    """The daemon's baseline taken before its start-up kernels ran (or while an engine served
    and they waited) has no STREAM record: `diff baseline live` read STREAM ADDED every time."""
    for how in ("absent", "skipped"):
        before, after = saved(HOST), saved(HOST)
        if how == "absent":
            before["probes"] = [p for p in before["probes"] if p["name"] != "host.memory_bandwidth"]
        else:
            stream = next(p for p in before["probes"] if p["name"] == "host.memory_bandwidth")
            stream.update(status="skipped", data=None,
                          reason="an engine is serving: micro-kernels wait")
        diff = compare(before, after)
        (triad,) = [f for f in diff.facts if f.id == STREAM]
        assert triad.status == INCOMPLETE, (how, triad)
        assert "host.memory_bandwidth" in triad.note
        assert STREAM not in {f.id for f in diff.changes}
        # the other way round: a live side that skipped it is not REMOVED either
        (back,) = [f for f in compare(after, before).facts if f.id == STREAM]
        assert back.status == INCOMPLETE


def test_what_one_side_read_and_found_absent_is_still_added():
    """An engine that came: engine.discovery ran on both sides, so its facts are ADDED."""
    before, after = saved(HOST), saved(HOST)
    _second_engine(after, 50002, 8001, 1048576)
    statuses = {f.id: f.status for f in compare(before, after).facts}
    assert statuses["host.limits[vllm@127.0.0.1:8001].nofile_soft"] == ADDED
    assert statuses["engine[vllm@127.0.0.1:8001].kind"] == ADDED
    assert {f.status for f in compare(after, before).facts
            if f.id == "engine[vllm@127.0.0.1:8001].kind"} == {REMOVED}
