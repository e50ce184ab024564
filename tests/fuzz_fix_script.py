"""Fuzz kind "fix-script": hostile saved scans through ``llm-doctor fix --from``, and the
script it writes run as a person would run it first, to look: ``sh plan.sh``, the dry run.

A saved scan is a file attached to a ticket: every string in it may be an attack. Each
input starts from a real scan of a recorded host with planted faults (its findings have
steps of every action kind: a systemd drop-in, sysctl files and live values, engine flags)
and puts hostile text into a field that reaches the plan: a finding's rule, key, title or
cause, the host name, an engine's label or process, the cgroup the unit name is read from,
or a governor reading. The text mixes shell syntax (``$( )``, backquotes, ``;``, quotes,
``${x?}``), every line break (LF, CR, VT, FF, the file separators, U+0085, U+2028, U+2029),
the here-document's end mark on a line of its own, ``../``, NULs, escapes, bidi overrides,
lone surrogates, Markdown and HTML, and long runs; some inputs hold many findings.

Every command the text names is a canary: ``llmdoctorcanary`` (on the dry run's PATH, it
leaves a file when it runs) or ``touch pwned`` in the dry run's working folder. The script
is run as ``nobody`` (``setpriv``, when this runs as root) in a throwaway folder with an
empty environment, under a time bound. Besides what every run must hold
(tests/fuzz_runs.py ``check``), each input is counted for: an injected command (a canary
file), a script ``sh -n`` refuses, a dry run that fails or hangs, a line of the script that
Python would split in two (a line break other than LF), and an uncommented line of a file
the plan writes that holds the input's text.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # tests/fuzz_runs.py imports this module when the kind is first tried
    from tests.fuzz_runs import Run, Tried

HOST = "fix-epyc-9654-vllm-systemd"
CANARY = "llmdoctorcanary"
DRY_RUN_S = 30.0
# Pieces of hostile text: each names the canary, so that any of it run leaves a file.
PAYLOADS = (
    f"$({CANARY})", f"`{CANARY}`", f"; {CANARY};", f"\n{CANARY}\n", f"\r{CANARY}\r",
    f"\u2028{CANARY}", f"\x85{CANARY}", f"\x0b{CANARY}", f"\x0c{CANARY}", f"\x1c{CANARY}",
    f"\u2029{CANARY}", f"' ; {CANARY} ; '", f'" ; {CANARY} ; "', f"\nLLM_DOCTOR_EOF\n{CANARY}\n",
    "\nLLM_DOCTOR_EOF\n", "LLM_DOCTOR_EOF", f"\nLLM_DOCTOR_EOF_2\n{CANARY}\n", "../../../../tmp/x",
    "\ud800", "\x00", "\x1b[2J\x1b[1;1H", f"* * * * * root {CANARY}", "\u202e", f"${{x?{CANARY}}}",
    f"\\\n{CANARY}", f"|| {CANARY} &", f"\n#!/bin/sh\n{CANARY}", "\ntouch pwned\n", "$((1/0))",
    f"<img src=x onerror={CANARY}()>", f"[x](javascript:{CANARY})", "```", "\t", " ", "",
    "é" * 40, "\ufeff", "%s%n", f"\n[Service]\nExecStartPre=/bin/{CANARY}\n",
)
FIELDS = ("rule", "key", "title", "cause", "hostname", "engine", "process", "cgroup", "governor")


def base_scan(base: Path) -> dict:
    """A real scan of ``HOST`` as ``scan --format json`` saves it (kept in ``base``)."""
    path = base / "fix-script-base.json"
    if not path.exists():
        from doctor.commands.fix import _scan
        from tests.conftest import FIXTURE_HOSTS

        report, _ = _scan(str(FIXTURE_HOSTS / HOST), None, None, None)
        path.write_text(json.dumps(report))
    return json.loads(path.read_text())


def hostile_text(rng: random.Random) -> str:
    text = "".join(rng.choice(PAYLOADS) for _ in range(rng.randint(1, 4)))
    return text * rng.choice((1, 1, 1, 50)) if rng.random() < 0.1 else text


def _engine_finding(report: dict) -> dict:
    return next(f for f in report["findings"] if f["rule"] == "fd-limit-low")


def poison(report: dict, field: str, text: str, rng: random.Random) -> None:
    """Put ``text`` into ``field`` of ``report`` (changed in place) wherever it reaches a plan."""
    findings = report["findings"]
    if field in ("rule", "key", "title", "cause"):
        for finding in rng.sample(findings, rng.randint(1, len(findings))):
            old = finding.get(field, "")
            finding[field] = rng.choice((text, old + text, text + old))
    elif field == "hostname":
        report["host"]["hostname"] = text
    elif field in ("engine", "process"):
        for finding in findings:
            finding["evidence"][field] = rng.choice((text, f"vllm {text} pid 48213", text + " pid 48213"))
    elif field == "cgroup":
        for probe in report["probes"]:
            if probe["name"] == "engine.container" and probe["data"]:
                for engine in probe["data"].get("engines", []):
                    engine["cgroup"] = rng.choice((f"/system.slice/{text}vllm.service", f"/docker/{text}",
                                                   f"/system.slice/{text}", text))
    else:  # a governor finding reading the scan's per-CPU values
        report["findings"].append({
            "rule": "cpu-powersave-governor", "cause": "cpu-powersave-governor", "key": "",
            "title": text, "severity": "warning", "symptoms": [], "remediation": "",
            "playbook": "", "evidence": {}})
        report["probes"] = [p for p in report["probes"] if p["name"] != "host.cpu"] + [
            {"name": "host.cpu", "status": "ok", "reason": None, "duration_s": 0,
             "data": {"cpus": [{"cpu": n, "governor": text, "energy_preference": text}
                               for n in range(rng.choice((2, 64)))]}}]


def many(report: dict, rng: random.Random) -> None:
    """The findings repeated, keys made distinct: past the plan's bound, or just below it."""
    count = rng.choice((100, 300, 2000))
    report["findings"] = [dict(rng.choice(report["findings"]), key=f"k{n}") for n in range(count)]


