"""The daemon's settings: the ``[daemon]`` table of the config file, then command-line flags.

    [daemon]
    listen = "127.0.0.1:9411"        # host:port; [::1]:9411; port 0 picks a free one
    interval = "15s"                 # cheap read-only probes and engine pages (1s to 24h)
    kernel_interval = "6h"           # micro-kernels, disk reads; "0s": only on SIGUSR1
    kernels_while_serving = false    # run micro-kernels while an engine is serving
    requests = false                 # true: warm-up and output sampling send requests to engines
    level = "standard"               # quick: never run micro-kernels
    report_dir = "/var/lib/llm-doctor/reports"
    report_keep = 50                 # newest incident reports kept
    state_file = "/var/lib/llm-doctor/state.json"  # the last evaluation, for the adapters; "" = none
    textfile = ""                    # node_exporter's textfile collector: DIR/llm-doctor.prom
    alertmanager = ["http://127.0.0.1:9093"]
    webhook = []
    resend_interval = "1m"           # firing alerts re-sent to Alertmanager
    resolve_after = 2                # clear evaluations in a row before an alert resolves
    history = "1h"                   # measurements kept in memory for the reports' plots
    tls_cert_file = ""               # both set: serve /metrics over HTTPS
    tls_key_file = ""
    basic_auth_user = ""             # both set: require HTTP basic auth
    basic_auth_password_file = ""    # a file holding the password (keep it mode 0600)
    [daemon.for]                     # a rule's 'for' window, overridden
    cpu-contention = "2m"

The config loader (doctor/config.py) owns ``[scan]`` and ``[rules]``; this module reads
``[daemon]`` from the same file. Every value is checked before the daemon starts, a flag as
its key: its type (a boolean is not a number, a string not a boolean), a number's finiteness
and range, an address's host and port, a URL's scheme and host, a path's characters. A
mistake is one ConfigError naming the file, the line and the key (or the flag): exit 3.
The files the settings name are read by the server and the incident writer when they start
(``read_setting_file``: the guarded reader, so a FIFO or /dev/zero is refused at once).
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from doctor.model import Level
from doctor.config import ConfigError
from doctor.durations import parse as parse_duration
from doctor.endpoints import EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.i18n import lazy, t, translated
from doctor.tomlfile import LineIndex, read_text
from doctor.vocabulary import suggest

DURATIONS = {"interval": "interval_s", "kernel_interval": "kernel_interval_s",
             "resend_interval": "resend_s", "history": "history_s"}
FLAGS = {"listen": "--listen", "interval_s": "--interval", "kernel_interval_s": "--kernel-interval",
         "level": "--level", "report_dir": "--report-dir",
         "state_file": "--state-file", "textfile": "--textfile", "alertmanager": "--alertmanager",
         "webhook": "--webhook", "model_dirs": "--model-dir", "endpoints": "--endpoint",
         "rule_files": "--rules"}
DAY_S = 86400.0
# The range of each number, in its unit (seconds, reports, evaluations), and why.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "interval_s": (1.0, DAY_S, lazy("between 1s and 24h (each beat starts the probes' threads)")),
    "resend_s": (1.0, DAY_S, lazy("between 1s and 24h")),
    "history_s": (60.0, 30 * DAY_S, lazy("between 1m and 720h")),
    "report_keep": (1, 100_000, lazy("a whole number from 1 to 100000")),
    "resolve_after": (1, 1000, lazy("a whole number from 1 to 1000 (evaluations)")),
}
KERNEL_MIN_S = 60.0  # a micro-kernel loads the machine for seconds: not more than once a minute
MAX_FOR_S = 30 * DAY_S
MAX_URLS = 16
MAX_TEXT = 4096  # a path or a URL
LEVELS = Level.names()
_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "127.0.0.1:9411"
    interval_s: float = 15.0
    kernel_interval_s: float = 6 * 3600.0
    kernels_while_serving: bool = False
    # Completion requests to engines (engine.warmup, engine.output) at kernel_interval: only
    # when asked; [scan] requests does not turn them on for the daemon
    requests: bool = False
    level: str = ""  # "": as [scan] says, else standard (doctor/commands/setup.py)
    report_dir: str = ""
    report_keep: int = 50
    # the last evaluation, atomically, for npd and slurm-healthcheck (doctor/daemon/state.py)
    state_file: str = "/var/lib/llm-doctor/state.json"
    # the exporter's series after every beat, atomically, for node_exporter's textfile
    # collector (doctor/fleet/textfile.py); "" = none
    textfile: str = ""
    alertmanager: tuple[str, ...] = ()
    webhook: tuple[str, ...] = ()
    resend_s: float = 60.0
    resolve_after: int = 2
    history_s: float = 3600.0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    basic_auth_user: str = ""
    basic_auth_password_file: str = ""
    # the scan's own options, as `scan` takes them (doctor/commands/setup.py builds the
    # scan's options from these, the flags and [scan]): empty means "as [scan] says"
    model_dirs: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ()
    rule_files: tuple[str, ...] = ()
    for_s: dict[str, float] = field(default_factory=dict)

    def address(self) -> tuple[str, int]:
        """"127.0.0.1:9411" → ("127.0.0.1", 9411); "[::1]:0" → ("::1", 0)."""
        try:
            return parse_listen(self.listen)
        except ValueError as exc:
            raise ConfigError(t("listen address {value}: {error}", value=_shown(self.listen),
                                error=exc)) from None


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT as (host, port); ValueError saying what is wrong with it."""
    if len(text) > 300 or not text.isprintable():
        raise ValueError(t("holds a control character or is too long; "
                           "write HOST:PORT, e.g. 127.0.0.1:9411"))
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise ValueError(t("must be HOST:PORT, e.g. 127.0.0.1:9411 or [::1]:9411"))
    if not _PORT.fullmatch(port) or int(port) > 65535:
        raise ValueError(t("the port {port} is not a number from 0 to 65535 "
                           "(HOST:PORT, e.g. 127.0.0.1:9411)", port=f"{port!r:.20}"))
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(t("{host} is not an IPv6 address like [::1]",
                               host=f"{host!r:.60}")) from None
        return host[1:-1], int(port)
    if ":" in host:
        raise ValueError(t("HOST:PORT with one colon; an IPv6 address goes in brackets, [::1]:9411"))
    if len(host) > 253 or not _HOST_NAME.fullmatch(host):
        raise ValueError(t("{host} is not an IPv4 address or a host name", host=f"{host!r:.60}"))
    return host, int(port)


