"""The catalog of exported metrics against the records and the naming conventions: every
field of every registered probe's record is declared (a metric, its items' labels, or left
out with the reason), nothing is declared that no record has, the names are pinned in
tests/golden/metrics.txt, and they carry base units, _total on counters only, _info on
string facts."""

from __future__ import annotations

import dataclasses
import subprocess
import typing

import pytest

from doctor.daemon import catalog
from doctor.daemon.catalog import gpu as gpu_catalog
from doctor.daemon.catalog.rows import GBPS, MBPS, MHZ, MIB, MS
from probes.gpu.thermal_power import REASONS
from probes.registry import PROBES
from tests.conftest import REPO
from tests.daemon_helpers import need

GOLDEN = REPO / "tests" / "golden" / "metrics.txt"
REGENERATE = "python -m doctor.daemon.catalog > tests/golden/metrics.txt"


def _dataclasses_in(hint) -> list[type]:
    """The dataclasses a field's type holds: X, X | None, tuple[X, ...]."""
    if dataclasses.is_dataclass(hint):
        return [hint]
    return [c for arg in typing.get_args(hint) for c in _dataclasses_in(arg)]


def record_fields(cls: type, at: str = "") -> dict[str, bool]:
    """Every field path of a record type → whether it holds items (nested records)."""
    out: dict[str, bool] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{at}.{f.name}" if at else f.name
        nested = _dataclasses_in(hints[f.name])
        out[path] = bool(nested)
        for inner in nested:
            out.update(record_fields(inner, path))
    return out


def _record_type(spec) -> type:
    hint = typing.get_type_hints(spec.run)["return"]
    assert dataclasses.is_dataclass(hint), f"{spec.name}: its run() returns no record type"
    return hint


SPECS = {spec.name: spec for spec in PROBES}


@pytest.mark.parametrize("probe", sorted(SPECS))
def test_every_field_of_the_record_is_declared(probe):
    table = catalog.table(probe)
    assert table is not None, f"{probe}: no table in doctor/daemon/catalog/"
    fields = record_fields(_record_type(SPECS[probe]))
    declared = table.declared()
    undeclared = sorted(path for path in fields if path not in declared)
    assert undeclared == [], (f"{probe}: fields the catalog does not declare (add a metric, "
                              f"or unexported(field, why)): {undeclared}")
    stale = sorted(path for path in declared if path not in fields)
    assert stale == [], f"{probe}: declared but no such field in the record: {stale}"
    items = sorted(p for p, nested in fields.items() if nested and declared[p] != "items")
    assert items == [], f"{probe}: tuples of records need each(path, scheme): {items}"


def test_every_table_is_a_registered_probe():
    assert sorted(set(catalog.TABLES) - set(SPECS)) == []


def test_the_tables_follow_the_conventions():
    assert catalog.check() == []


def _every_name_page() -> str:
    """One series of every catalogue metric, with its help, type and labels, as the text
    format: what promtool lints, whether or not a recorded host has a value for it."""
    lines: list[str] = []
    seen: set[str] = set()
    for t, m in catalog.metrics():
        if m.name in seen:  # rows of one metric told apart by const labels share a family
            continue
        seen.add(m.name)
        # a name twice (engine.slots' member "model" beside the engine's) is one label on
        # the page: prometheus_client keeps the last (doctor/daemon/exporter.py families)
        labels = ",".join(f'{name}="x"' for name in dict.fromkeys(t.label_names(m)))
        text = m.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {m.name} {text}", f"# TYPE {m.name} {m.type}",
                  f"{m.name}{{{labels}}} 1"]
    return "\n".join(lines) + "\n"


def test_every_catalogue_name_passes_promtool():
    """promtool's lint on every name, not only those a recorded host has values for: the
    prompt-length histogram's count (on no committed host) was named ..._histogram_requests,
    which `promtool check metrics` refuses."""
    promtool = need("promtool", "prometheus")
    page = _every_name_page()
    assert page.count("# TYPE ") == len({m.name for _, m in catalog.metrics()})
    lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), \
        lint.stdout + lint.stderr


