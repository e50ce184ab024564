"""Parsers of the host's text formats, on real outputs."""

from __future__ import annotations

import pytest

from probes.helpers.dimms import _channel_key, parse_dmidecode
from probes.host.cpu import parse_cpuinfo, parse_khz, parse_loadavg
from probes.host.limits import parse_limits
from probes.host.memory import parse_meminfo
from probes.host.storage import mount_of
from probes.host.sysctl import parse_choice, parse_int, tcp_ext
from probes.helpers.kernel_text import MalformedError
from probes.helpers.processes import engine_of, model_path_of, redact

LIMITS = "".join("%-25s %-20s %-20s %-10s\n" % row for row in (  # proc_pid_limits()'s columns
    ("Limit", "Soft Limit", "Hard Limit", "Units"),
    ("Max cpu time", "unlimited", "unlimited", "seconds"),
    ("Max processes", "96364", "96364", "processes"),
    ("Max open files", "512", "20000", "files"),
    ("Max locked memory", "8388608", "unlimited", "bytes"),
))


def test_parse_limits():
    assert parse_limits(LIMITS) == {
        "nproc_soft": 96364, "nproc_hard": 96364, "nofile_soft": 512, "nofile_hard": 20000,
        "memlock_soft": 8388608, "memlock_hard": None}


def test_an_unlimited_limit_says_so_in_the_records_missing():
    from probes.host.limits import _limits
    row = _limits(4242, "python3", "vllm", LIMITS, "/proc/4242/limits")
    assert row.memlock_hard_bytes is None and row.nproc_soft == 96364
    assert row.missing == {"memlock_hard_bytes": "unlimited (/proc/4242/limits)"}


