"""A fix plan from a hostile saved scan: nothing of the scan runs, in the script or in the
files it writes; paths and step ids are the catalogue's; no string crashes a format; a plan
is built in one pass and has a bound.

The scripts are run as a person runs one first, to read it: ``sh plan.sh``, the dry run, as
``nobody`` in a throwaway folder where every command the scan names is a canary that leaves
a file (tests/fuzz_fix_script.py, which the fuzz benchmark's "fix-script" kind also uses).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import posixpath
import re
import shutil
from datetime import datetime, timezone

import jsonschema
import pytest

from doctor.commands.fix import _scan
from doctor.fix.catalogue import BUILDERS
from doctor.fix.saved import Scan, header
from doctor.fix.model import FileWrite, Kind, Plan, Risk, Step
from doctor.fix.plan import MAX_STEPS, PlanTooLarge, build_plan, to_dict
from doctor.fix.script import EOF_MARK, to_json, to_markdown, to_sh
from tests.saved_scans import saved
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.fuzz_fix_script import CANARY, HOST, PAYLOADS, catalogue_lines, dry_run, script_problems

NOW = datetime(2026, 12, 1, 19, 41, 0, tzinfo=timezone.utc)
SCHEMA = json.loads((REPO / "docs" / "fix-plan-schema.json").read_text())
STEP_ID = re.compile(r"[0-9]{2,3}-[a-z0-9]+(?:-[a-z0-9]+)*")
FILE_DIRS = ("/etc/sysctl.d/", "/etc/security/limits.d/", "/etc/systemd/system/", "/etc/udev/rules.d/")
# every payload at once: one scan that holds all of them in every field
EVERYTHING = "".join(PAYLOADS)


@pytest.fixture(scope="module")
def base():
    """(saved scan, rule probes, plan) of a recorded host whose plan has a systemd drop-in,
    sysctl files with live values and engine flags."""
    report, rule_probes = _scan(str(FIXTURE_HOSTS / HOST), None, None, None)
    return report, rule_probes, build_plan(saved(report), "saved scan", rule_probes, NOW)


def poisoned(report: dict, text: str) -> dict:
    """``report`` with ``text`` in every field of it that reaches a plan, the findings kept
    recognisable to their builders (their causes), and a finding whose cause is the text."""
    out = copy.deepcopy(report)
    out["host"]["hostname"] = text
    for finding in out["findings"]:
        finding["rule"] = finding["rule"] + text
        finding["key"] = text + finding.get("key", "")
        finding["title"] = finding["title"] + text
        finding["evidence"] = {**finding["evidence"], "engine": f"vllm {text} pid 48213",
                               "process": f"python3 {text} pid 48213"}
    out["findings"].append(dict(out["findings"][0], cause=text, rule=text))
    out["findings"].append({"rule": "cpu-powersave-governor" + text, "cause": "cpu-powersave-governor",
                            "key": text, "title": text, "severity": "warning", "symptoms": [],
                            "remediation": "", "playbook": "", "evidence": {}})
    out["probes"] = [p for p in out["probes"] if p["name"] != "host.cpu"] + [
        {"name": "host.cpu", "status": "ok", "reason": None, "duration_s": 0,
         "data": {"cpus": [{"cpu": 0, "governor": text, "energy_preference": text}]}}]
    for probe in out["probes"]:
        if probe["name"] == "engine.container" and probe["data"]:
            for engine in probe["data"].get("engines", []):
                engine["cgroup"] = f"/docker/{text}"
    return out


def _assert_plan_is_the_catalogues(plan: Plan, allowed_lines: set[str]) -> None:
    jsonschema.validate(to_dict(plan), SCHEMA)
    for step in plan.steps:
        name = step.id.split("-", 1)[1]
        assert STEP_ID.fullmatch(step.id) and (name in BUILDERS or name == step.rule), step.id
        for change in step.files:
            assert posixpath.normpath(change.path) == change.path, change.path
            assert change.path.startswith(FILE_DIRS) and CANARY not in change.path
            for line in change.content.split("\n"):  # the scan's text only ever in a comment
                assert line.startswith("# ") or line in allowed_lines or not line, line


@pytest.mark.parametrize("payload", PAYLOADS, ids=[ascii(p)[:30] for p in PAYLOADS])
def test_the_dry_run_of_a_hostile_scans_plan_runs_nothing(base, payload):
    report, rule_probes, clean = base
    plan = build_plan(saved(poisoned(report, payload)), "saved scan", rule_probes, NOW)
    script = to_sh(plan, "/var/lib/llm-doctor/plans/" + plan.id)
    done = dry_run(script)
    assert (done.injected, done.parses, done.rc) == ([], True, 0), done.output[-2000:]
    assert "dry run: nothing changed" in done.output
    assert script_problems(script, "sh") == []
    assert script_problems(to_markdown(plan), "markdown") == []
    _assert_plan_is_the_catalogues(plan, catalogue_lines(clean))


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
def test_shellcheck_passes_on_the_plan_of_a_scan_that_holds_every_payload(base):
    report, rule_probes, _ = base
    plan = build_plan(saved(poisoned(report, EVERYTHING)), "saved scan", rule_probes, NOW)
    done = dry_run(to_sh(plan, "/var/lib/llm-doctor/plans/x"), lint=True)
    assert (done.injected, done.parses, done.rc, done.shellcheck) == ([], True, 0, None)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["sh", "json", "markdown"])
def test_fix_from_a_hostile_saved_scan_in_every_format(cli, base, tmp_path, fmt):
    """Through the command line, a lone surrogate and a file name that is an attack too
    (the surrogate made ``fix`` fail with UnicodeEncodeError in every format)."""
    report, _, clean = base
    saved = tmp_path / f"scan\n$({CANARY}).json"
    hostile = poisoned(report, EVERYTHING)
    out = tmp_path / "plan.out"
    # the saved-scan reader refuses the rule and cause ids first (one line, exit 3) ...
    saved.write_text(json.dumps(hostile))
    refused = cli("fix", "--from", str(saved), "--format", fmt, "-o", str(out))
    assert refused.returncode == 3 and "findings[0].rule" in refused.stderr, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr and not out.exists()
    # ... and every other field, whose text the reader masks but passes on, makes a safe plan
    for finding, original in zip(hostile["findings"], report["findings"]):
        finding.update(rule=original["rule"], cause=original["cause"])
    hostile["findings"] = hostile["findings"][:len(report["findings"])]
    saved.write_text(json.dumps(hostile))
    done = cli("fix", "--from", str(saved), "--format", fmt, "-o", str(out))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    text = out.read_text()
    assert script_problems(text, fmt) == []
    if fmt == "json":
        jsonschema.validate(json.loads(text), SCHEMA)
    if fmt == "sh":
        ran = dry_run(text)
        assert (ran.injected, ran.parses, ran.rc) == ([], True, 0), ran.output[-2000:]


def test_a_files_lines_are_comments_whatever_the_finding_holds(base):
    scan = Scan(saved({}), "2026-12-01")
    for text in PAYLOADS + (EVERYTHING, "\ud800" * 1000, 10 ** 5000):
        finding, = saved({"findings": [{"rule": text, "cause": text, "key": text, "title": text}]}).findings
        written = header(finding, scan)
        lines = written.split("\n")
        assert len(lines) == 4 and lines[3] == "" and all(line.startswith("# ") for line in lines[:3])
        assert written.encode() and len(written) < 1000


def test_the_here_documents_end_mark_is_never_a_line_of_the_content():
    content = f"# x\n{EOF_MARK}\ntouch pwned\n{EOF_MARK}_2\n{CANARY}\n"
    step = Step(id="01-network-backlog-small", rule="r", key="", cause="network-backlog-small",
                kind=Kind.FILE, risk=Risk.NONE, title="t", check="c", verify="v", revert="r",
                files=(FileWrite("/etc/sysctl.d/60-llm-doctor-network-backlog-small.conf", content),))
    plan = Plan(id="20261201T194100Z-abcdef", created_at="", host="h", source="s", probes=(), steps=(step,))
    done = dry_run(to_sh(plan, "/tmp/none"))
    assert (done.injected, done.parses, done.rc) == ([], True, 0), done.output
    assert f"+{EOF_MARK}" in done.output.replace(" ", "") and "+touchpwned" in done.output.replace(" ", "")


@pytest.mark.parametrize("rule", ["../../../../etc/cron.d/x", "a/b", "network-backlog-small/../x", ""])
def test_a_files_path_and_a_steps_id_never_come_from_the_scan(base, rule):
    report, rule_probes, _ = base
    hostile = copy.deepcopy(report)
    for finding in hostile["findings"]:
        finding["rule"] = rule
    plan = build_plan(saved(hostile), "saved scan", rule_probes, NOW)
    assert [s.id for s in plan.steps] == ["01-fd-limit-low", "02-gpu-memory-no-headroom",
                                          "03-cuda-graphs-disabled", "04-network-backlog-small",
                                          "05-swap-active"]  # named by their causes
    assert [f.path for s in plan.steps for f in s.files] == [  # swap-active's is a checklist now
        "/etc/systemd/system/vllm.service.d/llm-doctor.conf",
        "/etc/sysctl.d/60-llm-doctor-network-backlog-small.conf"]
    jsonschema.validate(to_dict(plan), SCHEMA)


@pytest.mark.parametrize("cgroup", [
    "/system.slice/-x.service", "/system.slice/.x.service", "/system.slice/a@b@c.service",
    "/system.slice/" + "x" * 250 + ".service", "/system.slice/x\n.service", "/system.slice/x\\x2f.service",
    "/system.slice/x/.service", "/system.slice/x y.service", "/system.slice/..service"])
def test_a_unit_name_outside_systemds_grammar_gets_no_drop_in(base, cgroup):
    report, rule_probes, _ = base
    hostile = copy.deepcopy(report)
    for probe in hostile["probes"]:
        if probe["name"] == "engine.container":
            for engine in probe["data"]["engines"]:
                engine["cgroup"] = cgroup
    limit = build_plan(saved(hostile), "saved scan", rule_probes, NOW).steps[0]
    assert (limit.cause, limit.kind, limit.files, limit.commands) == ("fd-limit-low", Kind.MANUAL, (), ())


class Counted(tuple):
    """A scan's findings or probes that count the times they are walked."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def test_a_plan_is_built_in_one_pass_over_the_findings(base):
    """200 engine findings each looked up whether the scan has another finding and which
    unit runs the engine: walking the findings and probes for each made 20,000 findings
    take 43 s (n²); now the scan is indexed once."""
    report, rule_probes, _ = base
    many = copy.deepcopy(report)
    engine = next(f for f in many["findings"] if f["rule"] == "fd-limit-low")
    many["findings"] = [dict(engine, key=f"engine vllm {n}") for n in range(200)]
    scan = saved(many)
    scan = dataclasses.replace(scan, findings=Counted(scan.findings), probes=Counted(scan.probes))
    Counted.walks = 0
    plan = build_plan(scan, "saved scan", rule_probes, NOW)
    assert len(plan.steps) == 200 and Counted.walks <= 4


