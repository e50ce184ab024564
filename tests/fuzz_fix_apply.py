"""Fuzz kind "fix-apply": ``llm-doctor fix --from SAVED --apply --root R`` on hostile saved
scans, under a root whose tree holds planted symbolic links out of it.

The saved scans start from real scans of recorded hosts whose plans write files (sysctl.d,
a unit's drop-in, limits.d, a udev rule) and break what the paths are built from: rule ids
with ``../`` climbing 1 to 12 folders, slashes, newlines, NULs, surrogates; the engine's
unit name; titles and keys. The root gets links where its folders or the targets belong
(``etc``, ``etc/sysctl.d``, a drop-in folder, ``var`` under the default plans folder, the
target itself), pointing at a folder outside it, plus FIFOs and folders at targets.

Besides what every run must hold (tests/fuzz_runs.py ``check``), nothing may change outside
the root and the plans folder: the outside folder is compared before and after, and every
folder from the work folder up to / is searched for the files an escaping path would make.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fuzz_runs import Run, Tried, check

HOSTS = ("fix-epyc-9654-vllm-systemd", "l40s-2socket-no-dev-char", "xeon-gold-6338-2socket-powersave")
ESCAPE = "fuzz-escape"
NASTY = ["\n", "\r", "\x00", "\ud800", "\u2028", "$(touch x)", "`x`", ";", "'", '"', "/", "*", " ",
         "\\", "é", "\u202e", "x" * 300]
LINKS = ("etc", "etc/sysctl.d", "etc/systemd", "etc/systemd/system", "etc/systemd/system/vllm.service.d",
         "etc/security", "etc/security/limits.d", "etc/udev/rules.d", "var", "var/lib/llm-doctor",
         "var/lib/llm-doctor/plans")
TARGETS = ("etc/sysctl.d/60-llm-doctor-network-backlog-small.conf", "etc/sysctl.d/60-llm-doctor-swap-swappiness-high.conf",
           "etc/systemd/system/vllm.service.d/llm-doctor.conf", "etc/security/limits.d/60-llm-doctor.conf",
           "etc/udev/rules.d/71-llm-doctor-nvidia-dev-char.rules")


def base_scans(base: Path, runner: Callable[[list[str], float, Path], Run]) -> dict[str, dict]:
    """Saved scans of the recorded hosts, once per campaign (kept in ``base``)."""
    from tests.conftest import FIXTURE_HOSTS

    folder = base / "fix-apply-scans"
    folder.mkdir(exist_ok=True)
    out = {}
    for host in HOSTS:
        path = folder / f"{host}.json"
        if not path.exists():
            run = runner(["scan", "--replay", str(FIXTURE_HOSTS / host), "--format", "json", "--no-progress"],
                         120, folder)
            path.write_text(run.stdout)
        out[host] = json.loads(path.read_text())
    return out


def _nasty(rng: random.Random) -> str:
    return "".join(rng.choice(NASTY) for _ in range(rng.randint(1, 3)))


def _climb(rng: random.Random) -> str:
    return "../" * rng.randint(1, 12) + ESCAPE + rng.choice(["", "/x", "/etc/cron.d/x"])


def _mutate_scan(rng: random.Random, report: dict) -> str:
    findings = [f for f in report.get("findings", []) if isinstance(f, dict)]
    if not findings or rng.random() < 0.15:
        return "unchanged"
    finding = rng.choice(findings)
    choice = rng.randrange(5)
    if choice == 0:
        finding["rule"] = _climb(rng)
        return f"rule climbs: {finding['rule'][:40]}"
    if choice == 1:
        finding["rule"] = str(finding.get("rule", "")) + _nasty(rng)
        return "rule with nasty characters"
    if choice == 2:
        finding["key"] = rng.choice([_climb(rng), _nasty(rng), "engine " + _climb(rng)])
        return "key"
    if choice == 3:
        finding["title"] = _nasty(rng) + "\n* * * * * root touch /tmp/" + ESCAPE
        return "title"
    for probe in report.get("probes", []):  # the unit a drop-in is named for
        if isinstance(probe, dict) and isinstance(probe.get("data"), dict):
            unit = rng.choice([_climb(rng) + ".service", "a/../../b.service", "x\n.service", "..",
                               "v.service/../.."])
            text = json.dumps(probe["data"]).replace("vllm.service", json.dumps(unit)[1:-1])
            probe["data"] = json.loads(text)
    return "unit name"


def _plant(rng: random.Random, root: Path, outside: Path) -> list[str]:
    """Links, FIFOs and folders where the plan's folders and files belong."""
    planted = []
    for _ in range(rng.randint(0, 3)):
        choice = rng.randrange(4)
        rel = rng.choice(LINKS if choice < 2 else TARGETS)
        path = root / rel
        if os.path.lexists(path):
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue  # a link planted above it already
        if choice < 2:
            path.symlink_to(outside if choice == 0 else outside / "nowhere")
        elif choice == 2:
            path.symlink_to(outside / "theirs.conf")
        else:
            if rng.random() < 0.5:
                os.mkfifo(path)
            else:
                path.mkdir()
        planted.append(f"{rel}:{'link' if choice < 3 else 'odd'}")
    return planted


def snapshot(top: Path) -> dict[str, tuple[bytes | None, int, str]]:
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(dirpath) / name
            info = path.lstat()
            link = os.readlink(path) if path.is_symlink() else ""
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            out[str(path.relative_to(top))] = (data, info.st_mode, link)
    return out


def escapes(work: Path) -> list[str]:
    """Files an escaping path made in any folder from ``work`` up to /."""
    found, folder = [], work
    while True:
        try:
            found += [str(folder / n) for n in os.listdir(folder) if n.startswith(ESCAPE)]
        except OSError:
            pass
        if folder == folder.parent:
            return found
        folder = folder.parent


def outside_tree(work: Path, rng: random.Random) -> Path:
    outside = work / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "theirs.conf").write_text("kernel.panic = 10\n")
    return outside


def try_fix_apply(base: Path, work: Path, rng: random.Random, out: Any, n: int, bound_s: float,
                  runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    scans = base_scans(base, runner)
    host = rng.choice(HOSTS)
    report = json.loads(json.dumps(scans[host]))
    what = _mutate_scan(rng, report)
    saved = work / "saved.json"
    saved.write_text(json.dumps(report))
    root = work / "root"
    (root / "etc").mkdir(parents=True)
    outside = outside_tree(work, rng)
    planted = _plant(rng, root, outside)
    before = snapshot(outside)
    argv = ["fix", "--from", str(saved), "--apply", "--root", str(root)]
    if rng.random() < 0.5:
        argv += ["--plans-dir", str(work / "plans")]
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, ())
    if snapshot(outside) != before or escapes(work):
        verdict.add("write-outside")
    if run.rc is not None and run.rc not in (0, 1, 3):
        verdict.add(f"fix-exit-{run.rc}")
    return [Tried("fix-apply", f"{host}: {what}; planted {' '.join(planted)[:80]}", argv, run, verdict)]
