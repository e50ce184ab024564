"""Fuzz kind "npd": hostile state files and flags for ``llm-doctor npd``, the plugin that
node-problem-detector runs every 30 s on every node.

The inputs start from states written by real daemon beats on recorded hosts and break them:
the whole file (truncated, garbage, empty, too deep, too big, a directory, a FIFO, a link to
/dev/zero or to nothing), the fields that say whether it can be trusted (taken_at,
interval_s, kind, state_version, families), the report inside (findings' titles, severities
and rule ids with escapes, NULs, surrogates, bidi overrides, megabytes), and the flags.

Besides what every run must hold (tests/fuzz_runs.py ``check``), each run must give what NPD
can use: exit 0, 1 or 2 (never 3: NPD reads it as Unknown too, but 2 is the protocol's); one
line on stdout of at most 80 bytes of valid UTF-8 with no control character, starting with
a token; and exit 2 wherever the state cannot be trusted: a broken state is never OK.
"""

from __future__ import annotations

import json
import os
import random
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fuzz_runs import Run, Tried, check

HOSTS = ("h100-sxm-8x-gpu-lost", "h100-sxm-8x-torch-cu128", "healthy-epyc-9654-vllm")
FAMILIES = ("gpu", "engine", "host", "net")
NASTY = ["\x1b[31m", "\x00", "\u202e", "\ud800", "\n\n", "é" * 50, "😀" * 30, "\t", "\r",
         "x" * 100_000, "", " ", "\u0301" * 40, "%s%n", "../../etc/passwd", "\ufeff"]
TRUSTED_FIELDS = ("taken_at", "interval_s", "kind", "state_version", "families")


def base_states(base: Path) -> dict[str, dict]:
    """States a real daemon wrote, once per campaign (kept in ``base``)."""
    folder = base / "npd-states"
    if not folder.exists():
        from tests.test_npd import write_state

        folder.mkdir()
        for host in HOSTS:
            write_state(folder, host)
    return {h: json.loads((folder / f"{h}.state.json").read_text()) for h in HOSTS}


def _nasty(rng: random.Random) -> str:
    return "".join(rng.choice(NASTY) for _ in range(rng.randint(1, 3)))


def _report_mutation(rng: random.Random, data: dict) -> str:
    """A change inside the report that keeps the state trusted: any of 0, 1, 2 is right."""
    report = data["report"]
    findings = report.get("findings", [])
    choice = rng.randrange(5)
    if choice == 0 and findings:
        f = rng.choice(findings)
        f["title"] = _nasty(rng) + str(f.get("title", "")) + _nasty(rng)
        return "finding title"
    if choice == 1 and findings:
        f = rng.choice(findings)
        f["rule"] = _nasty(rng)
        return "finding rule id"
    if choice == 2 and findings:
        f = rng.choice(findings)
        f["severity"] = rng.choice(["CRITICAL", "fatal", "", "warning ", "info", "critical"])
        return "finding severity"
    if choice == 3 and report.get("probes"):
        p = rng.choice(report["probes"])
        p["status"] = rng.choice(["error", "timeout", "skipped", "ok", "?"])
        p["reason"] = _nasty(rng)
        return "probe status"
    many = [dict(rng.choice(findings) if findings else {}, title=_nasty(rng)) for _ in range(200)]
    report["findings"] = findings + many
    return "many findings"


def _trust_mutation(rng: random.Random, data: dict) -> tuple[str, bool]:
    """A change to what says whether the state can be trusted: (what, still trusted?)."""
    key = rng.choice(TRUSTED_FIELDS)
    now = time.time()
    if key == "taken_at":
        value, ok = rng.choice([(now - 4 * data["interval_s"], False), (now + 3600, False),
                                (0, False), (-1, False), ("now", False), (True, False),
                                (None, False), (1e308, False), (now - 1, True)])
    elif key == "interval_s":
        value, ok = rng.choice([(0, False), (-15, False), ("15s", False), (1e-300, False),
                                (1e308, True), (False, False), ([15], False)])
    elif key == "kind":
        value, ok = rng.choice([("llm-doctor-scan", False), ("", False), (None, False)])
    elif key == "state_version":
        value, ok = rng.choice([(2, False), (0, False), ("1", False), (1.0, True)])
    else:
        value, ok = rng.choice([([], False), ({"gpu-lost": "network"}, False),
                                ({"x": 1}, False), ({}, True),
                                ({r: "gpu" for r in data["families"]}, True)])
    data[key] = value
    return f"{key} = {str(value)[:30]}", ok


