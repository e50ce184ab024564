"""Fuzz: real amd-smi text outputs (tests/fixtures/amd/sources/) cut, re-indented, spliced
with garbage and repeated never make the parser (probes/helpers/amd_cli_text.py) raise
anything but its one-line CliTextError, and every amdsmi call amd.gpu makes is answered by
probes/helpers/amd_cli.py without raising. A fixed seed and a budget keep it bounded.
"""

from __future__ import annotations

import random
import time

import pytest
from tests.fuzz_runs import budget_s as fuzz_budget_s

from probes.helpers.amd_cli import CliSource
from probes.helpers.amd_cli_text import CliTextError, parse
from tests.fixtures.build_amd_cli_hosts import output

pytestmark = pytest.mark.fuzz

SEED = 20261207
BUDGET_S = fuzz_budget_s()
REAL = ("amdsmi-readme-static-mi300a.txt", "rocm-systems-2987-static-mi350x.txt",
        "powerjoular-67-metric-usage-power.txt", "hipfire-534-metric-clock-2gpu.txt",
        "amdsmi-changelog-metric-pcie.txt", "amdsmi-changelog-static-partition.txt",
        "amdsmi-130-process-mi300x.txt")
LINES = [ln for name in REAL for ln in output(name).splitlines()]
GARBAGE = ["\x00", "\ufffd", "\t", ":", ": ", "N/A", "[", "]", "GPU: 0", "GPU: 99999", "CPU: 0",
           " " * 4, " " * 3, "9" * 30, "°C", "GT/s", "Gen ", "-1", "1e9", "\x1b[31m", "\r"]
CALLS = [("amdsmi_get_gpu_asic_info",), ("amdsmi_get_gpu_device_bdf",), ("amdsmi_get_pcie_info",),
         ("amdsmi_get_temp_metric", "HOTSPOT", "CURRENT"), ("amdsmi_get_temp_metric", "HOTSPOT", "CRITICAL"),
         ("amdsmi_get_clock_info", "GFX"), ("amdsmi_get_clock_info", "MEM"), ("amdsmi_get_power_info",),
         ("amdsmi_get_power_cap_info",), ("amdsmi_get_gpu_memory_total", "VRAM"),
         ("amdsmi_get_gpu_memory_usage", "VRAM"), ("amdsmi_get_gpu_total_ecc_count",),
         ("amdsmi_get_gpu_activity",), ("amdsmi_get_gpu_driver_info",), ("amdsmi_get_gpu_vbios_info",),
         ("amdsmi_get_gpu_compute_partition",), ("amdsmi_get_gpu_process_list",)]


def mutated(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 80)):
        line = rng.choice(LINES)
        cut = rng.randint(0, len(line))
        line = line[:cut] + "".join(rng.choice(GARBAGE) for _ in range(rng.randint(0, 4))) + line[cut:]
        out.append(" " * rng.choice((0, 0, 0, 4, 8, 40)) + line if rng.random() < 0.2 else line)
    return "\n".join(out * rng.choice((1, 1, 1, 30)))


def test_mutated_real_outputs_never_raise():
    rng = random.Random(SEED)
    end = time.monotonic() + BUDGET_S
    runs = 0
    while time.monotonic() < end or runs < 50:
        try:
            static, skipped = parse(mutated(rng), "amd-smi static")
        except CliTextError as exc:
            assert "\n" not in str(exc)
            runs += 1
            continue
        assert skipped >= 0
        said: list = []
        for command in ("amd-smi metric", "amd-smi process"):
            try:
                said.append(parse(mutated(rng), command)[0])
            except CliTextError:
                said.append(None)
        cli = CliSource(static, said[0], {}, said[1])
        for i in list(static)[:4] + [cli.count]:
            for name, *args in CALLS:
                cli.query(name, i, *args)
        runs += 1
