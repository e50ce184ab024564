"""Issue 28 §9: an engine's identity in finding keys is its kind and listening address
(else its model path, else its pid), so two engines of one kind give two keys; the CPU quota
finding is keyed by the CPU cgroup holding the quota, not the memory controller's path."""

from __future__ import annotations

from doctor.engines import identity
from doctor.model import ProbeResult
from doctor.rules.evaluate import evaluate
from probes.engine.container import EngineContainer
from probes.helpers.engine_flags import identity_of
from probes.helpers.processes import Process
from probes.host.limits import LimitsRecord, ProcessLimits
from tests.builtin_rules import builtin_rules

RULES = {r.id: r for r in builtin_rules()}


def _keys(rule_id: str, probe: str, record) -> list[str]:
    found, errors = evaluate([RULES[rule_id]], [ProbeResult(probe, "ok", 0.1, None, record)])
    assert errors == []
    return [f.key for f in found]


def test_identity_is_kind_and_address_else_model_else_pid():
    assert identity("llama.cpp", ("127.0.0.1:8081", "127.0.0.1:8080")) == "llama.cpp 127.0.0.1:8080"
    assert identity("vllm", (), "/models/qwen") == "vllm /models/qwen"
    assert identity("vllm", (), None, 42) == "vllm pid 42"
    proc = Process(7, "llama-server", "llama-server -m /m/a.gguf --port 8080", "llama.cpp",
                   ("127.0.0.1:8080",))
    assert identity_of(proc) == "llama.cpp 127.0.0.1:8080"
    assert identity_of(Process(8, "llama-server", "llama-server -m /m/a.gguf", "llama.cpp")) \
        == "llama.cpp /m/a.gguf"


def _limits(pid: int, address: str) -> ProcessLimits:
    return ProcessLimits(pid, "llama-server", "llama.cpp", "engine", 256, 256, None, None, None,
                         None, identity=f"llama.cpp {address}")


def test_two_llama_servers_at_256_open_files_are_two_keys():
    """Before: both were `engine llama.cpp`, one series and one alert."""
    record = LimitsRecord((_limits(7, "127.0.0.1:8080"), _limits(8, "127.0.0.1:8081")), 2)
    assert _keys("fd-limit-low", "host.limits", record) == [
        "engine llama.cpp 127.0.0.1:8080", "engine llama.cpp 127.0.0.1:8081"]


def _container(pid: int, address: str) -> EngineContainer:
    nothing = {name: None for name in EngineContainer.__dataclass_fields__}
    return EngineContainer(**(nothing | dict(
        engine=f"llama.cpp pid {pid}", kind="llama.cpp", pid=pid, pids=(pid,),
        cgroup="/user.slice", multi_process=False, shm_source="", cgroup_version=1,
        cpu_quota_cpus=0.3, cpu_quota_dir="/sys/fs/cgroup/cpu/slow", throttled_share=0.0,
        throttled_in_window=0, identity=f"llama.cpp {address}", pool_threads=1,
        pool_source="-t 1")))


def test_the_cpu_quota_key_names_the_engine_and_the_cpu_cgroup_of_the_quota():
    """Before: `llama.cpp /user.slice` for both, the memory controller's path."""
    from probes.engine.container import ContainerRecord

    record = ContainerRecord((_container(7, "127.0.0.1:8080"), _container(8, "127.0.0.1:8081")), "")
    assert _keys("cpu-quota-throttled", "engine.container", record) == [
        "llama.cpp 127.0.0.1:8080 /sys/fs/cgroup/cpu/slow",
        "llama.cpp 127.0.0.1:8081 /sys/fs/cgroup/cpu/slow"]


def test_two_vllm_servers_logging_are_two_keys():
    """verbose-logging was keyed by the kind alone: two vLLMs gave one key."""
    from probes.engine.stacks import StackProcess, StacksRecord

    def one(pid: int, port: int) -> StackProcess:
        return StackProcess(pid, "vllm", 20, 40, 0.35, 0.0, 0.0, (), None,
                            f"http://127.0.0.1:{port}")

    record = StacksRecord((one(10, 8000), one(11, 8001)))
    assert _keys("verbose-logging", "engine.stacks", record) == [
        "vllm http://127.0.0.1:8000", "vllm http://127.0.0.1:8001"]
