"""Strict parsers for the files of ``/sys/class/infiniband/<dev>/ports/<n>/``: net.rdma's reads.

Each file is printed by the kernel (drivers/infiniband/core/sysfs.c): ``state`` and
``phys_state`` as ``"<code>: <NAME>"`` (``4: ACTIVE``, ``5: LinkUp``), ``rate`` as
``"<Gb/s>[.5] Gb/sec (<width>X[ <speed>])"`` (``100 Gb/sec (4X EDR)``, ``10 Gb/sec (4X)``),
a counter as an unsigned decimal (64 bits for ``hw_counters``; ``N/A (no PMA)`` where the
adapter has no performance-management agent, as i40iw does), a GID as eight groups of four
hex digits (``fe80:0000:0000:0000:0a7f:bcff:fe12:45ef``) and a GID's type as ``IB/RoCE v1``
or ``RoCE v2`` (drivers/infiniband/core/cache.c ``gid_type_str``). Anything else is not a
value to reason about: MalformedError naming the file and what was wrong.
"""

from __future__ import annotations

import re

from doctor.seam.host import MalformedError

MAX_COUNTER = 2**64 - 1  # hw_counters are u64; the IB PMA counters are narrower
NO_PMA = "N/A (no PMA)"  # drivers/infiniband/core/sysfs.c: the port has no PMA counters
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
GID_TYPES = ("IB/RoCE v1", "RoCE v2")

# IBTA port states (ib_port_state) and physical states (ib_port_phys_state), as the
# kernel names them; a code the kernel has not named prints as "<code>: <unknown>".
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
               5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}

_CODED = re.compile(r"([0-9]{1,3}): ([A-Za-z_ <>]{1,32})")
_RATE = re.compile(r"([0-9]{1,6})(\.5)? Gb/sec \(([0-9]{1,2})X(?: ([A-Za-z0-9]{1,8}))?\)")
_COUNTER = re.compile(r"[0-9]{1,20}")
_GID = re.compile(r"[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){7}")
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "…")


def coded(path: str, text: str) -> tuple[int, str]:
    """``4: ACTIVE`` → (4, "ACTIVE"): a port's ``state`` or ``phys_state``."""
    value = text.strip()
    m = _CODED.fullmatch(value)
    if m is None:
        raise MalformedError(path, f"expected '<code>: <name>' (4: ACTIVE), got {_shown(value)}")
    return int(m.group(1)), m.group(2).strip()


def rate(path: str, text: str) -> tuple[float, int, str | None]:
    """``100 Gb/sec (4X EDR)`` → (100.0, 4, "EDR"); ``2.5 Gb/sec (1X SDR)`` → (2.5, 1, "SDR")."""
    value = text.strip()
    m = _RATE.fullmatch(value)
    if m is None:
        raise MalformedError(path, f"expected '<n> Gb/sec (<w>X <speed>)', got {_shown(value)}")
    width = int(m.group(3))
    if width == 0:
        raise MalformedError(path, "a link width of 0X")
    return int(m.group(1)) + (0.5 if m.group(2) else 0.0), width, m.group(4)


def counter(path: str, text: str) -> int | None:
    """A counter's value; None where the port has no PMA counters (``N/A (no PMA)``)."""
    value = text.strip()
    if value == NO_PMA:
        return None
    if not _COUNTER.fullmatch(value):
        raise MalformedError(path, f"expected a counter, got {_shown(value)}")
    number = int(value)
    if number > MAX_COUNTER:
        raise MalformedError(path, f"{number} is past a 64-bit counter")
    return number


def gid(path: str, text: str) -> str:
    """A GID, lower-case, as the kernel prints it."""
    value = text.strip()
    if not _GID.fullmatch(value):
        raise MalformedError(path, f"expected a GID (8 groups of 4 hex digits), got {_shown(value)}")
    return value.lower()


def gid_type(path: str, text: str) -> str:
    value = text.strip()
    if value not in GID_TYPES:
        raise MalformedError(path, f"expected a GID type ({' or '.join(GID_TYPES)}), got {_shown(value)}")
    return value


def name(path: str, text: str) -> str:
    """A file holding one name (a link layer, an interface, an HCA type)."""
    value = text.strip()
    if not _NAME.fullmatch(value):
        raise MalformedError(path, f"expected a name, got {_shown(value)}")
    return value


def label(path: str, text: str) -> str:
    """A free-text identifier the driver prints (``board_id``: ``MT_0000000838``, or hfi1's
    ``HPE 100Gb 1-port OP101 QSFP28 x16 PCIe Gen3 with Intel Omni-Path Adapter``): printable
    ASCII, at most 128 characters."""
    value = text.strip()
    if not value or len(value) > 128 or not all(" " <= c <= "~" for c in value):
        raise MalformedError(path, f"expected a board id (printable text), got {_shown(value)}")
    return value


def number(path: str, text: str, low: int, high: int) -> int:
    """A signed decimal within [low, high]: ``/sys/class/net/<if>/speed`` prints -1 unknown."""
    value = text.strip()
    if not re.fullmatch(r"-?[0-9]{1,12}", value):
        raise MalformedError(path, f"expected an integer, got {_shown(value)}")
    result = int(value)
    if not low <= result <= high:
        raise MalformedError(path, f"{result} is outside {low}..{high}")
    return result


# The headers a RoCE packet carries besides its payload, as include/rdma/ib_addr.h
# iboe_get_mtu() subtracts them from the netdev's MTU: GRH 40, UDP 8, BTH 12, XRC 4,
# AtomicETH 28, ICRC 4 bytes. What is left is rounded down to an InfiniBand MTU.
ROCE_HEADER_BYTES = 40 + 8 + 12 + 4 + 28 + 4
IB_MTUS = (4096, 2048, 1024, 512, 256)


def roce_mtu(netdev_mtu: int) -> int | None:
    """The RDMA (active) MTU the kernel gives a RoCE port whose netdev has ``netdev_mtu``
    (iboe_get_mtu): 1500 -> 1024, 4200 or 9000 -> 4096; None below 256 + headers."""
    payload = netdev_mtu - ROCE_HEADER_BYTES
    return next((m for m in IB_MTUS if payload >= m), None)
