"""flowsim.data: generators (shapes, determinism, statistics), shipped files, loaders, errors."""

import gzip
import hashlib
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from flowsim.config import Data, ScenarioError, from_dict
from flowsim.config.schema import DATA
from flowsim.config.spec import Ctx
from flowsim.data import (
    DATA_DIR,
    DIGITS_FILES,
    UCI_TARGETS,
    DataError,
    Dataset,
    load_idx,
    make_dataset,
    read_csv,
    sphere_sine_target,
)

SYNTHETIC = {
    "sphere-sine": dict(kind="sphere-sine", n=30, d=7, noise=0.5, n_test=11),
    "single-relu": dict(kind="single-relu", n=30, d=7, noise=0.5, n_test=11),
    "random-labels": dict(kind="random-labels", n=30, d=7, n_test=11, low=-0.5, high=0.5),
    "xor-noise": dict(kind="xor-noise", n=30, d=7, n_test=11),
    "quadratic-teacher": dict(
        kind="quadratic-teacher", n=30, d=7, n_test=11, teacher_width=5, noise=0.5
    ),
}
UCI_SPLIT = dict(train=0.4, test=0.2, valid=0.4)


def table(cfg: dict) -> Data:
    """The typed [data] table of a complete `cfg` (None: the key left out), built without
    validation so that the data layer's own checks are what a bad value meets."""
    return from_dict(Data, {"seed": 0} | {k: v for k, v in cfg.items() if v is not None})


def make(cfg: dict, seed: int) -> Dataset:
    return make_dataset(table(cfg), seed)


def uci_cfg(name, standardize=True):
    return dict(kind="uci", name=name, split=UCI_SPLIT, permute_seed=10, standardize=standardize)


def arrays(ds: Dataset) -> dict:
    return {
        "X_train": ds.X_train,
        "y_train": ds.y_train,
        "X_test": ds.X_test,
        "y_test": ds.y_test,
    } | ds.extra


# --------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize("kind", SYNTHETIC)
def test_synthetic_shapes_dtype_and_determinism(kind):
    cfg = SYNTHETIC[kind]
    ds = make(cfg, seed=3)
    assert ds.X_train.shape == (30, 7) and ds.y_train.shape == (30, 1)
    assert ds.X_test.shape == (11, 7) and ds.y_test.shape == (11, 1)
    assert ds.classes == 0
    for name, A in arrays(ds).items():
        assert A.dtype == np.float64, name
    again, other = make(cfg, seed=3), make(cfg, seed=4)
    for name, A in arrays(ds).items():
        np.testing.assert_array_equal(A, arrays(again)[name])
    assert not np.array_equal(ds.X_train, other.X_train)


def test_zero_test_rows_keep_two_dimensions():
    ds = make(SYNTHETIC["sphere-sine"] | {"n_test": 0}, seed=0)
    assert ds.X_test.shape == (0, 7) and ds.y_test.shape == (0, 1)


def test_sphere_sine_points_and_labels():
    cfg = SYNTHETIC["sphere-sine"] | {"noise": 0.0, "n": 200}
    ds = make(cfg, seed=0)
    for X in (ds.X_train, ds.X_test):
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=0, atol=1e-12)
    d = ds.X_train.shape[1]
    by_hand = np.array([5 / d * sum(math.sin(math.pi * xk) for xk in x) for x in ds.X_train])
    np.testing.assert_allclose(ds.y_train[:, 0], by_hand, rtol=0, atol=1e-13)
    np.testing.assert_allclose(ds.y_test[:, 0], sphere_sine_target(ds.X_test), rtol=0, atol=1e-13)


def test_sphere_sine_noise_level():
    n, noise = 20_000, 0.7
    ds = make(SYNTHETIC["sphere-sine"] | {"noise": noise, "n": n}, seed=1)
    residual = ds.y_train[:, 0] - sphere_sine_target(ds.X_train)
    # sample std of n Gaussians has standard error ≈ σ/sqrt(2n); allow 5 of them
    assert abs(residual.std() - noise) < 5 * noise / math.sqrt(2 * n)
    assert abs(residual.mean()) < 5 * noise / math.sqrt(n)


def test_single_relu_teacher():
    ds = make(SYNTHETIC["single-relu"] | {"noise": 0.0}, seed=2)
    w = ds.extra["teacher_w"]
    assert w.shape == (7,) and abs(np.linalg.norm(w) - 1) < 1e-12
    np.testing.assert_allclose(np.linalg.norm(ds.X_train, axis=1), math.sqrt(7), rtol=1e-12)
    np.testing.assert_allclose(ds.y_train[:, 0], np.maximum(ds.X_train @ w, 0), rtol=0, atol=1e-13)


