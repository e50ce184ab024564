"""Fuzz: hostile npu-smi and hccn_tool text never crashes the parsers, hangs, or grows past
their bounds.

The inputs are the real tables (and ``npu-smi info -t topo``'s) of tests/fixtures/ascend/sources mutated at random: lines cut
at random points, cells swapped, columns dropped, the border characters and digits replaced
by box-drawing runes, Chinese labels, NUL and very long lines spliced in, the table repeated.
``parse_info`` must return a table or raise TableError (one line), never anything else, with
at most MAX_CHIPS chips, MAX_PROCESSES processes and MAX_PROBLEMS problem lines of 120
characters. A fixed seed and a budget keep it bounded.
"""

from __future__ import annotations

import random
import time

import pytest

from probes.helpers import npu_smi
from probes.helpers.npu_smi import TableError, hccn_value, parse_info, parse_kv
from probes.npu.topology import parse_topo
from tests.fixtures.build_ascend_hosts import SOURCES
from tests.fuzz_runs import budget_s as fuzz_budget_s

pytestmark = pytest.mark.fuzz

SEED = 20261207
BUDGET_S = fuzz_budget_s()
MIN_INPUTS = 200
TABLES = [p.read_text() for p in sorted(SOURCES.glob("*npu-smi-info*")) if "-t-topo" not in p.name]
TOPO = (SOURCES / "ms-swift-valle-npu-smi-info-t-topo-910b3-8x.txt").read_text()
NOISE = ["│", "┃", "═", "╪", "健康", "芯片", "\0", "\x1b[31m", "NA", "-", "/", " / ", "|", "||",
         "9" * 40, "x" * 5000, "\ufffd", "+=+", "Process id", "NPU   Name", "Chip  Phy-ID"]


def mutate(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 8)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        choice = rng.randrange(6)
        if choice == 0:
            lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
        elif choice == 1:
            cells = lines[i].split("|")
            rng.shuffle(cells)
            lines[i] = "|".join(cells)
        elif choice == 2:
            cells = lines[i].split("|")
            if len(cells) > 2:
                del cells[rng.randrange(1, len(cells) - 1)]
            lines[i] = "|".join(cells)
        elif choice == 3:
            at = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:at] + rng.choice(NOISE) + lines[i][at:]
        elif choice == 4:
            lines.insert(i, lines[rng.randrange(len(lines))])
        else:
            del lines[i]
    return "\n".join(lines) * rng.choice((1, 1, 1, 40))


def check(text: str) -> None:
    try:
        table = parse_info(text)
    except TableError as exc:
        assert "\n" not in str(exc)
        return
    assert len(table.chips) <= npu_smi.MAX_CHIPS
    assert len(table.processes) <= npu_smi.MAX_PROCESSES
    assert len(table.problems) <= npu_smi.MAX_PROBLEMS
    assert all(len(p) <= 120 for p in table.problems)
    for chip in table.chips:
        assert all(v is None or isinstance(v, (float, tuple)) for v in chip.values.values())


def test_mutated_real_tables():
    rng = random.Random(SEED)
    started, runs = time.monotonic(), 0
    while runs < MIN_INPUTS or time.monotonic() - started < BUDGET_S:
        check(mutate(rng, rng.choice(TABLES)))
        kv = parse_kv(mutate(rng, "link status: UP\nnet health status: Success\nipaddr:10.0.0.1\n"))
        assert len(kv) <= 256
        hccn_value(mutate(rng, "link status: DOWN\n"), "link status")
        try:
            topo = parse_topo(mutate(rng, TOPO))
            assert len(topo.affinity) <= 64 and len(topo.problems) <= 8
        except ValueError as exc:
            assert "\n" not in str(exc)
        runs += 1
    assert runs >= MIN_INPUTS


def test_a_huge_table_is_read_within_its_line_bound():
    table = parse_info(TABLES[0] * 2000)  # ~3 MB: only the first MAX_LINES lines are read
    assert 0 < len(table.chips) <= npu_smi.MAX_CHIPS
