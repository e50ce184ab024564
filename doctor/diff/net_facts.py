"""The network family's facts for ``diff``: net.rdma's ports, by ``rdma[<dev>/<port>]``.

A port's state, trained rate and lanes, link layer and the MTU of the interface behind a
RoCE port are the host's state; its error counters are not (they move every second, and a
reset or a reboot sets them back): the scan's rules judge their rates.
"""

from __future__ import annotations

from typing import Any, Iterator

from doctor.diff.model import CONFIG, Reading
from doctor.i18n import lazy, translated

PORT_FACTS = {  # the port's field → what a person reads
    "state": lazy("RDMA port state"),
    "rate_gbits": lazy("RDMA port rate, Gb/s"),
    "width": lazy("RDMA port lanes"),
    "link_layer": lazy("RDMA link layer"),
    "netdev_mtu": lazy("MTU of the interface behind the RoCE port"),
}


def _scalar(value: Any) -> Any:
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def net_facts(r: Any) -> Iterator[Reading]:
    """``r``: doctor.diff.facts.Records (its ``rows``), one side's records."""
    for port in r.rows("net.rdma", "ports"):
        name = port.get("name")
        if not isinstance(name, str) or not name:
            continue
        for key, label in PORT_FACTS.items():
            if key in port:
                yield Reading(f"rdma[{name}].{key}", "net", translated(label), _scalar(port[key]),
                              CONFIG, "net.rdma")
