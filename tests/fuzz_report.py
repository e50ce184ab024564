"""Fuzz kind ``report``: mutated saved scans through ``llm-doctor report FILE -o OUT.html``.

Each input starts from a real ``scan --format json`` of a committed recorded host (made
once per process, at first use) and is made wrong by one or two named mutations: a wrong
type, deletion or deep nesting at any path; integers of 20 to 5,000 digits; ``NaN``,
``Infinity`` and ``1e999``; raw damage (truncation, non-UTF-8 bytes, garbage, 100,000-deep
brackets, 8 MB); a finding's cause that climbs out of playbooks/ to a Markdown file outside
(``../…/outside/notes``, an absolute path); planted secrets, in the forms masking knows,
in string fields and in dict keys (``--api-key S``, ``"HF_TOKEN=S"``, ``{"id": "--api-key
S"}``, ``(--api-key S)``, an argv list, ``api_key: S`` as a field); or a file that is not one
(``/dev/zero``, a FIFO, a directory, links to them, to itself, to nothing).

Besides what every run must hold (tests/fuzz_runs.py ``check``: exit 0-3, no traceback, no
hang, no internal error, no read outside the input, no planted secret in the terminal),
the written HTML must hold no planted secret and no outside marker. A link named on the
command line is followed, as any file argument is: the links made here point at special
files and at nothing, never at the outside markers, whose reading is what is counted.

Import ``tests.fuzz_runs`` (which registers this kind), not this module, first.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fuzz_inputs import HOSTS, REPO, Outside, mutate_bytes, mutate_tree
from tests.fuzz_runs import Run, Tried, check

SOURCES = ("vllm-v1-kv-pressure", "h100-sxm-8x-nvswitch", "gpu-row-remap-xid79",
           "contended-epyc-7543-batch-job", "this-vm-epyc-2cpu", "l40s-4x-2socket")
NEEDLES = ("outside", "secret", "token", "environment")
PLAYBOOKS = REPO / "playbooks"
_BASES: dict[str, str] = {}  # host → its saved scan, made once per process
_NUMBER = re.compile(r'(?<=": )-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?=[,\n}])')


def _base(name: str, work: Path, bound_s: float, runner: Callable[..., Run]) -> str:
    if name not in _BASES:
        run = runner(["scan", "--replay", str(HOSTS / name), "--level", "standard", "--format",
                      "json", "--no-progress"], max(bound_s, 30.0), work)
        if run.rc not in (0, 1, 2):
            raise RuntimeError(f"scan of {name} for a base report: exit {run.rc}: {run.stderr[-200:]}")
        _BASES[name] = run.stdout
    return _BASES[name]


def _notes(out: Outside) -> Path:
    """A Markdown file outside every input, with the marker, where a cause may point."""
    notes = out.root / "notes.md"
    if not notes.exists():
        notes.write_text(f"# Notes\n\n## What it means\n{out.marker}\n\n## Fix\n{out.marker}\n")
    if out.entries and notes not in out.entries:  # listed before it was made
        out.entries.append(notes)
    return notes


# --------------------------------------------------------------------------- mutations

def _strings(doc: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every string value and every object (whose keys may be renamed)."""
    out = []
    if isinstance(doc, str):
        out.append(path)
    elif isinstance(doc, dict):
        out.append(path + ({},))  # the object itself: a key may be planted in it
        for key, value in doc.items():
            out += _strings(value, path + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:20]):
            out += _strings(value, path + (i,))
    return out