def _shown(value: Any) -> str:
    """A value for a message: short, escaped, a 400-digit number said as such (Python will
    not even print one of over 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return t("a {digits}-digit number", digits=int(value.bit_length() * math.log10(2)) + 1)
    return f"{value!r:.80}"


def _checked_number(at: str, attr: str, value: Any, given: Any) -> float | int:
    """``value`` if it is a number in ``attr``'s range; ``given`` is what the user wrote
    (a duration's text), for the message."""
    whole = isinstance(getattr(Settings(), attr), int)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            whole and not isinstance(value, int)):
        kind = t("a whole number") if whole else t("a duration like \"30s\" or a number of seconds")
        raise ConfigError(t("{at} = {value}: must be {kind}", at=at, value=_shown(given), kind=kind))
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(t("{at} = {value}: must be a finite number", at=at, value=_shown(given)))
    if attr == "kernel_interval_s":
        if value != 0 and not KERNEL_MIN_S <= value <= 30 * DAY_S:
            raise ConfigError(t("{at} = {value}: must be 0s (only on SIGUSR1) or "
                                "between 1m and 720h", at=at, value=_shown(given)))
    elif attr in BOUNDS:
        low, high, what = BOUNDS[attr]
        if not low <= value <= high:
            raise ConfigError(t("{at} = {value}: must be {kind}", at=at, value=_shown(given),
                                kind=translated(what)))
    return value if whole else float(value)


