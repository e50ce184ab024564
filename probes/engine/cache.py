"""engine.cache: where each engine keeps its model and compile caches, whether they survive a
restart and have room, and what its start cost it by its own log.

Sources, per vLLM, SGLang or TGI engine found with a pid:

* the caches (probes/helpers/cache_dirs.py): the Hugging Face hub cache (``HF_HUB_CACHE``,
  ``HF_HOME``, or the default under the engine user's ``~/.cache``) or vLLM's
  ``--download-dir``; vLLM's torch.compile cache (``VLLM_CACHE_ROOT``; none with
  ``--enforce-eager``), and SGLang's Triton (``TRITON_CACHE_DIR``) and Inductor
  (``TORCHINDUCTOR_CACHE_DIR``) caches where it runs ``--enable-torch-compile``, from
  ``/proc/<pid>/environ`` and ``/proc/<pid>/cmdline``; each placed on its mount in the
  engine's ``/proc/<pid>/mountinfo`` (tmpfs, a Kubernetes emptyDir or a container's overlay
  root do not survive a restart) and measured by ``statvfs`` (bytes free to the engine's
  user);
* the model the engine was started with (``vllm serve ID``, ``--model``, ``--model-path``,
  ``--model-id``): when it is a hub id, whether the model cache holds a snapshot of it
  (``models--ORG--NAME/snapshots/*``), and ``HF_HUB_OFFLINE`` (else ``TRANSFORMERS_OFFLINE``;
  huggingface_hub's own test: 1, ON, YES, TRUE): unset, a restart asks the hub first, and waits on it where the hub is
  slow or out of reach;
* the engine's own phase lines in what it printed (probes/helpers/engine_output.py;
  engine_phases.py for vLLM: weights load, torch.compile and whether its graphs came from the
  cache, CUDA graph capture; engine_phases_sglang.py for SGLang: weights load and its GiB, CUDA
  graph capture; engine_phases_tgi.py for TGI: the download step and whether every file was
  cached, the shards' load, the warmup), in seconds.

A cold compile is the time before the engine serves (torch.compile and graph capture at
start, repaid at every start whose cache is empty or lost); ``engine-not-warmed-up`` is the
first requests after it serves. The log's ``compile_from_cache`` and ``compile_s`` tell them
apart. Privilege: the engine's user or root (environ, mountinfo, fd). Manual equivalent:
``nsenter -t PID -m findmnt -T ~/.cache/huggingface``; ``nsenter -t PID -m df -h PATH``;
``grep -E 'Loading weights took|torch.compile t|Graph capturing finished' vllm.log`` (SGLang:
``grep -E 'Load weight end|graph end' sglang.log``; TGI: ``grep -E 'download|Shard ready|Warming
up|max batch total' tgi.log``).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers import cache_dirs as C
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_output import output_of
from probes.helpers import engine_phases_sglang, engine_phases_tgi
from probes.helpers.engine_phases import Phases, parse
from probes.helpers.engine_reads import argv_of
from probes.helpers.gpu_common import reason_of
from probes.helpers.process_env import home_of

MAX_ENGINES = 16
# each engine's own start lines (probes/helpers/engine_phases*.py cite their sources)
PHASE_PARSERS = {"vllm": parse, "sglang": engine_phases_sglang.parse, "tgi": engine_phases_tgi.parse}
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}
MODEL_FLAGS = ("--model", "--model-path", "--model-id")
# a hub repo id: huggingface_hub's validate_repo_id (96 characters a part, no "--" or "..")
INT = re.compile(r"[+-]?\d{1,30}")  # what int() takes of an environment value (any decimal digit), bounded
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}")


@dataclass(frozen=True, slots=True)
class EngineStart:
    engine: str
    kind: str
    model_id: str | None  # the hub id it was started with; None for a local path
    model_cached: bool | None  # the model cache holds a snapshot of it; None: not a hub id or unreadable
    hf_hub_offline: bool | None  # HF_HUB_OFFLINE is true; None: the environ was not read
    log_source: str | None  # what was read of its output
    weights_load_s: float | None
    model_load_s: float | None
    compile_s: float | None
    compile_from_cache: bool | None
    graph_capture_s: float | None
    missing: dict[str, str]
    weights_gib: float | None = None  # GPU memory the weights took per rank (vLLM, SGLang)
    download_s: float | None = None  # TGI's download step
    weights_from_cache: bool | None = None  # TGI: every weight file already on the host
    warmup_s: float | None = None  # TGI's warmup (prefill and CUDA graph capture)
    pid: int | None = None
    # vLLM: its torch.compile cache folder by its log, and the start before this one's
    compile_cache_dir: str | None = None
    previous_compile_from_cache: bool | None = None
    previous_compile_cache_dir: str | None = None
    compile_cache_disabled: bool | None = None  # VLLM_DISABLE_COMPILE_CACHE set; None: not read


@dataclass(frozen=True, slots=True)
class CacheRecord:
    caches: tuple[C.CacheDir, ...]
    engines: tuple[EngineStart, ...]
    not_read: tuple[str, ...] = ()


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url} pid {e.pid}"


def model_arg(kind: str, args: list[str]) -> str | None:
    """The model an engine was started with: vLLM's ``serve`` positional, or its flag."""
    if kind == "vllm" and "serve" in args:
        after = args[args.index("serve") + 1:]
        if after and not after[0].startswith("-"):
            return after[0]
    return flag(args, *MODEL_FLAGS)


