"""SIGHUP reads the basic-auth password file and the TLS certificate again: a rotated
password and a renewed certificate take effect without a restart, and a broken one is
refused with the old ones kept. A real daemon, real TLS (openssl's certificates), a real
client on loopback."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import ssl
import urllib.error
import urllib.request

import pytest

from tests import live_stack as stack
from tests.daemon_helpers import client_tls, self_signed


def _status(address: str, password: str, tls: ssl.SSLContext) -> int:
    token = base64.b64encode(f"prom:{password}".encode()).decode()
    request = urllib.request.Request(f"https://{address}/metrics",
                                     headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5, context=tls) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _handshake_fails(address: str, tls: ssl.SSLContext) -> bool:
    try:
        _status(address, "x", tls)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ssl.SSLError)
    return False


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sighup_rotates_the_password_and_the_certificate(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    old_cert, old_key = self_signed(first)
    new_cert, new_key = self_signed(second)
    live_cert, live_key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(old_cert, live_cert)
    shutil.copy(old_key, live_key)
    secret = tmp_path / "password"
    secret.write_text("old-pass-3f9\n")
    config = ('[daemon]\nlevel = "quick"\ninterval = "1s"\nbasic_auth_user = "prom"\n'
              f'basic_auth_password_file = "{secret}"\ntls_cert_file = "{live_cert}"\n'
              f'tls_key_file = "{live_key}"\n')
    daemon, address = stack.daemon(tmp_path, config)
    try:
        old_tls, new_tls = client_tls(old_cert), client_tls(new_cert)
        assert _status(address, "old-pass-3f9", old_tls) == 200
        assert _status(address, "new-pass-8a1", old_tls) == 401

        secret.write_text("new-pass-8a1\n")
        shutil.copy(new_cert, live_cert)  # the same paths, renewed (what cert-manager does)
        shutil.copy(new_key, live_key)
        os.kill(daemon.popen.pid, signal.SIGHUP)
        stack.wait_for("the reload", lambda: "(read again)" in daemon.log(), 20)
        assert _status(address, "new-pass-8a1", new_tls) == 200
        assert _status(address, "old-pass-3f9", new_tls) == 401
        assert _handshake_fails(address, old_tls)  # the old certificate is gone

        live_key.write_text("not a key\n")  # a broken renewal: refused, the last one kept
        os.kill(daemon.popen.pid, signal.SIGHUP)
        stack.wait_for("the refused reload", lambda: "reload failed" in daemon.log(), 20)
        assert "cannot load the TLS certificate and key" in daemon.log()
        assert _status(address, "new-pass-8a1", new_tls) == 200
        assert "new-pass-8a1" not in daemon.log() and "old-pass-3f9" not in daemon.log()
    except AssertionError:
        print(daemon.log()[-4000:])
        raise
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_turning_tls_on_by_reload_needs_a_restart_and_says_so(tmp_path):
    cert, key = self_signed(tmp_path)
    daemon, address = stack.daemon(tmp_path, '[daemon]\nlevel = "quick"\ninterval = "1s"\n')
    try:
        (tmp_path / "llm-doctor.toml").write_text(
            f'[daemon]\nlevel = "quick"\ninterval = "1s"\ntls_cert_file = "{cert}"\n'
            f'tls_key_file = "{key}"\n')
        os.kill(daemon.popen.pid, signal.SIGHUP)
        stack.wait_for("the reload", lambda: "configuration reloaded" in daemon.log(), 20)
        assert "daemon.tls_cert_file: changes need a restart" in daemon.log()
        assert "llm_doctor_" in stack.get(f"http://{address}/metrics")  # still plain HTTP
    finally:
        daemon.stop()
