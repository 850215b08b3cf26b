"""Hostile input: a corpus of bad scenarios, data files and archives.

Every bad scenario or data file is answered before any computation (the driver is never
reached) with exit status 2 and ONE message that names the file, the key and what is
allowed; no archive is created or touched. Bad archives given to `inspect`, `plot`,
`compare` and `run --resume` get one clear message, never a traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from flowsim.run import driver as driver_module

from .conftest import FAULT, GD_ONLY, flowsim_cmd, env_for, set_args

BASE = """\
name = "hostile"
seeds = [0]

[data]
kind = "sphere-sine"
n = 8
d = 3
n_test = 4

[model]
width = 10
activation = "swish"
init_path = ""

[model.scaling]
kind = "asymmetric"
gamma = 0.5
alpha = 0.5

[run]
t_end = 2.0
checkpoints = { count = 2 }
solvers = ["gd-lr1"]
observe = ["loss"]
"""


def sub(old: str, new: str):
    def patch(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return patch


def add(section: str, line: str):
    return sub(f"[{section}]\n", f"[{section}]\n{line}\n")


def csv_data(name: str, target: str = "y"):
    """Point the scenario at the data file `name` (created by the case)."""
    return sub('kind = "sphere-sine"\nn = 8\nd = 3\nn_test = 4',
               f'kind = "csv"\npath = "{name}"\ntarget = "{target}"')


def npz_data(name: str):
    return sub('kind = "sphere-sine"\nn = 8\nd = 3\nn_test = 4', f'kind = "npz"\npath = "{name}"')


def good_csv(rows=8) -> str:
    rng = np.random.default_rng(0)
    return "a,b,y\n" + "".join(f"{x:.3f},{y:.3f},{z:.3f}\n" for x, y, z in rng.normal(size=(rows, 3)))


def npz(**arrays):
    def make(path: Path):
        np.savez(path, **arrays)
    return make


RNG = np.random.default_rng(1)
X, Y = RNG.normal(size=(8, 3)), RNG.normal(size=(8, 1))

# (id, patch of BASE, {file name: text | bytes | callable(path)}, extra argv, needles)
# The needles are what the one message must name: the file, the key, and "allowed".
CASES = [
    # unknown and misspelt keys
    ("unknown-top-key", sub('seeds = [0]', 'seeds = [0]\nbogus = 1'), {}, [],
     ["case.toml", "`bogus`"]),
    ("misspelt-table", sub("[model.scaling]", "[modle.scaling]"), {}, [], ["case.toml", "`modle`"]),
    ("misspelt-width", sub("width = 10", "widht = 10"), {}, [], ["case.toml", "model.widht", "did you mean"]),
    ("misspelt-gamma", sub("gamma = 0.5", "gama = 0.5"), {}, [], ["case.toml", "model.scaling.gama"]),
    ("misspelt-checkpoints", sub("checkpoints =", "checkpionts ="), {}, [], ["case.toml", "run.checkpionts"]),
    ("misspelt-activation", sub('"swish"', '"swishh"'), {}, [], ["case.toml", "model.activation", "did you mean"]),
    ("unknown-data-kind", sub('"sphere-sine"', '"sphere-cosine"'), {}, [], ["case.toml", "data.kind"]),
    ("unknown-observable", sub('["loss"]', '["lossy"]'), {}, [], ["case.toml", "run.observe"]),
    ("unknown-loss", sub("[run]", '[loss]\nkind = "mse2"\n\n[run]'), {}, [],
     ["case.toml", "loss.kind"]),
    ("key-of-another-kind", sub("alpha = 0.5", "alpha = 0.5\nk = 3"), {}, [], ["case.toml", "model.scaling.k"]),
    # wrong types
    ("width-string", sub("width = 10", 'width = "ten"'), {}, [], ["case.toml", "model.width", "integer"]),
    ("width-float", sub("width = 10", "width = 10.5"), {}, [], ["case.toml", "model.width"]),
    ("width-bool", sub("width = 10", "width = true"), {}, [], ["case.toml", "model.width"]),
    ("seeds-string", sub("seeds = [0]", 'seeds = "zero"'), {}, [], ["case.toml", "seeds"]),
    ("solvers-table", sub('solvers = ["gd-lr1"]', "solvers = 3"), {}, [], ["case.toml", "run.solvers"]),
    ("dtype-unknown", sub("seeds = [0]", 'seeds = [0]\ndtype = "float16"'), {}, [], ["case.toml", "dtype"]),
    # NaN / inf / negative / zero sizes
    ("width-nan", sub("width = 10", "width = nan"), {}, [], ["case.toml", "model.width"]),
    ("width-inf", sub("width = 10", "width = inf"), {}, [], ["case.toml", "model.width"]),
    ("width-negative", sub("width = 10", "width = -5"), {}, [], ["case.toml", "model.width"]),
    ("width-zero", sub("width = 10", "width = 0"), {}, [], ["case.toml", "model.width"]),
    ("n-zero", sub("n = 8", "n = 0"), {}, [], ["case.toml", "data.n"]),
    ("t-end-negative", sub("t_end = 2.0", "t_end = -1.0"), {}, [], ["case.toml", "run.t_end"]),
    ("t-end-nan", sub("t_end = 2.0", "t_end = nan"), {}, [], ["case.toml", "run.t_end"]),
    ("t-end-inf", sub("t_end = 2.0", "t_end = inf"), {}, [], ["case.toml", "run.t_end"]),
    ("init-std-negative", sub("width = 10", "width = 10\ninit_std = -1.0"), {}, [], ["case.toml", "model.init_std"]),
    # out-of-range scaling parameters
    ("gamma-above-1", sub("gamma = 0.5", "gamma = 1.5"), {}, [], ["case.toml", "model.scaling.gamma", "[0, 1]"]),
    ("gamma-negative", sub("gamma = 0.5", "gamma = -0.1"), {}, [], ["case.toml", "model.scaling.gamma"]),
    ("gamma-nan", sub("gamma = 0.5", "gamma = nan"), {}, [], ["case.toml", "model.scaling.gamma"]),
    ("alpha-zero", sub("alpha = 0.5", "alpha = 0.0"), {}, [], ["case.toml", "model.scaling.alpha", "(0, 1)"]),
    ("alpha-one", sub("alpha = 0.5", "alpha = 1.0"), {}, [], ["case.toml", "model.scaling.alpha", "(0, 1)"]),
    ("alpha-large", sub("alpha = 0.5", "alpha = 7"), {}, [], ["case.toml", "model.scaling.alpha"]),
    ("finite-k-above-width", sub('kind = "asymmetric"\ngamma = 0.5\nalpha = 0.5', 'kind = "finite"\nk = 20'), {}, [],
     ["case.toml", "model.scaling.k", "10"]),
    ("lr-negative", sub('solvers = ["gd-lr1"]', 'solvers = [{name = "x", kind = "gd", learning_rate = -1.0}]'), {},
     [], ["case.toml", "learning_rate"]),
    # solver presets and sweeps
    ("preset-missing", sub('"gd-lr1"', '"tsit6"'), {}, [], ["case.toml", "run.solvers", "tsit5"]),
    ("sweep-unknown-key", lambda t: t + '\n[sweep]\n"model.depth" = [1, 2]\n', {}, [], ["case.toml", "model.depth"]),
    ("sweep-misspelt-key", lambda t: t + '\n[sweep]\n"model.widht" = [10, 20]\n', {}, [],
     ["case.toml", "model.widht"]),
    ("sweep-bad-value", lambda t: t + '\n[sweep]\n"model.width" = [10, -3]\n', {}, [], ["case.toml", "model.width"]),
    ("set-unknown-key", None, {}, ["--set", "model.depth=3"], ["--set", "model.depth"]),
    ("set-bad-value", None, {}, ["--set", "model.scaling.gamma=2"], ["--set", "model.scaling.gamma", "[0, 1]"]),
    ("invalid-toml", lambda t: t + "\nthis is = not = toml\n", {}, [], ["case.toml", "invalid TOML"]),
    ("not-utf8", lambda t: None, {"case.toml": b"name = \"\xff\xfe\"\n"}, [], ["case.toml", "UTF-8"]),
    # data files
    ("csv-missing", csv_data("absent.csv"), {}, [], ["absent.csv", "data.path", "allowed"]),
    ("csv-empty", csv_data("d.csv"), {"d.csv": ""}, [], ["d.csv", "empty", "data.path"]),
    ("csv-header-only", csv_data("d.csv"), {"d.csv": "a,b,y\n"}, [], ["d.csv", "no data rows", "data.path"]),
    ("csv-ragged", csv_data("d.csv"), {"d.csv": "a,b,y\n1,2,3\n4,5\n6,7,8\n"}, [], ["d.csv", "line 3", "data.path"]),
    ("csv-nan", csv_data("d.csv"), {"d.csv": "a,b,y\n1,2,3\n4,nan,5\n6,7,8\n"}, [], ["d.csv", "not finite"]),
    ("csv-inf", csv_data("d.csv"), {"d.csv": "a,b,y\n1,2,3\n4,inf,5\n6,7,8\n"}, [], ["d.csv", "not finite"]),
    ("csv-text-cell", csv_data("d.csv"), {"d.csv": "a,b,y\n1,2,3\n4,five,5\n"}, [], ["d.csv", "not a number"]),
    ("csv-no-target", csv_data("d.csv", target="label"), {"d.csv": good_csv()}, [], ["d.csv", "label"]),
    ("csv-binary", csv_data("d.csv"), {"d.csv": b"\x89PNG\r\n\x1a\n\xff\xfe\x00"}, [], ["d.csv", "UTF-8", "data.path"]),
    ("npz-missing-array", npz_data("d.npz"), {"d.npz": npz(X_train=X)}, [], ["d.npz", "y_train", "data.path"]),
    ("npz-nan", npz_data("d.npz"), {"d.npz": npz(X_train=np.where(X > 1, np.nan, X), y_train=Y)}, [],
     ["d.npz", "NaN", "data.path"]),
    ("npz-inf", npz_data("d.npz"), {"d.npz": npz(X_train=X, y_train=np.full_like(Y, np.inf))}, [],
     ["d.npz", "infinite", "data.path"]),
    ("npz-row-mismatch", npz_data("d.npz"), {"d.npz": npz(X_train=X, y_train=Y[:5])}, [], ["d.npz", "rows"]),
    ("npz-garbage", npz_data("d.npz"), {"d.npz": b"not a zip file at all"}, [], ["d.npz", "data.path"]),
    # mismatched dimensions of weight / scaling files
    ("init-path-wrong-shape", sub('init_path = ""', 'init_path = "w.npz"'),
     {"w.npz": npz(W0=np.zeros((10, 4)), a=np.ones(10))}, [], ["w.npz", "model.init_path", "allowed", "(10, 3)"]),
    ("init-path-missing", sub('init_path = ""', 'init_path = "nowhere.npz"'), {}, [],
     ["nowhere.npz", "model.init_path", "allowed"]),
    ("init-path-not-npz", sub('init_path = ""', 'init_path = "w.npz"'), {"w.npz": b"garbage"}, [],
     ["w.npz", "model.init_path"]),
    ("custom-lam-wrong-length", sub('kind = "asymmetric"\ngamma = 0.5\nalpha = 0.5', 'kind = "custom"\npath = "l.npz"'),
     {"l.npz": npz(lam=np.ones(7))}, [], ["l.npz", "model.scaling.path", "length", "10"]),
    ("custom-lam-missing", sub('kind = "asymmetric"\ngamma = 0.5\nalpha = 0.5', 'kind = "custom"\npath = "l.npz"'),
     {}, [], ["l.npz", "model.scaling.path"]),
    # huge values: refused up front with the estimate and the limit
    ("huge-width", sub("width = 10", "width = 2000000000"), {}, [],
     ["case.toml", "GiB of memory", "model.width", "the limit is", "allowed"]),
    ("huge-n", sub("n = 8", "n = 1000000000"), {}, [], ["case.toml", "GiB of memory", "data.n", "allowed"]),
    ("huge-seeds", sub("width = 10", "width = 400000"), {}, ["--set", "seeds={count=1000}"],
     ["case.toml", "GiB of memory", "seeds", "allowed"]),
]


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the driver is ever reached."""
    def boom(*a, **k):
        raise AssertionError("the driver ran: bad input was not refused up front")
    monkeypatch.setattr(driver_module.Driver, "run", boom)


