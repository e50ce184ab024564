"""``llm-doctor warmup`` and ``llm-doctor load``: the articles' remedies as commands.

Both send real streamed requests to one engine endpoint, bounded in count and time, with
progress on stderr. ``load`` saves its sweep where the scan's ``past-throughput-knee`` rule
finds it: ``$XDG_STATE_HOME/llm-doctor/knee-<hash>.json`` (default
``~/.local/state/llm-doctor/``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict

import click

from doctor.commands.emit import emit
from doctor.i18n import lazy, t
from doctor.workload.loadgen import LoadError, RequestTarget, Workload

API = click.Choice(["completions", "chat"])


class EndpointURL(click.ParamType):
    """``--endpoint``, checked by doctor.endpoints: a bad one is a usage error (exit 3)
    that names it without its key. The value is the endpoint in one spelling, its key
    percent-encoded in it (``http://:KEY@host:port/prefix``)."""

    name = "URL"

    def convert(self, value, param, ctx):
        from doctor.endpoints import EndpointError, parse

        try:
            return parse(value).url
        except EndpointError as exc:
            self.fail(str(exc), param, ctx)


ENDPOINT = EndpointURL()


def _api_key(ctx, param, value: str | None) -> str | None:
    """--api-key goes into a header: printable ASCII only (never shown when refused)."""
    if value is not None and not all(" " < c < "\x7f" for c in value):
        raise click.BadParameter(t("the key must be printable ASCII with no spaces or control "
                                   "characters"), ctx, param)
    return value
class Finite(click.FloatRange):
    """A float range that refuses NaN and infinities: click's own lets NaN through (every
    comparison with NaN is false), and a NaN budget would make every bound false too."""

    name = "finite float"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(t("{value} is not a finite number", value=repr(value)), param, ctx)
        return number


class Levels(click.ParamType):
    """``1,2,4,8``: distinct concurrency levels from 1 to 4096, run in increasing order."""

    name = "levels"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            levels = [int(part) for part in str(value).split(",") if part.strip()]
        except ValueError:
            self.fail(t("{value}: expected concurrency levels such as 1,2,4,8", value=repr(value)),
                      param, ctx)
        if not levels or len(levels) > 32 or any(not 1 <= n <= 4096 for n in levels):
            self.fail(t("{value}: expected 1 to 32 levels, each from 1 to 4096", value=repr(value)),
                      param, ctx)
        if len(set(levels)) != len(levels):
            self.fail(t("{value}: a level is given twice", value=repr(value)), param, ctx)
        return tuple(sorted(levels))


def _endpoint(url: str, api: str, model: str | None, api_key: str | None) -> RequestTarget:
    """The endpoint to load; a key written into the URL (http://:KEY@host:port, as the
    scan's --endpoint takes it) is taken out of it, so it is never printed or saved."""
    from doctor.endpoints import parse
    from doctor.workload.loadgen import Connection

    named = parse(url)
    endpoint = RequestTarget(named.base_url, api, model, api_key or named.key)
    try:
        Connection(endpoint, 1.0)
    except LoadError as exc:
        raise click.BadParameter(str(exc), param_hint="--endpoint") from None
    return endpoint


def _write(text: str, output: str | None) -> None:
    emit(text if text.endswith("\n") else text + "\n", output, lazy("written to {output}"))


def _unreachable_hint() -> str:
    return t("Is the engine running there, and does it serve /v1/completions (try --api chat, "
             "--model NAME or --api-key)?")


def _fail_if_unreachable(errors: int, requests: int, first_error: str | None, url: str) -> None:
    if requests and errors == requests:
        click.echo("llm-doctor: " + t("{url}: every request failed: {error}. {hint}", url=url,
                                      error=first_error, hint=_unreachable_hint()), err=True)
        sys.exit(3)


_ENDPOINT_OPTIONS = [
    click.option("--endpoint", required=True, metavar="URL", type=ENDPOINT,
                 help="The engine's base URL, e.g. http://127.0.0.1:8000 (a key as "
                      "http://:KEY@127.0.0.1:8000)."),
    click.option("--api", type=API, default="completions", show_default=True,
                 help="Which OpenAI-compatible API to stream from."),
    click.option("--model", metavar="NAME", help="The model name to put in requests."),
    click.option("--api-key", envvar="LLM_DOCTOR_API_KEY", metavar="KEY", callback=_api_key,
                 help="Bearer token (or $LLM_DOCTOR_API_KEY); never printed or saved."),
    click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal",
                 show_default=True),
    click.option("--output", "-o", metavar="FILE", help="Write the result to FILE."),
]


