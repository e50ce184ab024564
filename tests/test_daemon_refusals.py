"""``llm-doctor daemon`` refuses a bad config at start, through the real CLI in a process of
its own: one line naming the key (or the flag), exit 3, within seconds, before it serves.
The files the settings name are read without blocking: a FIFO, /dev/zero, a directory or
bytes that are not UTF-8 are refused at once (a FIFO password used to block before serving,
deaf to SIGTERM)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

BASE = {"level": '"quick"', "interval": '"1s"', "listen": '"127.0.0.1:0"'}


def _config(lines: str) -> str:
    """[daemon] with ``lines``, and BASE's keys that ``lines`` does not set."""
    given = {line.split("=")[0].strip() for line in lines.splitlines()}
    return "[daemon]\n" + "".join(f"{k} = {v}\n" for k, v in BASE.items() if k not in given) + lines


def _files(root: Path) -> dict[str, str]:
    """Files of every kind a setting may name, made in ``root``."""
    made = {"fifo": root / "fifo", "latin1": root / "latin1", "empty": root / "empty",
            "big": root / "big", "garbage": root / "garbage.pem", "regular": root / "regular",
            "dir": root / "dir"}
    os.mkfifo(made["fifo"])
    made["latin1"].write_bytes(b"p\xe4ssw\xf6rd\n")
    made["empty"].write_text("\n")
    made["big"].write_text("x" * 5000)
    made["garbage"].write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n")
    made["regular"].write_text("a file, not a folder\n")
    made["dir"].mkdir()
    return {k: str(v) for k, v in made.items()}


def _auth(path: str) -> str:
    return f'basic_auth_user = "prom"\nbasic_auth_password_file = "{path}"\n'


def _tls(cert: str, key: str) -> str:
    return f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\n'


def _cases(f: dict[str, str]) -> list[tuple[str, str, list[str], str]]:
    """(name, [daemon] lines, extra flags, what the one line must say)."""
    return [
        ("listen port 99999", 'listen = "127.0.0.1:99999"\n', [], "daemon.listen"),
        ("listen two colons", 'listen = ":8000:8000"\n', [], "daemon.listen"),
        ("interval nan", "interval = nan\n", [], "daemon.interval = nan"),
        ("report_keep -1", "report_keep = -1\n", [], "daemon.report_keep = -1"),
        ("resolve_after 0", "resolve_after = 0\n", [], "daemon.resolve_after = 0"),
        ("password /dev/zero", _auth("/dev/zero"), [], "daemon.basic_auth_password_file"),
        ("password FIFO", _auth(f["fifo"]), [], "daemon.basic_auth_password_file"),
        ("password not UTF-8", _auth(f["latin1"]), [], "is not UTF-8"),
        ("password empty", _auth(f["empty"]), [], "the file is empty"),
        ("password over 4 KiB", _auth(f["big"]), [], "daemon.basic_auth_password_file"),
        ("password a directory", _auth(f["dir"]), [], "is a directory"),
        ("password missing", _auth(f["dir"] + "/none"), [], "No such file"),
        ("TLS cert FIFO", _tls(f["fifo"], f["garbage"]), [], "daemon.tls_cert_file"),
        ("TLS key FIFO", _tls(f["garbage"], f["fifo"]), [], "daemon.tls_key_file"),
        ("TLS cert /dev/zero", _tls("/dev/zero", f["garbage"]), [], "daemon.tls_cert_file"),
        ("TLS not PEM", _tls(f["garbage"], f["garbage"]), [], "cannot load the TLS certificate"),
        ("report_dir a file", f'report_dir = "{f["regular"]}"\n', [], "daemon.report_dir"),
        ("report_dir a FIFO", f'report_dir = "{f["fifo"]}"\n', [], "daemon.report_dir"),
        ("report_dir unwritable", 'report_dir = "/proc/llm-doctor-reports"\n', [],
         "cannot write a report there"),
        ("--listen port 99999", "", ["--listen", "127.0.0.1:99999"], "--listen"),
        ("--interval 0.5", "", ["--interval", "0.5"], "--interval = 0.5"),
        ("--report-dir a file", "", ["--report-dir", f["regular"]], "--report-dir"),
        ("--alertmanager no scheme", "", ["--alertmanager", "127.0.0.1:9093"], "--alertmanager"),
    ]


@pytest.mark.slow
def test_each_bad_setting_is_one_line_naming_its_key_exit_3_at_once(tmp_path):
    files = _files(tmp_path)
    running = []
    for i, (name, lines, flags, said) in enumerate(_cases(files)):
        config = tmp_path / f"c{i}.toml"
        config.write_text(_config(lines))
        argv = [sys.executable, "-m", "doctor.commands.cli", "daemon", "--config", str(config), *flags]
        running.append((name, said, time.monotonic(), subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})))
    failures = []
    for name, said, started, proc in running:
        try:
            _, err = proc.communicate(timeout=max(1.0, started + 60 - time.monotonic()))
        except subprocess.TimeoutExpired:  # blocked (a FIFO read) or serving: both wrong
            proc.kill()
            _, err = proc.communicate()
            failures.append(f"{name}: still running after 60 s: {err[-300:]}")
            continue
        lines = err.strip().splitlines()
        if proc.returncode != 3 or len(lines) != 1 or said not in err or "Traceback" in err:
            failures.append(f"{name}: exit {proc.returncode}, {len(lines)} lines: {err[-400:]}")
    assert failures == [], "\n".join(failures)
