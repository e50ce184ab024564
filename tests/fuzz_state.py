"""Fuzz kind "state": state files with absurd numbers, wrong types and hostile texts, read by
the two adapters that act on them, ``llm-doctor npd`` (a node condition, maybe a cordon) and
``llm-doctor slurm-healthcheck --dry-run`` (a drain or a resume).

Each input starts from a state a real daemon wrote (tests/fuzz_npd.py ``base_states``), made
fresh, then changed one of two ways:

* **untrusted**: what says whether the state is fresh is something no daemon writes (an
  ``interval_s`` of 1e308, 2^63, 0.5 or 86401; a ``taken_at`` of 0, 1970, 1e18, an hour ahead, a
  string; a ``daemon_pid`` or ``evaluations`` of the wrong type or range; a key removed; NaN,
  Infinity, 1e999 or a 30-digit integer as raw JSON; a rule id that is, or begins with, ``ok``
  or ``unknown``, or is no id). Both adapters must answer unknown: npd exit 2, the dry run
  exit 2 with no scontrol line. Anything else is a **stale state read fresh**.
* **trusted**: the numbers are a daemon's (the interval's bounds included), but the texts are
  hostile (secrets after ``--api-key``, ``token=``, ``Bearer``, a URL's password; ``!``, ``$( )``,
  backquotes, ``;``, quotes; escapes, NULs, bidi overrides, U+2028, line breaks; 100,000
  characters). Any verdict may come; what is printed must hold.

What every run must hold besides tests/fuzz_runs.py ``check`` (no traceback, no hang, exit
0-3): the planted secret nowhere in stdout or stderr; npd's one line of at most 80 bytes of
UTF-8 without a control character (tests/fuzz_npd.py), starting with ``ok `` at exit 0,
``unknown `` at 2, and with neither word (nor ``ok-``/``unknown-``) at 1; each scontrol line the
dry run prints parsing back (shlex) to ``scontrol update NodeName=vm State=…`` without a ``!``.

Half the dry runs find no scontrol (Slurm not installed: the dry run still says what it
would do); half find one that shows the node drained by llm-doctor (Slurm 22.05's own
``scontrol show node --oneliner`` line), so that a state read fresh and healthy prints the
RESUME line: the case that matters.

``python -m tests.fuzz_state --runs N --seed S`` runs N inputs on its own, each run forked and
bounded, and prints the counts.
"""

from __future__ import annotations

import json
import random
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fuzz_npd import _npd_problems, base_states
from tests.fuzz_runs import Run, Tried, check

HOSTS = ("h100-sxm-8x-gpu-lost", "h100-sxm-8x-torch-cu128", "healthy-epyc-9654-vllm")
FAMILIES = ("gpu", "engine", "host", "net")
NODE = "vm"
# Slurm 22.05.8's own line for a node drained by llm-doctor (tests/test_slurm_adapter.py).
DRAINED = ("NodeName=vm Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 State=IDLE+DRAIN "
           "ThreadsPerCore=1 Partitions=debug Reason=llm-doctor: gpu-hardware-errors GPU5 "
           "fell off the bus [root@2026-12-01T19:37:52]")
HOSTILE = ["!", "!!", "!-1", "$(touch canary)", "`touch canary`", "; touch canary", "&&", "|",
           "'", '"', "\\", "[x]", "\x1b[31m", "\x1b]0;pwned\x07", "\x00", "\u202e", "\u2028",
           "\n", "\r", "\t", "\ud800", "\ufeff", "é" * 30, "掉卡", "ok", "unknown", "x" * 100_000]
UNTRUSTED_NUMBERS: dict[str, list[Any]] = {
    "interval_s": [1e308, 1e12, 2**63 - 1, float(2**63), 0.5, 0, -15, 86401, 1e-300, True,
                   "15", None, [15], {}],
    "taken_at": [0, 1.0, -1, 1e18, 1e308, "now", True, None, [1.0], 1.5e9, "future"],
    "daemon_pid": [True, 0, -1, 2**40, "4242", None, 1.5],
    "evaluations": [0, -3, "17", True, 2.5, 2**60, None],
}
RAW = ["NaN", "Infinity", "-Infinity", "1e999", "123456789012345678901234567890"]
BAD_RULES = ["ok", "ok-gpu", "unknown", "unknown-state", "Gpu-Lost", "gpu lost", "gpu\nok",
             "ok gpu:", "", "x" * 81, "-gpu", "gpu_lost"]