def hub_id(host: Host, pid: int, value: str | None) -> str | None:
    """``value`` when it names a hub repo, not a folder relative to the engine's cwd."""
    if not value or not HUB_ID.fullmatch(value) or "--" in value or ".." in value:
        return None
    try:
        cwd = host.read_link(f"/proc/{pid}/cwd")
        host.list_dirs(f"/proc/{pid}/root{posixpath.join(cwd, value)}")
        return None  # a local folder of that name
    except HostReadError:
        return value


def cached(host: Host, pid: int, cache: str | None, repo: str) -> tuple[bool | None, str | None]:
    """Whether the hub cache at ``cache`` holds a snapshot of ``repo`` (its layout:
    ``models--ORG--NAME/snapshots/<revision>/``), and why it is unknown."""
    if not cache:
        return None, "no model cache path"
    folder = f"/proc/{pid}/root{cache}/models--{repo.replace('/', '--')}/snapshots"
    try:
        return bool(host.list_dirs(folder)), None
    except HostReadError as exc:
        if reason_of(exc) == "not-found":
            return False, None
        return None, f"{folder}: {reason_of(exc)}"


def _engine(host: Host, e: Engine) -> tuple[list[C.CacheDir], EngineStart]:
    pid = e.pid
    assert pid is not None  # the caller keeps engines with a pid
    label, env = _label(e), C.Env(host, pid)
    home = env.get("HOME")
    home_why = None
    if not home:
        home, home_why = home_of(host, pid)
    table, table_why = C.mount_table(host, pid)
    args = argv_of(host, pid)
    no_home = t("no home directory for the default: {why}", why=home_why)
    download = flag(args, "--download-dir") if e.kind == "vllm" else None
    model_path: str | None = download
    by = "--download-dir"
    if not download:
        model_path, by = C.hub_cache(env, home)
    model = C.place(host, pid, table, table_why, label, "model",
                    "download-dir" if download else "hf-hub", model_path, by, no_home)
    caches = [model]
    if compiles(e, args):
        user = C.user_of(host, pid, env)
        for name, path, set_by in C.compile_caches(e.kind, env, home, user):
            caches.append(C.place(host, pid, table, table_why, label, "compile", name, path,
                                  set_by, no_home if name != "inductor" else "no user name for /tmp/torchinductor_<user>"))
    start = _start(host, e, env, model_arg(e.kind, args), model.path)
    return _with_costs(caches, start), start


def compiles(e: Engine, args: list[str]) -> bool:
    """Whether the engine compiles at start: vLLM unless ``--enforce-eager`` (torch.compile
    and CUDA graphs off); SGLang only with ``--enable-torch-compile`` (its default runs no
    torch.compile, and its few Triton kernels build in seconds)."""
    if e.kind == "vllm":
        return not e.enforce_eager and "--enforce-eager" not in args
    return e.kind == "sglang" and "--enable-torch-compile" in args


