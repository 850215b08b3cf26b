"""GD beside its central flow in `flowsim compare` and `flowsim plot`
(flowsim/analysis/compare_central.py, flowsim/plots/central.py), and GD's `perturbation`, whose twin
gives the noise floor: the report's numbers against numpy computed from the archive, the
smoothing against scipy's gaussian_filter1d, the twin's start against its stated draw, and
its resume bit for bit."""

import csv
import math
import re
import shutil
import types
from pathlib import Path

import h5py
import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.ndimage import gaussian_filter1d

from flowsim import archive
from flowsim.analysis import compare, compare_report
from flowsim.analysis import compare_central as central
from flowsim.run.build import build_run
from flowsim.cli.command import main
from flowsim.config import Config, Preset, ScenarioError, from_dict, load_scenario
from flowsim.integrate.central_field import ARRIVAL_TOL, conventions
from flowsim.integrate.descent import PERTURBATION_STREAM
from flowsim.plots import plot_archive

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "central-mlp.toml"
ETA = 0.1
# central-mlp to t = 30 (300 GD steps; GD's sharpness reaches 2/η = 20 at t = 20), a row per 10 steps
SHORT = ["run.t_end=30.0", "run.checkpoints={count=30}"]
# GD alone (no flow to pay for), with two twins
GD_ONLY = ['run.observe=["loss", "weights"]', "run.checkpoints={every=1.0}",
           'run.solvers=[{name="gd", kind="gd", learning_rate=0.1}, '
           '{name="twin0", kind="gd", learning_rate=0.1, perturbation=0.0}, '
           '{name="twin", kind="gd", learning_rate=0.1, perturbation=1e-12}]']


def run(tmp: Path, name: str, sets, *extra) -> Path:
    out = tmp / f"{name}.h5"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["run", str(SCENARIO), "-o", str(out), "-q", *extra, *args]) == 0
    return out


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    return run(tmp_path_factory.mktemp("central"), "short", SHORT)


# ---------------------------------------------------------------- smoothing


def _direct(t, values, sigma, truncate=4.0):
    """The smoothing written as one matrix: Gaussian weights times each row's cell width,
    zero beyond truncate·σ, each row normalised."""
    edges = np.concatenate(([t[0]], (t[1:] + t[:-1]) / 2, [t[-1]]))
    dt = t[:, None] - t[None, :]
    K = np.exp(-0.5 * (dt / sigma) ** 2) * (np.abs(dt) <= truncate * sigma + 1e-9) * np.diff(edges)[None, :]
    return K @ values / K.sum(axis=1)


def test_smoothing_equals_scipys_gaussian_filter_away_from_the_ends():
    """On an even grid (Δt = 0.5, σ = 5: 10 rows, kernel radius 40 rows), scipy's
    gaussian_filter1d and `smooth` agree to 1e-13 wherever the window lies inside the run (and
misses its two end rows, each half a cell wide)."""
    rng = np.random.default_rng(0)
    t = np.arange(0, 100.5, 0.5)
    values = np.exp(-t / 30) * (1 + 0.3 * rng.standard_normal(t.size))
    ours = central.smooth(t, values, 5.0)
    ref = gaussian_filter1d(values, 10.0, mode="nearest")
    inside = slice(41, t.size - 41)    # (the end rows hold half a cell: a window reaching them differs)
    np.testing.assert_allclose(ours[inside], ref[inside], rtol=1e-13)
    # at the ends the two differ (renormalised window vs repeated end values): the test can tell
    assert abs(ours[0] - ref[0]) > 1e-3


def test_smoothing_on_an_uneven_grid_weighs_rows_by_their_share_of_time():
    """Against the matrix form on a log-spaced grid; a constant stays constant everywhere
    (the ends included) and a line stays a line where the window is inside the run."""
    t = np.concatenate(([0.0], np.geomspace(0.1, 100, 120)))
    values = np.sin(t / 7) + t / 50
    np.testing.assert_allclose(central.smooth(t, values, 4.0), _direct(t, values, 4.0), rtol=1e-13)
    np.testing.assert_allclose(central.smooth(t, np.full(t.size, 2.5), 4.0), 2.5, rtol=1e-14)
    even = np.linspace(0, 100, 201)
    line = central.smooth(even, 3 * even + 1, 5.0)
    np.testing.assert_allclose(line[41:-41], (3 * even + 1)[41:-41], rtol=1e-12)


# ---------------------------------------------------------------- the report against numpy


