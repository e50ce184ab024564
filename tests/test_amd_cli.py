"""amd.gpu through the ``amd-smi`` command when AMD SMI's Python library does not load
(probes/helpers/amd_cli.py, issue 33): the records read from real amd-smi text outputs
(tests/fixtures/amd/SOURCES.md), a rule firing through the fallback, a capture that keeps the
outputs and replays them, and hostile text giving one-line reasons, never a traceback."""

from __future__ import annotations

import shutil

import pytest

from doctor.inputs import NO_INPUTS
from doctor.model import Level, ScanOptions, Skip
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.amd import gpu as amd_gpu
from probes.helpers import amd_cli
from probes.helpers.amd_cli import NOT_IN_TEXT, CliSource
from probes.helpers.amd_cli_text import MAX_CHARS, CliTextError, parse
from probes.helpers.amd_common import NO_LIBRARY, AmdReader, amd_count
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_amd_cli_hosts import output
from tests.fixtures.build_amd_hosts import SOURCES

QUICK = ScanOptions(level=Level.QUICK)
CHOSEN = tuple(p for p in PROBES if p.name in ("amd.gpu", "amd.host"))
AMD_RULES = [r for r in builtin_rules() if r.id.startswith("amd-") or any(p.startswith("amd.") for p in r.each_also)]


def source(static: str, metric: str | None = None) -> CliSource:
    trees, _ = parse(static, "amd-smi static")
    return CliSource(trees, parse(metric, "amd-smi metric")[0] if metric else None, {})


def record(name: str) -> amd_gpu.AmdRecord:
    return amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / name), QUICK, NO_INPUTS)


def test_the_fallback_reads_the_real_mi300a_static_and_metric_text():
    """No amdsmi.json (the library missing): every figure comes from amd-smi's text, and
    each is the one the real output prints."""
    static = (SOURCES / "amdsmi-readme-static-mi300a.txt").read_text()
    r = record("amd-mi300a-cli")
    assert r.source == "amd-smi" and r.source_notes == {}
    (g,) = r.gpus
    for line in ("MARKET_NAME: MI300A", "BDF: 0000:01:00.0", "SOCKET_POWER: 550 W",
                 "SLOWDOWN_HOTSPOT_TEMPERATURE: 100 °C", "SHUTDOWN_HOTSPOT_TEMPERATURE: 110 °C",
                 "MAX_PCIE_WIDTH: 16", "PCIE_INTERFACE_VERSION: Gen 5", "VERSION: 6.9.0-rc5+"):
        assert line in static
    assert (g.name, g.bus_id, g.physical_id) == ("MI300A", "0000:01:00.0", "0000:01:00")
    assert (g.power_limit_w, g.slowdown_c, g.shutdown_c) == (550.0, 100, 110)
    assert (g.gen_max, g.width_max, g.gen_current, g.width_current, g.replay_count) == (5, 16, 5, 16, 0)
    assert (g.driver_name, g.driver_version) == ("amdgpu", "6.9.0-rc5+")
    # metric: powerjoular#67's POWER and USAGE, hipfire#534's GPU 0 clocks
    assert (g.power_w, g.util_gpu_pct) == (20.0, 0)
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.mem_clock_mhz, g.mem_clock_max_mhz) == (3410, 3410, 1258, 1258)
    assert (g.ecc_corrected, g.ecc_uncorrected, g.ecc_deferred) == (0, 0, 0)
    # what the text holds as N/A, and what it does not print at all
    assert g.vbios_version is None and g.missing["vbios_version"] == "not-supported"
    assert g.gfx_arch is None and g.missing["gfx_arch"] == NOT_IN_TEXT  # this release prints none
    for field in ("temp_c", "used_mib", "power_default_limit_w", "bad_pages", "xgmi_links"):
        assert g.missing[field] == NOT_IN_TEXT, field
    assert (r.logical_gpus, r.physical_gpus) == (1, 1)
    assert amd_gpu.summary(r).endswith("; read from the amd-smi command's text (no AMD SMI library)")


def _findings(name: str) -> list[tuple[str, str]]:
    report = scan(RecordedHost(FIXTURE_HOSTS / name), QUICK, CHOSEN, AMD_RULES)
    assert report.rule_errors == []
    assert all(p.status == "ok" for p in report.probes), report.probes
    return sorted((f.rule, f.severity.label) for f in report.findings if f.severity.label != "info")


