"""The command line in Chinese: every command's help, click's own errors, the language chosen
by --lang, LLM_DOCTOR_LANG or the locale, and the fleet adapters (npd, slurm-healthcheck).

Most run the real entry point (``doctor.commands.cli.main``, as the console script does:
the language is chosen before click parses) in this process; one runs it as a process.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import click
import pytest

from doctor.commands import cli as cli_module
from doctor.commands import lang
from doctor.commands import npd as npd_command
from doctor.commands import slurm as slurm_command
from doctor.commands.click_words import term_len
from doctor.fleet.slurm import Node, decide
from doctor.fleet.verdict import Status, Verdict
from doctor.i18n import Speaking, catalogue, entries, set_lang
from tests.conftest import REPO

HAN = re.compile(r"[\u4e00-\u9fff]")
LOCALE = ("LLM_DOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")
# diff.py and fix.py are another area's (their help has its own catalogue file)
OTHER_AREAS: tuple[str, ...] = ()  # every command's help is translated now


@pytest.fixture(autouse=True)
def english_after(monkeypatch):
    for name in LOCALE:
        monkeypatch.delenv(name, raising=False)
    yield
    set_lang("en")
    lang.translate(cli_module.cli)
    # click keeps each command's --help option once made, its help in the language of then
    # (one language per process in real runs; here the next test may speak another)
    for command in [*lang.walk(cli_module.cli), npd_command.npd, slurm_command.slurm_healthcheck]:
        if hasattr(command, "_help_option"):
            command._help_option = None


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``llm-doctor ARGS`` through its entry point, in this process."""
    monkeypatch.setattr(sys, "argv", ["llm-doctor", *args])
    code = 0
    try:
        cli_module.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def command_paths() -> list[tuple[str, ...]]:
    """Every command under the cli group, as the words that name it (``rules export``)."""
    out: list[tuple[str, ...]] = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        for name in sorted(group.commands):
            command = group.commands[name]
            out.append((*path, name))
            if isinstance(command, click.Group):
                walk(command, (*path, name))

    walk(cli_module.cli, ())
    return out


def _find(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli_module.cli
    for word in path:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    return command


def _flat(text: str) -> str:
    return " ".join(text.split())


def _english_helps(command: click.Command) -> list[str]:
    saved = getattr(command, lang._ENGLISH, {})
    texts = [saved.get("help", command.help)]
    for param in command.params:
        if isinstance(param, click.Option):
            texts.append(getattr(param, lang._ENGLISH, {}).get("help", param.help))
    return [inspect.cleandoc(t) for t in texts if t]


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.xfail(p[:1] in [(a,) for a in OTHER_AREAS], strict=False,
                                            reason="its help is another area's catalogue"))
    for p in [(), *command_paths()]], ids=lambda p: " ".join(p) or "llm-doctor")
def test_every_command_help_reads_in_chinese_with_no_english_help_left(monkeypatch, capsys,
                                                                      path):
    code, out, err = run_cli(monkeypatch, capsys, *path, "--help", "--lang", "zh_CN")
    assert code == 0 and err == "", err
    assert out.startswith("用法:") and "选项:" in out and HAN.search(out)
    flat = _flat(out)
    for english in _english_helps(_find(path)):
        # the opening words of every English help: none is left (they would wrap alike)
        opening = " ".join(english.split()[:6])
        assert opening not in flat, (path, english)
    assert "{" + "costs}" not in out and "{requests}" not in out


def test_help_in_chinese_fits_80_columns_and_keeps_the_example_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(monkeypatch, capsys, "--help", "--lang", "zh_CN")
    assert code == 0
    examples = [line for line in out.splitlines() if line.startswith("  llm-doctor scan ")]
    # the column after the commands starts where it does in English (38 columns in)
    assert {term_len(line[:40]) for line in examples if "  " in line[19:]} <= {40}
    for path in [("scan",), ("load",), ("npd",), ("daemon",), ("plan",), ("warmup",),
                 ("slurm-healthcheck",), ("rules", "export")]:
        code, out, _ = run_cli(monkeypatch, capsys, *path, "--help", "--lang", "zh_CN")
        wide = [line for line in out.splitlines() if term_len(line) > 80
                and " " in line.strip()  # a single token longer than the line is not cut
                and not line.lstrip().startswith(("llm-doctor ", "kill "))]
        assert wide == [], wide
    # scan's help carries what its probes send, filled after the lookup
    code, out, _ = run_cli(monkeypatch, capsys, "scan", "--help", "--lang", "zh_CN")
    assert "engine.warmup" in out and "扫描向它找到或指定的每个推理引擎发送的内容" in out
    assert re.search(r"最多 \d+ 个补全请求", _flat(out).replace(" ", " "))


