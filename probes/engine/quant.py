"""engine.quant: a quantised model told to run on the slow kernel where Marlin would run.

vLLM (and SGLang, which shares its quantisation layer) pick the Marlin kernel for AWQ and
GPTQ checkpoints by themselves; ``--quantization awq`` or ``gptq`` forces the generic kernel,
and vLLM says so: "Detected that the model can run with awq_marlin, however you specified
quantization=awq explicitly, so forcing awq. Use quantization=awq_marlin for faster
inference", then "awq quantization is not fully optimized yet. The speed can be slower than
non-quantized models." Which checkpoints Marlin takes is vLLM's
``AWQMarlinConfig.is_awq_marlin_compatible`` / ``GPTQMarlinConfig.is_gptq_marlin_compatible``
(vllm/model_executor/layers/quantization/awq_marlin.py, gptq_marlin.py) with
``check_marlin_supported`` (utils/marlin_utils.py):

* AWQ: ``quant_method`` "awq", 4 bits with ``zero_point`` true (Marlin's only zero-point
  type is uint4), ``group_size`` in -1, 32, 64, 128;
* GPTQ: ``quant_method`` "gptq", 4 or 8 bits, ``sym`` true, ``desc_act`` present,
  ``group_size`` in -1, 32, 64, 128;
* the GPU: compute capability 8.0 or above (Ampere; ``get_min_capability`` 80).

Sources: ``--quantization`` / ``-q`` from ``/proc/<pid>/cmdline``; the checkpoint's
``quantization_config`` in ``<model_path>/config.json`` (else ``quantize_config.json``, the
file AutoGPTQ/AutoAWQ also write), read through the host so a capture replays it; each GPU's
``nvmlDeviceGetCudaComputeCapability`` (the lowest of them: tensor-parallel ranks run the
same kernel). No privilege. Manual equivalent: ``jq .quantization_config
<model>/config.json``; ``nvidia-smi --query-gpu=compute_cap --format=csv``; ``journalctl -u
vllm | grep -E 'forcing (awq|gptq)|not fully optimized'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import lazy, t
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError
from doctor.values import count, field, page_json
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_reach import label_text
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_reads import argv_of
from probes.helpers.gpu_common import Reader, gpu_count

KINDS = ("vllm", "sglang")
MARLIN_GROUP_SIZES = (-1, 32, 64, 128)  # marlin_utils.MARLIN_SUPPORTED_GROUP_SIZES
MARLIN_MIN_CAPABILITY = 8.0  # AWQMarlinConfig / GPTQMarlinConfig.get_min_capability() = 80
FAST = {"awq": "awq_marlin", "gptq": "gptq_marlin"}
CONFIG_FILES = ("config.json", "quantize_config.json")
MAX_GPUS = 64


@dataclass(frozen=True, slots=True)
class EngineQuant:
    engine: str  # "vllm at http://127.0.0.1:8000 pid 4242"
    kind: str
    model_path: str | None
    quantization: str | None  # --quantization as started; None: the engine chooses
    quant_method: str | None  # the checkpoint's quantization_config.quant_method
    bits: int | None
    group_size: int | None
    config_from: str | None  # the file the quantization config was read from
    marlin_fits: bool | None  # the checkpoint is one Marlin runs (vLLM's is_*_marlin_compatible)
    marlin_why_not: str | None  # why it is not, or why that is unknown
    compute_capability: float | None  # the lowest of the GPUs' (8.0 A100, 7.5 T4)
    gpus: int | None
    gpu_absent: str | None  # no GPU: no kernel to choose, not judged
    fast_kernel: str | None  # awq_marlin / gptq_marlin for the checkpoint's method
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class QuantRecord:
    engines: tuple[EngineQuant, ...]


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url}" + (f" pid {e.pid}" if e.pid else "")


def marlin_fits(config: dict) -> tuple[bool | None, str | None]:
    """(whether vLLM would run this checkpoint with Marlin, why not). None: unknown."""
    method = str(config.get("quant_method", "")).lower()
    bits = count(config.get("bits", config.get("w_bit")))
    group = config.get("group_size", config.get("q_group_size"))
    group = group if isinstance(group, int) and not isinstance(group, bool) else None
    if method not in FAST:
        return None, f"quant_method {method[:40]!r}: neither AWQ nor GPTQ"
    if bits is None or group is None:
        return False, "bits or group_size absent: vLLM does not convert it to Marlin"
    if group not in MARLIN_GROUP_SIZES:
        return False, f"group_size {group}: Marlin takes -1, 32, 64 or 128"
    if method == "awq":
        if config.get("zero_point") is not True or bits != 4:
            return False, "AWQ Marlin needs 4 bits with zero_point true"
        return True, None
    if config.get("sym") is not True or bits not in (4, 8) or "desc_act" not in config:
        return False, "GPTQ Marlin needs 4 or 8 bits, sym true and desc_act given"
    return True, None


def _quant_config(host: Host, model_path: str) -> tuple[dict | None, str | None, str | None]:
    """(quantization config, the file it came from, why absent)."""
    why = None
    for name in CONFIG_FILES:
        path = f"{model_path.rstrip('/')}/{name}"
        try:
            data = page_json(host.read_text(path))
        except HostReadError as exc:
            why = why or str(exc)
            continue
        except ValueError:
            return None, None, f"{path}: not JSON"
        quant = field(data, "quantization_config") if name == "config.json" else data
        if isinstance(quant, dict):
            return quant, path, None
        if name == "config.json" and isinstance(data, dict):
            why = f"{path} has no quantization_config: the checkpoint is not quantised"
    return None, None, why


def _capability(host: Host) -> tuple[float | None, int | None, str | None, str | None]:
    """(lowest compute capability, GPUs, why absent, why no GPU at all)."""
    try:
        gpus = gpu_count(host)
    except Skip as exc:
        return None, None, None, str(exc)
    except HostReadError as exc:
        return None, None, f"no GPU count: {exc}", None
    r = Reader(host)
    found = []
    for index in range(min(gpus, MAX_GPUS)):
        cc = r.mapping(f"cc{index}", "nvmlDeviceGetCudaComputeCapability", index)
        major, minor = count(field(cc, "major")), count(field(cc, "minor"))
        if major is not None and minor is not None and minor < 10:
            found.append(major + minor / 10)
    if not found:
        return None, gpus, "; ".join(r.missing.values()) or "no compute capability from NVML", None
    return round(min(found), 1), gpus, None, None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> QuantRecord:
    """Each vLLM and SGLang engine's --quantization against its checkpoint and GPUs."""
    found = [e for e in found_engines(host, options, inputs).engines if e.kind in KINDS]
    if not found:
        raise Skip(t("no vLLM or SGLang engine: only they choose between AWQ/GPTQ kernels by flag"))
    cc, gpus, cc_why, no_gpu = _capability(host)
    items = []
    for engine in found:
        missing: dict[str, str] = {}
        args = argv_of(host, engine.pid)
        value = flag(args, "--quantization", "-q")
        told = value.lower()[:40] if value else None
        quant, source, why = (_quant_config(host, engine.model_path) if engine.model_path
                              else (None, None, lazy("no local model path on its command line")))
        fits: bool | None = None
        why_not = why
        if quant is not None:
            fits, why_not = marlin_fits(quant)
        if cc is None:
            missing["compute_capability"] = no_gpu or cc_why or "unknown"
        method = str(quant.get("quant_method", "")).lower()[:40] if quant else None
        items.append(EngineQuant(
            _label(engine), engine.kind, engine.model_path, told, method or None,
            count(quant.get("bits", quant.get("w_bit"))) if quant else None,
            count(quant.get("group_size"), minimum=-1) if quant else None,
            source, fits, why_not, cc, gpus, no_gpu, FAST.get(method or ""), missing))
    return QuantRecord(tuple(items))


def summary(record: QuantRecord) -> str:
    return t("; ").join(_one(e) for e in record.engines)


def _one(e: EngineQuant) -> str:
    engine, told = label_text(e.engine), e.quantization or t("unset")
    line = (t("{engine}: --quantization {quantization}, checkpoint {method}", engine=engine,
              quantization=told, method=e.quant_method) if e.quant_method else
            t("{engine}: --quantization {quantization}, checkpoint not quantised or unknown",
              engine=engine, quantization=told))
    if e.marlin_fits is not None:
        line += t(", Marlin fits: yes") if e.marlin_fits else t(", Marlin fits: no")
    if e.compute_capability is not None:
        line += t(", sm {capability}", capability=e.compute_capability)
    return line
