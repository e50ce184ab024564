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
    ("report_keep = \"ten\"", "daemon.report_keep = 'ten': must be a whole number"),
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


@pytest.mark.slow
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


BAD_VALUES = [  # (line in [daemon], what the message must name)
    ('listen = "127.0.0.1:99999"', "daemon.listen = '127.0.0.1:99999': the port '99999'"),
    ('listen = ":8000:8000"', "daemon.listen = ':8000:8000': HOST:PORT with one colon"),
    ('listen = "127.0.0.1:http"', "the port 'http' is not a number"),
    ('listen = "127.0.0.1:٩٤١١"', "is not a number from 0 to 65535"),  # Unicode digits
    ('listen = "127.0.0.1\\u0007:9411"', "daemon.listen = '127.0.0.1\\x07:9411': holds a control"),
    ('listen = "[::1:9411"', "an IPv6 address goes in brackets, [::1]:9411"),
    ('listen = "[zz]:9411"', "'[zz]' is not an IPv6 address"),
    ('listen = "bad_host!:9411"', "is not an IPv4 address or a host name"),
    ("listen = 9411", "daemon.listen = 9411: must be a string"),
    ("interval = nan", "daemon.interval = nan: must be a finite number"),
    ("interval = inf", "daemon.interval = inf: must be a finite number"),
    ("interval = -1", "daemon.interval = -1: must be between 1s and 24h"),
    ("interval = 0", "daemon.interval = 0: must be between 1s and 24h"),
    ('interval = "0s"', "daemon.interval = '0s': must be between 1s and 24h"),
    ("interval = 1e999", "daemon.interval = inf"),
    (f"interval = {10**400}", "daemon.interval = a 401-digit number: must be between"),
    ("interval = true", 'daemon.interval = True: must be a duration like "30s"'),
    ("resend_interval = []", 'daemon.resend_interval = []: must be a duration like "30s"'),
    ('history = "1s"', "daemon.history = '1s': must be between 1m and 720h"),
    ('kernel_interval = "5s"', "daemon.kernel_interval = '5s': must be 0s (only on SIGUSR1)"),
    ("resend_interval = -inf", "daemon.resend_interval = -inf: must be a finite number"),
    ("history = 0", "daemon.history = 0: must be between 1m and 720h"),
    ("report_keep = -1", "daemon.report_keep = -1: must be a whole number from 1 to 100000"),
    ("report_keep = 0", "daemon.report_keep = 0: must be a whole number from 1"),
    ("report_keep = 2.5", "daemon.report_keep = 2.5: must be a whole number"),
    ("report_keep = true", "daemon.report_keep = True: must be a whole number"),
    (f"report_keep = {10**30}", "daemon.report_keep = a 31-digit number"),
    ("resolve_after = 0", "daemon.resolve_after = 0: must be a whole number from 1 to 1000"),
    ('resolve_after = "2"', "daemon.resolve_after = '2': must be a whole number"),
    ('kernels_while_serving = "true"', "daemon.kernels_while_serving = 'true': must be true or"),
    ("kernels_while_serving = 1", "daemon.kernels_while_serving = 1: must be true or false"),
    ('level = 3', "daemon.level = 3; use quick, standard or full"),
    ('alertmanager = ["ftp://127.0.0.1:9093"]', "must be an http:// or https:// URL"),
    ('alertmanager = ["http://"]', "must be an http:// or https:// URL with a host"),
    ('alertmanager = ["http://127.0.0.1:99999"]', "not a URL (Port out of range"),
    ('webhook = ["http://[::1"]', "daemon.webhook = 'http://[::1': not a URL"),
    ('webhook = ["http://user:pw@127.0.0.1/x"]', "a user or password in the URL is never sent"),
    ("webhook = [5]", "daemon.webhook = 5: must be a string"),
    ('webhook = "http://127.0.0.1\\n/x"', "holds a control character"),
    ('report_dir = "/tmp/x\\u0000y"', "daemon.report_dir = '/tmp/x\\x00y': holds a control"),
    ("report_dir = []", "daemon.report_dir = []: must be a string (a path)"),
    ('basic_auth_user = "a:b"\nbasic_auth_password_file = "/p"', "cannot hold ':'"),
    ('basic_auth_user = "prom"', "basic auth needs both"),
    ('tls_key_file = "/k.pem"', "TLS needs both daemon.tls_cert_file and daemon.tls_key_file"),
    ('[daemon.for]\ncpu-contention = "9999h"', "[daemon.for] 'cpu-contention': a rule id with"),
]


@pytest.mark.parametrize("body, message", BAD_VALUES, ids=[b for b, _ in BAD_VALUES])
def test_every_value_is_checked_with_its_file_line_and_key(tmp_path, body, message):
    path = tmp_path / "c.toml"
    path.write_text(f"[daemon]\n{body}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert str(err.value).startswith(f"{path}:"), err.value
    assert message in str(err.value), err.value
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("body, attr, value", [
    ('listen = "[::1]:0"', "listen", "[::1]:0"),
    ('listen = "localhost:9411"', "listen", "localhost:9411"),
    ('listen = "0.0.0.0:65535"', "listen", "0.0.0.0:65535"),
    ("interval = 30", "interval_s", 30.0),
    ("interval = 2.5", "interval_s", 2.5),
    ('kernel_interval = "0s"', "kernel_interval_s", 0.0),
    ('webhook = "https://hooks.example/x"', "webhook", ("https://hooks.example/x",)),
    ("report_keep = 1", "report_keep", 1),
])
def test_good_values_are_taken(tmp_path, body, attr, value):
    path = tmp_path / "c.toml"
    path.write_text(f"[daemon]\n{body}\n")
    assert getattr(load_settings(path), attr) == value


@pytest.mark.parametrize("flags, message", [
    ({"listen": "127.0.0.1:99999"}, "--listen = '127.0.0.1:99999': the port"),
    ({"interval_s": 0.5}, "--interval = 0.5: must be between 1s and 24h"),
    ({"interval_s": float("nan")}, "--interval = nan: must be a finite number"),
    ({"kernel_interval_s": 1e30}, "--kernel-interval = 1e+30: must be 0s"),
    ({"alertmanager": ("am:9093",)}, "--alertmanager = 'am:9093': must be an http://"),
    ({"report_dir": "/x\0"}, "--report-dir = '/x\\x00': holds a control character"),
])
def test_flags_are_checked_as_their_keys_and_named_as_flags(flags, message):
    with pytest.raises(ConfigError, match=None) as err:
        with_flags(Settings(), **flags)
    assert message in str(err.value), err.value


def test_a_report_keep_below_one_still_keeps_the_report_just_written(tmp_path):
    for i in range(3):
        write_report(str(tmp_path), report_name("r", f"k{i}", 1_700_000_000 + i), "x", keep=-1)
    assert len(list(tmp_path.glob("incident-*.html"))) == 1
