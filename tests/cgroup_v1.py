"""A cgroup v1 cpu-controller group with a CFS quota, for live tests that put a real engine
under a CPU limit (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), removed afterwards.

Needs root and the v1 cpu controller mounted at /sys/fs/cgroup/cpu (this machine has it);
elsewhere the test is skipped with the reason. A process joins by writing its pid to the
group's ``cgroup.procs``: ``exec_prefix(group)`` is a command that does that, then execs the
rest of its argv (for tests/llama_server.py's ``prefix``).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

import pytest

CPU_ROOT = Path("/sys/fs/cgroup/cpu")


@contextlib.contextmanager
def cpu_quota(quota_us: int, period_us: int = 100_000):
    """A new group under the v1 cpu controller with ``quota_us`` per ``period_us``."""
    if not (CPU_ROOT / "cpu.cfs_quota_us").is_file() or not os.access(CPU_ROOT, os.W_OK):
        pytest.skip("no writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    group = CPU_ROOT / f"llm-doctor-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        yield group
    finally:
        _remove(group)


def set_quota(group: Path, quota_us: int) -> None:
    (group / "cpu.cfs_quota_us").write_text(str(quota_us))


def exec_prefix(group: Path) -> tuple[str, ...]:
    """``sh -c 'echo $$ > GROUP/cgroup.procs && exec "$@"' sh``: joins, then execs the rest."""
    return ("sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh")


def _remove(group: Path) -> None:
    """Move any process left in the group to the root one, then remove it (bounded)."""
    for _ in range(50):
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                (CPU_ROOT / "cgroup.procs").write_text(pid)
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
