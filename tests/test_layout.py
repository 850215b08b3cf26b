"""The package's shape: no module imports one above it, and no package either (the import
graphs of modules and of packages have no circle, and each package imports only from the
floors below its own); the root holds at most 12 modules; each package's index (its
`__init__` docstring) and docs/architecture.md name its files."""

import ast
import re
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


# The floors of the package graph, lowest first: a package imports only from floors below its
# own. The front doors (the command, `simulate`, the package's surface) share the top.
FLOORS = (
    {"flowsim.version", "flowsim.status", "flowsim.toml_text", "flowsim.kinds", "flowsim.plugins",
     "flowsim.engine_env"},                   # leaves: no flowsim import
    {"flowsim.nn", "flowsim.archive"},       # archive/ imports only the leaves
    {"flowsim.integrate", "flowsim.observe"},
    {"flowsim.config"},
    {"flowsim.data"},
    {"flowsim.models", "flowsim.analysis"},
    {"flowsim.run", "flowsim.plots"},
)
FRONT_DOORS = {"flowsim.cli", "flowsim.simulation", "flowsim"}


def _upward(packages: dict[str, set[str]], floors=FLOORS, top=FRONT_DOORS) -> list[str]:
    """`a -> b` for each package that imports one on its own floor or above (a front door
    may import another: the surface loads the two others)."""
    floor = {p: i for i, names in enumerate(floors) for p in names} | dict.fromkeys(top, len(floors))
    unplaced = sorted(set(packages) - set(floor))
    assert unplaced == [], f"packages on no floor of FLOORS: {unplaced}"
    return sorted(f"{a} -> {b}" for a, targets in packages.items() for b in targets
                  if floor[b] >= floor[a] and not {a, b} <= top)


def test_no_package_imports_upward():
    modules = _modules()
    packages = _packages({name: _imports(name, path, modules) for name, path in modules.items()})
    assert _upward(packages) == []
    # the scenario runner is part of the run path, and the kinds' registry has one name
    assert "flowsim.run.session" in modules and "flowsim.session" not in modules
    assert {"flowsim.kinds", "flowsim.kinds.solvers"} <= set(modules) and "flowsim.integrate.registry" not in modules


def test_the_floor_check_finds_an_import_upward_and_a_package_on_no_floor():
    packages = {"p.low": set(), "p.mid": {"p.low"}, "p.top": {"p.mid"}}
    floors = ({"p.low"}, {"p.mid"})
    assert _upward(packages, floors, {"p.top"}) == []
    assert _upward({**packages, "p.low": {"p.mid"}}, floors, {"p.top"}) == ["p.low -> p.mid"]
    assert _upward({**packages, "p.mid": {"p.low", "p.top"}}, floors, {"p.top"}) == ["p.mid -> p.top"]
    try:
        _upward({**packages, "p.new": set()}, floors, {"p.top"})
    except AssertionError as err:
        assert "p.new" in str(err)
    else:
        raise AssertionError("a package on no floor passed")


def test_the_registries_records_are_declared_in_the_kinds_package_only():
    """Every registry of kinds (activations, losses, observables, models, solver kinds, flow
    methods) declares its record class in `flowsim.kinds`; no other module declares one."""
    found = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and (node.name.endswith("Kind") or node.name == "FlowMethod"):
                found[node.name] = name
    assert set(found) >= {"ActivationKind", "LossKind", "ObservableKind", "ModelKind", "SolverKind", "FlowMethod"}
    assert {m.rpartition(".")[0] if m != "flowsim.kinds" else m for m in found.values()} == {"flowsim.kinds"}


def test_the_package_graph_finds_a_circle_between_packages():
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert _cycles(graph) == [] and _cycles(_packages(graph)) == [["p.a", "p.b"]]


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ------------------------------------------------------------------ the indexes that stay true

DOCS = PACKAGE.parent / "docs" / "architecture.md"
# `name.py` or `name/` standing alone (not the tail of a path such as tests/test_x.py)
_TOKEN = re.compile(r"(?<![\w/.])(\w+)(\.py\b|/)")


