"""Every door a user takes with bad input: one message, exit 2, and nothing touched.

Each command that reads a scenario or an archive (and `flowsim.simulate`'s `output`) is
given each wrong thing a user gives it, through the installed `flowsim` entry point in a
subprocess (the path a user takes: the process's own exception handling is what is
tested). A new command joins by a row of COMMANDS."""

import hashlib
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers import call_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
FLOWSIM = Path(sys.executable).parent / "flowsim"     # the entry point pip installed beside python

# What a user mistypes or mistakes: name -> (how it is made in the folder, what the message says)
SCENARIO_INPUTS = {
    "catalog typo": ("quickstrat", 'did you mean "quickstart"?'),
    "missing file": ("missing.toml", "missing.toml: no such file"),
    "TOML syntax error": ("syntax.toml", "invalid TOML: Expected ']' at the end of a table declaration (at line 2, "
                                         "column 7)"),
    "directory": ("folder", "folder: is a directory, not a scenario file"),
    "empty file": ("empty.toml", "empty.toml: is empty"),
    "not TOML": ("binary.toml", "binary.toml: is not UTF-8 text"),
    "archive for a scenario": ("archive.h5", "archive.h5: is an HDF5 archive, not a scenario file"),
}
ARCHIVE_INPUTS = {
    "catalog name": ("quickstart", "quickstart: no such archive; 'quickstart' is a scenario in the catalog"),
    "missing file": ("missing.h5", "missing.h5: no such archive"),
    "TOML syntax error": ("syntax.toml", "syntax.toml: is not an HDF5 file, not a flowsim archive"),
    "directory": ("folder", "folder: is a directory, not an archive"),
    "empty file": ("empty.toml", "empty.toml: is empty, not an archive"),
    "not HDF5": ("binary.toml", "binary.toml: is not an HDF5 file, not a flowsim archive"),
    "scenario for an archive": ("scenario.toml", "scenario.toml: is a scenario file (TOML), not a flowsim archive; "
                                                 "to simulate it: `flowsim run scenario.toml`"),
}
OUTPUT_INPUTS = {     # where an archive is to be written
    "directory": ("folder", "is a folder; allowed: an archive file path"),
    "scenario file": ("scenario.toml", "scenario.toml: exists and is a scenario file (TOML), not an archive: it is not replaced"),
    "not HDF5": ("binary.toml", "binary.toml: exists and is not an HDF5 file, not an archive: it is not replaced"),
}
SIMULATE = """
import sys, numpy as np, jax, equinox as eqx, flowsim
X = np.random.default_rng(0).normal(size=(8, 3))
try:
    flowsim.simulate(lambda k: eqx.nn.MLP(3, 1, 4, 1, key=k), data=(X, X[:, 0]), t_end=1.0,
                     solvers=["gd-lr0.1"], output=sys.argv[1], overwrite=True, progress=False)
except ValueError as err:
    print(err, file=sys.stderr)
    sys.exit(2)
"""
# command -> (the argv for an input, the inputs it is given, loads JAX: a slow row)
COMMANDS = {
    "run": (lambda x: ["run", x, "-q"], SCENARIO_INPUTS, True),
    "show": (lambda x: ["show", x], SCENARIO_INPUTS, True),
    "inspect": (lambda x: ["inspect", x], ARCHIVE_INPUTS, False),
    "plot": (lambda x: ["plot", x, "-o", "figures"], ARCHIVE_INPUTS, False),
    "compare": (lambda x: ["compare", x], ARCHIVE_INPUTS, False),
    "merge": (lambda x: ["merge", "merged.h5", x], ARCHIVE_INPUTS, False),
    "run -o": (lambda x: ["run", str(TINY), "-o", x, "--overwrite", "-q"], OUTPUT_INPUTS, True),
    "merge -o": (lambda x: ["merge", x, "archive.h5", "--overwrite"], OUTPUT_INPUTS, False),
    "simulate": (None, OUTPUT_INPUTS, True),
}


def _cases():
    for command, (_, inputs, slow) in COMMANDS.items():
        for name in inputs:
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(command, name, id=f"{command}-{name}", marks=marks)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """A real archive: tiny's first point and seed, to t = 2."""
    out = tmp_path_factory.mktemp("doors") / "archive.h5"
    rc, _, err = call_cli("run", TINY, "-o", out, "-q", "--set", "seeds=[0]", "--set",
                          'sweep."model.scaling"=[{kind="ntk"}]', "--set", "run.t_end=2.0")
    assert rc == 0, err
    return out


def _folder(tmp_path: Path, archive: Path) -> Path:
    (tmp_path / "syntax.toml").write_text('name = "x"\n[model\nwidth = 3\n')
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.toml").write_bytes(b"")
    (tmp_path / "binary.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary")
    (tmp_path / "archive.h5").write_bytes(archive.read_bytes())
    (tmp_path / "scenario.toml").write_text(TINY.read_text())
    return tmp_path


