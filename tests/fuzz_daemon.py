"""The fuzz campaign's kind ``daemon``: hostile ``[daemon]`` configs and hostile HTTP clients.

(a) A config: a good ``[daemon]`` table (listen 127.0.0.1:0, level quick, interval 1s, a
report folder, sometimes basic auth or TLS) with one to three values made wrong (wrong types,
NaN, infinities, huge and negative numbers, ports past 65535, control characters, URLs
without a host, and FIFOs, /dev/zero, directories, Latin-1 or empty files where a file goes),
or its bytes damaged. ``llm-doctor daemon --config FILE`` runs in a fork of this process
(every 50th in a new interpreter). A bad config must exit 3 with one line; a good one must
serve: it then counts as good once one scrape is answered (200, or 401 when the password is
not ours), and SIGTERM must stop it with exit code 0.

(b) A client: one ``llm-doctor daemon`` process with basic auth, and one with TLS where openssl
is installed, are started once per campaign and get one hostile client per input: garbage
request lines, huge or many headers, non-ASCII and bad base64 Authorization, bodies, methods
other than GET, HTTP/0.9 and 2, absurd paths, pipelined requests, connection floods, a reader
that never reads, slowloris, and on the TLS port half-open handshakes, garbage and plain
HTTP. After each: the daemon still runs, answers a good scrape, has logged no traceback and
answered no 500, and no reply held a traceback. Slow clients are kept open and must have been
closed by the daemon within its timeout and 3 s.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import io
import logging
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tomli_w

from doctor.daemon.server import Limits
from tests.fuzz_inputs import REPO, Outside, mutate_bytes
from tests.fuzz_runs import Run, Tried, check, run_forked

CONFIG_SHARE = 0.5  # of the kind's inputs; the rest are hostile clients
PASSWORD = "fuzz-password"
SERVING = re.compile(r"serving metrics on (https?)://(\S+)/metrics")
NEEDLES = ("outside", "environment")
LIMITS = Limits()
GOOD = {"listen": "127.0.0.1:0", "level": "quick", "interval": "1s", "kernel_interval": "0s",
        "report_keep": 5, "resolve_after": 2, "resend_interval": "1m", "history": "1h",
        "alertmanager": [], "webhook": [], "kernels_while_serving": False}

# --------------------------------------------------------------------------- (a) configs

_NUMBERS = [float("nan"), float("inf"), float("-inf"), -1, 0, 0.5, 1e308, 10**20, 10**400, 2**63,
            True, "5", "", [], {}, "\x00", -0.0]
# Duration strings, none of over 290 digits: the 400-digit one is issue 12 item 4's (the
# duration parser's OverflowError), not this kind's.
_DURATIONS = ["0s", "-1s", "1.5s", "1 s", "1d", "٣s", "9" * 30 + "h", "s", "1s\n", "１s"]
_LISTENS = ["127.0.0.1:99999", ":8000:8000", "127.0.0.1:", ":0", "[::1", "[zz]:0",
            "127.0.0.1:0\n", "127.0.0.1:٣", "localhost", "127.0.0.1:-1", "256.1.1.1:0",
            "127.0.0.1\x07:0", "[::1]:0", "localhost:0", "x" * 5000 + ":0", "127.0.0.1:0:0",
            "[127.0.0.1]:0", "::1:0", "127.0.0.1 :0", "é:0", 9411, ["127.0.0.1:0"]]
_URLS = [["ftp://127.0.0.1:9"], ["http://"], ["http://u:p@127.0.0.1:9"], ["http://127.0.0.1:99999"],
         ["http://[::1"], ["\x00"], "http://127.0.0.1:9", [5], ["http://127.0.0.1:9"] * 17,
         ["http://" + "x" * 5000], [["http://127.0.0.1:9"]], ["http://127.0.0.1:9 /x"]]
_TEXTS = ["a:b", "\x07", "", 5, "é", "x" * 5000, [], "\x00", "\u202e", True]
_LEVELS = ["deep", "", 5, "QUICK", [], "quick\x00"]  # never standard: micro-kernels at start


def _file_values(work: Path, out: Outside) -> list[Any]:
    """Paths of every kind a file setting may name (made in ``work``)."""
    fifo, latin, empty, big, loop = (work / n for n in ("fifo", "latin1", "empty", "big", "loop"))
    if not fifo.exists():
        os.mkfifo(fifo)
        latin.write_bytes(b"p\xe4ss\n")
        empty.write_text("")
        with open(big, "wb") as f:
            f.truncate(2 << 20)
        os.symlink(loop, loop)
        (work / "to-fifo").symlink_to(fifo)
    return [str(fifo), "/dev/zero", "/dev/null", str(work), str(work / "missing"), str(latin),
            str(empty), str(big), str(loop), str(work / "to-fifo"),
            str(out.root / "sentinel.txt"), "relative-name", "/proc/self/mem", "\x00", 5, []]


def _dirs(work: Path) -> list[Any]:
    return [str(work / "fifo"), str(work / "latin1"), "/proc/llm-doctor-fuzz",
            str(work / "latin1" / "sub"), "\x00", 5, "", str(work / "loop"), "/dev/null"]


def _hostile_value(key: str, work: Path, out: Outside, rng: random.Random) -> Any:
    if key in ("interval", "kernel_interval", "resend_interval", "history"):
        return rng.choice(_NUMBERS + _DURATIONS)
    if key in ("report_keep", "resolve_after"):
        return rng.choice(_NUMBERS + [1.5, 100_001, 1000, 1])
    if key == "kernels_while_serving":
        return rng.choice(["true", 1, 0, "yes", [], "false"])
    if key == "listen":
        return rng.choice(_LISTENS)
    if key == "level":
        return rng.choice(_LEVELS)
    if key in ("alertmanager", "webhook"):
        return rng.choice(_URLS)
    if key == "report_dir":
        return rng.choice(_dirs(work))
    if key == "basic_auth_user":
        return rng.choice(_TEXTS)
    return rng.choice(_file_values(work, out))


_KEYS = [*GOOD, "report_dir", "basic_auth_user", "basic_auth_password_file", "tls_cert_file",
         "tls_key_file"]


def make_daemon_config(work: Path, rng: random.Random, out: Outside,
                       pki: tuple[str, str] | None) -> tuple[Path, str]:
    """A config file in ``work`` and the mutation that made it (``good`` when none)."""
    table: dict[str, Any] = {**GOOD, "report_dir": str(work / "reports")}
    (work / "password").write_text(PASSWORD + "\n")
    if rng.random() < 0.3:
        table.update(basic_auth_user="prom", basic_auth_password_file=str(work / "password"))
    if pki and rng.random() < 0.3:
        table.update(tls_cert_file=pki[0], tls_key_file=pki[1])
    doc: dict[str, Any] = {"daemon": table}
    path = work / "daemon.toml"
    op = rng.random()
    if op < 0.25:
        return _write(path, doc), "good"
    if op < 0.3:
        os.mkfifo(path)
        return path, "file:fifo"
    if op < 0.4:
        data, how = mutate_bytes(tomli_w.dumps(doc).encode(), rng, "toml")
        path.write_bytes(data)
        return path, f"bytes:{how}"
    if op < 0.47:
        how = rng.choice(("daemon=5", "for=5", "for-values", "unknown-key", "for-unknown-rule"))
        if how == "daemon=5":
            doc["daemon"] = 5
        elif how == "for=5":
            table["for"] = 5
        elif how == "for-values":
            table["for"] = {"cpu-contention": rng.choice(["1m", 5, "x", "99999999h", [], "0s"])}
        elif how == "unknown-key":
            table["intervall"] = "1s"
        else:
            table["for"] = {"no-such-rule": "1m"}
        return _write(path, doc), f"table:{how}"
    changed = []
    for key in rng.sample(_KEYS, rng.choice((1, 1, 2, 3))):
        table[key] = _hostile_value(key, work, out, rng)
        changed.append(f"{key}={table[key]!r:.40}")
    return _write(path, doc), "value:" + ",".join(changed)


def _write(path: Path, doc: dict[str, Any]) -> Path:
    try:
        path.write_text(tomli_w.dumps(doc))
    except (TypeError, ValueError):  # a value TOML cannot hold: the file is bad another way
        path.write_text("[daemon]\nlevel = \n")
    return path


class _Child:
    """``llm-doctor ARGV`` started in a fork of this process (warm) or in a new interpreter,
    its standard output and error in files under ``work``."""

    def __init__(self, argv: list[str], work: Path, forked: bool) -> None:
        self.files = work / ".out", work / ".err", work / ".exc"
        if not forked:
            with open(self.files[0], "wb") as out, open(self.files[1], "wb") as err:
                self.popen: subprocess.Popen | None = subprocess.Popen(
                    [sys.executable, "-m", "doctor.commands.cli", *argv], stdout=out, stderr=err,
                    stdin=subprocess.DEVNULL, cwd=work, env={**os.environ, "PYTHONPATH": str(REPO)})
            return
        self.popen = None
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            self._main(argv)

    def _main(self, argv: list[str]) -> None:
        code = 70
        try:
            out = os.open(self.files[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(self.files[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8",
                                          line_buffering=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8",
                                          line_buffering=True)
            for handler in list(logging.root.handlers):  # the daemon logs as in a new process
                logging.root.removeHandler(handler)
            sys.argv = ["llm-doctor", *argv]
            from doctor.commands import cli

            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException as exc:  # the finding: an exception escaped the CLI  # noqa: BLE001
                self.files[2].write_text(f"{type(exc).__name__}: {str(exc)[:300]}")
                code = 70
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code if 0 <= code < 256 else 71)

    def poll(self) -> int | None:
        if self.popen is not None:
            return self.popen.poll()
        if not hasattr(self, "code"):
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if not done:
                return None
            self.code = os.waitstatus_to_exitcode(status)
        return self.code

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid if self.popen else self.pid, number)

    def text(self, i: int) -> str:
        return self.files[i].read_text(errors="replace") if self.files[i].exists() else ""


def _wait(child: _Child, until: float) -> int | None:
    while time.perf_counter() < until:
        code = child.poll()
        if code is not None:
            return code
        time.sleep(0.01)
    return None


def _try_config(work: Path, rng: random.Random, out: Outside, bound_s: float, forked: bool,
                pki: tuple[str, str] | None) -> Tried:
    path, what = make_daemon_config(work, rng, out, pki)
    argv = ["daemon", "--config", str(path)]
    out.reset()
    t0 = time.perf_counter()
    child = _Child(argv, work, forked)
    deadline = t0 + bound_s
    served, answer = None, None
    while time.perf_counter() < deadline and child.poll() is None and served is None:
        served = SERVING.search(child.text(1))
        time.sleep(0.01)
    if served is not None:
        answer = _status(_scrape(served.group(2), served.group(1) == "https", PASSWORD, 5.0))
        child.signal(signal.SIGTERM)
    code = _wait(child, deadline + (5.0 if served else 0.0))
    if code is None:
        child.signal(signal.SIGKILL)
        _wait(child, time.perf_counter() + 10)
    run = Run(code, child.text(0), child.text(1), time.perf_counter() - t0, child.text(2))
    for f in child.files:
        f.unlink(missing_ok=True)
    verdict = check(run, out, False, NEEDLES)
    if served is not None:
        what += " (served)"
        if answer == 500:
            verdict.add("internal-error")
        elif answer not in (200, 401):
            verdict.add("hang")  # it said it serves, and did not answer
        if code not in (0, None):
            verdict.add(f"exit-{code}")  # SIGTERM while serving: a clean stop is 0
    elif code not in (3, None):
        verdict.add(f"exit-{code}")  # a config that does not serve is refused: 3
    return Tried("daemon", f"config:{what}", argv, run, verdict)


# --------------------------------------------------------------------------- (b) clients


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: gone when the campaign is


class _Target:
    """A running ``llm-doctor daemon`` that hostile clients are sent to."""

    def __init__(self, base: Path, pki: tuple[str, str] | None) -> None:
        self.folder = base / ("daemon-tls" if pki else "daemon-auth")
        self.folder.mkdir(exist_ok=True)
        (self.folder / "password").write_text(PASSWORD + "\n")
        table = {**GOOD, "basic_auth_user": "prom",
                 "basic_auth_password_file": str(self.folder / "password")}
        if pki:
            table.update(tls_cert_file=pki[0], tls_key_file=pki[1])
        config = self.folder / "daemon.toml"
        config.write_text(tomli_w.dumps({"daemon": table}))
        self.log = self.folder / "daemon.log"
        self.offset = 0
        self.tls = pki is not None
        self.slow: list[tuple[socket.socket, float, float, str]] = []  # sock, opened, allowed
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "doctor.commands.cli", "daemon", "--config", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.folder,
                env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            found = SERVING.search(self.log.read_text(errors="replace"))
            if found:
                self.address = found.group(2)
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the fuzz target daemon did not start: {self.new_log()[-500:]}")

    def new_log(self) -> str:
        with open(self.log, "rb") as f:
            f.seek(self.offset)
            data = f.read(4 << 20)
        self.offset += len(data)
        return data.decode(errors="replace")

    def connect(self, timeout_s: float = 2.0) -> socket.socket:
        host, port = self.address.rsplit(":", 1)
        return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)

    def stop(self) -> None:
        for sock, *_ in self.slow:
            sock.close()
        self.slow = []
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


_TARGETS: dict[tuple[str, bool], _Target] = {}


def stop_targets() -> None:
    """Stop every target daemon (the campaign's end; the test's teardown)."""
    for target in _TARGETS.values():
        target.stop()
    _TARGETS.clear()


atexit.register(stop_targets)


def _pki(base: Path) -> tuple[str, str] | None:
    """A self-signed certificate and key under ``base`` (made once), or None without openssl."""
    cert, key = base / "pki" / "cert.pem", base / "pki" / "key.pem"
    if not cert.exists():
        openssl = shutil.which("openssl")
        if not openssl:
            return None
        cert.parent.mkdir(exist_ok=True)
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def _client_tls() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # our own, made above
    return context


def _exchange(target: _Target, data: bytes, tls: bool, timeout_s: float = 2.0,
              keep: bool = False, allowed_s: float = 0.0) -> bytes:
    """Send ``data`` and read what comes back until close or ``timeout_s`` (at most 1 MiB);
    ``keep``: leave the connection open as a slow client, to be closed by the daemon."""
    sock: socket.socket = target.connect(timeout_s)
    try:
        if tls:
            sock = _client_tls().wrap_socket(sock)
        sock.sendall(data)
        if keep:
            target.slow.append((sock, time.monotonic(), allowed_s, repr(data[:40])))
            return b""
        got, deadline = b"", time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(got) < (1 << 20):
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            got += chunk
        return got
    except (OSError, ssl.SSLError):
        return b""
    finally:
        if not keep:
            sock.close()


def _auth(rng: random.Random) -> bytes:
    good = base64.b64encode(f"prom:{PASSWORD}".encode())
    return rng.choice([b"Authorization: Basic " + good + b"\r\n", b"authorization: basic " + good
                       + b"\r\n", b"", b"Authorization: Basic \xc3\xa9\xff\r\n",
                       b"Authorization: Basic !!!=\r\n", b"Authorization: Bearer x\r\n",
                       b"Authorization: Basic " + base64.b64encode(b"prom:" + rng.randbytes(8))
                       + b"\r\n", b"Authorization: Basic " + good[:-2] + b"\r\n"])


_METHODS = [b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"TRACE", b"CONNECT",
            b"get", b"G\xc3\x89T", b"", b"GET GET", b"X" * 100]
_PATHS = [b"/metrics", b"/", b"/metrics?name[]=llm_doctor_build_info", b"/%00", b"/../../etc/passwd",
          b"/" + b"a" * 9000, b"*", b"http://127.0.0.1/metrics", b"metrics", b"/\xff\xfe",
          b"/metrics?" + b"name[]=x&" * 500, b"//metrics", b"/favicon.ico", b"/metrics#x"]
_VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.2", b"", b"HTTP/1.1x",
             b"HTTPS/1.1", b"http/1.1"]


def _request(rng: random.Random) -> tuple[bytes, str]:
    method, path, version = rng.choice(_METHODS), rng.choice(_PATHS), rng.choice(_VERSIONS)
    headers = _auth(rng)
    extra = rng.choice(["none", "big", "many", "body", "chunked", "fold", "nul", "accept", "crlf"])
    if extra == "big":
        headers += b"X-Big: " + b"a" * rng.choice((8000, 17000, 70000)) + b"\r\n"
    elif extra == "many":
        headers += b"X-Many: 1\r\n" * rng.choice((99, 101, 2000))
    elif extra == "body":
        headers += b"Content-Length: " + rng.choice([b"5", b"-1", b"x", b"99999999999", b"0, 5"]) \
            + b"\r\n"
    elif extra == "chunked":
        headers += b"Transfer-Encoding: chunked\r\n"
    elif extra == "fold":
        headers += b"X-Fold: a\r\n b\r\n"
    elif extra == "nul":
        headers += b"X-Nul: a\x00b\r\n"
    elif extra == "accept":
        headers += rng.choice([b"Accept: application/openmetrics-text; version=x\r\n",
                               b"Accept: text/plain; version=1.0.0; escaping=zz\r\n",
                               b"Accept-Encoding: gzip\r\n", b"Accept: */*;q=nan\r\n"])
    end = b"\r\n" if extra != "crlf" else b"\n"
    line = b" ".join(p for p in (method, path, version) if p or rng.random() < 0.5)
    data = line + b"\r\n" + headers + b"Connection: close\r\n" + end
    if extra == "body":
        data += b"hello"
    if rng.random() < 0.2:  # a flipped or inserted byte anywhere
        at = rng.randrange(len(data))
        data = data[:at] + bytes([rng.randrange(256)]) + data[at + rng.choice((0, 1)):]
    return data, f"{extra}:{data[:50]!r}"


def _act(target: _Target, rng: random.Random) -> tuple[str, bytes]:
    """One hostile client; what it did and what it got back."""
    tls = target.tls
    op = rng.choice(("request", "request", "request", "garbage", "pipelined", "flood",
                     "slowloris", "silent", "unread", "reset") + (("tls-garbage", "plain-on-tls",
                                                                    "half-hello") if tls else ()))
    if op == "request":
        data, how = _request(rng)
        return f"request:{how}", _exchange(target, data, tls)
    if op == "garbage":
        data = rng.randbytes(rng.randrange(1, 300)) + rng.choice((b"\r\n\r\n", b"", b"\n\n"))
        return f"garbage:{data[:30]!r}", _exchange(target, data, tls, 1.0)
    if op == "pipelined":
        count = rng.choice((2, 5, 50))
        data = b"".join(_request(rng)[0].replace(b"Connection: close\r\n", b"")
                        for _ in range(count))
        return f"pipelined:{count}", _exchange(target, data, tls, 2.0)
    if op == "flood":
        count = rng.choice((50, 150, 300))
        socks = []
        with contextlib.suppress(OSError):
            for _ in range(count):
                socks.append(target.connect(1.0))
        answer = _scrape(target.address, tls, PASSWORD, 5.0)
        for sock in socks:
            sock.close()
        return f"flood:{count} then a scrape", answer
    if op == "slowloris":
        data = b"GET /metrics HTTP/1.1\r\n" + _auth(rng) + b"X-Slow: 1\r\n"
        _exchange(target, data[: rng.randrange(1, len(data))], tls, keep=True,
                  allowed_s=LIMITS.header_s)
        return "slowloris: headers never end", b""
    if op == "silent":
        sock = target.connect()
        target.slow.append((sock, time.monotonic(), LIMITS.header_s, "silent"))
        return "silent: connected, sent nothing", b""
    if op == "unread":
        data = (b"GET /metrics HTTP/1.1\r\n" + _auth(rng) + b"\r\n") * rng.choice((20, 300))
        # the replies may all fit in the sockets' buffers: then it is an idle keep-alive
        _exchange(target, data, tls, keep=True,
                  allowed_s=LIMITS.header_s + LIMITS.write_s + LIMITS.idle_s)
        return "unread: pipelined scrapes, replies never read", b""
    if op == "reset":
        sock = target.connect()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x")
        sock.close()  # a reset mid-request
        return "reset mid-request", b""
    if op == "tls-garbage":
        return "tls-garbage", _exchange(target, rng.randbytes(rng.randrange(1, 2000)), False, 1.0)
    if op == "plain-on-tls":
        return "plain HTTP to the TLS port", _exchange(target, _request(rng)[0], False, 1.0)
    hello = b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + rng.randbytes(rng.randrange(0, 60))
    _exchange(target, hello, False, keep=True, allowed_s=LIMITS.header_s)
    return "half-open TLS handshake", b""


def _scrape(address: str, tls: bool, password: str, timeout_s: float) -> bytes:
    host, port = address.rsplit(":", 1)
    auth = base64.b64encode(f"prom:{password}".encode())
    request = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + auth
               + b"\r\nConnection: close\r\n\r\n")
    got = b""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw:
            sock = _client_tls().wrap_socket(raw) if tls else raw
            sock.sendall(request)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                got += chunk
    except (OSError, ssl.SSLError):
        pass
    return got


def _status(reply: bytes) -> int:
    found = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply)
    return int(found.group(1)) if found else 0


def _slow_not_cut(target: _Target) -> list[str]:
    """The slow clients the daemon should have closed by now and has not."""
    late, kept = [], []
    now = time.monotonic()
    for sock, opened, allowed, what in target.slow:
        sock.setblocking(False)
        try:
            closed = sock.recv(1 << 16) == b""
            while not closed:
                closed = sock.recv(1 << 16) == b""
        except (BlockingIOError, ssl.SSLWantReadError):
            closed = False
        except OSError:
            closed = True
        if closed:
            sock.close()
        elif now - opened > allowed + 3:
            late.append(f"{what} open after {now - opened:.1f} s")
            sock.close()
        else:
            kept.append((sock, opened, allowed, what))
    target.slow = kept
    return late


def _try_client(base: Path, rng: random.Random, out: Outside, bound_s: float) -> Tried:
    pki = _pki(base) if rng.random() < 0.3 else None
    key = (str(base), pki is not None)
    if key not in _TARGETS:
        _TARGETS[key] = _Target(base, pki)
    target = _TARGETS[key]
    t0 = time.perf_counter()
    what, reply = _act(target, rng)
    answer = _scrape(target.address, target.tls, PASSWORD, min(5.0, bound_s))
    alive = target.proc.poll() is None
    time.sleep(0.005)  # the log line of a 500 is written after the reply
    log = target.new_log()
    late = _slow_not_cut(target)
    ok = alive and _status(answer) == 200 and b"llm_doctor_build_info" in answer and not late
    marker = "internal error" if "answered 500" in log or _status(reply) == 500 else ""
    traceback = "Traceback" if b"Traceback" in reply or b'File "' in reply else ""
    run = Run(0 if ok else None, marker, log + traceback, time.perf_counter() - t0)
    verdict = check(run, out, False, ())
    if not alive:  # dead: say how, and start a new one for the next inputs
        what += f" (the daemon died: exit {target.proc.returncode}: {log[-200:]!r})"
        target.stop()
        del _TARGETS[key]
    if late:
        what += f" (slow clients not cut: {late[:3]})"
    return Tried("daemon", f"client{'-tls' if target.tls else ''}:{what}", [], run, verdict)


# --------------------------------------------------------------------------- the trier


def try_daemon(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
               runner: Any, evaluate_share: float) -> list[Tried]:
    """One input of kind ``daemon``: a config run (a) or a hostile client (b)."""
    if rng.random() < CONFIG_SHARE:
        pki = _pki(base) if rng.random() < 0.3 else None
        return [_try_config(work, rng, out, bound_s, runner is run_forked, pki)]
    return [_try_client(base, rng, out, bound_s)]
