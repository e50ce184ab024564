"""Engine commands of the CLI: ``llm-doctor plan`` (a capacity plan).

The memory planned for is ``--gpu-memory`` where given; else this host's (or a recorded
host's, ``--replay DIR``) through the host seam: GPU 0's total from NVML
(``nvmlDeviceGetMemoryInfo``) where there is a GPU, and where there is none (no NVML
library or driver, or no device) the host's available memory, ``MemAvailable`` of
``/proc/meminfo`` (what ``psutil.virtual_memory().available`` reads), for a CPU engine.
Manual equivalent: ``nvidia-smi --query-gpu=memory.total --format=csv`` or ``free -b``.
"""

from __future__ import annotations

import dataclasses
import json
import math

import click

from doctor.commands.setup import open_host
from doctor.seam.host import Host
from doctor.seam.recorded_store import RecordedHostError
from doctor.workload.memory_budget import MemoryFigureError, host_memory
from doctor.workload.model_shape import DTYPE_BYTES, LIMITS, ModelFileError, read_shape
from doctor.workload.plan import (ENGINES, MAX_CONCURRENCY, PlanError, default_engine,
                                  make_plan, parse_size, render)
from doctor.i18n import t
from doctor.redact import safe_display
from probes.host.memory import parse_meminfo

DTYPES = click.Choice(sorted(DTYPE_BYTES))


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _finite(ctx, param, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):  # FloatRange lets NaN through
        raise click.BadParameter(t("{value} is not a number from 0.05 to 1", value=value))
    return value


def _give_it() -> str:
    return t("pass --gpu-memory SIZE (the memory to plan for, e.g. 24GiB)")


def _host_memory(host: Host) -> tuple[int, str, str]:
    """(bytes, "gpu" or "host", where from) of the host's memory, as the module says
    (doctor/workload/memory_budget.py: engine.capacity sizes from the same figure)."""
    try:
        found = host_memory(host, parse_meminfo, _give_it())
    except MemoryFigureError as exc:
        raise click.ClickException(str(exc)) from None
    return found.total_bytes, found.kind, found.source


@click.command()
@click.option("--model", "model_path", required=True, metavar="PATH",
              help="A Hugging Face model directory or its config.json, or a .gguf file.")
@click.option("--gpu-memory", type=_Size(), metavar="SIZE", default=None,
              help="Memory of the card (or of all cards the model is split over): 24GiB, "
                   "80GB. Default: GPU 0's total from NVML; with no GPU the host's available "
                   "memory, for a CPU engine.")
@click.option("--engine", type=click.Choice(ENGINES), default=None,
              help="Whose KV allocation to plan (sliding-window layers differ). Default: "
                   "llama.cpp for a .gguf file, vllm for a config.json.")
@click.option("--dtype", type=DTYPES, default=None,
              help="Weights' precision. Default: config.json's torch_dtype; a GGUF file's own.")
@click.option("--kv-dtype", type=DTYPES, default=None,
              help="KV-cache precision (vLLM --kv-cache-dtype). Default: the weights' 16-bit type.")
@click.option("--context", type=click.IntRange(*LIMITS["context"]), default=None,
              help="Tokens per sequence (prompt + output), at most the model's own maximum. "
                   "Default: that maximum.")
@click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=1,
              show_default=True,
              help="Sequences held in the KV cache at once (vLLM --max-num-seqs, llama.cpp -np).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), default=None,
              callback=_finite,
              help="The share of the memory the engine may take (vLLM's flag). Default: 0.9 "
                   "of a GPU, all of the host's available memory.")
@click.option("--replay", metavar="DIR", default=None,
              help="Take the memory from a host recorded by 'llm-doctor capture DIR'.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal",
              show_default=True)
def plan(model_path, gpu_memory, engine, dtype, kv_dtype, context, concurrency,
         gpu_memory_utilization, replay, fmt) -> None:
    """Will this model fit this card (or this host)? Weights, KV cache, largest concurrency.

    Reads the model's real shape (layers, KV heads, head_dim, parameters, sliding-window
    layers) from its config.json or GGUF metadata and applies the formulas of the sizing
    articles: weights x 1.2 for runtime overhead; KV bytes a sequence = KV heads x head_dim
    x 2 x bytes per element x (global layers x context + local layers x the window the
    engine allocates). The longest context is capped at the model's own maximum.

    \b
    llm-doctor plan --model /models/llama-2-7b --gpu-memory 24GiB --dtype fp16 \\
        --context 2048 --concurrency 16
    llm-doctor plan --model gemma-3-270m-q4_k_m.gguf      (this host's GPU, or its memory)
    Exit codes: 0 fits, 1 does not fit, 3 the model file cannot be read or sized, or a
    figure is refused (the message names the file, the key or the flag).
    """
    try:
        shape = read_shape(model_path)
        if context and shape.max_context and context > shape.max_context:
            raise click.ClickException(t(
                "{source}: --context {context:,} is above the model's own maximum of "
                "{maximum:,} tokens (its max_position_embeddings or <arch>.context_length); "
                "give --context {maximum} or less (vLLM refuses a longer --max-model-len, "
                "llama.cpp runs one past its training)", source=shape.source, context=context,
                maximum=shape.max_context))
        if gpu_memory is None:
            memory, kind, source = _host_memory(open_host(replay))
        else:
            memory, kind, source = gpu_memory, "gpu", "--gpu-memory"
        share = gpu_memory_utilization or (0.9 if kind == "gpu" else 1.0)
        result = make_plan(shape, memory, dtype=dtype, kv_dtype=kv_dtype, context=context,
                           concurrency=concurrency, gpu_memory_utilization=share,
                           engine=engine or default_engine(shape), memory_kind=kind,
                           memory_source=source)
        # strict JSON: a figure that is not finite is an error here, never "Infinity" printed
        text = (json.dumps(dataclasses.asdict(result), indent=2, allow_nan=False) + "\n"
                if fmt == "json" else render(result))
    except (ModelFileError, PlanError, RecordedHostError) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # allow_nan: validation should have made this impossible
        raise click.ClickException(t("{model}: the plan holds a figure that is not finite "
                                     "({error}); please report it with the model file",
                                     model=safe_display(model_path), error=exc)) from None
    click.echo(text, nl=False)
    raise SystemExit(0 if result.fits else 1)