def _endpoint_options(fn):
    for option in reversed(_ENDPOINT_OPTIONS):
        fn = option(fn)
    return fn


@click.command()
@_endpoint_options
@click.option("--max-rounds", default=8, show_default=True, type=click.IntRange(2, 50),
              help="At most this many rounds of five varied-length requests.")
@click.option("--max-seconds", default=120.0, show_default=True, type=Finite(1, 3600))
def warmup(endpoint, api, model, api_key, fmt, output, max_rounds, max_seconds) -> None:
    """Warm an engine up: varied-length requests until TTFT settles, then a summary.

    Each round sends five requests (16 to 256 prompt tokens, one at a time); it stops once
    a round's median TTFT is within 15% of the round before, or at the bounds. Run it after
    an engine starts and before it takes traffic.
    """
    from probes.engine import warmup as engine_warmup

    target = _endpoint(endpoint, api, model, api_key)

    def on_round(index, results):
        ttfts = sorted(r.ttft_s * 1000 for r in results if r.ttft_s is not None)
        median = f"{ttfts[len(ttfts) // 2]:.0f} ms" if ttfts else t("no answer")
        click.echo(t("round {index}: median TTFT {median}", index=index, median=median), err=True)

    rounds = engine_warmup.measure(target, max_rounds, max_seconds, until_settled=True,
                                   on_round=on_round)
    result = engine_warmup.summarise(target.base_url, None, None, rounds)
    _fail_if_unreachable(result.errors, result.requests, result.first_error, target.base_url)
    if fmt == "json":
        _write(json.dumps(asdict(result), indent=2) + "\n", output)
        return
    state = t("settled") if result.settled else t("not settled within the bounds")
    _write(t("{url}: {rounds} rounds, {requests} requests, {state}", url=result.base_url,
             rounds=result.rounds, requests=result.requests, state=state) + "\n"
           + t("  TTFT  first {first} ms  steady {steady} ms  (first round median {first_round}, "
               "last {last_round})", first=result.first_ttft_ms, steady=result.steady_ttft_ms,
               first_round=result.first_round_ttft_ms, last_round=result.last_round_ttft_ms) + "\n"
           + t("  ITL   first {first} ms  steady {steady} ms", first=result.first_itl_ms,
               steady=result.steady_itl_ms) + "\n"
           + t("  steady: in the last round, the TTFT of the first request's prompt length and "
               "the median gap between tokens; settled: a round's median TTFT within 15% (or "
               "20 ms) of the round before") + "\n", output)


def _ms(value: float | None) -> str:
    """A latency median for the progress lines: "41.2 ms", or that none has come yet (issue
    28: "TTFT p50 None ms" while no request of the level had its first token)."""
    return t("{ms:g} ms", ms=value) if value is not None else t("none yet")


def _progress_callback(console):
    def on_level(event, concurrency, stats):
        if event == "start":
            console.print(t("concurrency {concurrency}: running…", concurrency=concurrency),
                          style="dim")
            return
        if event == "progress":
            console.print(t("concurrency {concurrency}: so far {completed} of the {needed} "
                            "requests it needs, {tok_s:g} tok/s, TTFT p50 {ttft}, e2e p50 "
                            "{e2e}", concurrency=concurrency, completed=stats.completed,
                            needed=stats.min_requests, tok_s=stats.output_tokens_per_s,
                            ttft=_ms(stats.ttft.p50_ms), e2e=_ms(stats.e2e.p50_ms)),
                          style="dim")
            return
        spread = stats.throughput_windows
        windows = (t("{low:g}–{high:g} in {count} windows", low=min(spread), high=max(spread),
                     count=len(spread)) if len(spread) > 1 else
                   t("{low:g}–{high:g} in 1 window", low=min(spread), high=max(spread)))
        console.print(
            t("concurrency {concurrency}: {tok_s:g} tok/s ({windows}), {completed} completed, "
              "{cut} cut, {errors} errors, TTFT p50 {ttft}, e2e p50 {e2e}",
              concurrency=concurrency, tok_s=stats.output_tokens_per_s, windows=windows,
              completed=stats.completed, cut=stats.cut, errors=stats.errors,
              ttft=_ms(stats.ttft.p50_ms), e2e=_ms(stats.e2e.p50_ms))
            + (t("; not judged: {why}", why=stats.unusable) if stats.unusable else ""))
    return on_level


