"""A GPU's PCIe link as NVML and sysfs tell it: trained, capable, and the slot's own capability.

Source: NVML ``nvmlDeviceGetCurrPcieLinkGeneration/Width``, ``GetMaxPcieLinkGeneration``
(the most this GPU and its slot together allow), ``GetGpuMaxPcieLinkGeneration`` (the
GPU's own), ``GetMaxPcieLinkWidth``, ``GetPcieReplayCounter``; the slot's own capability from
sysfs: the upstream port (the parent of ``/sys/bus/pci/devices/<bdf>``) ``max_link_speed`` and
``max_link_width``. gpu.pcie reads it during a copy (probes/gpu/pcie.py says why);
gpu.collective reads it at rest. No root needed. Manual equivalent: ``nvidia-smi -q -d PCIE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from doctor.i18n import lazy
from probes.helpers.gpu_common import Reader, reason_of
from probes.helpers.gpu_form import form_factor
from probes.helpers.virtualization import NVML_GUEST_MODES
from probes.helpers.link_ceilings import link_ceiling_gbps

# sysfs max_link_speed ("16.0 GT/s PCIe"; "16 GT/s" before kernel 5.1) -> generation
GT_PER_S = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
NO_PORT = lazy("no port above the GPU: it sits on a root bus (a VM's passthrough)")


@dataclass(frozen=True, slots=True)
class GpuLink:
    index: int
    gen_current: int | None  # nvmlDeviceGetCurrPcieLinkGeneration, at rest
    width_current: int | None  # nvmlDeviceGetCurrPcieLinkWidth, at rest
    gen_max: int | None  # nvmlDeviceGetMaxPcieLinkGeneration: GPU and slot together
    gen_gpu_max: int | None  # nvmlDeviceGetGpuMaxPcieLinkGeneration: the GPU alone
    width_max: int | None  # nvmlDeviceGetMaxPcieLinkWidth (the GPU's)
    slot_gen_max: int | None  # the upstream port's max_link_speed, as a generation
    slot_width_max: int | None  # the upstream port's max_link_width: an x8 slot stays x8
    replay_count: int | None  # nvmlDeviceGetPcieReplayCounter (link-level retries)
    under_load: bool  # gen/width_loaded were read during a host-to-device copy
    gen_loaded: int | None  # highest generation seen during the copy
    width_loaded: int | None  # lowest width seen during the copy
    slot_limited: bool  # the slot, not the GPU, caps the link (generation or width)
    width_short: bool  # trained narrower than both the GPU and its slot allow
    gen_low_under_load: bool  # below gen_max while a transfer ran
    ceiling_trained_gbps: float | None  # one direction, at the generation/width seen in use
    ceiling_capable_gbps: float | None  # one direction, gen_max x the width GPU and slot allow
    missing: dict[str, str]
    slot_known: bool = True  # the slot's width was read (or an upstream port is there to bound it)
    on_vm: bool | None = None  # a virtual machine: no hands-on fix applies
    copy_gbps: float | None = None  # the host-to-device copy the link was read during
    form_factor: str | None = None  # "card", "module" (SXM, superchip) or None: from the name


def _gbps_of(data: dict, key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int_of(data: dict, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _device_link(host: Host, bdf: str) -> str:
    """Where /sys/bus/pci/devices/<bdf> leads: the link itself, else the directory's listing
    of links (how a recording keeps the PCI bus, docs/recorded-host.md)."""
    try:
        return host.read_link(f"/sys/bus/pci/devices/{bdf}")
    except HostReadError:
        target = host.list_links("/sys/bus/pci/devices").get(bdf)
        if target is None:
            raise
        return target


def slot_of(host: Host, r: Reader, bus_id: str | None) -> tuple[int | None, int | None, bool]:
    """(generation, width) the GPU's upstream port (its slot) is capable of, from sysfs, and
    whether there is a port at all (False: on a root bus, or its link unreadable)."""
    if not bus_id:
        return None, None, False
    bdf = bus_id.lower()[-12:]  # NVML "00000000:18:00.0" -> sysfs "0000:18:00.0"
    try:
        parent = _device_link(host, bdf).rstrip("/").split("/")[-2]
    except (HostReadError, IndexError) as exc:
        reason = reason_of(exc) if isinstance(exc, HostReadError) else "failed"
        r.missing["slot_gen_max"] = r.missing["slot_width_max"] = reason
        return None, None, False
    if parent.startswith("pci"):  # on the root complex itself: no port of its own to read
        r.missing["slot_gen_max"] = r.missing["slot_width_max"] = NO_PORT
        return None, None, False
    base = f"/sys/bus/pci/devices/{parent}"
    try:
        speed = host.read_text(f"{base}/max_link_speed").split()
        width = host.read_text(f"{base}/max_link_width").strip()
    except HostReadError as exc:
        r.missing["slot_gen_max"] = reason_of(exc)
        return None, None, True
    try:
        gen = GT_PER_S.get(float(speed[0])) if speed else None
    except ValueError:
        gen = None
    return gen, int(width) if width.isdigit() else None, True


def _on_vm(r: Reader, index: int, host_vm: bool | None) -> bool | None:
    """The GPU passed through to a VM (or a vGPU guest) says so itself; else the host's signals.
    A board without the call (most GeForce cards) leaves it to the host's."""
    nvml = Reader(r.host)
    mode = nvml.integer("on_vm", "nvmlDeviceGetVirtualizationMode", index)
    if mode in NVML_GUEST_MODES:
        return True
    if host_vm is None and "on_vm" in nvml.missing:
        r.missing["on_vm"] = nvml.missing["on_vm"]
    return host_vm


