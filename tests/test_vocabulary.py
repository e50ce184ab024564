"""The vocabulary and the playbooks agree with ../shared/domain.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probes.registry import by_name
from doctor.rules.loader import builtin_files, load_rules
from doctor.vocabulary import CAUSES, SYMPTOMS
from playbooks import path_of

DOMAIN = Path(__file__).resolve().parents[2] / "shared" / "domain.md"
SECTIONS = ["## What it means", "## Confirm", "## Fix", "## Verify", "## Symptoms"]


def domain_tables():
    text = DOMAIN.read_text()
    symptoms_part = text[text.index("## 1."):text.index("## 2.")]
    causes_part = text[text.index("## 2."):text.index("## 3.")]
    symptoms = re.findall(r"^\| `([a-z0-9-]+)` \|", symptoms_part, re.M)
    causes = {}
    for line in causes_part.splitlines():
        m = re.match(r"^\| `([a-z0-9-]+)` \|[^|]*\| (.*) \|$", line)
        if m:
            rows = [r.strip() for r in m.group(2).split(",")]
            causes[m.group(1)] = [r for r in rows if r in symptoms]
    return symptoms, causes


@pytest.mark.skipif(not DOMAIN.is_file(), reason="../shared/domain.md is not beside this checkout")
def test_vocabulary_matches_domain_md():
    symptoms, causes = domain_tables()
    assert list(SYMPTOMS) == symptoms
    assert list(CAUSES) == list(causes)


@pytest.mark.parametrize("cause", CAUSES)
def test_every_cause_has_a_complete_playbook(cause):
    path = path_of(cause)
    assert path.is_file(), f"no playbook {path}"
    text = path.read_text()
    assert text.startswith("# ")
    positions = [text.find(s + "\n") for s in SECTIONS]
    assert all(p > 0 for p in positions), f"{path}: sections {SECTIONS} required"
    assert positions == sorted(positions), f"{path}: sections out of order"
    listed = re.findall(r"^- `([a-z0-9-]+)`", text[positions[-1]:], re.M)
    if DOMAIN.is_file():
        assert listed == domain_tables()[1][cause] or (not listed and cause == "endpoint-unauthenticated")
    assert set(listed) <= set(SYMPTOMS)


def test_every_rule_points_at_a_playbook_and_the_rows_of_its_cause():
    for rule in load_rules(builtin_files(), by_name()):
        assert path_of(rule.playbook).is_file(), rule.id
        if DOMAIN.is_file():
            assert set(rule.symptoms) <= set(domain_tables()[1][rule.cause]), rule.id
