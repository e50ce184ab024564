"""The DRAM ceiling: DIMM speed from ``dmidecode -t memory``, channels from its locators or EDAC.

dmidecode needs root (it reads the SMBIOS tables); without it, or in a VM that reports no
speed, the ceiling is None with the reason. Where the DIMM locators name no channel (Dell
"A1", HPE "PROC 1 DIMM 1"), the channels come from the EDAC driver's
``/sys/devices/system/edac/mc/mc*/dimm*/dimm_location`` ("channel 1 slot 0"), world-readable.
Ceiling in decimal GB/s = channels × configured MT/s × 8 bytes (a 64-bit channel; a DDR5
DIMM's two 32-bit subchannels add up to the same 8 bytes).

Two ceilings: what the installed DIMMs can give (populated channels), and what the platform
can give with one DIMM in every channel its slots belong to, at the same speed. dmidecode
lists empty slots too ("Size: No Module Installed"), and EDAC lists them with size 0, so a
board with half its channels empty shows as such instead of reading as a healthy fraction of
a halved ceiling. Manual equivalent: ``sudo dmidecode -t memory``,
``grep . /sys/devices/system/edac/mc/mc*/dimm*/{dimm_location,size}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from doctor.i18n import t


@dataclass(frozen=True, slots=True)
class DimmCeiling:
    dimms_populated: int | None
    channels: int | None  # distinct channels among populated DIMMs; None if locators don't say
    rated_mts: int | None  # slowest populated DIMM's rated speed ("Speed:")
    configured_mts: int | None  # slowest configured speed ("Configured Memory Speed:")
    ceiling_gbps: float | None  # the installed DIMMs': channels × configured MT/s × 8 B
    reason: str | None  # why the ceiling is None
    platform_channels: int | None = None  # channels of all slots, empty ones included
    # One name per empty channel: its first slot's locator ("P0 CHANNEL G", "CPU1_DIMM_E1"),
    # or "mc0 channel 3" from EDAC.
    empty_channels: tuple[str, ...] = ()
    platform_ceiling_gbps: float | None = None  # platform_channels × configured MT/s × 8 B


def _mts(value: str) -> int | None:
    m = re.match(r"(\d+)\s*(MT/s|MHz)", value)
    return int(m.group(1)) if m else None


def parse_dmidecode(text: str) -> list[dict[str, str]]:
    """The populated "Memory Device" blocks of ``dmidecode -t memory`` as dicts."""
    return [d for d in parse_slots(text) if _populated(d)]


def _populated(dev: dict[str, str]) -> bool:
    # "Size: 32 GB" / "32768 MB"; an empty slot says "No Module Installed" (or "Not Installed").
    return dev.get("Size", "No Module").split()[0].isdigit()


def parse_slots(text: str) -> list[dict[str, str]]:
    """Every "Memory Device" block of ``dmidecode -t memory`` as a dict, empty slots included."""
    devices: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.strip() == "Memory Device":
            current = {}
            devices.append(current)
        elif current is not None and ":" in line and line.startswith("\t"):
            key, _, value = line.strip().partition(":")
            current[key.strip()] = value.strip()
        elif not line.strip():
            current = None
    return devices


def _channel_key(dev: dict[str, str]) -> str | None:
    """Which memory channel a DIMM sits in, from its locators; None when they do not say.

    Vendors spell it "P0_Node0_Channel0_Dimm1", "ChannelA-DIMM0", "P1-DIMMA1", "CPU1_DIMM_B2":
    the channel is the Channel field or the letter before the slot number, per socket.
    Dell's "A1".."A12" and HPE's "PROC 1 DIMM 1" name slots, not channels.
    """
    text = f'{dev.get("Bank Locator", "")} {dev.get("Locator", "")}'
    socket = re.search(r"\b(?:P|CPU|Node|NODE)\s*(\d+)", text)
    prefix = socket.group(1) if socket else ""
    channel = re.search(r"Channel\s*([A-Z0-9]+)", text, re.I)
    if channel:
        return f"{prefix}/channel {channel.group(1).upper()}"
    letter = re.search(r"DIMM_?([A-Z])\d", text)
    return f"{prefix}/slot letter {letter.group(1)}" if letter else None


def _scheme(key: str) -> tuple[bool, str]:
    """How a key was read: (a socket was named, "channel" or "slot letter")."""
    prefix, _, rest = key.partition("/")
    return prefix != "", rest.rsplit(" ", 1)[0]


def edac_channels(host: Host) -> tuple[set[str], set[str]] | None:
    """(channels holding a DIMM, all channels listed) as "mcN channel C", from EDAC.

    None when EDAC is absent or lists no channel. A driver that lists only populated slots
    makes both sets equal: empty channels then go unseen, never invented.
    """
    base = "/sys/devices/system/edac/mc"
    try:
        controllers = [m for m in host.list_dirs(base) if re.fullmatch(r"mc\d+", m)]
    except HostReadError:
        return None
    populated: set[str] = set()
    listed: set[str] = set()
    for mc in controllers:
        for dimm in host.list_dirs(f"{base}/{mc}"):
            if not re.fullmatch(r"(dimm|rank)\d+", dimm):
                continue
            try:
                location = host.read_text(f"{base}/{mc}/{dimm}/dimm_location")
                size = host.read_text(f"{base}/{mc}/{dimm}/size").strip()
            except HostReadError:
                continue
            channel = re.search(r"channel\s+(\d+)", location)
            if not channel:
                continue
            listed.add(f"{mc} channel {channel.group(1)}")
            if size not in ("", "0"):
                populated.add(f"{mc} channel {channel.group(1)}")
    return (populated, listed) if populated else None


def _channels(host: Host, slots: list[dict[str, str]]) -> tuple[set[str], dict[str, str]] | None:
    """(populated channel keys, {every channel key: its name}) from the locators, else EDAC.

    An empty slot adds a channel only when its locators name one the way the populated
    DIMMs' do: a firmware that spells empty slots differently must not invent channels.
    """
    populated = {_channel_key(d) for d in slots if _populated(d)}
    if None not in populated:
        schemes = {_scheme(key) for key in populated if key is not None}
        names: dict[str, str] = {}
        for dev in slots:
            key = _channel_key(dev)
            if key is not None and (key in populated or _scheme(key) in schemes):
                names.setdefault(key, dev.get("Locator", key))
        return populated, names  # type: ignore[return-value]
    edac = edac_channels(host)
    if edac is None:
        return None
    populated_edac, listed = edac
    return populated_edac, {key: key for key in listed | populated_edac}


def read_ceiling(host: Host) -> DimmCeiling:
    """The installed and the platform DIMM ceilings, from dmidecode (root) and EDAC."""
    try:
        out = host.run(["dmidecode", "-t", "memory"], timeout_s=5.0)
    except HostReadError as exc:
        reason = {"not-found": t("dmidecode is not installed (apt-get install dmidecode; run as root)"),
                  "no-permission": t("dmidecode needs root (sudo)")}.get(exc.reason, f"dmidecode: {exc}")
        return DimmCeiling(None, None, None, None, None, reason)
    if out.rc != 0:
        denied = "ermission" in out.stderr or "/dev/mem" in out.stderr
        reason = t("dmidecode needs root (sudo)") if denied else out.stderr.strip()[:120]
        return DimmCeiling(None, None, None, None, None,
                           reason or t("dmidecode exit {rc}", rc=out.rc))
    slots = parse_slots(out.stdout)
    devices = [d for d in slots if _populated(d)]
    rated = [m for d in devices if (m := _mts(d.get("Speed", "")))]
    configured = [
        m for d in devices
        if (m := _mts(d.get("Configured Memory Speed", d.get("Configured Clock Speed", ""))))
    ]
    if not devices or not configured:
        return DimmCeiling(len(devices) or None, None, min(rated, default=None), None, None,
                           t("the firmware reports no DIMM speed (a VM, or SMBIOS incomplete)"))
    speed = min(configured)
    channels = _channels(host, slots)
    if channels is None:
        # Counting each DIMM as a channel would double the ceiling at two DIMMs per
        # channel and raise a false alarm: no ceiling is better than a guessed one.
        return DimmCeiling(len(devices), None, min(rated, default=None), speed, None,
                           t("the DIMM locators name no memory channel, and EDAC is not loaded"))
    populated, names = channels
    empty = tuple(sorted(names[key] for key in names if key not in populated))
    return DimmCeiling(
        dimms_populated=len(devices),
        channels=len(populated),
        rated_mts=min(rated, default=None),
        configured_mts=speed,
        ceiling_gbps=round(len(populated) * speed * 8 / 1000, 1),
        reason=None,
        platform_channels=len(names),
        empty_channels=empty,
        platform_ceiling_gbps=round(len(names) * speed * 8 / 1000, 1),
    )
