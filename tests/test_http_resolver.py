"""A name the resolver never answers for is given up at the read's deadline: inside private
mount and network namespaces (unshare, as root), /etc/resolv.conf points at a loopback DNS
server that swallows every query, as a dead resolver does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

CHILD = textwrap.dedent("""
    import socket, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    def swallow():
        while True:
            dns.recvfrom(4096)  # asked, never answered
    threading.Thread(target=swallow, daemon=True).start()
    from doctor.seam.http import get
    from doctor.seam.host import HostReadError
    started = time.monotonic()
    try:
        get("http://engine.nowhere.internal:8000/metrics", timeout_s=1.0)
    except HostReadError as exc:
        print(f"{time.monotonic() - started:.2f}|{exc.reason.value}|{exc.detail}")
""")


def _namespaces_work() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False  # ip: Debian's iproute2, which .ci/run installs
    probe = subprocess.run(["unshare", "-mn", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _namespaces_work(), reason="needs root, unshare -mn and ip (iproute2)")
@pytest.mark.timeout(60)
def test_a_resolver_that_never_answers_is_cut_at_the_deadline(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:5 attempts:3\n")  # 15 s by itself
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    shell = (f"ip link set lo up && mount --bind {resolv} /etc/resolv.conf && "
             f"mount --bind {hosts} /etc/hosts && exec {sys.executable} {script} {REPO}")
    done = subprocess.run(["unshare", "-mn", "sh", "-c", shell], capture_output=True,
                          text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    took, reason, detail = done.stdout.strip().split("|")
    # cut by the 1 s deadline: the resolver alone would fail only after its 15 s, and a
    # resolver's failure is no timeout
    assert reason == "timeout" and float(took) < 15, done.stdout
    assert "engine.nowhere.internal did not resolve" in detail and "1 s" in detail
