"""The one reader of a saved scan (reports.json_report.load / check): what the treatment
(fix) and the fleet adapters act on is held to the vocabulary before anything reads it.

A rule id is quoted into fix scripts, the files a plan writes, node conditions and drain
reasons, so a saved scan may only name rule ids of the grammar that some rule file declares,
causes the vocabulary knows, counts within bounds; its text is masked on the way in."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from doctor.commands.cli import cli as main
from doctor.config import ConfigError
from reports.json_report import MAX_FINDINGS, check, load
from tests.conftest import REPO, run_cli

HOST = REPO / "tests" / "fixtures" / "hosts" / "h100-thermal-88c"
SECRET = "sk-live-0123456789abcdefSECRET"


@pytest.fixture(scope="module")
def scan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("scan") / "scan.json"
    result = CliRunner().invoke(main, ["scan", "--replay", str(HOST), "--level", "quick",
                                       "--format", "json", "-o", str(out)])
    assert result.exit_code in (0, 1, 2), result.output
    doc = json.loads(out.read_text())
    assert doc["findings"], "the recorded host must give a finding to mutate"
    return doc


def _with_finding(scan: dict, **fields) -> dict:
    doc = json.loads(json.dumps(scan))
    doc["findings"][0].update(fields)
    return doc


@pytest.mark.parametrize("rule", [
    "fd-limit-low\n# x\ntouch /tmp/canary", "../../etc/cron.d/x", "fd-limit-low;id", "$(id)",
    "FD-LIMIT-LOW", "fd-limit-low ", "", "-fd", "fd-", "a" * 81, "fd\u2028limit", "\ud800"])
def test_a_rule_id_outside_the_grammar_is_refused_with_its_json_path(scan, rule):
    with pytest.raises(ConfigError) as exc:
        check(_with_finding(scan, rule=rule), "scan.json", ConfigError)
    assert "scan.json: findings[0].rule:" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_an_unknown_rule_id_is_refused_unless_a_rule_file_declares_it(scan, tmp_path):
    doc = _with_finding(scan, rule="my-own-rule")
    with pytest.raises(ConfigError, match=r"findings\[0\]\.rule: no rule \"my-own-rule\""):
        check(doc, "scan.json", ConfigError)
    assert check(doc, "scan.json", ConfigError, frozenset({"my-own-rule"}))["findings"][0]["rule"] == "my-own-rule"


@pytest.mark.parametrize("cause", ["no-such-cause", "fd_limit_low", "fd-limit-low\n"])
def test_a_cause_the_vocabulary_lacks_is_refused(scan, cause):
    with pytest.raises(ConfigError, match=r"findings\[0\]\.cause"):
        check(_with_finding(scan, cause=cause), "scan.json", ConfigError)


def test_counts_are_bounded(scan):
    doc = json.loads(json.dumps(scan))
    doc["findings"] = [doc["findings"][0]] * (MAX_FINDINGS + 1)
    with pytest.raises(ConfigError, match=r"findings: 2,001 entries; a scan holds at most 2,000"):
        check(doc, "scan.json", ConfigError)
    doc = _with_finding(scan, evidence={f"e{i}": i for i in range(257)})
    with pytest.raises(ConfigError, match=r"findings\[0\]\.evidence: 257 entries"):
        check(doc, "scan.json", ConfigError)


def test_text_is_masked_and_made_whole_on_the_way_in(scan):
    doc = _with_finding(scan, title=f"engine --api-key {SECRET} \ud800 x",
                        evidence={"api_key": SECRET, "cmd": f"serve --hf-token {SECRET}"})
    doc["host"]["hostname"] = "node\udfff-1"
    out = check(doc, "scan.json", ConfigError)
    assert SECRET not in json.dumps(out)
    assert "\ufffd" in out["findings"][0]["title"] and "\ud800" not in out["findings"][0]["title"]
    assert out["host"]["hostname"] == "node\ufffd-1"
    json.dumps(out).encode()  # every writer after can encode it


@pytest.mark.slow
def test_the_commands_refuse_a_hostile_saved_scan_in_one_line(scan, tmp_path):
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(_with_finding(scan, rule="x\n$(touch canary)")))
    for argv in (["report", str(path), "-o", str(tmp_path / "r.html")],
                 ["fix", "--from", str(path)],
                 ["diff", str(path), str(path)]):
        result = run_cli(*argv)
        assert result.returncode == 3, (argv, result.stderr)
        assert "findings[0].rule" in result.stderr and "Traceback" not in result.stderr, argv
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "canary").exists()


@pytest.mark.slow
def test_report_reads_a_scan_made_with_the_users_rule_file_when_named(scan, tmp_path):
    rules = tmp_path / "mine.toml"
    rules.write_text('[[rule]]\nid = "my-own-rule"\ncause = "fd-limit-low"\nsymptoms = []\n'
                     'severity = "warning"\nprobes = ["host.limits"]\nwhen = "true"\n'
                     'title = "t"\nremediation = "r"\nplaybook = "fd-limit-low"\n')
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(_with_finding(scan, rule="my-own-rule")))
    out = tmp_path / "r.html"
    refused = run_cli("report", str(path), "-o", str(out))
    assert refused.returncode == 3 and "my-own-rule" in refused.stderr
    done = run_cli("report", str(path), "-o", str(out), "--rules", str(rules))
    assert done.returncode == 0, done.stderr
    assert load(path, ConfigError, frozenset({"my-own-rule"}))["findings"][0]["rule"] == "my-own-rule"
