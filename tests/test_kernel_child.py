"""A micro-kernel's child process: its JSON result, or a MeasurementError naming it, and on
timeout the child is killed with everything it started."""

from __future__ import annotations

import os
import sys
import time

import pytest

from doctor.seam.host import MeasurementError
from probes.helpers.kernel_child import run_json, run_kernel


def test_a_kernel_result_is_its_json_object():
    code = "import json; print(json.dumps({'gbps': 12.5}))"
    assert run_json([sys.executable, "-c", code], "t", 20) == {"gbps": 12.5}


@pytest.mark.parametrize("code, words", [
    ("import sys; sys.exit('no CUDA device')", "t: no CUDA device"),
    ("print('not json')", "t: its output is not JSON"),
    ("print('[1, 2]')", "t: its output is a JSON list, not an object"),
])
def test_a_failed_kernel_is_a_measurement_error_naming_it(code, words):
    with pytest.raises(MeasurementError, match=words.replace("(", r"\(")):
        run_json([sys.executable, "-c", code], "t", 20)


def test_an_unknown_kernel_says_so():
    with pytest.raises(MeasurementError, match="no_such_kernel: .*No module named"):
        run_kernel("no_such_kernel", timeout_s=20)


@pytest.mark.slow
def test_a_hung_kernel_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = ("import os, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            f"    open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60); os._exit(0)\n"
            "time.sleep(60)\n")
    # killed at its 1 s, as the error says, not at the end of its 60 s sleep
    with pytest.raises(MeasurementError, match=r"t: no result in 1 s \(killed\)"):
        run_json([sys.executable, "-c", code], "t", 1)
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the kernel's child {grandchild} outlived the timeout")


def test_a_kernel_that_cannot_start_says_why(tmp_path):
    missing = str(tmp_path / "no-python")
    with pytest.raises(MeasurementError, match="t: cannot start .*no-python"):
        run_json([missing, "-c", "pass"], "t", 20)
