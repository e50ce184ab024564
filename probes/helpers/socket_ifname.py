"""Socket interface and address variables judged against the host's interfaces: NCCL's
``NCCL_SOCKET_IFNAME`` list syntax, gloo's exact names, an address variable (``VLLM_HOST_IP``,
``HCCL_IF_IP``). Shared by net.nccl_env and npu.hccl_env.

The list syntax is NCCL's (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html,
NCCL_SOCKET_IFNAME; src/misc/utils.cc ``parseStringList``/``matchIfList``): a comma list of
prefixes, each optionally ``:port``; a leading ``^`` excludes what matches, then a leading
``=`` makes every entry an exact name (``^=docker0``). HCCL documents the same syntax for
``HCCL_SOCKET_IFNAME`` (CANN environment variable reference: prefixes, ``^`` to exclude, ``=``
for exact names).
"""

from __future__ import annotations

import ipaddress

from doctor.i18n import t
from probes.helpers.net_interfaces import Interface, InterfacesRecord

MAX_ENTRIES = 32  # of one list variable


def parse_list(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """NCCL's list syntax: (exclude, exact, [(prefix, port)]) of ``^=eth0,ib:1``."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    entries: list[tuple[str, int | None]] = []
    for part in rest.split(",")[:MAX_ENTRIES]:
        name, _, port = part.strip().partition(":")
        if name:
            entries.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, entries


def selects(value: str, name: str, port: int | None = None) -> bool:
    """Whether NCCL's list ``value`` selects interface or HCA ``name`` (port ``port``)."""
    exclude, exact, entries = parse_list(value)
    hit = any((name == p if exact else name.startswith(p)) and (want is None or port is None or want == port)
              for p, want in entries)
    return hit != exclude


def _socket_check(value: str, chosen: list[Interface]) -> tuple[str | None, str]:
    if not chosen:
        return "no-match", t("no interface here matches")
    shown = ", ".join(f"{i.name} ({'up' if i.up else 'down'})" for i in chosen[:8])
    up = [i for i in chosen if i.up]
    if not up:
        return "down", shown
    if not any(i.addresses for i in up):
        return "no-address", shown
    if not any(i.peer_reachable for i in up):
        return "unroutable", shown
    return None, shown


def check_ifname(variable: str, value: str, record: InterfacesRecord) -> tuple[str | None, str, tuple[str, ...]]:
    """NCCL_SOCKET_IFNAME (NCCL's list) or GLOO_SOCKET_IFNAME (exact names) against the host."""
    if variable == "GLOO_SOCKET_IFNAME":
        names = {n.strip() for n in value.split(",")[:MAX_ENTRIES] if n.strip()}
        chosen = [i for i in record.interfaces if i.name in names]
        if len(chosen) < len(names):  # gloo fails on any name it cannot resolve
            absent = sorted(names - {i.name for i in chosen})
            return "no-match", t("no interface {names} here", names=", ".join(absent)[:200]), tuple(i.name for i in chosen)
    else:
        chosen = [i for i in record.interfaces if selects(value, i.name)]
    problem, detail = _socket_check(value, chosen)
    return problem, detail, tuple(i.name for i in chosen)


def check_default(record: InterfacesRecord) -> tuple[str | None, str, tuple[str, ...]] | None:
    """NCCL_SOCKET_IFNAME unset: NCCL takes the ``ib*`` interfaces that are up with an
    address, else every other one but ``docker*`` and ``lo*`` (src/misc/socket.cc
    ``ncclFindInterfaces``). A container bridge (cni0, virbr0) or a veth in that set can be
    the one its bootstrap picks (NVIDIA/nccl#913): a finding for a group across hosts."""
    usable = [i for i in record.interfaces if i.up and i.addresses]
    chosen = [i for i in usable if i.name.startswith("ib")] or \
        [i for i in usable if not i.name.startswith(("docker", "lo"))]
    wrong = [i for i in chosen if not i.peer_reachable]
    if not wrong:
        return None
    shown = ", ".join(f"{i.name} ({i.why_unreachable})" for i in wrong[:8])
    return "default-unroutable", shown, tuple(i.name for i in chosen)


def check_address(value: str, record: InterfacesRecord) -> tuple[str | None, str, tuple[str, ...]]:
    """VLLM_HOST_IP / Ray's node address: held by an interface that is up and reachable."""
    try:
        wanted = str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return "not-local", t("not an IP address"), ()
    owners = [i for i in record.interfaces if any(a.address == wanted for a in i.addresses)]
    if not owners:
        return "not-local", t("no interface here holds {address}", address=wanted), ()
    owner = owners[0]
    if not owner.up:
        return "down", t("{name} is down", name=owner.name), (owner.name,)
    address = next(a for a in owner.addresses if a.address == wanted)
    if not address.peer_reachable or owner.why_unreachable in ("loopback", "container bridge"):
        why = address.why_not or owner.why_unreachable or ""
        return "unroutable", t("{name}: {why}", name=owner.name, why=why), (owner.name,)
    return None, owner.name, (owner.name,)
