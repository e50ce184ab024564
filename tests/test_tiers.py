"""The tiers' guard (tests/tiers.py): a test that starts a real component needs its marker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import tiers


@pytest.mark.parametrize("argv, found", [
    (["/opt/llama/bin/llama-server", "-m", "x.gguf"], ("llama-server", "live")),
    (["prlimit", "--nofile=1024", "--", "/usr/bin/prometheus"], ("prometheus", "live")),
    ("exec chromium --headless", ("chromium", "browser")),
    (["/usr/sbin/slurmctld", "-D"], ("slurmctld", "slurm")),
    (["/venv/lib/playwright/driver/node", "cli.js", "run-driver"], ("playwright", "browser")),
    (["bash", "-c", "exec -a llama-server python -c pass"], None),  # a name, not the program
    (["promtool", "check", "metrics"], None),  # a checker, no server
    ([sys.executable, "-m", "doctor.commands.cli", "scan"], None),
])
def test_the_component_an_argv_starts(argv, found):
    assert tiers._needed(argv) == found


def test_a_python_linked_as_llama_server_is_no_llama_server(tmp_path):
    link = tmp_path / "llama-server"
    link.symlink_to(os.path.realpath(sys.executable))
    assert tiers._needed([str(link), "-c", "pass"]) is None


def test_a_floor_test_that_starts_a_server_fails_before_it_starts():
    # this test is in the floor: the guard refuses before the program is looked for (without
    # it, the missing program would be a FileNotFoundError)
    with pytest.raises(pytest.fail.Exception, match="starts slurmctld but is not marked 'slurm'"):
        subprocess.Popen(["/nonexistent/slurmctld", "-D"])


@pytest.mark.live
def test_a_live_test_may_start_what_live_names():
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(["/nonexistent/prometheus", "--version"])