@pytest.mark.slow
def test_the_central_section_equals_numpy_on_the_archive(short):
    """central-mlp to t = 30: onset, distances, floor, ratio, predicted-loss error, sharpness
    and costs recomputed from the archive's series with numpy (1e-12)."""
    rep = compare.compare_archive(short)
    (tr,) = rep.central
    assert (tr.gd, tr.central, tr.flow, tr.twin, tr.twin_perturbation) == (
        "gd-0.1", "central-0.1", "tsit5", "gd-0.1-twin", 1e-12)
    with archive.open(short) as a:
        s = a.runs["seed0"].solvers
        g, c, f, w = s["gd-0.1"], s["central-0.1"], s["tsit5"], s["gd-0.1-twin"]
        t, step = np.asarray(g.t), np.asarray(g.step)
        for v in (c, f, w):    # every leg is observed at GD's times
            np.testing.assert_allclose(v.t, t, rtol=1e-12)
        np.testing.assert_array_equal(tr.t, t)
        onset = int(np.flatnonzero(ETA * g["sharpness"] >= 2)[0])
        assert tr.onset == onset and t[onset] == pytest.approx(20.0)    # the shortened run passes it
        d_c = np.linalg.norm(g["weights"] - c["weights"], axis=1)
        d_f = np.linalg.norm(g["weights"] - f["weights"], axis=1)
        floor = np.linalg.norm(g["weights"] - w["weights"], axis=1)
        for ours, ref in ((tr.d_central, d_c), (tr.d_flow, d_f), (tr.floor, floor)):
            np.testing.assert_allclose(ours, ref, rtol=1e-12)
        after = slice(onset, None)
        smoothed = _direct(t, g["loss"], 50 * ETA)
        err = float(np.mean(np.abs(c["predicted_loss"] - smoothed)[after] / smoothed[after]))
        assert tr.mean_after(tr.loss_error) == pytest.approx(err, rel=1e-12)
        assert (tr.sharp_gd[-1], tr.sharp_central[-1], tr.sharp_flow[-1]) == (
            g["sharpness"][-1], c["central_eig1"][-1], f["sharpness"][-1])
        steps = 30.0 / ETA
        cost_c = sum(c[n][-1] for n in ("central_evals", "central_hvps", "central_thirds")) / steps
        cost_f = (f.stats["vf_evals"] + f.stats["hvps"]) / steps
        assert tr.cost == pytest.approx({"central-0.1": cost_c, "tsit5": cost_f, "gd-0.1": 1.0}, rel=1e-12)
        assert cost_c > 1 and cost_f > 1     # each pays more than GD's one gradient a step (the central flow by
        # rock4, tracking only the candidates, can cost less than tsit5's exact flow at rtol 1e-8)
    text = compare_report.format_report(rep)
    assert "onset: t = 20 (step 200)" in text
    assert f"mean relative error {100 * err:.3g} %" in text
    assert f"cost per GD step in gradient-equivalents: central-0.1 {cost_c:.3g}, tsit5 {cost_f:.3g}, gd-0.1 1" in text
    # every distance row carries the floor beside it: t, step, ‖GD − central‖, ‖GD − flow‖, ratio, floor
    for i in tr.rows():
        row = next(x for x in text.splitlines() if x.split()[:2] == [f"{t[i]:.4g}", str(step[i])])
        assert row.split()[2:6] == [f"{d_c[i]:.3g}", f"{d_f[i]:.3g}", f"{d_c[i] / d_f[i]:.3g}", f"{floor[i]:.3g}"]


