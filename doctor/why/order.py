"""The order the candidate causes are examined in, as the articles order the diagnosis.

For latency (004 §5.3): first-token latency first (compute or queueing?), then generation
speed (at the memory-bandwidth ceiling?), then throughput (is scheduling efficient?). A
cause's phase is PHASES' entry, else found from words in its id (a cause a new rule brings,
``ttft-queue-dominated``, ``decode-below-roofline``); a cause with none comes after the
phases. Within a phase, and for the other rows, domain.md's cause order (CAUSES), then the
id: a cause no list knows still has its place.
"""

from __future__ import annotations

from doctor.i18n import lazy
from doctor.vocabulary import CAUSES

LATENCY_SYMPTOMS = frozenset({"slow-first-token", "slowdown", "queueing-under-load",
                              "memory-bandwidth-bound", "low-gpu-utilization",
                              "kernel-fragmentation", "multi-gpu-slower-than-one"})

FIRST_TOKEN, DECODE, THROUGHPUT = "first-token", "decode", "throughput"
PHASE_ORDER = (FIRST_TOKEN, DECODE, THROUGHPUT)
PHASE_WORDS = {
    FIRST_TOKEN: lazy("1. first token: compute or queueing?"),
    DECODE: lazy("2. generation speed: at the memory-bandwidth ceiling?"),
    THROUGHPUT: lazy("3. throughput: is scheduling efficient?"),
}

PHASES: dict[str, str] = {
    # what the first token waits for: loading, warm-up, the prompt's trip to the GPU
    "engine-stalled": FIRST_TOKEN,  # the first token never comes: read before any figure of speed
    "engine-not-warmed-up": FIRST_TOKEN, "model-reload-thrash": FIRST_TOKEN,
    "model-on-slow-disk": FIRST_TOKEN, "model-on-network-fs": FIRST_TOKEN,
    "gpu-persistence-mode-off": FIRST_TOKEN, "pcie-link-degraded": FIRST_TOKEN,
    "engine-cache-ephemeral": FIRST_TOKEN, "engine-cache-disk-full": FIRST_TOKEN,
    "hf-offline-unset": FIRST_TOKEN, "engine-compile-cache-missed": FIRST_TOKEN,
    "engine-weights-load-slow": FIRST_TOKEN,
    "pcie-bandwidth-low": FIRST_TOKEN, "cpu-powersave-governor": FIRST_TOKEN,
    # what each generated token costs: weights read from memory, at the clocks the card holds
    "gpu-thermal-throttling": DECODE, "gpu-power-throttling": DECODE, "gpu-power-capped": DECODE,
    "gpu-memory-bandwidth-low": DECODE, "host-memory-bandwidth-low": DECODE,
    "model-offloaded-to-cpu": DECODE, "slow-quant-kernel": DECODE, "cuda-graphs-disabled": DECODE,
    "gpu-hardware-errors": DECODE, "numa-misplaced": DECODE, "cpu-contention": DECODE,
    "cpu-quota-throttled": DECODE, "swap-active": DECODE, "gpu-lost-in-container": DECODE,
    "pcie-topology-shared-path": DECODE, "gpu-p2p-blocked": DECODE,
    "nvswitch-fabric-down": DECODE,
    # how many requests are served at once: batching, slots, cache, the front
    "batch-token-budget-small": THROUGHPUT, "past-throughput-knee": THROUGHPUT,
    "too-few-slots": THROUGHPUT, "kv-cache-pressure": THROUGHPUT,
    "engine-preemption": THROUGHPUT, "context-oversized": THROUGHPUT,
    "network-backlog-small": THROUGHPUT, "fd-limit-low": THROUGHPUT,
    "verbose-logging": THROUGHPUT, "frontend-cpu-bound": THROUGHPUT,
    "multi-gpu-load-skew": THROUGHPUT,
    # the knee against the bandwidth ceiling of a batch ("bandwidth" would place it in decode)
    "knee-at-bandwidth-limit": THROUGHPUT, "knee-below-bandwidth-ceiling": THROUGHPUT,
}

# Words in a cause id that place a cause no table lists, in this order of precedence.
_PHASE_HINTS = ((FIRST_TOKEN, ("ttft", "first-token", "prefill", "warm")),
                (DECODE, ("decode", "bandwidth", "roofline", "throttl")),
                (THROUGHPUT, ("queue", "throughput", "knee", "batch", "slot", "schedul")))


def phase_of(symptom: str, cause: str) -> str | None:
    """The diagnosis phase of ``cause`` under ``symptom``; None outside latency rows, or for
    a cause no phase fits."""
    if symptom not in LATENCY_SYMPTOMS:
        return None
    if cause in PHASES:
        return PHASES[cause]
    return next((phase for phase, hints in _PHASE_HINTS if any(h in cause for h in hints)), None)


def sort_key(symptom: str, cause: str) -> tuple[int, int, str]:
    phase = phase_of(symptom, cause)
    rank = PHASE_ORDER.index(phase) if phase is not None else len(PHASE_ORDER)
    return rank, CAUSES.index(cause) if cause in CAUSES else len(CAUSES), cause
