"""The folders are the layers: the import graph of llm-doctor's own modules, checked.

Every import counts, at the top of a module or inside a function (an import tucked into a
function to dodge a circle is still a circle), except those under ``if TYPE_CHECKING:``.

The layers, from the ground up:

* the core: ``doctor`` itself (records, vocabulary, config, the scan runner), the seam
  (``doctor.seam``) and the rules engine (``doctor.rules``): no probe, renderer, command or
  daemon;
* ``doctor.workload``: the load generator, the knee, the capacity arithmetic, GGUF headers;
* ``probes`` (by family, with their helpers and the registry);
* ``reports``: the renderers, which show what the results carry and import no probe;
* ``doctor.daemon``, then ``doctor.fleet`` (the adapters to schedulers and collectors, which
  read the daemon's state file), then ``doctor.commands`` on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("doctor", "probes", "reports", "checks", "playbooks")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports, resolved to modules (``from probes.host import
    cpu`` is ``probes.host.cpu``; ``from doctor.model import Level`` is ``doctor.model``)."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}



def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _layer(name: str) -> str:
    for prefix, layer in (("doctor.commands", "commands"), ("doctor.daemon", "daemon"),
                          ("doctor.fleet", "fleet"),
                          ("doctor.workload", "workload"), ("reports", "reports"),
                          ("probes", "probes"), ("checks", "data"), ("playbooks", "data")):
        if name == prefix or name.startswith(prefix + "."):
            return layer
    return "core"


# What each layer may import besides itself; anything else points up or sideways.
ALLOWED = {
    "core": {"core", "data"},
    "workload": {"core"},
    "probes": {"core", "workload"},
    "reports": {"core", "data"},
    "daemon": {"core", "workload", "probes", "reports", "data"},
    "fleet": {"core", "workload", "probes", "reports", "daemon", "data"},
    "commands": {"core", "workload", "probes", "reports", "daemon", "fleet", "data"},
    "data": {"core"},  # the playbooks look causes up in the vocabulary
}


@pytest.mark.slow
def test_the_graph_is_read():
    edges = graph()
    assert "doctor.seam.host" in edges and "probes.registry" in edges
    assert "doctor.model" in edges["probes.registry"]
    assert "probes.host.cpu" in edges["probes.registry"]  # `from probes.host import cpu`


@pytest.mark.slow
def test_no_import_circles():
    assert _cycles(graph()) == []


@pytest.mark.slow
def test_imports_point_down():
    wrong = sorted(f"{name} ({_layer(name)}) imports {dep} ({_layer(dep)})"
                   for name, deps in graph().items() for dep in deps
                   if _layer(dep) != _layer(name) and _layer(dep) not in ALLOWED[_layer(name)])
    assert wrong == []


@pytest.mark.slow
def test_only_the_registry_imports_every_probe():
    """A probe module is imported by the registry and by commands; never by the core or a
    renderer (covered above), by another probe (below) or by the daemon."""
    edges = graph()
    probe_modules = {m for m in edges if m.startswith(("probes.host.", "probes.gpu.", "probes.engine.",
                                                       "probes.amd."))}
    daemon_users = sorted(f"{name} imports {dep}" for name, deps in edges.items()
                          if _layer(name) == "daemon" for dep in deps & probe_modules)
    assert daemon_users == []


# The probe families: modules that measure (a registry probe, or a micro-kernel one runs).
PROBE_FAMILIES = ("probes.host.", "probes.gpu.", "probes.engine.", "probes.kernels.", "probes.net.",
                  "probes.amd.", "probes.npu.")


def test_a_probe_imports_no_other_probe():
    """Probes read records, not each other (issue 29): a probe is handed the records of the
    probes it ``needs`` by the runner (doctor/inputs.py), and what several probes compute
    lives in probes/helpers. So no module of a probe family imports another one, and no
    helper imports a probe (which would be the same import, one step removed)."""
    edges = graph()
    wrong = sorted(f"{name} imports {dep}" for name, deps in edges.items()
                   if name.startswith(PROBE_FAMILIES + ("probes.helpers.",))
                   for dep in deps if dep.startswith(PROBE_FAMILIES))
    assert wrong == []


def test_the_probe_rule_sees_a_probe_importing_a_probe(tmp_path):
    """The rule above reads real imports: one planted in a copy of a probe is found."""
    modules = _modules()
    path = tmp_path / "kv_cache.py"
    path.write_text(modules["probes.engine.kv_cache"].read_text()
                    + "\nfrom probes.engine import metrics\n")
    assert "probes.engine.metrics" in _imports(path, "probes.engine.kv_cache", modules)

