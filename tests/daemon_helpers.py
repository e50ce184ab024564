"""Shared by the daemon, alert and HTML tests: external binaries and findings to feed."""

from __future__ import annotations

import os
import shutil

import pytest

from doctor.model import Finding, Severity


def need(binary: str, package: str) -> str:
    """The binary's path; skipped where it is missing, but a failure in CI (CI=true)."""
    path = shutil.which(binary)
    if path:
        return path
    message = f"{binary} not installed (apt-get install {package})"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def finding(rule: str = "cpu-contention", key: str = "stress pid 42",
            severity: Severity = Severity.WARNING, **evidence) -> Finding:
    return Finding(rule=rule, cause="cpu-contention", symptoms=("slowdown",), severity=severity,
                   title=f"{key} is taking 1.0 cores", evidence={"process": key, **evidence},
                   remediation="Stop or move the process.", playbook="playbooks/cpu-contention.md")
