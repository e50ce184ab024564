"""The config file: threshold overrides per rule, and scan defaults.

Looked for at ``--config PATH``, else ``./llm-doctor.toml``, else
``$XDG_CONFIG_HOME/llm-doctor/config.toml`` (``~/.config/llm-doctor/config.toml``)::

    lang = "zh_CN"                  # the daemon's language: en | zh_CN (--lang wins over it)

    [scan]
    level = "standard"              # quick | standard | full
    model_dirs = ["/models/llama-3-8b"]
    rule_files = ["/etc/llm-doctor/site-rules.toml"]
    requests = false                # send no request to an engine (scan --no-requests)

    [rules.fd-limit-low]            # any parameter of the rule's [rule.params]
    min_nofile = 131072
    severity = "critical"           # optional: info | warning | critical
    enabled = true                  # optional: false turns the rule off

The file is read as rule files are (doctor/tomlfile.py: a regular UTF-8 file of at most
1 MiB), and every value's type is checked when it loads, with the file, line and key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.endpoints import EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.i18n import LangError, parse_lang
from doctor.model import Level
from doctor.rules.loader import Rule, RuleError
from doctor.vocabulary import suggest
from doctor.tomlfile import MAX_CONFIG_BYTES, LineIndex, read_toml

LEVELS = Level.names()
SCAN_KEYS = ("level", "model_dirs", "rule_files", "endpoints", "requests")
RULE_KEYS = ("enabled", "severity")
MAX_PATHS = 256  # entries in model_dirs or rule_files


class ConfigError(Exception):
    """The config file is wrong; the message names the file, the line and what to do."""


@dataclass(frozen=True, slots=True)
class Config:
    path: Path | None = None
    scan: dict[str, Any] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: LineIndex | None = field(default=None, repr=False, compare=False)
    # top-level ``lang``: the language the daemon speaks (its logs, alerts and incident
    # reports) unless --lang is given; None: LLM_DOCTOR_LANG, then the locale
    lang: str | None = None

    def where(self, table: str, key: str | None = None) -> str:
        """``FILE:LINE`` of a table or key, for messages."""
        line = self.lines.table(table, key) if self.lines else 1
        return f"{self.path}:{line}"


def find_config(explicit: str | None) -> Path | None:
    if explicit:
        path = Path(explicit)
        if not path.exists():
            raise ConfigError(f"{path}: config file not found (given with --config)")
        return path
    local = Path("llm-doctor.toml")
    if local.exists():  # a FIFO or directory here is refused by load_config, not skipped
        return local
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    user = base / "llm-doctor" / "config.toml"
    return user if user.exists() else None


def _kind(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
             dict: "table"}
    return names.get(type(value), type(value).__name__)


def _check_scan(config: Config, scan: Any) -> None:
    if not isinstance(scan, dict):
        raise ConfigError(f"{config.where('', 'scan')}: 'scan' must be a table ([scan] with "
                          f"level, model_dirs, rule_files), not a {_kind(scan)}")
    for key, value in scan.items():
        at = f"{config.where('scan', key)}: scan.{key}"
        if key not in SCAN_KEYS:
            raise ConfigError(f"{config.where('scan', key)}: unknown key scan.{key}"
                              f"{suggest(key, SCAN_KEYS)}")
        if key == "level":
            if value not in LEVELS:
                raise ConfigError(f"{at} = {value!r:.60}; use quick, standard or full")
        elif key == "requests":
            if not isinstance(value, bool):
                raise ConfigError(f"{at} = {value!r:.60}: must be true or false (false: the "
                                  "scan sends no request to an engine, as --no-requests)")
        elif key == "endpoints" and isinstance(value, list) and len(value) <= MAX_PATHS:
            for item in value:
                try:
                    parse_endpoint(item)
                except EndpointError as exc:
                    raise ConfigError(f"{at}: {exc}") from None
        elif (not isinstance(value, list) or len(value) > MAX_PATHS
              or not all(isinstance(v, str) and v and "\0" not in v for v in value)):
            raise ConfigError(f"{at} must be an array of paths (strings), e.g. "
                              f"{key} = [\"/models/llama\"], not {_kind(value)} {value!r:.60}")


def _override_at(config: Config, rid: str) -> str:
    """Where [rules.ID] is, or ``ID = …`` under [rules] when written that way."""
    if config.lines and f"rules.{rid}" in config.lines.tables:
        return config.where(f"rules.{rid}")
    return config.where("rules", rid)


def _check_overrides(config: Config, rules: Any) -> None:
    if not isinstance(rules, dict):
        raise ConfigError(f"{config.where('', 'rules')}: 'rules' must hold tables "
                          f"([rules.<rule id>]), not a {_kind(rules)}")
    for rid, override in rules.items():
        where = _override_at(config, rid)
        if not isinstance(override, dict):
            raise ConfigError(f"{where}: rules.{rid} must be a table ([rules.{rid}] with the "
                              f"rule's parameters), not a {_kind(override)}")
        for key, value in override.items():
            at = f"{config.where(f'rules.{rid}', key)}: rules.{rid}.{key}"
            if key == "severity" and value not in ("info", "warning", "critical"):
                raise ConfigError(f"{at}: must be info, warning or critical")
            if key == "enabled" and not isinstance(value, bool):
                raise ConfigError(f"{at}: must be true or false")


def load_config(path: Path | None) -> Config:
    """The config at ``path`` (None: no config), every value's type checked."""
    if path is None:
        return Config()
    text, data = read_toml(path, "config file", ConfigError, MAX_CONFIG_BYTES)
    config = Config(path=path, lines=LineIndex(text))
    for key in data:
        if key == "lang":
            continue
        if key not in ("scan", "rules", "daemon"):
            raise ConfigError(f"{config.where(key)}: unknown table [{key}]"
                              f"{suggest(key, ['scan', 'rules', 'daemon'])}; expected [scan], "
                              "[rules.<id>] or [daemon]")
    if not isinstance(data.get("daemon", {}), dict):  # its keys: doctor/daemon/settings.py
        raise ConfigError(f"{config.where('daemon')}: daemon must be a table ([daemon])")
    scan, rules = data.get("scan", {}), data.get("rules", {})
    _check_scan(config, scan)
    _check_overrides(config, rules)
    return Config(path=path, scan=scan, rules=rules, lines=config.lines,
                  lang=_lang(config, data["lang"]) if "lang" in data else None)


