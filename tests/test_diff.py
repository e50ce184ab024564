"""llm-doctor diff's stories: pairs of recorded hosts built from one another by the edit that
is the story (tests/fixtures/build_diff_hosts.py), and saved scans edited here. Each gives its
verdict, its first change, and nothing else CHANGED."""

from __future__ import annotations

import copy
import functools
import json

import jsonschema
import pytest

from doctor.diff.compare import compare
from doctor.diff.model import ADDED, CHANGED, NO_CHANGE, NOT_COMPARABLE, REGRESSION, REMOVED, SAME
from reports.diff_json import to_dict as diff_dict
from reports.json_report import to_dict
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.test_fixtures import replay

SCHEMA = json.loads((REPO / "docs" / "diff-schema.json").read_text())
GPU0 = "gpu[GPU-00000000-5f0c-7a2e-9c1d-00a1b2c3d4e5]"
GPU4 = "gpu[GPU-00000004-5f0c-7a2e-9c1d-00a1b2c3d4e9]"
VLLM = "engine[vllm@127.0.0.1:8000]"


@functools.cache
def _saved(name: str) -> str:
    return json.dumps(to_dict(replay(FIXTURE_HOSTS / name)))


def saved(name: str) -> dict:
    """The host's scan as a saved JSON scan (a fresh copy each time, for a test to edit)."""
    return json.loads(_saved(name))


def moved(diff) -> list[str]:
    return [f.id for f in diff.facts if f.status in (CHANGED, ADDED, REMOVED)]


def probe(report: dict, name: str) -> dict:
    return next(p for p in report["probes"] if p["name"] == name)["data"]


STORIES = [  # (base, story host, the first change, every fact that may move, the finding raised)
    ("l40s-8x-acs-off", "diff-l40s-8x-gpu0-x8", f"{GPU0}.pcie.width", {f"{GPU0}.pcie.width"},
     "pcie-link-degraded"),
    ("l40s-8x-acs-off", "diff-l40s-8x-acs-on", "pcie.bridge[0000:00:01.0].acs", None, "gpu-p2p-blocked"),
    ("l40s-8x-acs-off", "diff-l40s-8x-gpu4-held", f"{GPU4}.memory.held_by_others_mib",
     {f"{GPU4}.memory.held_by_others_mib", f"{GPU4}.memory.other_processes"},
     "gpu-memory-held-by-other-process"),
    ("vllm-v1-calm", "diff-vllm-v1-enforce-eager", f"{VLLM}.flag.enforce_eager",
     {f"{VLLM}.flag.enforce_eager"}, "cuda-graphs-disabled"),
    ("healthy-epyc-9654-vllm", "diff-epyc-9654-swappiness-thp", "host.sysctl.vm_swappiness",
     {"host.sysctl.vm_swappiness", "host.sysctl.thp_enabled"}, None),
]


@pytest.mark.slow
@pytest.mark.parametrize("base,story,first,allowed,raised", STORIES, ids=[s[1] for s in STORIES])
def test_a_story_gives_its_verdict_its_first_change_and_nothing_else(base, story, first, allowed,
                                                                     raised):
    diff = compare(saved(base), saved(story), (base, story))
    assert diff.identity == "same" or (diff.identity == "unproven" and "GPU" not in base)
    assert diff.verdict == REGRESSION and diff.exit_code == 2, diff.line
    assert diff.changes[0].id == first
    assert diff.line.startswith(first)
    if allowed is None:  # ACS: every bridge with the capability, and nothing else
        assert all(f.startswith("pcie.bridge[") and f.endswith("].acs") for f in moved(diff))
        assert len(moved(diff)) >= 4
    else:
        assert set(moved(diff)) == allowed
    raised_rules = [d.rule for d in diff.findings if d.state == "raised"]
    assert raised_rules == ([raised] if raised else [])
    if raised:
        assert raised in diff.changes[0].causes or story.endswith("acs-on")
    jsonschema.validate(diff_dict(diff), SCHEMA)


@pytest.mark.slow
def test_the_argv_diff_names_the_flag_added():
    diff = compare(saved("vllm-v1-calm"), saved("diff-vllm-v1-enforce-eager"))
    (fact,) = [f for f in diff.facts if f.id == f"{VLLM}.flag.enforce_eager"]
    assert (fact.status, fact.note, fact.direction) == (ADDED, "+ --enforce-eager", "worse")
    assert fact.causes == ("cuda-graphs-disabled",)


