"""The daemon's settings: the ``[daemon]`` table of the config file, then command-line flags.

    [daemon]
    listen = "127.0.0.1:9411"        # host:port; [::1]:9411; port 0 picks a free one
    interval = "15s"                 # cheap read-only probes and engine pages
    kernel_interval = "6h"           # micro-kernels, disk reads; "0s": only on SIGUSR1
    kernels_while_serving = false    # run micro-kernels while an engine is serving
    level = "standard"               # quick: never run micro-kernels
    report_dir = "/var/lib/llm-doctor/reports"
    report_keep = 50                 # newest incident reports kept
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
``[daemon]`` from the same file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from doctor.config import ConfigError
from doctor.durations import parse as parse_duration
from doctor.rules import suggest

DURATIONS = {"interval": "interval_s", "kernel_interval": "kernel_interval_s",
             "resend_interval": "resend_s", "history": "history_s"}


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "127.0.0.1:9411"
    interval_s: float = 15.0
    kernel_interval_s: float = 6 * 3600.0
    kernels_while_serving: bool = False
    level: str = "standard"
    report_dir: str = ""
    report_keep: int = 50
    alertmanager: tuple[str, ...] = ()
    webhook: tuple[str, ...] = ()
    resend_s: float = 60.0
    resolve_after: int = 2
    history_s: float = 3600.0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    basic_auth_user: str = ""
    basic_auth_password_file: str = ""
    for_s: dict[str, float] = field(default_factory=dict)

    def address(self) -> tuple[str, int]:
        """"127.0.0.1:9411" → ("127.0.0.1", 9411); "[::1]:0" → ("::1", 0)."""
        match = re.match(r"^\[?([^\]]*)\]?:(\d+)$", self.listen)
        if not match or not match.group(1):
            raise ConfigError(f"listen address '{self.listen}' must be HOST:PORT, "
                              "e.g. 127.0.0.1:9411 or [::1]:9411")
        return match.group(1), int(match.group(2))


def _keys() -> dict[str, str]:
    names = {f.name: f.name for f in fields(Settings) if f.name != "for_s"}
    for key, attr in DURATIONS.items():
        names.pop(attr, None)
        names[key] = attr
    return names


def _value(path: Path, key: str, attr: str, value: Any) -> Any:
    at = f"{path}: daemon.{key}"
    default = getattr(Settings(), attr)
    if key in DURATIONS:
        try:  # a number of seconds or "30s" (doctor/durations.py: bounded, finite)
            return parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{at}: must be a list of URLs")
        return tuple(value)
    if isinstance(default, bool) and not isinstance(value, bool):
        raise ConfigError(f"{at}: must be true or false")
    if isinstance(default, (int, str)) and not isinstance(value, type(default)):
        raise ConfigError(f"{at}: must be a {type(default).__name__} like {default!r}")
    return value


def load_settings(path: Path | None) -> Settings:
    """The ``[daemon]`` table of ``path`` (defaults when absent)."""
    if path is None:
        return Settings()
    from doctor.config import MAX_CONFIG_BYTES
    from doctor.tomlfile import read_toml

    # The scan's own guarded read: a FIFO, a device, non-UTF-8 or a huge file is refused.
    _, data = read_toml(path, "config file", ConfigError, MAX_CONFIG_BYTES)
    table = data.get("daemon", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: daemon must be a table ([daemon])")
    keys = _keys()
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "for":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [daemon.for] must be a table of rule = \"5m\"")
            try:
                values["for_s"] = {rule: parse_duration(v) for rule, v in value.items()}
            except ValueError as exc:
                raise ConfigError(f"{path}: [daemon.for]: {exc}") from None
            continue
        if key not in keys:
            raise ConfigError(f"{path}: unknown key daemon.{key}{suggest(key, keys)}; "
                              "docs/daemon.md lists them")
        values[keys[key]] = _value(path, key, keys[key], value)
    settings = Settings(**values)
    if settings.level not in ("quick", "standard", "full"):
        raise ConfigError(f"{path}: daemon.level = {settings.level!r}; use quick, standard or full")
    if settings.interval_s < 1:
        raise ConfigError(f"{path}: daemon.interval must be at least 1s")
    return settings


def with_flags(settings: Settings, **flags: Any) -> Settings:
    """Command-line flags win over the file; None and () mean 'not given'."""
    given = {k: v for k, v in flags.items() if v not in (None, ())}
    return replace(settings, **given)
