"""Shared by the daemon, alert and HTML tests: external binaries and findings to feed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from doctor.model import Finding, Severity
from tests.conftest import FIXTURE_HOSTS


def need(binary: str, package: str) -> str:
    """The binary's path; skipped where it is missing, but a failure in CI (CI=true)."""
    path = shutil.which(binary)
    if path:
        return path
    message = f"{binary} not installed (apt-get install {package})"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def finding(rule: str = "cpu-contention", key: str = "stress pid 42",
            severity: Severity = Severity.WARNING, **evidence) -> Finding:
    return Finding(rule=rule, cause="cpu-contention", symptoms=("slowdown",), severity=severity,
                   title=f"{key} is taking 1.0 cores", evidence={"process": key, **evidence},
                   remediation="Stop or move the process.", playbook="playbooks/cpu-contention.md")


def self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key (PEM files in ``folder``), made by openssl."""
    import subprocess

    openssl = need("openssl", "openssl")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def client_tls(cert: str):
    """A client context that trusts ``cert`` and nothing else (no host name check)."""
    import ssl

    context = ssl.create_default_context(cafile=cert)
    context.check_hostname = False
    return context


def prompt_histogram_host(folder: Path) -> Path:
    """vllm-v1-calm started with ``--max-model-len 4096``: the prompt-length histogram on its
    recorded /metrics page now has a limit to be read against, so engine.truncation fills
    ``histogram_requests`` (no committed host does: their /v1/models answered 401)."""
    host = Path(folder) / "vllm-v1-calm-max-model-len"
    shutil.copytree(FIXTURE_HOSTS / "vllm-v1-calm", host, symlinks=True)
    cmdline = host / "fs/proc/48213/cmdline"
    cmdline.write_bytes(cmdline.read_bytes() + b"--max-model-len\x004096\x00")
    return host
