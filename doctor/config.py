"""The config file: threshold overrides per rule, and scan defaults.

Looked for at ``--config PATH``, else ``./llm-doctor.toml``, else
``$XDG_CONFIG_HOME/llm-doctor/config.toml`` (``~/.config/llm-doctor/config.toml``)::

    [scan]
    level = "standard"              # quick | standard | full
    model_dirs = ["/models/llama-3-8b"]
    rule_files = ["/etc/llm-doctor/site-rules.toml"]

    [rules.fd-limit-low]            # any parameter of the rule's [rule.params]
    min_nofile = 131072
    severity = "critical"           # optional: info | warning | critical
    enabled = true                  # optional: false turns the rule off
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor._toml import tomllib
from doctor.rules import Rule, RuleError, suggest

SCAN_KEYS = {"level": str, "model_dirs": list, "rule_files": list}
RULE_KEYS = ("enabled", "severity")


class ConfigError(Exception):
    """The config file is wrong; the message names the file, the line and what to do."""


@dataclass(frozen=True, slots=True)
class Config:
    path: Path | None = None
    scan: dict[str, Any] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)


def find_config(explicit: str | None) -> Path | None:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found (given with --config)")
        return path
    local = Path("llm-doctor.toml")
    if local.is_file():
        return local
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    user = base / "llm-doctor" / "config.toml"
    return user if user.is_file() else None


def _line(text: str, header: str, key: str | None = None) -> int:
    lines = text.splitlines()
    start = 0
    for i, line in enumerate(lines):
        if re.match(rf"^\s*\[\s*{re.escape(header)}\s*\]", line.replace('"', "")):
            start = i
            break
    if key:
        for i in range(start, len(lines)):
            if re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", lines[i]):
                return i + 1
    return start + 1


def load_config(path: Path | None) -> Config:
    if path is None:
        return Config()
    try:
        text = path.read_text()
        data = tomllib.loads(text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for key in data:
        if key not in ("scan", "rules"):
            raise ConfigError(f"{path}:{_line(text, key)}: unknown table [{key}]"
                              f"{suggest(key, ['scan', 'rules'])}; expected [scan] or [rules.<id>]")
    scan = data.get("scan", {})
    for key, value in scan.items():
        if key not in SCAN_KEYS:
            raise ConfigError(f"{path}:{_line(text, 'scan', key)}: unknown key scan.{key}"
                              f"{suggest(key, SCAN_KEYS)}")
        if not isinstance(value, SCAN_KEYS[key]):
            raise ConfigError(f"{path}:{_line(text, 'scan', key)}: scan.{key} must be a "
                              f"{SCAN_KEYS[key].__name__}")
    return Config(path=path, scan=scan, rules=data.get("rules", {}))


def check_against_rules(config: Config, rules: list[Rule]) -> None:
    """Every override names a real rule and parameter, with the default's type."""
    if config.path is None:
        return
    text = config.path.read_text()
    by_id = {r.id: r for r in rules}
    for rid, override in config.rules.items():
        where = f"{config.path}:{_line(text, f'rules.{rid}')}"
        if rid not in by_id:
            raise ConfigError(f"{where}: [rules.{rid}]: no such rule{suggest(rid, by_id)}; "
                              "'llm-doctor rules' lists them")
        if not isinstance(override, dict):
            raise ConfigError(f"{where}: rules.{rid} must be a table")
        rule = by_id[rid]
        for key, value in override.items():
            at = f"{config.path}:{_line(text, f'rules.{rid}', key)}: rules.{rid}.{key}"
            if key == "severity":
                if value not in ("info", "warning", "critical"):
                    raise ConfigError(f"{at}: must be info, warning or critical")
            elif key == "enabled":
                if not isinstance(value, bool):
                    raise ConfigError(f"{at}: must be true or false")
            elif key not in rule.params:
                raise ConfigError(f"{at}: rule '{rid}' has no parameter '{key}'"
                                  f"{suggest(key, [*rule.params, *RULE_KEYS])}; its parameters: "
                                  f"{', '.join(rule.params) or 'none'}")
            else:
                default = rule.params[key]
                numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) if numeric \
                    else isinstance(value, type(default))
                if not ok:
                    raise ConfigError(f"{at}: must be a {type(default).__name__} like the "
                                      f"default ({default!r}), not {value!r}")


__all__ = ["Config", "ConfigError", "RuleError", "check_against_rules", "find_config", "load_config"]