@pytest.mark.slow
def test_the_headline_is_the_ratio_of_the_mean_distances_and_the_median_ratio(short, tmp_path, capsys):
    """`flowsim compare` on central-mlp to t = 30: the headline's ratio of the mean distances
    from the onset on, and the median of the per-row ratios, equal numpy's on the archive's
    datasets read with h5py (1e-12; as printed, to 3 digits), in the report, the CSV and beside
    the noise floor's mean; the mean of the per-row ratios, which the rows where GD passes near
    the flow dominate, is not reported."""
    with h5py.File(short, "r") as f:
        s = f["runs/seed0"]
        W = {n: s[n]["weights"][()] for n in ("gd-0.1", "central-0.1", "tsit5", "gd-0.1-twin")}
        sharp = s["gd-0.1"]["sharpness"][()]
    onset = int(np.flatnonzero(ETA * sharp >= 2)[0])
    d_c = np.linalg.norm(W["gd-0.1"] - W["central-0.1"], axis=1)[onset:]
    d_f = np.linalg.norm(W["gd-0.1"] - W["tsit5"], axis=1)[onset:]
    floor = np.linalg.norm(W["gd-0.1"] - W["gd-0.1-twin"], axis=1)[onset:]
    ratio_of_means, median = d_c.mean() / d_f.mean(), float(np.median(d_c / d_f))
    mean_of_ratios = float(np.mean(d_c / d_f))
    # the three differ on this run, so the text below can tell them apart
    assert min(abs(mean_of_ratios / x - 1) for x in (ratio_of_means, median)) > 0.05
    assert abs(ratio_of_means / median - 1) > 0.005

    (tr,) = compare.compare_archive(short).central
    assert tr.ratio_of_means == pytest.approx(ratio_of_means, rel=1e-12)
    assert tr.median_ratio == pytest.approx(median, rel=1e-12)
    assert main(["compare", str(short), "--csv", str(tmp_path / "gaps.csv")]) == 0
    (head,) = [x for x in capsys.readouterr().out.splitlines() if "from the onset on:" in x]
    assert (f"mean ‖GD − central‖ {d_c.mean():.3g}, mean ‖GD − flow‖ {d_f.mean():.3g}, their ratio "
            f"{ratio_of_means:.3g}, the median of the per-row ratios {median:.3g}; beside them the noise floor, "
            f"mean ‖GD − twin‖ {floor.mean():.3g}") in head
    assert f"{mean_of_ratios:.3g}" not in head
    rows = list(csv.DictReader((tmp_path / "gaps-central.csv").open()))
    assert {(float(r["ratio_of_means"]), float(r["median_ratio"])) for r in rows} == {
        (tr.ratio_of_means, tr.median_ratio)}


@pytest.mark.slow
def test_the_conventions_are_written_where_a_user_compares(short, capsys):
    """The central leg's archive attribute `conventions` (read with h5py) names Σ and the JAX
    package's X = Σ/η, the edge 2/η = 20 and where each sharpness is taken; `flowsim inspect`
    and `flowsim compare` print it whole; the GD legs have none."""
    with h5py.File(short, "r") as f:
        s = f["runs/seed0"]
        text = s["central-0.1"].attrs["conventions"]
        assert not any("conventions" in s[n].attrs for n in ("gd-0.1", "gd-0.1-twin", "tsit5"))
    lines = text.splitlines()
    assert text == conventions(ETA) and len(lines) == 6
    for words in ("the package's X is Σ/η", "Σ = U X Uᵀ", "edge of stability: λ = 2/η = 20;",
                  "central_edge<i> = ηλ_i/2 is 1 there (the package's effective eigenvalue ηλ is 2 there)",
                  "GD's `sharpness` at its iterate θ_k, the row at t = kη before the step",
                  "the central flow's central_eig<i> at θ(t)", f"|ηλ_i/2 − 1| ≤ {ARRIVAL_TOL:g}"):
        assert words in text, words
    for command in ("inspect", "compare"):
        assert main([command, str(short)]) == 0
        out = capsys.readouterr().out.splitlines()
        at = next(i for i, x in enumerate(out) if x.strip().startswith("conventions"))
        assert [x.strip() for x in out[at + 1:at + 7]] == lines, command


@pytest.mark.slow
def test_the_csv_and_the_figures_of_the_central_section(short, tmp_path, capsys):
    assert main(["compare", str(short), "--csv", str(tmp_path / "gaps.csv"), "-o", str(tmp_path / "figs")]) == 0
    rows = list(csv.DictReader((tmp_path / "gaps-central.csv").open()))
    (tr,) = compare.compare_archive(short).central
    assert len(rows) == tr.t.size and rows[-1]["twin"] == "gd-0.1-twin"
    np.testing.assert_array_equal([float(r["floor"]) for r in rows], tr.floor)
    assert [int(r["after_onset"]) for r in rows] == tr.after.astype(int).tolist()
    assert (tmp_path / "figs" / "central-mlp-compare-central.png").stat().st_size > 10_000
    written = plot_archive(short, tmp_path / "plots", formats=("png",))
    assert tmp_path / "plots" / "central-mlp-central.png" in written
    assert (tmp_path / "plots" / "central-mlp-central.png").stat().st_size > 10_000


