"""Live, as root, in a network namespace of the test's own: net.core.somaxconn lowered,
`fix --apply` raises it, the verify scan marks the step fixed, `--revert` brings the old
value back. A network namespace's sysctls are its own: the host's are never touched, and
the namespace's value is put back even when the test fails (the namespace then ends)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

CHILD = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path

    SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
    root, plans = sys.argv[1], sys.argv[2]
    cli = [sys.executable, "-m", "doctor.commands.cli", "fix"]
    out = {"start": SOMAXCONN.read_text()}
    try:
        SOMAXCONN.write_text("128\\n")
        applied = subprocess.run(cli + ["--apply", "--only", "network-backlog-small", "--root", root,
                                        "--live", "--plans-dir", plans],
                                 capture_output=True, text=True, timeout=120)
        out["apply"] = [applied.returncode, applied.stdout, applied.stderr]
        out["after_apply"] = SOMAXCONN.read_text()
        conf = Path(root, "etc/sysctl.d/60-llm-doctor-network-backlog-small.conf")
        out["file_after_apply"] = conf.read_text() if conf.exists() else None
        plan_id = applied.stdout.split()[1].rstrip(":") if applied.stdout else "none"
        reverted = subprocess.run(cli + ["--revert", plan_id, "--plans-dir", plans],
                                  capture_output=True, text=True, timeout=120)
        out["revert"] = [reverted.returncode, reverted.stdout, reverted.stderr]
        out["after_revert"] = SOMAXCONN.read_text()
    finally:
        SOMAXCONN.write_text(out["start"])
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_somaxconn_raised_verified_and_reverted_in_a_network_namespace(tmp_path):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the live fix test runs as root (CI runs as root)")
        pytest.skip("needs root for a network namespace of its own")
    host_value = open("/proc/sys/net/core/somaxconn").read()
    (tmp_path / "root").mkdir()
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    done = subprocess.run(["unshare", "--net", "--", sys.executable, str(child), str(tmp_path / "root"),
                           str(tmp_path / "plans")], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    code, stdout, stderr = out["apply"]
    assert code == 0, stderr
    assert "01-network-backlog-small: applied" in stdout
    assert "verify 01-network-backlog-small: fixed" in stdout
    assert out["after_apply"] == "4096\n"
    assert out["file_after_apply"].endswith("\nnet.core.somaxconn = 4096\n") or (
        "net.core.somaxconn = 4096\nnet.ipv4.tcp_max_syn_backlog = 4096\n" in out["file_after_apply"])
    code, stdout, stderr = out["revert"]
    assert code == 0, stderr
    assert "net.core.somaxconn = 128" in stdout
    assert out["after_revert"] == "128\n"
    assert list((tmp_path / "root").iterdir()) == []  # the sysctl.d file and its folders gone
    assert open("/proc/sys/net/core/somaxconn").read() == host_value  # never the host's


SCRIPT_RUN = """set -eu
mount -t tmpfs tmpfs /etc/sysctl.d
start=$(cat /proc/sys/net/core/somaxconn)
trap 'echo "$start" > /proc/sys/net/core/somaxconn' EXIT
echo 128 > /proc/sys/net/core/somaxconn
"$PY" -m doctor.commands.cli fix --only network-backlog-small -o "$WORK/plan.sh"
sh "$WORK/plan.sh" > "$WORK/dry.txt"
cat /proc/sys/net/core/somaxconn > "$WORK/after_dry.txt"
PLAN_DIR="$WORK/saved" sh "$WORK/plan.sh" --apply > "$WORK/apply.txt"
cat /proc/sys/net/core/somaxconn > "$WORK/after_apply.txt"
cp /etc/sysctl.d/60-llm-doctor-network-backlog-small.conf "$WORK/conf.txt"
PLAN_DIR="$WORK/saved" sh "$WORK/plan.sh" --apply > "$WORK/again.txt"
"""


@pytest.mark.slow
def test_the_script_applies_in_namespaces_of_its_own(tmp_path):
    """The script itself, with --apply, in a mount namespace (a tmpfs over /etc/sysctl.d) and
    a network namespace of its own: the dry run changes nothing, --apply writes the file and
    the value (saving the old one), a second --apply finds both in place."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the live fix test runs as root (CI runs as root)")
        pytest.skip("needs root for namespaces of its own")
    done = subprocess.run(["unshare", "--mount", "--net", "--", "sh", "-c", SCRIPT_RUN],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PY": sys.executable, "WORK": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    read = lambda name: (tmp_path / name).read_text()  # noqa: E731
    assert "net.core.somaxconn: 128 -> 4096" in read("dry.txt") and read("after_dry.txt") == "128\n"
    assert "written: /etc/sysctl.d/60-llm-doctor-network-backlog-small.conf" in read("apply.txt")
    assert read("after_apply.txt") == "4096\n" and "net.core.somaxconn = 4096\n" in read("conf.txt")
    assert (tmp_path / "saved/01-network-backlog-small.live1").read_text() == "128\n"
    assert "in place: net.core.somaxconn = 4096" in read("again.txt")
    assert "written:" not in read("again.txt")
