"""Fuzz kind ``textfile``: hostile recorded hosts through ``scan --format prom``.

Each input is a committed recorded host (CPU-only, GPU and engine hosts) mutated as the
``host`` kind mutates one (tests/fuzz_inputs.make_host: damaged /proc and /sys files,
manifests, measurements, commands and NVML answers, and an engine planted with a secret on
its command line), and, half the time, with label values no exporter should trust written
where a label comes from: the CPU's model name and the busiest processes' names (quotes,
backslashes, newlines, a lone surrogate, control and bidirectional characters, 100,000
characters, text that looks like the exposition format itself).

Besides what every run must hold (tests/fuzz_runs.py ``check``: exit 0-3, no traceback, no
hang, no internal error, no read outside the input, no planted secret in the output or the
file), the textfile written (``-o``) must be one node_exporter takes: it parses (``invalid-prom``), holds no
series twice (``duplicate-series``: node_exporter would drop it with a gathering error),
gives each metric one label set (``mixed-labels``), ends with the written timestamp
(``incomplete``), and ``promtool check metrics`` finds nothing (``promtool``).

Import ``tests.fuzz_runs`` (which registers this kind), not this module, first.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.fuzz_inputs import HOSTS, Outside, _replace, make_host
from tests.fuzz_runs import Run, Tried, check

SOURCES = ("xeon-gold-6338-2socket-powersave", "vllm-v1-kv-pressure", "h100-sxm-8x-nvswitch",
           "gpu-row-remap-xid79", "contended-epyc-7543-batch-job", "l40s-4x-2socket")
NEEDLES = ("outside", "secret", "token", "environment")
LABELS = ('"', "\\", "\n", '\\"', 'a"} 1\nllm_doctor_finding{rule="forged"} 1\n# TYPE x',
          "\udcff", "\ud800x", "\u202eevil", "\x00nul", "\x1b[31mred", "\t\r\x7f",
          "x" * 100_000, "é" * 5000, "=,{}", "# HELP", " ", "")
_PROMTOOL = shutil.which("promtool")


def _hostile(rng: random.Random) -> str:
    return "".join(rng.choice(LABELS) for _ in range(rng.choice((1, 2, 3))))


def _plain(path: Path, root: Path) -> bool:
    """A regular file of the input, not a link nor under one: the host mutations leave FIFOs
    (a read would block this harness), devices, and links to the outside markers (which
    this harness must neither read nor write)."""
    return (path.is_file() and not path.is_symlink()
            and path.resolve().is_relative_to(root.resolve()))


def _plant_labels(root: Path, rng: random.Random) -> str:
    """Hostile text where labels come from; returns what was planted where."""
    done = []
    cpuinfo = root / "fs/proc/cpuinfo"
    if _plain(cpuinfo, root) and rng.random() < 0.5:
        lines = cpuinfo.read_text(errors="replace").splitlines()
        value = _hostile(rng).replace("\n", " ")  # a line of cpuinfo holds no newline
        text = "\n".join(f"model name\t: {value}" if line.startswith("model name") else line
                         for line in lines) + "\n"
        # replaced, never edited: the copy's fs/ files are hard links to the committed host
        _replace(cpuinfo, text.encode("utf-8", "surrogatepass"))
        done.append("cpuinfo model")
    measurements = root / "measurements.json"
    if not _plain(measurements, root):
        return " + ".join(done) or "no label source"
    try:
        data = json.loads(measurements.read_text())
        top = data["host.cpu_load"]["top"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # a mutated file
        return " + ".join(done) or "no label source"
    if isinstance(top, list):
        for item in top[:rng.choice((1, 2, 5))]:
            if isinstance(item, dict):
                item["comm"] = _hostile(rng)
        _replace(measurements, json.dumps(data).encode())
        done.append("process names")
    return " + ".join(done) or "no label source"


def _problems(text: str) -> list[str]:
    """What would keep node_exporter from taking ``text`` whole."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError):
        return ["invalid-prom"]
    problems: list[str] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
        names = {tuple(sorted(s.labels)) for s in family.samples}
        if len(names) > 1:
            problems.append("mixed-labels")
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                problems.append("duplicate-series")
            seen.add(key)
    if not families or families[-1].name != "llm_doctor_textfile_written_timestamp_seconds":
        problems.append("incomplete")
    if _PROMTOOL and not problems:
        try:
            lint = subprocess.run([_PROMTOOL, "check", "metrics"], input=text.encode(),
                                  capture_output=True, timeout=30)
            if lint.returncode != 0 or lint.stdout.strip() or lint.stderr.strip():
                problems.append("promtool")
        except subprocess.TimeoutExpired:
            problems.append("promtool")
    return sorted(set(problems))


def try_textfile(base: Path, work: Path, rng: random.Random, out: Outside, n: int,
                 bound_s: float, runner: Callable[[list[str], float, Path], Run],
                 evaluate_share: float) -> list[Tried]:
    root, what = make_host(work, HOSTS / rng.choice(SOURCES), rng, out)
    if rng.random() < 0.5:
        what += " + hostile labels in " + _plant_labels(root, rng)
    written = work / "llm-doctor.prom"
    argv = ["scan", "--replay", str(root), "--level", rng.choice(("quick", "standard")),
            "--format", "prom", "-o", str(written), "--no-progress"]
    out.reset()
    run = runner(argv, bound_s, work)
    verdict = check(run, out, False, NEEDLES, out.touched())
    if run.rc in (0, 1, 2):
        # read as bytes: the runs' own output is read as text, which turns a \r into \n
        try:
            text = written.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            verdict.add("invalid-prom")
        else:
            for problem in _problems(text):
                verdict.add(problem)
            for name in NEEDLES:
                if out.needles[name] in text:
                    verdict.add(f"found-{name}")
    return [Tried("textfile", what, argv, run, verdict)]
