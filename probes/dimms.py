"""The DRAM ceiling: DIMM speed from ``dmidecode -t memory``, channels from its locators or EDAC.

dmidecode needs root (it reads the SMBIOS tables); without it, or in a VM that reports no
speed, the ceiling is None with the reason. Where the DIMM locators name no channel (Dell
"A1", HPE "PROC 1 DIMM 1"), the channels come from the EDAC driver's
``/sys/devices/system/edac/mc/mc*/dimm*/dimm_location`` ("channel 1 slot 0"), world-readable. Ceiling in decimal GB/s =
channels × configured MT/s × 8 bytes (a 64-bit channel; a DDR5 DIMM's two 32-bit
subchannels add up to the same 8 bytes). Manual equivalent: ``sudo dmidecode -t memory``, ``grep . /sys/devices/system/edac/mc/mc*/dimm*/dimm_location``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.host import Host, HostReadError


@dataclass(frozen=True, slots=True)
class DimmCeiling:
    dimms_populated: int | None
    channels: int | None  # distinct channels among populated DIMMs; None if locators don't say
    rated_mts: int | None  # slowest populated DIMM's rated speed ("Speed:")
    configured_mts: int | None  # slowest configured speed ("Configured Memory Speed:")
    ceiling_gbps: float | None
    reason: str | None  # why the ceiling is None


def _mts(value: str) -> int | None:
    m = re.match(r"(\d+)\s*(MT/s|MHz)", value)
    return int(m.group(1)) if m else None


def parse_dmidecode(text: str) -> list[dict[str, str]]:
    """The populated "Memory Device" blocks of ``dmidecode -t memory`` as dicts."""
    devices, current = [], None
    for line in text.splitlines():
        if line.strip() == "Memory Device":
            current = {}
            devices.append(current)
        elif current is not None and ":" in line and line.startswith("\t"):
            key, _, value = line.strip().partition(":")
            current[key.strip()] = value.strip()
        elif not line.strip():
            current = None
    return [d for d in devices if d.get("Size", "No Module").split()[0].isdigit()]


def _channel_key(dev: dict[str, str]) -> str | None:
    """Which memory channel a DIMM sits in, from its locators; None when they do not say.

    Vendors spell it "P0_Node0_Channel0_Dimm1", "ChannelA-DIMM0", "P1-DIMMA1", "CPU1_DIMM_B2":
    the channel is the Channel field or the letter before the slot number, per socket.
    Dell's "A1".."A12" and HPE's "PROC 1 DIMM 1" name slots, not channels.
    """
    text = f'{dev.get("Bank Locator", "")} {dev.get("Locator", "")}'
    socket = re.search(r"\b(?:P|CPU|Node|NODE)\s*(\d+)", text)
    prefix = socket.group(1) if socket else ""
    channel = re.search(r"Channel\s*([A-Z0-9]+)", text, re.I) or re.search(
        r"DIMM_?([A-Z])\d", text)
    return f"{prefix}/{channel.group(1).upper()}" if channel else None


def edac_channels(host: Host) -> int | None:
    """Distinct (memory controller, channel) pairs holding a DIMM, from EDAC; None if absent."""
    base = "/sys/devices/system/edac/mc"
    try:
        controllers = [m for m in host.list_dirs(base) if re.fullmatch(r"mc\d+", m)]
    except HostReadError:
        return None
    pairs = set()
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
            if channel and size not in ("", "0"):
                pairs.add((mc, channel.group(1)))
    return len(pairs) or None


def read_ceiling(host: Host) -> DimmCeiling:
    try:
        out = host.run(["dmidecode", "-t", "memory"], timeout_s=5.0)
    except HostReadError as exc:
        reason = {"not-found": "dmidecode is not installed (apt-get install dmidecode; run as root)",
                  "no-permission": "dmidecode needs root (sudo)"}.get(exc.reason, f"dmidecode: {exc}")
        return DimmCeiling(None, None, None, None, None, reason)
    if out.rc != 0:
        denied = "ermission" in out.stderr or "/dev/mem" in out.stderr
        reason = "dmidecode needs root (sudo)" if denied else out.stderr.strip()[:120]
        return DimmCeiling(None, None, None, None, None, reason or f"dmidecode exit {out.rc}")
    devices = parse_dmidecode(out.stdout)
    rated = [m for d in devices if (m := _mts(d.get("Speed", "")))]
    configured = [
        m for d in devices
        if (m := _mts(d.get("Configured Memory Speed", d.get("Configured Clock Speed", ""))))
    ]
    if not devices or not configured:
        return DimmCeiling(len(devices) or None, None, min(rated, default=None), None, None,
                           "the firmware reports no DIMM speed (a VM, or SMBIOS incomplete)")
    keys = {_channel_key(d) for d in devices}
    speed = min(configured)
    channels = len(keys) if None not in keys else edac_channels(host)
    if channels is None:
        # Counting each DIMM as a channel would double the ceiling at two DIMMs per
        # channel and raise a false alarm: no ceiling is better than a guessed one.
        return DimmCeiling(len(devices), None, min(rated, default=None), speed, None,
                           "the DIMM locators name no memory channel, and EDAC is not loaded")
    return DimmCeiling(
        dimms_populated=len(devices),
        channels=channels,
        rated_mts=min(rated, default=None),
        configured_mts=speed,
        ceiling_gbps=round(channels * speed * 8 / 1000, 1),
        reason=None,
    )
