"""The path a cross-host collective uses from this host: the socket interface its ranks bind to
and that interface's line rate, or the InfiniBand ports NCCL would use and their rates.

- The interface: ``GLOO_SOCKET_IFNAME`` (gloo) / ``NCCL_SOCKET_IFNAME`` (NCCL) where the user
  set one (read as the library reads it: see ``pick``), else the interface that holds the address this host's kernel picks to
  reach the master (a UDP socket's ``connect``, which sends nothing). Manual equivalent:
  ``ip route get <master>`` and ``ip -d addr``.
- Its state from ``ip -json -details addr show`` (iproute2): operstate, MTU, addresses, and
  the link kind (``veth``, ``bridge``, ``bond``...).
- Its line rate from ``/sys/class/net/<if>/speed`` (Mb/s, the ethtool figure). A virtual link
  reports none or a constant of its driver: veth says 10000 on kernels >= 4.19 whatever it
  carries, tun 10; for those the rate is None with the reason, and the kernel measures the
  ceiling with a plain TCP stream instead. A bond reports the sum of its members, a VLAN its
  parent's: both are kept.
- InfiniBand (NCCL on GPUs): the ACTIVE ports of ``/sys/class/infiniband/*/ports/*/rate``
  ("200 Gb/sec (4X HDR)"), summed: NIC rate x NICs. No root needed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import subprocess
from typing import Any

IP_TIMEOUT_S = 5.0
MAX_IP_JSON = 4 << 20
# link kinds whose ethtool speed is a driver constant, not a line (veth: 10000 since 4.19)
NO_LINE_RATE = {"veth", "bridge", "tun", "tap", "dummy", "vxlan", "geneve", "wireguard",
                "ipip", "gre", "sit", "macvtap", "ifb", "nlmon", "vrf"}
_IB_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def address_towards(master_addr: str, port: int) -> tuple[str | None, str]:
    """(the local address this host would use to reach the master, "") or (None, why)."""
    try:
        infos = socket.getaddrinfo(master_addr, port, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        return None, f"cannot resolve the master {master_addr!r}: {exc}"
    why = "no address"
    for family, _, _, _, where in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.connect(where)  # UDP: picks the route and source address, sends nothing
                return str(s.getsockname()[0]).split("%")[0], ""
            except OSError as exc:
                why = f"no route from here to the master {master_addr} ({exc.strerror or exc})"
    return None, why


def links() -> tuple[list[dict[str, Any]], str]:
    """``ip -json -details addr show``: (interfaces, "") or ([], why)."""
    try:
        done = subprocess.run(["ip", "-json", "-details", "addr", "show"], capture_output=True,
                              timeout=IP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"ip -json addr: {getattr(exc, 'strerror', None) or exc}"
    try:
        data = json.loads(done.stdout[:MAX_IP_JSON])
    except ValueError:
        return [], "ip -json addr: not JSON (iproute2 older than 4.14?)"
    if not isinstance(data, list):
        return [], "ip -json addr: not a list"
    return [d for d in data if isinstance(d, dict) and isinstance(d.get("ifname"), str)], ""


def _addresses(link: dict[str, Any]) -> list[str]:
    infos = link.get("addr_info")
    return [str(a["local"]) for a in infos if isinstance(a, dict) and "local" in a] \
        if isinstance(infos, list) else []


def holding(address: str, found: list[dict[str, Any]]) -> str | None:
    """The interface that holds ``address``, None where none does."""
    try:
        want = ipaddress.ip_address(address)
    except ValueError:
        return None
    for link in found:
        for local in _addresses(link):
            try:
                if ipaddress.ip_address(local) == want:
                    return str(link["ifname"])
            except ValueError:
                continue
    return None


def pick(value: str, names: list[str], route: str | None, prefix: bool) -> tuple[str | None, str]:
    """The interface a ``*_SOCKET_IFNAME`` value makes the library bind, as the library reads
    it: gloo takes exact names; NCCL matches prefixes (``eth`` is eth0, eth1...) unless a
    name starts with ``=``, and ``^a,b`` excludes instead. Of what it allows, the one that
    routes to the master (``route``) where allowed, else the first. (name, "") or (None, why);
    a name that matches nothing comes back as given, for ``interface`` to say so."""
    text = value.strip()
    exclude = text.startswith("^")
    items = [i.strip() for i in text.lstrip("^").split(",") if i.strip()][:32]

    def hit(name: str, item: str) -> bool:
        exact = item.startswith("=") or not prefix
        return name == item.lstrip("=") if exact else name.startswith(item)

    if exclude:
        allowed = [n for n in names if not any(hit(n, i) for i in items)]
    else:
        allowed = [n for i in items for n in names if hit(n, i)]
    if route in allowed:
        return route, ""
    if allowed:
        return allowed[0], ""
    if exclude or not items:
        return None, (f"excludes every interface here ({', '.join(sorted(names)[:16]) or 'none'})"
                      if exclude else "names no interface")
    return items[0].lstrip("="), ""


def speed_mbps(name: str, sysfs: str = "/sys/class/net") -> tuple[int | None, str]:
    """(Mb/s, "") from sysfs, or (None, why): -1 or unreadable (a down link raises EINVAL)."""
    if "/" in name or name in ("", ".", ".."):
        return None, f"{name!r} is no interface name"
    try:
        with open(os.path.join(sysfs, name, "speed")) as f:
            text = f.read(64).strip()
    except OSError as exc:
        return None, f"{sysfs}/{name}/speed: {exc.strerror or exc} (the driver reports none)"
    if not text.lstrip("-").isdigit() or int(text) <= 0:
        return None, f"{sysfs}/{name}/speed is {text[:12]!r}: the driver reports no speed"
    return int(text), ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def interface(name: str, found: list[dict[str, Any]], sysfs: str = "/sys/class/net") -> dict[str, Any]:
    """What a rank needs to know of one interface: whether it is usable and its line rate."""
    link = next((d for d in found if d.get("ifname") == name), None)
    if link is None:
        names = ", ".join(sorted(str(d["ifname"]) for d in found)[:16]) or "none"
        return {"name": name, "exists": False, "problem": f"no interface {name} here "
                f"(interfaces: {names})"}
    info = _dict(link.get("linkinfo"))
    kind = str(info.get("info_kind") or ("loopback" if name == "lo" else "physical"))
    flags: list[Any] = link["flags"] if isinstance(link.get("flags"), list) else []
    state = str(link.get("operstate", "UNKNOWN"))
    out: dict[str, Any] = {"name": name, "exists": True, "kind": kind, "operstate": state,
                           "mtu": link.get("mtu") if isinstance(link.get("mtu"), int) else None,
                           "addresses": _addresses(link)[:8], "problem": None}
    if "UP" not in flags or state == "DOWN" or "NO-CARRIER" in flags:
        out["problem"] = (f"interface {name} is down (operstate {state}"
                          f"{', no carrier' if 'NO-CARRIER' in flags else ''})")
    elif not out["addresses"]:
        out["problem"] = f"interface {name} has no address: nothing can reach it"
    speed, why = speed_mbps(name, sysfs)
    if kind in NO_LINE_RATE or kind == "loopback":
        why = f"{kind} has no line rate" + (f" (its driver reports a constant {speed} Mb/s)"
                                             if speed else "")
        speed = None
    out["speed_mbps"], out["speed_missing"] = speed, (why or None)
    return out


def ib_ports(root: str = "/sys/class/infiniband") -> list[dict[str, Any]]:
    """The ACTIVE InfiniBand/RoCE ports and their rates in Gb/s (NCCL's NET/IB path)."""
    out: list[dict[str, Any]] = []
    try:
        devices = sorted(os.listdir(root))[:64]
    except OSError:
        return out
    for dev in devices:
        ports = os.path.join(root, dev, "ports")
        try:
            numbers = sorted(os.listdir(ports))[:16]
        except OSError:
            continue
        for port in numbers:
            try:
                with open(os.path.join(ports, port, "state")) as f:
                    state = f.read(64)
                with open(os.path.join(ports, port, "rate")) as f:
                    rate = _IB_RATE.match(f.read(128))
            except OSError:
                continue
            if "ACTIVE" in state and rate:
                out.append({"device": dev[:64], "port": port[:8], "gbit": float(rate.group(1))})
    return out
