"""Running a micro-kernel (probes/kernels/) in a child process, for every probe the same way.

A kernel runs as ``python -m probes.kernels.NAME ARGS`` and prints one JSON object: the
scan's own process stays free of CUDA, torch threads and the kernel's memory. The child
gets a session of its own, so that on timeout it is killed with everything it started (a
hung NCCL or a CUDA context in a grandchild ignores Python timeouts); its output is bounded.
Every failure is a ``MeasurementError`` naming the kernel: timeout, a non-zero exit with
the end of its stderr, or output that is not one JSON object.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from doctor.seam.host import MeasurementError

MAX_OUTPUT_BYTES = 4 << 20  # a kernel's JSON is a few KiB
# the folder that holds probes/ (the checkout, or site-packages/llm_doctor installed:
# docs/packaging.md): a kernel's child must import this copy, and only a kernel is told so
CODE_ROOT = str(Path(__file__).resolve().parents[2])


def kernel_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with CODE_ROOT first on PYTHONPATH, for the
    ``python -m probes.kernels.NAME`` children; nothing else llm-doctor starts (a fix
    plan's commands, an engine) is given llm-doctor's packages."""
    env = dict(os.environ if base is None else base)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != CODE_ROOT]
    env["PYTHONPATH"] = os.pathsep.join([CODE_ROOT, *kept])
    return env


def run_kernel(module: str, *args: str, timeout_s: float) -> dict[str, Any]:
    """The JSON object printed by ``probes.kernels.<module>``; raises MeasurementError."""
    return run_json([sys.executable, "-m", f"probes.kernels.{module}", *args], module, timeout_s)


def run_json(argv: list[str], module: str, timeout_s: float) -> dict[str, Any]:
    """``argv`` run in a session of its own, its JSON object returned (see the module)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=kernel_env())
    except OSError as exc:  # the interpreter cannot be started by this user, no memory, ...
        raise MeasurementError(f"{module}: cannot start {argv[0]}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise MeasurementError(f"{module}: no result in {timeout_s:g} s (killed)") from None
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    finally:
        _kill_group(proc)  # whatever the kernel left running in its session
    stderr = err[-4096:].decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        raise MeasurementError(f"{module}: {stderr[-300:] or f'exited {proc.returncode}'}")
    if len(out) > MAX_OUTPUT_BYTES:
        raise MeasurementError(f"{module}: printed {len(out):,} bytes, not one JSON result")
    try:
        data = json.loads(out)
    except ValueError:
        raise MeasurementError(f"{module}: its output is not JSON: {out[:120]!r}") from None
    if not isinstance(data, dict):
        raise MeasurementError(f"{module}: its output is a JSON {type(data).__name__}, not an object")
    return data


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
