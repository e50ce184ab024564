"""net.rdma on real /sys/class/infiniband trees (tests/fixtures/rdma_sysfs/, cited in its
PROVENANCE.md), on this machine (no RDMA device: skipped with the reason), and through the
measurement that makes a replay give the same rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.model import ProbeResult, ScanOptions, Skip
from doctor.rules.evaluate import evaluate
from doctor.seam.host import MalformedError, MeasurementError
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.helpers import rdma_sysfs as sysfs
from probes.net import rdma
from tests.builtin_rules import builtin_rules
from tests.fixtures.builders.recording import Recording
from tests.fixtures.convert_rdma_sysfs import files

HOSTS = Path(__file__).parent / "fixtures" / "hosts"


def _host(tmp_path: Path, tree: dict[str, str], measurements: dict | None = None) -> RecordedHost:
    rec = Recording(hostname="t", captured_at="2026-12-07T00:00:00Z", level="quick")
    rec.fs.update(tree)
    rec.measurements = measurements or {}
    rec.write(tmp_path / "h")
    return RecordedHost(tmp_path / "h")


@pytest.fixture(scope="module")
def procfs(tmp_path_factory):
    return rdma.probe(_host(tmp_path_factory.mktemp("p"), files("procfs-fixtures-infiniband.ttar")),
                      ScanOptions())


def test_the_parsers_read_what_the_kernel_prints():
    assert sysfs.coded("s", "4: ACTIVE\n") == (4, "ACTIVE")
    assert sysfs.coded("p", "5: LinkUp\n") == (5, "LinkUp")
    assert sysfs.rate("r", "100 Gb/sec (4X EDR)\n") == (100.0, 4, "EDR")
    assert sysfs.rate("r", "2.5 Gb/sec (1X SDR)\n") == (2.5, 1, "SDR")
    assert sysfs.rate("r", "10 Gb/sec (4X)\n") == (10.0, 4, None)  # i40iw: no speed named
    assert sysfs.counter("c", "N/A (no PMA)\n") is None
    assert sysfs.counter("c", str(2**64 - 1)) == 2**64 - 1
    for bad in ("-1", "1e9", str(2**64), "", "\x00\x01", "9" * 400):
        with pytest.raises(MalformedError):
            sysfs.counter("/sys/x/symbol_error", bad)
    with pytest.raises(MalformedError, match="rate"):
        sysfs.rate("/sys/x/rate", "fast")
    with pytest.raises(MalformedError, match="GID"):
        sysfs.gid("/sys/x/gids/0", "fe80::1")


def test_procfs_tree_opa_connectx3_connectx5(procfs):
    by = {p.name: p for p in procfs.ports}
    assert sorted(by) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    assert procfs.devices == 3
    hfi = by["hfi1_0/1"]
    assert (hfi.state, hfi.phys_state, hfi.rate_gbits, hfi.width, hfi.speed, hfi.hca_type) == \
        ("ACTIVE", "LinkUp", 100.0, 4, "EDR", None)
    assert by["mlx4_0/1"].counters["symbol_error"] == 0
    assert by["mlx4_0/1"].peers == 1 and by["mlx4_0/1"].peer_rate_gbits == 40.0
    assert by["mlx5_0/1"].width == 1 and by["mlx5_0/1"].peers == 0
    assert by["mlx5_0/1"].counters["rnr_nak_retry_err"] == 0  # hw_counters/
    # no measurement in the recording: counters once, no rates, and why
    assert procfs.window_s is None and procfs.missing == {"window_s": "not-found"}
    assert by["mlx5_0/1"].rates_per_s == {} and by["mlx5_0/1"].missing["window_s"] == "not-found"
    assert "4 RDMA ports on 3 devices, 4 ACTIVE" in str(rdma.summary(procfs))


def test_node_exporter_i40iw_without_pma_counters(tmp_path):
    record = rdma.probe(_host(tmp_path, files("node-exporter-sys-infiniband.ttar")), ScanOptions())
    i40iw = next(p for p in record.ports if p.device == "i40iw0")
    assert i40iw.counters == {}  # every counter reads "N/A (no PMA)": absent, not zero
    assert i40iw.rate_gbits == 10.0 and i40iw.speed is None


def test_the_roce_bond_gid_table_and_netdev():
    record = rdma.probe(RecordedHost(HOSTS / "h100-8x-ndr-rails"), ScanOptions())
    bond = next(p for p in record.ports if p.device == "mlx5_bond_0")
    assert (bond.link_layer, bond.gids, bond.roce_v2_gids, bond.roce_v2_indexes) == ("Ethernet", 4, 2, (1, 3))
    assert (bond.netdev, bond.netdev_mtu, bond.netdev_speed_mbits, bond.netdev_operstate) == ("bond0", 9000, 200000, "up")
    ib = next(p for p in record.ports if p.device == "mlx5_0")
    assert ib.gids is None and ib.missing["gids"] == "not-supported"
    assert ib.peers == 7 and ib.rates_per_s.get("symbol_error") == 0.0 and ib.window_s == 1.001


def test_the_planted_rates_come_from_the_measurement():
    record = rdma.probe(RecordedHost(HOSTS / "h100-8x-ndr-rail-errors"), ScanOptions())
    by = {p.name: p for p in record.ports}
    assert by["mlx5_7/1"].deltas["symbol_error"] == 40
    assert by["mlx5_7/1"].rates_per_s["symbol_error"] == pytest.approx(40 / 1.001, abs=1e-5)
    assert by["mlx5_6/1"].deltas["link_downed"] == 1
    assert by["mlx5_0/1"].deltas["symbol_error"] == 0


def test_this_machine_has_no_rdma_device_and_says_so():
    if Path(rdma.ROOT).exists():
        pytest.skip("this machine has RDMA devices")
    with pytest.raises(Skip, match="no RDMA device: /sys/class/infiniband is not-found"):
        rdma.probe(LiveHost(), ScanOptions())


def test_a_capture_replays_the_same_rates(tmp_path, monkeypatch):
    """``llm-doctor capture`` through RecordingHost (the gpud host standing for the live one,
    its second read of mlx5_7's symbol errors 40 higher), then ``scan --replay``: the same
    record, rates included, from measurements.json."""
    source = RecordedHost(HOSTS / "h100-8x-ndr-rails")
    reads = {"n": 0}
    real = source.read_text

    def read_text(path: str) -> str:  # the counter moves between the two reads, as on a host
        text = real(path)
        if path.endswith("mlx5_7/ports/1/counters/symbol_error"):
            reads["n"] += 1
            return str(int(text) + 40 * (reads["n"] - 1)) + "\n"
        return text

    monkeypatch.setattr(source, "read_text", read_text)
    monkeypatch.setattr(rdma, "SAMPLE_S", 0.01)
    capture = RecordingHost(source, tmp_path / "cap")
    live = rdma.probe(capture, ScanOptions())
    capture.save({"level": "quick"})
    replayed = rdma.probe(RecordedHost(tmp_path / "cap"), ScanOptions())
    assert replayed == live
    rail = next(p for p in replayed.ports if p.name == "mlx5_7/1")
    assert rail.deltas["symbol_error"] == 40 and rail.window_s == live.window_s


@pytest.mark.parametrize("bad", [
    [], {"window_s": 1.0}, {"window_s": -1, "ports": {}}, {"window_s": True, "ports": {}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [5, -1]}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [5, 2**70]}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": "many"}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": []}},
])
def test_a_hostile_measurement_is_one_clear_error(bad):
    with pytest.raises(MeasurementError, match="measurement net.rdma"):
        rdma.checked(bad)


def test_a_counter_reset_inside_the_window_is_no_rate(tmp_path):
    """``perfquery -R`` between the two reads: the counter fell; no negative rate is kept."""
    measured = {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [90, 3], "port_rcv_errors": [1, 4]}}}
    record = rdma.probe(_host(tmp_path, files("procfs-fixtures-infiniband.ttar"), {rdma.NAME: measured}),
                        ScanOptions())
    port = next(p for p in record.ports if p.name == "mlx5_0/1")
    assert port.counters == {"symbol_error": 90, "port_rcv_errors": 1}
    assert port.deltas == {"port_rcv_errors": 3} and port.rates_per_s == {"port_rcv_errors": 3.0}
    other = next(p for p in record.ports if p.name == "mlx4_0/1")
    assert other.counters == {} and other.window_s == 1.0  # measured, but nothing recorded for it


# --- diff ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rails_scans():
    from reports.json_report import to_dict
    from tests.test_fixtures import replay
    return {name: to_dict(replay(HOSTS / name)) for name in
            ("h100-8x-ndr-rails", "h100-8x-ndr-rail-at-hdr", "h100-8x-ndr-rail-down")}


def test_diff_names_a_rail_that_trained_lower_as_worse(rails_scans):
    from doctor.diff.compare import compare
    from doctor.diff.model import CHANGED, SAME
    diff = compare(rails_scans["h100-8x-ndr-rails"], rails_scans["h100-8x-ndr-rail-at-hdr"],
                   different_hosts=True)  # the stories are built as hosts of their own names
    facts = {f.id: f for f in diff.facts}
    rate = facts["rdma[mlx5_4/1].rate_gbits"]
    assert (rate.status, rate.before, rate.after, rate.direction) == (CHANGED, 400.0, 200.0, "worse")
    assert rate.causes == ("rdma-link-degraded",) and rate.family == "net"
    assert facts["rdma[mlx5_0/1].rate_gbits"].status == SAME
    assert facts["rdma[mlx5_bond_0/1].netdev_mtu"].status == SAME


def test_diff_names_a_rail_gone_down_as_worse(rails_scans):
    from doctor.diff.compare import compare
    diff = compare(rails_scans["h100-8x-ndr-rails"], rails_scans["h100-8x-ndr-rail-down"],
                   different_hosts=True)
    state = next(f for f in diff.facts if f.id == "rdma[mlx5_5/1].state")
    assert (state.before, state.after, state.direction, state.causes) == \
        ("ACTIVE", "DOWN", "worse", ("rdma-port-down",))


def test_a_recorded_measurement_error_or_garbage_is_an_error_not_a_silent_gap(tmp_path):
    tree = files("procfs-fixtures-infiniband.ttar")
    failed = _host(tmp_path / "a", tree, {rdma.NAME: {"error": "sample failed: no permission"}})
    with pytest.raises(MeasurementError, match="sample failed"):
        rdma.probe(failed, ScanOptions())
    edited = _host(tmp_path / "b", tree, {rdma.NAME: {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [1]}}}})
    with pytest.raises(MeasurementError, match=r"measurement net.rdma: ports.mlx5_0/1.symbol_error"):
        rdma.probe(edited, ScanOptions())


def test_a_rail_down_has_card_peers_and_a_dual_port_card_is_its_own_peer_only_by_port(procfs):
    record = rdma.probe(RecordedHost(HOSTS / "h100-8x-ndr-rail-down"), ScanOptions())
    down = next(p for p in record.ports if p.name == "mlx5_5/1")
    assert (down.state, down.phys_state, down.card_peers, down.peers) == ("DOWN", "Polling", 7, 7)
    by = {p.name: p for p in procfs.ports}
    # mlx4_0's two ports are peers (same card, same kind) but no other card has its port: no
    # evidence a second port of a lone card is used
    assert by["mlx4_0/2"].peers == 1 and by["mlx4_0/2"].card_peers == 0


def test_board_ids_split_kinds_and_hfi1s_free_text_board_id_reads(procfs):
    by = {p.name: p for p in procfs.ports}
    assert by["hfi1_0/1"].board_id.startswith("HPE 100Gb 1-port OP101")
    assert by["mlx4_0/1"].board_id == "SM_1141000001000"
    record = rdma.probe(RecordedHost(HOSTS / "h100-8x-ndr-rails"), ScanOptions())
    bond = next(p for p in record.ports if p.device == "mlx5_bond_0")
    assert bond.board_id == "MT_0000000884" and bond.peers == 0


# --- real ibstat outputs from public issues (tests/fixtures/convert_ibstat.py) -------------

@pytest.mark.parametrize("source,expected", [
    # a VF whose link trained but that no subnet manager made ACTIVE: nothing of its kind is
    # up to call it a rail, so a warning
    ("network-operator-249.txt", [("rdma-port-down", "mlx5_7/1", "warning")]),
    # a rail with no signal (Polling): a warning on its own; critical beside ACTIVE cards
    ("gpud-pr-482.txt", [("rdma-port-down", "mlx5_10/1", "warning")]),
    # two ConnectX-6 Dx ports turned off, none of their kind up: a card the site does not
    # use, silent (NVSentinel's first-poll peer gate)
    ("sglang-6823.txt", []),
    ("mooncake-1999.txt", []),
])
def test_real_ibstat_outputs_through_the_port_rules(tmp_path, source, expected):
    from tests.fixtures.convert_ibstat import files as ibstat_files
    record = rdma.probe(_host(tmp_path, ibstat_files(source)), ScanOptions())
    assert all(p.rate_gbits is None and p.missing["rate_gbits"] == "not-found" for p in record.ports)
    rules = [r for r in builtin_rules() if r.probes == ("net.rdma",)]
    findings, errors = evaluate(rules, [ProbeResult("net.rdma", "ok", 0.0, None, record)])
    assert errors == []
    assert [(f.rule, f.key, f.severity.label) for f in findings] == expected


def test_a_rail_polling_beside_active_cards_of_its_kind_is_critical(tmp_path):
    """gpud#482's rail, on a host where another ConnectX-7 has port 1 ACTIVE."""
    from tests.fixtures.convert_ibstat import files as ibstat_files
    tree = ibstat_files("gpud-pr-482.txt")
    for name in ("hca_type", "fw_ver"):
        tree[f"/sys/class/infiniband/mlx5_9/{name}"] = tree[f"/sys/class/infiniband/mlx5_10/{name}"]
    tree.update({"/sys/class/infiniband/mlx5_9/ports/1/state": "4: ACTIVE\n",
                 "/sys/class/infiniband/mlx5_9/ports/1/phys_state": "5: LinkUp\n",
                 "/sys/class/infiniband/mlx5_9/ports/1/rate": "400 Gb/sec (4X NDR)\n",
                 "/sys/class/infiniband/mlx5_9/ports/1/link_layer": "InfiniBand\n"})
    record = rdma.probe(_host(tmp_path, tree), ScanOptions())
    rules = [r for r in builtin_rules() if r.id == "rdma-port-down"]
    findings, _ = evaluate(rules, [ProbeResult("net.rdma", "ok", 0.0, None, record)])
    assert [(f.key, f.severity.label) for f in findings] == [("mlx5_10/1", "critical")]


# --- RoCE: RoCE v2 GIDs, the RDMA MTU the netdev gives, the host's RoCE MTU (issue 30) ------

def _roce_tree() -> dict[str, str]:
    """gpud's H100 tree with its RoCE bond (build_rdma_hosts.py), the bond's netdev at 1500,
    a second RoCE card copied from the bond with its netdev at 9000 and only RoCE v1 GIDs,
    and an iWARP RNIC at 1500 (Ethernet too, judged by neither)."""
    from tests.fixtures.build_rdma_hosts import GPUD, IB, _roce_bond
    keep = (f"{IB}/mlx5_0/", f"{IB}/mlx5_bond_0/")  # one InfiniBand rail of eight is enough here
    tree = {k: v for k, v in files(GPUD).items() if not k.startswith(f"{IB}/") or k.startswith(keep)}
    _roce_bond(tree)
    tree["/sys/class/net/bond0/mtu"] = "1500\n"
    for new, netdev, mtu in (("mlx5_bond_1", "bond1", "9000"), ("irdma0", "eno1", "1500")):
        for path, text in list(tree.items()):
            if path.startswith(f"{IB}/mlx5_bond_0/"):
                tree[path.replace("/mlx5_bond_0/", f"/{new}/")] = "bond1\n" if "/ndevs/" in path else text
        for key, value in (("mtu", mtu), ("speed", "200000"), ("operstate", "up")):
            tree[f"/sys/class/net/{netdev}/{key}"] = value + "\n"
        for i in range(4):
            tree[f"{IB}/{new}/ports/1/gid_attrs/ndevs/{i}"] = netdev + "\n"
    for i in (1, 3):
        tree[f"{IB}/mlx5_bond_1/ports/1/gid_attrs/types/{i}"] = "IB/RoCE v1\n"
    tree[f"{IB}/irdma0/node_type"] = "4: RNIC\n"
    return tree


def test_roce_ports_say_their_rdma_mtu_the_hosts_roce_mtu_and_v2_gids(tmp_path):
    record = rdma.probe(_host(tmp_path, _roce_tree()), ScanOptions())
    by = {p.name: p for p in record.ports}
    bond0, bond1, iwarp = by["mlx5_bond_0/1"], by["mlx5_bond_1/1"], by["irdma0/1"]
    assert (bond0.netdev, bond0.netdev_mtu, bond0.roce_mtu) == ("bond0", 1500, 1024)  # 1500 - 96 → 1024
    assert (bond1.netdev_mtu, bond1.roce_mtu, bond1.roce_v2_gids, bond1.gids) == (9000, 4096, 0, 4)
    assert iwarp.node_type == "RNIC" and iwarp.mtu_peers == 2  # the RNIC is no RoCE peer
    # the bonds are each other's only RoCE peer: 1500 against 9000, the tie goes to the larger
    assert (bond0.mtu_peers, bond0.peer_mtu) == (1, 9000) and (bond1.mtu_peers, bond1.peer_mtu) == (1, 9000)
    assert by["mlx5_0/1"].roce_mtu is None and by["mlx5_0/1"].missing["roce_mtu"] == "not-supported"
    assert [sysfs.roce_mtu(m) for m in (1500, 2200, 4191, 4192, 9000, 300)] == [1024, 2048, 2048, 4096, 4096, None]
    rules = [r for r in builtin_rules() if r.id in ("roce-no-v2-gid", "roce-mtu-mismatch", "roce-mtu-low")]
    findings, errors = evaluate(rules, [ProbeResult("net.rdma", "ok", 0.0, None, record)])
    assert errors == []
    assert sorted((f.rule, f.key) for f in findings) == [
        ("roce-mtu-mismatch", "mlx5_bond_0/1"), ("roce-no-v2-gid", "mlx5_bond_1/1")]


def test_a_device_list_past_max_devices_says_it_was_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(rdma, "MAX_DEVICES", 2)
    record = rdma.probe(_host(tmp_path, files("procfs-fixtures-infiniband.ttar")), ScanOptions())
    assert (record.devices, record.devices_listed, record.truncated) == (2, 3, True)
    assert record.missing["devices"] == "truncated: the first 2 of 3 by name"
    assert {p.device for p in record.ports} == {"hfi1_0", "mlx4_0"}
    assert "first 2 of 3 devices" in str(rdma.summary(record))