def test_quadratic_teacher_formula():
    ds = make(SYNTHETIC["quadratic-teacher"] | {"noise": 0.0}, seed=5)
    W, c = ds.extra["teacher_W"], ds.extra["teacher_c"]
    d = ds.X_train.shape[1]
    assert W.shape == (5, d * d) and set(np.unique(c)) <= {-1.0, 1.0}
    np.testing.assert_allclose(np.linalg.norm(ds.X_test, axis=1), math.sqrt(d), rtol=1e-12)
    x = ds.X_test[0]
    h = [
        sum(W[i, j * d + k] * x[j] * x[k] for j in range(d) for k in range(d)) / math.sqrt(d * d)
        for i in range(5)
    ]
    f = sum(c[i] * max(h[i], 0.0) for i in range(5)) / 5
    assert abs(ds.y_test[0, 0] - f) < 1e-12


def test_random_labels_range():
    ds = make(SYNTHETIC["random-labels"] | {"n": 5000, "low": 2.0, "high": 3.0}, seed=0)
    assert ds.y_train.min() >= 2.0 and ds.y_train.max() <= 3.0
    assert abs(ds.y_train.mean() - 2.5) < 5 * math.sqrt(1 / 12 / 5000)
    assert abs(ds.X_train.std() - 1.0) < 0.01


def test_xor_noise_structure_and_proportions():
    n = 40_000
    ds = make(SYNTHETIC["xor-noise"] | {"n": n}, seed=0)
    X, y = ds.X_train, ds.y_train[:, 0]
    cases = [(1, 0, 1), (-1, 0, 1), (0, 1, -1), (0, -1, -1)]
    counts = [np.sum((X[:, 0] == a) & (X[:, 1] == b) & (y == c)) for a, b, c in cases]
    assert sum(counts) == n  # every row is one of the four cases
    # each count ~ Binomial(n, 1/4): sd = sqrt(n·¼·¾); tolerance 5 sd
    sd = math.sqrt(n * 0.25 * 0.75)
    for count in counts:
        assert abs(count - n / 4) < 5 * sd
    assert X[:, 2:].min() >= -1 and X[:, 2:].max() <= 1
    assert abs(X[:, 2:].mean()) < 5 * math.sqrt(1 / 3 / X[:, 2:].size)


def test_unknown_kind_and_missing_key():
    # Validation names an unknown kind; a typed table lacking a key has the default its
    # setting declares (the one the schema fills in); a count out of range is refused by
    # the data layer too.
    ctx = Ctx(file="test.toml", base_dir=Path.cwd())
    with pytest.raises(ScenarioError, match='data.kind. = "nope" is not an allowed value'):
        DATA.check({"kind": "nope"}, "data", ctx)
    table = {"kind": "sphere-sine", "n": 3, "d": 2, "n_test": 0}
    assert from_dict(Data, table) == from_dict(Data, DATA.check(table, "data", ctx))
    assert from_dict(Data, table).noise == 1.0
    with pytest.raises(DataError, match="n = 0"):
        make(SYNTHETIC["xor-noise"] | {"n": 0}, 0)


# ------------------------------------------------------------------------- shipped files


