"""``--endpoint`` values are parsed once (doctor/endpoints.py): a bad one is refused at the
command line with exit 3 and a line that names it, without its key.

Before, ``:99999``, ``:8000:8000``, ``[127.0.0.1]:8000`` or a control character went into
the scan, and all six engine probes failed with "internal error ... please report it".
"""

from __future__ import annotations

import pytest

from doctor.endpoints import EndpointError, parse
from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from probes.registry import PROBES, by_name
from doctor.rules.loader import builtin_files, load_rules
from doctor.scan import scan

KEY = "sk-endpoint-test-51c0ffee"

GOOD = [
    # (as given, the base URL, the key)
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000", None),
    ("127.0.0.1:8000", "http://127.0.0.1:8000", None),  # no scheme: http, as before
    ("127.0.0.1:8000/v1", "http://127.0.0.1:8000", None),
    ("http://[::1]:30000/", "http://[::1]:30000", None),
    ("http://[::1]", "http://[::1]", None),
    ("HTTPS://GW.Example.com/llm/v1/models", "https://gw.example.com/llm", None),
    ("http://gw.local/llm/metrics", "http://gw.local/llm", None),
    ("http://vllm_svc:8000", "http://vllm_svc:8000", None),  # a container's service name
    ("localhost", "http://localhost", None),
    (f"http://:{KEY}@127.0.0.1:8000", "http://127.0.0.1:8000", KEY),
    (f"http://admin:{KEY}@127.0.0.1:8000/metrics", "http://127.0.0.1:8000", KEY),
    (f"http://{KEY}@127.0.0.1:8000", "http://127.0.0.1:8000", KEY),
    ("http://:a%40b%2Fc%25d@127.0.0.1:8000", "http://127.0.0.1:8000", "a@b/c%d"),
    ("http://:k:with:colons@h:1", "http://h:1", "k:with:colons"),
]


@pytest.mark.parametrize("given,base,key", GOOD, ids=[g[0] for g in GOOD])
def test_an_endpoint_is_read_in_one_spelling(given, base, key):
    named = parse(given)
    assert (named.base_url, named.key) == (base, key)
    again = parse(named.url)  # what the command line hands the scan parses to the same
    assert (again.base_url, again.key) == (base, key)
    assert KEY not in named.base_url and KEY not in repr(named)


BAD = [
    # (as given, what the refusal says)
    (":99999", "no host"),
    ("http://127.0.0.1:99999", "the port must be a number from 1 to 65535, not '99999'"),
    ("http://127.0.0.1:0", "from 1 to 65535, not '0'"),
    ("http://127.0.0.1:", "from 1 to 65535, not ''"),
    ("http://127.0.0.1:80a", "from 1 to 65535, not '80a'"),
    ("127.0.0.1:8000:8000", "more than one ':' after the host"),
    ("http://::1:8000", "more than one ':' after the host"),
    ("[127.0.0.1]:8000", "[127.0.0.1] is not an IPv6 address; brackets hold IPv6 only"),
    ("http://[::1:8000", "an IPv6 address opens '[' and closes ']'"),
    ("http://[::1]8000", "after ']' comes ':PORT' or nothing"),
    ("http://127.0.0.1:8000\x07", "holds the character '\\x07'"),
    ("http://127.0.0.1:8000\x1b[2J", "holds the character '\\x1b'"),
    ("http://127.0.0.1:8000/\n", "holds the character '\\n'"),
    ("http://127.0.0.1 :8000", "holds a space"),
    ("http://h\u00e9.local:8000", "holds the character 'é'"),
    ("http://h:\uff18\uff10", "holds the character"),  # fullwidth digits
    ("ftp://127.0.0.1:21", "the scheme must be http or https, not 'ftp'"),
    ("file:///etc/passwd", "the scheme must be http or https"),
    ("http://127.0.0.1:8000/?a=1", "no ?query or #fragment"),
    ("http://127.0.0.1:8000/#x", "no ?query or #fragment"),
    ("http://999.0.0.1:8000", "999.0.0.1 is not an IPv4 address"),
    ("http://-x-.local:8000", "is not a host name"),
    ("http://" + "a" * 64 + ".local", "is not a host name"),
    ("http://h:1/a/../../etc", "may not hold '.' or '..' segments"),
    ("http://h:1//x", "is not a URL path"),
    ("http://" + "a." * 1100 + "b", "longer than 2048 characters"),
    ("", "got nothing"),
    (f"http://:{KEY}%zz@127.0.0.1:8000", "the key must be printable ASCII"),
    (f"http://:{KEY}%ff@127.0.0.1:8000", "the key must be printable ASCII"),
    (f"http://:{KEY}%0d%0aX:%20y@127.0.0.1:8000", "the key must be printable ASCII"),
]


