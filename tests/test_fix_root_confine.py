"""``fix --apply --root R`` writes under R and nowhere else: a folder under R that is a
symbolic link out is refused by name (never written through), so is a link at the target,
a path with ``..`` or of a shape the catalogue never writes; the outside folder is walked
before and after to prove nothing there changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from doctor.fix import confine
from doctor.fix.apply import FixError, apply_plan
from doctor.fix.model import FileWrite, Kind, Plan, Risk, Step
from tests.conftest import FIXTURE_HOSTS, run_cli

HOST = str(FIXTURE_HOSTS / "fix-epyc-9654-vllm-systemd")


def _tree(top: Path) -> dict[str, tuple[bytes | None, int]]:
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(dirpath) / name
            out[str(path.relative_to(top))] = (None if path.is_dir() or path.is_symlink() else path.read_bytes(),
                                               path.lstat().st_mode)
    return out


@pytest.fixture
def place(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "etc/systemd/system").mkdir(parents=True)
    (outside / "sysctl.d").mkdir(parents=True)
    (outside / "sysctl.d/99-theirs.conf").write_text("kernel.panic = 10\n")
    return root, outside, tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("link", ["etc/sysctl.d", "etc/systemd/system/vllm.service.d", "etc/security"])
def test_a_folder_under_the_root_that_links_out_is_never_written_through(place, link):
    root, outside, tmp = place
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(outside / "sysctl.d")
    before = _tree(outside)
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(tmp / "plans"))
    assert "Traceback" not in done.stderr
    assert _tree(outside) == before
    if link != "etc/security":  # the fixture's plan writes nothing under /etc/security
        assert done.returncode == 1 and "a symbolic link where a folder belongs" in done.stdout, done.stdout


@pytest.mark.slow
def test_the_root_s_etc_a_link_to_the_real_etc_is_refused(place):
    root, outside, tmp = place
    (root / "etc").rename(tmp / "etc-moved")
    (root / "etc").symlink_to(outside)
    before = _tree(outside)
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(tmp / "plans"))
    assert _tree(outside) == before
    assert done.returncode == 1 and f"{root}/etc: refused: a symbolic link" in done.stdout, done.stdout


@pytest.mark.slow
def test_the_default_plans_folder_under_the_root_is_not_made_through_a_link(place):
    root, outside, tmp = place
    (root / "var").symlink_to(outside)
    before = _tree(outside)
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root))
    assert _tree(outside) == before
    assert done.returncode == 3 and "symbolic link" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_link_at_the_target_is_refused(place):
    root, outside, tmp = place
    (root / "etc/sysctl.d").mkdir()
    (root / "etc/sysctl.d/60-llm-doctor-network-backlog-small.conf").symlink_to(outside / "sysctl.d/99-theirs.conf")
    before = _tree(outside)
    done = run_cli("fix", "--replay", HOST, "--apply", "--root", str(root), "--plans-dir", str(tmp / "plans"),
                   "--only", "network-backlog-small")
    assert _tree(outside) == before
    assert done.returncode == 1 and "not a regular file" in done.stdout


@pytest.mark.slow
def test_a_saved_scan_whose_rule_climbs_out_writes_nothing_outside(place):
    """The attack as filed: a rule id with ../ in a saved scan, applied under --root."""
    root, outside, tmp = place
    scan = run_cli("scan", "--replay", HOST, "--format", "json", "--no-progress")
    report = json.loads(scan.stdout)
    for finding in report["findings"]:
        if finding["rule"] == "network-backlog-small":
            finding["rule"] = "../../../../../outside/x"
    saved = tmp / "saved.json"
    saved.write_text(json.dumps(report))
    before = _tree(outside)
    done = run_cli("fix", "--from", str(saved), "--apply", "--root", str(root), "--plans-dir", str(tmp / "plans"))
    assert "Traceback" not in done.stderr
    assert _tree(outside) == before
    assert done.returncode != 0
    assert not any(p.name.startswith("x.conf") for p in tmp.rglob("*"))


def _plan(*paths: str) -> Plan:
    step = Step(id="01-step", rule="r", key="", cause="c", kind=Kind.FILE, risk=Risk.NONE, title="t",
                check="c", verify="v", revert="r", files=tuple(FileWrite(p, "x = 1\n") for p in paths))
    return Plan(id="20261201T194100Z-abcdef", created_at="", host="h", source="s", probes=(), steps=(step,))


@pytest.mark.parametrize("path, words", [
    ("/etc/sysctl.d/60-llm-doctor-../../../outside/x.conf", "'..'"),
    ("/etc/sysctl.d/../cron.d/x", "'..'"),
    ("/etc/sysctl.d//x.conf", "empty part"),
    ("/etc/sysctl.d/./x.conf", "'.'"),
    ("etc/sysctl.d/x.conf", "writes only its own files"),
    ("/etc/cron.d/llm-doctor", "writes only its own files"),
    ("/etc/sysctl.d/a/b.conf", "writes only its own files"),
    ("/etc/systemd/system/vllm.service", "writes only its own files"),
    ("/etc/sysctl.d/x\n* * * * * root sh", "writes only its own files"),
    ("/etc/sysctl.d/x\x00y", "writes only its own files"),
    ("/etc/sysctl.d/.hidden", "writes only its own files"),
])
def test_a_path_of_no_catalogue_shape_refuses_the_plan_before_any_change(place, path, words):
    root, outside, tmp = place
    before = _tree(tmp)
    with pytest.raises(FixError, match="refused") as caught:
        apply_plan(_plan("/etc/sysctl.d/60-llm-doctor-fine.conf", path), tmp / "plans", "{}", root)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert _tree(tmp) == before  # not even the plans folder


@pytest.mark.parametrize("path", ["/etc/sysctl.d/60-llm-doctor-network-backlog-small.conf",
                                  "/etc/security/limits.d/60-llm-doctor.conf",
                                  "/etc/systemd/system/vllm.service.d/llm-doctor.conf",
                                  "/etc/systemd/system/sglang@0.service.d/llm-doctor.conf",
                                  "/etc/udev/rules.d/71-llm-doctor-nvidia-dev-char.rules"])
def test_the_catalogue_s_own_paths_are_accepted(path):
    assert confine.checked(path) == path


def test_created_folders_are_0755_and_files_0644_whatever_the_umask(place):
    root, _, tmp = place
    old = os.umask(0o077)
    try:
        apply_plan(_plan("/etc/systemd/system/vllm.service.d/llm-doctor.conf"), tmp / "plans", "{}", root)
    finally:
        os.umask(old)
    made = root / "etc/systemd/system/vllm.service.d"
    assert oct(made.stat().st_mode & 0o7777) == oct(0o755)
    assert oct((made / "llm-doctor.conf").stat().st_mode & 0o7777) == oct(0o644)