MALFORMED = [  # (parser call, the whole message)
    (lambda: parse_loadavg(""), "/proc/loadavg: expected 5 fields, got 0"),
    (lambda: parse_loadavg("nan 0.1 0.1 1/2 3\n"), "/proc/loadavg: expected a load average, got 'nan'"),
    (lambda: parse_loadavg("1e999 0.1 0.1 1/2 3\n"), "/proc/loadavg: expected a load average, got '1e999'"),
    (lambda: parse_limits(LIMITS.replace("512    ", "abc    "), "/proc/1234/limits"),
     "/proc/1234/limits: expected 'Max open files' soft limit as a number, got 'abc'"),
    (lambda: parse_limits(LIMITS.replace("512    ", "-5     "), "/proc/1234/limits"),
     "/proc/1234/limits: expected 'Max open files' soft limit as a number, got '-5'"),
    (lambda: parse_limits(LIMITS.replace("20000", str(2**64))),
     "/proc/self/limits: 18446744073709551616 is past the largest value the kernel prints (2**63 - 1)"),
    (lambda: parse_limits(LIMITS.replace("512 ", "50000 ")),
     "/proc/self/limits: 'Max open files' soft limit is above its hard limit"),
    (lambda: parse_limits(LIMITS.replace("Max open files", "Max open filez")),
     "/proc/self/limits: no 'Max open files' row"),
    (lambda: parse_limits(""),
     "/proc/self/limits: no 'Max open files', 'Max processes', 'Max locked memory' row"),
    (lambda: parse_int("/proc/sys/net/core/somaxconn", "garbage\n"),
     "/proc/sys/net/core/somaxconn: expected an integer, got 'garbage'"),
    (lambda: parse_int("/proc/sys/net/core/somaxconn", "\n"),
     "/proc/sys/net/core/somaxconn: expected 1 fields, got 0"),
    (lambda: parse_int("/proc/sys/net/ipv4/tcp_rmem", "4096 131072\n", 2, of=3),
     "/proc/sys/net/ipv4/tcp_rmem: expected 3 fields, got 2"),
    (lambda: parse_choice("/sys/kernel/mm/transparent_hugepage/enabled", "always madvise never\n"),
     "/sys/kernel/mm/transparent_hugepage/enabled: expected one [bracketed] choice, got 0"),
    (lambda: tcp_ext("TcpExt: A B\nTcpExt: 1 x\n"), "/proc/net/netstat: expected a TcpExt B count, got 'x'"),
    (lambda: tcp_ext("IpExt: A\nIpExt: 1\n"),
     "/proc/net/netstat: expected a TcpExt header and value line, got 0 line(s)"),
    (lambda: parse_meminfo("MemTotal: lots kB\n"), "/proc/meminfo: expected a number for MemTotal, got 'lots'"),
    (lambda: parse_meminfo("MemTotal: 1 kB\ngarbage\n"),
     "/proc/meminfo: line 2: expected 'Key: number [kB]', got 'garbage'"),
    (lambda: parse_cpuinfo("\n\n"), "/proc/cpuinfo: no 'processor' entry: not a /proc/cpuinfo"),
    (lambda: parse_khz("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "<unknown>\n"),
     "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq: expected a frequency in kHz, got '<unknown>'"),
]


@pytest.mark.parametrize("call, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_kernel_files_name_the_file_and_the_problem(call, message):
    with pytest.raises(MalformedError) as err:
        call()
    assert str(err.value) == message


def test_values_at_the_kernels_limits_are_values():
    assert parse_int("/proc/sys/fs/file-max", "9223372036854775807\n") == 2**63 - 1
    assert parse_loadavg("0.00 12.50 3.07 1/1691 412877\n") == (0.0, 12.5)
    assert parse_choice("/x", "always [madvise] never\n") == "madvise"
    assert tcp_ext("TcpExt: ListenOverflows ListenDrops\nTcpExt: 3 4\n") == {
        "ListenOverflows": 3, "ListenDrops": 4}


def test_parse_meminfo():
    kb = parse_meminfo("MemTotal:       24683652 kB\nSwapTotal:             0 kB\nHugePages_Total:       0\n")
    assert kb == {"MemTotal": 24683652, "SwapTotal": 0, "HugePages_Total": 0}


def test_parse_cpuinfo_two_sockets():
    block = "processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nphysical id\t: {s}\ncore id\t\t: {c}\nflags\t\t: fpu avx2 avx512f\n\n"
    text = "".join(block.format(n=i, s=i // 4, c=i % 2) for i in range(8))
    model, cores, sockets, flags = parse_cpuinfo(text)
    assert model.startswith("Intel(R) Xeon(R) Gold 6338")
    assert (cores, sockets) == (4, 2)
    assert {"avx2", "avx512f"} <= flags


DMI = """# dmidecode 3.4
Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tSize: 32 GB
\tLocator: DIMM_A1
\tBank Locator: P0_Node0_Channel0_Dimm0
\tType: DDR4
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 2133 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tSize: No Module Installed
\tLocator: DIMM_A2

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tSize: 32 GB
\tLocator: DIMM_B1
\tBank Locator: P0_Node0_Channel1_Dimm0
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 2133 MT/s
"""


def test_parse_dmidecode_skips_empty_slots():
    devices = parse_dmidecode(DMI)
    assert [d["Locator"] for d in devices] == ["DIMM_A1", "DIMM_B1"]
    assert len({_channel_key(d) for d in devices}) == 2


def test_channel_key_groups_dimms_of_one_channel():
    a = _channel_key({"Bank Locator": "BANK 0", "Locator": "ChannelA-DIMM0"})
    b = _channel_key({"Bank Locator": "BANK 1", "Locator": "ChannelA-DIMM1"})
    c = _channel_key({"Bank Locator": "BANK 2", "Locator": "ChannelB-DIMM0"})
    assert a == b != c
    assert _channel_key({"Locator": "P1-DIMMA1"}) != _channel_key({"Locator": "P2-DIMMA1"})
    assert _channel_key({"Bank Locator": "Not Specified", "Locator": "A1"}) is None  # Dell slot names


def test_no_ceiling_when_locators_name_no_channel(tmp_path):
    from doctor.seam.recorded import RecordedHost
    from probes.helpers.dimms import read_ceiling

    dell = DMI.replace("DIMM_A1", "A1").replace("DIMM_B1", "A2").replace(
        "P0_Node0_Channel0_Dimm0", "Not Specified").replace("P0_Node0_Channel1_Dimm0", "Not Specified")
    (tmp_path / "dmi.out").write_text(dell)
    (tmp_path / "host.toml").write_text(
        '[host]\nformat = 1\n[[commands]]\nargv = ["dmidecode", "-t", "memory"]\n'
        'rc = 0\nstdout_file = "dmi.out"\n')
    ceiling = read_ceiling(RecordedHost(tmp_path))
    assert ceiling.ceiling_gbps is None and ceiling.configured_mts == 2133
    assert "name no memory channel" in ceiling.reason

    # The same Dell server with its EDAC driver loaded: two DIMMs, one per channel.
    for i, (mc, channel) in enumerate([("mc0", 0), ("mc0", 1)]):
        folder = tmp_path / "fs/sys/devices/system/edac/mc" / mc / f"dimm{i}"
        folder.mkdir(parents=True)
        (folder / "dimm_location").write_text(f"channel {channel} slot 0 \n")
        (folder / "size").write_text("32768\n")
    ceiling = read_ceiling(RecordedHost(tmp_path))
    assert (ceiling.channels, ceiling.ceiling_gbps, ceiling.reason) == (2, round(2 * 2133 * 8 / 1000, 1), None)


def test_mount_of_takes_the_longest_mount_point():
    info = ("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
            "40 22 8:17 / /data rw,relatime - ext4 /dev/sdb1 rw\n"
            "41 22 0:50 / /data2 rw - nfs4 srv:/x rw\n")
    assert mount_of(info, "/data/models/x") == ("ext4", "/data")
    assert mount_of(info, "/data2/m") == ("nfs4", "/data2")
    assert mount_of(info, "/database") == ("ext4", "/")


def test_engine_detection_and_model_path():
    cases = {
        "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model /models/x": ("vllm", "/models/x"),
        "/usr/local/bin/vllm serve /models/q --port 8000": ("vllm", "/models/q"),
        "python -m sglang.launch_server --model-path /m --tp 2": ("sglang", "/m"),
        "/usr/local/bin/text-generation-launcher --model-id /data/m": ("tgi", "/data/m"),
        "/opt/llama.cpp/llama-server -m /m/a.gguf --metrics": ("llama.cpp", "/m/a.gguf"),
        "/usr/bin/ollama serve": ("ollama", None),
        "vim vllm-notes.txt": (None, None),
        "python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3-8B": ("vllm", None),
    }
    for cmdline, (engine, model) in cases.items():
        assert (engine_of(cmdline), model_path_of(cmdline)) == (engine, model), cmdline


def test_redact():
    assert redact("llama-server --api-key=abc -m x") == "llama-server --api-key=*** -m x"
    assert redact("vllm serve m --api-key sk-1 --port 1") == "vllm serve m --api-key *** --port 1"
    assert redact("x HF_TOKEN=hf_abc --hf-token=t --max-tokens 5") == "x HF_TOKEN=*** --hf-token=*** --max-tokens 5"


def test_engine_process_titles():
    assert engine_of("VLLM::EngineCore") == "vllm"
    assert engine_of("sglang::scheduler_TP0") == "sglang"


PLANTED = [  # (file in the recorded host, its new content, probe, the probe's error message)
    ("/proc/sys/net/core/somaxconn", "garbage\n", "host.sysctl",
     "/proc/sys/net/core/somaxconn: expected an integer, got 'garbage'"),
    ("/proc/loadavg", "", "host.cpu", "/proc/loadavg: expected 5 fields, got 0"),
    ("/proc/self/limits", LIMITS.replace("Max open files ", "Max open fields"), "host.limits",
     "/proc/self/limits: no 'Max open files' row"),
    ("/proc/meminfo", "MemFree: 1 kB\n", "host.memory", "/proc/meminfo: no MemTotal row"),
]


@pytest.mark.parametrize("path, text, probe, message", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_malformed_file_is_its_probes_error(tmp_path, path, text, probe, message):
    import shutil

    from doctor.model import Level, ScanOptions
    from doctor.seam.recorded import RecordedHost
    from probes.registry import PROBES
    from doctor.scan import scan
    from tests.conftest import FIXTURE_HOSTS

    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave", root, symlinks=True)
    (root / "fs" / path.lstrip("/")).write_text(text)
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, [])
    result = next(p for p in report.probes if p.name == probe)
    assert (result.status, result.reason) == ("error", message)
