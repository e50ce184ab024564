"""The network family's facts for ``diff``: net.rdma's ports, by ``rdma[<dev>/<port>]``, and
the all-reduce across hosts (net.collective, ``llm-doctor collective``'s saved scan), by
``collective[<backend>/<world>]``: a run of another group size or backend is another fact,
never a delta against this one.

A port's state, trained rate and lanes, link layer and the MTU of the interface behind a
RoCE port are the host's state; its error counters are not (they move every second, and a
reset or a reboot sets them back): the scan's rules judge their rates.
"""

from __future__ import annotations

from typing import Any, Iterator

from doctor.diff.model import CONFIG, Reading
from doctor.diff.noise import BANDWIDTH
from doctor.i18n import lazy, translated

PORT_FACTS = {  # the port's field → what a person reads
    "state": lazy("RDMA port state"),
    "rate_gbits": lazy("RDMA port rate, Gb/s"),
    "width": lazy("RDMA port lanes"),
    "link_layer": lazy("RDMA link layer"),
    "netdev_mtu": lazy("MTU of the interface behind the RoCE port"),
}


COLLECTIVE_MEASURED = {  # measured: held to the bandwidth noise floor
    "busbw_gbps": lazy("all-reduce across hosts, bus bandwidth, GB/s"),
    "ratio": lazy("all-reduce across hosts, busbw over the line"),
}
COLLECTIVE_STATE = {
    "outcome": lazy("all-reduce across hosts, outcome"),
    "interface": lazy("all-reduce across hosts, socket interface"),
    "mtu": lazy("all-reduce across hosts, interface MTU"),
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
    yield from _collective(r.data.get("net.collective"))


def _collective(data: Any) -> Iterator[Reading]:
    if not isinstance(data, dict):
        return
    backend, world = data.get("backend"), data.get("world")
    if not isinstance(backend, str) or not isinstance(world, int) or isinstance(world, bool):
        return  # which group it was is not known: nothing to compare it with
    at = f"collective[{backend[:16]}/{world}]"
    for key, label in COLLECTIVE_STATE.items():
        if key in data:
            yield Reading(f"{at}.{key}", "net", translated(label), _scalar(data[key]), CONFIG,
                          "net.collective")
    for key, label in COLLECTIVE_MEASURED.items():
        if key in data:
            yield Reading(f"{at}.{key}", "net", translated(label), _scalar(data[key]), BANDWIDTH,
                          "net.collective")
