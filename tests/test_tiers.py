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


# ---- the host group: what acts on this machine runs on one xdist worker ----------------------

ON_HOST = '''
import os, time, pytest
def _mark(name):
    time.sleep(0.2)  # long enough that a load-balancing scheduler hands tests to both workers
    with open(name, "w") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))
@pytest.mark.live
def test_live(): _mark("live")
@pytest.mark.machine
def test_machine(): _mark("machine")
@pytest.mark.slurm
def test_slurm(): _mark("slurm")
@pytest.mark.browser
def test_browser(): _mark("browser")
@pytest.mark.live
def test_live_again(): _mark("live_again")
@pytest.mark.machine
def test_machine_again(): _mark("machine_again")
'''


def _pytest(tmp_path, name: str, source: str, *args: str) -> subprocess.CompletedProcess:
    """A pytest of one module ``source`` with this project's tiers plugin, in ``tmp_path``."""
    (tmp_path / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider",
                           *args, "-q", "-W", "ignore", "--rootdir", str(tmp_path), str(tmp_path / name)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tiers.Path(__file__).parents[1]),
                               "COLUMNS": "400"})  # wide: the failure's reason is not cut


@pytest.mark.slow  # starts a pytest with two xdist workers
def test_the_tests_that_act_on_this_machine_share_one_worker(tmp_path):
    # pytest-xdist 3.8 groups by a suffix it writes into item._nodeid, which pytest 9.2 no
    # longer reads: the group was split across workers, and live tests found each other's
    # servers. pyproject.toml pins pytest below 9.2 for that; this test fails if the pin goes.
    run = _pytest(tmp_path, "test_on_host.py", ON_HOST, "-n", "2", "--dist", "loadgroup")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    workers = {name: (tmp_path / name).read_text()
               for name in ("live", "machine", "slurm", "browser", "live_again", "machine_again")}
    assert len(set(workers.values())) == 1 and "none" not in workers.values(), workers


SCANS = '''
import subprocess, sys
import pytest

CLI = [sys.executable, "-c", "pass", "doctor.commands.cli"]  # the argv's shape, no real scan

def test_live():
    subprocess.run([*CLI, "scan", "--level", "quick"], check=True)

def test_replay():
    subprocess.run([*CLI, "scan", "--replay", "somewhere"], check=True)

@pytest.mark.machine
def test_marked():
    subprocess.run([*CLI, "why", "slow"], check=True)

def test_other_command():
    subprocess.run([*CLI, "rules"], check=True)
'''


@pytest.mark.slow  # starts a pytest
def test_a_test_outside_the_host_group_may_not_run_a_live_scan(tmp_path):
    """A test the module rule misses (not slow, not marked) that starts `llm-doctor scan` on
    this machine fails at the start, naming the marker; with --replay, or marked, it runs."""
    run = _pytest(tmp_path, "test_scans.py", SCANS)
    assert "1 failed, 3 passed" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert ("test_live - Failed: this test runs llm-doctor on this machine but runs outside the "
            "'host' group") in run.stdout