@pytest.mark.slow
def test_without_a_twin_or_a_flow_the_section_says_how_to_add_them(short):
    """The same archive read as if the run had no twin and no flow leg."""
    with archive.open(short) as a:
        r = a.runs["seed0"]
        solvers = {n: v for n, v in r.solvers.items() if n in ("gd-0.1", "central-0.1")}
        presets = {n: from_dict(Preset, v.preset) for n, v in solvers.items()}
        view = types.SimpleNamespace(name=r.name, label=r.label, seed=r.seed, solvers=solvers)
        (tr,) = central.central_tracks(view, presets)
    assert tr.floor is None and tr.d_flow is None and set(tr.cost) == {"central-0.1", "gd-0.1"}
    text = "\n".join(compare_report._track_text(tr))
    assert ('add a twin of gd-0.1 to run.solvers, e.g. { name = "gd-0.1-twin", kind = "gd", learning_rate = 0.1, '
            'perturbation = 1e-12 }') in text
    assert "add a `flow`-kind leg" in text
    assert "mean ‖GD − flow‖ —, no ratio; beside them the noise floor, mean ‖GD − twin‖ —" in text


@pytest.mark.slow
def test_an_archive_without_a_central_flow_has_no_central_section(tmp_path):
    out = run(tmp_path, "gd", [*GD_ONLY[:2], "run.t_end=2.0",
                               'run.solvers=["tsit5", {name="gd", kind="gd", learning_rate=0.1}]'])
    rep = compare.compare_archive(out)
    assert rep.central == [] and "beside its central flow" not in compare_report.format_report(rep)
    assert not any(p.name.endswith("-central.png") for p in plot_archive(out, tmp_path / "plots", formats=("png",)))


# ---------------------------------------------------------------- the perturbation


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    return run(tmp_path_factory.mktemp("twins"), "twins", [*GD_ONLY, "run.t_end=30.0"])


def test_a_twin_without_perturbation_is_gd_bit_for_bit_and_one_with_1e12_starts_1e12_away(twins):
    """ε = 0: every row identical (floor exactly 0). ε = 1e-12: the start is W0 + ε·z with z
    the stated draw, N(0, I) from fold_in(run key, 2³² − 1) over the weights in
    ravel_pytree order (the `weights` series' order), to the rounding of W0 + ε·z (|Δz| ≤ 1e-3);
    past the onset (t = 20) GD's chaos has grown that to > 1e-4."""
    with archive.open(twins) as a:
        r = a.runs["seed0"]
        gd, twin0, twin = (r.solvers[n]["weights"] for n in ("gd", "twin0", "twin"))
        built = build_run(from_dict(Config, r.params), r.seed)
    np.testing.assert_array_equal(twin0, gd)
    assert np.linalg.norm(twin0 - gd, axis=1).max() == 0.0
    flat, _ = ravel_pytree(built.params)
    z = np.asarray(jax.random.normal(jax.random.fold_in(built.key, PERTURBATION_STREAM), flat.shape, flat.dtype))
    np.testing.assert_array_equal(gd[0], np.asarray(flat))
    np.testing.assert_allclose((twin[0] - gd[0]) / 1e-12, z, rtol=0, atol=1e-3)
    assert np.linalg.norm(twin[0] - gd[0]) == pytest.approx(1e-12 * np.linalg.norm(z), rel=1e-4)
    assert np.linalg.norm(twin[-1] - gd[-1]) > 1e-4


def test_a_perturbed_gd_resumes_bit_for_bit(twins, tmp_path):
    """Run to t = 15, extend with --resume to t = 30: the twin's rows equal the straight run's
    bit for bit (a perturbation applied again on resume would move them by 1e-12)."""
    out = run(tmp_path, "half", [*GD_ONLY, "run.t_end=15.0"])
    shutil.copy(out, tmp_path / "half-before.h5")
    run(tmp_path, "half", [*GD_ONLY, "run.t_end=30.0"], "--resume")
    with archive.open(out) as a, archive.open(twins) as f:
        for name in ("twin", "gd"):
            resumed, fresh = a.runs["seed0"].solvers[name], f.runs["seed0"].solvers[name]
            np.testing.assert_array_equal(resumed.t, fresh.t)
            np.testing.assert_array_equal(resumed["weights"], fresh["weights"])
            np.testing.assert_array_equal(resumed["loss"], fresh["loss"])


@pytest.mark.parametrize("value, words", [("-1e-12", "= -1e-12 is out of range; allowed: a number >= 0"),
                                          ('"tiny"', '= "tiny" has the wrong type (string); allowed: a number >= 0')])
