"""Every TOML text llm-doctor reads (rule files, the config, its [daemon] table, recorded
hosts' host.toml) goes through doctor/tomlfile.py's ``parse``, which bounds keys' parts and
nesting before tomllib sees the text: a dotted key of 40,000 parts (an 80 KB file, whose
parse grows with the square of its parts until memory runs out) is refused in milliseconds,
naming the file and line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from doctor._toml import tomllib
from doctor.config import ConfigError, load_config
from doctor.daemon.settings import load_settings
from doctor.seam.recorded import RecordedHost, RecordedHostError
from probes.registry import by_name
from doctor.rules.loader import RuleError, load_file
from doctor.tomlfile import MAX_DEPTH, MAX_KEY_PARTS, check_shape, parse
from tests.conftest import FIXTURE_HOSTS, REPO

PARTS = 40_000
DOTTED = "a" + ".a" * (PARTS - 1)  # 80 KB
HOSTILE = {  # name: (text, line of the key, what the message says)
    "dotted key": (f"# site\n\n{DOTTED} = 1\n", 3, "a dotted key or [table] name of more than 8 parts"),
    "quoted parts": ("\n" + '"a".' * PARTS + '"a" = 1\n', 2, "of more than 8 parts"),
    "table header": (f"[{DOTTED}]\n", 1, "of more than 8 parts"),
    "array of tables": (f"x = 1\n[[{DOTTED}]]\n", 2, "of more than 8 parts"),
    "key in an inline table": (f"x = {{{DOTTED} = 1}}\n", 1, "of more than 8 parts"),
    "inline tables": ("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", 1, "nested too deeply"),
    "arrays": ("\nx = " + "[" * 5000 + "]" * 5000 + "\n", 2, "nested too deeply"),
    "header and keys": ("[a.b.c.d.e.f.g.h]\n" + "a.b.c.d.e.f.g.h = {x = [1]}\n", 2, "nested too deeply"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_key_of_many_parts_or_deep_nesting_is_refused_in_milliseconds(tmp_path, name):
    text, line, message = HOSTILE[name]
    path = tmp_path / "x.toml"
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        parse(text, path, ConfigError)
    assert time.perf_counter() - started < 0.5  # ~1 ms; tomllib took minutes and gigabytes
    assert str(err.value).startswith(f"{path}:{line}: ") and message in str(err.value)


def test_the_bounds_are_what_the_names_say():
    assert check_shape("a" + ".a" * (MAX_KEY_PARTS - 1) + " = 1\n") is None
    assert check_shape("a" + ".a" * MAX_KEY_PARTS + " = 1\n") is not None
    assert check_shape("x = " + "[" * MAX_DEPTH + "]" * MAX_DEPTH) is None
    assert check_shape("x = " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)) is not None


VALID = [
    'a = "x.y.z[{" # [[ a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r\n',
    'a = """\n.[.[.[.{\n""" \nb = 1\n',
    "a = '''\n.]]]]]......\n'''\n",
    'a = """x""""\nb.c = 2\n',
    'x = "a\\"." \n y.z = 1\n',
    '"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s" = 1\n',
    "[paths.'/a/b.c/d.e/f.g/h.i/j.k/l.m']\ndevice = \"8:0\"\n",
    'a."b.c".d = 1\n[x."y.z"]\nq = [[1, 2], [3.5, {a.b = 1}]]\n',
    "d = 1979-05-27T07:32:00.999999\nf = [1.5, 2.5, 3e10, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]\n",
    '[[rule]]\nid = "x"\n[rule.params]\nq = [1,\n  2,\n  # c [ [ [\n  3]\n',
]


@pytest.mark.parametrize("text", VALID, ids=range(len(VALID)))
def test_dots_and_brackets_in_strings_comments_and_numbers_do_not_count(tmp_path, text):
    assert parse(text, tmp_path / "x.toml", ConfigError) == tomllib.loads(text)


def _toml_files() -> list[Path]:
    """Every .toml of the repository: the ones git tracks, and those of the recorded hosts
    built at test time (host.toml, expected.toml at each host's top). Walking the tree took
    13-23 s: the built hosts hold tens of thousands of sysfs files, .venv all of torch's."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.toml"], cwd=REPO,
                            capture_output=True, timeout=60, check=True).stdout
    tracked = [REPO / os.fsdecode(name) for name in listed.split(b"\0") if name]
    return sorted({*tracked, *FIXTURE_HOSTS.glob("*/*.toml")})


@pytest.mark.slow
def test_every_toml_file_in_the_repository_passes():
    files = _toml_files()
    assert len(files) > 50
    for path in files:
        assert check_shape(path.read_text()) is None, path


def test_an_integer_of_thousands_of_digits_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"x.toml:2: not valid TOML: an integer of thousands"):
        parse("a = 1\nb = " + "9" * 5000 + "\n", tmp_path / "x.toml", ConfigError)


# --- every file that is TOML goes through it ----------------------------------------

def _hostile(tmp_path: Path, name: str, before: str = "") -> Path:
    path = tmp_path / name
    path.write_text(f"{before}{DOTTED} = 1\n")
    return path


def test_a_rule_file(tmp_path):
    path = _hostile(tmp_path, "rules.toml", "format = 1\n")
    with pytest.raises(RuleError, match=re.escape(f"{path}:2: a dotted key")):
        load_file(path, by_name())


def test_the_config_and_its_daemon_table(tmp_path):
    path = _hostile(tmp_path, "llm-doctor.toml", "[daemon]\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2: a dotted key")):
        load_config(path)
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2: a dotted key")):
        load_settings(path)


def test_a_recorded_hosts_host_toml(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "this-vm-epyc-2cpu", root, symlinks=True)
    manifest = root / "host.toml"
    manifest.write_text(manifest.read_text() + f"\n[{DOTTED}]\n")
    started = time.perf_counter()
    with pytest.raises(RecordedHostError, match=re.escape(f"{manifest}:") + r"\d+: a dotted key"):
        RecordedHost(root)
    assert time.perf_counter() - started < 1.0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_through_the_command_line_exit_3_quickly(tmp_path, cli):
    rules = _hostile(tmp_path, "rules.toml")
    config = _hostile(tmp_path, "c.toml")
    for argv, path in ((("rules", "check", str(rules)), rules), (("rules", "--config", str(config)), config)):
        started = time.perf_counter()
        result = cli(*argv)
        assert time.perf_counter() - started < 30  # an interpreter's start on a shared machine
        assert result.returncode == 3 and f"{path}:1: a dotted key" in result.stderr
        assert "Traceback" not in result.stderr


def test_no_module_hands_text_to_tomllib_but_tomlfile():
    """The bound holds only if every TOML text goes through doctor.tomlfile.parse. The one
    other reader is doctor/i18n's, of the catalogues installed with llm-doctor (package data,
    never a user's file; tomlfile's own messages are translated, so it cannot use tomlfile)."""
    calls = []
    for folder in ("doctor", "probes", "reports", "checks", "playbooks"):
        for path in (REPO / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\btomllib\.loads?\(", line) and path != REPO / "doctor/i18n/__init__.py":
                    calls.append(f"{path.relative_to(REPO)}:{number}")
    assert calls == ["doctor/tomlfile.py:" + str(_line_of_loads())], calls


def _line_of_loads() -> int:
    text = (REPO / "doctor" / "tomlfile.py").read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if "tomllib.loads(" in line)
