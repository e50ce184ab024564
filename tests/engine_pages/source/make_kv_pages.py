"""Write source/vllm_v1_0.33.0_kv_generated.txt: vLLM's NIXL KV-transfer families and its KV
offload info gauge as vLLM 0.33.0's own code writes them (run once by hand; the page is committed).

Usage: python tests/engine_pages/source/make_kv_pages.py <dir holding vllm/ of the 0.33.0 wheel>
(as make_feature_pages.py). Runs the wheel's own
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py`` (NixlPromMetrics: its
histograms, buckets and counters) and ``vllm/v1/metrics/utils.py`` unchanged; ``vllm.config``,
``vllm.logger`` and the connector factory are stood in for (they pull the model stack;
KVConnectorPromMetrics reads one attribute, ``kv_transfer_config``). The offload info gauge is
built by OffloadPromMetrics, which needs a whole offloading spec: its lines are copied from
``kv_connector/v1/offloading/metrics.py`` (``KV_OFFLOAD_CONFIG_INFO``, ``_INFO_METRIC_HELP``,
``_create_metric``: labelnames = the engine's + the spec's) with the CPU spec's label names,
the fields of ``vllm/v1/kv_offload/cpu/common.py`` CPUOffloadingInfo, as quoted below.
Values are synthetic: 40 transfers, 2 failed, one engine; a CPU tier of 4 GiB.
"""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram, generate_latest

HERE = Path(__file__).resolve().parent
PACKAGES = ("vllm.distributed", "vllm.distributed.kv_transfer",
            "vllm.distributed.kv_transfer.kv_connector", "vllm.distributed.kv_transfer.kv_connector.v1",
            "vllm.distributed.kv_transfer.kv_connector.v1.nixl")


def _stand_ins(wheel_dir: str) -> None:
    config = types.ModuleType("vllm.config")
    config.VllmConfig = config.KVTransferConfig = object  # type: ignore[attr-defined]
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger  # type: ignore[attr-defined]
    factory = types.ModuleType("vllm.distributed.kv_transfer.kv_connector.factory")
    factory.KVConnectorFactory = object  # type: ignore[attr-defined]
    sys.modules.update({"vllm.config": config, "vllm.logger": logger,
                        "vllm.distributed.kv_transfer.kv_connector.factory": factory})
    # the packages' __init__ files start the engine's transport stack (zmq, torch): skipped,
    # their modules load from the wheel's folders as they are
    for package in PACKAGES:
        module = types.ModuleType(package)
        module.__path__ = [str(Path(wheel_dir, *package.split(".")))]  # type: ignore[attr-defined]
        sys.modules[package] = module


def _nixl() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlPromMetrics

    config = types.SimpleNamespace(kv_transfer_config=None)
    types_ = {Gauge: Gauge, Counter: Counter, Histogram: Histogram}
    prom = NixlPromMetrics(config, types_, ["model_name", "engine"], {0: ["Qwen/Qwen3-8B", "0"]})
    durations = [0.02] * 30 + [0.06] * 8 + [0.4, 0.9]
    prom.observe({"transfer_duration": durations, "post_duration": [0.002] * 40,
                  "bytes_transferred": [48 << 20] * 40, "num_descriptors": [120] * 40,
                  "num_failed_transfers": [1], "num_failed_handshakes": [0],
                  "num_failed_notifications": [1], "num_kv_expired_reqs": [0],
                  "num_notifications_after_expiry": [0]}, 0)


def _offload_info() -> None:
    # offloading/metrics.py 0.33.0: KV_OFFLOAD_CONFIG_INFO, _create_metric for a gauge
    # (multiprocess_mode of OffloadingGaugeMetadata's default), labels as CPUOffloadingInfo
    help_ = ("Static configuration of the KV offload managers of this engine instance. "
             "The configured offloading spec declares the label names, and each manager "
             "fills the values, so a series appears from the first scheduler step of its "
             "engine. A manager reports one series for each configuration it holds, and "
             "a label of its own tells the series apart. Each engine reports its own "
             "configuration, not the instance total.")
    info = Gauge(name="vllm:kv_offload_config_info", documentation=help_,
                 labelnames=["model_name", "engine", "cpu_num_chunks", "cpu_blocks_per_chunk",
                             "cpu_kv_cache_size_bytes", "cpu_kv_cache_size_tokens"])
    info.labels("Qwen/Qwen3-8B", "0", "2048", "1", str(4 << 30), "29127").set(1)


def main(wheel_dir: str) -> None:
    sys.path.insert(0, wheel_dir)
    _stand_ins(wheel_dir)
    _nixl()
    _offload_info()
    out = HERE / "vllm_v1_0.33.0_kv_generated.txt"
    lines = generate_latest(prometheus_client.REGISTRY).decode().splitlines()
    out.write_text("\n".join(line for line in lines if "vllm:" in line) + "\n")
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