def _at(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _forms(out: Outside) -> list[str]:
    s, t = out.secret, out.token
    return [f"--api-key {s}", f'"HF_TOKEN={s}"', f"(--api-key {s})", f'{{"id": "--api-key {s}"}}',
            f"Authorization: Bearer {s}", f"FUZZ_TOKEN={t}", f'["--api-key","{s}"]',
            f"postgres://app:{s}@db/x", f"api_key: {s}", f"[HF_TOKEN={s}]", f"<--token {s}>",
            f"x --api-key={s}, y", f"'Authorization: Basic {s}'", f"GET /v1?token={s}&a=1"]


def _plant(doc: Any, rng: random.Random, out: Outside) -> str:
    """Secrets in up to five string fields or dict keys, and one structured form."""
    where = []
    targets = _strings(doc)
    for path in rng.sample(targets, min(len(targets), rng.randint(1, 5))):
        form = rng.choice(_forms(out))
        if path and path[-1] == {}:  # a key of that object
            _at(doc, path[:-1])[form] = rng.choice((1, "x", None, [form]))
            where.append("key")
        else:
            parent = _at(doc, path[:-1])
            parent[path[-1]] = rng.choice((form, f"{parent[path[-1]]} {form}", f"{form} and more"))
            where.append(".".join(map(str, path))[:40])
    records = [p for p in doc.get("probes", []) if isinstance(p, dict) and isinstance(p.get("data"), dict)]
    evidence = [f["evidence"] for f in doc.get("findings", [])
                if isinstance(f, dict) and isinstance(f.get("evidence"), dict)]
    holder = rng.choice([p["data"] for p in records] + evidence + [None])
    if holder is not None:  # a secret under a secret's name, or in an argv list
        if rng.random() < 0.5:
            holder[rng.choice(("api_key", "hf_token", "password", "Authorization"))] = out.secret
        else:
            holder["argv"] = ["vllm", "serve", "--api-key", out.secret, "--port", "8000"]
        where.append("structured")
    return "secret:" + ",".join(where)


def _cause(doc: Any, rng: random.Random, out: Outside) -> str:
    notes = _notes(out)
    stem = str(notes)[:-len(".md")]
    relative = os.path.relpath(stem, PLAYBOOKS)
    cause = rng.choice((relative, stem, "cpu-contention/../" + relative, "./" + relative,
                        "../README", "..", "", "cpu-contention\0", "x" * 10_000, 5, None,
                        str(notes), relative.replace("/", "\\")))
    findings = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(findings, list):
        return "cause:no-findings"
    if not findings or rng.random() < 0.3:
        findings.append({"rule": "fuzz", "cause": "cpu-contention", "symptoms": ["slowdown"],
                         "severity": "warning", "title": "t", "evidence": {"x": 1},
                         "remediation": "r", "playbook": "playbooks/x.md"})
    target = rng.choice(findings)
    if isinstance(target, dict):
        target["cause"] = cause
    return f"cause:{str(cause)[:40]!r}"


def _number(text: str, rng: random.Random) -> tuple[str, str]:
    """One number of the text replaced: a huge integer, NaN, Infinity, 1e999."""
    numbers = list(_NUMBER.finditer(text))
    word = rng.choice(("9" * 5000, str(10**30), str(2**63), str(-(2**63)), "NaN", "Infinity",
                       "-Infinity", "1e999", "-1e999", "1e-999", "-0", "1E400"))
    if not numbers:
        return text, "number:none"
    found = rng.choice(numbers)
    return text[:found.start()] + word + text[found.end():], f"number:{word[:12]}"


def _special(path: Path, work: Path, rng: random.Random) -> str:
    """The input made a file that is not one: a device, a FIFO, a directory, links."""
    op = rng.choice(("dev-zero", "fifo", "dir", "link-zero", "link-fifo", "link-self",
                     "link-none", "link-dir"))
    path.unlink(missing_ok=True)
    if op == "fifo":
        os.mkfifo(path)
    elif op == "dir":
        path.mkdir()
    elif op == "dev-zero" or op == "link-zero":
        path.symlink_to("/dev/zero")
    elif op == "link-fifo":
        os.mkfifo(work / "pipe")
        path.symlink_to(work / "pipe")
    elif op == "link-self":
        path.symlink_to(path.name)
    elif op == "link-none":
        path.symlink_to(work / "nothing-here.json")
    else:
        (work / "a-dir").mkdir()
        path.symlink_to(work / "a-dir")
    return f"special:{op}"


def make_report(work: Path, text: str, rng: random.Random, out: Outside) -> tuple[Path, str]:
    """A mutated copy of a saved scan, and the mutation's name. Secrets are planted only
    where no raw damage follows: a byte inserted into ``--api-key`` would make a secret
    no masking can know."""
    path = work / "scan.json"
    op = rng.choice(("tree", "tree", "secret", "secret", "secret", "cause", "cause", "number",
                     "bytes", "special", "secret+tree", "cause+secret"))
    if op == "special":
        path.write_text(text)
        return path, _special(path, work, rng)
    if op == "bytes":
        data, how = mutate_bytes(text.encode(), rng, "json")
        path.write_bytes(data)
        return path, f"bytes:{how}"
    if op == "number":
        changed, how = _number(text, rng)
        path.write_text(changed)
        return path, how
    doc = json.loads(text)
    what = []
    for part in op.split("+"):
        if part == "tree":
            doc, how = mutate_tree(doc, rng)
            what.append(how)
        elif part == "secret" and isinstance(doc, dict):
            what.append(_plant(doc, rng, out))
        elif part == "cause":
            what.append(_cause(doc, rng, out))
    try:
        written = json.dumps(doc, default=str)
    except (ValueError, RecursionError):  # a tree nested past what json writes
        written = text.replace('"findings": [', '"findings": [' + "[" * 5000, 1)
    path.write_text(written)
    return path, " + ".join(what)


# --------------------------------------------------------------------------- one input


def _html_problems(html: Path, out: Outside) -> list[str]:
    """What the written page must not hold: a planted secret, an outside marker."""
    if not html.is_file() or html.is_symlink():
        return []
    text = html.read_text(errors="replace")
    return [f"found-{name}" for name in NEEDLES if out.needles[name] in text]


def try_report(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
               runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    text = _base(rng.choice(SOURCES), work, bound_s, runner)
    _notes(out)
    path, what = make_report(work, text, rng, out)
    html = work / "out.html"
    argv = ["report", str(path), "-o", str(html)]
    out.reset()
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, NEEDLES, out.touched())
    for problem in _html_problems(html, out):
        verdict.add(problem)
    if run.rc == 0 and not html.is_file():
        verdict.add("no-html")
    return [Tried("report", what, argv, run, verdict)]