def test_names_are_pinned_in_the_golden_file():
    assert GOLDEN.read_text() == catalog.golden(), (
        f"the exported metrics changed: if that is meant (it renames series on people's "
        f"dashboards), regenerate with: {REGENERATE}, and say so in the commit")


def test_clock_event_reasons_are_the_probes_nvml_names():
    assert dict(gpu_catalog.CLOCK_EVENT_REASONS) == REASONS


# A field's unit (the last word of its name) → the exported unit and the factor.
UNITS = {"mib": ("_bytes", MIB), "bytes": ("_bytes", 1.0), "gb": ("_bytes", 1e9),
         "c": ("_celsius", 1.0), "w": ("_watts", 1.0), "mhz": ("_hertz", MHZ),
         "mts": ("_transfers_per_second", MHZ), "gbps": ("_bytes_per_second", GBPS),
         "mbps": ("_bytes_per_second", MBPS), "ms": ("_seconds", MS), "s": ("_seconds", 1.0),
         "fraction": ("_ratio", 1.0), "share": ("_ratio", 1.0), "ratio": ("_ratio", 1.0),
         "use": ("_ratio", 1.0), "utilization": ("_ratio", 1.0), "rate": ("_ratio", 1.0)}


@pytest.mark.parametrize("probe, metric", [(t.probe, m) for t, m in catalog.metrics()],
                         ids=lambda v: getattr(v, "name", v))
def test_a_unit_in_a_field_is_the_base_unit_in_its_metric(probe, metric):
    leaf = metric.field.rpartition(".")[2]
    unit = leaf.rpartition("_")[2]
    if metric.kind not in ("gauge", "counter") or unit not in UNITS:
        return
    suffix, scale = ("_per_second", 1.0) if leaf.endswith("_per_s") else UNITS[unit]
    assert metric.name.removesuffix("_total").endswith(suffix), \
        f"{probe} {metric.field} is in {unit}: {metric.name} should end in {suffix}"
    assert metric.scale == scale, f"{metric.name}: {unit} is x {scale} to {suffix}"


def test_the_names_the_issue_named_are_gone_and_their_base_unit_names_are_there():
    names = {m.name for _, m in catalog.metrics()}
    for old in ("host_memory_available_mib", "temp_c", "power_w", "sm_clock_mhz", "copy_gbps",
                "read_mbps", "kv_cache_use"):
        assert not [n for n in names if n.endswith(old)], old
    for new in ("host_memory_available_bytes", "gpu_temperature_celsius", "gpu_power_usage_watts",
                "gpu_sm_clock_hertz", "host_memory_bandwidth_copy_bytes_per_second",
                "host_storage_read_bytes_per_second", "engine_kv_cache_usage_ratio"):
        assert f"llm_doctor_{new}" in names, new


def test_values_that_only_grow_are_counters():
    kinds = {m.name: m.kind for _, m in catalog.metrics()}
    for name in ("engine_preemptions_total", "gpu_pcie_replays_total", "host_tcp_listen_drops_total",
                 "host_tcp_listen_overflows_total", "gpu_ecc_errors_total",
                 "gpu_remapped_rows_total"):
        assert kinds[f"llm_doctor_{name}"] == "counter", name


def test_string_facts_are_info_series_with_the_labels_dashboards_join_on():
    labels = {m.name: t.label_names(m) for t, m in catalog.metrics()}
    assert set(labels["llm_doctor_gpu_info"]) >= {"gpu", "uuid", "model_name", "bus_id"}
    assert set(labels["llm_doctor_gpu_driver_info"]) == {"driver_version", "cuda_version"}
    assert set(labels["llm_doctor_engine_info"]) >= {"kind", "endpoint", "model", "pid"}
    assert labels["llm_doctor_gpu_temperature_celsius"] == ("gpu", "uuid", "model_name")
    assert labels["llm_doctor_engine_requests_running"] == ("kind", "endpoint", "model", "pid")


def test_no_label_is_free_text():
    """Command lines, prompts, answers and sentences never become label values."""
    for t in catalog.TABLES.values():
        for each in t.eaches.values():
            assert not {"cmdline", "prompt", "excerpt", "line", "note"} & set(each.scheme.reads)
        for m in t.metrics:
            assert not {"cmdline", "prompt", "excerpt", "line", "note", "error"} & set(m.fields)

