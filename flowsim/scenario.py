"""The catalogs: the scenario and solver-preset files shipped with flowsim.

Loading and validating them is `flowsim.config`'s work.
"""

from __future__ import annotations

from pathlib import Path

from flowsim.config.files import display as _display
from flowsim.config.files import read_toml as _read_toml
from flowsim.config.spec import ScenarioError, did_you_mean, is_file, show, toml_string

__all__ = ["solvers_dir", "scenarios_dir", "find_scenario", "list_solvers", "list_scenarios"]


def solvers_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "solvers"


def scenarios_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "scenarios"


def _catalog(folder: Path) -> list[tuple[str, str]]:
    """(name, description) of each TOML file in `folder`; unreadable files say so."""
    out = []
    for p in sorted(folder.glob("*.toml")):
        try:
            desc = _read_toml(p, _display(p)).get("description", "")
            desc = desc if isinstance(desc, str) else show(desc)
        except ScenarioError as e:
            desc = f"(unreadable: {e})"
        out.append((p.name[: -len(".toml")], desc))
    return out


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
    candidate = scenarios_dir() / f"{name_or_path}.toml"
    if is_file(candidate):
        return candidate
    names = [n for n, _ in list_scenarios()]
    allowed = ", ".join(names) if names else "(the catalog is empty)"
    guess = did_you_mean(str(name_or_path), names)
    mean = f"; did you mean {toml_string(guess)}?" if guess else ""
    raise ScenarioError(f"{name_or_path}: no such scenario file, and no scenario of that name "
                        f"in {scenarios_dir()}{mean} available: {allowed}",
                        file=str(name_or_path), value=name_or_path, allowed=allowed)
