"""Network interfaces, their state and addresses, and whether a peer on another host can
reach them: net.interfaces' record, read here so that net.nccl_env reads it too when
net.interfaces did not run (``interfaces_of``).

NCCL, gloo, Ray and vLLM pick the interface their ranks talk over; a multi-host group needs
one that is up and holds an address a peer can reach. Never ``lo``, never a container bridge
(docker0, cni0, virbr0: their subnet lives inside this host), never a link-local address
(169.254.0.0/16, fe80::/10: not routed off the link, and the same on every host).

Sources (no privilege): ``/sys/class/net`` (the links: a target under ``devices/virtual/net``
is a software interface, one under ``devices/pci…`` a NIC), and per interface
``operstate``, ``carrier``, ``flags`` (IFF_UP, 0x1), ``mtu``, ``speed`` (Mb/s; the kernel
refuses it for a link that is down or virtual), ``type`` (ARPHRD: 1 Ethernet, 32
InfiniBand, 772 loopback) and ``bridge/bridge_id`` (present on a bridge). Addresses (and the driver's kind: veth, bridge) from
``ip -j -d addr show`` (iproute2), or where it is not installed from ``/proc/net/fib_trie``
with ``/proc/net/route`` (the IPv4 addresses marked ``/32 host LOCAL``, each given to the
interface of the connected route that holds it) and ``/proc/net/if_inet6`` (IPv6, per
interface). Manual equivalent: ``ip -br addr; ip -d link; cat /sys/class/net/*/operstate``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field

from doctor.inputs import Inputs
from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

NAME = "net.interfaces"
MAX_INTERFACES = 256  # a host with more (thousands of veths on a busy node) keeps the first
MAX_ADDRESSES = 32  # of one interface
ARPHRD = {1: "ether", 32: "infiniband", 772: "loopback", 65534: "none"}
# The host side of a container or VM network: docker's default bridge and its user bridges
# (br-<12 hex>), Kubernetes' cni0/cbr0, libvirt's virbr<N>, podman, LXC/LXD.
CONTAINER_BRIDGE = re.compile(r"^(docker\d*|br-[0-9a-f]{12}|cni\d*|cbr\d*|virbr\d+|podman\d+|lxcbr\d+|lxdbr\d+)$")
NAME_OK = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")  # IFNAMSIZ - 1; no path characters


@dataclass(frozen=True, slots=True)
class Address:
    address: str  # "10.0.0.5", "fe80::1"
    family: str  # "ipv4" | "ipv6"
    prefix_len: int | None
    peer_reachable: bool  # not loopback, not link-local (a container bridge's are judged by kind)
    why_not: str | None  # why a peer cannot reach it: "loopback", "link-local"


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    kind: str  # loopback, bridge, container-bridge, veth, virtual, physical
    type: str | None  # ARPHRD: ether, infiniband, loopback; the number as text when unknown
    operstate: str | None  # up, down, unknown, dormant, lowerlayerdown, notpresent
    admin_up: bool | None  # IFF_UP in flags: `ip link set X up`
    carrier: bool | None  # None: the kernel does not say (an interface that is down)
    up: bool  # operstate up, or unknown with admin up and carrier (lo, tun)
    mtu: int | None
    speed_mbits: int | None  # megabits/s as the kernel says; None: down, virtual, or unknown (-1)
    addresses: tuple[Address, ...]
    # up, not loopback or a container bridge, with an address a peer on another host can reach
    peer_reachable: bool
    why_unreachable: str | None  # "down", "loopback", "container bridge", "no address", "link-local only"
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InterfacesRecord:
    interfaces: tuple[Interface, ...]
    reachable: tuple[str, ...]  # names of the interfaces a peer on another host can reach
    address_source: str | None  # "ip -j -d addr show" or "/proc/net/fib_trie"; None: no address read
    missing: dict[str, str] = field(default_factory=dict)


def _read(host: Host, path: str, missing: dict[str, str], key: str) -> str | None:
    try:
        return host.read_text(path).strip()
    except HostReadError as exc:
        missing[key] = reason_of(exc)
        return None


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def kind_of(name: str, target: str, type_code: int | None, is_bridge: bool,
            link_kind: str | None = None) -> str:
    """The interface's kind from its name, sysfs link target, ARPHRD type and the driver
    kind iproute2 reports (``ip -d``: linkinfo.info_kind "veth", "bridge", "vlan"...)."""
    if type_code == 772 or name == "lo":
        return "loopback"
    if is_bridge or link_kind == "bridge" or CONTAINER_BRIDGE.match(name):
        return "container-bridge" if CONTAINER_BRIDGE.match(name) else "bridge"
    if link_kind == "veth" or ("/devices/virtual/" in target and name.startswith("veth")):
        return "veth"
    if "/devices/virtual/" in target:
        return "virtual"
    return "physical"


def address_of(text: str, prefix_len: int | None) -> Address | None:
    """One address as the record keeps it; None for text that is not an address."""
    try:
        ip = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None
    why = "loopback" if ip.is_loopback else "link-local" if ip.is_link_local else None
    family = "ipv4" if ip.version == 4 else "ipv6"
    return Address(str(ip), family, prefix_len, why is None, why)


def _from_ip_json(stdout: str) -> tuple[dict[str, list[Address]], dict[str, str]]:
    """(addresses, driver kind) of each interface in ``ip -j -d addr show``'s output."""
    data = json.loads(stdout)
    found: dict[str, list[Address]] = {}
    kinds: dict[str, str] = {}
    if not isinstance(data, list):
        raise ValueError("not a list")
    for entry in data[:MAX_INTERFACES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("ifname"), str):
            continue
        info_kind = entry["linkinfo"].get("info_kind") if isinstance(entry.get("linkinfo"), dict) else None
        if isinstance(info_kind, str) and info_kind.isalnum() and len(info_kind) <= 16:
            kinds[entry["ifname"]] = info_kind
        infos: list = entry["addr_info"] if isinstance(entry.get("addr_info"), list) else []
        for info in infos[:MAX_ADDRESSES]:
            if isinstance(info, dict) and isinstance(info.get("local"), str):
                prefix = info.get("prefixlen")
                fits = isinstance(prefix, int) and not isinstance(prefix, bool) and 0 <= prefix <= 128
                addr = address_of(info["local"][:64], prefix if fits else None)
                kept = found.get(entry["ifname"], [])
                if addr is not None and len(kept) < MAX_ADDRESSES and addr.address not in (a.address for a in kept):
                    found[entry["ifname"]] = [*kept, addr]
    return found, kinds


