"""net.rdma: the InfiniBand and RoCE ports of this host: state, rate, GIDs, error counters.

Reads, for every ``/sys/class/infiniband/<dev>/ports/<n>/`` (world-readable, no root):
``state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``, ``2: Polling``), ``rate``
(``400 Gb/sec (4X NDR)``), ``link_layer`` (InfiniBand or Ethernet), the device's
``hca_type`` and ``board_id``; on an Ethernet (RoCE) port the GID table ``gids/<i>`` with
``gid_attrs/types/<i>`` (RoCE v2 entries, non-zero GIDs) and the netdev behind the port
(``gid_attrs/ndevs/0``, else ``<dev>/device/net/*``) with its ``mtu``, ``speed`` (Mb/s) and
``operstate`` from ``/sys/class/net/<if>/`` (and the RDMA MTU that MTU gives, include/rdma/
ib_addr.h ``iboe_get_mtu``); the device's ``node_type`` (``4: RNIC``: iWARP, Ethernet without
RoCE GIDs); and the error counters of ``counters/`` and
``hw_counters/`` (COUNTERS), read twice SAMPLE_S apart inside ``host.measure`` so that a
replay gives the same rates. A recording without that measurement still gives the counters
once (totals since the last reset), its rates None with the reason.

A port's peers are the other ACTIVE ports of its host with the same link layer, HCA type
and board id (``board_id``, the product's PSID): a port that trained below them (a lane
down, a bad cable) is slower than the rail it is one of. Its card peers are those of them
on other cards at the same port number: a port that is down where cards of its kind have
that port up is one the host uses. Manual equivalent: ``ibstat``, ``ibv_devinfo -v``, ``show_gids``,
``perfquery -x`` twice; ``cat /sys/class/infiniband/*/ports/*/{state,rate}``.
A host without ``/sys/class/infiniband`` (no RDMA driver loaded) is skipped with the reason;
one listing more than MAX_DEVICES judges the first by name and says so (``truncated``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError, MalformedError, MeasurementError
from doctor.seam.missing import Missing
from probes.helpers import rdma_sysfs as sysfs
from probes.helpers.rdma_peers import mtu_peers as _mtu_peers, peers as _peers

NAME = "net.rdma"  # the probe, and its measurement
ROOT = "/sys/class/infiniband"
SAMPLE_S = 1.0  # counters read twice this far apart: NVSentinel polls them every second
MAX_DEVICES = 64  # a host has a few dozen at most (8 rails, VFs); a recording may list more
MAX_PORTS = 16
MAX_GIDS = 256  # mlx5 RoCE GID tables hold 255 entries; the kernel lists one file each
MAX_WINDOW_S = 600.0

# The counters read, by file: the IBTA PMA set (counters/) and the driver's (hw_counters/):
# those NVIDIA NVSentinel's NIC health monitor watches (docs/configuration/nic-health-monitor.md),
# and the list. A port has the ones its driver exposes.
COUNTERS: dict[str, str] = {
    "symbol_error": "counters",
    "link_downed": "counters",
    "link_error_recovery": "counters",
    "port_rcv_errors": "counters",
    "port_rcv_remote_physical_errors": "counters",
    "port_rcv_switch_relay_errors": "counters",
    "port_xmit_discards": "counters",
    "excessive_buffer_overrun_errors": "counters",
    "local_link_integrity_errors": "counters",
    "rnr_nak_retry_err": "hw_counters",
    "local_ack_timeout_err": "hw_counters",
    "out_of_sequence": "hw_counters",
    "packet_seq_err": "hw_counters",
    "req_transport_retries_exceeded": "hw_counters",
    "roce_slow_restart": "hw_counters",
}


@dataclass(frozen=True, slots=True)
class RdmaPort:
    name: str  # "<dev>/<port>": mlx5_0/1, the finding's key
    device: str
    port: int
    hca_type: str | None  # <dev>/hca_type: MT4129 (ConnectX-7)
    board_id: str | None  # <dev>/board_id: the product's PSID, MT_0000000838
    state: str | None  # ACTIVE, DOWN, INIT, ARMED
    state_code: int | None
    phys_state: str | None  # LinkUp, Polling, Disabled, LinkErrorRecovery
    phys_state_code: int | None
    rate_gbits: float | None  # ports/<n>/rate: the trained rate, all lanes
    width: int | None  # lanes: 1, 2, 4, 8, 12
    speed: str | None  # per-lane generation: EDR, HDR, NDR; None where the kernel names none
    link_layer: str | None  # InfiniBand | Ethernet (RoCE)
    peers: int  # other ACTIVE ports of this host, same link layer, HCA type and board id
    peer_rate_gbits: float | None  # the fastest of them; None without peers
    # other cards of its kind (HCA type, link layer) whose port of this number is ACTIVE: the
    # evidence that this port is one the host uses (NVSentinel's peer-card gate)
    card_peers: int
    gids: int | None  # non-zero GIDs (Ethernet ports)
    roce_v2_gids: int | None  # of them, RoCE v2: what NCCL_IB_GID_INDEX must name
    roce_v2_indexes: tuple[int, ...]
    netdev: str | None  # the interface behind a RoCE port: ens1f0np0
    netdev_mtu: int | None  # /sys/class/net/<if>/mtu, bytes
    netdev_speed_mbits: int | None  # /sys/class/net/<if>/speed; None when down or unknown
    netdev_operstate: str | None
    counters: dict[str, int]  # counter → value at the first read (since the last reset)
    deltas: dict[str, int]  # counter → increase over the window; empty when not measured
    rates_per_s: dict[str, float]  # counter → increase per second over the window
    window_s: float | None  # the sampling window; None when not measured
    missing: dict[str, str]
    node_type: str | None = None  # <dev>/node_type: CA (an InfiniBand HCA or RoCE NIC), RNIC (iWARP)
    roce_mtu: int | None = None  # the RDMA MTU its netdev's MTU gives a RoCE port (iboe_get_mtu)
    # the other ACTIVE RoCE ports of this host whose netdev MTU is known, and the MTU most
    # of this host's ACTIVE RoCE ports use (ties: the largest); None without such peers
    mtu_peers: int = 0
    peer_mtu: int | None = None


@dataclass(frozen=True, slots=True)
class RdmaRecord:
    devices: int  # judged: at most MAX_DEVICES
    ports: tuple[RdmaPort, ...]
    window_s: float | None  # the counters' sampling window; None when not measured
    missing: dict[str, str]  # window_s → why the rates were not measured; devices → the cut
    devices_listed: int | None = None  # /sys/class/infiniband's entries, before the cut
    truncated: bool = False  # more devices listed than MAX_DEVICES: the rest not judged


def _port_dir(dev: str, port: str) -> str:
    return f"{ROOT}/{dev}/ports/{port}"


def read_counters(host: Host, dev: str, port: str) -> dict[str, int]:
    """The COUNTERS this port has, each parsed; a counter the driver lacks is left out."""
    out: dict[str, int] = {}
    for counter, folder in COUNTERS.items():
        path = f"{_port_dir(dev, port)}/{folder}/{counter}"
        try:
            text = host.read_text(path)
        except MalformedError:
            raise
        except HostReadError:
            continue  # not every driver has every counter
        value = sysfs.counter(path, text)
        if value is not None:
            out[counter] = value
    return out


def sample(host: Host, ports: list[tuple[str, str]], window_s: float = SAMPLE_S) -> dict:
    """Live: every port's counters, twice, ``window_s`` apart; plain data for measurements.json."""
    before = {f"{d}/{p}": read_counters(host, d, p) for d, p in ports}
    started = time.perf_counter()
    time.sleep(window_s)
    after = {f"{d}/{p}": read_counters(host, d, p) for d, p in ports}
    elapsed = time.perf_counter() - started
    return {"window_s": max(round(elapsed, 3), 0.001),  # checked() holds a window above 0
            "ports": {k: {c: [v, after[k][c]] for c, v in before[k].items() if c in after[k]}
                      for k in before}}


