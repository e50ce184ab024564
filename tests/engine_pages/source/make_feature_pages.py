"""Write source/vllm_v1_0.33.0_features_generated.txt: vLLM's speculative-decoding and LoRA
families as vLLM 0.33.0's own code writes them (run once by hand; the page is committed).

Usage: python tests/engine_pages/source/make_feature_pages.py <dir holding vllm/ of the 0.33.0
wheel> (``pip download vllm==0.33.0 --no-deps --only-binary :all:``, sha256 4b6bdec4ab269990…,
unzipped). Runs the wheel's own ``vllm/v1/spec_decode/metrics.py`` (SpecDecodingProm) and
``vllm/v1/metrics/utils.py`` unchanged; only ``vllm.config`` and ``vllm.logger`` are stood in
for (they pull pydantic and the model stack; SpecDecodingProm reads one attribute,
``num_speculative_tokens``). The LoRA gauge is built inside PrometheusStatLogger, which needs
a whole VllmConfig: its lines are copied from ``vllm/v1/metrics/loggers.py`` lines 1099-1111
and 1224-1236 (name, documentation, label names, ``set_to_current_time``), as quoted below.
Values are synthetic: k=4 drafts, one engine, two LoRA states one after the other.
"""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import prometheus_client
from prometheus_client import Gauge, generate_latest

HERE = Path(__file__).resolve().parent


def _stand_ins() -> None:
    config = types.ModuleType("vllm.config")
    config.SpeculativeConfig = object  # type: ignore[attr-defined]
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules.update({"vllm.config": config, "vllm.logger": logger})


def main(wheel_dir: str) -> None:
    sys.path.insert(0, wheel_dir)
    _stand_ins()
    from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

    # vLLM's classes register with prometheus_client's default registry, as in the engine
    registry = prometheus_client.REGISTRY
    spec = types.SimpleNamespace(num_speculative_tokens=4)
    prom = SpecDecodingProm(spec, ["model_name", "engine"], {0: ["Qwen/Qwen3-8B", "0"]})
    stats = SpecDecodingStats.new(4)
    for drafted, accepted in ((4, 4), (4, 2), (4, 1), (4, 0), (4, 3)):
        stats.observe_draft(drafted, accepted)
    prom.observe(stats, 0)
    # vllm/v1/metrics/loggers.py 0.33.0, lines 1103-1111 and 1231-1236:
    lora = Gauge(name="vllm:lora_requests_info", documentation="Running stats on lora requests.",
                 multiprocess_mode="sum",
                 labelnames=["max_lora", "waiting_lora_adapters", "running_lora_adapters"])
    lora.labels(max_lora=2, waiting_lora_adapters="", running_lora_adapters="sql").set_to_current_time()
    lora.labels(max_lora=2, waiting_lora_adapters="chat",
                running_lora_adapters="sql,summarise").set_to_current_time()
    out = HERE / "vllm_v1_0.33.0_features_generated.txt"
    # the default registry's process and python_gc families are on the base page already
    lines = generate_latest(registry).decode().splitlines()
    out.write_text("\n".join(line for line in lines if "vllm:" in line) + "\n")
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
