"""Running llm-doctor on generated inputs (tests/fuzz_inputs.py), and what every run must hold:
an exit code of 0-3, no traceback, no hang past its bound, no probe failing with an internal
error, valid JSON, no read outside the recorded host, no planted secret in any output.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz_inputs import HOSTS, REPO, Outside, make_config, make_host, make_outside, make_rules

__all__ = ["budget_s", "make_outside", "run_forked", "run_subprocess", "try_one", "warm_up"]
EXIT_CODES = {0, 1, 2, 3}

# Each campaign's time budget. Every run of the suite (the README's command, CI) runs each
# campaign for a few seconds: a smoke of the harness on fresh inputs of the fixed seed. A deeper
# campaign is the same test with a larger budget, e.g. LLM_DOCTOR_FUZZ_S=120 pytest -m fuzz,
# or benchmarks/fuzz.py for thousands of inputs.
FUZZ_BUDGET_ENV = "LLM_DOCTOR_FUZZ_S"
DEFAULT_BUDGET_S = 3.0


def budget_s() -> float:
    """The campaign budget in seconds: LLM_DOCTOR_FUZZ_S (1-86400), else DEFAULT_BUDGET_S."""
    text = os.environ.get(FUZZ_BUDGET_ENV, "").strip()
    if not text:
        return DEFAULT_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1.0 <= value <= 86400.0:
        import pytest

        pytest.exit(f"{FUZZ_BUDGET_ENV}={text!r}: give a number of seconds from 1 to 86400",
                    returncode=4)
    return value


# --------------------------------------------------------------------------- running and checking


@dataclass
class Run:
    rc: int | None  # None: did not finish in time
    stdout: str
    stderr: str
    seconds: float
    uncaught: str = ""  # an exception that escaped main(), as its traceback's last line


def unblock_fifos(root: Path) -> None:
    """Open every FIFO under ``root`` for writing, then close it: a reader blocked on one
    sees end-of-file, so a hung scan can finish and its threads go."""
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            try:
                if path.is_fifo() and not path.is_symlink():
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass


def warm_up() -> None:
    """Import what a scan imports, so that each forked run starts warm."""
    import doctor.commands.cli
    import doctor.scan  # noqa: F401
    import reports.json_report
    import reports.markdown
    import reports.terminal  # noqa: F401


def run_forked(argv: list[str], bound_s: float, fifo_root: Path) -> Run:
    """``llm-doctor ARGV`` through doctor.commands.cli.main in a fork of this process.

    A fork starts in a millisecond with every module already imported, like a call in
    process, yet a run that hangs (a FIFO, a loop without end) can be killed at ``bound_s``
    and leaves nothing behind: no blocked thread, no redirected sys.stdout.
    """
    files = fifo_root / ".run-out", fifo_root / ".run-err", fifo_root / ".run-exc"
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            out = os.open(files[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(files[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8",
                                          line_buffering=False)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8")
            sys.argv = ["llm-doctor", *argv]
            from doctor.commands import cli

            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException as exc:  # the finding: an exception escaped the CLI  # noqa: BLE001
                files[2].write_text(f"{type(exc).__name__}: {str(exc)[:300]}")
                code = 70
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code if 0 <= code < 256 else 71)
    rc = _wait(pid, bound_s)
    seconds = time.perf_counter() - t0
    read = [f.read_text(errors="replace") if f.exists() else "" for f in files]
    for f in files:
        f.unlink(missing_ok=True)
    return Run(rc, read[0], read[1], seconds, read[2])


def _wait(pid: int, bound_s: float) -> int | None:
    """The child's exit status, or None after killing it at ``bound_s``."""
    deadline = time.perf_counter() + bound_s
    delay = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.perf_counter() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def run_subprocess(argv: list[str], bound_s: float, fifo_root: Path) -> Run:
    import subprocess

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "doctor.commands.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        out, err = proc.communicate(timeout=bound_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = None
    return Run(rc, out, err, time.perf_counter() - t0)


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)  # "traceback", "hang", "outside", ...

    def add(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)


def check(run: Run, out: Outside, json_expected: bool, needles: tuple[str, ...],
          touched: list[str] = ()) -> Verdict:  # type: ignore[assignment]
    """What must hold of any run: the problems found, by name (empty when all is well)."""
    v = Verdict()
    if touched:
        v.add("read-outside")
    if run.rc is None:
        v.add("hang")
        return v
    if run.rc not in EXIT_CODES:
        v.add(f"exit-{run.rc}")
    if run.uncaught or "Traceback" in run.stderr:
        v.add("traceback")
    if "internal error" in run.stdout:
        v.add("internal-error")
    text = run.stdout + run.stderr
    for name in needles:
        if out.needles[name] in text:
            v.add(f"found-{name}")
    if json_expected and run.rc in (0, 1, 2):
        try:
            _strict_json(run.stdout)
        except ValueError:
            v.add("invalid-json")
    return v


# --------------------------------------------------------------------------- one input, end to end