def _bad(where: str, value: Any, expected: str) -> MeasurementError:
    shown = repr(value) if not isinstance(value, (int, str)) or len(str(value)) < 40 else "<too long>"
    return MeasurementError(f"measurement {NAME}: {where} = {shown[:60]}: expected {expected}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= sysfs.MAX_COUNTER


def checked(data: Any) -> tuple[float, dict[str, dict[str, tuple[int, int]]]]:
    """A recorded measurement, each field checked (a recording may be edited by anyone)."""
    if not isinstance(data, dict) or not isinstance(data.get("ports"), dict):
        raise _bad("", data, "an object with window_s and ports")
    window = data.get("window_s")
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window <= MAX_WINDOW_S:
        raise _bad("window_s", window, f"a number of seconds above 0, at most {MAX_WINDOW_S:g}")
    ports: dict[str, dict[str, tuple[int, int]]] = {}
    for key, row in data["ports"].items():
        if not isinstance(row, dict):
            raise _bad(f"ports.{str(key)[:40]}", row, "an object of counter: [before, after]")
        pairs = {}
        for counter, pair in row.items():
            if counter not in COUNTERS:
                continue  # a counter this llm-doctor does not judge
            if not (isinstance(pair, list) and len(pair) == 2 and all(_is_count(v) for v in pair)):
                raise _bad(f"ports.{str(key)[:40]}.{counter}", pair, "[before, after], counts of 0 to 2**64-1")
            pairs[counter] = (pair[0], pair[1])
        ports[str(key)] = pairs
    return float(window), ports


def _gids(host: Host, m: Missing, base: str) -> tuple[int | None, int | None, tuple[int, ...]]:
    """Non-zero GIDs, RoCE v2 ones and their indexes; stops at the table's end."""
    nonzero, v2 = 0, []
    for i in range(MAX_GIDS):
        path = f"{base}/gids/{i}"
        try:
            text = host.read_text(path)
        except MalformedError:
            raise
        except HostReadError as exc:
            if i == 0:
                m.absent("gids", exc.reason.value)
                m.absent("roce_v2_gids", exc.reason.value)
                return None, None, ()
            break
        if sysfs.gid(path, text) == sysfs.ZERO_GID:
            continue
        nonzero += 1
        kind_path = f"{base}/gid_attrs/types/{i}"
        try:
            kind = sysfs.gid_type(kind_path, host.read_text(kind_path))
        except MalformedError:
            raise
        except HostReadError:
            continue  # a GID whose type the kernel did not say (an old kernel without gid_attrs)
        if kind == "RoCE v2":
            v2.append(i)
    return nonzero, len(v2), tuple(v2)


def _netdev_name(host: Host, dev: str, port: str) -> str | None:
    """The interface behind a RoCE port: its GID 0's netdev, else the device's only one, or
    the one whose dev_port is this port's (0-based)."""
    path = f"{_port_dir(dev, port)}/gid_attrs/ndevs/0"
    try:
        return sysfs.name(path, host.read_text(path))
    except MalformedError:
        raise
    except HostReadError:
        pass
    try:
        names = sorted(host.list_dirs(f"{ROOT}/{dev}/device/net"))[:MAX_PORTS]
    except HostReadError:
        return None
    if len(names) == 1:
        return names[0]
    for candidate in names:
        try:
            if int(host.read_text(f"/sys/class/net/{candidate}/dev_port").strip() or -1) == int(port) - 1:
                return candidate
        except (HostReadError, ValueError):
            continue
    return None


def _netdev(host: Host, m: Missing, dev: str, port: str) -> dict[str, Any]:
    ifname = _netdev_name(host, dev, port)
    out: dict[str, Any] = {"netdev": ifname, "netdev_mtu": None, "netdev_speed_mbits": None,
                           "netdev_operstate": None}
    if ifname is None:
        for f in out:
            m.absent(f, "not-found")
        return out
    base = f"/sys/class/net/{ifname}"
    mtu = m.text("netdev_mtu", host, f"{base}/mtu")
    out["netdev_mtu"] = None if mtu is None else sysfs.number(f"{base}/mtu", mtu, 0, 1 << 20)
    speed = m.text("netdev_speed_mbits", host, f"{base}/speed")  # EINVAL while the link is down
    if speed is not None:
        mbps = sysfs.number(f"{base}/speed", speed, -1, 10**7)
        out["netdev_speed_mbits"] = mbps if mbps > 0 else None
        if mbps <= 0:
            m.absent("netdev_speed_mbits", "not-supported")
    state = m.text("netdev_operstate", host, f"{base}/operstate")
    out["netdev_operstate"] = None if state is None else sysfs.name(f"{base}/operstate", state)
    return out


def _coded(m: Missing, host: Host, field: str, path: str) -> tuple[int | None, str | None]:
    text = m.text(field, host, path)
    if text is None:
        m.absent(f"{field}_code", m.reasons[field])
        return None, None
    return sysfs.coded(path, text)


def read_port(host: Host, dev: str, port: str, hca_type: str | None,
              board_id: str | None = None, node_type: str | None = None) -> dict[str, Any]:
    """One port's state, rate, link layer, GIDs and netdev (not its counters), as fields."""
    m, base = Missing(), _port_dir(dev, port)
    state_code, state = _coded(m, host, "state", f"{base}/state")
    phys_code, phys = _coded(m, host, "phys_state", f"{base}/phys_state")
    rate_text = m.text("rate_gbits", host, f"{base}/rate")  # EINVAL on a port with no link
    gbps, width, speed = (None, None, None) if rate_text is None else sysfs.rate(f"{base}/rate", rate_text)
    if rate_text is None:
        m.absent("width", m.reasons["rate_gbits"])
    layer_text = m.text("link_layer", host, f"{base}/link_layer")
    layer = None if layer_text is None else sysfs.name(f"{base}/link_layer", layer_text)
    fields: dict[str, Any] = {
        "name": f"{dev}/{port}", "device": dev, "port": int(port), "hca_type": hca_type,
        "board_id": board_id, "node_type": node_type,
        "state": state, "state_code": state_code, "phys_state": phys, "phys_state_code": phys_code,
        "rate_gbits": gbps, "width": width, "speed": speed, "link_layer": layer,
    }
    if layer == "Ethernet":
        fields["gids"], fields["roce_v2_gids"], fields["roce_v2_indexes"] = _gids(host, m, base)
        fields.update(_netdev(host, m, dev, port))
        mtu = fields["netdev_mtu"]
        fields["roce_mtu"] = None if mtu is None else sysfs.roce_mtu(mtu)
        if mtu is None:
            m.absent("roce_mtu", m.reasons.get("netdev_mtu", "not-found"))
    else:  # InfiniBand: GIDs carry no RoCE type, and an IPoIB netdev is not the data path
        fields.update(gids=None, roce_v2_gids=None, roce_v2_indexes=(), netdev=None, netdev_mtu=None,
                      netdev_speed_mbits=None, netdev_operstate=None, roce_mtu=None)
        for f in ("gids", "roce_v2_gids", "netdev", "netdev_mtu", "netdev_speed_mbits", "netdev_operstate",
                  "roce_mtu"):
            m.absent(f, "not-supported")
    fields["missing"] = m.reasons
    return fields


def _devices(host: Host) -> tuple[list[str], int]:
    """The devices judged (the first MAX_DEVICES by name) and how many the class lists."""
    try:
        names = host.list_dirs(ROOT)
    except HostReadError as exc:
        raise Skip(t("no RDMA device: {path} is {reason} (no InfiniBand or RoCE driver loaded)",
                     path=ROOT, reason=exc.reason.value)) from None
    if not names:
        raise Skip(t("no RDMA device: {path} is empty", path=ROOT))
    return sorted(names)[:MAX_DEVICES], len(names)


def _ports_of(host: Host, dev: str) -> list[str]:
    try:
        names = host.list_dirs(f"{ROOT}/{dev}/ports")
    except HostReadError:
        return []
    return sorted((p for p in names if p.isdigit() and 0 < int(p) < 256), key=int)[:MAX_PORTS]


def _node_type(path: str, text: str) -> str:
    return sysfs.coded(path, text)[1]  # "1: CA", "4: RNIC" (iWARP)


def _kind(host: Host, dev: str) -> tuple[str | None, str | None, str | None]:
    """The device's ``hca_type``, ``board_id`` (the product's PSID: one SKU, one top speed)
    and ``node_type``; None where the driver has none (hfi1 and efa have no hca_type)."""
    out: list[str | None] = []
    for name, parse in (("hca_type", sysfs.name), ("board_id", sysfs.label), ("node_type", _node_type)):
        path = f"{ROOT}/{dev}/{name}"
        try:
            out.append(parse(path, host.read_text(path)))
        except MalformedError:
            raise
        except HostReadError:
            out.append(None)
    return out[0], out[1], out[2]


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> RdmaRecord:
    devices, listed = _devices(host)
    if listed > len(devices):  # a host has a few dozen; more is a recording's or a VF farm's
        missing_devices = {"devices": f"truncated: the first {len(devices)} of {listed} by name"}
    else:
        missing_devices = {}
    found = [(dev, port, _kind(host, dev)) for dev in devices for port in _ports_of(host, dev)]
    rows = [read_port(host, dev, port, *kind) for dev, port, kind in found]
    missing: dict[str, str] = dict(missing_devices)
    window: float | None = None
    measured: dict[str, dict[str, tuple[int, int]]] = {}
    try:
        data = host.measure(NAME, lambda: sample(host, [(d, p) for d, p, _ in found], SAMPLE_S))
    except MeasurementError as exc:
        if not str(exc).startswith(f"{NAME}: not in "):
            raise  # the capture's own sample failed: the replay says so, as the live scan did
        # a recording without the measurement: the counters as the files hold them, no rates
        missing["window_s"] = "not-found"
    else:
        window, measured = checked(data)  # a recording's, edited by anyone: checked
    ports = []
    for (dev, port, _), row in zip(found, rows):
        pairs = measured.get(row["name"])
        if pairs is None:
            counters = read_counters(host, dev, port) if window is None else {}
            deltas: dict[str, int] = {}
        else:
            counters = {c: b for c, (b, _) in pairs.items()}
            deltas = {c: a - b for c, (b, a) in pairs.items() if a >= b}  # a reset is no rate
        if window is None:
            row["missing"]["window_s"] = missing["window_s"]
        peers = _peers(rows, row)
        mtu_peers, peer_mtu = _mtu_peers(rows, row)
        ports.append(RdmaPort(
            **{k: v for k, v in row.items() if k != "missing"},
            peers=len(peers), peer_rate_gbits=max((p["rate_gbits"] for p in peers), default=None),
            card_peers=sum(1 for p in peers if p["device"] != dev and p["port"] == row["port"]),
            counters=counters, deltas=deltas,
            rates_per_s={c: round(d / window, 6) for c, d in deltas.items()} if window else {},
            window_s=window, missing=row["missing"], mtu_peers=mtu_peers, peer_mtu=peer_mtu))
    return RdmaRecord(devices=len(devices), ports=tuple(ports), window_s=window, missing=missing,
                      devices_listed=listed, truncated=listed > len(devices))


def summary(record: RdmaRecord) -> str:
    """One line: ports, how many ACTIVE, their rates."""
    active = [p for p in record.ports if p.state == "ACTIVE"]
    rates: dict[str, int] = {}
    for p in active:
        if p.rate_gbits is not None:
            key = f"{p.rate_gbits:g} Gb/s {p.link_layer or '?'}"
            rates[key] = rates.get(key, 0) + 1
    shown = ", ".join(f"{n}x {k}" for k, n in sorted(rates.items()))
    if record.truncated:  # the cut said, not hidden: the rest of the devices were not read
        return t("{ports} RDMA ports on the first {devices} of {listed} devices (the rest not read), "
                 "{active} ACTIVE{rates}", ports=len(record.ports), devices=record.devices,
                 listed=record.devices_listed, active=len(active), rates=f": {shown}" if shown else "")
    return t("{ports} RDMA ports on {devices} devices, {active} ACTIVE{rates}",
             ports=len(record.ports), devices=record.devices, active=len(active),
             rates=f": {shown}" if shown else "")
