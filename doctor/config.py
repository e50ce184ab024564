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
from doctor.i18n import LangError, parse_lang, t
from doctor.model import SEVERITY_WORDS, Level
from doctor.rules.loader import Rule, RuleError
from doctor.vocabulary import suggest
from doctor.tomlfile import MAX_CONFIG_BYTES, LineIndex, read_toml

LEVELS = Level.names()
SCAN_KEYS = ("level", "model_dirs", "rule_files", "endpoints", "requests", "requests_to",
             "replicas")
MAX_REPLICA_GROUPS = 64
REQUESTS_TO = ("named", "all")  # [scan] requests_to, scan --requests-to
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
            raise ConfigError(t("{path}: config file not found (given with --config)", path=path))
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
        raise ConfigError(t("{where}: 'scan' must be a table ([scan] with level, model_dirs, "
                            "rule_files), not a {kind}", where=config.where("", "scan"),
                            kind=_kind(scan)))
    for key, value in scan.items():
        at = f"{config.where('scan', key)}: scan.{key}"
        if key not in SCAN_KEYS:
            raise ConfigError(t("{where}: unknown key scan.{key}{suggestion}",
                                where=config.where("scan", key), key=key,
                                suggestion=suggest(key, SCAN_KEYS)))
        if key == "level":
            if value not in LEVELS:
                raise ConfigError(t("{at} = {value}; use quick, standard or full", at=at,
                                    value=f"{value!r:.60}"))
        elif key == "requests":
            if not isinstance(value, bool):
                raise ConfigError(t("{at} = {value}: must be true or false (false: the scan "
                                    "sends no request to an engine, as --no-requests)", at=at,
                                    value=f"{value!r:.60}"))
        elif key == "requests_to":
            if value not in REQUESTS_TO:
                raise ConfigError(t("{at} = {value}: use \"named\" (requests only to the "
                                    "endpoints named, as --requests-to named) or \"all\" "
                                    "(every engine found too)", at=at, value=f"{value!r:.60}"))
        elif key == "replicas":
            _check_replicas(at, value)
        elif key == "endpoints" and isinstance(value, list) and len(value) <= MAX_PATHS:
            for item in value:
                try:
                    parse_endpoint(item)
                except EndpointError as exc:
                    raise ConfigError(f"{at}: {exc}") from None
        elif (not isinstance(value, list) or len(value) > MAX_PATHS
              or not all(isinstance(v, str) and v and "\0" not in v for v in value)):
            raise ConfigError(t("{at} must be an array of paths (strings), e.g. "
                                "{key} = [\"/models/llama\"], not {kind} {value}", at=at, key=key,
                                kind=_kind(value), value=f"{value!r:.60}"))


def _check_replicas(at: str, value: Any) -> None:
    """[scan] replicas: groups of two or more endpoint URLs that one front balances over."""
    shape = t("{at} must be an array of groups, each an array of two or more endpoint URLs "
              "that one balancer spreads load over, e.g. replicas = [[\"http://10.0.0.1:8000\", "
              "\"http://10.0.0.2:8000\"]], not {value}", at=at, value=f"{value!r:.60}")
    if not isinstance(value, list) or len(value) > MAX_REPLICA_GROUPS:
        raise ConfigError(shape)
    for group in value:
        if not isinstance(group, list) or not 2 <= len(group) <= MAX_PATHS:
            raise ConfigError(shape)
        for item in group:
            try:
                parse_endpoint(item)
            except EndpointError as exc:
                raise ConfigError(f"{at}: {exc}") from None


def _override_at(config: Config, rid: str) -> str:
    """Where [rules.ID] is, or ``ID = …`` under [rules] when written that way."""
    if config.lines and f"rules.{rid}" in config.lines.tables:
        return config.where(f"rules.{rid}")
    return config.where("rules", rid)


def _check_overrides(config: Config, rules: Any) -> None:
    if not isinstance(rules, dict):
        raise ConfigError(t("{where}: 'rules' must hold tables ([rules.<rule id>]), not a {kind}",
                            where=config.where("", "rules"), kind=_kind(rules)))
    for rid, override in rules.items():
        where = _override_at(config, rid)
        if not isinstance(override, dict):
            raise ConfigError(t("{where}: rules.{rule} must be a table ([rules.{rule}] with the "
                                "rule's parameters), not a {kind}", where=where, rule=rid,
                                kind=_kind(override)))
        for key, value in override.items():
            at = f"{config.where(f'rules.{rid}', key)}: rules.{rid}.{key}"
            if key == "severity" and not (isinstance(value, str) and value in SEVERITY_WORDS):
                raise ConfigError(t("{at}: must be info, warning or critical", at=at))
            if key == "enabled" and not isinstance(value, bool):
                raise ConfigError(t("{at}: must be true or false", at=at))


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
            raise ConfigError(t("{where}: unknown table [{key}]{suggestion}; expected [scan], "
                                "[rules.<id>] or [daemon]", where=config.where(key), key=key,
                                suggestion=suggest(key, ["scan", "rules", "daemon"])))
    if not isinstance(data.get("daemon", {}), dict):  # its keys: doctor/daemon/settings.py
        raise ConfigError(t("{where}: daemon must be a table ([daemon])",
                            where=config.where("daemon")))
    scan, rules = data.get("scan", {}), data.get("rules", {})
    _check_scan(config, scan)
    _check_overrides(config, rules)
    return Config(path=path, scan=scan, rules=rules, lines=config.lines,
                  lang=_lang(config, data["lang"]) if "lang" in data else None)


def _lang(config: Config, value: Any) -> str:
    """The top-level ``lang`` (``zh_CN``, ``zh-CN``, ``en``), or an error naming its line."""
    where = config.where("", "lang")
    if not isinstance(value, str):
        raise ConfigError(t("{where}: lang must be a string, \"en\" or \"zh_CN\", not {kind} {value}",
                            where=where, kind=_kind(value), value=f"{value!r:.60}"))
    try:
        return parse_lang(value, f"{where}: lang")
    except LangError as exc:
        raise ConfigError(str(exc)) from None


def _check_param(at: str, default: Any, value: Any) -> None:
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) if numeric \
        else isinstance(value, type(default))
    if not ok:
        raise ConfigError(t("{at}: must be a {type} like the default ({default}), not {value}",
                            at=at, type=type(default).__name__, default=repr(default),
                            value=f"{value!r:.60}"))


def check_against_rules(config: Config, rules: list[Rule]) -> None:
    """Every override names a real rule and parameter, with the default's type."""
    if config.path is None:
        return
    by_id = {r.id: r for r in rules}
    for rid, override in config.rules.items():
        if rid not in by_id:
            raise ConfigError(t("{where}: [rules.{rule}]: no such rule{suggestion}; "
                                "'llm-doctor rules' lists them", where=_override_at(config, rid),
                                rule=rid, suggestion=suggest(rid, by_id)))
        rule = by_id[rid]
        for key, value in override.items():
            at = f"{config.where(f'rules.{rid}', key)}: rules.{rid}.{key}"
            if key in RULE_KEYS:
                continue  # checked when the file loaded
            if key not in rule.params:
                raise ConfigError(t("{at}: rule '{rule}' has no parameter '{key}'{suggestion}; "
                                    "its parameters: {params}", at=at, rule=rid, key=key,
                                    suggestion=suggest(key, [*rule.params, *RULE_KEYS]),
                                    params=", ".join(rule.params) or t("none")))
            _check_param(at, rule.params[key], value)


__all__ = ["Config", "ConfigError", "RuleError", "check_against_rules", "find_config", "load_config"]