def test_a_bad_perturbation_gets_the_loaders_message(tmp_path, value, words):
    solvers = f'solvers = [{{ name = "twin", kind = "gd", learning_rate = 0.1, perturbation = {value} }}]\n'
    bad = tmp_path / "bad.toml"
    bad.write_text(re.sub(r"^solvers = \[.*?^\]\n", solvers, SCENARIO.read_text(), flags=re.S | re.M))
    with pytest.raises(ScenarioError) as err:
        load_scenario(bad)
    assert err.value.key == "run.solvers[0].perturbation"
    assert "bad.toml" in str(err.value).split(": key")[0]     # the file, then the key
    assert f"key `run.solvers[0].perturbation` {words}" in str(err.value)


class _View:
    """An in-memory solver group (name, t, step, stats, series) as `central` reads one."""

    def __init__(self, name, t, series, step=None, stats=None):
        self.name, self.t, self.step, self.stats, self.series = name, np.asarray(t, float), step, stats or {}, series
        self.conventions = ""

    def __contains__(self, key):
        return key in self.series

    def __getitem__(self, key):
        return np.asarray(self.series[key])


def test_onset_never_and_a_flow_without_every_row():
    """GD below 2/η throughout: "never", no means after it. A flow with rows at every other
    GD time: NaN distances at the others, never a nearest row."""
    t = np.arange(0.0, 11.0)
    W = np.zeros((t.size, 3))
    gd = _View("gd", t, {"sharpness": np.full(t.size, 19.0), "weights": W, "loss": np.ones(t.size)},
               step=(t * 10).astype(int))
    cen = _View("cf", t, {"central_eig1": np.full(t.size, 19.0), "weights": W + 1.0,
                          "predicted_loss": np.ones(t.size)})
    flow = _View("fl", t[::2], {"sharpness": np.full(6, 19.0), "weights": np.full((6, 3), 2.0)},
                 stats={"vf_evals": 50, "hvps": 0})
    presets = {"gd": from_dict(Preset, {"name": "gd", "kind": "gd", "learning_rate": ETA}),
               "cf": from_dict(Preset, {"name": "cf", "kind": "central-flow", "learning_rate": ETA}),
               "fl": from_dict(Preset, {"name": "fl", "kind": "flow"})}
    view = types.SimpleNamespace(name="r", label="", seed=0, solvers={"gd": gd, "cf": cen, "fl": flow})
    (tr,) = central.central_tracks(view, presets)
    assert tr.onset is None and not tr.after.any() and math.isnan(tr.ratio_of_means) and math.isnan(tr.median_ratio)
    np.testing.assert_array_equal(tr.d_central, np.full(t.size, np.sqrt(3)))
    np.testing.assert_array_equal(np.isnan(tr.d_flow), np.arange(t.size) % 2 == 1)
    np.testing.assert_allclose(tr.d_flow[::2], np.sqrt(12))
    assert tr.cost["fl"] == pytest.approx(50 / 100) and tr.loss_error.max() <= 1e-15   # a constant, smoothed
    text = "\n".join(compare_report._track_text(tr))
    assert "onset: never: gd's sharpness stays below 2/η = 20 at its 11 matched times (max 19)" in text


def test_a_central_leg_whose_every_tracked_direction_is_a_candidate_is_named():
    """k = 2 tracked directions, the second at ηλ/2 = 0.95 ≥ the threshold 0.9 from t = 6 on:
    nothing beneath the block is watched there, and compare says so, with the first and last
    such rows; a block whose last direction stays beneath the threshold gets no such note."""
    t = np.arange(0.0, 11.0)
    W = np.zeros((t.size, 3))
    gd = _View("gd", t, {"sharpness": np.full(t.size, 21.0), "weights": W, "loss": np.ones(t.size)},
               step=(t * 10).astype(int))
    second = np.where(t >= 6, 0.95, 0.8)
    presets = {"gd": from_dict(Preset, {"name": "gd", "kind": "gd", "learning_rate": ETA}),
               "cf": from_dict(Preset, {"name": "cf", "kind": "central-flow", "learning_rate": ETA,
                                        "max_eigen": 2, "track_threshold": 0.9})}

    def notes(edge2):
        cen = _View("cf", t, {"central_eig1": np.full(t.size, 20.0), "central_edge1": np.ones(t.size),
                              "central_edge2": edge2, "weights": W, "predicted_loss": np.ones(t.size)})
        view = types.SimpleNamespace(name="r", label="", seed=0, solvers={"gd": gd, "cf": cen})
        (tr,) = central.central_tracks(view, presets)
        return [n for n in tr.notes if "tracked directions" in n]

    (note,) = notes(second)
    assert note.startswith("cf: all 2 tracked directions are candidates from t = 6 on (ηλ2/2 = 0.9500 ≥ "
                           "track_threshold 0.9, at 5 of 11 rows, 0.9500 at t = 10)")
    assert "larger max_eigen" in note
    assert notes(np.full(t.size, 0.8)) == []


