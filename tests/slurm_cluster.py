"""A real one-node Slurm on loopback for the tests: munged, slurmctld and slurmd of our own.

Everything lives in one folder: slurm.conf, munge's key, socket and seed, the state save and
spool folders, logs and pid files; the ports are free ones picked at start. slurmd runs
``llm-doctor slurm-healthcheck`` as its HealthCheckProgram every ``HEALTH_CHECK_S`` (reading
``hc_state``) and in prolog mode as its Prolog (reading ``prolog_state``): two state files, so
that a test can plant a fault for one without the other acting on it first.

``start`` waits (bounded) until sinfo shows the node idle; ``Cluster.stop`` stops every daemon
it started (SIGTERM to each process group, then SIGKILL), and the tests call it from a
finalizer, pass or fail. Needs root (slurmd runs jobs and its scripts as root here) and
Debian's slurm-wlm and munge.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from doctor.fleet.slurm import Node, parse_node

REPO = Path(__file__).resolve().parent.parent
HEALTH_CHECK_S = 2  # HealthCheckInterval: small, so that a test waits a few seconds
START_S = 30.0
T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wrapper(path: Path, conf: Path, mode: str, state_file: Path, runs: Path) -> None:
    """A script slurmd runs with an environment of almost nothing (SLURMD_NODENAME, and for a
    prolog the job's SLURM_* variables): every path is absolute, SLURM_CONF is set for the
    scontrol it calls, and each run's output and exit status go to ``runs``."""
    argv = [sys.executable, "-m", "doctor.commands.cli", "slurm-healthcheck", "--mode", mode,
            "--state-file", str(state_file), "--scontrol", "/usr/bin/scontrol"]
    path.write_text(
        "#!/bin/sh\n"
        f"cd {shlex.quote(str(REPO))} || exit 0\n"
        f"SLURM_CONF={shlex.quote(str(conf))} PYTHONPATH={shlex.quote(str(REPO))} "
        f"{shlex.join(argv)} >>{shlex.quote(str(runs))}.out 2>&1\n"
        "rc=$?\n"
        f"echo \"$rc $(date +%s.%N)\" >>{shlex.quote(str(runs))}\n"
        "exit $rc\n")
    path.chmod(0o755)


@dataclass
class Cluster:
    folder: Path
    conf: Path
    node: str
    hc_state: Path
    prolog_state: Path
    hc_runs: Path
    prolog_runs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, timeout: float = 15.0, check: bool = True) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: "
                                 f"{done.stderr.strip()}")
        return done.stdout

    def node_line(self) -> str:
        return self.command("scontrol", "show", "node", self.node, "--oneliner").strip()

    def show(self) -> Node:
        return parse_node(self.node_line(), self.node)

    def job(self, job_id: str) -> str:
        return self.command("scontrol", "show", "job", job_id, "--oneliner").strip()

    def runs(self, which: str = "hc") -> list[str]:
        path = self.hc_runs if which == "hc" else self.prolog_runs
        return path.read_text().splitlines() if path.exists() else []

    def wait(self, what: str, probe: Callable[[], T | None], timeout_s: float = 20.0) -> T:
        deadline = time.monotonic() + timeout_s
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout_s:g}s for {what}; the node: "
                                     f"{self.node_line()}\n{self.logs()}")
            time.sleep(0.2)

    def wait_health_checks(self, count: int = 2, timeout_s: float = 20.0) -> None:
        """Until slurmd has run the health check ``count`` more times (each run a full read of
        the state file and, where needed, a scontrol call)."""
        before = len(self.runs())
        self.wait(f"{count} health checks", lambda: len(self.runs()) >= before + count,
                  timeout_s)

    def plant(self, which: str, source: Path | None) -> None:
        """Put ``source``'s state where the health check (hc) or prolog reads it, atomically;
        None removes it (a daemon that never wrote one)."""
        target = self.hc_state if which == "hc" else self.prolog_state
        if source is None:
            target.unlink(missing_ok=True)
            return
        temp = target.with_suffix(".tmp")
        temp.write_bytes(source.read_bytes())
        temp.rename(target)

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "hc-runs.out", "prolog-runs.out"):
            path = self.folder / "log" / name
            if path.exists():
                out.append(f"--- {name} (tail)\n" + "\n".join(
                    path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Every daemon started, newest first: SIGTERM to its process group, SIGKILL after 10 s."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        self.procs.clear()


def _conf(folder: Path, node: str, wrappers: dict[str, Path]) -> str:
    f = str(folder)
    return "\n".join([
        "ClusterName=llmdoctor",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={f}/munge/munge.socket",
        f"StateSaveLocation={f}/state",
        f"SlurmdSpoolDir={f}/spool",
        f"SlurmctldPidFile={f}/run/slurmctld.pid",
        f"SlurmdPidFile={f}/run/slurmd.pid",
        f"SlurmctldLogFile={f}/log/slurmctld.log",
        f"SlurmdLogFile={f}/log/slurmd.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "MpiDefault=none",
        "ReturnToService=2",
        f"HealthCheckProgram={wrappers['hc']}",
        f"HealthCheckInterval={HEALTH_CHECK_S}",
        "HealthCheckNodeState=ANY",
        f"Prolog={wrappers['prolog']}",
        "PrologEpilogTimeout=60",
        # One CPU and 500 MiB: less than any host that runs the tests has, which slurmd allows.
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs=1 RealMemory=500 State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        ""])


def start(folder: Path) -> Cluster:
    """munged, slurmctld and slurmd in ``folder``, the node idle; stop() them when done (the
    caller's finalizer). A failed start stops what it had started before raising."""
    for sub in ("munge", "state", "spool", "log", "run"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    wrappers = {"hc": folder / "hc.sh", "prolog": folder / "prolog.sh"}
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, node, wrappers))
    cluster = Cluster(folder, conf, node, folder / "hc-state.json", folder / "prolog-state.json",
                      folder / "log" / "hc-runs", folder / "log" / "prolog-runs")
    _wrapper(wrappers["hc"], conf, "healthcheck", cluster.hc_state, cluster.hc_runs)
    _wrapper(wrappers["prolog"], conf, "prolog", cluster.prolog_state, cluster.prolog_runs)
    m = folder / "munge"
    daemons = [
        ["munged", "--foreground", "--force", f"--socket={m}/munge.socket",
         f"--key-file={key}", f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
         f"--log-file={m}/munged.log"],
        ["slurmctld", "-D", "-c", "-f", str(conf)],
        ["slurmd", "-D", "-N", node, "-f", str(conf)],
    ]
    try:
        for argv in daemons:
            out = open(folder / "log" / f"{argv[0]}.out", "wb")
            with out:
                cluster.procs.append(subprocess.Popen(
                    argv, env=cluster.env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True))
            if argv[0] == "munged":
                cluster.wait("munged's socket", lambda: (m / "munge.socket").exists(), 10)
        cluster.wait("the node idle", lambda: _idle(cluster), START_S)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _idle(cluster: Cluster) -> bool:
    for proc in cluster.procs:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited {proc.returncode} at start:\n"
                                 f"{cluster.logs()}")
    done = subprocess.run(["sinfo", "-h", "-N", "-n", cluster.node, "-o", "%T"],
                          env=cluster.env, capture_output=True, text=True, timeout=15)
    return done.returncode == 0 and done.stdout.strip() == "idle"


def beat_state(host: Path, target: Path, work: Path, want_critical: bool) -> Path:
    """The state file a real daemon writes after beats on the recorded ``host`` (its
    interval 10 minutes, so the state stays fresh for the 30 minutes a test may take): beats
    until a critical finding shows (``want_critical``) or, for a healthy host, three."""
    from doctor.commands.setup import load_daemon
    from doctor.daemon.service import Daemon
    from doctor.seam.recorded import RecordedHost

    config = work / f"{host.name}.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "10m"\n'
                      f'state_file = "{target}"\n')
    daemon = Daemon(load_daemon(str(config), (), {}), lambda: load_daemon(str(config), (), {}),
                    host=RecordedHost(str(host)))
    try:
        for beat in range(20):  # a rule's for-window may want a few beats (bounded)
            daemon.beat()
            findings = json.loads(target.read_text())["report"]["findings"]
            critical = any(f.get("severity") == "critical" for f in findings)
            if (want_critical and critical) or (not want_critical and beat >= 2):
                break
    finally:
        daemon.dispatcher.close()
    return target