def checksums(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command,given", list(_cases()))
def test_every_door_answers_bad_input_with_one_message_and_exit_2(tmp_path, archive, command, given):
    folder = _folder(tmp_path, archive)
    argv, inputs, _ = COMMANDS[command]
    path, says = inputs[given]
    before = checksums(folder)
    if argv is None:
        proc = subprocess.run([sys.executable, "-c", SIMULATE, path], cwd=folder, capture_output=True, text=True,
                              timeout=600)
    else:
        proc = subprocess.run([str(FLOWSIM), *argv(path)], cwd=folder, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, proc.stderr          # one message, nothing else
    assert says in errors[0], errors[0]
    assert "allowed" in errors[0] or "did you mean" in errors[0], errors[0]   # and what would do
    if argv is None:     # simulate names its own argument, never the command's options
        assert "-o " not in errors[0] and "--overwrite" not in errors[0] and "`output`" in errors[0], errors[0]
    assert checksums(folder) == before            # a refusal touches no byte
    assert not (folder / "merged.h5").exists() and not (folder / "figures").exists()


def test_refusals_and_readers_leave_the_archive_bytes_unchanged(tmp_path, archive):
    """Every refused `--resume`, a run onto an archive without --overwrite, a merge onto one,
    and every reading command: the archive's bytes are the same afterwards."""
    out = tmp_path / "archive.h5"
    out.write_bytes(archive.read_bytes())
    same = ["--set", "seeds=[0]", "--set", 'sweep."model.scaling"=[{kind="ntk"}]']
    before = checksums(tmp_path)
    refused = [
        ["run", TINY, "-o", out, "--resume", *same, "--set", 'model.activation="tanh"', "--set", "run.t_end=2.0"],
        ["run", TINY, "-o", out, "--resume", *same, "--set", "run.t_end=1.0"],   # a horizon only grows
        ["run", TINY, "-o", out, "--resume"],                                     # other seeds and points
        ["run", TINY, "-o", out, *same],                                          # exists, no --overwrite
        ["merge", out, out],
        ["merge", out, tmp_path / "missing.h5", "--overwrite"],
    ]
    for argv in refused:
        rc, _, err = call_cli(*argv)
        assert rc == 2 and err.startswith("flowsim: error:"), (argv, err)
        assert checksums(tmp_path) == before, argv
    for argv in (["inspect", out], ["compare", out], ["compare", out, "--csv", tmp_path / "gaps.csv"],
                 ["plot", out, "-o", tmp_path / "figures"]):
        rc, _, err = call_cli(*argv)
        assert rc == 0, (argv, err)
        assert checksums(tmp_path)["archive.h5"] == before["archive.h5"], argv


@pytest.mark.parametrize("theirs_first", [True, False], ids=["theirs-first", "flowsim-first"])
@pytest.mark.parametrize("reader", ["h5py", "xarray"])
def test_open_beside_h5py_and_xarray_in_one_process(archive, reader, theirs_first):
    import flowsim

    def theirs():
        if reader == "h5py":
            return h5py.File(archive, "r")
        import xarray as xr

        return xr.open_dataset(archive, group="runs/p0-seed0/tsit5", engine="h5netcdf")

    held = theirs() if theirs_first else None
    with flowsim.open(archive) as a:
        held = held if theirs_first else theirs()
        loss = a.runs["p0-seed0"].solvers["tsit5"]["loss"]
        theirs_loss = held["runs/p0-seed0/tsit5/loss"][()] if reader == "h5py" else held["loss"].values
        np.testing.assert_array_equal(loss, theirs_loss)     # both read the same file, both ways
    held.close()


def test_open_says_what_holds_the_file_where_hdf5_cannot_share_it(archive):
    from flowsim.archive import ArchiveError
    from flowsim.archive.recovery import explain

    err = explain(str(archive), OSError("Unable to synchronously open file (file locking flag values don't match)"))
    assert isinstance(err, ArchiveError)
    assert "open in this process with other HDF5 file-locking flags" in str(err) and "close that handle" in str(err)


# ---- the data door: a file read as the user meant ----------------------------------------

def _pandas_csv(folder: Path, index_name: str = "") -> Path:
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "y"])
    path = folder / "table.csv"
    frame.to_csv(path)                           # pandas' default: its row index first, unnamed
    if index_name:                               # read back and written again: "Unnamed: 0"
        pd.read_csv(path).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("index_name", ["", "Unnamed: 0"])
def test_a_pandas_row_index_is_dropped_with_a_message_naming_it(tmp_path, index_name):
    from flowsim.data import read_csv

    path = _pandas_csv(tmp_path, index_name)
    assert path.read_text().splitlines()[0] == f"{index_name},a,b,y"
    with pytest.warns(UserWarning, match=r"the first column has no name .* holds 0, 1, …, 29: pandas' row index"):
        header, table = read_csv(path)
    assert header == ["a", "b", "y"] and table.shape == (30, 3)
    np.testing.assert_array_equal(table, np.loadtxt(path, delimiter=",", skiprows=1)[:, 1:])


def test_an_unnamed_column_that_is_not_a_row_index_is_refused(tmp_path):
    from flowsim.data import DataError, read_csv

    path = tmp_path / "table.csv"
    path.write_text(",a,y\n5,1,2\n7,3,4\n")
    with pytest.raises(DataError, match=r"the first column has no name \(''\) and does not hold the row numbers"):
        read_csv(path)


def test_show_prints_each_splits_shape_and_columns(tmp_path):
    _pandas_csv(tmp_path)
    (tmp_path / "mine.toml").write_text('[data]\nkind = "csv"\npath = "table.csv"\ntarget = "y"\n'
                                        'test_fraction = 0.2\n[model]\nwidth = 5\n[run]\nt_end = 1.0\n'
                                        'solvers = ["tsit5"]\n')
    with pytest.warns(UserWarning, match="pandas' row index"):   # (the command prints it as flowsim: warning:)
        rc, out, err = call_cli("show", tmp_path / "mine.toml")
    assert rc == 0, err
    assert "  csv (regression): train X (24, 2), y (24, 1); test X (6, 2), y (6, 1)" in out
    assert "    inputs (2): a, b" in out and "    targets: y" in out