def _start(host: Host, e: Engine, env: C.Env, model: str | None, model_cache: str | None) -> EngineStart:
    pid = e.pid
    assert pid is not None
    missing: dict[str, str] = {}
    repo = hub_id(host, pid, model)
    is_cached, why = cached(host, pid, model_cache, repo) if repo else (None, None)
    if repo is None:
        missing["model_cached"] = (t("not started with a hub id") if model
                                   else t("no model on its command line"))
    elif why:
        missing["model_cached"] = why
    # huggingface_hub's constants.py reads TRANSFORMERS_OFFLINE where HF_HUB_OFFLINE is unset
    offline_value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")
    offline = None if env.refused else C.is_true(offline_value)
    if env.refused:
        missing["hf_hub_offline"] = f"/proc/{pid}/environ: {env.refused}"
    phases = Phases()
    source = None
    parser = PHASE_PARSERS.get(e.kind)
    if parser is not None:
        out = output_of(host, pid)
        source = out.source
        phases = parser(list(out.lines))
        if out.reason:
            missing["log_source"] = out.reason
        elif not phases.lines:
            missing["compile_s"] = t("{source}: no phase line of {engine}'s start", source=source,
                                     engine=ENGINE_NAMES[e.kind])
        elif e.kind != "vllm":
            missing["compile_s"] = t("{engine} logs no torch.compile phase of its own",
                                     engine=ENGINE_NAMES[e.kind])
    return EngineStart(_label(e), e.kind, repo, is_cached, offline, source, phases.weights_load_s,
                       phases.model_load_s, phases.compile_s, phases.compile_from_cache,
                       phases.graph_capture_s, missing, phases.weights_gib, phases.download_s,
                       phases.weights_from_cache, phases.warmup_s, pid, phases.compile_cache_dir,
                       phases.previous_compile_from_cache, phases.previous_compile_cache_dir,
                       _compile_cache_disabled(e, env))


def _compile_cache_disabled(e: Engine, env: C.Env) -> bool | None:
    """Whether vLLM's compile cache is switched off; None for another engine or an environ
    not read."""
    if e.kind != "vllm":
        return None
    value = env.get("VLLM_DISABLE_COMPILE_CACHE")
    return None if env.refused else cache_switched_off(value)


def cache_switched_off(value: str | None) -> bool:
    """``VLLM_DISABLE_COMPILE_CACHE`` as vllm/envs.py reads it (``bool(int(os.getenv(...,
    "0")))``): a non-zero integer switches the cache off, and every start compiles. Anything
    else makes vLLM's int() raise, and that engine would not have started."""
    text = (value or "0").strip()
    return bool(INT.fullmatch(text)) and int(text) != 0


def _with_costs(caches: list[C.CacheDir], start: EngineStart) -> list[C.CacheDir]:
    """Each cache with what this start paid to fill it, where the log said."""
    out = []
    for c in caches:
        if c.role == "model":
            # TGI fills the cache in a download step of its own; vLLM and SGLang inside their
            # weights load
            cost = start.download_s if start.kind == "tgi" else start.weights_load_s or start.model_load_s
            out.append(replace(c, start_cost_s=cost,
                               holds_model=start.model_id is not None))
        elif c.name == "vllm-compile":
            out.append(replace(c, start_cost_s=start.compile_s, from_cache=start.compile_from_cache))
        else:
            out.append(c)
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CacheRecord:
    """The caches and the start of every vLLM, SGLang or TGI engine found with a pid."""
    engines = [e for e in found_engines(host, options, inputs).engines
               if e.kind in C.MODEL_KINDS]
    with_pid = [e for e in engines if e.pid is not None][:MAX_ENGINES]
    not_read = tuple(t("{engine}: no process on this host to read", engine=f"{e.kind} at {e.base_url}")
                     for e in engines if e.pid is None)
    if not with_pid:
        raise Skip(t("no vLLM, SGLang or TGI engine process on this host"))
    caches: list[C.CacheDir] = []
    starts = []
    for e in with_pid:
        found, start = _engine(host, e)
        caches += found
        starts.append(start)
    return CacheRecord(tuple(caches), tuple(starts), not_read)


def summary(record: CacheRecord) -> str:
    parts = []
    for c in record.caches:
        where = c.path or "?"  # why it has none is in the record (a summary keeps plain values)
        kept = (t("lost at a restart ({why})", why=c.ephemeral) if c.persistent is False
                else t("kept") if c.persistent else t("mount not read"))
        if c.free_bytes is not None:
            kept += t(", {gib} GiB free", gib=f"{c.free_bytes / (1 << 30):.1f}")
        parts.append(t("{name} {where}: {kept}", name=c.name, where=where, kept=kept))
    return t("; ").join(parts + list(record.not_read))
