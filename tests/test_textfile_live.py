"""A real node_exporter (Debian's prometheus-node-exporter, its textfile collector alone)
serves what 'scan --format prom' and 'daemon --textfile' write, fetched over loopback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO
from tests.daemon_helpers import need
from tests.live_stack import Proc, daemon, free_port, get, wait_for
from tests.test_textfile import POWERSAVE, hostile_host

pytestmark = pytest.mark.live

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _series(text: str, prefix: str = "") -> Series:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith(prefix)}


@pytest.fixture
def node_exporter(tmp_path):
    """(the textfile directory, its /metrics URL); stopped at the end, pass or fail."""
    binary = need("prometheus-node-exporter", "prometheus-node-exporter")
    folder = tmp_path / "textfile"
    folder.mkdir()
    port = free_port()
    proc = Proc("node_exporter", [binary, "--collector.disable-defaults", "--collector.textfile",
                                  f"--collector.textfile.directory={folder}",
                                  f"--web.listen-address=127.0.0.1:{port}"], tmp_path)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("node_exporter to serve", lambda: "node_textfile_scrape_error" in get(url), 30)
        yield folder, url
    finally:
        proc.stop()


GATHERING = ("promhttp_metric_handler_errors_total", (("cause", "gathering"),))


def _scrape(url: str) -> Series:
    """node_exporter's page, which must say it read every file (a file it cannot parse is a
    scrape error) and gathered every series (a series twice is a gathering error: it logs
    it and drops the repeat)."""
    got = _series(get(url))
    assert got[("node_textfile_scrape_error", ())] == 0.0, "node_exporter could not read a file"
    assert got.get(GATHERING, 0.0) == 0.0, "node_exporter dropped a series it had seen"
    return got


def _served(url: str, written: Series) -> Series:
    got = _scrape(url)
    llm = {k: v for k, v in got.items() if k[0].startswith("llm_doctor_")}
    assert llm == written
    return got


def test_node_exporter_serves_a_scans_textfile_and_a_hostile_ones(cli, node_exporter):
    folder, url = node_exporter
    out = folder / "llm-doctor.prom"
    result = cli("scan", "--replay", str(POWERSAVE), "--format", "prom", "-o", str(out),
                 "--no-progress")
    assert result.returncode == 1, result.stderr
    got = _served(url, _series(out.read_text()))
    assert got[("llm_doctor_finding", (
        ("cause", "cpu-powersave-governor"), ("key", ""), ("rule", "cpu-powersave-governor"),
        ("severity", "warning"), ("symptoms", "slowdown,slow-first-token")))] == 1.0
    assert got[("llm_doctor_probe_success", (("probe", "host.cpu"),))] == 1.0
    assert ("node_textfile_mtime_seconds", (("file", str(out)),)) in got

    # the same file, rewritten from a host whose labels hold quotes, newlines, backslashes,
    # a lone surrogate and 100,000 characters: node_exporter still reads all of it
    result = cli("scan", "--replay", str(hostile_host(folder.parent)), "--format", "prom",
                 "-o", str(out), "--no-progress")
    assert result.returncode in (0, 1), result.stderr
    got = _served(url, _series(out.read_text()))
    comms = {dict(labels)["comm"] for name, labels in got
             if name == "llm_doctor_host_top_process_cpu_cores"}
    assert "line\nbreak" in comms


def _daemon_textfile(tmp_path: Path, textfile: Path, *flags: str):
    return daemon(tmp_path, "", "--replay", str(POWERSAVE), "--interval", "1s",
                  "--state-file", "", "--textfile", str(textfile), *flags, repo=REPO)


def test_node_exporter_serves_the_daemons_textfile_while_it_is_rewritten(node_exporter, tmp_path):
    """Scraped 40 times over about 4 s while the daemon rewrites the file every second:
    never a half file (node_exporter would count a scrape error, or miss series)."""
    folder, url = node_exporter
    out = folder / "llm-doctor.prom"
    proc, address = _daemon_textfile(tmp_path, out)
    try:
        wait_for("the daemon's textfile", out.exists, 30)
        written_at = set()
        for _ in range(40):
            got = _scrape(url)
            names = {name for name, _ in got}
            assert {"llm_doctor_finding", "llm_doctor_probe_success", "llm_doctor_build_info",
                    "llm_doctor_evaluations_total", "llm_doctor_scan_exit_code"} <= names
            written_at.add(got[("llm_doctor_textfile_written_timestamp_seconds", ())])
            time.sleep(0.1)
        assert len(written_at) >= 2, "the file was not rewritten while it was scraped"
        # what the daemon serves on its own port, node_exporter serves from the file
        own = _series(get(f"http://{address}/metrics"), "llm_doctor_finding")
        assert own and own.keys() == _series(get(url), "llm_doctor_finding").keys()
        assert "llm_doctor_scrape_timestamp_seconds" not in out.read_text()
    finally:
        proc.stop()
    assert "cannot write the textfile" not in proc.log()
    # looked at once the daemon has stopped: while it runs, a rewrite's temporary file may be
    # there for a moment (node_exporter skips dotfiles), but none may be left behind
    assert [p.name for p in folder.iterdir()] == ["llm-doctor.prom"]


def test_a_textfile_the_daemon_cannot_write_is_logged_once_and_again_when_it_can(tmp_path):
    folder = tmp_path / "not-yet"
    out = folder / "llm-doctor.prom"
    proc, address = _daemon_textfile(tmp_path, out)
    try:
        def evaluations() -> float:
            series = _series(get(f"http://{address}/metrics"), "llm_doctor_evaluations")
            return series.get(("llm_doctor_evaluations_total", ()), 0.0)

        wait_for("three beats", lambda: evaluations() >= 3, 30)
        assert proc.log().count(f"cannot write the textfile {out} (--textfile)") == 1
        folder.mkdir()
        wait_for("the textfile", out.exists, 30)
        wait_for("the log to say so", lambda: f"textfile {out} written again" in proc.log(), 10)
    finally:
        proc.stop()


def test_node_exporter_takes_the_textfile_of_every_recorded_host(node_exporter):
    """Every committed recorded host, scanned at its level: node_exporter reads the file and
    gathers every series of it (promtool does not mind a series twice; node_exporter drops
    the repeat and counts a gathering error)."""
    from doctor.fleet.textfile import scan_text
    from doctor.model import Level, ScanOptions
    from doctor.output import write_atomic
    from doctor.scan import scan
    from doctor.seam.recorded import RecordedHost
    from probes.registry import PROBES
    from tests.test_exporter_fixtures import HOSTS, RULES

    folder, url = node_exporter
    refused: list[str] = []
    for path in HOSTS:
        host = RecordedHost(path)
        meta = host.manifest["host"]
        options = ScanOptions(level=Level.parse(meta.get("level", "standard")),
                              model_dirs=tuple(meta.get("model_dirs", [])))
        text = scan_text(scan(host, options, PROBES, RULES))
        write_atomic(folder / "llm-doctor.prom", text)
        got = _series(get(url))
        if got[("node_textfile_scrape_error", ())] != 0.0 or got.get(GATHERING, 0.0) != 0.0 \
                or ("llm_doctor_textfile_written_timestamp_seconds", ()) not in got:
            refused.append(path.name)
            break  # the gathering errors count up from here: the first host is the one
    assert not refused, f"node_exporter could not read or gather the textfile of {refused}"