@dataclass
class DryRun:
    rc: int | None          # None: still running at the bound, killed
    output: str
    injected: list[str]     # the canary files the script left: each one a command it ran
    parses: bool            # sh -n
    shellcheck: str | None  # None: clean or not installed; else its report


def _nobody() -> list[str]:
    """The prefix that runs a command as nobody, when this runs as root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    return ["runuser", "-u", "nobody", "--"]


def dry_run(script: str, bound_s: float = DRY_RUN_S, lint: bool = False) -> DryRun:
    """``sh plan.sh`` as nobody, in a throwaway folder with canaries, an empty environment
    and a PATH that finds ``llmdoctorcanary`` first; the folder removed after."""
    folder = Path(tempfile.mkdtemp(prefix="llm-doctor-fix-dry-"))
    try:
        work, tmp, bin_dir = folder / "work", folder / "tmp", folder / "bin"
        for made in (work, tmp, bin_dir):
            made.mkdir()
        for writable in (work, tmp):
            writable.chmod(0o777)
        folder.chmod(0o755)
        canary = bin_dir / CANARY
        canary.write_text(f'#!/bin/sh\n: > "{work}/ran-{CANARY}-$$"\n')
        canary.chmod(0o755)
        plan = folder / "plan.sh"
        plan.write_text(script, encoding="utf-8", errors="surrogateescape")
        plan.chmod(0o644)
        parses = subprocess.run(["sh", "-n", str(plan)], capture_output=True, timeout=bound_s,
                                check=False).returncode == 0
        env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work),
               "TMPDIR": str(tmp), "PLAN_DIR": str(work / "plans"), "LC_ALL": "C.UTF-8"}
        try:
            done = subprocess.run([*_nobody(), "sh", str(plan)], cwd=work, env=env, capture_output=True,
                                  timeout=bound_s, stdin=subprocess.DEVNULL, check=False)
            rc: int | None = done.returncode
            output = (done.stdout + done.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, output = None, ""
        injected = sorted(p.name for p in work.iterdir())
        report = None
        if lint and shutil.which("shellcheck"):
            checked = subprocess.run(["shellcheck", "-s", "sh", str(plan)], capture_output=True, text=True,
                                     timeout=120, check=False)
            report = None if checked.returncode == 0 else checked.stdout[-2000:]
        return DryRun(rc, output, injected, parses, report)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def catalogue_lines(plan: Any) -> set[str]:
    """The uncommented lines of the files ``plan`` writes."""
    return {line for step in plan.steps for change in step.files
            for line in change.content.split("\n") if line and not line.startswith("#")}


HEREDOC = re.compile(r"<<'(LLM_DOCTOR_EOF[_0-9]*)'\n(.*?)\n\1\n", re.S)
CODE_SPAN = re.compile(r"(`+).*?\1")


def script_problems(text: str, fmt: str) -> list[str]:
    """What a plan in ``fmt`` must never hold, whatever the saved scan held."""
    problems = []
    if len(text.splitlines()) != text.count("\n") + (0 if text.endswith("\n") else 1):
        problems.append("fix-line-break-not-lf")  # a line that a reader or an editor sees as two
    if any(not (c.isprintable() or c == "\n") for c in text):
        problems.append("fix-unprintable-character")
    if fmt == "sh":
        for _, body in HEREDOC.findall(text):  # the files the plan writes: input only in comments
            if any(not line.startswith("#") and (CANARY in line or "pwned" in line or "* * *" in line)
                   for line in body.split("\n")):
                problems.append("fix-file-line-from-input")
    if fmt == "markdown":
        prose = CODE_SPAN.sub("", re.sub(r"^(`{3,}).*?^\1$", "", text, flags=re.S | re.M))
        if "<img" in prose or "](javascript" in prose:
            problems.append("fix-markdown-markup-from-input")
    return problems


def try_fix_script(base: Path, work: Path, rng: random.Random, out: Any, n: int, bound_s: float,
                   runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    from tests.fuzz_runs import Tried, check

    report = base_scan(base)
    fields = rng.sample(FIELDS, rng.randint(1, 3))
    texts = []
    for field in fields:
        texts.append(hostile_text(rng))
        poison(report, field, texts[-1], rng)
    if rng.random() < 0.05:
        many(report, rng)
    saved = work / "saved.json"
    saved.write_text(json.dumps(report))
    fmt = rng.choice(("sh", "sh", "sh", "json", "markdown"))
    script = work / "plan.out"
    argv = ["fix", "--from", str(saved), "--format", fmt, "-o", str(script)]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, ())
    if run.rc == 0:
        text = script.read_text(encoding="utf-8", errors="surrogateescape")
        for problem in script_problems(text, fmt):
            verdict.add(problem)
        if fmt == "json":
            _check_json(text, verdict)
        elif fmt == "sh":
            done = dry_run(text, min(bound_s, DRY_RUN_S))
            if done.injected:
                verdict.add("fix-injected-command")
            if not done.parses:
                verdict.add("fix-does-not-parse")
            if done.rc is None:
                verdict.add("fix-dry-run-hang")
            elif done.rc != 0:
                verdict.add(f"fix-dry-run-exit-{done.rc}")
    elif run.rc is not None and run.rc != 3:
        verdict.add(f"fix-exit-{run.rc}")
    mutation = f"{', '.join(fields)} = {' | '.join(repr(t)[:40] for t in texts)} ({fmt}, {len(report['findings'])} findings)"
    return [Tried("fix-script", mutation, argv, run, verdict)]


def _check_json(text: str, verdict: Any) -> None:
    import jsonschema

    from tests.conftest import REPO

    schema = json.loads((REPO / "docs" / "fix-plan-schema.json").read_text())
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        verdict.add("fix-json-not-schema")


__all__ = ["CANARY", "PAYLOADS", "DryRun", "base_scan", "catalogue_lines", "dry_run", "poison",
           "script_problems", "try_fix_script"]
