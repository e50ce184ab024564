"""What ``pip install llm-doctor`` puts in site-packages (docs/packaging.md).

The wheel is built from a copy of this checkout by setuptools, offline (no build isolation,
no index), and read as pip would install it: one top-level package, ``llm_doctor``, holding
doctor/, probes/, reports/, checks/ and playbooks/ with their data files; no generic name
beside it. The console script pip writes is then run from the unpacked wheel, with another
distribution's ``reports`` on the path: llm-doctor's process uses its own, and that
``reports`` stays what it was for everyone else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from doctor._toml import tomllib
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # builds a wheel with pip (seconds)

TOP = ("doctor", "probes", "reports", "checks", "playbooks")
# the data files the code reads at run time, by the folder that holds them
DATA = ("checks/*.toml", "checks/zh_CN/*.toml", "playbooks/*.md", "doctor/i18n/zh_CN/*.toml",
        "reports/templates/*")


def _tree_packages() -> set[str]:
    return {".".join(p.parent.relative_to(REPO).parts)
            for top in TOP for p in (REPO / top).rglob("__init__.py") if "__pycache__" not in p.parts}


def test_every_package_folder_of_the_tree_is_listed_for_the_wheel():
    """setuptools' find cannot put a prefix on the names, so pyproject lists them: a folder
    added to the tree and not to the list would be missing from every installed copy."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"llm_doctor": "."}
    listed = {p.removeprefix("llm_doctor.") for p in config["packages"]}
    assert all(p.startswith("llm_doctor.") for p in config["packages"])
    assert listed == _tree_packages(), "pyproject.toml [tool.setuptools] packages"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built offline from a copy (setuptools writes build/ and
    an egg-info beside the sources, which are not ours to litter)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for top in TOP:
        shutil.copytree(REPO / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(work / "dist"), str(source)],
                          capture_output=True, text=True, timeout=300, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = (work / "dist").glob("llm_doctor-*.whl")
    return built


def test_the_wheel_holds_one_top_level_name_and_every_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"llm_doctor"}
    inside = {n.removeprefix("llm_doctor/") for n in names if n.startswith("llm_doctor/")}
    for top in TOP:  # every module and data file of the tree, under llm_doctor/
        for path in (REPO / top).rglob("*.py"):
            if "__pycache__" not in path.parts:
                assert str(path.relative_to(REPO)) in inside
    for pattern in DATA:
        found = sorted(REPO.glob(pattern))
        assert found, pattern
        for path in found:
            assert str(path.relative_to(REPO)) in inside, f"{path} is not in the wheel"


def test_the_console_script_names_the_launcher(wheel):
    with zipfile.ZipFile(wheel) as zf:
        [entry] = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(entry).decode()
    assert "llm-doctor = llm_doctor.doctor.commands.entry:main" in text


def _console_script(site: Path, *args: str, env: dict[str, str], cwd: Path):
    """What pip's ``llm-doctor`` script runs, with ``site`` as site-packages."""
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv = ['llm-doctor', *{list(args)!r}]\n"
            "from llm_doctor.doctor.commands.entry import main\nsys.exit(main())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd, stdin=subprocess.DEVNULL)


def test_installed_beside_another_reports_each_keeps_its_own(wheel, tmp_path):
    site = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(site)  # what pip install does with a pure wheel
    (site / "reports").mkdir()  # another distribution's package of the same name
    (site / "reports" / "__init__.py").write_text("WHO = 'the other reports'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the checkout on PYTHONPATH too: the launcher must still put the installed copy first
    env_repo = {**env, "PYTHONPATH": str(REPO)}

    rules = _console_script(site, "rules", env=env_repo, cwd=tmp_path)
    assert rules.returncode == 0, rules.stderr[-2000:]
    assert "engine-unreachable  [critical]" in rules.stdout  # checks/*.toml found
    zh = _console_script(site, "--lang", "zh_CN", "playbook", "cpu-contention", env=env, cwd=tmp_path)
    assert zh.returncode == 0, zh.stderr[-2000:]
    assert "CPU" in zh.stdout and "含义" in zh.stdout  # the Chinese playbook and headings
    probe = ("import sys; sys.path.insert(0, {site!r}); sys.argv = ['llm-doctor']\n"
             "from llm_doctor.doctor.commands import entry; entry.own_packages_first()\n"
             "import os, checks, doctor, playbooks, probes, reports\n"
             "print(os.environ.get('PYTHONPATH', ''))\n"
             "for m in (checks, doctor, playbooks, probes, reports): print(m.__file__)\n"
             "import subprocess  # a kernel's child: python -m probes.kernels.NAME\n"
             "from probes.helpers.kernel_child import kernel_env\n"
             "print(subprocess.run([sys.executable, '-c', 'import probes; print(probes.__file__)'],\n"
             "                     capture_output=True, text=True, timeout=60,\n"
             "                     env=kernel_env()).stdout.strip())\n")
    inside = subprocess.run([sys.executable, "-c", probe.format(site=str(site))], capture_output=True,
                            text=True, timeout=60, env=env, cwd=tmp_path)
    assert inside.returncode == 0, inside.stderr
    pythonpath, *where, child = inside.stdout.splitlines()
    assert where == [str(site / "llm_doctor" / top / "__init__.py") for top in sorted(TOP)]
    assert child == str(site / "llm_doctor" / "probes" / "__init__.py")
    # only the kernels' children are given the installed copy: this process's environment,
    # which a fix plan's commands or an engine inherit, is left as it was
    assert str(site / "llm_doctor") not in pythonpath.split(os.pathsep)

    outside = subprocess.run([sys.executable, "-c", "import reports; print(reports.WHO)"],
                             capture_output=True, text=True, timeout=60, env={**env, "PYTHONPATH": str(site)},
                             cwd=tmp_path)
    assert outside.stdout.strip() == "the other reports", outside.stderr
    assert not (site / "doctor").exists() and not (site / "checks").exists()