def read_link(host: Host, index: int, load: dict | None, host_vm: bool | None = None) -> GpuLink:
    r = Reader(host)
    pci = r.mapping("slot_gen_max", "nvmlDeviceGetPciInfo", index)
    slot_gen, slot_width, has_port = slot_of(host, r, r.item("slot_gen_max", pci, "busId", str))
    on_vm = _on_vm(r, index, host_vm)
    # a VM's virtual port says nothing of the physical slot; no port: nothing bounds the width
    slot_known = (slot_width is not None or has_port) and not on_vm
    gen = r.integer("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", index)
    width = r.integer("width_current", "nvmlDeviceGetCurrPcieLinkWidth", index)
    gen_max = r.integer("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", index)
    gen_gpu_max = r.integer("gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", index)
    width_max = r.integer("width_max", "nvmlDeviceGetMaxPcieLinkWidth", index)
    gen_loaded = _int_of(load, "gen_max_seen") if load else None
    width_loaded = _int_of(load, "width_min_seen") if load else None
    widths = [w for w in (width, width_loaded) if w] if slot_known else []
    # the widest the link can train: the GPU's width, unless its slot is narrower
    capable_width = min(slot_width, width_max) if slot_width and width_max else width_max
    in_use_gen = gen_loaded or gen
    in_use_width = width_loaded or width
    return GpuLink(
        index=index, gen_current=gen, width_current=width, gen_max=gen_max,
        gen_gpu_max=gen_gpu_max, width_max=width_max, slot_gen_max=slot_gen,
        slot_width_max=slot_width,
        replay_count=r.integer("replay_count", "nvmlDeviceGetPcieReplayCounter", index),
        under_load=gen_loaded is not None,
        gen_loaded=gen_loaded, width_loaded=width_loaded,
        slot_limited=bool((gen_max and gen_gpu_max and gen_max < gen_gpu_max)
                          or (slot_width and width_max and slot_width < width_max)),
        width_short=bool(capable_width and widths and min(widths) < capable_width),
        gen_low_under_load=bool(gen_loaded and gen_max and gen_loaded < gen_max),
        ceiling_trained_gbps=link_ceiling_gbps(in_use_gen, in_use_width),
        ceiling_capable_gbps=link_ceiling_gbps(gen_max, capable_width),
        missing=r.missing,
        slot_known=slot_known, on_vm=on_vm,
        copy_gbps=_gbps_of(load, "copy_gbps") if load else None,
        form_factor=form_factor(Reader(host).text("name", "nvmlDeviceGetName", index)),
    )