def _file_mutation(rng: random.Random, text: str, path: Path) -> str:
    """The file itself broken: never a trusted state."""
    choice = rng.randrange(9)
    if choice == 0:
        path.write_text(text[:rng.randrange(len(text))])
        return "truncated"
    if choice == 1:
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000))))
        return "random bytes"
    if choice == 2:
        path.write_text("")
        return "empty"
    if choice == 3:
        depth = rng.choice([100, 1000, 100_000])
        path.write_text("[" * depth + "]" * depth)
        return f"nested {depth}"
    if choice == 4:
        path.write_text('{"kind": "llm-doctor-state", "pad": "' + "x" * (33 << 20) + '"}')
        return "33 MiB"
    if choice == 5:
        path.mkdir()
        return "a directory"
    if choice == 6:
        os.mkfifo(path)
        return "a FIFO without a writer"
    if choice == 7:
        path.symlink_to(rng.choice(["/dev/zero", "/dev/urandom", str(path) + ".none", "/proc/self/mem"]))
        return f"a link to {os.readlink(path)}"
    path.write_text(text.replace('"', "'", rng.randint(1, 5)))
    return "quotes broken"


def _flags(rng: random.Random) -> tuple[list[str], bool]:
    """Flags after the state file: (flags, valid?)."""
    if rng.random() < 0.8:
        flags = ["--min-severity", rng.choice(["warning", "critical"])] if rng.random() < 0.5 else []
        return flags, True
    return rng.choice([["--min-severity", "info"], ["--family"], ["--bogus"], ["-o", "x"],
                       ["--family", "network"], ["--fallback-budget", "-1"],
                       ["--min-severity", _nasty(rng)]]), False


def _npd_problems(run: Run, codes: set[int]) -> list[str]:
    if run.rc is None:
        return []  # counted as a hang by check
    problems = []
    if run.rc not in codes:
        problems.append(f"npd-exit-{run.rc}-not-{'/'.join(map(str, sorted(codes)))}")
    lines = run.stdout.split("\n")
    if len(lines) != 2 or lines[1] != "":
        problems.append("npd-not-one-line")
    line = lines[0]
    try:
        size = len(line.encode())
    except UnicodeEncodeError:
        return problems + ["npd-invalid-utf8"]
    if size > 80:
        problems.append("npd-over-80-bytes")
    if any(unicodedata.category(c)[0] == "C" for c in line):
        problems.append("npd-control-character")
    if not line or line[0] == " ":
        problems.append("npd-no-leading-token")
    return problems


def try_npd(base: Path, work: Path, rng: random.Random, out: Any, n: int, bound_s: float,
            runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    states = base_states(base)
    host = rng.choice(HOSTS)
    data = json.loads(json.dumps(states[host]))
    data["taken_at"] = time.time()  # fresh, as the daemon left it a moment ago
    path = work / "state.json"
    layer = rng.randrange(3)
    if layer == 0:
        what, trusted = _report_mutation(rng, data), True
        path.write_text(json.dumps(data))
    elif layer == 1:
        what, trusted = _trust_mutation(rng, data)
        path.write_text(json.dumps(data))
    else:
        what, trusted = _file_mutation(rng, json.dumps(data), path), False
    flags, valid = _flags(rng)
    argv = ["npd", "--family", rng.choice(FAMILIES), "--state-file", str(path), *flags]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, ())
    codes = {0, 1, 2} if trusted and valid else {2}
    for problem in _npd_problems(run, codes):
        verdict.add(problem)
    mutation = f"{host}: {what}; flags {' '.join(flags)[:40]}"
    return [Tried("npd", mutation, argv, run, verdict)]
