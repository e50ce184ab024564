"""Parsers of the host's text formats, on real outputs."""

from __future__ import annotations

from probes.dimms import parse_dmidecode, _channel_key
from probes.host_cpu import parse_cpuinfo
from probes.host_limits import parse_limits
from probes.host_memory import parse_meminfo
from probes.host_storage import mount_of
from probes.processes import engine_of, model_path_of, redact

LIMITS = """Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max processes             96364                96364                processes 
Max open files            512                  20000                files     
Max locked memory         8388608              unlimited            bytes     
"""


def test_parse_limits():
    assert parse_limits(LIMITS) == {
        "nproc_soft": 96364, "nproc_hard": 96364, "nofile_soft": 512, "nofile_hard": 20000,
        "memlock_soft": 8388608, "memlock_hard": None}


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
    from doctor.recorded import RecordedHost
    from probes.dimms import read_ceiling

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
