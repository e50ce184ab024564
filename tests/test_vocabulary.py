"""The vocabulary and the playbooks agree with ../shared/domain.md.

domain.md lists the domain's causes; llm-doctor's own (doctor.vocabulary.OWN_CAUSES, such
as engine-unreachable) follow them in CAUSES, and a playbook names their symptom rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probes.registry import by_name
from doctor.rules.loader import builtin_files, load_rules
from doctor.vocabulary import CAUSES, FIRST_CAUSES, OWN_CAUSES, SYMPTOMS
from playbooks import path_of

# ../shared/domain.md beside the checkout; a worktree sits deeper (/work/wt/<branch>), so the
# nearest ancestor that has one.
DOMAIN = next((d / "shared" / "domain.md" for d in Path(__file__).resolve().parents[1:]
               if (d / "shared" / "domain.md").is_file()),
              Path(__file__).resolve().parents[2] / "shared" / "domain.md")
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
    assert causes_match(CAUSES, OWN_CAUSES, list(causes)) == []


def causes_match(ids, own, domain) -> list[str]:
    """What is wrong with the cause ids ``ids`` against domain.md's ``domain``: every one of
    domain's, in its order, first; then only the ids of ``own``, each once."""
    problems = []
    if list(ids[:len(domain)]) != domain:
        problems.append(f"CAUSES must start with domain.md's causes in their order: {domain}")
    for extra in ids[len(domain):]:
        if extra not in own:
            problems.append(f"{extra!r} is not in domain.md nor in OWN_CAUSES")
    if len(set(ids)) != len(ids):
        problems.append("an id is listed twice")
    problems += [f"OWN_CAUSES' {c!r} is not in CAUSES" for c in own if c not in ids]
    problems += [f"OWN_CAUSES' {c!r} is in domain.md: drop it from OWN_CAUSES"
                 for c in own if c in domain]
    return problems


def test_an_unlisted_or_misspelt_cause_id_is_refused():
    domain = ["fd-limit-low", "swap-active"]
    assert causes_match(("fd-limit-low", "swap-active", "engine-unreachable"),
                        ("engine-unreachable",), domain) == []
    assert causes_match(("fd-limit-low", "swap-active", "engine-unreachabel"),
                        ("engine-unreachable",), domain) != []  # a typo
    assert causes_match(("fd-limit-low", "swap-active", "engine-unreachable"), (), domain) != []
    assert causes_match(("swap-active", "fd-limit-low"), (), domain) != []  # out of order
    assert causes_match(("fd-limit-low",), (), domain) != []  # one missing


def test_first_causes_are_known():
    assert set(FIRST_CAUSES) <= set(CAUSES)


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
    if cause in OWN_CAUSES:
        assert listed, f"{path}: llm-doctor's own cause names its symptom rows"
    elif DOMAIN.is_file():
        assert listed == domain_tables()[1][cause] or (not listed and cause == "endpoint-unauthenticated")
    assert set(listed) <= set(SYMPTOMS)


def own_rows(cause: str) -> list[str]:
    """The symptom rows an own cause's playbook lists (domain.md has none for it)."""
    text = path_of(cause).read_text()
    return re.findall(r"^- `([a-z0-9-]+)`", text[text.find("## Symptoms\n"):], re.M)


def test_every_rule_points_at_a_playbook_and_the_rows_of_its_cause():
    for rule in load_rules(builtin_files(), by_name()):
        assert path_of(rule.playbook).is_file(), rule.id
        if rule.cause in OWN_CAUSES:
            assert set(rule.symptoms) <= set(own_rows(rule.cause)), rule.id
        elif DOMAIN.is_file():
            assert set(rule.symptoms) <= set(domain_tables()[1][rule.cause]), rule.id
