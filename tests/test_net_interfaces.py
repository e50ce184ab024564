"""net.interfaces: kinds, states, addresses and what a peer on another host can reach.

A recorded host built with the format's own writer (RecordWriter) holds the sysfs files of a
GPU node: a NIC up with a routable address, lo, docker0, a NIC down, one with only a
link-local address; ``ip`` absent on one host so the /proc fallback (fib_trie, route,
if_inet6, in the kernel's own layout as this machine's /proc/net shows it) is read. A live
capture of this machine replays to the same record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doctor._toml import tomllib
from doctor.model import ScanOptions
from doctor.seam.host import CommandOutput, Reason
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost, RecordWriter
from probes.net import interfaces
from probes.helpers import net_interfaces

PCI = "../../devices/pci0000:00/0000:00:03.0/0000:3b:00.0/net/"
VIRTUAL = "../../devices/virtual/net/"
NICS = {
    # name: (link target, operstate, flags, carrier, type, mtu, speed, bridge)
    "ens1f0": (PCI + "ens1f0", "up", "0x1003", "1", "1", "9000", "100000", False),
    "ens1f1": (PCI + "ens1f1", "down", "0x1002", None, "1", "1500", None, False),
    "ib0": (PCI + "ib0", "up", "0x1003", "1", "32", "2044", "200000", False),
    "lo": (VIRTUAL + "lo", "unknown", "0x9", "1", "772", "65536", None, False),
    "docker0": (VIRTUAL + "docker0", "up", "0x1003", "1", "1", "1500", None, True),
    "br0": (VIRTUAL + "br0", "up", "0x1003", "1", "1", "1500", None, True),
    "cali1a2b": (VIRTUAL + "cali1a2b", "up", "0x1003", "1", "1", "1500", "10000", False),
}
IP_JSON = [
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "ens1f0", "addr_info": [{"family": "inet", "local": "10.10.1.5", "prefixlen": 24},
                                       {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
    {"ifname": "ib0", "addr_info": [{"family": "inet6", "local": "fe80::2", "prefixlen": 64}]},
    {"ifname": "docker0", "addr_info": [{"family": "inet", "local": "172.17.0.1", "prefixlen": 16}]},
    {"ifname": "br0", "addr_info": [{"family": "inet", "local": "10.20.0.1", "prefixlen": 24}]},
    {"ifname": "cali1a2b", "addr_info": [], "linkinfo": {"info_kind": "veth"}},  # Calico's veth
    {"ifname": "ens1f1", "addr_info": [{"family": "inet", "local": "10.10.2.5", "prefixlen": 24}]},
]
# /proc/net/fib_trie, /proc/net/route and /proc/net/if_inet6 in the kernel's layout
FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.10.1.0/24 2 0 2
        |-- 10.10.1.0
           /24 link UNICAST
        |-- 10.10.1.5
           /32 host LOCAL
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
     +-- 172.17.0.0/16 2 0 2
        |-- 172.17.0.1
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 10.10.1.0/24 2 0 2
        |-- 10.10.1.5
           /32 host LOCAL
"""
ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
ens1f0\t00000000\t010A0A0A\t0003\t0\t0\t0\t00000000\t0\t0\t0
ens1f0\t00010A0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""
IF_INET6 = """fe800000000000000000000000000001 02 40 20 80   ens1f0
00000000000000000000000000000001 01 80 10 80       lo
fe800000000000000000000000000002 04 40 20 80      ib0
"""


def build(root, ip_installed: bool = True):
    w = RecordWriter(root)
    w.links("/sys/class/net", {name: spec[0] for name, spec in NICS.items()})
    for name, (_, oper, flags, carrier, typ, mtu, speed, bridge) in NICS.items():
        base = f"/sys/class/net/{name}"
        for leaf, value in (("operstate", oper), ("flags", flags), ("carrier", carrier),
                            ("type", typ), ("mtu", mtu), ("speed", speed)):
            if value is not None:
                w.file(f"{base}/{leaf}", value + "\n")
        if bridge:
            w.file(f"{base}/bridge/bridge_id", "8000.0242ac110002\n")
    argv = ("ip", "-j", "-d", "addr", "show")
    if ip_installed:
        w.command(argv, CommandOutput(argv, 0, json.dumps(IP_JSON), ""))
    else:
        w.error(" ".join(argv), Reason.NOT_FOUND)
        w.file("/proc/net/fib_trie", FIB_TRIE)
        w.file("/proc/net/route", ROUTE)
        w.file("/proc/net/if_inet6", IF_INET6)
    w.save({"level": "quick"}, hostname="gpu-node-1")
    return RecordedHost(root)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    base = tmp_path_factory.mktemp("net")
    return {ip: interfaces.probe(build(base / str(ip), ip), ScanOptions()) for ip in (True, False)}


def by_name(record):
    return {i.name: i for i in record.interfaces}


def test_kinds_states_and_reach_from_ip_json(records):
    found = by_name(records[True])
    assert {n: i.kind for n, i in found.items()} == {
        "ens1f0": "physical", "ens1f1": "physical", "ib0": "physical", "lo": "loopback",
        "docker0": "container-bridge", "br0": "bridge", "cali1a2b": "veth"}
    assert found["ib0"].type == "infiniband" and found["ens1f0"].speed_mbits == 100000
    assert found["lo"].up and not found["ens1f1"].up and found["ens1f1"].carrier is None
    assert {n: i.why_unreachable for n, i in found.items()} == {
        "ens1f0": None, "ens1f1": "down", "ib0": "link-local only", "lo": "loopback",
        "docker0": "container bridge", "br0": None, "cali1a2b": "no address"}
    assert records[True].reachable == ("br0", "ens1f0")
    assert records[True].address_source == "ip -j -d addr show"