@pytest.mark.slow
def test_a_plan_past_its_bound_is_refused_and_a_repeated_change_is_made_once(base, monkeypatch):
    report, rule_probes, _ = base
    too_many = copy.deepcopy(report)
    engine = next(f for f in too_many["findings"] if f["rule"] == "fd-limit-low")
    too_many["findings"] = [dict(engine, key=f"engine vllm {n}") for n in range(MAX_STEPS + 1)]
    with pytest.raises(PlanTooLarge, match=f"more than {MAX_STEPS} findings with a step"):
        build_plan(saved(too_many), "saved scan", rule_probes, NOW)
    repeated = copy.deepcopy(report)
    repeated["findings"] = [{"rule": "cpu-powersave-governor", "cause": "cpu-powersave-governor",
                             "key": f"k{n}", "title": "t", "evidence": {}} for n in range(20_000)]
    repeated["probes"] = [{"name": "host.cpu", "status": "ok", "data": {
        "cpus": [{"cpu": n % 128, "governor": "powersave"} for n in range(1024)]}}]
    calls = []
    governor = BUILDERS["cpu-powersave-governor"]
    monkeypatch.setitem(BUILDERS, "cpu-powersave-governor", lambda *a: calls.append(1) or governor(*a))
    plan = build_plan(saved(repeated), "saved scan", rule_probes, NOW)
    assert len(plan.steps) == 1 and len(plan.steps[0].live) == 128  # each CPU once
    assert len(calls) == 1  # built once: 20,000 builds of 256 live writes took 160 s
    assert {n.why for n in plan.no_steps} == {"the same changes as step 01-cpu-powersave-governor"}
    assert len(to_sh(plan, "/tmp/p")) < 20_000 * 200  # was 786 MB for a scan like it