def test_rules_fire_through_the_fallback_and_are_silent_on_the_plain_host():
    assert _findings("amd-mi300a-cli") == []
    assert _findings("amd-mi300a-cli-ras") == [("amd-gpu-ras-errors", "critical")]
    (ras,) = scan(RecordedHost(FIXTURE_HOSTS / "amd-mi300a-cli-ras"), QUICK, CHOSEN, AMD_RULES).findings
    assert "retired pages" not in ras.title and ras.evidence["pages"] is None  # the text has no page list
    assert _findings("amd-mi300a-cli-foreign-process") == [("gpu-memory-held-by-other-process", "warning")]


def test_the_real_process_output_gives_the_pid_and_its_vram():
    """ROCm/amdsmi#130: pid 2266127, NAME N/A, VRAM_MEM 1.9 GB (1.9 × 2**30 bytes, 1945 MiB);
    on the plain host that pid is a vLLM server (planted), on the foreign one no process."""
    (p,) = record("amd-mi300a-cli").processes
    assert (p.gpu, p.pid, p.name, p.engine, p.used_mib) == (0, 2266127, "python3", "vllm", 1945)
    (p,) = record("amd-mi300a-cli-foreign-process").processes
    assert (p.pid, p.name, p.engine, p.used_mib) == (2266127, "not visible", None, 1945)
    # two processes: amd-smi repeats PROCESS_INFO (an edit of the real block: a second pid)
    block = output("amdsmi-130-process-mi300x.txt")
    second = block.replace("GPU: 0\n", "").replace("2266127", "4242").replace("1.9 GB", "512.0 MB")
    cli = CliSource(*parse(output("amdsmi-readme-static-mi300a.txt"), "s")[:1], None, {},
                    parse(block + second, "amd-smi process")[0])
    assert [(e["pid"], e["memory_usage"]["vram_mem"]) for e in cli.query("amdsmi_get_gpu_process_list", 0)] \
        == [(2266127, round(1.9 * 2**30)), (4242, 512 * 2**20)]


def test_a_capture_keeps_the_amd_smi_outputs_and_its_replay_reads_them_again(tmp_path):
    """The capture goes through the CLI as a live host would (the library missing), keeps
    both outputs under commands/, and the replay gives the same record."""
    recording = RecordingHost(RecordedHost(FIXTURE_HOSTS / "amd-mi300a-cli-ras"), tmp_path / "rec")  # type: ignore[arg-type]
    first = amd_gpu.probe(recording, QUICK, NO_INPUTS)
    recording.save({"level": "quick"})
    again = amd_gpu.probe(RecordedHost(tmp_path / "rec"), QUICK, NO_INPUTS)
    assert again.source == first.source == "amd-smi"
    assert again.gpus[0].ecc_uncorrected == first.gpus[0].ecc_uncorrected == 2


def test_the_real_mi350x_static_text_gives_its_gfx_target_ifwi_and_driver():
    """rocm-systems#2987's MI350X: IFWI (the renamed VBIOS block) and gfx950."""
    cli = source(output("rocm-systems-2987-static-mi350x.txt"))
    assert cli.count == 1
    assert cli.query("amdsmi_get_gpu_asic_info", 0)["target_graphics_version"] == "gfx950"
    assert cli.query("amdsmi_get_gpu_device_bdf", 0) == "0000:05:00.0"
    r = AmdReader(None, cli.query)  # type: ignore[arg-type]  # the host is not read here
    vbios = r.mapping("vbios_version", "amdsmi_get_gpu_vbios_info", 0)
    assert (r.word("v", vbios, "version"), r.word("p", vbios, "part_number")) == ("00154951", "113-M350-01-1K0-920A")
    driver = r.mapping("driver", "amdsmi_get_gpu_driver_info", 0)
    assert r.word("d", driver, "driver_version") == "6.18.3"
    pcie = cli.query("amdsmi_get_pcie_info", 0)
    assert pcie["pcie_static"] == {"max_pcie_width": 16, "max_pcie_speed": 32000, "pcie_interface_version": 5}
    # no metric run: its fields say so
    assert r.item("w", pcie["pcie_metric"], "pcie_width") is None and r.missing["w"] == "GPU not in amd-smi metric's output"


