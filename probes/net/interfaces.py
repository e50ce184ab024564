"""net.interfaces: each network interface, its state, MTU, speed and addresses, and whether a
peer on another host can reach it (never lo, a container bridge or a link-local address).

What it reads and how: probes/helpers/net_interfaces.py (``/sys/class/net/<if>/*``, ``ip -j
addr show`` or ``/proc/net/{fib_trie,route,if_inet6}``; no privilege). Manual equivalent:
``ip -br addr; ip -d link; cat /sys/class/net/*/operstate``.
"""

from __future__ import annotations

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of
from probes.helpers.net_interfaces import InterfacesRecord, read_interfaces


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> InterfacesRecord:
    """Every interface in /sys/class/net with its addresses and reachability."""
    try:
        return read_interfaces(host)
    except HostReadError as exc:
        raise Skip(t("/sys/class/net cannot be read ({reason}): no network interfaces to judge",
                     reason=reason_of(exc))) from None


def summary(record: InterfacesRecord) -> str:
    if not record.interfaces:
        return t("no network interface")
    parts = []
    for i in record.interfaces:
        shown = ", ".join(a.address for a in i.addresses[:2]) or t("no IP address")
        parts.append(t("{name} ({kind}, up, {addresses})", name=i.name, kind=i.kind, addresses=shown)
                     if i.up else
                     t("{name} ({kind}, down, {addresses})", name=i.name, kind=i.kind, addresses=shown))
    reach = ", ".join(record.reachable) or t("none")
    return t("{interfaces}; reachable from other hosts: {reachable}", interfaces="; ".join(parts[:12]),
             reachable=reach)