def _trio(p: dict, count: bool = False) -> str:
    """``p50/p95/p99``, a star on a value that is just the largest sample, and with
    ``count`` the number of samples (where it is not the completed requests)."""
    if not p["samples"]:
        return "-"
    return (f"{p['p50_ms']:g}/{p['p95_ms']:g}{'*' if p['p95_is_max'] else ''}"
            f"/{p['p99_ms']:g}{'*' if p['p99_is_max'] else ''}"
            + (f" n={p['samples']}" if count else ""))


def _share(cached: float | None) -> str:
    return "n/r" if cached is None else f"{cached:.1%}"


def _table(document: dict) -> str:
    rows = [f"{'conc':>4} {'tok/s':>7} {'windows':>13} {'done':>4} {'cut':>3} {'err':>3} "
            f"{'cached':>6}  {'TTFT ms':<20} {'e2e ms':<22} {'itl_pooled ms':<26} "
            f"{'itl_per_request_mean ms':<18}"]
    for lv in document["levels"]:
        spread = lv["throughput_windows"]
        window = f"{min(spread):g}–{max(spread):g}" if spread else "-"
        rows.append(f"{lv['concurrency']:>4} {lv['output_tokens_per_s']:>7.1f} {window:>13} "
                    f"{lv['completed']:>4} {lv['cut']:>3} {lv['errors']:>3} "
                    f"{_share(lv['cached_share']):>6}  {_trio(lv['ttft']):<20} "
                    f"{_trio(lv['e2e']):<22} {_trio(lv['itl_pooled'], count=True):<26} "
                    f"{_trio(lv['itl_per_request_mean'])}")
    rows.append(t("percentiles p50/p95/p99 of the completed ('done') requests, itl_pooled of "
                  "their n token gaps; * = the largest sample (p95 of fewer than 20, p99 of "
                  "fewer than 100); itl_pooled: every gap between tokens; itl_per_request_mean: "
                  "each request's mean gap; cut: in flight when the level's time ended, neither "
                  "samples nor errors; windows: tok/s in equal parts of the level (its spread)"))
    for lv in document["levels"]:
        if lv["client_late"]:
            rows.append(t("c={concurrency}: the client could not keep up: {why}",
                          concurrency=lv["concurrency"], why=lv["client_late"]))
    cache = document["prompt_cache"]
    if cache["reported"]:
        rows.append(t("prompt cache: {cached} of {prompt} prompt tokens ({share}) served from the "
                      "engine's cache, as it reported", cached=cache["cached_prompt_tokens"],
                      prompt=cache["prompt_tokens"], share=_share(cache["share"])))
    else:
        rows.append(t("prompt cache: not reported by the engine (cached: n/r)"))
    seed = document["settings"].get("seed")
    rows.append(t("prompts: fresh, seed {seed} (--seed {seed} repeats them); stopped: {stopped}",
                  seed=seed, stopped=document["stopped"]))
    knee = document["knee"]
    rows.append(t("knee: {status}; {explanation}", status=knee["status"],
                  explanation=knee["explanation"]))
    rows += ["  " + t("not judged: {why}", why=line) for line in knee["left_out"]]
    if knee["recommended_concurrency"]:
        rows.append(t("recommended: at most {concurrency} concurrent requests per replica "
                      "(vLLM/SGLang --max-num-seqs / --max-running-requests {seqs}, llama.cpp "
                      "-np {seqs})", concurrency=knee["recommended_concurrency"],
                      seqs=knee["recommended_max_num_seqs"]))
    return "\n".join(rows) + "\n"


@click.command()
@_endpoint_options
@click.option("--prompt-tokens", default=512, show_default=True, type=click.IntRange(1, 131072),
              help="Prompt length of every request (about one token per word; no tokenizer).")
@click.option("--output-tokens", default=64, show_default=True, type=click.IntRange(1, 32768),
              help="Tokens generated per request (ignore_eos, so every request makes them).")
@click.option("--levels", "level_list", type=Levels(), metavar="N,N,...",
              help="The concurrency levels to measure, e.g. 1,2,4,8,16 (instead of "
                   "--max-concurrency).")
