"""Real Prometheus, Alertmanager and llm-doctor daemon processes on loopback, for the tests
and the benchmarks: ephemeral ports, temporary directories, every wait bounded."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check, timeout_s: float, every_s: float = 0.25):
    """Poll ``check()`` until it returns something truthy; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except OSError as exc:  # not up yet
            last_error = exc
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


def get(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback)
        return response.read().decode()


class Proc:
    """A child process with its output in files; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], folder: Path, env: dict | None = None) -> None:
        self.name = name
        self.out = folder / f"{name}.log"
        self._file = open(self.out, "w")
        self.popen = subprocess.Popen(argv, stdout=self._file, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                      cwd=folder)

    def log(self) -> str:
        return self.out.read_text(errors="replace")

    def stop(self, timeout_s: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._file.close()
        return self.popen.returncode


def alertmanager(binary: str, folder: Path) -> tuple[Proc, str]:
    port = free_port()
    config = folder / "alertmanager.yml"
    config.write_text("route:\n  receiver: 'null'\n  group_wait: 1s\nreceivers:\n  - name: 'null'\n")
    proc = Proc("alertmanager", [binary, f"--config.file={config}",
                                 f"--storage.path={folder / 'am-data'}",
                                 f"--web.listen-address=127.0.0.1:{port}",
                                 "--cluster.listen-address="], folder)
    url = f"http://127.0.0.1:{port}"
    wait_for("Alertmanager ready", lambda: get(url + "/-/ready") is not None, 30)
    return proc, url


def prometheus(binary: str, folder: Path, target: str | list[str],
               rules: Path | None = None) -> tuple[Proc, str]:
    """A Prometheus on loopback scraping ``target`` (one address or several) every second,
    with the alerting and recording rules of ``rules`` loaded; (process, its URL)."""
    port = free_port()
    config = folder / "prometheus.yml"
    targets = [target] if isinstance(target, str) else list(target)
    loaded = f"rule_files:\n  - {rules}\n" if rules else ""
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n" + loaded
                      + "scrape_configs:\n  - job_name: llm-doctor\n"
                      f"    static_configs:\n      - targets: {json.dumps(targets)}\n")
    proc = Proc("prometheus", [binary, f"--config.file={config}",
                               f"--storage.tsdb.path={folder / 'prom-data'}",
                               f"--web.listen-address=127.0.0.1:{port}"], folder)
    url = f"http://127.0.0.1:{port}"
    wait_for("Prometheus ready", lambda: get(url + "/-/ready") is not None, 30)
    return proc, url


def prometheus_query(url: str, query: str) -> list[dict]:
    from urllib.parse import quote

    body = json.loads(get(f"{url}/api/v1/query?query={quote(query)}"))
    return body["data"]["result"]


def daemon(folder: Path, config_text: str, *flags: str, repo: Path = REPO,
           name: str = "daemon") -> tuple[Proc, str]:
    """Start ``llm-doctor daemon`` (of the checkout ``repo``) on a free port; returns
    (process, host:port). A ``--listen`` in ``flags`` wins over the free port."""
    config = folder / ("llm-doctor.toml" if name == "daemon" else f"{name}.toml")
    config.write_text(config_text)
    argv = [sys.executable, "-m", "doctor.commands.cli", "daemon", "--listen", "127.0.0.1:0",
            "--config", str(config), *flags]
    proc = Proc(name, argv, folder, env={"PYTHONPATH": str(repo)})

    def address():
        if proc.popen.poll() is not None:
            raise AssertionError(f"the daemon exited: {proc.log()}")
        match = re.search(r"serving metrics on https?://(\S+)/metrics", proc.log())
        return match.group(1) if match else None

    return proc, wait_for("the daemon to listen", address, 60)


def status(pid: int) -> dict[str, int]:
    """Threads, VmSize and VmRSS (KiB) of a process, from /proc/<pid>/status."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmSize", "VmRSS"):
            found[key] = int(value.split()[0])
    return found


def raw_http(address: str, data: bytes, timeout_s: float = 5.0, tls=None) -> bytes:
    """Send ``data`` as is to ``address`` (host:port) and read until the server closes or
    ``timeout_s`` passes; ``tls``: an ssl.SSLContext to wrap the connection in."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    got = b""
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
        conn = tls.wrap_socket(sock, server_hostname=host) if tls else sock
        conn.sendall(data)
        while time.monotonic() < deadline and len(got) < (4 << 20):
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = conn.recv(1 << 16)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
    return got


def spinner(seconds: float) -> subprocess.Popen:
    """A process spinning on one core for at most ``seconds``: the planted CPU hog."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


_DUTY = """
import ctypes, os, sys, time
name, seconds, share, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: the comm its children inherit


def spin(until):
    period = 0.02
    while time.time() < until:
        start = time.time()
        while time.time() - start < period * share:
            pass
        time.sleep(period * (1 - share))


end = time.time() + seconds
while time.time() < end:
    child = os.fork()
    if child == 0:
        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: killing the parent ends it
        if os.getppid() == 1:
            os._exit(0)
        spin(min(end, time.time() + every))
        os._exit(0)
    os.waitpid(child, 0)
"""


class Orphan:
    """A process started through a parent that exits at once, so that it is not a child of
    this one: a probe run in this process (which marks its own children as related, the
    observer) sees it as other work, as it would a stranger's."""

    def __init__(self, argv: list[str]) -> None:
        launcher = ("import subprocess, sys; print(subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, "
                    "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
        out = subprocess.run([sys.executable, "-c", launcher, *argv], capture_output=True, text=True,
                             timeout=30, check=True)
        self.pid = int(out.stdout.strip())

    def poll(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        return None

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout_s: float) -> None:
        wait_for(f"pid {self.pid} to end", lambda: self.poll() is not None, timeout_s, 0.05)


def duty_spinner(name: str, seconds: float, share: float, new_pid_every_s: float | None = None,
                 orphan: bool = False) -> "subprocess.Popen | Orphan":
    """A CPU hog named ``name`` (its comm, under 16 characters) taking ``share`` of a core,
    in 20 ms periods, for at most ``seconds``; with ``new_pid_every_s`` it spins in a fresh
    child process that often (a worker pool's churn: one program, a new pid each time).
    ``orphan``: not a child of this process (``Orphan``)."""
    every = new_pid_every_s or seconds
    argv = [sys.executable, "-c", _DUTY, name, str(seconds), str(share), str(every)]
    return Orphan(argv) if orphan else subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def wait_named(hogs: list, prefix: str, within_s: float = 20.0) -> None:
    """Wait (bounded) until every hog has renamed itself: on a loaded host Python's start can
    outlast the sleep, and a sample of a hog still named "python" names no hog of this test."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        names = []
        for proc in hogs:
            try:
                with open(f"/proc/{proc.pid}/comm") as comm:
                    names.append(comm.read().strip())
            except OSError:
                names.append("")
        if all(n.startswith(prefix) for n in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"the hogs did not rename themselves within {within_s:g} s: {names}")
