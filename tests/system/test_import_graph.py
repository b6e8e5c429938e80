"""The import graph stays one-way: no cycle between service packages, no cycle between any two modules of `app`, no
adapter or core module importing a service.

Read statically (every `from app... import`, including imports inside functions), so a cycle cannot hide behind a
lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import ROOT

APP = ROOT / "app"


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        name = ".".join(path.relative_to(APP.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
    return out


def _service_package(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "services" else None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_service_packages_import_one_way():
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = _service_package(name)
        if source is None:
            continue
        for target in _imports(path, modules):
            target_package = _service_package(target)
            if target_package and target_package != source:
                graph.setdefault(source, set()).add(target_package)
    assert _cycle(graph) is None, "service packages import each other in a circle: " + " -> ".join(
        _cycle(graph)
    )


def test_service_modules_have_no_import_cycle():
    modules = _modules()
    graph = {
        name: {t for t in _imports(path, modules) if t.startswith("app.services.") and t != name}
        for name, path in modules.items()
        if name.startswith("app.services.")
    }
    assert _cycle(graph) is None, "service modules import each other in a circle: " + " -> ".join(
        _cycle(graph)
    )


def test_app_modules_have_no_import_cycle():
    """Across the whole package (CLI, catalog, web, workers, services), two modules never import each other, even
    through others. A module may import a package it lives in (a blueprint's views import the `bp` its package
    defines, a command reaches `create_app`): that package importing it back to register it is how a feature is
    put together, not a circle."""
    modules = _modules()
    graph = {
        name: {
            target
            for target in _imports(path, modules)
            if target in modules and target != name and not name.startswith(target + ".")
        }
        for name, path in modules.items()
    }
    assert _cycle(graph) is None, "app modules import each other in a circle: " + " -> ".join(_cycle(graph))


def test_adapters_and_core_import_no_service_or_view():
    modules = _modules()
    offenders = [
        f"{name} -> {target}"
        for name, path in modules.items()
        if name.startswith(("app.adapters", "app.core"))
        for target in _imports(path, modules)
        if target.startswith(("app.services", "app.web", "app.workers"))
    ]
    assert offenders == []
