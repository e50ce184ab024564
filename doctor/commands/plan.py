"""Engine commands of the CLI: ``llm-doctor plan`` (a capacity plan, no host needed)."""

from __future__ import annotations

import dataclasses
import json
import math

import click

from doctor.workload.model_shape import DTYPE_BYTES, LIMITS, ModelFileError, read_shape
from doctor.workload.plan import MAX_CONCURRENCY, PlanError, make_plan, parse_size, render
from doctor.redact import safe_display

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


def _finite(ctx, param, value: float) -> float:
    if not math.isfinite(value):  # click's FloatRange lets NaN through: it compares False
        raise click.BadParameter(f"{value} is not a number from 0.05 to 1")
    return value


@click.command()
@click.option("--model", "model_path", required=True, metavar="PATH",
              help="A Hugging Face model directory or its config.json, or a .gguf file.")
@click.option("--gpu-memory", required=True, type=_Size(), metavar="SIZE",
              help="Memory of the card (or of all cards the model is split over): 24GiB, 80GB.")
@click.option("--dtype", type=DTYPES, default=None,
              help="Weights' precision. Default: config.json's torch_dtype; a GGUF file's own.")
@click.option("--kv-dtype", type=DTYPES, default=None,
              help="KV-cache precision (vLLM --kv-cache-dtype). Default: the weights' 16-bit type.")
@click.option("--context", type=click.IntRange(*LIMITS["context"]), default=None,
              help="Tokens per sequence (prompt + output). Default: the model's maximum.")
@click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=1,
              show_default=True,
              help="Sequences held in the KV cache at once (vLLM --max-num-seqs).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), default=0.9,
              show_default=True, callback=_finite,
              help="The share of the card the engine may take (vLLM's flag).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal",
              show_default=True)
def plan(model_path, gpu_memory, dtype, kv_dtype, context, concurrency,
         gpu_memory_utilization, fmt) -> None:
    """Will this model fit this card? Weights, KV cache, largest concurrency.

    Reads the model's real shape (layers, KV heads, head_dim, parameters) from its
    config.json or GGUF metadata and applies the formulas of the sizing articles:
    weights x 1.2 for runtime overhead, KV bytes = layers x KV heads x head_dim x 2 x
    bytes per element x tokens x sequences.

    \b
    llm-doctor plan --model /models/llama-2-7b --gpu-memory 24GiB --dtype fp16 \\
        --context 2048 --concurrency 16
    Exit codes: 0 fits, 1 does not fit, 3 the model file cannot be read or sized (the
    message names the file and the key).
    """
    try:
        shape = read_shape(model_path)
        result = make_plan(shape, gpu_memory, dtype=dtype, kv_dtype=kv_dtype, context=context,
                           concurrency=concurrency, gpu_memory_utilization=gpu_memory_utilization)
        # strict JSON: a figure that is not finite is an error here, never "Infinity" printed
        text = (json.dumps(dataclasses.asdict(result), indent=2, allow_nan=False) + "\n"
                if fmt == "json" else render(result))
    except (ModelFileError, PlanError) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # allow_nan: validation should have made this impossible
        raise click.ClickException(f"{safe_display(model_path)}: the plan holds a figure that "
                                   f"is not finite ({exc}); please report it with the model "
                                   "file") from None
    click.echo(text, nl=False)
    raise SystemExit(0 if result.fits else 1)