def _packages_on_disk() -> dict[Path, tuple[set[str], set[str]]]:
    """Each package under flowsim/ (the root included): its modules (`x.py`, __init__ aside)
    and its subpackages (`x/`)."""
    out = {}
    for init in PACKAGE.rglob("__init__.py"):
        folder = init.parent
        out[folder] = ({p.name for p in folder.glob("*.py") if p.name != "__init__.py"},
                       {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").is_file()})
    return out


def _named(text: str) -> tuple[set[str], set[str]]:
    tokens = {a + b for a, b in _TOKEN.findall(text)}
    return {t for t in tokens if t.endswith(".py")}, {t for t in tokens if t.endswith("/")}


def _registered(folder: Path) -> set[str]:
    """The modules of `folder` that a registry names, which is their index: the model kinds'
    builders (`flowsim.kinds.MODELS`, "module:function")."""
    from flowsim.kinds import MODELS

    if not folder.is_relative_to(PACKAGE.parent):
        return set()
    package = ".".join(folder.relative_to(PACKAGE.parent).parts)
    modules = (k.builder.partition(":")[0].rpartition(".") for k in MODELS.values() if k.builder)
    return {name + ".py" for parent, _, name in modules if parent == package}


def _holds(what: str, text: str, folder: Path, disk: dict) -> None:
    """`text` names every module and subpackage of `folder` (a registry's modules aside:
    `_registered`), and no module that is not one of its own or of its subpackages."""
    modules, subs = disk[folder]
    below = set().union(*(disk[folder / s.rstrip("/")][0] for s in subs)) if subs else set()
    named, dirs = _named(text)
    assert sorted(modules - named - _registered(folder)) == [], f"{what} does not name these modules of {folder.name}/"
    assert sorted(named - modules - below) == [], f"{what} names modules {folder.name}/ lacks"
    assert sorted(subs - dirs) == [], f"{what} does not name these subpackages of {folder.name}/"


def test_the_root_holds_the_two_front_doors_and_a_few_leaves():
    modules, subs = _packages_on_disk()[PACKAGE]
    assert len(modules) + 1 <= 12, sorted(modules)     # + __init__.py
    assert {"simulation.py", "cli/", "__init__.py"} <= modules | subs | {"__init__.py"}


def test_every_package_index_names_its_modules():
    """Each subpackage's `__init__` docstring is its index: it names each of its modules
    (and subpackages), and no module it lacks."""
    disk = _packages_on_disk()
    for folder in disk:
        if folder != PACKAGE:
            doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
            _holds(f"{folder.relative_to(PACKAGE.parent)}/__init__.py's docstring", doc, folder, disk)


def _architecture() -> dict[str, str]:
    """docs/architecture.md's tree of flowsim/: each entry (`x.py` or `x/`, indented six) and
    its text (continuation lines indented deeper)."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index("    flowsim/") + 1
    entries: dict[str, str] = {}
    current = None
    for line in lines[start:]:
        indent = len(line) - len(line.lstrip(" "))
        if line.strip() and indent <= 4:
            break
        if indent == 6:
            m = _TOKEN.match(line.strip())
            assert m, f"docs/architecture.md: an entry of flowsim/ that names no file: {line!r}"
            current = m.group(1) + m.group(2)
            entries[current] = line.strip()[m.end():]
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def test_the_architecture_page_maps_the_files():
    disk = _packages_on_disk()
    entries = _architecture()
    modules, subs = disk[PACKAGE]
    assert sorted(entries) == sorted(modules | subs | {"__init__.py"})
    for name, text in entries.items():
        if name.endswith("/"):
            _holds(f"docs/architecture.md's {name}", text, PACKAGE / name.rstrip("/"), disk)


def test_the_model_builders_modules_are_indexed_by_their_registry():
    registered = _registered(PACKAGE / "models")
    assert {"shallow.py", "embedded.py", "mlp.py", "module.py"} <= registered
    assert registered <= _packages_on_disk()[PACKAGE / "models"][0]    # no builder outside a module of models/
    assert _registered(PACKAGE / "nn") == set()


def test_the_index_check_finds_a_missing_and_a_stale_module(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for f in ("pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/sub/__init__.py", "pkg/sub/c.py"):
        (tmp_path / f).write_text("")
    disk = {tmp_path / "pkg": ({"a.py", "b.py"}, {"sub/"}), tmp_path / "pkg" / "sub": ({"c.py"}, set())}
    _holds("ok", "a.py, b.py, sub/ (c.py)", tmp_path / "pkg", disk)
    for text, says in (("a.py, sub/", "does not name these modules"), ("a.py, b.py, d.py, sub/", "lacks"),
                       ("a.py, b.py", "subpackages"), ("a.py, b.py, tests/d.py, sub/", None)):
        try:
            _holds("index", text, tmp_path / "pkg", disk)
        except AssertionError as err:
            assert says is not None and says in str(err)
        else:
            assert says is None
