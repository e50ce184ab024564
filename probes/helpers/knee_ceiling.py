"""Throughput at the knee against the memory-bandwidth ceiling of a batch (engine.roofline).

At a batch of B sequences, one decode step reads the weights once for all of them and each
sequence's KV cache once, so the step cannot be shorter than
``(weights + B x kv) / bandwidth`` and all sequences together cannot produce more than
``B / that`` tokens a second (split weights: each part at its memory's bandwidth, as the
one-sequence ceiling). ``llm-doctor load`` found the knee: the concurrency past which
throughput stops rising (doctor/workload/knee.py), and its output tokens/s there
(read here from the saved sweep, as engine.load reads it). Their ratio says why throughput stops there: near the
ceiling the memory is full-time busy and only fewer bytes, faster memory or more replicas
raise it; far below it the engine stops adding sequences before the memory is busy
(scheduling: --max-num-seqs, llama.cpp -np, a full KV cache, preemption).

The KV cache is counted at the context engine.roofline measured at concurrency one (the
sweep saves no prompt lengths); the sweep's throughput counts every token the level
produced over its window, prefills' time included, so a healthy engine stays somewhat
below the ceiling. Far past a GPU's ridge point (batches of hundreds) compute, not memory,
would bound the step: a knee there is not judged against memory alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from doctor.i18n import lazy, t
from doctor.seam.host import Host
from probes.helpers.engine_sweep import knee_throughput, saved_sweep

# one-sequence ceiling function of engine.roofline: (gpu bytes, host bytes) -> (tokens/s, why)
Ceiling = Callable[[int, int], "tuple[float | None, str | None]"]

FIELDS = ("knee_concurrency", "knee_tokens_per_s", "knee_ceiling_tokens_per_s", "knee_efficiency")


@dataclass(frozen=True, slots=True)
class SavedKnee:
    """What ``llm-doctor load`` saved for one endpoint (probes/helpers/engine_sweep.py)."""

    concurrency: int | None
    status: str | None  # found | not-reached | no-data | unreadable | outdated; None: none saved
    file: str
    tokens_per_s: float | None  # all sequences' output tokens/s at the knee's level
    endpoint: str = "URL"  # the engine's base URL, for the command that measures it


def saved_knee_of(host: Host, base_url: str | None) -> SavedKnee | None:
    """The knee saved for ``base_url``, read through the host (a recording holds it)."""
    if not base_url:
        return None
    (knee, status, _, path), points = saved_sweep(host, base_url)
    return SavedKnee(knee, status, path, knee_throughput(knee, points), base_url)


def no_knee_reason(status: str | None, file: str, url: str) -> str:
    """Why an endpoint has no knee (engine.load's and engine.roofline's records say it), with
    the command that measures one."""
    if status is None:
        return t("no throughput knee measured: `llm-doctor load --endpoint {url}` sweeps "
                 "the concurrency and saves the knee the next scan reads", url=url)
    return t("no throughput knee in the saved sweep ({status}, {file}): `llm-doctor load "
             "--endpoint {url}` again, to a higher concurrency", status=status, file=file, url=url)


def knee_parts(saved: SavedKnee | None, weights: tuple[int, int] | None,
               kv: tuple[int, int] | None, ceiling: Ceiling, missing: dict[str, str]) -> dict:
    """The knee's fields of engine.roofline's record: the saved knee's concurrency and output
    tokens/s, the batch ceiling there, and their ratio; each absent one's reason in
    ``missing``. ``weights`` and ``kv`` are (bytes in GPU memory, bytes in host memory): the
    weights read once a step, one sequence's KV cache read once a token."""
    out: dict = dict.fromkeys(FIELDS)
    if saved is None or saved.status != "found" or not saved.concurrency:
        why: str = no_knee_reason(saved.status if saved else None,
                                  saved.file if saved else "", saved.endpoint if saved else "URL")
    elif not saved.tokens_per_s:
        why = lazy("the saved sweep has no output tokens/s at its knee")
    else:
        out["knee_concurrency"] = saved.concurrency
        out["knee_tokens_per_s"] = saved.tokens_per_s
        why = ""
    if why:
        missing["knee_tokens_per_s"] = missing["knee_concurrency"] = why
    if weights is None:
        missing["knee_ceiling_tokens_per_s"] = missing.get("ceiling_tokens_per_s") or lazy(
            "the model's bytes are not known")
    elif kv is None:
        missing["knee_ceiling_tokens_per_s"] = lazy(
            "the context is not known: a batch reads each sequence's KV cache, so its "
            "ceiling needs it")
    elif out["knee_concurrency"]:
        batch = out["knee_concurrency"]
        steps, absent = ceiling(weights[0] + batch * kv[0], weights[1] + batch * kv[1])
        if steps is None:
            missing["knee_ceiling_tokens_per_s"] = absent or lazy("not computed")
        else:
            out["knee_ceiling_tokens_per_s"] = round(steps * batch, 2)
    else:
        missing["knee_ceiling_tokens_per_s"] = missing["knee_concurrency"]
    if out["knee_tokens_per_s"] and out["knee_ceiling_tokens_per_s"]:
        out["knee_efficiency"] = round(out["knee_tokens_per_s"] / out["knee_ceiling_tokens_per_s"], 3)
    else:
        missing["knee_efficiency"] = (missing.get("knee_tokens_per_s")
                                      or missing["knee_ceiling_tokens_per_s"])
    return out