def test_without_ip_the_addresses_come_from_proc(records):
    record = records[False]
    found = by_name(record)
    assert record.address_source == "/proc/net/fib_trie" and record.missing == {"ip": "not-found"}
    assert [(a.address, a.prefix_len) for a in found["ens1f0"].addresses] == [("10.10.1.5", 24), ("fe80::1", 64)]
    assert [a.address for a in found["docker0"].addresses] == ["172.17.0.1"]
    assert [a.address for a in found["lo"].addresses] == ["127.0.0.1", "::1"]
    assert found["ib0"].why_unreachable == "link-local only"
    assert record.reachable == ("ens1f0",)  # br0 has no IPv4 route here: no address


@pytest.mark.parametrize("text", ["", "{}", "[1, {\"ifname\": 5}]", "[{\"ifname\": \"x\", \"addr_info\": [{\"local\": \"no\"}]}]"])
def test_hostile_ip_json_gives_no_address_and_no_traceback(text):
    try:
        assert net_interfaces._from_ip_json(text)[0] == {}
    except ValueError:
        pass  # the probe turns it into a missing entry and reads /proc


@pytest.mark.slow  # runs `ip`
def test_a_capture_of_this_machine_replays_to_the_same_record(tmp_path):
    live = interfaces.probe(LiveHost(), ScanOptions())
    recording = RecordingHost(LiveHost(), tmp_path / "cap")
    captured = interfaces.probe(recording, ScanOptions())
    recording.writer.save({"level": "quick"})
    assert captured == live
    assert interfaces.probe(RecordedHost(tmp_path / "cap"), ScanOptions()) == live
    assert any(i.kind == "loopback" and not i.peer_reachable for i in live.interfaces)


NET_SYSFS = sorted((Path(__file__).parent / "fixtures" / "net_sysfs").glob("*.toml"))


@pytest.mark.parametrize("source", NET_SYSFS, ids=lambda p: p.stem)
def test_real_sysfs_net_trees_read_as_their_files_say(tmp_path, source):
    """Prometheus' real /sys/class/net fixtures (tests/fixtures/convert_net_ttar.py), replayed.
    Where the archive keeps an interface as a directory, not the kernel's link, the link's
    text is its name: the kind is then judged "physical", as nothing says otherwise."""
    tree = tomllib.loads(source.read_text())
    w = RecordWriter(tmp_path / "host")
    w.links("/sys/class/net", {i["name"]: i["target"] or i["name"] for i in tree["interface"]})
    for item in tree["interface"]:
        for leaf, value in item["files"].items():
            w.file(f"/sys/class/net/{item['name']}/{leaf}", value + "\n")
    w.error("ip -j -d addr show", Reason.NOT_FOUND)
    w.save({"level": "quick"}, hostname="procfs-fixture")
    record = interfaces.probe(RecordedHost(tmp_path / "host"), ScanOptions())
    assert [i.name for i in record.interfaces] == [i["name"] for i in tree["interface"]]
    for got, item in zip(record.interfaces, tree["interface"]):
        files = item["files"]
        assert got.operstate == files["operstate"] and got.mtu == int(files["mtu"])
        assert got.speed_mbits == (int(files["speed"]) if int(files["speed"]) > 0 else None)
        assert got.admin_up is True and got.carrier is True and got.up
        assert got.why_unreachable == "no address"  # the archives hold no /proc/net addresses
    assert record.reachable == () and record.address_source is None


def test_hostile_sysfs_values_are_absent_not_wrong(tmp_path):
    """A recording is someone else's: names with path characters are not read, numbers
    that are not numbers (or beyond any real one) are None, binary text is kept as text."""
    w = RecordWriter(tmp_path / "host")
    w.links("/sys/class/net", {"eth0": PCI + "eth0", "../../etc": "x", "a" * 40: "y", "ok\nnot": "z"})
    for leaf, value in (("operstate", "\x00\xffup"), ("flags", "zz"), ("carrier", "2"), ("type", "-1"),
                        ("mtu", "9" * 5000), ("speed", "abc")):
        w.file(f"/sys/class/net/eth0/{leaf}", value)
    argv = ("ip", "-j", "-d", "addr", "show")
    hostile = [{"ifname": "eth0", "linkinfo": {"info_kind": "../veth"},
                "addr_info": [{"local": "1.2.3.4", "prefixlen": 10**30}, {"local": "x" * 10_000}]}] * 3
    w.command(argv, CommandOutput(argv, 0, json.dumps(hostile), ""))
    w.save({"level": "quick"}, hostname="hostile")
    record = interfaces.probe(RecordedHost(tmp_path / "host"), ScanOptions())
    assert [i.name for i in record.interfaces] == ["eth0"]
    eth0 = record.interfaces[0]
    assert (eth0.admin_up, eth0.carrier, eth0.mtu, eth0.speed_mbits, eth0.up) == (None, None, None, None, False)
    assert eth0.kind == "physical" and eth0.why_unreachable == "down"
    assert [(a.address, a.prefix_len) for a in eth0.addresses] == [("1.2.3.4", None)]  # once, no 10**30 prefix
