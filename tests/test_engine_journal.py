"""probes/helpers/engine_journal.py against the real journalctl and systemd-journald.

The live test runs a real systemd-journald in a mount and pid namespace of its own (tmpfs on
/run and the journal's folders, so this machine's journal, if any, is never touched), and a
process in a cgroup named as a service (``llmd-nccl-<pid>.service``, in this machine's cgroup
hierarchies, removed after) that writes a real NCCL log to the journal's stream socket, as
systemd connects a service's stdout (``systemd-cat`` does the same connection). journald
names the unit from the writer's cgroup, as it does under systemd; the helper finds the unit
from /proc/<pid>/cgroup and reads it back with journalctl. Needs root, unshare, journald.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.seam.live import LiveHost
from probes.helpers import engine_journal, nccl_text

LOG = Path(__file__).parent / "fixtures" / "nccl_logs" / "nccl-2013-ibv-modify-qp.log"
JOURNALD = "/lib/systemd/systemd-journald"
REPO = Path(__file__).parents[1]


def test_without_journalctl_the_journal_is_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a real exec that finds no journalctl
    lines, kept, cut, why = engine_journal.journal(LiveHost(), "vllm.service", None)
    assert (lines, kept, cut) == ([], 0, 0)
    assert why == "vllm.service's journal not read: journalctl: not-found (command not installed)"


def test_a_name_that_is_no_unit_is_refused_before_any_command():
    for name in ("-x.service", "a*.service", "vllm", "a b.service", "a\\x2d.service", "x" * 250 + ".service"):
        with pytest.raises(ValueError):
            engine_journal.journal_argv(name, None)
    assert engine_journal.journal_argv("vllm@0.service", 17)[1:2] == ("--unit=vllm@0.service",)


def test_the_window_opens_before_the_start_that_btime_can_place_a_second_late():
    # btime (whole seconds, recomputed from the clock) put --since=@START after the engine's
    # first lines: a fresh-clone CI run's journal then held "no message since the engine started"
    argv = engine_journal.journal_argv("vllm.service", 1764300000)
    assert argv[-1] == f"--since=@{1764300000 - engine_journal.SINCE_SLACK_S}"
    assert engine_journal.SINCE_SLACK_S >= 1


# The namespace's first process: the journal's folders on tmpfs, then journald, then a
# "service" writing the NCCL log to the journal; the helper's answers printed as JSON.
CHILD = r"""
import json, os, subprocess, sys, time
from doctor.seam.live import LiveHost
from probes.helpers import engine_journal
journald_path, unit, log, cgroups = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
for folder in ("/run", "/var/log/journal"):
    if os.path.isdir(folder):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", folder], check=True)
os.makedirs("/run/systemd/journal")
os.makedirs("/run/log")
out = {"before": engine_journal.journal(LiveHost(), unit, None)[3]}
journald = subprocess.Popen([journald_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 40  # a bound, not a speed: on a busy machine journald is slow to start
while not os.path.exists("/run/systemd/journal/stdout") and time.monotonic() < deadline:
    time.sleep(0.05)
procs = " ".join(f"echo $$ > {c}/cgroup.procs;" for c in cgroups)
# The lines are written by the service's own process, which lives on (sh's builtins, then exec):
# journald names a stream's unit from the cgroup of the pid that sent each message, read when it
# handles it, and a `cat` child had often exited by then: its lines came back with no unit at all.
writer = 'while IFS= read -r line || [ -n "$line" ]; do printf "%s\\n" "$line"; done < "$0"; exec sleep 60'
service = subprocess.Popen(["sh", "-c", procs + " exec systemd-cat -t vllm sh -c '" + writer + "' \"$0\"", log])
got, unit_found, why, since = ([], 0, 0, "not yet"), None, "not yet", None
want = len(open(log, encoding="utf-8").read().splitlines())
while time.monotonic() < deadline:
    unit_found, why = engine_journal.unit_of(LiveHost(), service.pid)
    since = engine_journal.started_at(LiveHost(), service.pid)
    if unit_found:
        got = engine_journal.journal(LiveHost(), unit_found, since)
        if len(got[0]) >= want:
            break
    time.sleep(0.1)
denied = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                         "import sys; from doctor.seam.live import LiveHost; from probes.helpers import engine_journal; "
                         "print(engine_journal.journal(LiveHost(), sys.argv[1], None)[3])", unit_found or unit],
                        capture_output=True, text=True, timeout=60)
out["denied"] = denied.stdout.strip() or denied.stderr[-500:]
out.update(unit=unit_found, why=why, since=since, lines=got[0], bytes=got[1], error=got[3],
           fd1=os.readlink(f"/proc/{service.pid}/fd/1"))
service.kill()
journald.kill()
print(json.dumps(out))
"""


def _cgroup_roots() -> list[Path]:
    """The cgroup v2 hierarchy and the v1 name=systemd one, where mounted."""
    roots = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, options = line.split()[:4]
        if kind == "cgroup2" or (kind == "cgroup" and "name=systemd" in options.split(",")):
            roots.append(Path(point))
    return roots


def _can() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces, mounts, cgroups)"
    for tool in ("unshare", "systemd-cat", "journalctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.access(JOURNALD, os.X_OK):
        return f"{JOURNALD} is not installed"
    if not _cgroup_roots():
        return "no cgroup2 or name=systemd hierarchy mounted"
    return None


@pytest.mark.live
def test_a_real_journald_names_the_service_and_the_helper_reads_its_nccl_lines():
    if _can():
        pytest.skip(_can())
    unit = f"llmd-nccl-{os.getpid()}.service"
    slices = [root / "system.slice" for root in _cgroup_roots()]
    made = [s for s in slices if not s.exists()]  # removed after, with the unit's
    folders = [s / unit for s in slices]
    for folder in folders:
        folder.mkdir(parents=True)
    want = LOG.read_text().splitlines()
    try:
        run = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
             "--mount-proc", sys.executable, "-c", CHILD, JOURNALD, unit, str(LOG), *map(str, folders)],
            capture_output=True, text=True, timeout=150, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        for folder in folders + made:
            folder.rmdir()  # empty: the namespace's processes died with it
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert "this host keeps no journal" in out["before"]
    assert out["unit"] == unit and out["fd1"].startswith("socket:")
    assert out["error"] is None and out["lines"] == want
    assert "no permission" in out["denied"], out["denied"]  # the same read as nobody
    said = nccl_text.parse(out["lines"])
    assert said == nccl_text.parse(want) and said.failures[0].kind == "ibv-modify-qp"
