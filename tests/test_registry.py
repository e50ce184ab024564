"""Conformance: every registry entry is complete, and every probe returns a frozen record."""

from __future__ import annotations

import dataclasses
import re
import typing

from doctor.model import Level
from probes.registry import PROBES


def test_every_probe_is_complete():
    names = [spec.name for spec in PROBES]
    assert len(names) == len(set(names))
    for spec in PROBES:
        assert re.fullmatch(r"(host|gpu|engine)\.[a-z_]+", spec.name), spec.name
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


def test_quick_probes_do_not_import_torch():
    import subprocess
    import sys

    code = ("import sys\nfrom probes.registry import PROBES\nfrom doctor.seam.live import LiveHost\n"
            "from doctor.model import ScanOptions, Level\nfrom doctor.runner import run_probes\n"
            "run_probes(PROBES, LiveHost(), ScanOptions(level=Level.QUICK))\n"
            "print('torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_probes_fields_lists_what_rules_can_name(cli):
    result = cli("probes", "--fields")
    assert result.returncode == 0
    assert "host.limits.processes[].nofile_soft: int | None" in result.stdout
    assert "host.memory_bandwidth.triad_gbps: float" in result.stdout
