"""The [daemon] table: durations, lists, mistakes named with their file; report retention."""

from __future__ import annotations

import pytest

from doctor.config import ConfigError
from doctor.daemon.incidents import report_name, write_report
from doctor.daemon.settings import Settings, load_settings, with_flags


def test_daemon_table_is_read_with_durations_and_for_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[daemon]\ninterval = "30s"\nkernel_interval = "0s"\nalertmanager = '
                    '"http://127.0.0.1:9093"\n[daemon.for]\ncpu-contention = "1m"\n')
    settings = load_settings(path)
    assert settings.interval_s == 30 and settings.kernel_interval_s == 0
    assert settings.alertmanager == ("http://127.0.0.1:9093",)
    assert settings.for_s == {"cpu-contention": 60}
    assert with_flags(settings, interval_s=5.0, listen=None).interval_s == 5.0


@pytest.mark.parametrize("body, message", [
    ('interval = "soon"', "daemon.interval: 'soon' is not a duration"),
    ("intervall = 3", "unknown key daemon.intervall (did you mean 'interval'?)"),
    ("report_keep = \"ten\"", "daemon.report_keep: must be a int"),
    ('level = "deep"', "use quick, standard or full"),
])
def test_mistakes_name_the_file_and_key(tmp_path, body, message):
    path = tmp_path / "c.toml"
    path.write_text(f"[daemon]\n{body}\n")
    with pytest.raises(ConfigError, match=None) as err:
        load_settings(path)
    assert str(path) in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("listen, address", [("127.0.0.1:9411", ("127.0.0.1", 9411)),
                                             ("[::1]:0", ("::1", 0))])
def test_listen_addresses(listen, address):
    assert Settings(listen=listen).address() == address


def test_daemon_config_mistake_is_one_line_exit_3(cli, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[daemon.for]\nno-such-rule = \"1m\"\n")
    result = cli("daemon", "--config", str(path))
    assert result.returncode == 3 and "no-such-rule" in result.stderr
    assert "Traceback" not in result.stderr


def test_incident_reports_keep_only_the_newest(tmp_path):
    for i in range(7):
        write_report(str(tmp_path), report_name("cpu-contention", f"pid {i}", 1_700_000_000 + i),
                     f"<html>{i}</html>", keep=3)
    kept = sorted(p.read_text() for p in tmp_path.glob("incident-*.html"))
    assert kept == ["<html>4</html>", "<html>5</html>", "<html>6</html>"]
    assert not list(tmp_path.glob(".incident-*"))  # no temporary file left behind