def test_real_fragments_partitions_two_gpus_and_a_wrapped_list():
    static = output("amdsmi-changelog-static-partition.txt")
    cli = source(static)
    assert cli.query("amdsmi_get_gpu_compute_partition", 0) == "CPX"
    assert cli.query("amdsmi_get_gpu_memory_partition", 0) == "NPS4"
    clocks = source(static.replace("GPU: 0", "GPU: 1") + static, output("hipfire-534-metric-clock-2gpu.txt"))
    assert clocks.query("amdsmi_get_clock_info", 1, "GFX") == {"clk": 1, "max_clk": 2350}
    trees, skipped = parse(output("powerjoular-67-metric-usage-power.txt"), "amd-smi metric")
    assert skipped == 0 and trees[0]["USAGE"]["JPEG_ACTIVITY"].count("N/A") == 32  # type: ignore[index,union-attr]


@pytest.mark.parametrize("text,says", [
    ("", "no `GPU: n` block"),
    ("Traceback (most recent call last):\n  File x\nKeyError: 'libamd_smi.so'\n", "first line: 'Traceback"),
    ("\x1b[31mERROR\x00: permission denied\n", "first line: '?[31mERROR?: permission denied'"),
    ("GPU: 0\n" + "    A:\n" * 10 + "x" * (MAX_CHARS), "over"),
], ids=["empty", "traceback", "control-characters", "huge"])
def test_unreadable_output_is_one_line(text, says):
    with pytest.raises(CliTextError) as err:
        parse(text, "amd-smi static")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_hostile_lines_are_skipped_or_said_never_raised():
    deep = "GPU: 0\n    ASIC:\n" + "".join(" " * 4 * d + f"K{d}:\n" for d in range(2, 40))
    trees, skipped = parse(deep + "    BUS:\n        BDF: 0000:05:00.0\n", "amd-smi static")
    assert skipped > 30 and trees[0]["BUS"] == {"BDF": "0000:05:00.0"}
    garbled = ("GPU: 0\n    BUS:\n        BDF: 0000:05:00.0\ufffd\n        MAX_PCIE_WIDTH: sixteen\n"
               "\tX: 1\n   ODD: 1\n    LIMIT:\n        SOCKET_POWER: 75O W\n"
               "        SLOWDOWN_HOTSPOT_TEMPERATURE: 1e9 °C\nGPU: 0\n    ASIC:\n")
    cli = source(garbled)
    r = AmdReader(None, cli.query)  # type: ignore[arg-type]
    assert r.text("bus_id", "amdsmi_get_gpu_device_bdf", 0) is None
    assert r.missing["bus_id"] == "garbled amd-smi value: not text: '0000:05:00.0?'"
    cap = r.mapping("cap", "amdsmi_get_power_cap_info", 0)
    assert r.item("power", cap, "power_cap") is None
    assert r.missing["power"] == "garbled amd-smi value: not a number in W: '75O W'"
    assert r.integer("slow", "amdsmi_get_temp_metric", 0, "HOTSPOT", "CRITICAL") is None
    pcie = r.mapping("pcie", "amdsmi_get_pcie_info", 0)
    assert r.item("width", pcie["pcie_static"], "max_pcie_width") is None  # type: ignore[index]
    assert r.missing["width"].startswith("garbled amd-smi value")
    assert r.integer("gone", "amdsmi_get_temp_metric", 7, "HOTSPOT", "CURRENT") is None
    assert r.missing["gone"] == "GPU 7 not in amd-smi static's output"


def test_n_a_everywhere_is_not_supported():
    static = output("amdsmi-readme-static-mi300a.txt")
    lines = [ln.split(": ")[0] + ": N/A" if ": " in ln and not ln.startswith("GPU") else ln for ln in static.splitlines()]
    cli = source("\n".join(lines), output("amdsmi-changelog-metric-pcie.txt").replace(": 16", ": N/A"))
    r = AmdReader(None, cli.query)  # type: ignore[arg-type]
    assert r.text("bus_id", "amdsmi_get_gpu_device_bdf", 0) is None
    assert r.integer("slow", "amdsmi_get_temp_metric", 0, "HOTSPOT", "CRITICAL") is None
    pcie = r.mapping("pcie", "amdsmi_get_pcie_info", 0)
    assert r.item("w", pcie["pcie_metric"], "pcie_width") is None  # type: ignore[index]
    assert r.missing == {"bus_id": "not-supported", "slow": "not-supported", "w": "not-supported"}


