"""The history knows what each exported series is (the catalog's row), and the incident
report picks its plots by it: the metrics behind a finding's evidence, whatever their
exported names, and a bandwidth's ceiling drawn as a line."""

from __future__ import annotations

from doctor.daemon.history import History
from reports.html import _charts

SOFT = (("pid", "4242"), ("comm", "llama-server"), ("engine", "llama.cpp"), ("role", "engine"),
        ("limit", "soft"))


def _history() -> History:
    history = History(3600)
    for i in range(30):
        history.add(1000.0 + 60 * i, [
            ("llm_doctor_host_process_open_files_limit", SOFT, 1024.0),
            ("llm_doctor_host_swap_used_bytes", (), 1.5e9),
            ("llm_doctor_gpu_memory_copy_bytes_per_second", (("gpu", "0"),), 1.6e12 + i * 1e9),
            ("llm_doctor_gpu_memory_bandwidth_ceiling_bytes_per_second", (("gpu", "0"),), 1.94e12)])
    return history


def test_the_history_says_which_record_field_a_series_comes_from():
    history = _history()
    about = history.about("llm_doctor_host_process_open_files_limit")
    assert about is not None and about.field == "processes.nofile_soft"
    assert history.about("llm_doctor_probe_duration_seconds") is None  # the daemon's own


def test_a_findings_evidence_field_picks_its_metric_under_its_new_name():
    findings = [{"evidence": {"process": "llama-server pid 4242", "nofile_soft": 1024},
                 "key": "llama-server pid 4242"}]
    charts = "".join(_charts(_history(), findings))
    assert "llm_doctor_host_process_open_files_limit" in charts
    assert "pid=4242, comm=llama-server" in charts
    assert "llm_doctor_host_swap_used_bytes" not in charts  # not in the evidence


def test_a_bandwidth_is_drawn_against_the_ceiling_the_catalog_names():
    charts = _charts(_history(), [])
    assert len(charts) == 1 and 'class="ceiling"' in charts[0]
    assert "llm_doctor_gpu_memory_copy_bytes_per_second" in charts[0]