SCAN_HOSTS = ("this-vm-epyc-2cpu", "model-on-hdd-xeon-e5", "swap-in-use-epyc-7543",
              "t4-cdi-driver-upgraded",  # its CDI spec and toolkit config among the files mutated
              # issue 33: AMD SMI's recorded answers (amdsmi.json) and Ascend's npu-smi and
              # hccn_tool text among the files mutated
              "amd-mi300-8x-ras", "amd-rx6750-ollama", "ascend-910b2c-hbm-ecc",
              "amd-mi300a-cli-ras")  # amd-smi's text outputs (commands/) among the files mutated
HOST_NEEDLES = ("outside", "secret", "token", "environment")
FILE_NEEDLES = ("environment",)


@dataclass
class Tried:
    kind: str
    mutation: str
    argv: list[str]
    run: Run
    verdict: Verdict


def _scan_argv(replay: Path, level: str, *extra: str) -> list[str]:
    return ["scan", "--replay", str(replay), "--level", level, "--format", "json",
            "--no-progress", *extra]


def _source(name: str, base: Path) -> Path:
    """A recorded host's tree: the committed ones under tests/fixtures/hosts, an Ascend story
    built once into ``base`` (they are built at test time, tests/fixtures/build_ascend_hosts.py)."""
    from tests.fixtures import build_ascend_hosts as ascend

    if name not in ascend.STORIES:
        return HOSTS / name
    built = base / "ascend" / name
    return built if built.is_dir() else ascend.build(name, base / "ascend")


def _try_host(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
              runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    source = _source(rng.choice(SCAN_HOSTS), base)
    root, what = make_host(work, source, rng, out)
    argv = _scan_argv(root, rng.choice(("quick", "standard")))
    out.reset()
    run = runner(argv, bound_s, work)
    return [Tried("host", what, argv, run, check(run, out, True, HOST_NEEDLES, out.touched()))]


def _try_file(kind: str):
    def tried(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
              runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
        path, what = (make_rules(work, rng, n) if kind == "rules"
                      else make_config(work, rng, n, out))
        argv = ["rules", "check", str(path)] if kind == "rules" else ["rules", "--config", str(path)]
        run = runner(argv, bound_s, work)
        found = [Tried(kind, what, argv, run, check(run, out, False, FILE_NEEDLES))]
        if run.rc == 0 and rng.random() < evaluate_share:  # loaded: now evaluate it
            flag = "--rules" if kind == "rules" else "--config"
            argv = _scan_argv(HOSTS / SCAN_HOSTS[0], "quick", flag, str(path))
            run = runner(argv, bound_s, work)
            found.append(Tried(kind, what + " (scanned)", argv, run,
                               check(run, out, True, FILE_NEEDLES)))
        return found
    return tried


def _kind(module: str, name: str) -> Callable[..., list[Tried]]:
    """A kind whose inputs are made in tests/<module>.py, which imports this module (for
    ``Tried``, ``check``): loaded when first tried."""
    def tried(*args: Any) -> list[Tried]:
        return getattr(importlib.import_module(f"tests.{module}"), name)(*args)
    return tried


# One entry per kind of input: (base, work, rng, outside, n, bound_s, runner, evaluate_share)
# → the runs tried. A kind whose inputs need more than a file (a hostile server) lives in a
# module of its own (tests/fuzz_<kind>.py) and is named here.

TRIERS: dict[str, Callable[..., list[Tried]]] = {
    "host": _try_host,
    "rules": _try_file("rules"),
    "config": _try_file("config"),
    "plan": _kind("fuzz_plan", "try_plan"),
    "daemon": _kind("fuzz_daemon", "try_daemon"),
    "endpoint": _kind("fuzz_endpoint", "try_endpoint"),
    "report": _kind("fuzz_report", "try_report"),
    "engine-pages": _kind("fuzz_engine_pages", "try_engine_pages"),
    "npd": _kind("fuzz_npd", "try_npd"),
    "diff": _kind("fuzz_diff", "try_diff"),
    "textfile": _kind("fuzz_textfile", "try_textfile"),
    "state": _kind("fuzz_state", "try_state"),
    "fix-script": _kind("fuzz_fix_script", "try_fix_script"),
    "fix-apply": _kind("fuzz_fix_apply", "try_fix_apply"),
    "fix-revert": _kind("fuzz_fix_revert", "try_fix_revert"),
}


def try_one(kind: str, base: Path, rng: random.Random, out: Outside, n: int,
            bound_s: float, runner: Callable[[list[str], float, Path], Run] = run_forked,
            evaluate_share: float = 0.3) -> list[Tried]:
    """Make one input of ``kind``, run llm-doctor on it, check the run; cleans up after."""
    work = base / f"in-{n}"
    work.mkdir()
    try:
        return TRIERS[kind](base, work, rng, out, n, bound_s, runner, evaluate_share)
    finally:
        unblock_fifos(work)
        shutil.rmtree(work, ignore_errors=True)
