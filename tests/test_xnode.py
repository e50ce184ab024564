"""The cross-host collective's pure parts: where the group meets (probes/helpers/rendezvous.py),
the path's interface and line rate (probes/helpers/net_path.py), the pairs and the record of
the kernel's JSON (probes/net/xnode.py), and its saved scan read back. The live runs between
network namespaces are tests/test_collective_netns.py."""

from __future__ import annotations

import json
import math

import pytest

from doctor.commands import collective as command
from probes.helpers import net_path
from probes.helpers.rendezvous import RendezvousError, first_host, parse_master, resolve
from probes.kernels import xnode as kernel
from probes.helpers.xnode_rank import pair_figures, pair_rounds, stream_peer
from probes.net import xnode
from reports.json_report import read


def test_the_command_line_wins_then_torchrun_then_slurm():
    env = {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400", "RANK": "3", "WORLD_SIZE": "4",
           "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    rv = resolve("10.0.0.1:29500", 1, 2, env)
    assert (rv.master_addr, rv.master_port, rv.rank, rv.world, rv.source) == \
        ("10.0.0.1", 29500, 1, 2, "--master")
    rv = resolve(None, None, None, env)
    assert (rv.master_addr, rv.master_port, rv.rank, rv.world, rv.local_rank, rv.source) == \
        ("10.0.0.9", 29400, 3, 4, 1, "torchrun")
    slurm = {k: v for k, v in env.items() if not k.startswith(("MASTER", "RANK", "WORLD", "LOCAL"))}
    rv = resolve(None, None, None, {**slurm, "SLURM_STEP_NODELIST": "gpu[07-09,11],cpu1"})
    assert (rv.master_addr, rv.master_port, rv.rank, rv.world, rv.source) == \
        ("gpu07", 20007, 0, 2, "slurm")  # the port from the job id: the same on every task
    rv = resolve(None, None, None, {**slurm, "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3",
                                    "SLURM_JOB_NODELIST": "n1"})
    assert rv.master_addr == "10.1.2.3"


@pytest.mark.parametrize("master,rank,world,env,words", [
    ("10.0.0.1:29500", None, 2, {}, "go together"),
    ("10.0.0.1", 0, 2, {}, "HOST:PORT"),
    ("10.0.0.1:99999", 0, 2, {}, "1-65535"),
    ("$(touch x):1", 0, 2, {}, "HOST:PORT"),
    ("10.0.0.1:29500", 2, 2, {}, "ranks are 0-1"),
    ("10.0.0.1:29500", 0, 1, {}, "2 to"),
    (None, None, None, {}, "no rendezvous"),
    (None, None, None, {"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR"),
    (None, None, None, {"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
     "RANK"),
    (None, None, None, {"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "srun"),
    (None, None, None, {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1",
                        "SLURM_JOB_ID": "x"}, "SLURM_JOB_ID"),
])
def test_a_wrong_rendezvous_is_one_line_naming_the_value(master, rank, world, env, words):
    with pytest.raises(RendezvousError) as err:
        resolve(master, rank, world, env)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_hosts_and_ports_parse():
    assert parse_master("[fd00::1]:29500") == ("fd00::1", 29500)
    assert parse_master("node-01.cluster:1") == ("node-01.cluster", 1)
    assert first_host("a1") == "a1" and first_host("gpu[3,5-6]") == "gpu3"
    with pytest.raises(RendezvousError):
        first_host("[")


LINKS = [
    {"ifname": "lo", "flags": ["LOOPBACK", "UP"], "operstate": "UNKNOWN", "mtu": 65536,
     "addr_info": [{"local": "127.0.0.1"}]},
    {"ifname": "eth0", "flags": ["BROADCAST", "UP", "LOWER_UP"], "operstate": "UP", "mtu": 9000,
     "addr_info": [{"local": "10.0.0.2"}, {"local": "fe80::1"}]},
    {"ifname": "veth1", "flags": ["BROADCAST", "UP", "LOWER_UP"], "operstate": "UP", "mtu": 1500,
     "linkinfo": {"info_kind": "veth"}, "addr_info": [{"local": "10.9.0.2"}]},
    {"ifname": "eth1", "flags": ["BROADCAST"], "operstate": "DOWN", "mtu": 1500,
     "addr_info": [{"local": "10.1.0.2"}]},
    {"ifname": "eth2", "flags": ["BROADCAST", "UP", "LOWER_UP"], "operstate": "UP", "mtu": 1500},
]


def _sysfs(tmp_path, speeds):
    for name, speed in speeds.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed").write_text(speed)
    return str(tmp_path)


def test_the_interface_its_state_and_its_line_rate(tmp_path):
    sysfs = _sysfs(tmp_path, {"eth0": "100000\n", "veth1": "10000\n", "eth2": "-1\n"})
    assert net_path.holding("10.0.0.2", LINKS) == "eth0" and net_path.holding("10.7.7.7", LINKS) is None
    eth0 = net_path.interface("eth0", LINKS, sysfs)
    assert eth0["problem"] is None and eth0["speed_mbps"] == 100000 and eth0["mtu"] == 9000
    assert kernel.line_rate(eth0, False, {})["line_gbps"] == 12.5  # 100 Gb/s, one direction
    veth = net_path.interface("veth1", LINKS, sysfs)  # veth's 10000 is its driver's constant
    assert veth["speed_mbps"] is None and "constant 10000 Mb/s" in veth["speed_missing"]
    assert "down" in net_path.interface("eth1", LINKS, sysfs)["problem"]
    assert "no address" in net_path.interface("eth2", LINKS, sysfs)["problem"]
    assert "no speed" in net_path.interface("eth2", LINKS, sysfs)["speed_missing"]
    gone = net_path.interface("ib9", LINKS, sysfs)
    assert gone["exists"] is False and "interfaces: eth0, eth1, eth2, lo, veth1" in gone["problem"]
    assert net_path.speed_mbps("../etc", sysfs)[0] is None


@pytest.mark.parametrize("value,prefix,route,want", [
    ("eth1", False, "eth0", ("eth1", "")),  # gloo: the user's choice, kept
    ("eth", False, "eth0", ("eth", "")),  # gloo takes exact names: "no interface eth here"
    ("eth", True, "eth0", ("eth0", "")),  # NCCL: a prefix, the routed one preferred
    ("=eth", True, "eth0", ("eth", "")),  # NCCL's exact match
    ("^docker,lo", True, "eth0", ("eth0", "")),
    ("^eth", True, "eth0", ("lo", "")),  # the operators' "Bootstrap: Using lo"
    ("^eth,lo,veth", True, "eth0", (None, "excludes every interface here (eth0, eth1, eth2, lo, veth1)")),
])
def test_a_socket_ifname_is_read_as_the_library_reads_it(value, prefix, route, want):
    names = [d["ifname"] for d in LINKS]
    assert net_path.pick(value, names, route, prefix) == want


def test_a_loopback_bind_for_a_master_elsewhere_is_a_problem():
    lo = net_path.interface("lo", LINKS, "/nonexistent")
    assert kernel._loopback(lo, "10.0.0.2") == "lo is the loopback: a rank on another host cannot reach it"
    assert kernel._loopback(lo, "127.0.0.1") is None  # one host: torchrun --nnodes 1


def test_infiniband_is_nic_rate_times_nics(tmp_path):
    for dev, state, rate in (("mlx5_0", "4: ACTIVE", "200 Gb/sec (4X HDR)"),
                             ("mlx5_1", "4: ACTIVE", "200 Gb/sec (4X HDR)"),
                             ("mlx5_2", "1: DOWN", "10 Gb/sec (4X SDR)")):
        port = tmp_path / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state)
        (port / "rate").write_text(rate)
    ports = net_path.ib_ports(str(tmp_path))
    assert [p["device"] for p in ports] == ["mlx5_0", "mlx5_1"]
    assert sum(p["gbit"] for p in ports) / 8 == 50.0


def test_pairs_rotate_and_the_host_slow_with_every_partner_is_named():
    assert pair_rounds(2) == [[(0, 1)]]
    assert pair_rounds(4) == [[(0, 1), (2, 3)], [(1, 2), (3, 0)]]
    assert pair_rounds(3) == [[(0, 1)], [(1, 2)]]
    fast, slow = 0.01, 0.1  # seconds per all-reduce of 16 MiB
    results = {0: {"pairs": [{"round": 0, "pair": [0, 1], "seconds": fast},
                             {"round": 1, "pair": [3, 0], "seconds": slow}]},
               1: {"pairs": [{"round": 0, "pair": [0, 1], "seconds": fast},
                             {"round": 1, "pair": [1, 2], "seconds": fast}]},
               2: {"pairs": [{"round": 0, "pair": [2, 3], "seconds": slow}]}}
    pairs = xnode._pairs(pair_figures(results, 16 << 20))
    assert xnode.suspects(pairs) == (3,)  # 3 is slow with 2 and with 0; 2 is fast with 1
    assert xnode.suspects(pairs[:1]) == ()  # one pair: either side could be the slow one
    assert stream_peer({0: {"addr": "a"}, 1: {"addr": "a"}, 2: {"addr": "b"}}) == 2
    assert stream_peer({0: {"addr": "a"}, 1: {"addr": "a"}}) is None


GOOD = {"mode": "group", "backend": "gloo", "master": "10.0.0.1:29500", "rendezvous": "--master",
        "world": 2, "ranks_here": [0], "outcome": "ok", "missing": [], "busbw_gbps": 0.6,
        "algbw_gbps": 0.6, "path": {"source": "the route to the master", "line_gbps": None,
                                     "line_source": "veth has no line rate",
                                     "interface": {"name": "veth0", "kind": "veth", "mtu": 1500}},
        "stream": {"peer": 1, "gbps": 1.5}, "ceiling_gbps": 1.5, "ceiling_source": "a TCP stream",
        "ratio": 0.4, "limit_s": 20.0, "total_s": 4.2}


def test_the_record_and_its_lines():
    r = xnode.record(GOOD)
    assert (r.outcome, r.busbw_gbps, r.ceiling_gbps, r.ratio, r.interface) == \
        ("ok", 0.6, 1.5, 0.4, "veth0")
    assert "line_gbps" in r.missing and "busbw_gbps" not in r.missing
    text = "\n".join(xnode.describe(r))
    assert "busbw 0.6 GB/s = 0.4 of 1.5 GB/s" in text and "veth0 (veth, MTU 1500)" in text
    failed = xnode.record({**GOOD, "outcome": "failed", "busbw_gbps": None, "missing": [1, 3],
                           "failed_step": "rendezvous", "failure": "rank(s) 1, 3 never joined"})
    assert failed.missing_ranks == (1, 3) and "never joined: rank(s) 1, 3" in xnode.describe(failed)[2]


@pytest.mark.parametrize("hostile", [
    {}, {"outcome": "exploded"}, {"busbw_gbps": math.inf, "world": True, "missing": "1,2"},
    {"path": [], "stream": "x", "pairs": [{"pair": [1], "round": 0, "busbw_gbps": 1}, 5]},
    {"failure": "x" * 10_000, "ranks_here": list(range(5000)), "master": 7},
])
def test_a_hostile_or_broken_result_is_a_failed_record_never_a_crash(hostile):
    r = xnode.record(hostile)
    assert r.outcome in ("ok", "failed", "timeout") and r.busbw_gbps is None
    assert len(r.failure or "") <= 400 and len(r.ranks_here) <= 1024 and r.pairs == ()
    assert xnode.describe(r) and xnode.summary(r)


def test_the_mtu_mismatch_and_the_ceiling_from_the_stream():
    arrivals = {"0": {"ifname": "veth0", "mtu": 9000}, "1": {"ifname": "veth1", "mtu": 1500}}
    assert kernel.mtu_mismatch(arrivals) == "MTU differs between ranks: rank 0 veth0 9000, rank 1 veth1 1500"
    assert kernel.mtu_mismatch({"0": {"mtu": 1500}, "1": {"mtu": 1500}}) is None
    got = kernel.ceiling({"line_gbps": None, "line_source": "veth has no line rate"},
                         {"peer": 1, "gbps": 2.0}, 0.5)
    assert got["ceiling_gbps"] == 2.0 and got["ratio"] == 0.25 and "TCP stream" in got["ceiling_source"]
    assert kernel.ceiling({"line_gbps": 12.5, "line_source": "eth0"}, None, 10.0)["ratio"] == 0.8


def test_the_json_is_a_saved_scan_that_diff_and_the_fleet_read(tmp_path):
    saved = tmp_path / "collective.json"
    saved.write_text(command.saved_scan(GOOD, 4.2, 1.8e9))
    scan = read(saved, ValueError)
    probe = scan.probe("net.collective")
    assert probe is not None and probe.status == "ok" and probe.data["busbw_gbps"] == 0.6
    assert probe.data["ratio"] == 0.4 and json.loads(saved.read_text())["level"] == "full"


def test_the_kernel_names_a_rendezvous_it_cannot_use_before_starting_anything(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    out = kernel.run(kernel.main.__globals__["argparse"].Namespace(
        master=None, rank=None, world=None, limit_s=10, join_s=None, devices=None, cpu=0,
        bytes=None, budget_s=1, pairwise=False))
    assert out["outcome"] == "failed" and out["failed_step"] == "setup"
    assert "no rendezvous" in out["failure"]
