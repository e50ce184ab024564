"""Conformance: every registry entry is complete, and every probe returns a frozen record."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from doctor.model import Level
from probes.registry import PROBES


def test_every_probe_is_complete():
    names = [spec.name for spec in PROBES]
    assert len(names) == len(set(names))
    for spec in PROBES:
        assert re.fullmatch(r"(host|gpu|engine|net|amd|npu)\.[a-z_]+", spec.name), spec.name
        assert spec.description and "\n" not in spec.description
        assert spec.reads
        assert 0 < spec.timeout_s <= 600
        assert isinstance(spec.level, Level)
        assert spec.run.__doc__ is None or spec.run.__module__
        module = __import__(spec.run.__module__, fromlist=["_"])
        assert module.__doc__ and len(module.__doc__) > 80, f"{spec.name}: say what it reads"


def test_every_probe_returns_a_frozen_slotted_record():
    for spec in PROBES:
        record = typing.get_type_hints(spec.run)["return"]
        assert dataclasses.is_dataclass(record), spec.name
        assert record.__dataclass_params__.frozen, spec.name
        assert hasattr(record, "__slots__"), spec.name


@pytest.mark.slow
def test_quick_probes_do_not_import_torch():
    import subprocess
    import sys

    code = ("import sys\nfrom probes.registry import PROBES\nfrom doctor.seam.live import LiveHost\n"
            "from doctor.model import ScanOptions, Level\nfrom doctor.runner import run_probes\n"
            "run_probes(PROBES, LiveHost(), ScanOptions(level=Level.QUICK))\n"
            "print('torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.slow
def test_probes_fields_lists_what_rules_can_name(cli):
    result = cli("probes", "--fields")
    assert result.returncode == 0
    assert "host.limits.processes[].nofile_soft: int | None" in result.stdout
    assert "host.memory_bandwidth.triad_gbps: float" in result.stdout


def test_every_need_is_a_probe_listed_before_it_at_its_level_or_below():
    """The runner starts a probe once what it needs has finished: a need must exist, come
    earlier in the tuple (so the order reads as the data flows) and run at every level the
    probe runs at. An ``after`` probe may run only at a higher level (engine.offload's
    host.memory_bandwidth): below it the probe runs without its record."""
    seen: dict[str, Level] = {}
    for spec in PROBES:
        for need in spec.needs + spec.after:
            assert need in seen, f"{spec.name} needs {need}, which is not listed before it"
        for need in spec.needs:
            assert seen[need] <= spec.level, f"{spec.name} needs {need}, a probe of a higher level"
        seen[spec.name] = spec.level


def test_the_engine_probes_name_what_they_read():
    needs = {spec.name: spec.needs for spec in PROBES}
    assert needs["engine.discovery"] == ()
    assert needs["engine.metrics"] == ("engine.discovery",)
    assert set(needs["engine.kv_cache"]) == {"engine.discovery", "engine.metrics"}
    for name in ("engine.capacity", "engine.exposure", "engine.warmup", "engine.output"):
        assert "engine.discovery" in needs[name], name