@pytest.mark.slow
def test_the_bound_holds_every_real_host(base):
    """MAX_STEPS's reason: every rule with a step, once per GPU of an 8-GPU host."""
    from doctor.commands.setup import load_setup

    rules, _ = load_setup(None, ())
    assert 8 * sum(1 for rule in rules if rule.cause in BUILDERS) <= MAX_STEPS


@pytest.mark.parametrize("where", ["rule", "hostname", "key", "cgroup"])
def test_a_lone_surrogate_crashes_no_format(base, where):
    report, rule_probes, _ = base
    hostile = copy.deepcopy(report)
    if where == "hostname":
        hostile["host"]["hostname"] = "gpu\ud800node"
    elif where == "cgroup":
        hostile["probes"] = [p for p in hostile["probes"] if p["name"] != "engine.container"] + [
            {"name": "engine.container", "status": "ok", "data": {"engines": [
                {"pid": 48213, "cgroup": "/docker/\udfff"}]}}]
    else:
        for finding in hostile["findings"]:
            finding[where] = finding[where] + "\ud800"
    plan = build_plan(saved(hostile), "saved scan \udc80", rule_probes, NOW)
    for text in (to_sh(plan, "/tmp/p"), to_json(plan), to_markdown(plan)):
        assert text.encode("utf-8")
    jsonschema.validate(json.loads(to_json(plan)), SCHEMA)


@pytest.mark.parametrize("evidence", [
    {"gpus": "٣,²,0,0,00,1"}, {"gpu": 10 ** 5000, "power_limit_w": 1.0, "power_default_limit_w": 2.0},
    {"gpu": -1, "power_limit_w": 250.0, "power_default_limit_w": 350.0},
    {"gpu": 0, "power_limit_w": float("nan"), "power_default_limit_w": 1e308},
    {"somaxconn": 10 ** 5000, "syn_backlog": True, "swappiness": 10 ** 30}])
def test_numbers_past_any_reading_make_no_command(evidence):
    findings = [{"rule": cause, "cause": cause, "key": "", "title": "t", "evidence": evidence}
                for cause in ("gpu-persistence-mode-off", "gpu-power-capped", "network-backlog-small", "swap-active")]
    plan = build_plan(saved({"host": {"hostname": "h"}, "probes": [], "findings": findings}), "x", {}, NOW)
    argv = [a for s in plan.steps for c in s.commands for a in c.argv]
    assert all(re.fullmatch(r"[a-z-]+|[0-9,.]+|-[a-z]+", a) for a in argv), argv
    assert "٣" not in str(argv) and "-1" not in argv and "nan" not in argv
    to_sh(plan, "/tmp/p").encode()
