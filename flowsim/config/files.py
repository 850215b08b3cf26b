"""TOML files in and out: reading with messages that name the file, writing a resolved
scenario back as TOML that loads to itself."""

from __future__ import annotations

import re
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


def unclosed_bracket(text: str) -> tuple[int, int, str] | None:
    """(line, column, bracket), from 1, of the outermost `[` or `{` of a value that is never
    closed; None when every one is. Strings and comments are skipped, and a `[` that starts
    a line outside any value is a table's header."""
    stack: list[tuple[int, int, str]] = []
    i, line, start = 0, 1, 0          # start: where the current line begins
    while i < len(text):
        c = text[i]
        if c == "\n":
            line, start = line + 1, i + 1
        elif c == "#":
            i = text.find("\n", i) - 1 if "\n" in text[i:] else len(text)
        elif text.startswith(('"""', "'''"), i):     # a multi-line string
            end = text.find(text[i:i + 3], i + 3)
            end = len(text) if end < 0 else end + 2
            line += text.count("\n", i, end)
            start = text.rfind("\n", 0, end) + 1 if "\n" in text[i:end] else start
            i = end
        elif c in "\"'":
            j = i + 1
            while j < len(text) and text[j] not in (c, "\n"):
                j += 2 if c == '"' and text[j] == "\\" else 1
            i = min(j, len(text)) - (j < len(text) and text[j] == "\n")
        elif c in "[{":
            if not stack and c == "[" and not text[start:i].strip():      # [table] or [[table]]
                i = text.find("\n", i) - 1 if "\n" in text[i:] else len(text)
            else:
                stack.append((line, i - start + 1, c))
        elif c in "]}" and stack and "[{"["]}".index(c)] == stack[-1][2]:
            stack.pop()
        i += 1
    return stack[0] if stack else None


def parse_toml(text: str, display: str) -> dict:
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError says "(at line L, column C)"
        problem = str(e)
        found = unclosed_bracket(text)
        stopped = re.search(r"at line (\d+)", problem)
        if found and (stopped is None or found[0] <= int(stopped[1])):
            # the parser reports where it gave up, often lines below the bracket left open
            line, column, bracket = found
            source = text.splitlines()[line - 1].strip()
            position = re.search(r"\((at [^)]*)\)$", problem)
            gave_up = f" (the parser gave up {position[1]})" if position else ""
            problem = f"line {line}: the `{bracket}` at column {column} (`{source}`) is never closed{gave_up}"
        raise ScenarioError(f"{display}: invalid TOML: {problem}; allowed: TOML (toml.io): tables as [name], "
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