def test_a_pcie_width_drop_links_to_pcie_link_degraded():
    diff = compare(saved("l40s-8x-acs-off"), saved("diff-l40s-8x-gpu0-x8"))
    first = diff.changes[0]
    assert (first.before, first.after, first.ratio, first.direction) == (16, 8, 0.5, "worse")
    assert "pcie-link-degraded" in first.causes


def test_the_same_capture_on_both_sides_changes_nothing():
    for name in ("l40s-8x-acs-off", "vllm-v1-calm", "a100-pcie-gen3x8"):
        diff = compare(saved(name), saved(name))
        assert diff.verdict == NO_CHANGE and diff.exit_code == 0, (name, diff.line)
        assert diff.changes == ()
        assert all(f.status in (SAME, "incomplete") for f in diff.facts)
        assert {d.state for d in diff.findings} <= {"unchanged"}


def _upgrade(report: dict, driver: str, cuda: str, torch: str, tokens_s: float) -> dict:
    """The host's scan with the driver, the engine's torch and its knee's throughput set."""
    probe(report, "gpu.inventory").update(driver_version=driver, cuda_driver_version=cuda)
    for engine in probe(report, "gpu.runtime")["engines"]:
        engine["torch_version"] = torch
    load = next(p for p in report["probes"] if p["name"] == "engine.load")
    if load["data"] is None:  # the recording holds no engine page and no knee: give it the sweep's
        load.update(status="ok", reason=None, data={"models": [], "engines": [
            {"base_url": "http://127.0.0.1:8000", "kind": "vllm", "model": None, "running": None,
             "waiting": None, "source": None, "knee_file": "/root/.local/state/llm-doctor/knee-x.json",
             "error": None, "knee_output_tokens_per_s": None, "requests_in_window": None,
             "tokens_in_window": None, "interval_s": None}]})
    for engine in load["data"]["engines"]:
        engine.update(knee_concurrency=16, knee_status="found", knee_measured_at="2026-11-27T20:00:00Z",
                      sweep=[{"concurrency": c, "output_tokens_per_s": t, "ttft_p50_ms": 80.0,
                              "usable": True}
                             for c, t in ((8, tokens_s * 0.7), (16, tokens_s), (32, tokens_s * 1.02))])
    return report


def test_a_driver_and_engine_upgrade_with_a_throughput_drop():
    base = saved("l40s-8x-acs-off")
    before = _upgrade(copy.deepcopy(base), "550.90.07", "12.4", "2.5.1", 2400.0)
    after = _upgrade(copy.deepcopy(base), "570.86.15", "12.8", "2.7.0", 1150.0)
    diff = compare(before, after)
    assert diff.verdict == REGRESSION and diff.exit_code == 2
    first = diff.changes[0]
    assert first.id == f"{VLLM}.knee.output_tokens_per_s"
    assert (first.direction, first.ratio) == ("worse", pytest.approx(0.479, abs=0.001))
    assert set(moved(diff)) == {first.id, "gpu.driver.version", "gpu.driver.cuda",
                                f"{VLLM}.torch_version"}
    assert all("driver-runtime-mismatch" in f.causes for f in diff.changes[1:])


def test_a_throughput_inside_its_floor_is_the_same():
    base = saved("l40s-8x-acs-off")
    before = _upgrade(copy.deepcopy(base), "550.90.07", "12.4", "2.5.1", 2400.0)
    after = _upgrade(copy.deepcopy(base), "550.90.07", "12.4", "2.5.1", 2300.0)  # -4%: noise
    diff = compare(before, after)
    assert diff.verdict == NO_CHANGE and diff.changes == ()
    (knee,) = [f for f in diff.facts if f.id == f"{VLLM}.knee.output_tokens_per_s"]
    assert (knee.status, knee.floor) == (SAME, 0.10)


