"""The seam's guards and its newer kinds of read: what a recording may not make a scan do,
HTTP GETs and NVML calls recorded and replayed, the per-scan process table."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from doctor.seam.host import HostReadError, HttpResponse, PathInfo, Reason
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordedHostError, RecordingHost, RecordWriter
from probes.helpers.processes import parse_listening, process_table

MANIFEST = "[host]\nformat = 2\n"


def host_dir(tmp_path, manifest: str = MANIFEST):
    root = tmp_path / "host"
    (root / "fs" / "proc").mkdir(parents=True)
    (root / "host.toml").write_text(manifest)
    return root


def test_measurements_linked_outside_the_recording_are_refused(tmp_path):
    root = host_dir(tmp_path)
    (tmp_path / "elsewhere.json").write_text('{"host.cpu_load": {}}')
    os.symlink(tmp_path / "elsewhere.json", root / "measurements.json")
    with pytest.raises(RecordedHostError, match="outside the recorded host"):
        RecordedHost(root)


def test_a_fifo_is_refused_at_once_not_read_forever(tmp_path):
    root = host_dir(tmp_path, MANIFEST + '[[commands]]\nargv = ["dmidecode"]\nstdout_file = "out"\n')
    os.mkfifo(root / "out")
    os.mkfifo(root / "fs/proc/meminfo")
    started = time.monotonic()
    host = RecordedHost(root)
    with pytest.raises(HostReadError, match="FIFO, not a regular file"):
        host.run(["dmidecode"])
    with pytest.raises(HostReadError, match="FIFO"):
        host.read_text("/proc/meminfo")
    os.mkfifo(root / "measurements.json")
    with pytest.raises(RecordedHostError, match="FIFO"):
        RecordedHost(root)
    assert time.monotonic() - started < 2


def test_a_link_to_itself_is_a_read_error(tmp_path):
    root = host_dir(tmp_path)
    os.symlink("loop", root / "fs/proc/loop")
    with pytest.raises(HostReadError) as err:
        RecordedHost(root).read_text("/proc/loop")
    assert err.value.reason == Reason.FAILED


def test_a_directory_where_a_file_goes_reads_as_absent(tmp_path):
    root = host_dir(tmp_path)
    (root / "fs/proc/meminfo").mkdir()
    with pytest.raises(HostReadError) as err:
        RecordedHost(root).read_text("/proc/meminfo")
    assert err.value.reason == Reason.NOT_FOUND and "is a directory" in str(err.value)


def test_listings_do_not_follow_links_out(tmp_path):
    root = host_dir(tmp_path)
    (tmp_path / "outside" / "secret-dir").mkdir(parents=True)
    os.symlink(tmp_path / "outside", root / "fs/proc/1")
    os.symlink(tmp_path / "outside", root / "fs/sys")
    host = RecordedHost(root)
    assert host.list_dirs("/proc") == []  # the link is not a directory of the recording
    with pytest.raises(HostReadError):
        host.list_dirs("/sys")
    with pytest.raises(HostReadError):
        host.list_dirs("/proc/1")


def test_oversized_files_are_refused(tmp_path):
    root = host_dir(tmp_path)
    with open(root / "fs/proc/meminfo", "wb") as f:
        f.truncate(17 << 20)
    with pytest.raises(HostReadError, match="larger than"):
        RecordedHost(root).read_text("/proc/meminfo")


@pytest.mark.parametrize("manifest,message", [
    ("[host]\nformat = 3\n", "format = 3; this llm-doctor reads format 1 and 2. Upgrade"),
    ("[host]\nformat = 'two'\n", "[host] format: expected an integer"),
    ("host = 5\n", "[host]: expected a table"),
    ("[host]\nformat = 2\nlevel = 'fast'\n", "[host] level: expected one of quick, standard, full"),
    ("[host]\nformat = 2\nmodel_dirs = [['x']]\n", "[host] model_dirs: expected a list of strings"),
    ("[host]\nformat = 2\nhostname = 5\n", "[host] hostname: expected a string"),
    ("[host]\nformat = 2\n[errors]\n'/proc/x' = 'gone'\n", "expected a read-failure reason (not-found, no-permission"),
    ("[host]\nformat = 2\n[errors.'/proc/x']\na = 1\n", "expected a read-failure reason"),
    ("[host]\nformat = 2\n[paths.'/m']\ndevice = '8:1'\nfs_total_bytes = 1\n",
     "fs_free_bytes: expected an integer"),
    ("[host]\nformat = 2\n[paths.'/m']\ndevice = 8\nfs_total_bytes = 1\nfs_free_bytes = 1\n",
     "device: expected a string"),
    ("[host]\nformat = 2\n[files.'/m']\n'a.gguf' = 99999999999999999999\n", "expected an integer from 0"),
    ("[host]\nformat = 2\n[[commands]]\nargv = 'dmidecode'\n", "argv: expected a list of strings"),
    ("commands = 5\n[host]\nformat = 2\n", "[[commands]]: expected an array"),
    ("[host]\nformat = 2\n[[commands]]\nargv = ['x']\nrc = 1e9\n", "rc: expected an exit status"),
    ("[host]\nformat = 2\nx = " + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply"),
])
def test_a_wrong_manifest_names_file_key_and_expectation(tmp_path, manifest, message):
    root = host_dir(tmp_path, manifest)
    with pytest.raises(RecordedHostError) as err:
        RecordedHost(root)
    assert message in str(err.value)
    assert str(root / "host.toml") in str(err.value)


@pytest.mark.parametrize("content,message", [
    (b'{"x": NaN}', "NaN is not a JSON number"),
    (b'{"x": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply"),
    (b'{"x": ' + b"9" * 5000 + b"}", "measurements.json"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[1, 2]", "expected a JSON object"),
])
def test_wrong_measurements_are_a_clear_error(tmp_path, content, message):
    root = host_dir(tmp_path)
    (root / "measurements.json").write_bytes(content)
    with pytest.raises(RecordedHostError, match=message):
        RecordedHost(root)


def test_format_1_recordings_still_replay(tmp_path):
    root = host_dir(tmp_path, "[host]\nformat = 1\n")
    (root / "fs/proc/loadavg").write_text("0.1 0.2 0.3 1/100 42\n")
    assert RecordedHost(root).read_text("/proc/loadavg").startswith("0.1")


def test_unknown_sections_are_added_sections_and_ignored(tmp_path):
    root = host_dir(tmp_path, MANIFEST + "[future_section]\nx = 1\n")
    (root / "future.json").write_text("{}")
    RecordedHost(root)


class _Pages(http.server.BaseHTTPRequestHandler):
    hits = 0
    seen_auth: list[str] = []

    def do_GET(self):  # noqa: N802 - the stdlib's name
        type(self).seen_auth.append(self.headers.get("Authorization", ""))
        if self.path == "/hang":
            time.sleep(3)
        if self.path == "/drip":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(30):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:  # the client gave up, as it should
                pass
            return
        type(self).hits += 1
        body = (b"x" * 5000) if self.path == "/big" else f"requests_total {type(self).hits}\n".encode()
        self.send_response(404 if self.path == "/missing" else 200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def pages():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.slow
def test_http_get_is_recorded_in_order_and_replayed(tmp_path, pages):
    rec = RecordingHost(LiveHost(), tmp_path / "cap")
    first = rec.http_get(pages + "/metrics", headers={"Authorization": "Bearer sk-SECRET-1"})
    second = rec.http_get(pages + "/metrics")
    missing = rec.http_get(pages + "/missing")
    with pytest.raises(HostReadError) as err:
        rec.http_get(pages + "/hang", timeout_s=0.5)
    assert err.value.reason == Reason.TIMEOUT
    assert _Pages.seen_auth[0] == "Bearer sk-SECRET-1"
    assert (first.status, missing.status) == (200, 404)
    assert first.body != second.body
    rec.save({})
    for path in (tmp_path / "cap").rglob("*"):
        if path.is_file():
            assert b"sk-SECRET-1" not in path.read_bytes(), path

    replay = RecordedHost(tmp_path / "cap")
    assert replay.http_get(pages + "/metrics") == first
    assert replay.http_get(pages + "/metrics") == second
    assert replay.http_get(pages + "/metrics") == second  # the last answer repeats
    assert replay.http_get(pages + "/missing").status == 404
    with pytest.raises(HostReadError, match="timeout"):
        replay.http_get(pages + "/hang")
    with pytest.raises(HostReadError, match="not recorded"):
        replay.http_get(pages + "/other")
    replay.new_scan()  # a new scan replays from the first answer again
    assert replay.http_get(pages + "/metrics") == first


@pytest.mark.slow
def test_http_get_is_bounded_in_size_and_in_time_even_when_drip_fed(pages):
    host = LiveHost()
    with pytest.raises(HostReadError, match="larger than 1000 bytes"):
        host.http_get(pages + "/big", max_bytes=1000)
    started = time.monotonic()
    with pytest.raises(HostReadError) as err:
        host.http_get(pages + "/drip", timeout_s=1.0)
    assert err.value.reason == Reason.TIMEOUT
    assert time.monotonic() - started < 2.0
    with pytest.raises(HostReadError, match="not an http"):
        host.http_get("file:///etc/passwd")


def test_http_get_refused_connection_is_a_failed_read():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HostReadError) as err:
        LiveHost().http_get(f"http://127.0.0.1:{port}/metrics", timeout_s=1)
    assert err.value.reason == Reason.FAILED


def test_credentials_in_a_url_are_never_recorded(tmp_path, pages):
    rec = RecordingHost(LiveHost(), tmp_path / "cap")
    url = pages.replace("http://", "http://admin:hunter2@") + "/metrics"
    assert "hunter2" not in rec.http_get(url).url
    rec.save({})
    assert "hunter2" not in (tmp_path / "cap" / "http.json").read_text()


def test_nvml_calls_replay_with_values_and_reasons(tmp_path):
    writer = RecordWriter(tmp_path / "gpu")
    writer.nvml("nvmlDeviceGetCount", [], 2)
    writer.nvml("nvmlDeviceGetTemperature", [0, 0], 41)
    writer.nvml("nvmlDeviceGetPcieReplayCounter", [1], Reason.NOT_SUPPORTED)
    writer.save({}, hostname="gpu-node", captured_at="2026-11-29T00:00:00Z")
    host = RecordedHost(tmp_path / "gpu")
    assert host.nvml("nvmlDeviceGetCount") == 2
    assert host.nvml("nvmlDeviceGetTemperature", 0, 0) == 41
    with pytest.raises(HostReadError) as err:
        host.nvml("nvmlDeviceGetPcieReplayCounter", 1)
    assert err.value.reason == Reason.NOT_SUPPORTED
    with pytest.raises(HostReadError) as err:
        host.nvml("nvmlDeviceGetTemperature", 1, 0)
    assert err.value.reason == Reason.NOT_FOUND


def test_a_recording_without_nvml_is_a_host_without_the_driver(tmp_path):
    with pytest.raises(HostReadError) as err:
        RecordedHost(host_dir(tmp_path)).nvml("nvmlDeviceGetCount")
    assert err.value.reason == Reason.LIBRARY_MISSING


def test_the_writer_writes_what_replay_reads(tmp_path):
    w = RecordWriter(tmp_path / "h")
    w.file("/proc/loadavg", "0.5 0.4 0.3 1/200 99\n")
    w.dir("/proc", ["1", "42"])
    w.link("/sys/dev/block/8:0", "../../devices/pci0000:00/block/sda")
    w.stat("/models", PathInfo("8:0", True, 10, 5))
    w.files("/models", {"a.gguf": 3})
    w.links("/proc/42/fd", {"3": "socket:[777]"})
    w.http("http://127.0.0.1:8080/props", HttpResponse("x", 200, "application/json", "{}", 0.01))
    w.save({"level": "quick"}, hostname="h", captured_at="2026-11-29T00:00:00Z")
    host = RecordedHost(tmp_path / "h")
    assert host.read_text("/proc/loadavg").startswith("0.5")
    assert host.list_dirs("/proc") == ["1", "42"]
    assert host.read_link("/sys/dev/block/8:0").endswith("sda")
    assert host.stat("/models") == PathInfo("8:0", True, 10, 5)
    assert host.list_files("/models") == {"a.gguf": 3}
    assert host.list_links("/proc/42/fd") == {"3": "socket:[777]"}
    assert host.http_get("http://127.0.0.1:8080/props").body == "{}"


NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:A2B4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1
"""


def test_listening_sockets_are_parsed_and_malformed_rows_named():
    assert parse_listening(NET_TCP, "/proc/net/tcp", False) == {"4242": "127.0.0.1:8080"}
    with pytest.raises(HostReadError, match="/proc/net/tcp: expected a header"):
        parse_listening("", "/proc/net/tcp", False)
    with pytest.raises(HostReadError, match="line 2: bad address"):
        parse_listening(NET_TCP.replace("0100007F:1F90", "zz:1F90", 1), "/proc/net/tcp", False)


def test_the_process_table_is_read_once_per_scan_and_knows_an_engines_ports(tmp_path):
    script = ("import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
              "print(s.getsockname()[1], flush=True); time.sleep(30)")
    proc = subprocess.Popen(["bash", "-c", f'exec -a /opt/bin/llama-server {sys.executable} -c "{script}"'],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        host = LiveHost()
        table = process_table(host)
        assert process_table(host) is table  # one read per scan
        mine = next(p for p in table if p.pid == proc.pid)
        assert mine.engine == "llama.cpp"
        assert f"127.0.0.1:{port}" in mine.listen
        host.new_scan()
        assert process_table(host) is not table
    finally:
        proc.kill()
        proc.wait()