def _secret(rng: random.Random, needle: str) -> str:
    """The needle where a report masks it."""
    return rng.choice([f"--api-key {needle}", f"--api-key\n{needle}", f"token={needle}",
                       f"Authorization: Bearer {needle}", f"https://user:{needle}@host/v1",
                       f"--hf-token={needle}", f'api_key="{needle}"'])


def _hostile(rng: random.Random, needle: str) -> str:
    parts = [rng.choice(HOSTILE) for _ in range(rng.randint(1, 4))]
    parts.insert(rng.randrange(len(parts) + 1), _secret(rng, needle))
    return " ".join(parts)


def _untrusted(rng: random.Random, data: dict, now: float) -> tuple[str, str | None]:
    """One change no daemon writes: (what, raw JSON text to put in place of a marker)."""
    choice = rng.randrange(5)
    if choice <= 1:
        key = rng.choice(list(UNTRUSTED_NUMBERS))
        value = rng.choice(UNTRUSTED_NUMBERS[key])
        value = now + 3600 if value == "future" else value
        data[key] = value
        if key == "interval_s" and rng.random() < 0.5:
            data["taken_at"] = rng.choice([1.0, 0.5, 1.6e9])  # from long ago: stale by any age
        return f"{key} = {str(value)[:30]}", None
    if choice == 2:
        key = rng.choice(list(UNTRUSTED_NUMBERS))
        del data[key]
        return f"{key} removed", None
    if choice == 3:
        key = rng.choice(["interval_s", "taken_at", "daemon_pid", "evaluations"])
        data[key] = "@RAW@"
        raw = rng.choice(RAW)
        return f"{key} = {raw} (raw)", raw
    rule = rng.choice(BAD_RULES)
    findings = data["report"]["findings"]
    finding = dict(findings[0]) if findings else {
        "rule": "", "cause": "gpu-lost", "symptoms": [], "severity": "critical",
        "title": "t", "remediation": "r", "playbook": "p", "evidence": {}}
    finding.update(rule=rule, severity=rng.choice(["critical", "warning"]))
    findings.append(finding)
    data["families"][rule] = rng.choice(FAMILIES) if rule else "gpu"
    return f"finding rule {rule[:30]!r}", None


def _trusted(rng: random.Random, data: dict, needle: str, now: float) -> str:
    """Numbers a daemon writes, texts that are hostile."""
    data["interval_s"] = rng.choice([1, 1.0, 15.0, 600.0, 86400])
    data["taken_at"] = now - rng.uniform(0, 2 * data["interval_s"])
    report = data["report"]
    choice = rng.randrange(3)
    if choice == 0 and report["findings"]:
        finding = rng.choice(report["findings"])
        finding["title"] = _hostile(rng, needle)
        finding["severity"] = "critical"
        return "finding title"
    if choice == 1 and report["probes"]:
        probe = rng.choice(report["probes"])
        probe["status"] = rng.choice(["error", "timeout", "skipped"])
        probe["reason"] = _hostile(rng, needle)
        return f"probe {probe['status']} reason"
    rule = rng.choice(list(data["families"]))
    report["findings"].append({"rule": rule, "cause": "gpu-lost", "symptoms": [],
                               "severity": "critical", "title": _hostile(rng, needle),
                               "remediation": _hostile(rng, needle), "playbook": "p",
                               "evidence": {}})
    return "a critical finding added"


def _scontrol(base: Path) -> Path:
    """An scontrol that shows the node drained by llm-doctor (once per campaign)."""
    path = base / "state-bin" / "scontrol"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(DRAINED)}\n")
        path.chmod(0o755)
    return path


def _line_problems(run: Run) -> list[str]:
    """What npd's line must say of itself, beyond fuzz_npd's form checks."""
    if run.rc is None or run.rc not in (0, 1, 2) or not run.stdout:
        return []
    first = run.stdout.split("\n")[0].split(" ")[0]
    if run.rc == 0 and first != "ok":
        return ["npd-ok-line-not-ok"]
    if run.rc == 2 and first != "unknown":
        return ["npd-unknown-line-not-unknown"]
    if run.rc == 1 and (first in ("ok", "unknown") or first.startswith(("ok-", "unknown-"))):
        return ["npd-problem-reads-ok-or-unknown"]
    return []


def _dry_run_problems(run: Run, trusted: bool, scontrol: str) -> list[str]:
    if run.rc is None:
        return []
    problems = []
    if not trusted and (run.rc != 2 or run.stdout):
        problems.append("stale-read-fresh-slurm")
    for line in filter(None, run.stdout.split("\n")):
        if "!" in line:
            problems.append("slurm-line-with-bang")
        try:
            words = shlex.split(line)
        except ValueError:
            problems.append("slurm-line-does-not-parse")
            continue
        if words[:3] != [scontrol, "update", f"NodeName={NODE}"] or words[3] not in (
                "State=DRAIN", "State=RESUME"):
            problems.append("slurm-line-not-one-scontrol-update")
    return problems