def fib_trie_locals(text: str) -> list[str]:
    """The host's own IPv4 addresses: the ``/32 host LOCAL`` leaves of /proc/net/fib_trie."""
    found, last = [], None
    for line in text.splitlines()[:200_000]:
        stripped = line.strip()
        if stripped.startswith("|--"):
            last = stripped[3:].strip()
        elif stripped.startswith("/32 host LOCAL") and last and last not in found:
            found.append(last)
    return found


def routes(text: str) -> list[tuple[str, int, int]]:
    """(interface, network, mask) of each route in /proc/net/route (little-endian hex)."""
    out = []
    for line in text.splitlines()[1:10_000]:
        parts = line.split()
        if len(parts) >= 8:
            dest, mask = _int(parts[1], 16), _int(parts[7], 16)
            if dest is not None and mask is not None:
                out.append((parts[0], int.from_bytes(dest.to_bytes(4, "little"), "big"),
                            int.from_bytes(mask.to_bytes(4, "little"), "big")))
    return out


def _from_proc(host: Host, missing: dict[str, str]) -> dict[str, list[Address]]:
    found: dict[str, list[Address]] = {}
    trie = _read(host, "/proc/net/fib_trie", missing, "ipv4")
    table = routes(_read(host, "/proc/net/route", missing, "ipv4_routes") or "")
    for local in fib_trie_locals(trie or "")[:MAX_INTERFACES * 4]:
        addr = address_of(local, None)
        if addr is None:
            continue
        value = int(ipaddress.IPv4Address(addr.address))
        # the most specific connected route that holds the address names its interface
        owners = sorted((r for r in table if r[2] and value & r[2] == r[1]), key=lambda r: -r[2])
        name = "lo" if addr.why_not == "loopback" else owners[0][0] if owners else None
        if name is not None:
            prefix = bin(owners[0][2]).count("1") if owners and name != "lo" else None
            found.setdefault(name, []).append(Address(addr.address, "ipv4", prefix, addr.peer_reachable, addr.why_not))
    for line in (_read(host, "/proc/net/if_inet6", missing, "ipv6") or "").splitlines()[:4096]:
        parts = line.split()  # 32 hex digits, ifindex, prefix length, scope, flags, name
        if len(parts) == 6 and len(parts[0]) == 32:
            text = ":".join(parts[0][i:i + 4] for i in range(0, 32, 4))
            addr = address_of(text, _int(parts[2], 16))
            if addr is not None:
                found.setdefault(parts[5], []).append(addr)
    return found


