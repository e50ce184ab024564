"""What blocks P2P for one GPU pair, each blocker as a sentence naming it (probes/gpu/p2p.py).

NCCL's P2P levels (NCCL's environment documentation, ``NCCL_P2P_LEVEL``): LOC (never), NVL
(NVLink only), PIX, PXB, PHB (through the CPU's host bridge), SYS (across sockets: always);
P2P is used when the pair's path is at or under the level. NVML's NODE (across host bridges
within one NUMA node) is a PHB path to NCCL; an integer level is 0 LOC .. 5 SYS, as NCCL's
older releases took it.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import lazy
from doctor.i18n.text import english_else
from probes.helpers.engine_p2p import CacheVerdict
from probes.helpers.pcie_acs import REDIRECT_BITS, BridgeAcs

NCCL_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
_PATH_RANK = {"PIX": 2, "PXB": 3, "PHB": 4, "NODE": 4, "SYS": 5}


@dataclass(frozen=True, slots=True)
class Functional:
    peer_access_ab: bool | None
    peer_access_ba: bool | None
    copy_ok: bool | None
    error: str | None


@dataclass(frozen=True, slots=True)
class PairFacts:
    a: int
    b: int
    path: str | None  # NV# or PIX..SYS
    nvlink: bool
    p2p_read: str | None
    p2p_write: str | None
    redirecting: tuple[BridgeAcs, ...]  # bridges between the two with ReqRedir or CmpltRedir
    iommu_translating: str | None  # the group type ("DMA-FQ") when either GPU's DMA is translated
    functional: Functional | None
    cache: tuple[CacheVerdict, ...]  # vLLM's verdicts for a->b and b->a
    nccl_p2p_disable: str | None
    nccl_p2p_level: str | None
    custom_all_reduce_disabled: bool = False  # --disable-custom-all-reduce


def _truthy(value: str | None) -> bool:
    """NCCL reads its switches as integers: any non-zero one is on."""
    text = (value or "").strip()
    return text.lstrip("-").isdigit() and int(text) != 0


def level_rank(value: str) -> int | None:
    text = value.strip().upper()
    if text in NCCL_LEVELS:
        return NCCL_LEVELS.index(text)
    return int(text) if text.isdigit() and int(text) < len(NCCL_LEVELS) else None


def describe_functional(f: Functional | None, a: int, b: int) -> str | None:
    if f is None:
        return None
    if f.peer_access_ab is False or f.peer_access_ba is False:
        way = f"{a}->{b}" if f.peer_access_ab is False else f"{b}->{a}"
        return f"no peer access {way}"
    if f.copy_ok is False:
        return f"copy {a}->{b} differs" + (f": {f.error}" if f.error else "")
    if f.copy_ok is None:
        return f"not checked: {f.error}" if f.error else None
    return "ok"


def _en(template: str, **params: object) -> str:
    """A blocker in English, always: the record keeps it as data, and the rules read it by
    its first words (checks/gpu_p2p.toml's by_* marks); ``kind_of`` says it in the current
    language."""
    return template.format_map(params) if params else template


# A blocker's first words → what it is, in words a report translates (the rules' marks read
# the same first words)
_KINDS = (
    ("NCCL_P2P_DISABLE=", lazy("NCCL_P2P_DISABLE set in the engine's environment")),
    ("NCCL_P2P_LEVEL=", lazy("NCCL_P2P_LEVEL in the engine's environment below this path")),
    ("NVML P2P ", lazy("NVML reports P2P unavailable")),
    ("ACS ", lazy("ACS redirect on the bridges between them")),
    ("vLLM's cached verdict", lazy("vLLM's cached P2P verdict disagrees with NVML")),
    ("--disable-custom-all-reduce", lazy("--disable-custom-all-reduce left on the command line")),
    ("torch: ", lazy("the torch P2P check failed")),
)


def kind_of(blocker: str) -> str:
    """A blocker as it reads in the current language: itself in English, else its kind."""
    for prefix, words in _KINDS:
        if blocker.startswith(prefix):
            return english_else(blocker, words)
    return blocker


def blockers_of(f: PairFacts) -> tuple[str, ...]:
    out: list[str] = []
    nvml_ok = f.p2p_read in (None, "ok") and f.p2p_write in (None, "ok")
    across = not f.nvlink and f.path == "SYS"
    if _truthy(f.nccl_p2p_disable) and not across:
        out.append(_en("NCCL_P2P_DISABLE={value} in the engine's environment", value=f.nccl_p2p_disable))
    rank = level_rank(f.nccl_p2p_level) if f.nccl_p2p_level else None
    path_rank = 1 if f.nvlink else _PATH_RANK.get(f.path or "")
    if rank is not None and path_rank is not None and path_rank > rank and not across:
        out.append(_en("NCCL_P2P_LEVEL={value} in the engine's environment: NCCL uses P2P only up to "
                     "{level}, this path is {path}", value=f.nccl_p2p_level,
                     level=NCCL_LEVELS[rank], path=f.path))
    if not f.nvlink and not across:
        bad = ([_en("read {status}", status=f.p2p_read)] if f.p2p_read not in (None, "ok") else []) + (
            [_en("write {status}", status=f.p2p_write)] if f.p2p_write not in (None, "ok") else [])
        if bad:
            out.append(_en("NVML P2P {statuses}", statuses=", ".join(bad)))
        if f.redirecting:
            bits = [n for n in REDIRECT_BITS if any(n in b.enabled for b in f.redirecting)]
            iommu = (_en(" with the IOMMU translating DMA ({group})", group=f.iommu_translating)
                     if f.iommu_translating else "")
            out.append(_en("ACS {bits} on the bridges between them{iommu}",
                         bits=" ".join(n + "+" for n in bits), iommu=iommu))
    if any(not v.p2p for v in f.cache) and nvml_ok and not across:
        out.append(_en("vLLM's cached verdict says no P2P where NVML says ok (vLLM turns its custom "
                     "all-reduce off)"))
    if any(v.p2p for v in f.cache) and not nvml_ok and not f.nvlink:
        status = f.p2p_read if f.p2p_read != "ok" else f.p2p_write
        out.append(_en("vLLM's cached verdict says P2P works where NVML says {status} (its custom "
                     "all-reduce can hang)", status=status))
    if f.custom_all_reduce_disabled and nvml_ok and f.p2p_read == "ok" and not across:
        out.append(_en("--disable-custom-all-reduce on the engine's command line where NVML says P2P "
                     "ok (a leftover: vLLM's custom all-reduce stays off)"))
    functional = describe_functional(f.functional, f.a, f.b)
    if functional and functional != "ok" and not functional.startswith("not checked") and not across:
        out.append(_en("torch: no peer access") if functional.startswith("no peer")
                   else _en("torch: a copy read back differs"))
    return tuple(out)
