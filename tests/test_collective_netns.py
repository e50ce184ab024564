"""``llm-doctor collective`` between real "hosts": network namespaces joined by veth pairs
through a bridge (tests/netns_lab.py), a real torch.distributed gloo all-reduce between them,
and faults planted live: a peer that sends garbage or never speaks, an MTU mismatch, an
interface down, a rank that never starts, GLOO_SOCKET_IFNAME naming a missing or a down
interface, a rank starved by a cgroup v1 CPU quota. Each is found, named, and ends within its
bound; the figures are printed (``-s``). One namespace set for the module; root needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.netns_lab import Lab, collective

pytestmark = pytest.mark.live

RUN_S = 60.0  # any one command, far above its own --timeout-s: the test's backstop
FAST = ("--budget-s", "0.5", "--bytes", str(4 << 20))


def _can() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, cgroups)"
    if subprocess.run(["ip", "-V"], capture_output=True).returncode != 0:
        return "needs iproute2"
    return None


@pytest.fixture(scope="module")
def lab():
    if _can():
        pytest.skip(_can())
    made = Lab(f"llmd{os.getpid() % 100000}").start(3)
    try:
        yield made
    finally:
        made.stop()


def _done(proc: subprocess.Popen, started: float) -> tuple[int, dict, float]:
    """(exit status, the net.collective record, seconds from ``started`` to its end)."""
    try:
        out, err = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise AssertionError("the command outlived the test's backstop") from None
    took = time.perf_counter() - started
    assert out, err.decode(errors="replace")[-2000:]
    report = json.loads(out)
    data = report["probes"][0]
    assert data["name"] == "net.collective"
    # the rules the command evaluated on it (checks/net_collective.toml), by rule id
    return proc.returncode, {**data["data"], "findings": [f["rule"] for f in report["findings"]]}, took


def _hostile(lab: Lab, port: int) -> subprocess.Popen:
    """From host 2: one connection that never speaks and one that sends garbage, to the
    master's port, held open for the run."""
    code = ("import os,socket,time\n"
            "end = time.time() + 15\n"
            "while True:\n"
            "    try:\n"
            f"        quiet = socket.create_connection(('{lab.addr(0)}', {port}), timeout=1); break\n"
            "    except OSError:\n"
            "        if time.time() > end: raise\n"
            "        time.sleep(0.1)\n"
            f"rude = socket.create_connection(('{lab.addr(0)}', {port}), timeout=2)\n"
            "rude.sendall(os.urandom(4096) + b'\\xff' * 65536)\n"
            "print('in', flush=True)\n"
            "time.sleep(20)\n")
    return subprocess.Popen(lab.argv(2, sys.executable, "-c", code), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_two_hosts_all_reduce_against_the_veths_tcp_ceiling_with_hostile_peers(lab, tmp_path):
    t0 = time.perf_counter()
    kept = tmp_path / "daemon" / "state.json"  # host A keeps its result beside it, for the daemon
    a = collective(lab, 0, 0, 2, 29611, "--timeout-s", "30", "--state-file", str(kept), *FAST)
    rude = _hostile(lab, 29611)
    b = collective(lab, 1, 1, 2, 29611, "--timeout-s", "30", *FAST)
    try:
        (rc_a, ra, took), (rc_b, rb, _) = _done(a, t0), _done(b, t0)
        assert rude.stdout is not None and rude.stdout.readline() == b"in\n"  # it got in
    finally:
        os.killpg(rude.pid, 9)
        rude.wait()
    assert (rc_a, rc_b, ra["outcome"], rb["outcome"]) == (0, 0, "ok", "ok"), (ra, rb)
    for r, me in ((ra, 0), (rb, 1)):
        assert r["backend"] == "gloo" and r["ranks_here"] == [me] and r["interface"] == "eth0"
        assert r["interface_kind"] == "veth" and r["line_gbps"] is None  # no line rate on veth
        assert "route to the master" in r["interface_source"]
        assert r["busbw_gbps"] > 0 and r["ceiling_gbps"] > 0 and 0 < r["ratio"]
        assert "TCP stream with rank 1" in r["ceiling_source"]
    assert ra["busbw_gbps"] == rb["busbw_gbps"]  # every host reports the group's figure
    saved = json.loads((tmp_path / "daemon" / "collective.json").read_text())
    assert saved["result"]["busbw_gbps"] == ra["busbw_gbps"]  # what net.collective reads back
    print(f"\nveth, 2 namespaces, gloo 4 MiB: busbw {ra['busbw_gbps']} GB/s, TCP stream "
          f"{ra['stream_gbps']} GB/s (slower direction), ratio {ra['ratio']}; {took:.1f} s; "
          "a silent and a garbage peer on the master's port changed nothing")


def test_an_mtu_mismatch_across_the_veth_is_named_though_tcp_hides_it(lab):
    ip = ["ip", "-n", lab.hosts[0], "link", "set", "eth0", "mtu"]
    subprocess.run([*ip, "9000"], check=True, timeout=10)  # the bridge's port stays at 1500
    try:
        t0 = time.perf_counter()
        a = collective(lab, 0, 0, 2, 29612, "--timeout-s", "30", *FAST)
        b = collective(lab, 1, 1, 2, 29612, "--timeout-s", "30", *FAST)
        (rc_a, ra, took), (_, rb, _) = _done(a, t0), _done(b, t0)
    finally:
        subprocess.run([*ip, "1500"], check=True, timeout=10)
    # TCP's MSS: each side sends what the other advertised (1460), so gloo runs; the mismatch
    # is named from the ranks' own interfaces, which is what would drop RDMA or UDP here
    assert rc_a == 0 and ra["outcome"] == "ok" and ra["mtu"] == 9000 and rb["mtu"] == 1500
    assert ra["mtu_mismatch"] == "MTU differs between ranks: rank 0 eth0 9000, rank 1 eth0 1500"
    assert ra["findings"] == rb["findings"] == ["collective-mtu-mismatch"]  # both hosts name it
    print(f"\nMTU 9000 vs 1500: outcome {ra['outcome']}, busbw {ra['busbw_gbps']} GB/s, TCP "
          f"{ra['stream_gbps']} GB/s, ratio {ra['ratio']}; {took:.1f} s")


def test_an_interface_down_and_a_rank_that_never_starts_are_named_at_the_join_bound(lab):
    ip = ["ip", "-n", lab.hosts[1], "link", "set", "eth0"]
    subprocess.run([*ip, "down"], check=True, timeout=10)
    try:
        t0 = time.perf_counter()  # rank 2 (host 2) never starts at all
        a = collective(lab, 0, 0, 3, 29613, "--timeout-s", "12", "--join-s", "4", *FAST)
        b = collective(lab, 1, 1, 3, 29613, "--timeout-s", "12", *FAST)
        (rc_b, rb, took_b), (rc_a, ra, took_a) = _done(b, t0), _done(a, t0)
    finally:
        subprocess.run([*ip, "up"], check=True, timeout=10)
    assert rc_b == 1 and rb["failed_step"] == "setup"
    assert "no route from here to the master 10.231.0.1" in rb["failure"]
    assert rc_a == 1 and ra["missing_ranks"] == [1, 2] and ra["failed_step"] == "rendezvous"
    assert "rank(s) 1, 2 of 3 never joined" in ra["failure"]
    assert ra["findings"] == ["collective-rank-missing"]
    assert rb["findings"] == ["collective-interface-unusable"]
    assert ra["total_s"] < 12  # named by the join bound, not killed at the hard limit
    print(f"\ninterface down on host 1: named there in {took_b:.2f} s; rank 1 (down) and rank 2 "
          f"(never started) named by the master after {took_a:.1f} s (join bound 4 s)")


@pytest.mark.parametrize("name,words", [("eth7", "no interface eth7 here"),
                                        ("eth9", "interface eth9 is down")])
def test_gloo_socket_ifname_naming_a_missing_or_down_interface_is_named_at_once(lab, name, words):
    t0 = time.perf_counter()
    rc, r, took = _done(collective(lab, 1, 1, 2, 29614, "--timeout-s", "10",
                                   env={"GLOO_SOCKET_IFNAME": name}), t0)
    assert rc == 1 and r["failed_step"] == "setup" and words in r["failure"]
    assert r["failure"].startswith(f"GLOO_SOCKET_IFNAME={name}: ")
    print(f"\nGLOO_SOCKET_IFNAME={name}: {r['failure']} ({took:.2f} s)")


def _worker_pid(rank: int, until: float) -> int | None:
    needle = f"probes.kernels.xnode\0--worker\0--rank\0{rank}\0".encode()
    while time.perf_counter() < until:
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    return int(entry)
            except OSError:
                continue
        time.sleep(0.02)
    return None


def test_a_rank_starved_by_a_cpu_quota_is_named_by_both_hosts(lab):
    cgroup = Path(f"/sys/fs/cgroup/cpu/{lab.prefix}-starved")
    if not Path("/sys/fs/cgroup/cpu/cgroup.procs").exists():
        pytest.skip("no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    cgroup.mkdir()
    try:
        (cgroup / "cpu.cfs_period_us").write_text("100000")
        (cgroup / "cpu.cfs_quota_us").write_text("3000")  # 0.03 CPU
        t0 = time.perf_counter()
        a = collective(lab, 0, 0, 2, 29615, "--timeout-s", "8", "--join-s", "4", *FAST)
        b = collective(lab, 1, 1, 2, 29615, "--timeout-s", "8", *FAST, cgroup_fs=True)
        pid = _worker_pid(1, t0 + 15)
        assert pid is not None, "rank 1's worker never started"
        (cgroup / "cgroup.procs").write_text(str(pid))  # the rank, as a tight container has it
        (rc_a, ra, took_a), (rc_b, rb, took_b) = _done(a, t0), _done(b, t0)
    finally:
        for _ in range(50):  # its processes are gone once the commands ended; bounded
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert rc_a == 1 and ra["missing_ranks"] == [1]
    assert rc_b == 1 and rb["outcome"] in ("timeout", "failed")
    assert "rank 1 is held to 0.03 CPU by its cgroup" in rb["failure"]
    assert ra["findings"] == ["collective-rank-missing"] and "collective-rank-starved" in rb["findings"]
    assert rb["total_s"] < 8 + 2  # killed by its own hard limit
    print(f"\nCPU quota 0.03 on rank 1: master named it after {took_a:.1f} s; its host ended "
          f"after {took_b:.1f} s: {rb['failure']}")


def test_pairwise_names_the_host_behind_a_slow_link(lab):
    tbf = ["tc", "qdisc", "add", "dev", "{dev}", "root", "tbf", "rate", "100mbit", "burst",
           "32kbit", "latency", "100ms"]
    slowed = [(lab.hosts[2], "eth0"), (lab.switch, "p2")]  # host 2's link, both directions
    try:
        for ns, dev in slowed:
            subprocess.run(["ip", "netns", "exec", ns, *[w.format(dev=dev) for w in tbf]],
                           check=True, timeout=10)
        t0 = time.perf_counter()
        runs = [collective(lab, h, h, 3, 29616, "--pairwise", "--timeout-s", "30", "--budget-s",
                           "0.5", "--bytes", str(1 << 20)) for h in range(3)]
        (rc, r, took), *others = [_done(p, t0) for p in runs]
    finally:
        for ns, dev in slowed:
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                           timeout=10)
    assert rc == 0 and r["outcome"] == "ok", r
    pairs = {tuple(p["ranks"]): p["busbw_gbps"] for p in r["pairs"]}
    assert set(pairs) == {(0, 1), (1, 2)}  # round 0: 0-1 (2 sits out); round 1: 1-2
    assert pairs[(1, 2)] < 0.5 * pairs[(0, 1)]
    assert r["suspects"] == [2] and all(o[1]["outcome"] == "ok" for o in others)
    assert r["findings"] == ["collective-slow-rank"]  # gloo too: the comparison is relative
    print(f"\npairwise, host 2 behind tbf 100 Mbit/s: {pairs} GB/s; suspect {r['suspects']}; "
          f"{took:.1f} s")