def _materialise(tmp_path: Path, patch, files) -> Path:
    for name, content in files.items():
        path = tmp_path / name
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    scenario = tmp_path / "case.toml"
    if patch is not None:
        text = patch(BASE)
        if text is not None:
            scenario.write_text(text)
    elif not scenario.exists():
        scenario.write_text(BASE)
    return scenario


def test_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_up_front(case, tmp_path, inproc, no_compute, monkeypatch):
    name, patch, files, argv, needles = case
    monkeypatch.setenv("FLOWSIM_MEMORY_LIMIT", "16G")      # the same refusals on any machine
    monkeypatch.chdir(tmp_path)
    scenario = _materialise(tmp_path, patch, files)
    out = tmp_path / "runs" / "out.h5"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, stdout, err = inproc("run", scenario.name, "-o", out, "-q", *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowsim: error: "), err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    if name not in ("invalid-toml", "not-utf8"):      # a file that does not parse has no key yet
        assert "allowed" in lines[0], lines[0]
    assert not out.exists() and not (tmp_path / "runs").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_bad_input_does_not_touch_an_existing_archive(tmp_path, inproc, no_compute):
    """A bad scenario given with --overwrite or --resume leaves the archive alone."""
    out = tmp_path / "keep.h5"
    out.write_bytes(b"precious")
    scenario = tmp_path / "case.toml"
    scenario.write_text(BASE.replace("gamma = 0.5", "gamma = 3.0"))
    for mode in ("--overwrite", "--resume"):
        code, _, err = inproc("run", scenario, "-o", out, mode)
        assert code == 2 and "model.scaling.gamma" in err
    assert out.read_bytes() == b"precious"


@pytest.mark.slow
def test_hostile_input_through_the_real_command(tmp_path, cache_dir):
    """The same answers from a subprocess (entry point, exit status, stderr)."""
    scenario = tmp_path / "case.toml"
    scenario.write_text(BASE.replace("alpha = 0.5", "alpha = 1.5"))
    proc = subprocess.run(flowsim_cmd("run", scenario, "-o", tmp_path / "x.h5"), capture_output=True,
                          text=True, timeout=300, env=env_for(cache_dir))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "model.scaling.alpha" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.h5").exists()


# ---------------------------------------------------------------------------------------
# Bad archives
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_archives(tmp_path_factory):
    import h5py

    d = tmp_path_factory.mktemp("bad-archives")
    (d / "text.h5").write_text("this is not HDF5\n")
    (d / "empty.h5").write_bytes(b"")
    with h5py.File(d / "foreign.h5", "w") as f:            # HDF5, but not a flowsim archive
        f["x"] = np.arange(10)
    with h5py.File(d / "big.h5", "w", libver="latest") as f:
        f.attrs["flowsim_version"] = "0.1.0"
        f["runs/r/junk"] = np.random.default_rng(0).normal(size=(400, 400))
    raw = (d / "big.h5").read_bytes()
    (d / "truncated.h5").write_bytes(raw[: len(raw) // 3])
    (d / "header-only.h5").write_bytes(raw[:40])
    (d / "folder.h5").mkdir()
    return d


BAD = ["text.h5", "empty.h5", "foreign.h5", "truncated.h5", "header-only.h5", "folder.h5", "absent.h5"]


def _commands() -> list[str]:
    from flowsim.cli.command import parser

    sub = next(a for a in parser()._actions if a.dest == "command")
    return [c for c in ("inspect", "plot", "compare") if c in sub.choices] + ["resume"]


@pytest.mark.parametrize("command", _commands())
@pytest.mark.parametrize("bad", BAD)
def test_bad_archive_gets_a_message_not_a_traceback(command, bad, bad_archives, tmp_path, inproc, monkeypatch):
    path = bad_archives / bad
    monkeypatch.chdir(tmp_path)
    before = path.read_bytes() if path.is_file() else None
    if command == "resume":
        argv = ["run", FAULT, "-o", path, "--resume", "-q", *set_args(GD_ONLY)]
    elif command == "plot":
        argv = ["plot", path, "-o", tmp_path / "figs"]
    else:
        argv = [command, path]
    code, _, err = inproc(*argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowsim: error: ") and str(path) in lines[0], err
    if path.is_file():
        assert path.read_bytes() == before, "a bad archive was modified"
    assert not (tmp_path / "figs").exists() or not any((tmp_path / "figs").iterdir())


@pytest.mark.slow
def test_bad_archive_through_the_real_command(bad_archives, cache_dir):
    proc = subprocess.run(flowsim_cmd("inspect", bad_archives / "truncated.h5"), capture_output=True, text=True,
                          timeout=120, env=env_for(cache_dir))
    assert proc.returncode == 2 and "truncated" in proc.stderr and "Traceback" not in proc.stderr