@pytest.mark.parametrize("given,says", BAD, ids=[repr(b[0])[:60] for b in BAD])
def test_a_bad_endpoint_is_refused_saying_why_and_never_showing_the_key(given, says):
    with pytest.raises(EndpointError) as err:
        parse(given)
    assert says in str(err.value)
    assert KEY not in str(err.value)
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)


# machine: should the refusal regress, it would scan this machine (tests/tiers.py)
@pytest.mark.machine
@pytest.mark.parametrize("given,says", [
    (":99999", "no host"), ("127.0.0.1:8000:8000", "more than one ':'"),
    ("[127.0.0.1]:8000", "brackets hold IPv6 only"), ("http://127.0.0.1:8000\x07", "'\\x07'"),
    (f"http://:{KEY}%zz@127.0.0.1:1", "the key must be printable ASCII")])
@pytest.mark.parametrize("command", ["scan", "capture", "warmup", "load"])
def test_the_command_line_refuses_a_bad_endpoint_with_exit_3(cli, tmp_path, command, given, says):
    args = {"scan": ["scan", "--level", "quick", "--no-progress"],
            "capture": ["capture", str(tmp_path / "cap"), "--level", "quick", "--no-progress"],
            "warmup": ["warmup"], "load": ["load", "--no-save"]}[command]
    result = cli(*args, "--endpoint", given, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "--endpoint" in result.stderr and says in result.stderr
    assert "Traceback" not in result.stderr and KEY not in result.stderr + result.stdout
    assert not (tmp_path / "cap").exists()  # refused before anything ran


def test_a_bad_api_key_option_is_refused_without_being_shown(cli):
    result = cli("load", "--endpoint", "http://127.0.0.1:1", "--no-save",
                 env={"LLM_DOCTOR_API_KEY": f"{KEY}\r\nX-Injected: 1"})
    assert result.returncode == 3 and "--api-key" in result.stderr
    assert KEY not in result.stderr + result.stdout


def test_load_takes_a_bare_host_and_port_as_http_as_the_scan_does(cli):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("load", "--endpoint", f":{KEY}@127.0.0.1:{port}", "--max-seconds", "5",
                 "--max-concurrency", "1", "--no-save", timeout=60)
    assert result.returncode == 3
    assert f"http://127.0.0.1:{port}: every request failed" in result.stderr
    assert KEY not in result.stderr + result.stdout


def test_a_scan_given_a_bad_endpoint_by_another_caller_names_it_in_discovery(monkeypatch):
    """The command line refuses these; a caller that builds ScanOptions itself (the daemon,
    later) gets the refusal as the engine's error, and no probe fails inside."""
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())
    rules = load_rules(builtin_files(), by_name())
    options = ScanOptions(level=Level.QUICK, endpoints=("[127.0.0.1]:8000", f"http://:{KEY}@h:99999"))
    report = scan(LiveHost(), options, tuple(p for p in PROBES if p.name.startswith("engine.")),
                  rules)
    for probe in report.probes:
        assert "internal error" not in (probe.reason or ""), (probe.name, probe.reason)
    discovery = {p.name: p for p in report.probes}["engine.discovery"]
    errors = [e.error for e in discovery.record.engines]
    assert any("brackets hold IPv6 only" in (e or "") for e in errors)
    assert any("from 1 to 65535" in (e or "") for e in errors)
    assert all(KEY not in (e or "") for e in errors)