@pytest.mark.slow
def test_rmsprops_pair_is_named_rmsprop_where_a_user_compares(tmp_path, capsys, monkeypatch):
    """central-rmsprop to step 200 (its onset at step 170): the text and the figures name RMSProp
    and its preconditioned sharpness, never GD; read without its stable flow, the text says
    which flow leg to add."""
    out = tmp_path / "rms.h5"
    sets = ["run.t_end=0.2", "run.checkpoints={count=20}",
            'run.solvers=[{name="rmsprop", kind="rmsprop", learning_rate=0.001, beta2=0.99, nu0="grad-squared"}, '
            '{name="twin", kind="rmsprop", learning_rate=0.001, beta2=0.99, nu0="grad-squared", perturbation=1e-12}, '
            '{name="flow", kind="rmsprop-flow", learning_rate=0.001, beta2=0.99, method="auto"}, '
            '{name="rmsprop-central", kind="rmsprop-central", learning_rate=0.001, beta2=0.99, max_eigen=5, method="rock4", '
            'rtol=1e-6, atol=1e-8, pcoeff=0.3, icoeff=0.3}]']
    assert main(["run", str(ROOT / "scenarios" / "central-rmsprop.toml"), "-o", str(out), "-q",
                 *[a for s in sets for a in ("--set", s)]]) == 0
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    # the pair table's name column widens to the leg's name (it ran into η: "rmsprop-central  0.001")
    assert re.search(r"\n  rmsprop {5}rmsprop-central {4}0\.001 {4}20 ", text), text
    section = text[text.index("beside its central flow at the same η"):]
    section = section[:section.index("\nnotes:")]
    assert "rmsprop's preconditioned_sharpness ≥ 2/η = 2000" in section
    assert "mean ‖RMSProp − central‖" in section and "predicted loss vs RMSProp's smoothed loss" in section
    assert "preconditioned_sharpness at t = 0.2: RMSProp " in section
    assert "its `preconditioned_sharpness`" in section and "cost per RMSProp step" in section
    assert not re.search(r"\bGD\b", section.replace("(GD, RMSProp)", "")), section
    with archive.open(out) as a:
        r = a.runs["seed0"]
        solvers = {n: v for n, v in r.solvers.items() if n != "flow"}
        presets = {n: from_dict(Preset, v.preset) for n, v in solvers.items()}
        (tr,) = central.central_tracks(types.SimpleNamespace(name=r.name, label=r.label, seed=r.seed,
                                                             solvers=solvers), presets)
    assert "no stable flow: add a `rmsprop-flow` leg at η = 0.001 to run.solvers" in tr.notes
    # the figures `compare -o` saves: the pair's figure and the run's
    from matplotlib.figure import Figure
    figures, real = {}, Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, f, *a, **k: (figures.__setitem__(Path(f).name, fig),
                                                                    real(fig, f, *a, **k))[1])
    assert main(["compare", str(out), "-o", str(tmp_path / "figs"), "--csv", str(tmp_path / "gaps.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "gaps-central.csv").open()))
    assert {(r["gd"], r["method"], r["sharpness_series"]) for r in rows} == {
        ("rmsprop", "RMSProp", "preconditioned_sharpness")}
    distances = figures["central-rmsprop-compare-central.png"].axes[2].get_ylabel()
    assert "RMSProp" in distances and "GD" not in distances
    seed = figures["central-rmsprop-compare-seed0.png"]
    assert "RMSProp vs flow at t = kη" in seed.get_suptitle()
    gaps = seed.axes[0]
    assert "W_RMSProp" in gaps.get_ylabel()
    # the central flow's line is told apart from the stable flow's (both were solid)
    styles = {h.get_label(): h.get_linestyle() for h in gaps.get_legend().legend_handles}
    assert styles["vs RMSProp central flow (same η)"] != styles["vs RMSProp flow (same η)"]
    assert main(["plot", str(out), "-o", str(tmp_path / "plots")]) == 0
    times = {ax.get_xlabel() for ax in figures["central-rmsprop-fig1.png"].axes if ax.get_xlabel()}
    assert times == {"t (flow time; a discrete step × η)"}, times    # was "GD step × η"
