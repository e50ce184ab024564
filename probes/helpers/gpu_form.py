"""Whether a GPU is an add-in card or a module on a baseboard, from the name NVML gives it.

A card (PCIe CEM: an L40S, an H100 PCIe or NVL, a GeForce) can be reseated in its slot by
whoever runs the machine; a module (SXM on an HGX baseboard, a GH200/GB200 superchip on its
board) is mounted, torqued and cabled by the server vendor's procedure, so "reseat the card"
does not apply to it. NVML has no form-factor call, so the name decides, and only where it
can (``None``: not known, say so rather than guess):

* ``SXM`` in the name is a module ("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB");
* ``PCIe``/``PCIE`` or ``NVL`` (the H100 and H200 NVL are PCIe cards) is a card;
* the parts sold only as modules name no form factor: "NVIDIA H100 80GB HBM3" (the SXM5;
  the card is "NVIDIA H100 PCIe"), H800, H200, H20, B200, B300, GH200, GB200, GB300;
* GeForce, Quadro and RTX boards, and the L/T/A10-class data-centre cards, are cards;
* AMD (amd.gpu's market name): the Instinct MI250, MI300 and later are OAM modules (MI300A a
  socketed APU), the MI210, MI100, MI50 and MI25 PCIe cards; Radeon boards are cards.

Sources: NVIDIA's product names as nvidia-smi prints them (the recorded hosts' captures:
"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB
PCIe"), and NVIDIA's datasheets for which parts exist in which form factor.
"""

from __future__ import annotations

import re

MODULE = "module"
CARD = "card"

_CARD_WORDS = re.compile(r"PCI[eE]|\bNVL\b|GeForce|Quadro|\bRTX\b|\bTITAN\b|Radeon")
_MODULE_ONLY = re.compile(r"\b(?:H100|H800|H200|H20|B200|B300|GH200|GB200|GB300"
                          r"|MI250X?|MI300[AX]?|MI308X|MI325X|MI350X|MI355X)\b")
_CARD_ONLY = re.compile(r"\b(?:L4|L20|L40S?|T4|A2|A10G?|A16|A30|A40|P4|P40|P100"
                        r"|MI210|MI100|MI50|MI60|MI25)\b")


def form_factor(name: str | None) -> str | None:
    """``"module"``, ``"card"``, or ``None`` where the name does not say."""
    if not name:
        return None
    text = name[:200]
    if "SXM" in text.upper():
        return MODULE
    if _CARD_WORDS.search(text):
        return CARD
    if _MODULE_ONLY.search(text):
        return MODULE
    if _CARD_ONLY.search(text):
        return CARD
    return None
