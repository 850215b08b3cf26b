"""The package's shape: no module imports one above it, and no package either (the import
graphs of modules and of packages have no circle)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "flowsim"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The flowsim modules that `name` imports (at any depth of its code)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{target}.{a.name}" for a in node.names}
            # `from . import batch` runs the package's code only when a name is not a submodule
            found |= subs | ({target} if subs - set(modules) else set())
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and graph["flowsim.run.driver"] >= {"flowsim.run.batch", "flowsim.config"}
    assert _cycles(graph) == []


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between flowsim's packages and top-level modules (`flowsim.config`,
    `flowsim.integrate`, `flowsim.run.driver` ...): each module stands for the one it lies in."""
    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {unit(m): set() for m in graph}
    for m, targets in graph.items():
        out[unit(m)] |= {unit(t) for t in targets} - {unit(m)}
    return out


def test_the_package_graph_has_no_circle():
    modules = _modules()
    packages = _packages({name: _imports(name, path, modules) for name, path in modules.items()})
    assert {"flowsim.config", "flowsim.integrate", "flowsim.archive", "flowsim.models"} <= set(packages)
    assert _cycles(packages) == []
    # the integrators take plain fields: no preset class, no configuration below them
    assert "flowsim.config" not in packages["flowsim.integrate"]


def test_the_package_graph_finds_a_circle_between_packages():
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert _cycles(graph) == [] and _cycles(_packages(graph)) == [["p.a", "p.b"]]


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
