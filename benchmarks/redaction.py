"""Masking time of doctor.redact on hostile command lines (seconds, best of 3).

The regular expression it replaced backtracked quadratically: an engine command line of
30,000 ``--token`` arguments made a scan take about 5 minutes. Masking is now linear in
the input's length; this prints the time for each shape, and for half the input, so that
the ratio (about 2 for linear, about 4 for quadratic) shows the growth.

Usage: python benchmarks/redaction.py
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from doctor.redact import redact_cmdline, safe_display

SHAPES = {
    "30,000 --token x": lambda n: "vllm serve m " + "--token x " * n,
    "1 MB single token": lambda n: "a" * (n * 33),
    "1 MB --token=...": lambda n: "--token=" + "a" * (n * 33),
    "URLs with passwords": lambda n: "p://u:pw@h/ " * (n * 3),
    "'://' without end": lambda n: "x://" * (n * 8),
    "NAME= words": lambda n: "HF_TOKEN=x " * (n * 3),
    "Bearer Bearer ...": lambda n: "Bearer " * (n * 5),
    # the quoted, bracketed and JSON-in-text forms, and prose (doctor/redact.py's rule)
    'JSON {"api_key": "x"}': lambda n: '{"api_key": "sk-1"}, ' * (n * 2),
    '["--api-key","x"]': lambda n: '["--api-key","sk-1"],' * (n * 2),
    "(--api-key x)": lambda n: "(--api-key x) " * (n * 2),
    "key: key: key: ...": lambda n: "key: " * (n * 6),
    'unclosed "quotes': lambda n: '--token a"b ' * (n * 3),
    'escaped \\" quotes': lambda n: 'HF_TOKEN="' + '\\"' * (n * 15),
    "prose with API key:": lambda n: "asks for an API key: give it as --endpoint x " * (n // 2),
}


def best(fn, text: str) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    n = 30_000
    print(f"{'input':24} {'chars':>9} {'mask s':>8} {'half s':>8} {'ratio':>6} {'display s':>9}")
    for name, make in SHAPES.items():
        full, half = make(n), make(n // 2)
        t_full, t_half = best(redact_cmdline, full), best(redact_cmdline, half)
        print(f"{name:24} {len(full):9d} {t_full:8.3f} {t_half:8.3f} "
              f"{t_full / max(t_half, 1e-9):6.2f} {best(safe_display, full):9.3f}")


if __name__ == "__main__":
    main()