def test_a_kernel_spread_sets_the_floor():
    before, after = saved("a100-pcie-gen3x8"), saved("a100-pcie-gen3x8")
    gpu_b = probe(before, "gpu.bandwidth")["gpus"][0]
    gpu_a = probe(after, "gpu.bandwidth")["gpus"][0]
    gpu_b["d2d_gbps_spread"] = gpu_a["d2d_gbps_spread"] = 0.01
    gpu_a["d2d_gbps"] = gpu_b["d2d_gbps"] * 0.95  # 5%: inside the default 10%, outside 2 x 1%
    diff = compare(before, after)
    assert diff.changes[0].id == f"{GPU0}.bandwidth.d2d_gbps"
    assert (diff.changes[0].floor, diff.changes[0].direction) == (0.02, "worse")
    del gpu_a["d2d_gbps_spread"], gpu_b["d2d_gbps_spread"]
    assert compare(before, after).changes == ()


def test_two_different_hosts_are_refused_without_the_flag():
    diff = compare(saved("healthy-epyc-9654-vllm"), saved("epyc-9354-6of12-channels"))
    assert (diff.verdict, diff.exit_code, diff.identity) == (NOT_COMPARABLE, 3, "different")
    assert "--different-hosts" in diff.line and diff.facts == ()
    forced = compare(saved("healthy-epyc-9654-vllm"), saved("epyc-9354-6of12-channels"),
                     different_hosts=True)
    assert forced.verdict != NOT_COMPARABLE and forced.changes


def test_gpu_uuids_that_differ_are_two_hosts_even_with_one_hostname():
    before, after = saved("l40s-8x-acs-off"), saved("l40s-8x-acs-off")
    for gpu in probe(after, "gpu.inventory")["gpus"]:
        gpu["uuid"] = gpu["uuid"].replace("5f0c", "6a1d")
    diff = compare(before, after)
    assert diff.identity == "different" and "no GPU UUID is on both sides" in diff.identity_evidence


def test_a_machine_id_proves_identity_when_the_host_holds_one():
    before, after = saved("healthy-epyc-9654-vllm"), saved("healthy-epyc-9654-vllm")
    before["host"]["machine_id"] = after["host"]["machine_id"] = "4c4c4544004e4b1080"
    assert compare(before, after).identity == "same"
    after["host"]["machine_id"] = "9f0e0c00aa"
    assert compare(before, after).identity == "different"


def test_incomparable_levels_are_not_comparable_and_judge_no_number():
    before, after = saved("a100-pcie-gen3x8"), saved("a100-pcie-gen3x8")
    after["level"] = "quick"
    probe(after, "gpu.bandwidth")["gpus"][0]["d2d_gbps"] = 100.0
    diff = compare(before, after)
    assert (diff.verdict, diff.exit_code) == (NOT_COMPARABLE, 3)
    assert "levels differ" in diff.line
    (d2d,) = [f for f in diff.facts if f.id == f"{GPU0}.bandwidth.d2d_gbps"]
    assert d2d.status == "incomplete" and "not judged" in d2d.note


def test_an_idle_engine_against_one_under_load_is_not_comparable():
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    for engine in probe(after, "engine.load")["engines"]:
        engine["running"] = 0
    for engine in probe(after, "engine.metrics")["engines"]:
        engine["requests_running"] = 0.0
    diff = compare(before, after)
    assert diff.verdict == NOT_COMPARABLE and "under load before and idle after" in diff.line


def test_a_secret_that_changed_reads_changed_and_neither_value():
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    for report, key in ((before, "sk-live-OLD0000000001"), (after, "sk-live-NEW9999999999")):
        for engine in probe(report, "engine.discovery")["engines"]:
            engine["model"] = f"https://hf:{key}@hub.internal/llama-3-8b"
    diff = compare(before, after)
    (fact,) = [f for f in diff.facts if f.id == f"{VLLM}.flag.model"]
    assert (fact.status, fact.kind, fact.before, fact.after) == (CHANGED, "secret", None, None)
    from reports.diff_markdown import render as markdown
    from reports.diff_json import render as to_json
    for text in (markdown(diff), to_json(diff)):
        assert "OLD0000000001" not in text and "NEW9999999999" not in text
        assert "changed (neither value is shown)" in text or '"secret"' in text


def test_a_driver_change_alone_is_a_change_at_warning():
    before, after = saved("l40s-8x-acs-off"), saved("l40s-8x-acs-off")
    probe(after, "gpu.inventory")["driver_version"] = "570.86.15"
    diff = compare(before, after)
    assert (diff.verdict, diff.exit_code) == (NO_CHANGE, 1)
    assert [f.id for f in diff.changes] == ["gpu.driver.version"]
    assert diff.changes[0].causes == ("driver-runtime-mismatch",) and diff.changes[0].direction == ""


