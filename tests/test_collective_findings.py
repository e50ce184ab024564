"""``llm-doctor collective`` judges its one probe: the built-in rules of
checks/net_collective.toml evaluated on the record, the findings in its saved scan and under
its text, the exit status unchanged by them (doctor/commands/collective.py). The launcher's
JSON here is in the shapes tests/test_collective_netns.py records from real runs; one test
runs the real command, whose kernel stops at setup before torch (no all-reduce starts)."""

from __future__ import annotations

import json

import pytest

from doctor.commands import collective as command
from doctor.rules.loader import builtin_files, load_rules
from probes.registry import by_name
from reports.json_report import read
from tests.test_xnode import GOOD

SETUP_FAILED = {"outcome": "failed", "failed_step": "setup", "missing": [], "world": 2,
                "master": "10.231.0.1:29614", "ranks_here": [1],
                "failure": "GLOO_SOCKET_IFNAME=eth9: interface eth9 is down",
                "path": {"source": "GLOO_SOCKET_IFNAME=eth9", "interface": None}}
NEVER_JOINED = {**GOOD, "outcome": "failed", "failed_step": "rendezvous", "busbw_gbps": None,
                "ratio": None, "world": 3, "missing": [1, 2], "join_s": 4.0,
                "failure": "rank(s) 1, 2 of 3 never joined within 4 s"}


@pytest.fixture(scope="module")
def rules():
    """The built-in rules, loaded once for the module (what the command loads per run)."""
    return load_rules(builtin_files(), by_name())


def _rules(report) -> list[tuple[str, str]]:
    return [(f.rule, f.severity.label) for f in report.findings]


def test_the_saved_scan_carries_the_findings_and_a_healthy_gloo_run_has_none(tmp_path, rules):
    assert _rules(command.report_of(GOOD, 4.2, 1.8e9, rules)) == []  # gloo at 0.4 of TCP: CPU-bound
    saved = tmp_path / "collective.json"
    saved.write_text(command.saved_scan(NEVER_JOINED, 6.0, 1.8e9, rules))
    scan = read(saved, ValueError)
    assert [(f.rule, f.severity.label) for f in scan.findings] == [("collective-rank-missing", "warning")]
    assert "rank(s) 1, 2 of 3 never joined the master 10.0.0.1:29500" in scan.findings[0].title()


def test_nccl_low_and_a_setup_failure_on_the_path_are_judged(rules):
    nccl = {**GOOD, "backend": "nccl", "ratio": 0.2, "busbw_gbps": 2.5, "ceiling_gbps": 12.5}
    assert _rules(command.report_of(nccl, 4.2, 1.8e9, rules)) == [("collective-bandwidth-low", "warning")]
    assert _rules(command.report_of(SETUP_FAILED, 0.3, 1.8e9, rules)) == \
        [("collective-interface-unusable", "critical")]


@pytest.mark.parametrize("data,rc", [(GOOD, 0), (NEVER_JOINED, 1)])
def test_the_exit_status_is_the_run_s_and_the_text_shows_the_findings(monkeypatch, capsys, data, rc):
    # the launcher's JSON handed in where the child would print it: the command's own part
    monkeypatch.setattr(command, "run_kernel", lambda *a, **k: dict(data))
    with pytest.raises(SystemExit) as ended:
        command.collective.main(["--master", "10.0.0.1:29500", "--rank", "0", "--world", "2",
                                 "--state-file", ""], standalone_mode=False)
    out = capsys.readouterr().out
    assert ended.value.code == rc
    assert ("[warning] Cross-node all-reduce: rank(s) 1, 2 of 3 never joined" in out) == (rc == 1)
    assert "collective-rank-missing" in out or rc == 0


@pytest.mark.slow
def test_the_real_command_judges_an_interface_that_does_not_exist(cli):
    got = cli("collective", "--master", "10.0.0.1:29500", "--rank", "1", "--world", "2",
              "--format", "json", "--state-file", "", env={"GLOO_SOCKET_IFNAME": "llmdnone0"},
              timeout=60)
    assert got.returncode == 1, got.stderr
    report = json.loads(got.stdout)
    assert [f["rule"] for f in report["findings"]] == ["collective-interface-unusable"]
    assert "no interface llmdnone0 here" in report["findings"][0]["title"]


def test_the_exporter_walks_the_record_pairs_and_ranks_included():
    from doctor.daemon.exporter import series
    from doctor.model import ProbeResult
    from probes.net import xnode

    pairs = [{"round": 0, "pair": [0, 1], "busbw_gbps": 0.4},
             {"round": 1, "pair": [1, 2], "busbw_gbps": 0.01},
             {"round": 1, "pair": [2, 0], "busbw_gbps": 0.012}]
    record = xnode.record({**NEVER_JOINED, "missing": [2], "pairs": pairs})
    rows, undeclared = series({"net.collective": ProbeResult("net.collective", "ok", 1.0,
                                                             record=record)})
    got = {(m.name.removeprefix("llm_doctor_net_collective_"), labels): value
           for m, labels, value in rows}
    assert undeclared == {}
    assert got[("missing_rank", (("rank", "2"),))] == 1.0
    assert got[("suspect_rank", (("rank", "2"),))] == 1.0
    assert got[("pair_bus_bytes_per_second", (("round", "1"), ("ranks", "1-2")))] == 1e7
    assert got[("interface_mtu_bytes", ())] == 1500.0
    assert ("bus_bytes_per_second", ()) not in got  # not measured: no series, not zero


def test_diff_holds_busbw_and_ratio_to_the_bandwidth_floor_per_group(rules):
    from doctor.diff.compare import compare
    from doctor.diff.model import CHANGED, SAME

    def scan(**over):
        return json.loads(command.saved_scan({**GOOD, **over}, 4.2, 1.8e9, rules))

    at = "collective[gloo/2]"
    diff = compare(scan(), scan(busbw_gbps=0.2, ratio=0.133))
    facts = {f.id: f for f in diff.facts}
    busbw = facts[f"{at}.busbw_gbps"]
    assert (busbw.status, busbw.before, busbw.after, busbw.direction, busbw.floor) == \
        (CHANGED, 0.6, 0.2, "worse", 0.10)
    assert busbw.causes == ("collective-bandwidth-low", "collective-slow-host")
    assert facts[f"{at}.ratio"].direction == "worse" and facts[f"{at}.outcome"].status == SAME
    within = {f.id: f for f in compare(scan(), scan(busbw_gbps=0.63, ratio=0.42)).facts}
    assert within[f"{at}.busbw_gbps"].status == SAME  # 5 %: under the 10 % noise floor
    other = {f.id for f in compare(scan(), scan(world=4)).facts}
    assert "collective[gloo/4].busbw_gbps" in other  # another group: another fact, no delta


def test_a_run_stopped_at_setup_reads_without_none_and_a_scan_skips_the_probe_with_the_command(
        tmp_path):
    from doctor.model import Level, ScanOptions, Skip
    from doctor.seam.live import LiveHost
    from probes.net import xnode

    text = "\n".join(xnode.describe(xnode.record(SETUP_FAILED)))
    assert "None" not in text and "GLOO_SOCKET_IFNAME=eth9: interface eth9 is down" in text
    spec = by_name()["net.collective"]
    assert spec.level == Level.QUICK  # it reads one file the command kept (test_collective_file)
    with pytest.raises(Skip, match=r"llm-doctor collective --master HOST:PORT --rank N --world W"):
        spec.run(LiveHost(), ScanOptions(level=Level.QUICK,
                                         collective_file=str(tmp_path / "collective.json")))
