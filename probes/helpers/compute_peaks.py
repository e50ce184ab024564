"""The compute ceiling of prefill: a card's dense BF16/FP16 tensor peak, and the prompt tokens a
second it allows a model.

Prefill computes every prompt token through every weight: about ``2 x parameters`` FLOPs a
token (one multiply and one add a weight; attention's ``O(context)`` part is left out, which
matters only for prompts of many thousand tokens). So ``ceiling = gpus x peak / (2 x
parameters)`` prompt tokens a second. The peak is the vendor's dense figure (not the "with
sparsity" one, twice it, which needs 2:4-pruned weights): a GEMM reaches 0.6-0.8 of it on large
matrices, and a short prompt far less, so prefill efficiency is a figure to read, not a fault.

``parameters`` is every parameter of the checkpoint: a mixture of experts computes only its
active experts', so its ceiling here is low by the ratio of total to active (said in the
record's source).

Dense BF16 tensor TFLOPS (FP16 is the same on each), from the vendors' datasheets:

* H100 SXM 989, H100 PCIe 756, H100 NVL 835, H200 989: NVIDIA H100 datasheet (table
  "Technical Specifications": 1,979 / 1,513 / 1,671 with sparsity), H200 datasheet;
* A100 312: NVIDIA A100 datasheet (624 with sparsity);
* L40S 362: NVIDIA L40S datasheet (733 with sparsity); L40 181 (362.1 with sparsity);
* L4 121: NVIDIA L4 datasheet (242 with sparsity);
* A10 125: NVIDIA A10 datasheet (250 with sparsity);
* GeForce RTX 4090 165.2 (FP32 accumulate, as frameworks run it; 330.3 with FP16
  accumulate): NVIDIA Ada Lovelace architecture whitepaper, appendix table;
* Instinct MI300X 1307.4: AMD Instinct MI300X datasheet (2,614.9 with sparsity).

CPUs: no peak. llm-doctor measures no CPU GEMM (probes/kernels/ times GPUs only), and a CPU's
vector peak depends on ISA, cores and clocks it does not read: a CPU engine's prefill
efficiency is absent, with that reason.
"""

from __future__ import annotations

import re

# (pattern on the NVML/amd-smi name, dense BF16 TFLOPS, source); the first match wins, so the
# longer names come first (L40S before L40 before L4, A100 before A10, H100 PCIe before H100)
DENSE_BF16_TFLOPS: tuple[tuple[str, float, str], ...] = (
    (r"H100.*PCIe", 756.0, "NVIDIA H100 PCIe datasheet"),
    (r"H100.*NVL", 835.0, "NVIDIA H100 NVL datasheet"),
    (r"H100", 989.0, "NVIDIA H100 SXM datasheet"),
    (r"H200", 989.0, "NVIDIA H200 datasheet"),
    (r"A100", 312.0, "NVIDIA A100 datasheet"),
    (r"L40S", 362.0, "NVIDIA L40S datasheet"),
    (r"L40\b", 181.0, "NVIDIA L40 datasheet"),
    (r"\bL4\b", 121.0, "NVIDIA L4 datasheet"),
    (r"\bA10\b", 125.0, "NVIDIA A10 datasheet"),
    (r"RTX 4090", 165.2, "NVIDIA Ada Lovelace whitepaper (FP32 accumulate)"),
    (r"MI300X", 1307.4, "AMD Instinct MI300X datasheet"),
)


def dense_peak(name: str | None) -> tuple[float | None, str | None]:
    """(dense BF16 TFLOPS of one card, the datasheet) for a GPU's name; (None, None) unknown."""
    for pattern, tflops, source in DENSE_BF16_TFLOPS:
        if name and re.search(pattern, name):
            return tflops, source
    return None, None


def prefill_ceiling(params: int, tflops: float, gpus: int) -> float:
    """Prompt tokens a second the cards' dense peak allows: ``gpus x peak / (2 x params)``."""
    return round(max(gpus, 1) * tflops * 1e12 / (2 * params), 1)
