"""The built recorded hosts are what their builders write, every time: rebuilding them into a
temporary directory gives the tree the session's build placed in tests/fixtures/hosts/ (byte for
byte under fs/ and commands/, equal data in host.toml and measurements.json), so a digest of
the sources names one tree (tests/fixtures/build_all_hosts.py). Covers the hosts of
tests/fixtures/builders/ only; tests/test_fixture_hosts_build.py covers the rest of the build.
"""

from __future__ import annotations

import json

import pytest

from doctor._toml import tomllib
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_all_hosts import PLAIN, tree
from tests.fixtures.build_hosts import build
from tests.fixtures.builders import BUILDERS

def test_every_builder_names_a_committed_host():
    assert set(BUILDERS) <= {p.name for p in FIXTURE_HOSTS.iterdir()}
    assert len(BUILDERS) == 4


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_rebuilding_a_host_gives_the_committed_tree(tmp_path, name):
    assert build([name], tmp_path, quiet=True) == 0
    built, committed = tree(tmp_path / name), tree(FIXTURE_HOSTS / name)
    assert sorted(built) == sorted(committed), "files differ: the build is not deterministic"
    for rel, (kind, data) in built.items():
        if rel == "host.toml":
            assert tomllib.loads(data.decode()) == tomllib.loads(committed[rel][1].decode())
        elif rel.endswith(".json") and "/" not in rel:
            assert json.loads(data) == json.loads(committed[rel][1]), rel
        else:
            assert (kind, data) == committed[rel], rel
    for plain in PLAIN:
        assert (FIXTURE_HOSTS / name / plain).is_file()