IP_ARGV = ("ip", "-j", "-d", "addr", "show")
IP_SOURCE = "ip -j -d addr show"


def addresses(host: Host) -> tuple[dict[str, list[Address]], dict[str, str], str | None, dict[str, str]]:
    """Every interface's addresses and driver kind, from ``ip -j -d addr show`` or else
    /proc (no kinds); the source; what could not be read."""
    missing: dict[str, str] = {}
    try:
        out = host.run(IP_ARGV, timeout_s=5.0)
        if out.rc == 0:
            found, kinds = _from_ip_json(out.stdout)
            return found, kinds, IP_SOURCE, missing
        missing["ip"] = f"{IP_SOURCE}: exit {out.rc}"
    except HostReadError as exc:
        missing["ip"] = reason_of(exc)
    except ValueError:
        missing["ip"] = f"{IP_SOURCE}: not the JSON list iproute2 writes"
    found = _from_proc(host, missing)
    return found, {}, ("/proc/net/fib_trie" if "ipv4" not in missing else None), missing


def _judge(kind: str, up: bool, addrs: tuple[Address, ...]) -> str | None:
    """Why a peer on another host cannot reach the interface; None when it can."""
    if kind == "loopback":
        return "loopback"
    if kind == "container-bridge":
        return "container bridge"
    if not up:
        return "down"
    if not addrs:
        return "no address"
    if not any(a.peer_reachable for a in addrs):
        return "link-local only"
    return None


def interface(host: Host, name: str, target: str, addrs: list[Address],
              link_kind: str | None = None) -> Interface:
    base = f"/sys/class/net/{name}"
    missing: dict[str, str] = {}
    operstate = _read(host, f"{base}/operstate", missing, "operstate")
    flags = _int(_read(host, f"{base}/flags", missing, "flags"), 16)
    carrier_text = _read(host, f"{base}/carrier", {}, "carrier")  # EINVAL while down
    type_code = _int(_read(host, f"{base}/type", missing, "type"))
    mtu = _int(_read(host, f"{base}/mtu", missing, "mtu"))
    speed = _int(_read(host, f"{base}/speed", {}, "speed"))
    try:
        host.read_text(f"{base}/bridge/bridge_id")
        is_bridge = True
    except HostReadError:
        is_bridge = False
    admin_up = bool(flags & 1) if flags is not None else None
    carrier = carrier_text == "1" if carrier_text in ("0", "1") else None
    up = operstate == "up" or (operstate == "unknown" and admin_up is True and carrier is not False)
    kind = kind_of(name, target, type_code, is_bridge, link_kind)
    kept = tuple(addrs[:MAX_ADDRESSES])
    why = _judge(kind, up, kept)
    return Interface(name, kind, ARPHRD.get(type_code, str(type_code)) if type_code is not None else None,
                     operstate, admin_up, carrier, up, mtu if mtu and mtu > 0 else None,
                     speed if speed is not None and speed > 0 else None, kept, why is None, why, missing)


def read_interfaces(host: Host) -> InterfacesRecord:
    """Every interface in /sys/class/net with its addresses and reachability; HostReadError
    when /sys/class/net cannot be listed."""
    links = host.list_links("/sys/class/net")
    names = sorted(n for n in links if NAME_OK.match(n))[:MAX_INTERFACES]
    found, kinds, source, missing = addresses(host)
    items = tuple(interface(host, n, links[n], found.get(n, []), kinds.get(n)) for n in names)
    return InterfacesRecord(items, tuple(i.name for i in items if i.peer_reachable), source, missing)


def interfaces_of(host: Host, inputs: Inputs) -> InterfacesRecord | None:
    """net.interfaces' record from ``inputs``, else read here; None when /sys/class/net
    cannot be read."""
    record = inputs.get(NAME, InterfacesRecord)
    if record is not None:
        return record
    try:
        return host.memo("net interfaces", lambda: read_interfaces(host))
    except HostReadError:
        return None