def _text(at: str, value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(t("{at} = {value}: must be a string ({what})", at=at,
                            value=_shown(value), what=what))
    if len(value) > MAX_TEXT or not value.isprintable():
        raise ConfigError(t("{at} = {value}: holds a control character or is over {max} "
                            "characters; write {what}", at=at, value=_shown(value),
                            max=MAX_TEXT, what=what))
    return value


def _url(at: str, value: Any) -> str:
    text = _text(at, value, t("a URL like http://127.0.0.1:9093"))
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (ValueError when it is not a number from 0 to 65535)
    except ValueError as exc:
        raise ConfigError(t("{at} = {value}: not a URL ({error})", at=at, value=_shown(text),
                            error=exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in text:
        raise ConfigError(t("{at} = {value}: must be an http:// or https:// URL with a host",
                            at=at, value=_shown(text)))
    if "@" in parts.netloc:
        raise ConfigError(t("{at}: a user or password in the URL is never sent (and would be "
                            "logged with a failed delivery); give the URL without it", at=at))
    return text


def _checked(at: str, attr: str, value: Any, given: Any = None) -> Any:
    """``value`` for ``attr`` if it is one; else ConfigError naming ``at`` (a key or a flag)
    and showing ``given``, what was written (``value`` itself by default)."""
    if attr in BOUNDS or attr == "kernel_interval_s":
        return _checked_number(at, attr, value, value if given is None else given)
    if attr == "endpoints":
        return tuple(_endpoint(at, v) for v in _strings(at, value, t("endpoint URLs")))
    if attr in ("model_dirs", "rule_files"):
        return _strings(at, value, t("paths"))
    if attr in ("alertmanager", "webhook"):
        if not isinstance(value, (list, tuple)) or len(value) > MAX_URLS:
            raise ConfigError(t("{at}: must be a list of at most {max} URLs, "
                                "e.g. [\"http://127.0.0.1:9093\"]", at=at, max=MAX_URLS))
        return tuple(_url(at, v) for v in value)
    if attr in ("kernels_while_serving", "requests"):
        if not isinstance(value, bool):
            raise ConfigError(t("{at} = {value}: must be true or false", at=at, value=_shown(value)))
        return value
    if attr == "level":
        if value not in LEVELS:  # noqa: SIM102
            raise ConfigError(t("{at} = {value}; use quick, standard or full", at=at,
                                value=_shown(value)))
        return value
    if attr == "listen":
        try:
            parse_listen(_text(at, value, "HOST:PORT"))
        except ValueError as exc:
            raise ConfigError(t("{at} = {value}: {error}", at=at, value=_shown(value),
                                error=exc)) from None
        return value
    if attr == "basic_auth_user":
        user = _text(at, value, t("a user name"))
        if ":" in user:
            raise ConfigError(t("{at}: a basic-auth user name cannot hold ':' (RFC 7617)", at=at))
        return user
    if attr == "textfile":
        path = _text(at, value, t("a path ending in .prom"))
        if path and not path.endswith(".prom"):  # node_exporter would never read it
            raise ConfigError(t("{at} = {value}: node_exporter's textfile collector reads only "
                                "files named *.prom; name it e.g. "
                                "/var/lib/node_exporter/textfile/llm-doctor.prom", at=at,
                                value=_shown(path)))
        return path
    return _text(at, value, t("a path"))  # report_dir, state_file and the three files


def _strings(at: str, value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, (list, tuple)) or len(value) > MAX_URLS
            or not all(isinstance(v, str) and v and "\0" not in v for v in value)):
        raise ConfigError(t("{at}: must be a list of at most {max} {what} (strings), not {value}",
                            at=at, max=MAX_URLS, what=what, value=_shown(value)))
    return tuple(value)


def _endpoint(at: str, value: str) -> str:
    """An endpoint as `scan --endpoint` takes it (doctor/endpoints.py), its key never shown."""
    try:
        parse_endpoint(value)
    except EndpointError as exc:
        raise ConfigError(f"{at}: {exc}") from None
    return value


def _keys() -> dict[str, str]:
    names = {f.name: f.name for f in fields(Settings) if f.name != "for_s"}
    for key, attr in DURATIONS.items():
        names.pop(attr, None)
        names[key] = attr
    return names


def _value(at: str, key: str, attr: str, value: Any) -> Any:
    """A value of the file as its attribute takes it: durations in seconds, a URL a list."""
    if key in DURATIONS:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value  # seconds, checked for range by _checked
        if not isinstance(value, str):  # [], {} or false would read as "no duration": 0 s
            raise ConfigError(t("{at} = {value}: must be a duration like \"30s\" or a number "
                                "of seconds", at=at, value=_shown(value)))
        try:  # "30s" (doctor/durations.py: bounded, finite)
            return parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
    if isinstance(getattr(Settings(), attr), tuple) and isinstance(value, str):
        return [value]
    return value


def load_settings(path: Path | None) -> Settings:
    """The ``[daemon]`` table of ``path`` (defaults when absent)."""
    if path is None:
        return Settings()
    from doctor.config import MAX_CONFIG_BYTES
    from doctor.tomlfile import read_toml

    # The scan's own guarded read: a FIFO, a device, non-UTF-8 or a huge file is refused.
    text, data = read_toml(path, "config file", ConfigError, MAX_CONFIG_BYTES)
    table = data.get("daemon", {})
    if not isinstance(table, dict):
        raise ConfigError(t("{where}: daemon must be a table ([daemon])", where=path))
    lines = LineIndex(text)
    keys = _keys()
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{path}:{lines.table('daemon', key)}"
        at = f"{where}: daemon.{key}"
        if key == "for":
            if not isinstance(value, dict):
                raise ConfigError(t("{path}: [daemon.for] must be a table of rule = \"5m\"",
                                    path=path))
            try:
                values["for_s"] = {rule: parse_duration(v) for rule, v in value.items()}
            except ValueError as exc:
                raise ConfigError(f"{path}: [daemon.for]: {exc}") from None
            _check_for(path, lines, values["for_s"])
            continue
        if key not in keys:
            raise ConfigError(t("{where}: unknown key daemon.{key}{suggestion}; docs/daemon.md "
                                "lists them", where=where, key=key, suggestion=suggest(key, keys)))
        values[keys[key]] = _checked(at, keys[key], _value(at, key, keys[key], value), value)
    settings = Settings(**values)
    _check_pairs(path, settings)
    return settings


def _check_for(path: Path, lines: LineIndex, for_s: dict[str, float]) -> None:
    for rule, seconds in for_s.items():
        if not 0 <= seconds <= MAX_FOR_S or len(rule) > 200 or not rule.isprintable():
            raise ConfigError(t("{where}: [daemon.for] {rule}: a rule id with a window from 0s "
                                "to 720h", where=f"{path}:{lines.table('daemon.for', rule)}",
                                rule=_shown(rule)))


def _check_pairs(path: Path, settings: Settings) -> None:
    if bool(settings.basic_auth_user) != bool(settings.basic_auth_password_file):
        raise ConfigError(t("{path}: basic auth needs both daemon.basic_auth_user and "
                            "daemon.basic_auth_password_file", path=path))
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError(t("{path}: TLS needs both daemon.tls_cert_file and daemon.tls_key_file",
                            path=path))


def with_flags(settings: Settings, **flags: Any) -> Settings:
    """Command-line flags win over the file; None and () mean 'not given'. Each is checked
    as its key is, and named as a flag."""
    given = {k: _checked(FLAGS.get(k, k), k, v) for k, v in flags.items() if v not in (None, ())}
    return replace(settings, **given)


class _Unreadable(Exception):
    pass


def read_setting_file(key: str, path: str, what: str, max_bytes: int) -> str:
    """The text of the file ``daemon.<key>`` names: a regular UTF-8 file of at most
    ``max_bytes``, opened without blocking (doctor/tomlfile.read_text), else ConfigError
    naming the key."""
    if not path or "\0" in path:
        raise ConfigError(t("daemon.{key} = {value}: name the {what}", key=key, value=_shown(path),
                            what=what))
    try:
        return read_text(Path(path), what, _Unreadable, max_bytes)
    except _Unreadable as exc:
        raise ConfigError(f"daemon.{key}: {exc}") from None
