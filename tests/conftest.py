"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE_HOSTS = REPO / "tests" / "fixtures" / "hosts"


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, shell_prefix: str = ""):
    """Run the installed CLI as a user would; returns CompletedProcess (text)."""
    argv = [sys.executable, "-m", "doctor.cli", *args]
    if shell_prefix:
        quoted = " ".join(f"'{a}'" for a in argv)
        argv = ["bash", "-c", f"{shell_prefix}; exec {quoted}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


@pytest.fixture
def cli():
    return run_cli
