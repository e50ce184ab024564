"""Placeholder until the redaction module lands (see SEAM.md); replaced on merge."""

from __future__ import annotations

import re

_SECRET = re.compile(
    r"(--[\w-]*(?:api-key|token|password|secret)[=\s\0]|\b[\w]*(?:TOKEN|SECRET|PASSWORD|API_KEY)[\w]*=)"
    r"[^\s\0]+", re.I)


def redact_cmdline(text: str) -> str:
    return _SECRET.sub(r"\1***", text)


def program_only(cmdline: str) -> str:
    return cmdline.split("\0", 1)[0] + ("\0" if cmdline else "")


def redact_text(text: str) -> str:
    return redact_cmdline(text)


def safe_display(text: str) -> str:
    return "".join(c if c.isprintable() or c in "\t\n" else repr(c)[1:-1] for c in text)


def redact_environ(text: str) -> str:
    """/proc/<pid>/environ as recordings keep it: names only, values masked."""
    return "\0".join(f"{item.split('=', 1)[0]}=***" for item in text.split("\0") if item) + ("\0" if text else "")
