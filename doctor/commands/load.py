"""``llm-doctor warmup`` and ``llm-doctor load``: the articles' remedies as commands.

Both send real streamed requests to one engine endpoint, bounded in count and time, with
progress on stderr. ``load`` saves its sweep where the scan's ``past-throughput-knee`` rule
finds it: ``$XDG_STATE_HOME/llm-doctor/workload/knee-<hash>.json`` (default
``~/.local/state/llm-doctor/``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

import click

from doctor.workload.loadgen import Endpoint, LoadError, Workload

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
        raise click.BadParameter("the key must be printable ASCII with no spaces or control "
                                 "characters", ctx, param)
    return value


def _endpoint(url: str, api: str, model: str | None, api_key: str | None) -> Endpoint:
    """The endpoint to load; a key written into the URL (http://:KEY@host:port, as the
    scan's --endpoint takes it) is taken out of it, so it is never printed or saved."""
    from doctor.endpoints import parse
    from doctor.workload.loadgen import Connection

    named = parse(url)
    endpoint = Endpoint(named.base_url, api, model, api_key or named.key)
    try:
        Connection(endpoint, 1.0)
    except LoadError as exc:
        raise click.BadParameter(str(exc), param_hint="--endpoint") from None
    return endpoint


def _write(text: str, output: str | None) -> None:
    if output:
        from doctor.output import write_atomic

        write_atomic(output, text)
        click.echo(f"written to {output}", err=True)
    else:
        click.echo(text, nl=not text.endswith("\n"))


def _fail_if_unreachable(errors: int, requests: int, first_error: str | None, url: str) -> None:
    if requests and errors == requests:
        click.echo(f"llm-doctor: {url}: every request failed: {first_error}. Is the engine "
                   "running there, and does it serve /v1/completions (try --api chat, "
                   "--model NAME or --api-key)?", err=True)
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
@click.option("--max-seconds", default=120.0, show_default=True, type=click.FloatRange(1, 3600))
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
        median = f"{ttfts[len(ttfts) // 2]:.0f} ms" if ttfts else "no answer"
        click.echo(f"round {index}: median TTFT {median}", err=True)

    rounds = engine_warmup.measure(target, max_rounds, max_seconds, until_settled=True,
                                   on_round=on_round)
    result = engine_warmup.summarise(target.base_url, None, None, rounds)
    _fail_if_unreachable(result.errors, result.requests, result.first_error, target.base_url)
    if fmt == "json":
        _write(json.dumps(asdict(result), indent=2) + "\n", output)
        return
    state = "settled" if result.settled else "not settled within the bounds"
    _write(f"{result.base_url}: {result.rounds} rounds, {result.requests} requests, {state}\n"
           f"  TTFT  first {result.first_ttft_ms} ms  steady {result.steady_ttft_ms} ms  "
           f"(first round median {result.first_round_ttft_ms}, last {result.last_round_ttft_ms})\n"
           f"  ITL   first {result.first_itl_ms} ms  steady {result.steady_itl_ms} ms\n", output)


def _progress_callback(console):
    def on_level(event, concurrency, stats):
        if event == "start":
            console.print(f"concurrency {concurrency}: running…", style="dim")
        else:
            console.print(f"concurrency {concurrency}: {stats.output_tokens_per_s:g} tok/s, "
                          f"{stats.requests_per_s:g} req/s, TTFT p95 {stats.ttft.p95_ms} ms, "
                          f"e2e p95 {stats.e2e.p95_ms} ms, errors {stats.errors}/{stats.requests}")
    return on_level


def _table(document: dict) -> str:
    rows = ["conc  tok/s    req/s   err%   TTFT p50/p95/p99 ms       ITL p50/p95/p99 ms"
            "     e2e p50/p95/p99 ms"]
    for lv in document["levels"]:
        def trio(p):
            return "/".join("-" if v is None else f"{v:g}" for v in p.values())
        rows.append(f"{lv['concurrency']:>4}  {lv['output_tokens_per_s']:>7.1f}  "
                    f"{lv['requests_per_s']:>6.2f}  {lv['error_rate'] * 100:>5.1f}  "
                    f"{trio(lv['ttft']):<25} {trio(lv['itl']):<21} {trio(lv['e2e'])}")
    knee = document["knee"]
    rows.append(f"knee: {knee['status']}; {knee['explanation']}")
    if knee["recommended_concurrency"]:
        rows.append(f"recommended: at most {knee['recommended_concurrency']} concurrent requests "
                    f"per replica (vLLM/SGLang --max-num-seqs / --max-running-requests "
                    f"{knee['recommended_max_num_seqs']}, llama.cpp -np "
                    f"{knee['recommended_max_num_seqs']})")
    return "\n".join(rows) + "\n"


@click.command()
@_endpoint_options
@click.option("--prompt-tokens", default=512, show_default=True, type=click.IntRange(1, 131072),
              help="Prompt length of every request (about one token per word).")
@click.option("--output-tokens", default=64, show_default=True, type=click.IntRange(1, 32768),
              help="Tokens generated per request (ignore_eos, so every request makes them).")
@click.option("--max-concurrency", default=64, show_default=True, type=click.IntRange(1, 4096),
              help="The highest level: 1, 2, 4, ... up to this.")
@click.option("--max-requests", default=2000, show_default=True, type=click.IntRange(1, 10**6),
              help="Requests in all, over every level.")
@click.option("--max-seconds", default=180.0, show_default=True, type=click.FloatRange(5, 7200),
              help="Wall time in all; requests in flight at the end finish or time out.")
@click.option("--no-save", is_flag=True, help="Do not keep the result for the scan's rules.")
def load(endpoint, api, model, api_key, fmt, output, prompt_tokens, output_tokens,
         max_concurrency, max_requests, max_seconds, no_save) -> None:
    """Find the throughput knee: concurrency 1, 2, 4, ... with a fixed prompt length.

    Per level: output tokens/s, requests/s, TTFT, inter-token and end-to-end latency
    p50/p95/p99 and the error rate; then the knee (where throughput stops rising while
    latency grows) and the concurrency it recommends. Stops at the knee or at the bounds.
    The result is saved (~/.local/state/llm-doctor/workload/knee-<hash>.json) for the scan's
    past-throughput-knee rule.
    """
    from rich.console import Console

    from doctor.workload import knee as knee_mod

    target = _endpoint(endpoint, api, model, api_key)
    workload = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                        timeout_s=min(120.0, max_seconds))
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    levels = knee_mod.sweep(target, workload, max_concurrency, max_requests, max_seconds,
                            _progress_callback(Console(stderr=True)))
    if not levels:
        click.echo(f"llm-doctor: {target.base_url}: no level ran within the bounds", err=True)
        sys.exit(3)
    _fail_if_unreachable(levels[0].errors, levels[0].requests, levels[0].first_error,
                         target.base_url)
    found = knee_mod.find_knee(levels)
    settings = {"api": api, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                "max_concurrency": max_concurrency, "max_requests": max_requests,
                "max_seconds": max_seconds}
    document = knee_mod.sweep_json(target.base_url, settings, levels, found, measured_at)
    if not no_save:
        path = knee_mod.save_sweep(document)
        click.echo(f"saved for the scan's past-throughput-knee rule: {path}", err=True)
    _write(json.dumps(document, indent=2) + "\n" if fmt == "json" else _table(document), output)