def test_click_errors_read_in_chinese_and_exit_3(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "scan", "--level", "nope", "--lang", "zh_CN")
    assert code == 3 and out == ""
    assert "'--level' 的值无效：'nope' 不在可选值 'quick', 'standard', 'full' 之中。" in err
    assert err.startswith("用法:") and "错误：" in err and "Usage" not in err
    code, _, err = run_cli(monkeypatch, capsys, "scan", "--bogus", "--lang", "zh_CN")
    assert code == 3 and "没有选项 '--bogus'。" in err
    code, _, err = run_cli(monkeypatch, capsys, "capture", "--lang", "zh_CN")
    assert code == 3 and "缺少参数 'DIR'" in err
    code, _, err = run_cli(monkeypatch, capsys, "load", "--endpoint", "http://127.0.0.1:9",
                           "--max-concurrency", "x", "--lang", "zh_CN")
    assert code == 3 and "'x' 不是有效的数值（integer range）" in err
    code, _, err = run_cli(monkeypatch, capsys, "probes", "extra", "--lang", "zh_CN")
    assert code == 3 and "多出了参数（extra）" in err
    code, _, err = run_cli(monkeypatch, capsys, "playbook", "no-such-cause", "--lang", "zh_CN")
    assert code == 3 and "没有原因 'no-such-cause' 的处置手册" in err


def test_the_same_errors_in_english_are_clicks_own(monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "scan", "--level", "nope")
    assert code == 3 and "Invalid value for '--level': 'nope' is not one of 'quick', " in err
    code, _, err = run_cli(monkeypatch, capsys, "scan", "--bogus")
    assert code == 3 and "No such option '--bogus'." in err and err.startswith("Usage:")


