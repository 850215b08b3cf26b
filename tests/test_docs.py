"""The README and the docs/ pages: every fenced code block is well formed (Python compiles,
TOML parses, shell passes `bash -n`), and every relative link points at a file that exists.
The blocks that run end to end are run elsewhere: the walkthrough and the archive snippet
(tests/test_walkthrough.py), the simulate and classifier examples (tests/test_simulate.py)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks():
    for page in PAGES:
        for i, m in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8"))):
            yield pytest.param(m.group(1), m.group(2), id=f"{page.name}-{i}-{m.group(1)}")


@pytest.mark.parametrize("lang, body", list(blocks()))
def test_every_code_block_is_well_formed(lang, body):
    if lang == "python":
        compile(body, "<block>", "exec")
    elif lang == "toml":
        tomllib.loads(body)
    elif lang in ("sh", "bash"):
        proc = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    else:
        pytest.fail(f"a {lang!r} block: tag it python, toml, sh or bash")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_at_files(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (page.parent / target).exists(), f"{page.name}: {target}"