def manifest():
    """file → (rows, columns, target, sha256) from the Manifest table of data/README.md."""
    text = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    section = text.split("## Manifest", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("`"):
            target = re.match(r"`([^`]+)`", cells[5]).group(1)
            rows[cells[0].strip("`")] = (int(cells[3]), int(cells[4]), target, cells[6].strip("`"))
    return rows


def test_manifest_lists_every_shipped_csv():
    assert set(manifest()) == {p.name for p in DATA_DIR.glob("*.csv")}
    assert set(manifest()) == {f"{name}.csv" for name in UCI_TARGETS} | set(DIGITS_FILES)


@pytest.mark.parametrize("filename", sorted(p.name for p in DATA_DIR.glob("*.csv")))
def test_shipped_csv_matches_manifest(filename):
    rows, columns, target, sha = manifest()[filename]
    path = DATA_DIR / filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    header, table = read_csv(path)
    assert table.shape == (rows, columns)
    assert target in header
    name = filename.removesuffix(".csv")
    if name in UCI_TARGETS:
        assert UCI_TARGETS[name][0] == target


@pytest.mark.parametrize("name", UCI_TARGETS)
def test_uci_split_sizes_and_permutation(name):
    rows, columns, target, _ = manifest()[f"{name}.csv"]
    ds = make(uci_cfg(name, standardize=False), seed=0)
    n_train, n_test = math.floor(0.4 * rows), math.floor(0.2 * rows)
    d = columns - 1 - len(UCI_TARGETS[name][1])
    assert ds.X_train.shape == (n_train, d) and ds.y_train.shape == (n_train, 1)
    assert ds.X_test.shape == (n_test, d) and ds.y_test.shape == (n_test, 1)
    assert ds.extra["X_valid"].shape == (rows - n_train - n_test, d)
    # the rows, in order, are the file permuted by default_rng(permute_seed)
    header, table = read_csv(DATA_DIR / f"{name}.csv")
    permuted = table[np.random.default_rng(10).permutation(rows)]
    stacked = np.vstack([ds.y_train, ds.y_test, ds.extra["y_valid"]])[:, 0]
    np.testing.assert_array_equal(stacked, permuted[:, header.index(target)])
    np.testing.assert_array_equal(ds.X_train[0], permuted[0, :d])


def test_uci_standardisation_and_seed_independence():
    ds = make(uci_cfg("energy"), seed=0)
    for A in (ds.X_train, ds.y_train):
        np.testing.assert_allclose(A.mean(axis=0), 0, atol=1e-12)
        np.testing.assert_allclose(A.std(axis=0), 1, atol=1e-12)
    raw = make(uci_cfg("energy", standardize=False), seed=0)
    np.testing.assert_allclose(
        ds.X_test * ds.extra["X_std"] + ds.extra["X_mean"], raw.X_test, rtol=1e-13
    )
    np.testing.assert_allclose(
        ds.extra["y_valid"] * ds.extra["y_std"] + ds.extra["y_mean"],
        raw.extra["y_valid"],
        rtol=1e-13,
    )
    np.testing.assert_array_equal(make(uci_cfg("energy"), seed=7).X_train, ds.X_train)


def test_uci_bad_name_and_split():
    with pytest.raises(DataError, match="name = 'iris'"):
        make(uci_cfg("iris"), 0)
    with pytest.raises(DataError, match="sum to 1"):
        make(uci_cfg("plant") | {"split": dict(train=0.5, test=0.2, valid=0.4)}, 0)


def test_digits():
    ds = make(dict(kind="digits", n=None, n_test=200, standardize=False), seed=0)
    assert ds.classes == 10
    assert ds.X_train.shape == (3823, 64) and ds.y_train.shape == (3823, 10)
    assert ds.X_test.shape == (200, 64) and ds.y_test.shape == (200, 10)
    for y in (ds.y_train, ds.y_test):
        assert set(np.unique(y)) == {0.0, 1.0} and np.all(y.sum(axis=1) == 1)
    assert ds.X_train.min() == 0 and ds.X_train.max() == 1
    # class counts of the whole training file (data/README.md)
    assert ds.y_train.sum(axis=0).tolist() == [376, 389, 380, 389, 387, 376, 377, 387, 380, 382]

    st = make(dict(kind="digits", n=500, n_test=None, standardize=True), seed=1)
    assert st.X_train.shape == (500, 64) and st.X_test.shape == (1797, 64)
    std = st.X_train.std(axis=0)
    constant = std < 1e-12  # e.g. pixel p00, always 0: left at 0, not divided by 0
    assert constant.any() and np.all(st.X_train[:, constant] == 0)
    np.testing.assert_allclose(st.X_train.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(std[~constant], 1, atol=1e-12)
    assert np.isfinite(st.X_test).all()


# -------------------------------------------------------------------------- user CSV/npz


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((20, 4))
    lines = ["a,b,t1,t2"] + [",".join(repr(float(v)) for v in row) for row in table]
    path = write(tmp_path / "user.csv", "\n".join(lines) + "\n")
    cfg = dict(
        kind="csv", path=str(path), target=["t1", "t2"], test_fraction=0.25, standardize=False
    )
    ds = make(cfg, seed=0)
    assert ds.X_train.shape == (15, 2) and ds.y_train.shape == (15, 2) and ds.X_test.shape == (5, 2)
    rebuilt = np.hstack([np.vstack([ds.X_train, ds.X_test]), np.vstack([ds.y_train, ds.y_test])])
    np.testing.assert_array_equal(np.sort(rebuilt, axis=0), np.sort(table, axis=0))

    st = make(cfg | {"target": "b", "standardize": True}, seed=0)
    assert st.X_train.shape == (15, 3) and st.y_train.shape == (15, 1)
    np.testing.assert_allclose(st.X_train.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(st.y_train.std(axis=0), 1, atol=1e-12)


BAD_CSV = {
    "empty": ("", "empty"),
    "header-only": ("a,b\n", "no data rows"),
    "ragged": ("a,b\n1,2\n3\n", "line 3 has 1 fields"),
    "non-numeric": ("a,b\n1,2\n3,x\n", "line 3, column 'b': 'x' is not a number"),
    "blank-cell": ("a,b\n1,\n", "column 'b': '' is not a number"),
    "nan": ("a,b\n1,nan\n", "'nan' is not finite"),
    "inf": ("a,b\n-inf,2\n", "'-inf' is not finite"),
    "unknown-target": ("a,c\n1,2\n", r"no column named 'b'; columns: \['a', 'c'\]"),
}


@pytest.mark.parametrize("case", BAD_CSV)
def test_bad_csv_raises_naming_the_file(tmp_path, case):
    text, message = BAD_CSV[case]
    path = write(tmp_path / f"{case}.csv", text)
    with pytest.raises(DataError, match=message) as err:
        make(
            dict(kind="csv", path=str(path), target="b", test_fraction=0.0, standardize=False), 0
        )
    assert str(path) in str(err.value)


def test_missing_csv(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(DataError, match="no such file") as err:
        make(
            dict(kind="csv", path=str(path), target="b", test_fraction=0.0, standardize=False), 0
        )
    assert str(path) in str(err.value)


def npz_cfg(path):
    return dict(kind="npz", path=str(path))


def test_npz_regression_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    path = tmp_path / "reg.npz"
    np.savez(path, X_train=X, y_train=y, X_test=X[:2], y_test=y[:2])
    ds = make(npz_cfg(path), seed=0)
    np.testing.assert_array_equal(ds.X_train, X)
    np.testing.assert_array_equal(ds.y_train, y[:, None])
    assert ds.y_test.shape == (2, 1) and ds.classes == 0

    # integer labels without `classes` stay regression; no test arrays → 0 test rows
    np.savez(path, X_train=X, y_train=np.arange(8))
    ds = make(npz_cfg(path), seed=0)
    assert ds.classes == 0 and ds.y_train.dtype == np.float64 and ds.y_train.shape == (8, 1)
    assert ds.X_test.shape == (0, 3) and ds.y_test.shape == (0, 1)


def test_npz_classification_one_hot(tmp_path):
    X = np.zeros((4, 2))
    path = tmp_path / "cls.npz"
    np.savez(
        path,
        X_train=X,
        y_train=np.array([0, 2, 1, 2]),
        X_test=X[:1],
        y_test=np.array([1]),
        classes=3,
    )
    ds = make(npz_cfg(path), seed=0)
    assert ds.classes == 3
    np.testing.assert_array_equal(ds.y_train, np.eye(3)[[0, 2, 1, 2]])
    np.testing.assert_array_equal(ds.y_test, [[0, 1, 0]])


BAD_NPZ = {
    "missing-key": (
        dict(X_train=np.zeros((3, 2))),
        r"missing y_train; the file holds \['X_train'\]",
    ),
    "test-half": (
        dict(X_train=np.zeros((3, 2)), y_train=np.zeros(3), X_test=np.zeros((1, 2))),
        "missing y_test",
    ),
    "rows": (
        dict(X_train=np.zeros((3, 2)), y_train=np.zeros(4)),
        "X_train has 3 rows but y_train has 4",
    ),
    "ndim": (dict(X_train=np.zeros(3), y_train=np.zeros(3)), "X_train has shape"),
    "y-ndim": (dict(X_train=np.zeros((3, 2)), y_train=np.zeros((3, 1, 1))), "y_train has shape"),
    "nan": (dict(X_train=np.array([[0.0, np.nan]]), y_train=np.zeros(1)), "X_train holds NaN"),
    "inf": (
        dict(X_train=np.zeros((1, 2)), y_train=np.array([np.inf])),
        "y_train holds NaN or infinite",
    ),
    "label-range": (
        dict(X_train=np.zeros((2, 2)), y_train=np.array([0, 3]), classes=3),
        r"labels in \[0, 3\)",
    ),
}


@pytest.mark.parametrize("case", BAD_NPZ)
def test_bad_npz_raises_naming_the_file(tmp_path, case):
    content, message = BAD_NPZ[case]
    path = tmp_path / f"{case}.npz"
    np.savez(path, **content)
    with pytest.raises(DataError, match=message) as err:
        make(npz_cfg(path), 0)
    assert str(path) in str(err.value)


def test_npz_not_an_archive(tmp_path):
    path = write(tmp_path / "junk.npz", "not a zip")
    with pytest.raises(DataError, match="not a readable .npz") as err:
        make(npz_cfg(path), 0)
    assert str(path) in str(err.value)


# ----------------------------------------------------------------------------------- IDX


def idx_bytes(array: np.ndarray, type_byte: int, dtype: str) -> bytes:
    header = bytes([0, 0, type_byte, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(dtype).tobytes()


def test_load_idx_round_trip(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "images.idx3-ubyte"
    path.write_bytes(idx_bytes(images, 0x08, ">u1"))
    np.testing.assert_array_equal(load_idx(path), images)

    values = np.linspace(-1, 1, 5)
    gz = tmp_path / "values.idx1-double.gz"
    gz.write_bytes(gzip.compress(idx_bytes(values, 0x0E, ">f8")))
    out = load_idx(gz)
    assert out.dtype == np.float64 and out.dtype.isnative
    np.testing.assert_array_equal(out, values)

    labels = np.array([-3, 7, 70000], dtype=np.int32)
    path.write_bytes(idx_bytes(labels, 0x0C, ">i4"))
    np.testing.assert_array_equal(load_idx(path), labels)


def test_load_idx_errors(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x01\x02")
    with pytest.raises(DataError, match="needs 5 data bytes, the file has 2"):
        load_idx(path)
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match="not an IDX file") as err:
        load_idx(path)
    assert str(path) in str(err.value)


def _csv_cfg(path, **kw):
    return dict(kind="csv", path=str(path), target="t", test_fraction=0.0, standardize=True) | kw


DEGENERATE_CSV = {   # text, config changes, what the message must name
    "one row": ("a,t\n1,2\n", {}, ["1 training row(s)", "need at least 2"]),
    "one row left by the split": ("a,t\n1,2\n3,4\n", {"test_fraction": 0.5},
                                  ["1 training row(s)", "test_fraction = 0.5", "need at least 2"]),
    "no test rows": ("a,t\n1,2\n3,4\n5,7\n", {"test_fraction": 0.2},
                     ["test_fraction = 0.2 leaves no test rows", "need at least 1"]),
    "constant target": ("a,t\n1,2\n3,2\n5,2\n", {}, ["target 't' is constant (2)", "a target that varies"]),
    "constant column": ("a,b,t\n1,0,2\n3,0,4\n5,0,7\n", {},
                        ["column 'b' is constant (0)", "std 0", "need a column that varies"]),
}


@pytest.mark.parametrize("case", DEGENERATE_CSV)
def test_degenerate_csv_is_refused_by_name(tmp_path, case):
    text, changes, words = DEGENERATE_CSV[case]
    path = write(tmp_path / "user.csv", text)
    with pytest.raises(DataError) as err:
        make(_csv_cfg(path, **changes), 0)
    assert str(path) in str(err.value) and all(w in str(err.value) for w in words), str(err.value)


def test_a_constant_column_is_kept_when_not_standardised(tmp_path):
    path = write(tmp_path / "user.csv", "a,b,t\n1,0,2\n3,0,4\n5,0,7\n")
    assert make(_csv_cfg(path, standardize=False), 0).X_train.shape == (3, 2)


@pytest.mark.parametrize("y, words", [(np.array([1.0]), "1 training row(s)"),
                                      (np.array([3.0, 3.0, 3.0]), "target 'y_train[:, 0]' is constant (3)")])
def test_degenerate_npz_is_refused_by_name(tmp_path, y, words):
    path = tmp_path / "d.npz"
    np.savez(path, X_train=np.arange(len(y) * 2.0).reshape(len(y), 2), y_train=y)
    with pytest.raises(DataError, match=re.escape(words)) as err:
        make(npz_cfg(path), 0)
    assert str(path) in str(err.value)


def test_a_one_row_csv_run_is_exit_2_naming_the_file(tmp_path):
    from tests.helpers import call_cli

    path = write(tmp_path / "one.csv", "a,b,t\n1,2,3\n")
    scenario = write(tmp_path / "one.toml", f"""name = "one"
[data]
kind = "csv"
path = "{path}"
target = "t"
[model]
width = 4
[run]
t_end = 1.0
solvers = ["gd-lr0.1"]
observe = ["loss"]
""")
    code, _, err = call_cli("run", scenario, "-o", tmp_path / "out.h5", "-q")
    assert code == 2 and str(path) in err and "need at least 2" in err, err
    assert not (tmp_path / "out.h5").exists()


# ------------------------------------------------- images at the papers' scale (flowsim/data/images.py)


def readme_section(title: str) -> str:
    text = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_shipped_mnist_images_match_their_record():
    """data/mnist_5k.npz: 5 000 images of 784 pixels, 500 of each digit, and the sha256 of
    the file and of its arrays that data/README.md records."""
    from flowsim.data import MNIST_FILE, load_mnist_5k

    section = readme_section(MNIST_FILE)
    recorded = dict(re.findall(r"\*\*sha256 of the (file|arrays):\*\* `([0-9a-f]{64})`", section))
    path = DATA_DIR / MNIST_FILE
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded["file"]
    X, y = load_mnist_5k()
    assert X.shape == (5000, 784) and X.dtype == np.uint8 and y.shape == (5000,)
    assert np.bincount(y, minlength=10).tolist() == [500] * 10
    assert hashlib.sha256(X.tobytes() + y.tobytes()).hexdigest() == recorded["arrays"]
    assert int(X.sum()) == 131_267_102 and int(y.sum()) == 22_500   # the README's sums


def cohen_reference(P_train, P_test):
    """Cohen et al.'s cifar.py, in numpy: / 255, flatten, centre, standardise (train statistics;
    a constant pixel divided by 1, which theirs never meets on CIFAR)."""
    X_train = P_train.reshape(len(P_train), -1) / 255.0
    X_test = P_test.reshape(len(P_test), X_train.shape[1]) / 255.0
    mean, std = X_train.mean(0), X_train.std(0)
    std[std == 0] = 1.0
    return (X_train - mean) / std, (X_test - mean) / std


def test_mnist_is_preprocessed_as_cohen_et_al():
    from flowsim.data import load_mnist_5k

    X, y = load_mnist_5k()
    ds = make(dict(kind="mnist"), seed=0)
    assert ds.X_train.shape == (5000, 784) and ds.X_test.shape == (0, 784) and ds.classes == 10
    expected, _ = cohen_reference(X, X[:0])
    np.testing.assert_allclose(ds.X_train, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ds.y_train, np.eye(10)[y])
    lit = X.std(0) > 0
    np.testing.assert_allclose(ds.X_train[:, lit].std(0), 1.0, rtol=1e-9)
    assert np.abs(ds.X_train.mean(0)).max() < 1e-12 and (ds.X_train[:, ~lit] == 0).all()
    raw = make(dict(kind="mnist", standardize=False), seed=0)
    np.testing.assert_array_equal(raw.X_train, X / 255.0)


def test_a_mnist_subset_is_balanced_disjoint_and_seeded():
    from flowsim.data import load_mnist_5k

    X, _ = load_mnist_5k()
    cfg = dict(kind="mnist", n=1000, n_test=500)
    ds = make(cfg, seed=3)
    assert ds.y_train.sum(0).tolist() == [100] * 10 and ds.y_test.sum(0).tolist() == [50] * 10
    assert ds.X_train.shape == (1000, 784) and ds.X_test.shape == (500, 784)
    np.testing.assert_array_equal(make(cfg, seed=3).X_train, ds.X_train)
    assert not np.array_equal(make(cfg, seed=4).X_train, ds.X_train)
    # the images picked (MNIST's 5 000 are distinct), disjoint, and preprocessed with the training
    # images' statistics, the test images too
    index = {row.tobytes(): i for i, row in enumerate(X)}

    def picked(Z):
        pixels = np.rint((Z * ds.extra["X_std"] + ds.extra["X_mean"]) * 255).astype(np.uint8)
        return np.array([index[row.tobytes()] for row in pixels])

    train, test = picked(ds.X_train), picked(ds.X_test)
    assert len(set(train)) == 1000 and len(set(test)) == 500 and not set(train) & set(test)
    expected, expected_test = cohen_reference(X[train], X[test])
    np.testing.assert_allclose(ds.X_train, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.X_test, expected_test, rtol=1e-12, atol=1e-12)


def test_bad_mnist_tables_name_the_key_and_what_is_allowed():
    ctx = Ctx(file="test.toml", base_dir=Path.cwd())
    with pytest.raises(ScenarioError, match=r"data\.n_test. = 1 with `data\.n` = 5000 asks for 5001 of the 5000") as err:
        DATA.check({"kind": "mnist", "n_test": 1}, "data", ctx)
    assert "test.toml" in str(err.value) and "allowed" in str(err.value)
    with pytest.raises(ScenarioError, match=r"data\.n. = 5001") as err:
        DATA.check({"kind": "mnist", "n": 5001}, "data", ctx)
    assert "allowed" in str(err.value)
    with pytest.raises(ScenarioError, match=r"unknown key `data\.path`.*kind = \"mnist\": kind, n, n_test"):
        DATA.check({"kind": "mnist", "path": "x.npz"}, "data", ctx)
    assert DATA.check({"kind": "mnist"}, "data", ctx) == {"kind": "mnist", "seed": 0, "n_test": 0, "standardize": True}
    with pytest.raises(DataError, match=r"n = 4000, n_test = 2000.*allowed: n \+ n_test <= 5000"):
        make(dict(kind="mnist", n=4000, n_test=2000), 0)


def cifar_cfg(path, **keys):
    return dict(kind="cifar", path=str(path), n=None, n_test=None, classes=10, standardize=True) | keys


def test_a_cifar_npz_is_preprocessed_as_cohen_et_al(tmp_path):
    """Statistics over every image of X (Cohen et al.'s come from the whole training set), then
    the first n; pixels in torchvision's layout (n, 32, 32, 3) uint8 here 4×4."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (12, 4, 4, 3), dtype=np.uint8)
    X_test = rng.integers(0, 256, (5, 4, 4, 3), dtype=np.uint8)
    y, y_test = np.arange(12) % 10, np.array([3, 1, 4, 1, 5])
    path = tmp_path / "cifar.npz"
    np.savez(path, X=X, y=y, X_test=X_test, y_test=y_test)
    ds = make(cifar_cfg(path), seed=0)
    expected, expected_test = cohen_reference(X, X_test)
    np.testing.assert_allclose(ds.X_train, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.X_test, expected_test, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ds.y_train, np.eye(10)[y])
    np.testing.assert_array_equal(ds.y_test, np.eye(10)[y_test])
    assert ds.classes == 10 and ds.X_train.shape == (12, 48)
    first = make(cifar_cfg(path, n=8, n_test=2), seed=0)
    np.testing.assert_allclose(first.X_train, expected[:8], rtol=1e-12, atol=1e-12)   # whole-X statistics
    np.testing.assert_array_equal(first.y_test, np.eye(10)[y_test[:2]])
    # float pixels are taken as they are; without X_test there are no test images
    np.savez(path, X=X.reshape(12, -1) / 255.0, y=y)
    flat = make(cifar_cfg(path), seed=0)
    np.testing.assert_allclose(flat.X_train, expected, rtol=1e-12, atol=1e-12)
    assert flat.X_test.shape == (0, 48) and flat.y_test.shape == (0, 10)


BAD_CIFAR = {
    "no-y": (dict(X=np.zeros((3, 2), np.uint8)), {}, r"missing y; the file holds \['X'\]"),
    "half-test": (dict(X=np.zeros((3, 2)), y=np.zeros(3, int), X_test=np.zeros((1, 2))), {}, "missing y_test"),
    "y-shape": (dict(X=np.zeros((3, 2)), y=np.zeros((3, 1), int)), {}, r"y has shape \(3, 1\); expected \(3,\)"),
    "y-float": (dict(X=np.zeros((3, 2)), y=np.zeros(3)), {}, r"integer labels in \[0, 10\)"),
    "y-range": (dict(X=np.zeros((3, 2)), y=np.array([0, 1, 10])), {}, r"labels in \[0, 10\).*\[0, 10\]"),
    "classes": (dict(X=np.zeros((3, 2)), y=np.array([0, 1, 2])), {"classes": 2}, r"data.classes = 2"),
    "test-shape": (dict(X=np.zeros((3, 2)), y=np.zeros(3, int), X_test=np.zeros((1, 3)), y_test=np.zeros(1, int)),
                   {}, r"X_test has images of shape \(3,\), X of \(2,\)"),
    "nan": (dict(X=np.array([[0.0, np.nan], [1.0, 1.0]]), y=np.zeros(2, int)), {}, "X holds NaN"),
    "one-image": (dict(X=np.zeros((1, 2)), y=np.zeros(1, int)), {}, "at least 2 images"),
    "n": (dict(X=np.zeros((3, 2)), y=np.zeros(3, int)), {"n": 4}, r"n = 4: .* holds 3 images in X; allowed"),
    "n-test": (dict(X=np.zeros((3, 2)), y=np.zeros(3, int)), {"n_test": 1}, r"n_test = 1: .* holds 0 images"),
    "strings": (dict(X=np.array([["a", "b"], ["c", "d"]]), y=np.zeros(2, int)), {}, "X holds <U1 values"),
}


@pytest.mark.parametrize("case", BAD_CIFAR)
def test_a_bad_cifar_npz_is_refused_naming_the_file(tmp_path, case):
    content, keys, message = BAD_CIFAR[case]
    path = tmp_path / f"{case}.npz"
    np.savez(path, **content)
    with pytest.raises(DataError, match=message) as err:
        make(cifar_cfg(path, **keys), 0)
    assert str(path) in str(err.value)


def test_a_missing_or_broken_cifar_file_is_refused(tmp_path):
    ctx = Ctx(file="test.toml", base_dir=tmp_path)
    with pytest.raises(ScenarioError, match=r"data\.path. = \"gone.npz\" is not an existing file"):
        DATA.check({"kind": "cifar", "path": "gone.npz"}, "data", ctx)
    with pytest.raises(ScenarioError, match=r"data\.classes. = 1"):
        DATA.check({"kind": "cifar", "path": str(write(tmp_path / "a.npz", "x")), "classes": 1}, "data", ctx)
    with pytest.raises(DataError, match="not a readable .npz") as err:
        make(cifar_cfg(tmp_path / "a.npz"), 0)
    assert str(tmp_path / "a.npz") in str(err.value)


def test_a_bad_cifar_file_in_a_run_is_exit_2_naming_file_key_and_allowed(tmp_path):
    from tests.helpers import call_cli

    np.savez(tmp_path / "c.npz", X=np.zeros((4, 3)), y=np.array([0, 1, 2, 11]))
    scenario = write(tmp_path / "c.toml", """name = "c"
[data]
kind = "cifar"
path = "c.npz"
[model]
kind = "mlp"
widths = [4]
[run]
t_end = 1.0
solvers = ["gd-lr0.1"]
observe = ["loss"]
""")
    code, _, err = call_cli("run", scenario, "-o", tmp_path / "out.h5", "-q")
    assert code == 2, err
    assert str(tmp_path / "c.npz") in err and "`data.path`" in err and "allowed: an .npz holding X" in err, err


SYNTHETIC_IMAGES = dict(kind="synthetic-images", n=40, n_test=7, channels=2, size=5, blur=1.0, shared=1.5,
                        classes=4, teacher_widths=[9, 6])


def test_synthetic_images_shapes_determinism_and_standardisation():
    ds = make(SYNTHETIC_IMAGES, seed=0)
    assert ds.X_train.shape == (40, 50) and ds.X_test.shape == (7, 50)
    assert ds.y_train.shape == (40, 4) and ds.y_test.shape == (7, 4) and ds.classes == 4
    assert set(np.unique(ds.y_train)) <= {0.0, 1.0} and (ds.y_train.sum(1) == 1).all()
    np.testing.assert_allclose(ds.X_train.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(ds.X_train.std(0), 1.0, rtol=1e-12)
    again = make(SYNTHETIC_IMAGES, seed=0)
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(again, name), getattr(ds, name))
    assert not np.array_equal(make(SYNTHETIC_IMAGES, seed=1).X_train, ds.X_train)
    # the labels are the archived teacher's argmax on the standardised images
    from flowsim.data.images import teacher_labels

    teacher = [(ds.extra[f"teacher_W{i}"], ds.extra[f"teacher_b{i}"]) for i in range(3)]
    assert [W.shape for W, _ in teacher] == [(9, 50), (6, 9), (4, 6)]
    np.testing.assert_array_equal(ds.y_train.argmax(1), teacher_labels(teacher, ds.X_train))
    np.testing.assert_array_equal(ds.y_test.argmax(1), teacher_labels(teacher, ds.X_test))
    # the paper-scale default: 500 CIFAR-shaped 3×8×8 images, 10 classes
    big = make(dict(kind="synthetic-images", n=500, n_test=0, channels=3, size=8, blur=1.0, shared=1.5,
                    classes=10, teacher_widths=[200, 200]), seed=0)
    assert big.X_train.shape == (500, 192) and big.y_train.shape == (500, 10) and big.X_test.shape == (0, 192)


def test_synthetic_images_are_the_documented_fields():
    """Blurring wraps round and keeps the mean; each image is its own field, plus `shared` times
    a field common to its channels, plus a brightness; neighbouring pixels correlate."""
    from flowsim.data.images import gaussian_blur, synthetic_images

    rng = np.random.default_rng(0)
    field = rng.standard_normal((3, 6, 6))
    blurred = gaussian_blur(field, 1.0)
    np.testing.assert_allclose(blurred.sum((1, 2)), field.sum((1, 2)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gaussian_blur(np.roll(field, 2, axis=2), 1.0), np.roll(blurred, 2, axis=2), atol=1e-12)
    assert gaussian_blur(field, 0.0) is field
    images = synthetic_images(np.random.default_rng(1), 4000, 3, 8, 1.0, 1.5)
    flat = images.reshape(4000, -1)
    corr = np.corrcoef(flat[:, 0], flat[:, 1])[0, 1]           # pixels (0, 0) and (0, 1) of channel 0
    across = np.corrcoef(flat[:, 0], flat[:, 64])[0, 1]        # pixel (0, 0) of channels 0 and 1
    assert corr > across > 0.5


def test_bad_synthetic_images_tables_name_the_key():
    ctx = Ctx(file="test.toml", base_dir=Path.cwd())
    for key, value in (("size", 0), ("channels", -1), ("blur", -0.5), ("classes", 1), ("teacher_widths", [])):
        with pytest.raises(ScenarioError, match=rf"data\.{key}. = ") as err:
            DATA.check({"kind": "synthetic-images", key: value}, "data", ctx)
        assert "allowed" in str(err.value)
    with pytest.raises(DataError, match="n = 0"):
        make(SYNTHETIC_IMAGES | {"n": 0}, 0)