def test_a_cleared_finding_is_an_improvement():
    diff = compare(saved("diff-l40s-8x-gpu0-x8"), saved("l40s-8x-acs-off"))
    assert (diff.verdict, diff.exit_code) == ("improvement likely", 0)
    assert [d.rule for d in diff.findings if d.state == "cleared"] == ["pcie-link-degraded"]


def test_an_engine_that_came_whole_is_one_row_in_the_tables():
    from reports.diff_common import grouped
    from reports.diff_markdown import render as markdown
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    for name in ("engine.discovery", "engine.metrics", "engine.load", "engine.roofline"):
        probe(before, name)["engines"] = []
    for rows in (probe(before, "host.limits")["processes"],):
        rows[:] = [r for r in rows if r.get("role") == "shell"]
    diff = compare(before, after)
    rows = grouped(diff)
    engine_rows = [(f.id, n) for f, n in rows if f.id.startswith(VLLM)]
    assert len(engine_rows) == 1 and engine_rows[0][1] > 5
    assert f"`{VLLM}` | {engine_rows[0][1]} facts added" in markdown(diff)


def test_hostile_records_give_a_diff_not_a_crash():
    before, after = saved("l40s-8x-acs-off"), saved("l40s-8x-acs-off")
    probe(after, "gpu.inventory")["gpus"][0]["index"] = [0]  # unhashable where a key goes
    probe(after, "gpu.pcie")["gpus"][1]["index"] = {"a": 1}
    probe(after, "host.cpu")["governor_counts"] = {"performance": [1], "powersave": "x"}
    probe(after, "engine.discovery")["engines"][0]["pid"] = [30412]
    probe(after, "gpu.topology")["pairs"] = "not a list"
    diff = compare(before, after)
    assert diff.verdict in (REGRESSION, NO_CHANGE, "improvement likely")
    jsonschema.validate(diff_dict(diff), SCHEMA)


def test_other_processes_arguments_never_appear_even_when_they_changed():
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    for report, word in ((before, "--db-url PLANTED-BEFORE-ARG"), (after, "--db-url PLANTED-AFTER-ARG")):
        for row in probe(report, "host.cpu_load")["top"]:
            if row.get("engine") is None:
                row["cmdline"] = f"/usr/bin/backup-agent {word}"
    diff = compare(before, after)
    from reports.diff_markdown import render as markdown
    from reports.diff_json import render as to_json
    for text in (markdown(diff), to_json(diff)):
        assert "PLANTED-" not in text and "backup-agent" not in text
    assert diff.changes == ()


def test_an_ollama_upgrade_is_its_version():
    before, after = saved("this-vm-epyc-2cpu"), saved("this-vm-epyc-2cpu")
    for report, version, parallel in ((before, "0.5.7", 4), (after, "0.6.2", 1)):
        report["probes"].append({"name": "engine.ollama", "status": "ok", "reason": None,
                                 "duration_s": 0.1, "data": {"engines": [
                                     {"base_url": "http://127.0.0.1:11434", "pid": 812,
                                      "version": version, "num_parallel": parallel}]}})
    diff = compare(before, after)
    ids = [f.id for f in diff.changes]
    assert ids == ["engine[ollama@127.0.0.1:11434].num_parallel", "engine[ollama@127.0.0.1:11434].version"]
    assert diff.changes[0].direction == "worse" and diff.verdict == REGRESSION


def test_a_contended_stream_figure_is_not_judged():
    """This shared VM's STREAM varies 2x between scans while other work holds its cores: a
    figure measured under contention (checks/host.toml's quarter of the threads) says
    nothing of the host, so it is not judged."""
    before, after = saved("a100-pcie-gen3x8"), saved("a100-pcie-gen3x8")
    stream = probe(after, "host.memory_bandwidth")
    stream["triad_gbps"] = stream["triad_gbps"] / 2
    stream["other_busy_cores"] = stream["threads"] * 0.5
    diff = compare(before, after)
    (triad,) = [f for f in diff.facts if f.id == "host.memory_bandwidth.triad_gbps"]
    assert triad.status == "incomplete" and "under contention" in triad.note
    assert diff.changes == () and diff.verdict == NO_CHANGE
    stream["other_busy_cores"] = 0.0
    assert compare(before, after).changes[0].id == "host.memory_bandwidth.triad_gbps"
