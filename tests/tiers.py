"""The test tiers: a test that starts a real server, browser or cluster says so by its marker.

The markers are declared in pyproject.toml; the floor is every test that needs none of them::

    pytest -m "not live and not browser and not slurm and not fuzz and not slow"

A test that starts one of the real components below without the marker that names it fails
at the start of the component, in every run (the floor and the whole suite alike), so that
the floor stays the set of tests that need no server, browser or cluster. The check reads the
argv of each process the test process starts; what a started process starts is its own.

The whole suite runs on two xdist workers (``-n 2 --dist loadgroup``, the README's command).
What a test does to this machine, another test on the other worker would see: a live scan finds
the llama-server or the CPU hog of a live test, two live tests find each other's servers. So the
tests that act on or scan this machine all run in one xdist group, ``host``, on one worker, one
after the other as in a serial run, while the other worker takes the rest: those marked
``live``, ``browser``, ``slurm`` or ``machine``, and the ``slow`` tests of a module that runs
the command line or a process, reads this machine through ``LiveHost``, or makes a namespace
or a cgroup (``_ACTS``: such a module's slow tests are its scans of this machine).
A test the module rule misses fails where it starts the command line's ``scan``, ``why`` or
``capture`` on this machine (without ``--replay``) outside the group; the message says to mark
it ``machine``. (A ``LiveHost`` built in the test's own process is not caught: the floor's unit
tests read their own files and servers through one.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FLOOR = "not live and not browser and not slurm and not fuzz and not slow"

# The basename of an argv word -> the marker a test needs to start it.
_NEEDS = {
    "llama-server": "live",
    "prometheus": "live",
    "alertmanager": "live",
    "prometheus-alertmanager": "live",
    "node_exporter": "live",
    "systemd-journald": "live",
    "prometheus-node-exporter": "live",
    "chromium": "browser",
    "chromium-browser": "browser",
    "chrome": "browser",
    "slurmctld": "slurm",
    "slurmd": "slurm",
    "munged": "slurm",
}  # Slurm's clients (scontrol, sinfo, sbatch) are left out: stand-ins of them are floor tests'
# (a script named scontrol), and the real ones need the daemons above

HOST_GROUP = "host"
_ON_HOST = {"live", "browser", "slurm", "machine"}
# What a module's source says when its tests run a process or read this machine; a call whose
# first lines name a tool that reads only its input, or a replay, is not such a call.
_ACTS = re.compile(r"\brun_cli\(|\bLiveHost\(|\bPopen\(|\bsubprocess\.run\(|\bunshare\b|\bcgroup"
                   r"|\bHTTPServer\b|\bsocket\.socket\(")
_READS_INPUT = re.compile(r"--replay|\bpromtool\b|\bamtool\b|\bshellcheck\b|\bRecordedHost\(")
_acting: dict[str, bool] = {}

_markers: set[str] | None = None  # the running test's markers; None between tests
_in_group: bool | None = None  # whether the running test is in the host group; None between
_original_init = subprocess.Popen.__init__
_LIVE_COMMANDS = {"scan", "why", "capture"}  # the command line's commands that read this machine
_MARK_IT = ("this test {what} but runs outside the 'host' group, beside the tests that start "
            "servers and hogs on this machine: add pytest.mark.machine (see tests/tiers.py)")


def _is_python(path: str) -> bool:
    return os.path.exists(path) and os.path.realpath(path) == os.path.realpath(sys.executable)


def _needed(args) -> tuple[str, str] | None:
    """(component, marker) for the first word of ``args`` that names a real component."""
    words = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    for word in words:
        text = os.fsdecode(word) if isinstance(word, (bytes, os.PathLike)) else str(word)
        parts = text.split()
        for before, part in zip(["", *parts], parts):
            if before == "-a":  # exec -a llama-server python ...: a name, not the program
                continue
            name = os.path.basename(part)
            if name in _NEEDS and not _is_python(part):  # a Python linked as llama-server is none
                return name, _NEEDS[name]
            if "playwright" in part and "driver" in part:  # the driver that starts Chromium
                return "playwright", "browser"
    return None


def _scans_this_machine(args) -> bool:
    """Whether ``args`` runs llm-doctor's scan, why or capture on this machine (no --replay)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return False
    words = [os.fsdecode(w) if isinstance(w, (bytes, os.PathLike)) else str(w) for w in args]
    text = " ".join(words)
    if "doctor.commands.cli" not in text and not any(os.path.basename(w) == "llm-doctor" for w in words):
        return False
    after = text.split("doctor.commands.cli", 1)[-1].split()
    command = next((w.strip("'") for w in after if not w.startswith("-")), "")
    return command in _LIVE_COMMANDS and "--replay" not in text


def _guarded_init(self, args, *rest, **kwargs):
    if _in_group is False and _scans_this_machine(args):
        pytest.fail(_MARK_IT.format(what="runs llm-doctor on this machine"), pytrace=False)
    if _markers is not None:
        found = _needed(args)
        if found is not None and found[1] not in _markers:
            component, marker = found
            pytest.fail(f"this test starts {component} but is not marked {marker!r}: add "
                        f"pytestmark = pytest.mark.{marker} (see tests/tiers.py)", pytrace=False)
    _original_init(self, args, *rest, **kwargs)


def pytest_configure(config) -> None:
    subprocess.Popen.__init__ = _guarded_init  # type: ignore[method-assign]


def pytest_unconfigure(config) -> None:
    subprocess.Popen.__init__ = _original_init  # type: ignore[method-assign]


def _acts_on_host(path: Path) -> bool:
    key = str(path)
    if key not in _acting:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            _acting[key] = any(_ACTS.search(line) and not _READS_INPUT.search(" ".join(lines[i:i + 3]))
                               for i, line in enumerate(lines))
        except OSError:
            _acting[key] = True  # unknown: the safe side is one worker
    return _acting[key]


def on_host(item) -> bool:
    """Whether ``item`` runs in the ``host`` group (see the module's docstring)."""
    names = {mark.name for mark in item.iter_markers()}
    return bool(names & _ON_HOST) or ("slow" in names and _acts_on_host(Path(str(item.path))))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if on_host(item):
            item.add_marker(pytest.mark.xdist_group(HOST_GROUP))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _markers, _in_group
    _markers = {mark.name for mark in item.iter_markers()}
    _in_group = on_host(item)
    try:
        yield
    finally:
        _markers = _in_group = None


def sampled(paths, every: int = 4) -> list:
    """``paths`` as parameters of a test that walks every recorded host: each ``every``-th in
    the floor, the others marked ``slow``, so that the floor still renders a spread of hosts
    (GPU, engine, CPU-only, recorded from real dumps) and the whole suite renders them all."""
    paths = list(paths)
    return [pytest.param(p, id=getattr(p, "name", str(p)),
                         marks=() if i % every == 0 else (pytest.mark.slow,))
            for i, p in enumerate(paths)]