@pytest.mark.parametrize("env, chinese", [
    ({"LLM_DOCTOR_LANG": "zh_CN"}, True),
    ({"LANG": "zh_CN.UTF-8"}, True),
    ({"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, True),
    ({"LANG": "fr_FR.UTF-8"}, False),
    ({"LLM_DOCTOR_LANG": "en", "LANG": "zh_CN.UTF-8"}, False),
])
def test_the_environment_picks_the_language(monkeypatch, capsys, env, chinese):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, _ = run_cli(monkeypatch, capsys, "probes", "--help")
    assert code == 0
    assert bool(HAN.search(out)) is chinese
    assert out.startswith("用法:" if chinese else "Usage:")


def test_a_language_llm_doctor_does_not_speak_is_refused_with_exit_3(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "scan", "--lang", "fr")
    assert code == 3 and out == "" and "'fr'" in err
    monkeypatch.setenv("LLM_DOCTOR_LANG", "fr")
    code, _, err = run_cli(monkeypatch, capsys, "probes")
    assert code == 3 and "LLM_DOCTOR_LANG" in err


def test_listings_and_messages_read_in_chinese(monkeypatch, capsys, tmp_path):
    code, out, _ = run_cli(monkeypatch, capsys, "rules", "--lang", "zh_CN")
    assert code == 0 and "  原因 " in out and "    症状：" in out
    assert re.search(r"\[(严重|警告|提示)\]", out)
    code, out, _ = run_cli(monkeypatch, capsys, "probes", "--lang", "zh_CN")
    assert code == 0 and "（级别 quick，超时 " in out and "    读取：" in out
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    code, _, err = run_cli(monkeypatch, capsys, "capture", str(tmp_path / "full"), "--lang",
                           "zh_CN")
    assert code == 3 and "不为空；请换一个新目录，或加 --force" in err
    empty = tmp_path / "empty.toml"
    empty.write_text("# no rules\n")
    code, _, err = run_cli(monkeypatch, capsys, "rules", "check", str(empty), "--lang", "zh_CN")
    assert code == 3 and "没有任何 [[rule]] 表" in err


def _click_msgids() -> set[str]:
    """Every message id click marks with gettext or ngettext (each form of a plural)."""
    out: set[str] = set()
    for path in Path(click.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("_", "ngettext")):
                out |= {a.value for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


def test_clicks_words_have_entries_and_every_entry_is_a_word_of_click():
    ours = {e["en"]: e["zh_CN"] for e in entries("zh_CN") if e["file"] == "click.toml"}
    click_ids = _click_msgids()
    # "required" is looked up as _(extra["required"]), its literal set apart
    assert set(ours) <= click_ids | {"required"}, sorted(set(ours) - click_ids)
    met = {"Usage:", "Options", "Commands", "Show this message and exit.",
           "Show the version and exit.", "Error: {message}", "Try '{command} {option}' for help.",
           "No such option {name!r}.", "No such command {name!r}.", "Missing argument",
           "Missing option", "Invalid value for {param_hint}: {message}",
           "{value!r} is not one of {choices}.", "{value!r} is not {choice}.",
           "{value!r} is not a valid {number_type}.", "{value} is not in the range {range}.",
           "Option {name!r} requires an argument.", "Got unexpected extra argument ({args})",
           "Got unexpected extra arguments ({args})", "Did you mean {possibility}?",
           "(Did you mean one of: {possibilities}?)", "{name} {filename!r} does not exist.",
           "default: {default}", "Aborted!"}
    assert met <= set(ours), sorted(met - set(ours))
    assert all(HAN.search(zh) for zh in ours.values())


def test_npd_answers_in_chinese_and_keeps_its_machine_words(monkeypatch, capsys, tmp_path):
    with pytest.raises(SystemExit) as done:
        npd_command.main(["--lang", "zh_CN"])
    line = capsys.readouterr().out.strip()
    assert done.value.code == 2 and line.startswith("unknown 用法错误：需要 --family")
    assert len(line.encode()) <= 80
    with pytest.raises(SystemExit) as done:
        npd_command.main(["--config", "--lang", "zh_CN"])
    config = json.loads(capsys.readouterr().out)
    assert [c["message"] for c in config["conditions"]][0] == "llm-doctor 未在本节点发现加速卡（GPU、NPU）问题"
    assert [c["type"] for c in config["conditions"]] == [
        "LlmDoctorGPUProblem", "LlmDoctorEngineProblem", "LlmDoctorHostProblem",
        "LlmDoctorNetworkProblem"]
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    with pytest.raises(SystemExit) as done:
        npd_command.main(["--family", "gpu", "--output", "x"])
    assert done.value.code == 2
    assert capsys.readouterr().out.startswith("unknown 用法错误：-o/--output 只能与 --config")


def test_npd_verdicts_in_chinese_fit_its_80_bytes():
    from doctor.daemon.state import State
    from doctor.fleet.npd import judged
    from tests.saved_scans import complete

    finding = {"rule": "gpu-lost", "severity": "critical", "title": "GPU 3 掉卡（XID 79）" * 4}
    state = State("s.json", "", 0.0, 15.0, 3.0, {"gpu-lost": "gpu"},
                  complete({"findings": [finding, finding], "probes": []}))
    with Speaking("zh_CN"):
        code, line = judged(state, "gpu")
    assert code == 1 and line.startswith("gpu-lost 严重：GPU 3 掉卡")
    assert len(line.encode()) <= 80 and line.endswith("…（另有 1 条）")


def test_slurm_healthcheck_speaks_chinese_with_its_lang_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        slurm_command.main(["--state-file", str(tmp_path / "none.json"), "--node", "vm",
                            "--scontrol", str(tmp_path / "no-scontrol"), "--lang", "zh_CN"])
    assert done.value.code == 2
    assert capsys.readouterr().out.startswith("llm-doctor: vm 未变更：unknown ")
    with pytest.raises(SystemExit) as done:
        slurm_command.main(["--mode", "nope", "--lang", "zh_CN"])
    assert done.value.code == 3 and "'--mode' 的值无效" in capsys.readouterr().err


def test_slurm_actions_in_chinese_keep_the_reason_machine_readable():
    from tests.saved_scans import finding_of

    finding = finding_of({"rule": "gpu-lost", "severity": "critical", "title": "GPU 3 掉卡"})
    verdict = Verdict(Status.PROBLEM, "gpu-lost 严重：GPU 3 掉卡", finding, [finding])
    with Speaking("zh_CN"):
        action = decide(verdict, Node("vm", "IDLE", ""))
        other = decide(verdict, Node("vm", "IDLE+DRAIN", "maintenance"))
    assert action.update[3] == "Reason=llm-doctor: gpu-lost GPU 3 掉卡"
    assert action.says == "vm 已置为 drain：gpu-lost 严重：GPU 3 掉卡"
    assert other.update == () and other.says.startswith("vm 未做改动，已被他人置为 IDLE+DRAIN")


@pytest.mark.slow
def test_as_a_process_the_locale_speaks_chinese_and_the_light_path_too(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LANG": "zh_CN.UTF-8"}
    bad = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--level", "nope"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 3 and "'--level' 的值无效" in bad.stderr, bad
    npd = subprocess.run([sys.executable, "-m", "doctor.commands.entry", "npd", "--family",
                          "gpu", "--state-file", str(tmp_path / "none.json"), "--lang", "zh_CN",
                          "--min-severity", "nope"],
                         cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert npd.returncode == 2 and npd.stdout.startswith("unknown 用法错误："), npd


def test_every_message_of_the_area_has_a_chinese_entry():
    from tests.i18n_scan import help_problems, problems

    area = ["doctor/commands/" + p.name for p in (REPO / "doctor" / "commands").glob("*.py")
            if p.name not in ("lang.py", "diff.py", "fix.py")] + ["doctor/fleet"]
    assert problems(area) == []
    assert [p for p in help_problems()
            if not p.startswith(tuple(f"help of {c} " for c in OTHER_AREAS))] == []
    zh = catalogue("zh_CN")
    assert all(unicodedata.category(c)[0] != "C" or c in "\n\t\b"
               for e in entries("zh_CN") if e["file"] in ("cli.toml", "fleet.toml")
               for c in zh[e["en"]])