def test_non_utf8_output_replays_as_garbled_values(tmp_path):
    """A command's bytes that are not UTF-8 are decoded with replacement by the seam; the
    value holding them is garbled, its neighbours are read."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300a-cli", root, symlinks=True)
    out = root / "commands" / "00-amd-smi.out"
    out.write_bytes(out.read_bytes().replace(b"MARKET_NAME: MI300A", b"MARKET_NAME: MI\xff\xfe300A"))
    (g,) = amd_gpu.probe(RecordedHost(root), QUICK, NO_INPUTS).gpus
    assert g.name is None and g.missing["name"].startswith("garbled amd-smi value: not text")
    assert g.bus_id == "0000:01:00.0"


def test_without_library_or_amd_smi_the_skip_names_both():
    """amd-rx6750-ollama: no amdsmi.json and no amd-smi output recorded."""
    with pytest.raises(Skip) as skipped:
        amd_count(RecordedHost(FIXTURE_HOSTS / "amd-rx6750-ollama"))
    said = str(skipped.value)
    assert said.startswith("AMD driver not loaded in this recording (no amdsmi.json)")
    assert "the amd-smi command gave nothing to read either: amd-smi static: not-found (not recorded)" in said
    assert "\n" not in said and NO_LIBRARY not in said


def test_a_failing_amd_smi_says_its_exit_status(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300a-cli", root, symlinks=True)
    (root / "commands" / "00-amd-smi.out").write_text("")
    host_toml = (root / "host.toml").read_text()
    (root / "host.toml").write_text(host_toml.replace('rc = 0\nstdout_file = "commands/00', 'rc = 1\nstdout_file = "commands/00', 1))
    cli, why = amd_cli.read(RecordedHost(root))
    assert cli is None and why.startswith("amd-smi static: exit status 1"), why


@pytest.mark.machine
@pytest.mark.slow  # a 1 s timeout waited out
def test_the_live_host_runs_amd_smi_by_argv_and_bounds_a_hung_one(tmp_path, monkeypatch):
    """LiveHost.run on this machine with an ``amd-smi`` on PATH that prints the real outputs
    (bytes, one value not UTF-8) and hangs on ``process``: the records come through the
    command path, the hung command is one note, and no shell is involved."""
    from doctor.seam.live import LiveHost

    sources = tmp_path / "out"
    sources.mkdir()
    (sources / "static").write_bytes(output("amdsmi-readme-static-mi300a.txt").encode()
                                      .replace(b"MARKET_NAME: MI300A", b"MARKET_NAME: MI\xff300A"))
    (sources / "metric").write_text(output("amdsmi-changelog-metric-pcie.txt"))
    tool = tmp_path / "bin" / "amd-smi"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\n[ "$1" = process ] && exec sleep 5\nexec cat "{sources}/$1"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    monkeypatch.setattr(amd_cli, "TIMEOUT_S", 1.0)
    cli, why = amd_cli.read(LiveHost())
    assert cli is not None and why == ""
    assert cli.notes == {"process": "amd-smi process: timeout (no answer in 1 s)"}
    asic = cli.query("amdsmi_get_gpu_asic_info", 0)
    assert asic["market_name"].reason.startswith("garbled amd-smi value: not text")
    assert cli.query("amdsmi_get_pcie_info", 0)["pcie_metric"]["pcie_speed"] == 32000
    assert cli.query("amdsmi_get_gpu_process_list", 0).reason == "amd-smi process: timeout (no answer in 1 s)"


def test_amd_smi_off_path_is_found_where_rocm_installs_it(tmp_path):
    """A venv's PATH without /opt/rocm/bin: the recorded commands are ROCm's own path."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300a-cli", root, symlinks=True)
    host_toml = (root / "host.toml").read_text()
    (root / "host.toml").write_text(host_toml.replace('    "amd-smi",\n', '    "/opt/rocm/bin/amd-smi",\n'))
    r = amd_gpu.probe(RecordedHost(root), QUICK, NO_INPUTS)
    assert (r.source, r.source_notes, r.gpus[0].name, len(r.processes)) == ("amd-smi", {}, "MI300A", 1)
