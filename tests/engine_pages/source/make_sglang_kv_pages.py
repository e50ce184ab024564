"""Write source/sglang_0.5.23_kv_generated.txt and source/lmcache_0.5.6_generated.txt: SGLang's
PD-disaggregation transfer families and LMCache's lookup counters as their own code defines
and fills them (run once by hand; the pages are committed).

Usage: python tests/engine_pages/source/make_sglang_kv_pages.py <dir holding sglang/ of the
0.5.23 wheel> <dir holding lmcache/ of the 0.5.6 wheel>   (``pip download --no-deps sglang==0.5.23
lmcache==0.5.6``, then unzip). The modules themselves import the model stack (torch, msgspec,
the scheduler), so they are not imported: their source is parsed and the constructor calls
that define the families kept (``self.x = Counter(name="sglang:…", …)`` in
SchedulerMetricsCollector.__init__, ``self.x = self._create_counter(name="lmcache:…", …)`` in
PrometheusLogger.__init__) are evaluated unchanged with prometheus_client's classes, as are
the methods that fill them (SGLang's observe_kv_transfer_metrics, increment_*_failed_reqs and
_log_histogram; LMCache's _log_counter). Values are synthetic: SGLang 40 transfers of 48 MiB
on a prefill instance, 1 failed; LMCache 4,096 looked-up tokens, 1,024 found.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HERE = Path(__file__).resolve().parent
SGLANG = ("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total",
          "sglang:kv_transfer_latency_ms", "sglang:kv_transfer_total_mb", "sglang:kv_transfer_speed_gb_s")
SGLANG_METHODS = ("_log_histogram", "observe_kv_transfer_metrics", "increment_transfer_failed_reqs",
                  "increment_bootstrap_failed_reqs")
LMCACHE = ("lmcache:num_lookup_tokens", "lmcache:num_lookup_hits", "lmcache:num_requested_tokens",
           "lmcache:num_hit_tokens")


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _definitions(cls: ast.ClassDef, names: tuple[str, ...]) -> list[ast.Assign]:
    """``self.x = <call>(name="…", …)`` in __init__ for each family named."""
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    kept = []
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            named = [k.value.value for k in node.value.keywords
                     if k.arg == "name" and isinstance(k.value, ast.Constant)]
            if named and named[0] in names:
                kept.append(node)
    assert len(kept) == len(names), f"found {len(kept)} of {names}"
    return kept


def _made(cls: ast.ClassDef, methods: tuple[str, ...], assigns: list[ast.Assign], scope: dict) -> type:
    """A class whose __init__ makes the families of the assignments, with the methods named."""
    body = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name in methods]
    init = ast.FunctionDef(name="__init__", args=ast.arguments(
        posonlyargs=[], args=[ast.arg("self")], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[*assigns] or [ast.Pass()], decorator_list=[], returns=None, type_params=[])
    module = ast.Module(body=[ast.ClassDef(name="Made", bases=[], keywords=[], body=[init, *body],
                                           decorator_list=[], type_params=[])], type_ignores=[])
    ast.fix_missing_locations(module)
    exec(compile(module, "<defs>", "exec"), scope)  # noqa: S102  the engines' own definitions
    made: type = scope["Made"]
    return made


def sglang(wheel: str, registry: CollectorRegistry) -> None:
    source = Path(wheel, "sglang/srt/observability/metrics_collector.py")
    cls = _class(source, "SchedulerMetricsCollector")
    labels = {"model_name": "Qwen/Qwen3-8B"}
    made = _made(cls, SGLANG_METHODS, _definitions(cls, SGLANG), {
        "labels": labels, "Counter": _bound(Counter, registry), "Histogram": _bound(Histogram, registry),
        "Gauge": _bound(Gauge, registry), "Union": object})()
    made.labels = labels
    for latency in [20.0] * 30 + [60.0] * 8 + [400.0, 900.0]:  # ms; 48 MiB each
        made.observe_kv_transfer_metrics(latency_ms=latency, total_mb=48.0,
                                         speed_gb_s=48 / 1024 / (latency / 1000))
    made.increment_transfer_failed_reqs()


def lmcache(wheel: str, registry: CollectorRegistry) -> None:
    source = Path(wheel, "lmcache/observability.py")
    cls = _class(source, "PrometheusLogger")
    labels = {"model_name": "Qwen/Qwen3-8B", "worker_id": "0", "role": "worker", "served_model_name": ""}
    scope = {"labelnames": list(labels), "Union": object}
    kind = _made(cls, ("_create_counter", "_log_counter"), _definitions(cls, LMCACHE), scope)
    made = kind.__new__(kind)
    made._counter_cls, made._counters, made.labels = _bound(Counter, registry), [], labels
    made.__init__()  # _create_counter needs the class and list above
    for family, value in (("lookup_tokens", 4096), ("lookup_hits", 1024), ("requested_tokens", 1024),
                          ("hit_tokens", 1024)):
        made._log_counter(getattr(made, f"counter_num_{family}"), value)


def _bound(kind, registry: CollectorRegistry):
    """prometheus_client's class, registering into the page's own registry; the multiprocess
    mode (SGLang's and LMCache's gauges) is a server setting, not a page's."""
    def make(*args, **kwargs):
        kwargs.pop("multiprocess_mode", None)
        return kind(*args, registry=registry, **kwargs)
    return make


def main(sglang_wheel: str, lmcache_wheel: str) -> None:
    for name, build, wheel in (("sglang_0.5.23_kv_generated.txt", sglang, sglang_wheel),
                               ("lmcache_0.5.6_generated.txt", lmcache, lmcache_wheel)):
        registry = CollectorRegistry()
        build(wheel, registry)
        lines = generate_latest(registry).decode().splitlines()
        out = HERE / name
        out.write_text("\n".join(lines) + "\n")
        print(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
