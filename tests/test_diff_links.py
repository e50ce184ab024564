"""The diff's tables: every cause a fact links to is a cause id of the vocabulary, every
measured kind has its floor in docs/diff.md, and the floors do what noise.py says."""

from __future__ import annotations

import pytest

from doctor.diff import links, noise
from doctor.vocabulary import CAUSES
from tests.conftest import REPO


def test_every_linked_cause_is_in_the_vocabulary():
    linked = {c for causes, _ in links.LINKS.values() for c in causes}
    assert linked - set(CAUSES) == set()
    assert {"pcie-link-degraded", "cuda-graphs-disabled", "gpu-p2p-blocked", "swap-active"} <= linked


def test_the_docs_state_every_default_floor():
    text = (REPO / "docs" / "diff.md").read_text()
    for kind, (floor, _) in noise.FLOORS.items():
        assert f"| `{kind}` |" in text, kind
        if kind not in noise.ABSOLUTE:
            assert f"{floor:.0%}" in text, kind


@pytest.mark.parametrize("samples,percentile,floor", [
    ((400, 400), 0.5, 0.10), ((25, 100), 0.5, 0.4), ((50, 50), 0.99, 1.0), ((19, 40), 0.95, 1.0),
    ((None, None), 0.5, 1.0)])
def test_a_latency_floor_comes_from_its_sample_count(samples, percentile, floor):
    assert noise.floor_of(noise.LATENCY, samples=samples, percentile=percentile) == pytest.approx(floor)


def test_a_reported_spread_replaces_the_default():
    assert noise.floor_of(noise.BANDWIDTH) == 0.10
    assert noise.floor_of(noise.BANDWIDTH, spreads=(0.03, None)) == pytest.approx(0.06)
    assert noise.floor_of(noise.BANDWIDTH, spreads=(0.001, 0.002)) == noise.MIN_FLOOR
    assert not noise.outside(noise.MIB, 0, 900, 0.0) and noise.outside(noise.MIB, 0, 2048, 0.0)


def test_a_direction_needs_a_known_good_way():
    assert links.HIGHER.direction(16, 8) == "worse"
    assert links.OFF.direction(None, True) == "worse" and links.OFF.direction(True, None) == "better"
    assert links.Good("is", "performance").direction("performance", "powersave") == "worse"
    assert links.link("gpu[GPU-x].pcie.width")[0][0] == "pcie-link-degraded"
    assert links.link("host.unknown") == ((), None)
