"""The shipped catalog: scenarios, solver presets and datasets, located and listed.

`scenarios/`, `solvers/` and `data/` stay at the top level of the repository. A wheel
carries them inside the package as ``flowsim/_catalog/{scenarios,solvers,data}``
(pyproject.toml maps them there at build time; siblings there as here, so a scenario's
``../data/...`` path still resolves); a source checkout or an editable install reads them
where they are. Both are found from the imported `flowsim` package through
`importlib.resources`, so a checkout put first on ``sys.path`` reads its own files even
when another copy of flowsim is installed. This is the one module that knows either place.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .. import plugins
from .files import display, read_toml
from .spec import ScenarioError, did_you_mean, file_beside, is_file, resolve_path, show, toml_string

__all__ = ["data_dir", "find_scenario", "list_scenarios", "list_solvers", "scenarios_dir", "solvers_dir"]


def _shipped(name: str) -> Path:
    # A wheel is installed unpacked, so the package's resources are plain files.
    package = Path(str(resources.files("flowsim")))
    installed = package / "_catalog" / name
    return installed if installed.is_dir() else package.parent / name


def scenarios_dir() -> Path:
    return _shipped("scenarios")


def solvers_dir() -> Path:
    return _shipped("solvers")


def data_dir() -> Path:
    return _shipped("data")


def _description(path: Path) -> str:
    """A catalog file's `description`, marked when it names plug-ins (it runs the user's
    code); a file that cannot be read says why instead."""
    try:
        raw = read_toml(path, display(path))
    except ScenarioError as e:
        return f"(unreadable: {e})"
    desc = raw.get("description", "")
    desc = desc if isinstance(desc, str) else show(desc)
    found = plugins.named_in(raw)
    return f"[runs user code: {', '.join(found)}] {desc}" if found else desc


def _catalog(folder: Path) -> list[tuple[str, str]]:
    """(name, description) of each TOML file in `folder`."""
    return [(p.name[: -len(".toml")], _description(p)) for p in sorted(folder.glob("*.toml"))]


def list_solvers() -> list[tuple[str, str]]:
    """(name, description) of every preset in solvers/."""
    return _catalog(solvers_dir())


def list_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every scenario in scenarios/."""
    return _catalog(scenarios_dir())


def find_scenario(name_or_path: str) -> Path:
    """An existing file, else the catalog entry ``scenarios/NAME.toml``."""
    p = Path(name_or_path)
    if is_file(p):
        return p.resolve()
    allowed_file = "allowed: a scenario file (TOML), or the name of one in the catalog (`flowsim list`)"
    if p.is_dir():
        raise ScenarioError(f"{name_or_path}: is a directory, not a scenario file; {allowed_file}",
                            file=str(name_or_path), value=name_or_path, allowed=allowed_file)
    if p.suffix or len(p.parts) > 1:   # a path, not a name: the catalog is not what was meant
        guess = file_beside(str(name_or_path), resolve_path(str(name_or_path), Path.cwd()))
        mean = f"; did you mean {toml_string(guess)}?" if guess else ";"
        raise ScenarioError(f"{name_or_path}: no such file{mean} {allowed_file}",
                            file=str(name_or_path), value=name_or_path, allowed=allowed_file)
    candidate = scenarios_dir() / f"{name_or_path}.toml"
    if is_file(candidate):
        return candidate
    names = [n for n, _ in list_scenarios()]
    allowed = ", ".join(names) if names else "(the catalog is empty)"
    guess = did_you_mean(str(name_or_path), names)
    mean = f"; did you mean {toml_string(guess)}?" if guess else ";"
    raise ScenarioError(f"{name_or_path}: no such scenario file, and no scenario of that name "
                        f"in {scenarios_dir()}{mean} available: {allowed}",
                        file=str(name_or_path), value=name_or_path, allowed=allowed)
