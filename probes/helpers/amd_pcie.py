"""An AMD GPU's PCIe link judged as gpu.pcie judges NVIDIA's (checks/gpu.toml
pcie-link-degraded reads both through each_also): the fields that rule reads, from what
amd.gpu read through AMD SMI and the slot's own capability in sysfs.

AMD GPUs lower their link at rest, the width as well as the speed on Radeon cards (amdgpu's
``pp_dpm_pcie`` levels pair a speed with a width, ``0: 2.5GT/s, x1``), and llm-doctor runs no
copy on them. So the generation and the width are judged only when the GPU was busy at the
read (its GFX engine at BUSY_PCT or more, or its power at the cap: the probe's ``work_seen``),
when the link stands at the level its work asks for; ``under_load`` says so. Replays are
judged at any time. Whether an MI300X narrows its link at rest is not known without one.
Source: ``amdsmi_get_pcie_info`` (via amd.gpu), ``/sys/bus/pci/devices/<upstream
port>/max_link_{speed,width}`` (probes/helpers/pcie_link.py's slot_of). Manual equivalent:
``amd-smi metric --pcie``, ``sudo lspci -vv -s <bdf> | grep -e LnkCap -e LnkSta``.
"""

from __future__ import annotations

from typing import Any

from doctor.seam.host import Host
from probes.helpers.gpu_common import Reader
from probes.helpers.gpu_form import form_factor
from probes.helpers.link_ceilings import link_ceiling_gbps
from probes.helpers.pcie_link import slot_of


def link_fields(host: Host, bus_id: str | None, link: dict[str, Any], busy: bool,
                on_vm: bool | None, missing: dict[str, str], name: str | None = None) -> dict[str, Any]:
    """gpu.pcie's judged fields for an AMD GPU: ``link`` holds amd.gpu's gen_current,
    width_current, gen_max and width_max; ``missing`` gets the slot's reasons; ``name``, the
    market name, says card or module (probes/helpers/gpu_form.py)."""
    slots = Reader(host)  # slot_of notes why the slot was not read in a reader's missing
    slot_gen, slot_width, has_port = slot_of(host, slots, bus_id)
    missing.update(slots.missing)
    slot_known = (slot_width is not None or has_port) and not on_vm
    gen, width = link["gen_current"], link["width_current"]
    gen_max, width_max = link["gen_max"], link["width_max"]
    capable_width = min(slot_width, width_max) if slot_width and width_max else width_max
    # the generation the link can reach: the GPU's, unless its slot's is lower (judged only
    # where the slot's is known: a Gen5 card in a Gen4 slot is slot-limited, not degraded)
    capable_gen = min(slot_gen, gen_max) if slot_gen and gen_max else None
    return {
        "slot_width_max": slot_width, "slot_known": slot_known, "on_vm": on_vm, "under_load": busy,
        # read while the GPU worked: the link in use, as gpu.pcie's copy reads it
        "gen_loaded": gen if busy else None, "width_loaded": width if busy else None,
        "width_short": bool(busy and slot_known and capable_width and width and width < capable_width),
        "gen_low_under_load": bool(busy and slot_known and capable_gen and gen and gen < capable_gen),
        "ceiling_trained_gbps": link_ceiling_gbps(gen, width),
        "ceiling_capable_gbps": link_ceiling_gbps(capable_gen or gen_max, capable_width),
        "form_factor": form_factor(name),
    }
