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


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"   # (archive/format.py's, not imported: that package loads h5py)


def read_text(p: Path, display: str) -> str:
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ScenarioError(f"{display}: cannot read the file ({e.strerror or e})",
                            file=display) from None
    if raw.startswith(_HDF5_SIGNATURE):
        raise ScenarioError(f"{display}: is an HDF5 archive, not a scenario file; allowed: a scenario file "
                            f"(TOML); to read the archive: `flowsim inspect {display}`; to continue its "
                            f"runs: `flowsim run SCENARIO -o {display} --resume`", file=display) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{display}: is not UTF-8 text (byte {e.start}); allowed: a scenario file (TOML)",
                            file=display) from None
    if not text.strip():
        raise ScenarioError(f"{display}: is empty; allowed: a scenario file (TOML) with at least [data] and "
                            "[model] tables (see `flowsim show quickstart`)", file=display)
    return text


def parse_toml(text: str, display: str) -> dict:
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError says "(at line L, column C)"
        raise ScenarioError(f"{display}: invalid TOML: {e}; allowed: TOML (toml.io): tables as [name], "
                            "values as key = value, strings in quotes", file=display) from None


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
