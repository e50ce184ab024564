"""Secrets stay out of every output: masking rules, its properties, and live processes.

The live test plants secrets in the command line and the environment of a process that
presents itself as llama-server (an engine) and of a plain Python process (not an engine),
then greps every output format and every file of a capture for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doctor.redact import (
    program_only,
    redact_cmdline,
    redact_data,
    redact_environ,
    redact_text,
    safe_display,
    secret_name,
)
from probes.host.cpu_load import kept_cmdline

MASKED = [
    # (command line, what it must become): each spelling the issue names, both forms
    ("llama-server --api-key=abc -m x", "llama-server --api-key=*** -m x"),
    ("vllm serve m --api-key sk-1 --port 1", "vllm serve m --api-key *** --port 1"),
    ("x --api_key K --apikey K --key K -k K", "x --api_key *** --apikey *** --key *** -k ***"),
    ("x --api_key=K --apikey=K --key=K -k=K", "x --api_key=*** --apikey=*** --key=*** -k=***"),
    ("x --token T --hf-token=T --password P --secret S", "x --token *** --hf-token=*** --password *** --secret ***"),
    ("x --db-passwd P --aws-credentials C --client-secret S --openai-api-key K",
     "x --db-passwd *** --aws-credentials *** --client-secret *** --openai-api-key ***"),
    ("x --authToken T", "x --authToken ***"),
    ("x HF_TOKEN=hf_abc OPENAI_API_KEY=sk AWS_SECRET_ACCESS_KEY=a KEY=k DB_PASSWORD=p",
     "x HF_TOKEN=*** OPENAI_API_KEY=*** AWS_SECRET_ACCESS_KEY=*** KEY=*** DB_PASSWORD=***"),
    ("curl -H Authorization: Bearer eyJhbGc http://h", "curl -H Authorization: Bearer *** http://h"),
    ("curl -H Authorization:Basic dXNlcg== http://h", "curl -H Authorization:Basic *** http://h"),
    ("x Bearer eyJhbGc y", "x Bearer *** y"),
    ("x -H X-Api-Key: k1 -H x-auth-token:k2", "x -H X-Api-Key: *** -H x-auth-token:***"),
    ("x --dsn postgres://app:PW@db/x", "x --dsn postgres://app:***@db/x"),
    ("git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r",
     "git clone https://***@github.com/o/r"),
    ("pip install git+https://hf_abcdefgh@hf.co/x git+https://0123456789abcdefABCDEF@h/x",
     "pip install git+https://***@hf.co/x git+https://***@h/x"),
    ("x --dsn=redis://:PW@db:6379/0 amqp://u:p:w@h", "x --dsn=redis://:***@db:6379/0 amqp://u:***@h"),
    ("docker run -e HF_TOKEN=t --env=OPENAI_API_KEY=k img", "docker run -e HF_TOKEN=*** --env=OPENAI_API_KEY=*** img"),
    ('sh -c HF_TOKEN="a b c" x', "sh -c HF_TOKEN=*** *** *** x"),
    ("x\0--api-key\0sk-1\0--port\0008000\0", "x\0--api-key\0***\0--port\0008000\0"),
    ("vllm serve m --hf-token --port 8000", "vllm serve m --hf-token --port 8000"),  # bare flag
]

KEPT = [  # what must stay readable: engines' tuning flags and ordinary words
    "vllm serve m --max-num-batched-tokens 8192 --max-tokens 5 --tokenizer t",
    "x TOKENIZERS_PARALLELISM=false --ssl-keyfile /k.pem --port 8080",
    "x http://host:8080/path https://example.com/a:b@c",
    "git clone ssh://git@github.com/o/r https://deploy-bot@git.corp/x ftp://first.last@h/",
    "python -m sglang.launch_server --model-path /m --tp 2",
]


@pytest.mark.parametrize("cmdline,expected", MASKED)
def test_secret_values_are_masked(cmdline, expected):
    assert redact_cmdline(cmdline) == expected
    assert redact_text(cmdline) == expected


@pytest.mark.parametrize("cmdline", KEPT)
def test_ordinary_arguments_stay(cmdline):
    assert redact_cmdline(cmdline) == cmdline


def test_secret_names():
    for name in ("api-key", "api_key", "apikey", "APIKEY", "hf-token", "HF_TOKEN", "key",
                 "secret", "passwd", "credentials", "Authorization", "x-api-key"):
        assert secret_name(name), name
    for name in ("max-tokens", "tokenizer", "TOKENIZERS_PARALLELISM", "ssl-keyfile", "port",
                 "model", "author", "PATH", "PWD"):
        assert not secret_name(name), name


def test_program_only_keeps_the_program_name():
    assert program_only("/usr/bin/python3\0-c\0x --dsn postgres://a:PW@h\0") == "/usr/bin/python3\0"
    assert program_only("python -c x") == "python"
    assert program_only("") == ""
    assert program_only("HF_TOKEN=abc") == "HF_TOKEN=***"  # a process may retitle itself
    assert program_only("postgres: app secret-db 10.0.0.1(5432) idle\0\0") == "postgres:\0"


def test_an_environment_keeps_names_only():
    assert redact_environ("HF_TOKEN=hf_x\0PATH=/bin\0EMPTY=\0") == "HF_TOKEN=***\0PATH=***\0EMPTY=***\0"
    assert redact_environ("") == ""


def test_cpu_load_keeps_engines_masked_and_others_as_their_program():
    assert kept_cmdline("/usr/bin/python3 -c x --dsn postgres://a:PW@h/x") == "/usr/bin/python3"
    assert kept_cmdline("llama-server --api-key K -m /m") == "llama-server --api-key *** -m /m"


def test_safe_display_escapes_control_characters():
    assert safe_display("host\x1b]0;owned\x07\x1b[2J") == "host\\x1b]0;owned\\x07\\x1b[2J"
    assert safe_display("a\nb\rc\td\x9b\u202e\ud800") == "a\\nb\\rc\\td\\x9b\\u202e\\ud800"
    assert safe_display("ordinary text: é, 中文, ×") == "ordinary text: é, 中文, ×"


@pytest.mark.slow
@pytest.mark.timeout(60)  # a guard against a quadratic return, not a speed target
def test_masking_is_linear_on_huge_command_lines():
    """30,000 --token arguments took about 5 minutes with the old regular expression
    (benchmarks/redaction.py prints the figures)."""
    line = "vllm serve m " + "--token x " * 30_000
    assert redact_cmdline(line).count("***") == 30_000
    assert redact_cmdline("--token=" + "a" * 1_000_000) == "--token=***"
    assert redact_cmdline("x://" * 300_000).endswith("x://")
    # the quoted and JSON-in-text forms: a quote left open, escapes, names chained as values
    assert redact_text('{"api_key": "x"}, ' * 30_000).count("***") == 30_000
    assert redact_text('HF_TOKEN="' + '\\"' * 300_000) == "HF_TOKEN=***"
    assert redact_text("--token a\"b " * 30_000).count("***") >= 1
    assert redact_text("key: " * 100_000) == "key: " * 100_000
    assert redact_text("Bearer " * 100_000) == "Bearer " * 100_000


# --- the value next to a name, whatever punctuation stands around (issue 12) ---------------

WRAPPED = [
    ('"HF_TOKEN=hf_x"', '"HF_TOKEN=***"'),
    ("(--api-key x)", "(--api-key ***)"),
    ('{"id": "--api-key sk-X"}', '{"id": "--api-key ***"}'),
    ('["--api-key","sk-1"]', '["--api-key",***]'),
    ("['--api-key', 'sk-1'] and more", "['--api-key', ***] and more"),
    ('{"api_key": "sk-3"}', '{"api_key": ***}'),
    ('headers={"Authorization":"Bearer sk-5"}', 'headers={"Authorization":"Bearer ***"}'),
    ("'Authorization: Bearer abc'", "'Authorization: Bearer ***'"),
    ("<--token abc>, [HF_TOKEN=t] {OPENAI_API_KEY=k};", "<--token ***>, [HF_TOKEN=***] {OPENAI_API_KEY=***};"),
    ('x="OPENAI_API_KEY=sk-4",y', 'x="OPENAI_API_KEY=***",y'),
    ('api_key = "sk 7"', "api_key = *** ***"),  # TOML
    ("api_key: sk-7\nport: 8000", "api_key: ***\nport: 8000"),  # YAML
    ("GET /x?token=abc&y=1 HTTP/1.1", "GET /x?token=*** HTTP/1.1"),
    ("invalid api key: sk-abc123", "invalid api key: ***"),  # prose around a real value
    ("x -H 'X-Api-Key: k1' y", "x -H 'X-Api-Key: ***' y"),
    ('error {"detail": "bad --api-key sk-9 given"}', 'error {"detail": "bad --api-key *** given"}'),
    ("token: key: X-Api-Key: S3CRET", "token: key: X-Api-Key: ***"),  # a name is no value
    ("key: --api-key sk-1", "key: --api-key ***"),
    ('--password ab"cd ef" z', "--password *** *** z"),  # a quoted part belongs to the value
    ('{"key": "a \\"b\\" c", "z": 1}', '{"key": *** *** ***, "z": 1}'),  # escaped quotes
]

PROSE = [  # what must stay as it is: values, never the words around them (issue 13 §4)
    "http://127.0.0.1:8000 asks for an API key: give it as --endpoint http://:KEY@HOST:PORT to measure it",
    "inter_token: llama.cpp exports no inter-token latency histogram",
    "time_to_first_token_seconds: 0.2, sglang:token_usage 0.5, bos_token: <s>, eos_token_id: 2",
    "a Bearer token is required; the key: it is in the vault",
    "postgres://app:${DB_PASSWORD}@db/x http://user:<password>@host/",
    '{"api_key": null, "api_key_set": true, "token_budget": 8192}',
]


@pytest.mark.parametrize("text,expected", WRAPPED)
def test_quotes_brackets_and_braces_do_not_hide_a_secret(text, expected):
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


@pytest.mark.parametrize("text", PROSE)
def test_prose_and_product_words_stay_readable(text):
    assert redact_text(text) == text


def test_the_word_after_a_prose_name_is_masked_when_it_is_a_value():
    assert redact_text("an API key: sk-live-123 was refused") == "an API key: *** was refused"
    assert redact_text("a Bearer eyJhbGciOi token") == "a Bearer *** token"
    assert redact_text("password: letmein") == "password: ***"  # no prose reading of password
    assert redact_text("http://:KEY@db.internal:5432/x") == "http://:***@db.internal:5432/x"


def test_text_tokens_are_not_credentials():
    for name in ("inter_token", "first_token", "time_per_output_token", "bos_token", "eos_token",
                 "pad_token", "token_usage", "token_budget", "kv_bytes_per_token", "HF_TOKEN_FILE"):
        assert not secret_name(name), name
    for name in ("hf_token", "access_token", "GITHUB_TOKEN", "HF_TOKEN_2", "authToken", "apiKey",
                 "X-Auth-Token", "refresh_token"):
        assert secret_name(name), name


def test_a_value_under_a_secret_name_is_masked_whole_and_keys_like_values():
    record = {"api_key": "sk-A", "--api-key sk-B": 1, "nested": [{"HF_TOKEN=hf_C": {"token": "t-D"}}],
              "api_key_set": True, "model": "m", "api_key_none": None}
    shown = redact_data(record)
    assert not any(s in json.dumps(shown) for s in ("sk-A", "sk-B", "hf_C", "t-D"))
    assert shown["api_key"] == "***" and shown["api_key_set"] is True and shown["model"] == "m"
    assert shown["nested"] == [{"HF_TOKEN=***": {"token": "***"}}]


# Values a generated command line plants: distinctive enough never to occur by chance
SECRET = st.text(alphabet="ABCDEFGHJKMNPQRSTUVWXYZ0123456789_+.~", min_size=6, max_size=30)
BENIGN = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-/=.:", min_size=1, max_size=12),
                  max_size=6)
FORMS = st.sampled_from([
    "--api-key {}", "--api-key={}", "--api_key {}", "--apikey={}", "--key {}", "-k {}",
    "--token {}", "--hf-token={}", "--password {}", "--secret={}", "--my-secret-thing {}",
    "HF_TOKEN={}", "OPENAI_API_KEY={}", "AWS_SECRET_ACCESS_KEY={}", "Authorization: Bearer {}",
    "Bearer {}", "postgres://app:{}@db/x", "--dsn=mysql://root:{}@h:3306/x", "X-Api-Key: {}",
])


# How text carries a form: quoted, bracketed, braced, a JSON string, a JSON array, a key
WRAPPERS = st.sampled_from(["{}", '"{}"', "'{}'", "({})", "[{}]", "{{{}}}", "<{}>", "{},",
                            '{{"id": "{}"}}', '["{}"]', '{{"{}": 1}}', "x={}", '"{}":'])


@settings(max_examples=400, deadline=None)
@given(before=BENIGN, after=BENIGN, form=FORMS, secret=SECRET, nul=st.booleans())
def test_a_planted_secret_never_survives(before, after, form, secret, nul):
    sep = "\0" if nul else " "
    line = sep.join([*before, *form.format(secret).split(" "), *after])
    masked = redact_cmdline(line)
    assert secret not in masked
    assert redact_cmdline(masked) == masked


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(before=BENIGN, after=BENIGN, form=FORMS, wrap=WRAPPERS, secret=SECRET)
def test_a_planted_secret_never_survives_punctuation(before, after, form, wrap, secret):
    line = " ".join([*before, wrap.format(form.format(secret)), *after])
    masked = redact_text(line)
    assert secret not in masked, line
    assert redact_text(masked) == masked


PUNCTUATED = st.lists(st.sampled_from(list("abkeytonpsw_-=:\"'()[]{}<>,; \\\0")
                                      + ["key", "token", "--api-key", "Bearer ", "://", "HF_TOKEN",
                                         "@", "Authorization: ", "K3Y", "null"]),
                      max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_masking_is_idempotent_on_any_text(text):
    once = redact_cmdline(text)
    assert redact_cmdline(once) == once


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(PUNCTUATED)
def test_masking_is_idempotent_on_punctuated_text(text):
    once = redact_text(text)
    assert redact_text(once) == once


# --- live processes, every output format, the capture directory -------------------------

PLANTED = {
    "api_key": "sk-PLANTED-api-key-4a7f",
    "hf_token": "hf_PLANTEDhfToken9c1",
    "env_hf": "hf_PLANTEDenvToken2b8",
    "env_openai": "sk-PLANTED-env-openai-5d3",
    "arg_hf": "hf_PLANTEDargToken6e2",
    "arg_openai": "sk-PLANTED-arg-openai-1f9",
    "db_password": "PLANTEDdbPassw0rd",
    "bearer": "eyPLANTEDbearer7a2",
    "api_key2": "PLANTED-underscore-key-3c4",
    "env_dsn_password": "PLANTEDenvDsnPw8",
}
SPIN = "import time\nt = time.time()\nwhile time.time() - t < 90: pass"


def _secret_args() -> list[str]:
    p = PLANTED
    return ["--api-key", p["api_key"], "--hf-token", p["hf_token"], "--api_key", p["api_key2"],
            "--dsn", f"postgres://app:{p['db_password']}@db/x", f"HF_TOKEN={p['arg_hf']}",
            f"OPENAI_API_KEY={p['arg_openai']}", "-H", f"Authorization: Bearer {p['bearer']}"]


def _secret_env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_TOKEN": PLANTED["env_hf"], "OPENAI_API_KEY": PLANTED["env_openai"],
            "DATABASE_URL": f"postgres://app:{PLANTED['env_dsn_password']}@db/x"}


def _wait_for(pid: int, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in Path(f"/proc/{pid}/cmdline").read_text():
        assert time.monotonic() < deadline, f"pid {pid} never showed {text!r}"
        time.sleep(0.05)


@pytest.fixture
def planted_processes(tmp_path):
    """An engine (argv[0] llama-server) and a plain Python process, both busy on a core so
    that the CPU sampling keeps them, both with secrets in argv and environment."""
    import shlex

    model = tmp_path / "model.gguf"
    model.write_bytes(b"\0" * 1024)
    engine_argv = ["-c", SPIN, "-m", str(model), *_secret_args()]
    engine = subprocess.Popen(
        ["bash", "-c", f"exec -a llama-server {sys.executable} {shlex.join(engine_argv)}"],
        env=_secret_env())
    other = subprocess.Popen([sys.executable, "-c", SPIN, *_secret_args()], env=_secret_env())
    try:
        _wait_for(engine.pid, "llama-server")
        _wait_for(other.pid, PLANTED["api_key"])
        yield engine.pid, other.pid
    finally:
        for proc in (engine, other):
            proc.kill()
            proc.wait()


def _leaks(text: str) -> list[str]:
    return [name for name, value in PLANTED.items() if value in text]


@pytest.mark.slow
def test_no_planted_secret_reaches_any_output_or_the_capture(cli, tmp_path, planted_processes):
    engine_pid, other_pid = planted_processes
    cap = tmp_path / "cap"
    outputs = {}
    captured = cli("capture", str(cap), "--level", "quick", "--format", "json", "--no-progress")
    assert captured.returncode in (0, 1, 2), captured.stderr
    outputs["capture"] = captured.stdout + captured.stderr
    for source in ((), ("--replay", str(cap))):
        for fmt in ("terminal", "json", "markdown"):
            result = cli("scan", "--level", "quick", "--format", fmt, "--no-progress", *source)
            assert result.returncode in (0, 1, 2), result.stderr
            outputs[f"scan {fmt} {' '.join(source)}"] = result.stdout + result.stderr
        written = tmp_path / f"report{len(source)}.md"
        result = cli("scan", "--level", "quick", "--format", "markdown", "-o", str(written),
                     "--no-progress", *source)
        outputs[f"-o {written.name}"] = written.read_text()
    for path in cap.rglob("*"):
        if path.is_file():
            outputs[str(path)] = path.read_bytes().decode("utf-8", "replace")

    leaks = {where: _leaks(text) for where, text in outputs.items() if _leaks(text)}
    assert not leaks, leaks

    # ...and the test saw what it planted: the engine kept whole with its secrets masked,
    # the other process cut to its program name, in the report and in the capture
    report = json.loads(outputs["capture"][:outputs["capture"].rindex("}") + 1])
    top = next(p for p in report["probes"] if p["name"] == "host.cpu_load")["data"]["top"]
    rows = {row["pid"]: row for row in top}
    assert engine_pid in rows and other_pid in rows, top
    assert rows[engine_pid]["cmdline"].startswith("llama-server -c")
    assert "--api-key *** --hf-token *** --api_key ***" in rows[engine_pid]["cmdline"]
    assert rows[other_pid]["cmdline"] == program_only(sys.executable)
    engine_cmdline = (cap / "fs" / "proc" / str(engine_pid) / "cmdline").read_text()
    assert "--api-key\0***" in engine_cmdline


# --- every format, keys as values (issue 12) ---------------------------------------------

KEYED = {f"k{i}": f"PLANTEDkeyed{i}x7" for i in range(1, 11)}


def _keyed_report():
    from doctor.model import Finding, Level, ProbeResult, ScanReport, Severity

    k = KEYED
    record = {"env": {f"HF_TOKEN={k['k1']}": True}, "api_key": k["k2"],
              f"--api-key {k['k3']}": 1, "argv": ["--api-key", k["k4"]]}
    reason = f'failed: {{"id": "--api-key {k["k5"]}"}} (--api-key {k["k6"]}) "HF_TOKEN={k["k7"]}"'
    finding = Finding(rule="cpu-contention", cause="cpu-contention", symptoms=("slowdown",),
                      severity=Severity.WARNING, title="x",
                      evidence={f"--api-key {k['k8']}": 1, "api_key": k["k9"],
                                "cmd": f'["--api-key","{k["k10"]}"]'},
                      remediation="r", playbook="playbooks/cpu-contention.md")
    return ScanReport(host={"kind": "live", "hostname": "h"}, level=Level.QUICK,
                      started_at="2026-01-01T00:00:00Z", duration_s=0.1,
                      probes=[ProbeResult("host.keyed", "ok", 0.1, None, record),
                              ProbeResult("host.memory", "error", 0.1, reason)],
                      findings=[finding])


def _formats(report) -> dict[str, str]:
    import io

    from rich.console import Console

    from reports import html, json_report, markdown, terminal

    console = Console(file=io.StringIO(), width=300, color_system=None)
    terminal.render(report, console)
    return {"json": json_report.render(report), "markdown": markdown.render(report),
            "html": html.render(report), "terminal": console.file.getvalue()}


def test_secrets_in_keys_and_punctuated_values_stay_out_of_every_format():
    report = _keyed_report()
    leaks = {fmt: [k for k, v in KEYED.items() if v in text]
             for fmt, text in _formats(report).items()}
    assert not any(leaks.values()), leaks
    data = json.loads(_formats(report)["json"])
    assert data["probes"][0]["data"]["--api-key ***"] == 1  # the key masked, not dropped
    assert data["findings"][0]["evidence"]["api_key"] == "***"


@pytest.mark.slow
def test_report_from_a_saved_scan_masks_keys_and_values_it_was_given_raw(cli, tmp_path):
    """A saved scan is someone else's file: what it holds unmasked is masked when shown."""
    from reports.json_report import render

    data = json.loads(render(_keyed_report()))
    k = KEYED  # put back, raw, what the writer had masked
    data["probes"][0]["data"] = {"env": {f"HF_TOKEN={k['k1']}": True}, "api_key": k["k2"],
                                 f"--api-key {k['k3']}": {"(--api-key " + k["k4"] + ")": 1}}
    data["probes"][1]["reason"] = f'"HF_TOKEN={k["k5"]}" {{"id": "--api-key {k["k6"]}"}}'
    data["findings"][0]["evidence"] = {f"--api-key {k['k7']}": 1, "api_key": k["k8"]}
    data["host"][f"OPENAI_API_KEY={k['k9']}"] = "x"
    data["findings"][0]["title"] = f"[--token {k['k10']}]"
    saved = tmp_path / "scan.json"
    saved.write_text(json.dumps(data))
    out = tmp_path / "out.html"
    result = cli("report", str(saved), "-o", str(out))
    assert result.returncode == 0, result.stderr
    shown = out.read_text() + result.stdout + result.stderr
    assert [name for name, value in KEYED.items() if value in shown] == []
