"""TOML files in and out: reading with messages that name the file, writing a resolved
scenario back as TOML that loads to itself."""

from __future__ import annotations

import tomllib
from pathlib import Path

from .spec import ScenarioError, toml_key, toml_value


def display(path: Path) -> str:
    """How a file is named in messages: relative to the working folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_text(p: Path, display: str) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{display}: is not UTF-8 text", file=display) from None
    except OSError as e:
        raise ScenarioError(f"{display}: cannot read the file ({e.strerror or e})",
                            file=display) from None


def parse_toml(text: str, display: str) -> dict:
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError says "(at line L, column C)"
        raise ScenarioError(f"{display}: invalid TOML: {e}", file=display) from None


def read_toml(path: Path, display: str) -> dict:
    return parse_toml(read_text(path, display), display)


def to_toml(cfg: dict) -> str:
    """A resolved scenario (or RunSpec.config) written back as TOML that loads to itself.

    Top-level scalars first, then one [section] per table with inline values.
    """
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in cfg.items() if not isinstance(v, dict)]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append(f"\n[{toml_key(k)}]")
            lines.extend(f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items())
    return "\n".join(lines) + "\n"
