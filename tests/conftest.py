"""Shared test helpers."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.tiers"]  # the markers' guard: a floor test may not start a server

REPO = Path(__file__).resolve().parent.parent
FIXTURE_HOSTS = REPO / "tests" / "fixtures" / "hosts"  # built: see pytest_configure


def pytest_configure(config):
    """Build the recorded test hosts from their sources (tests/fixtures/build_all_hosts.py)
    before any test module lists FIXTURE_HOSTS; a no-op when they are current."""
    from tests.fixtures.build_all_hosts import ensure_built

    ensure_built()


@functools.cache  # asked once, by the first test that needs it, not at every collection
def _private_pids_prefix() -> tuple[str, ...] | None:
    """``unshare`` argv that runs a command in its own PID namespace with its own /proc (so
    it sees none of this host's processes), or None where namespaces are not allowed."""
    for prefix in (("unshare", "--pid", "--fork", "--mount-proc", "--"),
                   ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
                    "--")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, shell_prefix: str = "",
            private_pids: bool = False):
    """Run the installed CLI as a user would; returns CompletedProcess (text).

    ``private_pids``: in a PID namespace of its own, where the scan's process table holds
    only itself, for tests whose findings would change when an engine runs on this host (the
    limits judged are then the engine's, not the shell's). Where namespaces are not allowed
    the test is skipped when an engine runs here, and fails under CI, which allows them.
    """
    argv = [sys.executable, "-m", "doctor.commands.cli", *args]
    if shell_prefix:
        quoted = " ".join(f"'{a}'" for a in argv)
        argv = ["bash", "-c", f"{shell_prefix}; exec {quoted}"]
    if private_pids:
        prefix = _private_pids_prefix()
        if prefix is not None:
            argv = [*prefix, *argv]
        elif os.environ.get("CI") == "true":
            pytest.fail("unshare cannot make a PID namespace here (util-linux, root or user "
                        "namespaces); the test needs a process table without engines")
        elif _engine_running():
            pytest.skip("an engine runs on this host and no PID namespace can hide it")
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


@pytest.fixture
def cli():
    return run_cli


def _engine_running() -> bool:
    from doctor.seam.live import LiveHost
    from probes.helpers.processes import engine_processes

    return bool(engine_processes(LiveHost()))


@pytest.fixture(autouse=True)
def _english_after_each_test():
    """The language is the process's (``--lang`` sets it, as the command line does once): a
    test that ran the command line in Chinese in this process leaves English behind it, help
    texts included, so that no later test reads Chinese by accident."""
    yield
    from doctor import i18n

    if i18n.current() != i18n.SOURCE:
        i18n.set_lang(i18n.SOURCE)
        import sys

        if "doctor.commands.cli" in sys.modules:
            from doctor.commands import lang
            from doctor.commands.cli import cli

            lang.translate(cli)
