"""Hosts of our own on this machine: network namespaces joined by veth pairs through a bridge.

``Lab.start(prefix, hosts)`` makes one namespace per host (``<prefix>-h0``...), each with an
``eth0`` whose veth peer is a port of the bridge ``br0`` in the switch namespace
(``<prefix>-sw``), addresses 10.231.0.1, .2 ... /24 inside the namespaces only, and an
``eth9`` in each host that has an address but stays down (for a variable that names a down
interface). ``Lab.stop`` deletes every namespace it made, which takes their veths with them;
the tests call it from a finally / fixture teardown, pass or fail. Needs root and iproute2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field

SUBNET = "10.231.0"
RUN_S = 10.0  # any one ip command


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=RUN_S)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Lab:
    prefix: str
    hosts: list[str] = field(default_factory=list)
    made: list[str] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def addr(self, host: int) -> str:
        return f"{SUBNET}.{host + 1}"

    def start(self, count: int) -> "Lab":
        try:
            self._make(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            for i in range(count):
                name = f"{self.prefix}-h{i}"
                self._make(name)
                self.hosts.append(name)
                ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
                   "netns", self.switch)
                ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
                ip("-n", name, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
                ip("-n", name, "link", "set", "eth0", "up")
                ip("-n", name, "link", "set", "lo", "up")
                ip("-n", name, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
                ip("-n", name, "addr", "add", f"10.232.{i}.1/24", "dev", "eth9")  # left down
        except BaseException:
            self.stop()
            raise
        return self

    def _make(self, name: str) -> None:
        ip("netns", "add", name)
        self.made.append(name)

    def stop(self) -> None:
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=RUN_S)
        self.made.clear()

    def argv(self, host: int, *args: str, cgroup_fs: bool = False) -> list[str]:
        """``args`` run inside host ``host`` (``ip netns exec`` gives it its own /sys, so
        /sys/class/net is the namespace's); ``cgroup_fs`` mounts the cpu hierarchy there
        as a real host has it, in that command's own mount namespace."""
        run = ["ip", "netns", "exec", self.hosts[host]]
        if cgroup_fs:
            return [*run, "sh", "-c", 'mount -t cgroup -o cpu cgroup /sys/fs/cgroup && exec "$@"',
                    "sh", *args]
        return [*run, *args]


def collective(lab: Lab, host: int, rank: int, world: int, port: int, *extra: str,
               env: dict[str, str] | None = None, cgroup_fs: bool = False) -> subprocess.Popen:
    """``llm-doctor collective --format json`` on host ``host``, rank 0's host the master.
    The namespaces share this machine's files: nothing is kept beside the daemon's state
    file (``--state-file ""``) unless ``extra`` names one."""
    keep = () if "--state-file" in extra else ("--state-file", "")
    args = [sys.executable, "-m", "doctor.commands.cli", "collective", "--master",
            f"{lab.addr(0)}:{port}", "--rank", str(rank), "--world", str(world), "--format",
            "json", *keep, *extra]
    return subprocess.Popen(lab.argv(host, *args, cgroup_fs=cgroup_fs), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, start_new_session=True)
