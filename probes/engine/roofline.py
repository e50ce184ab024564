"""engine.roofline: each engine's decode speed against its memory-bandwidth ceiling, and its
time to first token taken apart.

Decode reads every weight (and the KV cache of the context) once a generated token, so one
sequence cannot go faster than ``ceiling = bandwidth / bytes per token``
(probes/helpers/weight_bytes.py for the bytes and where they live). The bandwidths:
gpu.bandwidth's measured device copy (read + write counted) of GPU 0 when it ran, else GPU 0's
NVML ceiling (max memory clock x 2 x bus width / 8); host.memory_bandwidth's STREAM triad
for the bytes in host memory (level standard). Split weights add their times:
``1/ceiling = gpu_bytes / gpus / gpu_bw + host_bytes / host_bw``. Where those bytes are read
differs by engine: llama.cpp runs an offloaded layer on the CPU, which reads it at the host's
STREAM rate; vLLM's and SGLang's ``--cpu-offload-gb`` keep weights in host memory that the GPU
reads over its PCIe link every step, each GPU its own share over its own link, so that part
takes ``max(host_bytes / gpus / bus_bw, host_bytes / host_bw)``: ``bus_bw`` is
gpu.bandwidth's pinned host-to-device copy of GPU 0 when it ran, else GPU 0's PCIe ceiling
(NVML's max link generation x width; Gen5 x16: 63 GB/s against a server's 300+ GB/s STREAM).

The measured speed, one sequence: engine.speed's bounded request (llama.cpp's own
``timings.predicted_per_second``, else the client's inter-token latency), else the engine's
inter-token latency histogram mean (vLLM ``vllm:inter_token_latency_seconds``, SGLang's),
with the requests running beside it. ``efficiency = measured / ceiling``: near 1 the engine
is at what the memory allows; far below it something else sets the pace.

Time to first token: vLLM's queue, prefill and TTFT histogram means (``rest`` = TTFT less
both: tokenising, detokenising, HTTP), SGLang's queue and TTFT; llama.cpp's ``prompt_ms`` of
engine.speed's request against its client TTFT: llama.cpp publishes no queue wait (its
``requests_deferred`` counts requests, not time), so the rest of the TTFT is taken as the
wait for a slot (with the HTTP round trip and tokenising in it: milliseconds on loopback,
a network's round trip for a remote --endpoint).

Prefill against a compute ceiling: the prompt tokens a second measured (llama.cpp's
``timings`` of engine.speed's request; vLLM's mean prompt tokens over its mean prefill time)
over ``gpus x dense BF16 peak / (2 x parameters)`` (probes/helpers/compute_peaks.py: the
datasheets' table). Exported, judged by no rule: a short prompt at batch one reaches a few
per cent of a GEMM's peak on a healthy card, and a CPU has no peak llm-doctor measures, so
a threshold would fire on every host; the figure is for reading and diffing.

Throughput at the knee against the ceiling of a batch that large (the weights read once a
step for all its sequences, each one's KV cache once): the knee `llm-doctor load` saved for
the endpoint, its output tokens/s there, over ``B / ((weights + B x kv) / bandwidth)``
(probes/helpers/knee_ceiling.py).

Units: bytes, GB/s (decimal), tokens/s, seconds. No privilege; it sends nothing itself.
Manual equivalent: ``ls -l model.gguf``; ``curl -s :8080/v1/completions -d '{...}' | jq
.timings``; ``curl -s :8000/metrics | grep -E 'queue_time|prefill_time|inter_token'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import lazy, t, translated
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_reach import label_text
from probes.helpers.compute_peaks import dense_peak, prefill_ceiling
from probes.helpers.engine_scrape import for_engine, scraped, with_metrics
from probes.helpers.gpu_bandwidth_record import BandwidthRecord, GpuBandwidth
from probes.helpers.gpu_common import Reader, gpu_count
from probes.helpers.knee_ceiling import SavedKnee, knee_parts, saved_knee_of
from probes.helpers.link_ceilings import link_ceiling_gbps, memory_ceiling_gbps
from probes.helpers.speed_record import SpeedEndpoint, SpeedRecord
from probes.helpers.stream_record import MemoryBandwidthRecord
from probes.helpers.weight_bytes import Placement, kv_read_bytes, placement

KINDS = ("llama.cpp", "vllm", "sglang")


@dataclass(frozen=True, slots=True)
class Bandwidths:
    gpu_present: bool
    gpu_name: str | None
    gpu_gbps: float | None
    gpu_from: str | None  # "gpu.bandwidth device copy" | "NVML ceiling"
    host_gbps: float | None
    missing: dict[str, str]
    # host -> GPU over PCIe, one direction: what --cpu-offload-gb's weights cross every step
    bus_gbps: float | None = None
    bus_from: str | None = None


@dataclass(frozen=True, slots=True)
class EngineRoofline:
    engine: str  # "llama.cpp at http://127.0.0.1:8080 pid 4242"
    kind: str
    model: str | None
    memory: str | None  # where the bytes a token reads live: gpu, host, gpu+host
    placed_from: str
    weights_bytes: int | None  # read once a token
    weights_host_bytes: int | None  # of them in host memory
    gpus: int  # sharing the GPU part
    context_tokens: float | None  # the context a generated token attends to, measured
    kv_read_bytes: int | None  # of the KV cache, a generated token
    bytes_per_token: int | None  # weights + KV cache
    gpu_name: str | None
    gpu_bandwidth_gbps: float | None
    gpu_bandwidth_from: str | None
    host_bandwidth_gbps: float | None  # STREAM triad
    bus_bandwidth_gbps: float | None  # host -> GPU over PCIe, where the GPU reads host memory
    bus_bandwidth_from: str | None
    ceiling_tokens_per_s: float | None  # one sequence, from the bandwidths
    measured_tokens_per_s: float | None  # one sequence, decode
    measured_from: str | None
    concurrency: float | None  # requests running while it was measured
    efficiency: float | None  # measured / ceiling
    ttft_s: float | None  # time to first token (mean)
    queue_s: float | None  # of it waiting in the engine's queue
    prefill_s: float | None  # of it computing the prompt
    rest_s: float | None  # the rest: tokenising, HTTP, detokenising
    queue_share: float | None  # queue_s / ttft_s
    prefill_share: float | None  # prefill_s / ttft_s
    ttft_from: str | None
    prefill_tokens_per_s: float | None  # prompt tokens computed a second, measured
    prefill_from: str | None
    compute_peak_tflops: float | None  # one card's dense BF16 peak, its datasheet's
    compute_peak_from: str | None
    prefill_ceiling_tokens_per_s: float | None  # gpus x peak / (2 x parameters)
    prefill_efficiency: float | None  # measured / ceiling
    knee_concurrency: int | None  # `llm-doctor load`'s saved knee
    knee_tokens_per_s: float | None  # all sequences' output tokens/s at the knee
    knee_ceiling_tokens_per_s: float | None  # a batch that large, from the bandwidths
    knee_efficiency: float | None  # measured / ceiling, at the knee
    missing: dict[str, str]  # field -> why it is None


@dataclass(frozen=True, slots=True)
class RooflineRecord:
    engines: tuple[EngineRoofline, ...]
    not_judged: tuple[str, ...]  # engines of other kinds, each with why


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url}" + (f" pid {e.pid}" if e.pid else "")


def bandwidths(host: Host, inputs: Inputs) -> Bandwidths:
    missing: dict[str, str] = {}
    stream = inputs.get("host.memory_bandwidth", MemoryBandwidthRecord)
    host_gbps = stream.stream_gbps if stream is not None and stream.stream_gbps else None
    if host_gbps is None:
        missing["host_bandwidth_gbps"] = lazy("host memory bandwidth not measured in this scan "
                                             "(host.memory_bandwidth runs at `--level standard`)")
    try:
        gpu_count(host)
    except Skip:
        return Bandwidths(False, None, None, None, host_gbps, missing)
    except HostReadError as exc:
        missing["gpu_bandwidth_gbps"] = f"no GPU count: {exc}"
        return Bandwidths(True, None, None, None, host_gbps, missing)
    copy = inputs.get("gpu.bandwidth", BandwidthRecord)
    measured = next((g for g in copy.gpus if g.index == 0), None) if copy else None
    r = Reader(host)
    bus, bus_from = bus_bandwidth(r, measured, missing)
    if measured is not None and measured.d2d_gbps:
        return Bandwidths(True, measured.name, measured.d2d_gbps, "gpu.bandwidth device copy",
                          host_gbps, missing, bus, bus_from)
    name = r.text("name", "nvmlDeviceGetName", 0)
    ceiling, how = memory_ceiling_gbps(
        name, r.integer("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", 0, 2),
        r.integer("bus_width", "nvmlDeviceGetMemoryBusWidth", 0))
    if not ceiling:
        missing["gpu_bandwidth_gbps"] = f"GPU 0: {how}"
    return Bandwidths(True, name, ceiling or None, "NVML ceiling" if ceiling else None,
                      host_gbps, missing, bus, bus_from)


def bus_bandwidth(r: Reader, measured: GpuBandwidth | None,
                  missing: dict[str, str]) -> tuple[float | None, str | None]:
    """(GB/s, from what) host to GPU 0 over PCIe: the pinned copy gpu.bandwidth timed, else
    the link's ceiling at NVML's max generation and width."""
    if measured is not None and measured.h2d_pinned_gbps:
        return measured.h2d_pinned_gbps, "gpu.bandwidth pinned host-to-device copy"
    gen = r.integer("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", 0)
    width = r.integer("width_max", "nvmlDeviceGetMaxPcieLinkWidth", 0)
    link = link_ceiling_gbps(gen, width)
    if link is None:
        missing["bus_gbps"] = lazy("GPU 0: no PCIe link generation or width from NVML and no "
                                   "host-to-device copy measured (gpu.bandwidth, `--level full`)")
        return None, None
    return link, t("PCIe Gen{gen} x{width} ceiling (NVML)", gen=gen, width=width)


def measured_decode(speed: SpeedEndpoint | None, metrics: EngineMetrics | str | None,
                    not_sent: str | None = None
                    ) -> tuple[float | None, str | None, float | None, str | None]:
    """(tokens/s of one sequence, from what, requests running, why absent); ``not_sent``:
    why engine.speed, which ran, sent this engine nothing."""
    if speed is not None and not speed.error:
        if speed.engine_predicted_per_second:
            return (speed.engine_predicted_per_second,
                    f"llama.cpp timings.predicted_per_second of {speed.engine_predicted_n} tokens "
                    "(engine.speed, one request)", 1.0, None)
        if speed.itl_mean_s:
            return (round(1 / speed.itl_mean_s, 3), "client inter-token latency of "
                    f"{speed.output_tokens} tokens (engine.speed, one request)", 1.0, None)
    if isinstance(metrics, EngineMetrics) and metrics.itl_mean_s:
        return (round(1 / metrics.itl_mean_s, 3),
                f"{metrics.kind} inter-token latency histogram mean ({metrics.means_window})",
                metrics.requests_running, None)
    why = (speed.error if speed is not None and speed.error else not_sent or
           lazy("no inter-token latency: engine.speed did not measure it (it sends requests: "
                "`--level standard`, not `--no-requests`) and the engine's /metrics has no histogram of it"))
    return None, None, None, why


def context_of(speed: SpeedEndpoint | None, metrics: EngineMetrics | str | None) -> float | None:
    """The mean context a generated token attends to: prompt + half the output."""
    if isinstance(metrics, EngineMetrics) and metrics.prompt_tokens_mean is not None:
        return metrics.prompt_tokens_mean + (metrics.generation_tokens_mean or 0) / 2
    if speed is not None and speed.prompt_tokens is not None:
        return speed.prompt_tokens + (speed.output_tokens or 0) / 2
    return None


def ceiling(gpu_bytes: int, host_bytes: int, gpus: int, bw: Bandwidths,
            over_bus: bool = False) -> tuple[float | None, str | None]:
    """(tokens/s one sequence can reach, why absent): every byte read once at its memory's
    rate; ``over_bus``: the GPUs read the host part over their PCIe links (vLLM's and SGLang's
    --cpu-offload-gb), each its share over its own link, no faster than host memory serves it."""
    if gpu_bytes and not bw.gpu_gbps:
        return None, bw.missing.get("gpu_bandwidth_gbps", "no GPU bandwidth")
    if host_bytes and not bw.host_gbps:
        return None, bw.missing["host_bandwidth_gbps"]
    if host_bytes and over_bus and not bw.bus_gbps:
        return None, bw.missing.get("bus_gbps", lazy("no PCIe bandwidth of GPU 0"))
    host_s = host_bytes / (bw.host_gbps * 1e9) if host_bytes and bw.host_gbps else 0.0
    if host_bytes and over_bus and bw.bus_gbps:
        host_s = max(host_s, host_bytes / gpus / (bw.bus_gbps * 1e9))
    seconds = (gpu_bytes / gpus / (bw.gpu_gbps * 1e9) if gpu_bytes and bw.gpu_gbps else 0.0) + host_s
    return (round(1 / seconds, 2), None) if seconds > 0 else (None, "no bytes to read")


def ttft_parts(speed: SpeedEndpoint | None, metrics: EngineMetrics | str | None,
               missing: dict[str, str]) -> dict:
    """TTFT and its parts: the engine's histogram means, else engine.speed's request."""
    out: dict = dict.fromkeys(("ttft_s", "queue_s", "prefill_s", "rest_s", "queue_share",
                               "prefill_share", "ttft_from"))
    if isinstance(metrics, EngineMetrics) and metrics.ttft_mean_s:
        ttft, queue, prefill = metrics.ttft_mean_s, metrics.queue_mean_s, metrics.prefill_mean_s
        out.update(ttft_s=ttft, queue_s=queue, prefill_s=prefill,
                   ttft_from=f"{metrics.kind} histogram means ({metrics.means_window})")
        if prefill is None:
            missing["prefill_s"] = lazy("the engine publishes no prefill-time histogram")
        if queue is None:
            missing["queue_s"] = lazy("the engine publishes no queue-time histogram")
    elif speed is not None and not speed.error and speed.ttft_s:
        return _shares_said(_client_ttft(speed, out, missing), missing)
    else:
        missing["ttft_s"] = lazy("no TTFT histogram on the engine's /metrics and no request "
                                 "measured by engine.speed")
        return _shares_said(out, missing)
    known = (queue or 0.0) + (prefill or 0.0)
    if queue is not None or prefill is not None:
        out["rest_s"] = round(max(ttft - known, 0.0), 6)
    out["queue_share"] = round(min(queue / ttft, 1.0), 3) if queue is not None else None
    out["prefill_share"] = round(min(prefill / ttft, 1.0), 3) if prefill is not None else None
    return _shares_said(out, missing)


def _shares_said(out: dict, missing: dict[str, str]) -> dict:
    """An absent queue or prefill share has its part's reason, else the TTFT's: the rules
    read the shares, and ``why`` says why they were not judged from this."""
    for part in ("queue", "prefill"):
        why = missing.get(f"{part}_s") or missing.get("ttft_s")
        if out[f"{part}_share"] is None and why:
            missing[f"{part}_share"] = why
    return out


def _client_ttft(speed: SpeedEndpoint, out: dict, missing: dict[str, str]) -> dict:
    """engine.speed's request: llama.cpp says how long the prompt took (``timings.prompt_ms``)
    and nothing of the wait before it (its /metrics counts deferred requests, no time), so the
    client's TTFT less the prompt time is the wait: the queue for a slot (``-np``), plus the
    HTTP round trip and tokenising, milliseconds on loopback; judged as queue."""
    ttft = speed.ttft_s or 0.0
    out["ttft_s"] = ttft
    if not speed.engine_prompt_ms:
        out["ttft_from"] = "engine.speed's request: client TTFT"
        missing["queue_s"] = missing["prefill_s"] = lazy(
            "the engine reports no prompt time (llama.cpp timings.prompt_ms): TTFT not taken apart")
        return out
    prefill = round(min(speed.engine_prompt_ms / 1000, ttft), 6)
    queue = round(ttft - prefill, 6)
    out.update(prefill_s=prefill, queue_s=queue, rest_s=None,
               queue_share=round(queue / ttft, 3), prefill_share=round(prefill / ttft, 3),
               ttft_from="engine.speed's request: client TTFT; llama.cpp timings.prompt_ms; the "
                         "queue is the rest (waiting for a slot, HTTP and tokenising)")
    missing["rest_s"] = lazy("counted in the queue: llama.cpp publishes no queue wait, so the "
                             "client's TTFT less the prompt time is the wait and the overhead together")
    return out


def prefill_parts(place: Placement, bw: Bandwidths, speed: SpeedEndpoint | None,
                  metrics: EngineMetrics | str | None, missing: dict[str, str]) -> dict:
    """Prefill speed against the cards' dense compute peak (probes/helpers/compute_peaks.py)."""
    out: dict = dict.fromkeys(("prefill_tokens_per_s", "prefill_from", "compute_peak_tflops",
                               "compute_peak_from", "prefill_ceiling_tokens_per_s",
                               "prefill_efficiency"))
    if speed is not None and not speed.error and speed.engine_prompt_ms and speed.engine_prompt_n:
        out.update(prefill_tokens_per_s=round(speed.engine_prompt_n / speed.engine_prompt_ms * 1000, 1),
                   prefill_from=f"llama.cpp timings of {speed.engine_prompt_n} prompt tokens "
                                "(engine.speed, one request)")
    elif (isinstance(metrics, EngineMetrics) and metrics.prefill_mean_s
          and metrics.prompt_tokens_mean):
        out.update(prefill_tokens_per_s=round(metrics.prompt_tokens_mean / metrics.prefill_mean_s, 1),
                   prefill_from=f"{metrics.kind} mean prompt tokens over mean prefill time "
                                f"({metrics.means_window}; prefix-cache hits counted as computed)")
    else:
        missing["prefill_tokens_per_s"] = lazy(
            "no prompt time: neither llama.cpp timings of a request nor a prefill-time histogram")
    if not bw.gpu_present:
        missing["prefill_ceiling_tokens_per_s"] = lazy(
            "no compute peak for CPUs: llm-doctor measures no CPU matrix multiply")
    else:
        out["compute_peak_tflops"], out["compute_peak_from"] = dense_peak(bw.gpu_name)
        if out["compute_peak_tflops"] is None:
            missing["prefill_ceiling_tokens_per_s"] = t(
                "no dense compute peak known for {gpu} (probes/helpers/compute_peaks.py)",
                gpu=bw.gpu_name or "GPU 0")
    params = place.shape.params if place.shape else None
    if out["compute_peak_tflops"] and params:
        out["prefill_ceiling_tokens_per_s"] = prefill_ceiling(params, out["compute_peak_tflops"],
                                                              place.gpus)
    elif out["compute_peak_tflops"]:
        missing["prefill_ceiling_tokens_per_s"] = lazy("the model's parameter count is not known")
    if out["prefill_tokens_per_s"] and out["prefill_ceiling_tokens_per_s"]:
        out["prefill_efficiency"] = round(out["prefill_tokens_per_s"]
                                          / out["prefill_ceiling_tokens_per_s"], 3)
    else:
        missing["prefill_efficiency"] = missing.get("prefill_ceiling_tokens_per_s") or missing.get(
            "prefill_tokens_per_s") or lazy("not computed")
    return out


