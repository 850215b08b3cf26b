"""The README's researcher's session runs as written: its blocks, in order, in an empty
folder (shell blocks by bash, Python blocks by this interpreter, marked blocks written as
files). The process boundary is the point: the reader types these commands."""

import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


def walkthrough() -> list[tuple[str, str, str | None]]:
    text = README.read_text()
    part = text[text.index("<!-- walkthrough:start -->"):text.index("<!-- walkthrough:end -->")]
    return [(m["lang"], m["body"], m["file"]) for m in BLOCK.finditer(part)]


def test_the_walkthrough_has_every_step():
    steps = walkthrough()
    assert [lang for lang, _, _ in steps] == ["sh", "toml", "sh", "python", "sh"]
    shell = "".join(body for lang, body, _ in steps if lang == "sh")
    for command in ("flowsim show", "flowsim run", "flowsim compare", "--resume --set run.t_end"):
        assert command in shell


@pytest.mark.slow
def test_the_readme_walkthrough_runs_as_written(tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg",   # (the suite's compilation cache: conftest)
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for lang, body, file in walkthrough():
        if file:
            (tmp_path / file).write_text(body)
            continue
        cmd = ["bash", "-euo", "pipefail", "-c", body] if lang == "sh" else [sys.executable, "-c", body]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{lang} block failed:\n{body}\n{proc.stderr[-3000:]}"
        outputs.append(proc.stdout + proc.stderr)
    session, python, extend = outputs[1:]      # (show, run, compare), the Python block, the extension
    assert "runs: 6 (3 sweep points × 2 seeds)" in session and "# file" in session
    assert "summary against `model.width`" in session
    assert (tmp_path / "figures" / "width-compare-sweep-model.width.png").stat().st_size > 10_000
    assert (tmp_path / "gap-vs-width.png").stat().st_size > 10_000 and python == ""
    assert "extended: t_end 40 → 80" in extend
    with h5py.File(tmp_path / "runs" / "width.h5") as f:
        assert f["runs/p2-seed1/gd-lr0.1/t"][-1] == 80.0
    # the archive section's sweep-as-data block reads this archive too
    archive = (README.parent / "docs" / "archive.md").read_text()
    block = re.findall(r"```python\n(.*?)```", archive, re.S)[-1]
    assert 'open("runs/width.h5")' in block
    proc = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "model.width" in proc.stdout, proc.stderr[-3000:]