@click.option("--max-concurrency", type=click.IntRange(1, 4096),
              help="The highest level: 1, 2, 4, ... up to this.  [default: 64]")
@click.option("--seconds-per-level", default=15.0, show_default=True,
              type=Finite(0.1, 3600),
              help="A level's minimum time; it also runs until --min-requests completed.")
@click.option("--min-requests", default=10, show_default=True, type=click.IntRange(2, 100000),
              help="Completed requests per level before it may end (at least two per "
                   "concurrent request). 20 give a real p95, 100 a real p99.")
@click.option("--max-requests", default=2000, show_default=True, type=click.IntRange(1, 10**6),
              help="Requests in all, over every level.")
@click.option("--max-seconds", default=300.0, show_default=True, type=Finite(5, 7200),
              help="Wall time in all; requests in flight then are cut off.")
@click.option("--request-timeout", default=120.0, show_default=True, type=Finite(1, 3600),
              help="A request not finished in this time is an error of the engine's.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1),
              help="Repeat the prompts of the run with this seed (on purpose: an engine's "
                   "prompt cache then serves them). Default: a fresh seed every run.")
@click.option("--no-save", is_flag=True, help="Do not keep the result for the scan's rules.")
def load(endpoint, api, model, api_key, fmt, output, prompt_tokens, output_tokens, level_list,
         max_concurrency, seconds_per_level, min_requests, max_requests, max_seconds,
         request_timeout, seed, no_save) -> None:
    """Find the throughput knee: concurrency 1, 2, 4, ... with a fixed prompt length.

    Every run sends fresh prompts (a new seed; --seed N repeats a run), so the engine's
    prompt cache cannot serve them; the prompt tokens the engine says it served from its
    cache are shown. Each level runs for --seconds-per-level and until --min-requests
    completed (two per concurrent request at least); requests still in flight then are cut
    off and counted apart, neither as samples nor as errors.

    Per level: output tokens/s from its first to its last completed request, with its
    spread over equal windows, TTFT, end-to-end latency
    and two inter-token latencies, itl_pooled (percentiles of every gap between tokens) and
    itl_per_request_mean (percentiles of each request's mean gap, (e2e - TTFT) / (tokens - 1),
    as guidellm and aiperf report it), each p50/p95/p99 with a star where a percentile is
    just the largest sample. The knee is the lowest level that no higher level beats by more
    than the noise (5%, or twice the windows' standard error), once two higher levels were
    measured; levels short of their minimum, mostly failing, or where the client itself could
    not keep up are not judged. The result is saved
    (~/.local/state/llm-doctor/knee-<hash>.json) for the scan's past-throughput-knee rule.
    """
    from rich.console import Console

    from doctor.workload import knee as knee_mod

    if level_list and max_concurrency:
        raise click.BadParameter(t("give --levels or --max-concurrency, not both"),
                                 param_hint="--levels")
    levels = list(level_list or knee_mod.concurrency_levels(max_concurrency or 64))
    target = _endpoint(endpoint, api, model, api_key)
    workload = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                        timeout_s=request_timeout)
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        result = knee_mod.sweep(target, workload, levels, max_requests, max_seconds,
                                seconds_per_level, min_requests, seed,
                                _progress_callback(Console(stderr=True, soft_wrap=True)))
    except LoadError as exc:
        click.echo(f"llm-doctor: {exc}. {_unreachable_hint()}", err=True)
        sys.exit(3)
    if not result.levels:
        click.echo("llm-doctor: " + t("{url}: no level ran: {stopped}", url=target.base_url,
                                      stopped=result.stopped), err=True)
        sys.exit(3)
    first = result.levels[0]
    _fail_if_unreachable(first.errors, first.completed + first.errors, first.first_error,
                         target.base_url)
    found = knee_mod.find_knee(result.levels)
    settings = {"api": api, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                "levels": levels, "seconds_per_level": seconds_per_level,
                "min_requests": min_requests, "max_requests": max_requests,
                "max_seconds": max_seconds, "request_timeout_s": request_timeout,
                "seed": result.seed}
    document = knee_mod.sweep_json(target.base_url, settings, result.levels, found, measured_at,
                                   result.stopped)
    if not no_save:
        path = knee_mod.save_sweep(document)
        click.echo(t("saved for the scan's past-throughput-knee rule: {path}", path=path), err=True)
    _write(json.dumps(document, indent=2) + "\n" if fmt == "json" else _table(document), output)
