"""fix's dry run changes nothing; --apply --root writes the files, a second --apply changes
nothing, --revert puts the tree back byte for byte; the script passes sh -n and shellcheck."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import FIXTURE_HOSTS, REPO, run_cli

HOST = str(FIXTURE_HOSTS / "fix-epyc-9654-vllm-systemd")
FILES = ["etc/sysctl.d/60-llm-doctor-network-backlog-small.conf",
         "etc/sysctl.d/60-llm-doctor-swap-swappiness-high.conf",
         "etc/systemd/system/vllm.service.d/llm-doctor.conf"]


def _tree(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under ``root``: its bytes (None for a folder) and mode."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            out[rel] = (None if path.is_dir() else path.read_bytes(), path.lstat().st_mode)
    return out


@pytest.fixture
def root(tmp_path):
    """A small /etc with a sysctl.d of the distribution's and a unit folder of its own."""
    root = tmp_path / "root"
    (root / "etc/sysctl.d").mkdir(parents=True)
    (root / "etc/sysctl.d/99-sysctl.conf").write_text("# the distribution's\nkernel.panic = 10\n")
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/vllm.service").write_text("[Service]\nExecStart=/usr/bin/python3 -m vllm\n")
    return root


@pytest.mark.slow
def test_dry_run_changes_nothing(root, tmp_path):
    before = _tree(root)
    for fmt in ("sh", "json", "markdown"):
        done = run_cli("fix", "--replay", HOST, "--root", str(root), "--format", fmt,
                       "--plans-dir", str(tmp_path / "plans"))
        assert done.returncode == 0, done.stderr
    script = tmp_path / "plan.sh"
    done = run_cli("fix", "--replay", HOST, "-o", str(script))
    assert done.returncode == 0, done.stderr
    ran = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "net.core.somaxconn" in ran.stdout and "dry run: nothing changed" in ran.stdout
    assert _tree(root) == before and not (tmp_path / "plans").exists()


@pytest.mark.slow
def test_apply_is_idempotent_and_revert_restores_the_tree(root, tmp_path):
    before = _tree(root)
    plans = tmp_path / "plans"
    first = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(plans))
    assert first.returncode == 0, first.stderr
    assert "01-fd-limit-low: applied (1 command(s) not run under --root)" in first.stdout
    assert "02-gpu-memory-no-headroom: shown" in first.stdout
    assert "live setting(s) left alone under --root" in first.stdout
    for rel in FILES:
        assert (root / rel).read_text().startswith("# Written by llm-doctor fix on ")
    assert (root / FILES[2]).read_text().endswith("[Service]\nLimitNOFILE=1048576\n")
    applied = _tree(root)
    second = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(plans))
    assert second.returncode == 0, second.stderr
    assert "applied" not in second.stdout.replace("shown (not applied", "")
    assert _tree(root) == applied
    plan_id = first.stdout.split()[1].rstrip(":")
    back = run_cli("fix", "--revert", plan_id, "--plans-dir", str(plans))
    assert back.returncode == 0, back.stderr
    assert _tree(root) == before  # the drop-in's folder, made by the plan, is gone too
    again = run_cli("fix", "--revert", plan_id, "--plans-dir", str(plans))
    assert again.returncode == 3 and "reverted already" in again.stderr


@pytest.mark.slow
def test_revert_puts_back_a_file_it_replaced(root, tmp_path):
    own = root / FILES[0]
    own.write_text("net.core.somaxconn = 2048\n")
    os.chmod(own, 0o640)
    before = _tree(root)
    plans = tmp_path / "plans"
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(plans),
                   "--only", "network-backlog-small")
    assert done.returncode == 0, done.stderr
    assert own.read_text().endswith("net.core.somaxconn = 4096\nnet.ipv4.tcp_max_syn_backlog = 4096\n")
    back = run_cli("fix", "--revert", done.stdout.split()[1].rstrip(":"), "--plans-dir", str(plans))
    assert back.returncode == 0, back.stderr
    assert _tree(root) == before


@pytest.mark.slow
def test_a_failing_step_stops_the_plan_and_the_applied_ones_revert(root, tmp_path):
    (root / FILES[0]).mkdir()  # where the fourth step writes its file: a folder, not llm-doctor's
    before = _tree(root)
    plans = tmp_path / "plans"
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(plans))
    assert done.returncode == 1
    assert "not a regular file" in done.stdout
    assert "04-network-backlog-small: failed" in done.stdout and "05-" not in done.stdout
    back = run_cli("fix", "--revert", done.stdout.split()[1].rstrip(":"), "--plans-dir", str(plans))
    assert back.returncode == 0, back.stderr
    assert _tree(root) == before


@pytest.mark.slow
@pytest.mark.parametrize("host", ["fix-epyc-9654-vllm-systemd", "xeon-gold-6338-2socket-powersave",
                                  "rtx4090-2x-consumer", "l40s-8x-acs-redirect", "l40s-2socket-no-dev-char"])
def test_the_script_passes_sh_n_and_shellcheck_and_the_json_its_schema(host, tmp_path):
    script = tmp_path / "plan.sh"
    done = run_cli("fix", "--replay", str(FIXTURE_HOSTS / host), "-o", str(script))
    assert done.returncode == 0, done.stderr
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is missing (.ci/run installs it)")
    else:
        checked = subprocess.run([shellcheck, "-s", "sh", str(script)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout
    plan = run_cli("fix", "--replay", str(FIXTURE_HOSTS / host), "--format", "json")
    jsonschema.validate(json.loads(plan.stdout), json.loads((REPO / "docs/fix-plan-schema.json").read_text()))


@pytest.mark.parametrize("args, words", [
    (["--apply"], "add --root DIR"),
    (["--revert", "20261201T194100Z-abcdef"], "takes no --apply, --replay or --from"),
    (["--live"], "--live goes with --root"),
    (["--only", "no-such-rule"], "no such rule"),
])
def test_bad_uses_are_one_line_and_exit_3(args, words):
    done = run_cli("fix", "--replay", HOST, *args)
    assert done.returncode == 3 and words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_revert_of_an_unknown_plan_or_not_a_plan_id(tmp_path):
    done = run_cli("fix", "--revert", "20261201T194100Z-abcdef", "--plans-dir", str(tmp_path))
    assert done.returncode == 3 and "no such plan" in done.stderr
    done = run_cli("fix", "--revert", "../../etc", "--plans-dir", str(tmp_path))
    assert done.returncode == 3 and "not a plan id" in done.stderr