def _lang(config: Config, value: Any) -> str:
    """The top-level ``lang`` (``zh_CN``, ``zh-CN``, ``en``), or an error naming its line."""
    where = config.where("", "lang")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: lang must be a string, \"en\" or \"zh_CN\", not "
                          f"{_kind(value)} {value!r:.60}")
    try:
        return parse_lang(value, f"{where}: lang")
    except LangError as exc:
        raise ConfigError(str(exc)) from None


def _check_param(at: str, default: Any, value: Any) -> None:
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) if numeric \
        else isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"{at}: must be a {type(default).__name__} like the "
                          f"default ({default!r}), not {value!r:.60}")


def check_against_rules(config: Config, rules: list[Rule]) -> None:
    """Every override names a real rule and parameter, with the default's type."""
    if config.path is None:
        return
    by_id = {r.id: r for r in rules}
    for rid, override in config.rules.items():
        if rid not in by_id:
            raise ConfigError(f"{_override_at(config, rid)}: [rules.{rid}]: no such rule"
                              f"{suggest(rid, by_id)}; 'llm-doctor rules' lists them")
        rule = by_id[rid]
        for key, value in override.items():
            at = f"{config.where(f'rules.{rid}', key)}: rules.{rid}.{key}"
            if key in RULE_KEYS:
                continue  # checked when the file loaded
            if key not in rule.params:
                raise ConfigError(f"{at}: rule '{rid}' has no parameter '{key}'"
                                  f"{suggest(key, [*rule.params, *RULE_KEYS])}; its parameters: "
                                  f"{', '.join(rule.params) or 'none'}")
            _check_param(at, rule.params[key], value)


__all__ = ["Config", "ConfigError", "RuleError", "check_against_rules", "find_config", "load_config"]
