"""A GPU's form factor from its NVML name, and the PCIe fix step that follows from it: a card
is reseated by hand, a module on a baseboard is the server vendor's (issue 33's "never advise
a hands-on fix that cannot apply")."""

from __future__ import annotations

import pytest

from doctor.fix.plan import build_plan
from probes.helpers.gpu_form import form_factor
from tests.test_fix_plan import saved


@pytest.mark.parametrize("name, form", [
    ("NVIDIA A100-SXM4-80GB", "module"),  # recorded hosts' captures
    ("NVIDIA H100 80GB HBM3", "module"),
    ("NVIDIA H100 PCIe", "card"),
    ("NVIDIA A100 80GB PCIe", "card"),
    ("NVIDIA L40S", "card"),
    ("Tesla T4", "card"),
    ("NVIDIA GeForce RTX 5090", "card"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "card"),
    ("NVIDIA A10G", "card"),
    ("NVIDIA H100 NVL", "card"),  # the NVL parts are PCIe cards bridged in pairs
    ("NVIDIA H200 NVL", "card"),
    ("NVIDIA H200", "module"),
    ("NVIDIA GH200 480GB", "module"),
    ("NVIDIA GB200", "module"),
    ("Tesla V100-SXM2-16GB", "module"),
    ("AMD Instinct MI300X", "module"),  # amd.gpu's market names (tests/fixtures/amd)
    ("AMD Instinct MI308X", "module"),
    ("AMD Instinct MI210", "card"),
    ("AMD Radeon RX 6750 XT", "card"),
    ("NVIDIA GB10", None),  # DGX Spark's: no slot and no module to say
    ("Some Future Board", None),
    ("", None),
    (None, None),
])
def test_the_name_says_card_module_or_nothing(name, form):
    assert form_factor(name) == form


def _plan(evidence: dict):
    finding = {"rule": "pcie-link-degraded", "cause": "pcie-link-degraded", "key": "0",
               "severity": "warning", "title": "t", "evidence": {"gpu": 0, "on_vm": False, **evidence}}
    report = {"host": {"hostname": "h"}, "findings": [finding],
              "probes": [{"name": "host.cpu", "status": "ok", "data": {"virtual_machine": False}}]}
    return build_plan(saved(report), "saved scan x", {})


def test_a_card_is_reseated_and_a_module_goes_to_the_vendor():
    (card,) = _plan({"form_factor": "card"}).steps
    assert "reseat the card" in card.manual[0]
    (module,) = _plan({"form_factor": "module"}).steps
    assert card.kind == module.kind
    assert not any("reseat the card" in item for item in module.manual)
    assert "not reseated by hand" in module.manual[1] and "server vendor" in module.manual[1]
    # a scan saved before the field existed (or a name that does not say) keeps the card's steps
    (unknown,) = _plan({}).steps
    assert unknown.manual == card.manual


def test_an_mi300x_with_a_narrow_link_is_a_module_for_the_vendor():
    """amd.gpu's records carry the field the rule's evidence reads (each_also): the recorded
    MI300X with a busy x8 link fires pcie-link-degraded, and its fix step is no reseat."""
    from doctor.model import Level, ScanOptions
    from doctor.scan import scan
    from doctor.seam.recorded import RecordedHost
    from probes.registry import by_name
    from tests.builtin_rules import builtin_rules
    from tests.conftest import FIXTURE_HOSTS

    report = scan(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-pcie-x8"), ScanOptions(level=Level.QUICK),
                  [by_name()[n] for n in ("host.cpu", "amd.gpu")], builtin_rules())
    found = [f for f in report.findings if f.rule == "pcie-link-degraded"]
    assert found and all(f.evidence["form_factor"] == "module" for f in found)
