"""npu.network: each Ascend NPU's own network port (RoCE on the 910 families, the port HCCL
sends its collectives between hosts over): link state, net health and address.

Source: ``hccn_tool -i <id> -link -g`` (``link status: UP`` / ``DOWN``), ``-net_health -g``
(``net health status: Success``; the other words hccn_tool knows: Socket fail, Receive
timeout, Unreachable, Time exceeded, Fault, Init, Thread error, Detect ip set, Unknown) and
``-ip -g`` (``ipaddr:`` / ``netmask:``), for each chip npu.devices lists. The id is the chip's
Phy-ID where npu-smi prints one (an A3 module has two chips, each with its port), else its NPU
ID: what Huawei's guides pass to ``-i`` ("device_id is the NPU ID ... npu-smi info") and what
mind-cluster's device plugin passes (the physical id); on a 910B the two are the same number,
which is assumed, not verified on hardware (docs/ascend.md). Needs the driver's group or root.
Manual equivalent: ``for i in 0 1 2 3 4 5 6 7; do hccn_tool -i $i -link -g; hccn_tool -i $i
-net_health -g; done``. Net health reads ``Init`` until a detection address is set
(``hccn_tool -i N -netdetect -s address ...``): not a fault.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError, MalformedError
from probes.helpers.npu_read import CommandFailed, hccn, overview
from probes.helpers.npu_smi import TableError, hccn_value

VENDOR = "huawei"
NAME = "npu.devices"
MAX_PORTS = 64


@dataclass(frozen=True, slots=True)
class NpuPort:
    vendor: str
    device: int  # the id hccn_tool -i was given
    npu_id: int
    chip_id: int | None
    link: str | None  # "UP" or "DOWN" as hccn_tool prints it
    link_reason: str | None  # why link is None: hccn_tool's refusal, or an answer not read
    net_health: str | None  # "Success", "Fault", "Socket failed", "Init", ...
    net_health_reason: str | None
    address: str | None  # ipaddr: an IPv4 address (None: none configured, or not read)
    netmask: str | None
    address_reason: str | None  # "Get ipconf failed, because no ip was preset there!", ...


@dataclass(frozen=True, slots=True)
class NpuNetworkRecord:
    vendor: str
    ports: tuple[NpuPort, ...]


def _answer(host: Host, device: int, query: str) -> tuple[str | None, str | None]:
    """hccn_tool's answer to ``-i <device> <query> -g``, or why there is none."""
    try:
        return hccn(host, device, query, "-g"), None
    except (CommandFailed, HostReadError) as exc:
        return None, str(exc)[:200]


def _ask(host: Host, device: int, query: str, key: str) -> tuple[str | None, str | None]:
    text, why = _answer(host, device, query)
    if text is None:
        return None, why
    value = hccn_value(text, key)
    if value is None:
        return None, text.strip().splitlines()[0][:120] if text.strip() else t("empty answer")
    return value, None


def _address(host: Host, device: int) -> tuple[str | None, str | None, str | None]:
    text, why = _answer(host, device, "-ip")
    address = hccn_value(text, "ipaddr") if text is not None else None
    if address is None:
        # "Get ipconf failed, because no ip was preset there!": no address configured
        return None, None, why or (text or "").strip()[:120] or t("empty answer")
    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        return None, None, t("not an IP address: {value}", value=address[:40])
    return address, hccn_value(text or "", "netmask"), None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuNetworkRecord:
    try:
        chips = [(c.phy_id if c.phy_id is not None else c.npu_id, c.npu_id, c.chip_id)
                 for c in overview(host).chips]
    except (CommandFailed, TableError) as exc:
        raise MalformedError("npu-smi info", str(exc)) from exc
    if not chips:
        raise Skip(t("npu-smi lists no Ascend chip"))
    ports = []
    for device, npu, chip in chips[:MAX_PORTS]:
        link, link_why = _ask(host, device, "-link", "link status")
        health, health_why = _ask(host, device, "-net_health", "net health status")
        address, netmask, address_why = _address(host, device)
        ports.append(NpuPort(VENDOR, device, npu, chip, link, link_why, health, health_why,
                             address, netmask, address_why))
    return NpuNetworkRecord(VENDOR, tuple(ports))


def summary(record: NpuNetworkRecord) -> str:
    up = sum(p.link == "UP" for p in record.ports)
    healthy = sum(p.net_health == "Success" for p in record.ports)
    return t("{n} NPU ports: {up} link up, {healthy} net health Success",
             n=len(record.ports), up=up, healthy=healthy)