def judge(engine: Engine, place: Placement, bw: Bandwidths, speed: SpeedEndpoint | None,
          metrics: EngineMetrics | str | None, not_sent: str | None = None,
          knee: SavedKnee | None = None) -> EngineRoofline:
    """One engine's record from plain values and records (no host); ``not_sent``: why
    engine.speed, which ran, sent this engine no request; ``knee``: what `llm-doctor load`
    saved for it."""
    missing = dict(place.missing)
    total, host_bytes = place.weights_bytes, place.host_bytes
    context = context_of(speed, metrics)
    kv = kv_read_bytes(place.shape, context, place.kv_element_bytes) if place.shape and context else None
    if kv is None:
        missing["kv_read_bytes"] = (lazy("the context is not known: the ceiling counts the weights only")
                                    if place.shape else lazy("the model's shape is not known"))
    per_token = total + (kv or 0) if total is not None else None
    memory = ceiling_s = None
    weights = kv_split = None
    over_bus = False
    if total is not None and host_bytes is not None:
        host_share = host_bytes / total if total else 0.0
        # llama.cpp keeps a layer's KV cache where the layer is; vLLM's --cpu-offload-gb moves
        # weights only, its KV cache blocks stay in GPU memory (unless nothing is on a GPU),
        # and the GPU reads those weights over PCIe
        over_bus = engine.kind != "llama.cpp" and 0 < host_bytes < total and bw.gpu_present
        if engine.kind != "llama.cpp" and host_bytes < total:
            host_share = 0.0
        kv_host = round((kv or 0) * host_share)
        weights = (total - host_bytes, host_bytes)
        kv_split = ((kv or 0) - kv_host, kv_host) if kv is not None else None
        gpu_part, host_part = total - host_bytes + (kv or 0) - kv_host, host_bytes + kv_host
        memory = "+".join(m for m, b in (("gpu", gpu_part), ("host", host_part)) if b) or None
        ceiling_s, why = ceiling(gpu_part, host_part, place.gpus, bw, over_bus)
        if why:
            missing["ceiling_tokens_per_s"] = why
    else:
        missing["ceiling_tokens_per_s"] = missing.get("weights_bytes") or missing.get(
            "weights_host_bytes") or lazy("the model's bytes are not known")
    speed_now, source, running, why = measured_decode(speed, metrics, not_sent)
    if why:
        missing["measured_tokens_per_s"] = why
    efficiency = round(speed_now / ceiling_s, 3) if speed_now and ceiling_s else None
    if efficiency is None:
        missing["efficiency"] = missing.get("ceiling_tokens_per_s") or missing.get(
            "measured_tokens_per_s") or lazy("not computed")
    return EngineRoofline(
        engine=_label(engine), kind=engine.kind, model=place.model, memory=memory,
        placed_from=place.placed_from, weights_bytes=total, weights_host_bytes=host_bytes,
        gpus=place.gpus, context_tokens=context, kv_read_bytes=kv, bytes_per_token=per_token,
        gpu_name=bw.gpu_name, gpu_bandwidth_gbps=bw.gpu_gbps, gpu_bandwidth_from=bw.gpu_from,
        host_bandwidth_gbps=None if bw.host_gbps is None else round(bw.host_gbps, 2),
        bus_bandwidth_gbps=bw.bus_gbps if over_bus else None,
        bus_bandwidth_from=bw.bus_from if over_bus else None,
        ceiling_tokens_per_s=ceiling_s, measured_tokens_per_s=speed_now, measured_from=source,
        concurrency=running, efficiency=efficiency, **ttft_parts(speed, metrics, missing),
        **prefill_parts(place, bw, speed, metrics, missing),
        **knee_parts(knee, weights, kv_split,
                     lambda gpu, host: ceiling(gpu, host, place.gpus, bw, over_bus), missing),
        missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> RooflineRecord:
    """Every llama.cpp, vLLM and SGLang engine against its memory-bandwidth ceiling."""
    inputs = with_metrics(host, options, inputs)
    engines = found_engines(host, options, inputs).engines
    chosen = [e for e in engines if e.kind in KINDS]
    if not chosen:
        raise Skip(t("no llama.cpp, vLLM or SGLang engine: the weights' bytes are read from "
                     "their files and flags"))
    bw = bandwidths(host, inputs)
    speeds = inputs.get("engine.speed", SpeedRecord)
    metrics = scraped(host, options, inputs)
    out = [judge(e, placement(host, e, bw.gpu_present), bw,
                 speeds.of(e.base_url) if speeds else None,
                 for_engine(metrics, e.base_url) if e.base_url else None,
                 _not_sent(speeds, e.base_url), saved_knee_of(host, e.base_url))
           for e in chosen]
    others = tuple(f"{_label(e)}: its weights' placement is not read for {e.kind}"
                   for e in engines if e.kind not in KINDS)
    return RooflineRecord(tuple(out), others)


def _not_sent(speeds: SpeedRecord | None, base_url: str | None) -> str | None:
    """Why engine.speed, which ran, has no measurement of this engine; None when it has one
    or did not run."""
    if speeds is None or speeds.of(base_url) is not None:
        return None
    base = (base_url or "").rstrip("/")
    said = next((why for why in speeds.not_sent if why.startswith(f"{base}:")), None)
    return said or t("engine.speed sent it no request: requests go to the --endpoint engines "
                     "(--requests-to all: to every engine found)")


def summary(record: RooflineRecord) -> str:
    parts = []
    for e in record.engines:
        if e.efficiency is not None:
            parts.append(t("{engine}: decode {measured:.1f} of {ceiling:.1f} tokens/s the {memory} "
                           "memory allows ({efficiency:.0%})", engine=label_text(e.engine),
                           measured=e.measured_tokens_per_s, ceiling=e.ceiling_tokens_per_s,
                           memory=e.memory, efficiency=e.efficiency))
        else:
            parts.append(t("{engine}: efficiency unknown ({why})", engine=label_text(e.engine),
                           why=translated(e.missing.get("efficiency", ""))))
    return t("; ").join(parts)