def try_state(base: Path, work: Path, rng: random.Random, out: Any, n: int, bound_s: float,
              runner: Callable[[list[str], float, Path], Run],
              evaluate_share: float) -> list[Tried]:
    states = base_states(base)
    host = rng.choice(HOSTS)
    data = json.loads(json.dumps(states[host]))
    now = time.time()
    data["taken_at"] = now
    needle = f"FUZZSTATESECRET{rng.getrandbits(64):016x}"
    trusted = rng.random() < 0.4
    raw = None
    if trusted:
        what = _trusted(rng, data, needle, now)
    else:
        what, raw = _untrusted(rng, data, now)
        if rng.random() < 0.5:  # a hostile text besides: masked even when unknown
            hostile_title = _hostile(rng, needle)
            if data["report"]["findings"]:
                data["report"]["findings"][0]["title"] = hostile_title
    text = json.dumps(data)
    if raw is not None:
        text = text.replace('"@RAW@"', raw)
    path = work / "state.json"
    path.write_text(text)
    mutation = f"{host}: {'trusted' if trusted else 'untrusted'} {what}"
    found = []
    family = rng.choice(FAMILIES)
    argv = ["npd", "--family", family, "--state-file", str(path)]
    if rng.random() < 0.5:
        argv += ["--min-severity", "warning"]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, ())
    for problem in _npd_problems(run, {0, 1, 2} if trusted else {2}):
        verdict.add("stale-read-fresh-npd" if problem.startswith("npd-exit-") and not trusted
                    else problem)
    for problem in _line_problems(run):
        verdict.add(problem)
    if needle in run.stdout + run.stderr:
        verdict.add("unmasked-secret")
    found.append(Tried("state", mutation + f" (npd {family})", argv, run, verdict))
    scontrol = str(_scontrol(base)) if rng.random() < 0.5 else str(work / "no-scontrol")
    argv = ["slurm-healthcheck", "--dry-run", "--state-file", str(path), "--node", NODE,
            "--scontrol", scontrol]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, ())
    for problem in _dry_run_problems(run, trusted, scontrol):
        verdict.add(problem)
    if needle in run.stdout + run.stderr:
        verdict.add("unmasked-secret")
    found.append(Tried("state", mutation + " (slurm dry run)", argv, run, verdict))
    return found


def main() -> None:
    """A bounded campaign of this kind alone: counts by problem, and the first example of
    each."""
    import argparse
    import shutil
    import tempfile
    from collections import Counter

    from tests.fuzz_runs import run_forked, unblock_fifos, warm_up

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--bound", type=float, default=20.0, help="seconds a run may take")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds in all")
    args = parser.parse_args()
    warm_up()
    import doctor.commands.npd
    import doctor.commands.slurm  # noqa: F401
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="fuzz-state-"))
    problems: Counter[str] = Counter()
    examples: dict[str, str] = {}
    kinds: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    started = time.monotonic()
    done = 0
    try:
        for n in range(args.runs):
            if time.monotonic() - started > args.budget:
                break
            work = base / f"in-{n}"
            work.mkdir()
            try:
                for tried in try_state(base, work, rng, None, n, args.bound, run_forked, 0.0):
                    trust = tried.mutation.split(": ", 1)[1].split(" ", 1)[0]
                    kinds[trust + (" npd" if tried.argv[0] == "npd" else " slurm")] += 1
                    codes[f"{trust} {tried.argv[0]} exit {tried.run.rc}"] += 1
                    for problem in tried.verdict.problems:
                        problems[problem] += 1
                        examples.setdefault(problem, f"{tried.mutation}: "
                                            f"{tried.run.stdout[:200]!r} {tried.run.stderr[-300:]!r}"
                                            f" {tried.run.uncaught}")
            finally:
                unblock_fifos(work)
                shutil.rmtree(work, ignore_errors=True)
            done += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"inputs {done} in {time.monotonic() - started:.0f}s; runs {dict(sorted(kinds.items()))}")
    print(f"exit codes {dict(sorted(codes.items()))}")
    print(f"problems {dict(problems) or 'none'}")
    for problem, example in examples.items():
        print(f"  {problem}: {example}")


if __name__ == "__main__":
    from tests.fixtures.build_all_hosts import ensure_built

    ensure_built()
    main()
