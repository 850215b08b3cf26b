"""`flowsim compare`: GD against the flow at matched times, checked against the closed-form
linear oracle, the orders of GD to the flow (1) and to the modified flow (2), the flow's
error certificate, and the sharpness observables against dense eigen-decompositions."""

import csv
import math
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem
from jax.flatten_util import ravel_pytree
from test_engine import linear_closed_form

from flowsim import archive
from flowsim.analysis import compare, compare_report
from flowsim.run.build import build_run
from flowsim.config import Config, DescentPreset, Preset, from_dict, load_solver
from flowsim.cli.command import main
from flowsim.nn.losses import loss_fn
from flowsim.observe.observables import OBSERVABLES, observe
from flowsim.observe.stability import LANCZOS_RTOL, LANCZOS_STEPS, gn_sharpness, lanczos_top, sharpness

ROOT = Path(__file__).resolve().parent.parent


def run_scenario(tmp: Path, text: str, name: str) -> Path:
    scen = tmp / f"{name}.toml"
    scen.write_text(text)
    out = tmp / f"{name}.h5"
    assert main(["run", str(scen), "-o", str(out), "--overwrite", "-q"]) == 0
    return out


# ---------------------------------------------------------------- linear oracle through the CLI

LINEAR = """
name = "linear-compare"
seeds = [3]
[data]
kind = "sphere-sine"
n = 12
d = 4
noise = 0.1
n_test = 4
[model]
width = 16
activation = "identity"
[model.scaling]
kind = "asymmetric"
gamma = 0.5
alpha = 0.5
[loss]
kind = "half-sse"
[run]
t_end = 8.0
checkpoints = { times = [0.5, 1.0, 2.0, 4.0, 8.0] }
observe = ["loss", "ntg", "weight_change", "weights"]
solvers = [
  { name = "exact", kind = "flow", method = "dopri8", rtol = 1e-12, atol = 1e-14 },
  { name = "loose", kind = "flow", method = "bosh3", rtol = 3e-3, atol = 3e-3, reference = { name = "ref", kind = "flow", method = "dopri8", rtol = 1e-12, atol = 1e-14 } },
  { name = "gd-0.5", kind = "gd", learning_rate = 0.5 },
  { name = "gd-0.25", kind = "gd", learning_rate = 0.25 },
]
"""


@pytest.fixture(scope="module")
def linear_archive(tmp_path_factory):
    return run_scenario(tmp_path_factory.mktemp("lin"), LINEAR, "linear")


@pytest.mark.slow
def test_compare_distances_equal_the_linear_closed_form(linear_archive, capsys):
    rep = compare.compare_archive(linear_archive)
    with archive.open(linear_archive) as a:
        (run,) = a.runs.values()
        built = build_run(from_dict(Config, run.params), run.seed)
    problem, p0 = built.problem, built.params
    W0 = np.asarray(p0["W"])
    assert {(p.discrete, p.flow) for p in rep.pairs} == {(g, f) for g in ("gd-0.5", "gd-0.25")
                                                         for f in ("exact", "loose")}
    for p in (p for p in rep.pairs if p.flow == "exact"):
        assert p.unmatched == 0 and p.t.size == 5
        for i, (t, k) in enumerate(zip(p.t, p.step)):
            assert k * p.eta == t                      # matched at t = kη exactly
            Wf, Lf = linear_closed_form(problem, p0, t=t)
            Wg, Lg = linear_closed_form(problem, p0, eta=p.eta, k=int(k))
            gap = np.linalg.norm(Wg - Wf)
            rel = gap / np.linalg.norm(Wf - W0)
            wc = np.max(np.abs(np.linalg.norm(Wg - W0, axis=1) - np.linalg.norm(Wf - W0, axis=1)))
            assert abs(p.gaps["weight_gap"][i] - gap) <= 1e-8 * gap
            assert abs(p.gaps["weight_gap_rel"][i] - rel) <= 1e-8 * rel
            assert abs(p.gaps["loss_gap"][i] - abs(Lg - Lf)) <= 1e-8 * abs(Lg - Lf)
            assert abs(p.gaps["weight_change_gap"][i] - wc) <= 1e-8 * wc
            assert p.gaps["ntg_gap"][i] <= 1e-12          # σ' ≡ 1: the NTG never moves
    # the CLI prints one table row per pair
    assert main(["compare", str(linear_archive)]) == 0
    out = capsys.readouterr().out
    assert "gd-0.5" in out and "gd-0.25" in out and "no cert." in out
    assert "flow(s) exact have no error estimate" in out                 # the flow has no reference


# ---------------------------------------------------------------- orders and the certificate

SMOOTH = """
name = "smooth-ladder"
seeds = [0]
[data]
kind = "sphere-sine"
n = 16
d = 4
noise = 0.1
n_test = 4
[model]
width = 24
activation = "swish"
[loss]
kind = "half-sse"
[run]
t_end = 12.8
checkpoints = { times = [0.8, 1.6, 3.2, 4.8, 6.4, 9.6, 12.8] }
observe = ["loss", "weight_change", "weights"]
solvers = [
  { name = "flow", kind = "flow", method = "tsit5", rtol = 1e-10, atol = 1e-12, reference = "dopri8-tight" },
  { name = "gd-0.8", kind = "gd", learning_rate = 0.8 },
  { name = "gd-0.4", kind = "gd", learning_rate = 0.4 },
  { name = "gd-0.2", kind = "gd", learning_rate = 0.2 },
  { name = "gd-0.1", kind = "gd", learning_rate = 0.1 },
  { name = "mf-0.8", kind = "modified-flow", learning_rate = 0.8, rtol = 1e-10, atol = 1e-12 },
  { name = "mf-0.4", kind = "modified-flow", learning_rate = 0.4, rtol = 1e-10, atol = 1e-12 },
  { name = "mf-0.2", kind = "modified-flow", learning_rate = 0.2, rtol = 1e-10, atol = 1e-12 },
  { name = "mf-0.1", kind = "modified-flow", learning_rate = 0.1, rtol = 1e-10, atol = 1e-12 },
]
"""


@pytest.fixture(scope="module")
def smooth(tmp_path_factory):
    path = run_scenario(tmp_path_factory.mktemp("smooth"), SMOOTH, "smooth")
    return path, compare.compare_archive(path)


def _ladder(rep, flow_kind, flow=None):
    (lad,) = [x for x in rep.ladders if x.flow_kind == flow_kind and (flow is None or x.flow == flow)]
    return lad


@pytest.mark.slow
def test_fitted_orders_flow_one_modified_flow_two(smooth, capsys):
    path, rep = smooth
    lad1 = _ladder(rep, "flow", "flow")
    lad2 = _ladder(rep, "modified-flow")
    assert lad1.used.all() and lad2.used.all() and lad1.n_times == 7
    assert abs(lad1.order - 1.0) <= 0.15, (lad1.order, lad1.gaps)
    assert abs(lad2.order - 2.0) <= 0.25, (lad2.order, lad2.gaps)
    assert 0 < lad1.stderr < 0.1 and 0 < lad2.stderr < 0.1
    # each GD is paired with the modified flow of its own η only
    mf_pairs = {(p.discrete, p.flow) for p in rep.pairs if p.flow_kind == "modified-flow"}
    assert mf_pairs == {(f"gd-{e}", f"mf-{e}") for e in ("0.8", "0.4", "0.2", "0.1")}
    assert main(["compare", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"order {lad1.order:.3f} ± " in out and f"order {lad2.order:.3f} ± " in out
    assert "unknown: record `sharpness`" in out       # no sharpness recorded here


@pytest.mark.slow
def test_certificate_flags_gaps_below_the_flow_error(linear_archive, tmp_path, capsys):
    # a loose flow (Bogacki–Shampine at rtol 3e-3) with a tight reference, on the linear
    # problem: its true global error and the true GD–flow gap are known in closed form
    rep = compare.compare_archive(linear_archive)
    by = {(p.discrete, p.flow): p for p in rep.pairs}
    with archive.open(linear_archive) as a:
        (run,) = a.runs.values()
        built = build_run(from_dict(Config, run.params), run.seed)
        W_loose = {float(t): w for t, w in zip(run.solvers["loose"].t, run.solvers["loose"]["weights"])}
    loose = by[("gd-0.25", "loose")]
    assert loose.certified_on == "weights" and loose.unresolved.any() and not loose.unresolved.all()
    # flagged exactly where the measured gap is not above 2 × the flow's error estimate
    np.testing.assert_array_equal(loose.unresolved, loose.gaps["weight_gap"] <= 2 * loose.flow_error)
    true_gap, true_err = [], []
    for t, k in zip(loose.t, loose.step):
        Wf, _ = linear_closed_form(built.problem, built.params, t=t)
        Wg, _ = linear_closed_form(built.problem, built.params, eta=loose.eta, k=int(k))
        true_gap.append(np.linalg.norm(Wg - Wf))
        true_err.append(np.linalg.norm(W_loose[float(t)] - Wf))
    true_gap, true_err = np.array(true_gap), np.array(true_err)
    # the estimate is the true error (the reference is exact to ~1e-12)
    np.testing.assert_allclose(loose.flow_error, true_err, rtol=1e-6)
    # every time where the true gap is below the flow's error is flagged …
    assert loose.unresolved[true_gap < true_err].all() and (true_gap < true_err).any()
    # … and where a gap is reported, it is right to within a factor of two
    ok = ~loose.unresolved
    assert np.all(np.abs(loose.gaps["weight_gap"][ok] - true_gap[ok]) < 0.5 * loose.gaps["weight_gap"][ok])
    # table count and CSV column
    csv_path = tmp_path / "gaps.csv"
    assert main(["compare", str(linear_archive), "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("gd-0.25") and " loose " in line)
    assert f"{int(loose.unresolved.sum())}/{loose.unresolved.size}" in row
    rows = list(csv.DictReader(csv_path.open()))
    assert set(compare.CSV_COLUMNS) <= set(rows[0])
    flagged = [r for r in rows if r["discrete"] == "gd-0.25" and r["flow"] == "loose" and r["unresolved"] == "1"]
    assert len(flagged) == int(loose.unresolved.sum())
    assert len(rows) == sum(p.t.size for p in rep.pairs)


@pytest.mark.slow
def test_modified_flow_reference_solves_the_modified_equation(tmp_path):
    # the reference of a modified flow integrates the same modified equation: its error
    # estimate is tiny, not the O(η) distance between the modified and the plain flow
    keep = [line for line in SMOOTH.splitlines()
            if not any(f'"{n}"' in line for n in ("gd-0.4", "gd-0.2", "gd-0.1", "mf-0.4", "mf-0.2", "mf-0.1"))]
    text = "\n".join(keep).replace('atol = 1e-12 },\n]', 'atol = 1e-12, reference = "dopri8-tight" },\n]')
    assert text.count('reference = "dopri8-tight"') == 2
    rep = compare.compare_archive(run_scenario(tmp_path, text, "mfref"))
    (p,) = [p for p in rep.pairs if p.flow == "mf-0.8"]
    assert p.certified_on == "weights" and not p.unresolved.any()
    assert np.max(p.flow_error) < 1e-5 * np.max(p.gaps["weight_gap"])


# ---------------------------------------------------------------- pure helpers

def _pair(eta, gap, err, status="done"):
    t = np.array([1.0, 2.0, 4.0])
    gap = np.asarray(gap, float)
    return compare.Pair(run="r", label="", seed=0, discrete=f"gd-{eta}", flow="flow", discrete_kind="gd",
                        flow_kind="flow", eta=eta, status=status,
                        preset=DescentPreset(name=f"gd-{eta}", kind="gd", description="", learning_rate=eta,
                                             divergence_factor=1e8),
                        flow_preset=from_dict(Preset, load_solver("tsit5")), t=t, step=np.round(t / eta).astype(int),
                        gaps={"weight_gap": gap}, flow_error=np.full(3, err),
                        unresolved=~(gap > 2 * err), certified_on="weights")


def test_ladder_leaves_out_unresolved_and_diverged_steps():
    pairs = [_pair(1.0, [1.0, 2.0, 1.5], 1e-6), _pair(0.5, [0.5, 1.0, 0.7], 1e-6),
             _pair(0.25, [0.25, 0.5, 0.3], 1e-6), _pair(0.125, [0.1, 0.2, 0.1], 0.15),   # max ≤ 2 × error
             _pair(2.0, [5.0, 50.0, 500.0], 1e-6, status="diverged")]
    (lad,) = compare.ladders(pairs)
    assert lad.used.tolist() == [False, True, True, True, False]      # η descending: 2, 1, 0.5, .25, .125
    assert lad.reasons[0] == "diverged" and lad.reasons[4].startswith("unresolved")
    assert abs(lad.order - 1.0) < 1e-12 and abs(lad.stderr) < 1e-12
    text = compare_report.ladder_text(lad)
    assert "order 1.000 ± 0" in text and "η = 0.125 left out: unresolved" in text



def test_match_times_is_exact_never_nearest():
    ia, ib = compare.match_times(np.array([0.0, 0.5, 1.0, 1.25, 2.0]), np.array([2.0, 1.0, 0.0, 1.5]))
    assert ia.tolist() == [0, 2, 4] and ib.tolist() == [2, 1, 0]


def test_fit_order_standard_error_matches_the_regression():
    rng = np.random.default_rng(0)
    etas = np.array([2.0, 1.0, 0.5, 0.25, 0.125])
    gaps = 3.0 * etas**1.5 * np.exp(0.05 * rng.normal(size=etas.size))
    order, se, c = compare.fit_order(etas, gaps)
    p, V = np.polyfit(np.log(etas), np.log(gaps), 1, cov=True)
    assert math.isclose(order, p[0], rel_tol=1e-12) and math.isclose(c, p[1], rel_tol=1e-12)
    # numpy's cov=True scales by SSR/(n−2) as well (numpy ≥ 1.17)
    assert math.isclose(se, math.sqrt(V[0, 0]), rel_tol=1e-9)
    assert math.isnan(compare.fit_order([1.0, 0.5], [1.0, 0.5])[1])


# ---------------------------------------------------------------- sharpness observables

@pytest.mark.parametrize("kw", [dict(activation="swish"),
                                dict(activation="tanh", output="trained", loss="cross-entropy", outputs=3)])
@pytest.mark.slow
def test_sharpness_equals_dense_hessian_top_eigenvalue(kw):
    problem, p0 = make_problem(n=16, d=4, m=24, **kw)    # 96 (or 120) parameters, 32 Lanczos steps
    p = jax.tree.map(lambda w: w + 0.3 * jnp.sin(3 * w), p0)
    flat, unravel = ravel_pytree(p)
    H = np.asarray(jax.jit(jax.hessian(lambda f: problem.loss(unravel(f))))(flat))
    top = np.linalg.eigvalsh(0.5 * (H + H.T))[-1] * problem.rate
    s, res, _ = jax.jit(sharpness)(problem, p)
    assert abs(float(s) - top) <= 1e-6 * abs(top)
    assert float(res) <= 1e-6 * abs(top)
    # Gauss–Newton: Jᵀ ∇²ℓ J, dense
    pred = problem.net(p, problem.X)
    J = np.asarray(jax.jit(jax.jacfwd(lambda f: problem.net(unravel(f), problem.X).reshape(-1)))(flat))
    Hl = np.asarray(jax.jit(jax.hessian(lambda f: loss_fn(problem.loss_kind)(f.reshape(pred.shape), problem.y)))(
        pred.reshape(-1)))
    g_top = np.linalg.eigvalsh(J.T @ Hl @ J)[-1] * problem.rate
    assert abs(float(jax.jit(gn_sharpness)(problem, p)) - g_top) <= 1e-6 * g_top


@pytest.mark.slow
@pytest.mark.parametrize("loss, factor", [("half-sse", 1.0), ("mse", 2.0 / 20)])
def test_gn_sharpness_is_the_scaled_top_eigenvalue_of_the_full_ntg(loss, factor):
    problem, p0 = make_problem(n=20, d=5, m=30, loss=loss, scaling="mean-field")   # rate ≠ 1
    values = jax.jit(lambda p: observe(problem, p, None, ("gn_sharpness",)))(p0)
    top = np.linalg.eigvalsh(np.asarray(problem.net.ntg(p0, problem.X)))[-1]
    assert abs(float(values["gn_sharpness"]) - problem.rate * factor * top) <= 1e-9 * problem.rate * factor * top
    assert {"sharpness", "sharpness_residual"} == set(OBSERVABLES["sharpness"].series) and "gn_sharpness" in OBSERVABLES


@pytest.mark.slow
def test_lanczos_survives_an_early_invariant_subspace():
    A = np.diag([5.0, 1.0, 0.5])   # 3 dimensions, 32 steps: breakdown after 3
    lam, res, steps = jax.jit(lambda v: lanczos_top(lambda u: jnp.asarray(A) @ u, v, 32))(jnp.ones(3))
    assert abs(float(lam) - 5.0) <= 1e-12 and float(res) <= 1e-12 and int(steps) == 3
    B = jnp.asarray(np.diag(np.arange(1.0, 101.0)))   # low rank start: invariant after 2 steps
    v0 = jnp.zeros(100).at[0].set(1.0).at[99].set(1.0)
    lam, _, steps = jax.jit(lambda v: lanczos_top(lambda u: B @ u, v, 32))(v0)
    assert abs(float(lam) - 100.0) <= 1e-12 and int(steps) == 2
    # negative definite, the same start: the top of the invariant space is -1, not the 0 that
    # padding a broken-down Krylov space with zero vectors would add
    lam, _, steps = jax.jit(lambda v: lanczos_top(lambda u: -B @ u, v, 32))(v0)
    assert abs(float(lam) + 1.0) <= 1e-12 and int(steps) == 2


def test_lanczos_stops_at_its_tolerance_and_not_before():
    """A separated top eigenvalue: Lanczos stops early with the residual it promises, and
    θ is within it of the top (a dense eigvalsh oracle). A top cluster 1e-7 wide: the
    residual cannot reach 1e-10 · θ, and all 32 steps are taken."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    v0 = jnp.asarray(rng.standard_normal(200))
    for spectrum, early in ((np.concatenate([[10.0], rng.uniform(0, 4, 199)]), True),
                            (np.concatenate([1 + 1e-7 * rng.uniform(0, 1, 20), rng.uniform(0, 0.5, 180)]), False)):
        A = jnp.asarray(Q @ np.diag(spectrum) @ Q.T)
        lam, res, steps = jax.jit(lambda v: lanczos_top(lambda u: A @ u, v))(v0)
        top = spectrum.max()
        assert float(lam) <= top * (1 + 1e-14)                        # a Ritz value: a lower bound
        assert top - float(lam) <= float(res) + 1e-14 * top
        if early:
            assert float(res) <= LANCZOS_RTOL * top and int(steps) < LANCZOS_STEPS
            assert abs(float(lam) - top) <= 1e-12 * top
        else:
            assert float(res) > LANCZOS_RTOL * top and int(steps) == LANCZOS_STEPS


# ---------------------------------------------------------------- the two scenarios, end to end

@pytest.mark.slow
@pytest.mark.parametrize("name", ["flow-vs-gd-ladder", "edge-of-stability"])
def test_compare_on_the_new_scenarios(name, tmp_path, capsys):
    out = tmp_path / f"{name}.h5"
    assert main(["run", str(ROOT / "scenarios" / f"{name}.toml"), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    figs, csv_path = tmp_path / "figs", tmp_path / f"{name}.csv"
    assert main(["compare", str(out), "--csv", str(csv_path), "-o", str(figs)]) == 0
    table = capsys.readouterr().out
    assert "ladder GD → flow" in table and "stability gd-" in table
    rows = list(csv.DictReader(csv_path.open()))
    assert rows and all(r["unresolved"] in ("0", "1", "") for r in rows)
    pngs = sorted(figs.glob("*.png"))
    assert pngs and all(p.stat().st_size > 20_000 for p in pngs)
    rep = compare.compare_archive(out)
    if name == "flow-vs-gd-ladder":
        for lad in rep.ladders:
            target = 1.0 if lad.flow_kind == "flow" else 2.0
            assert abs(lad.order - target) <= 0.15, ladder_text(lad)
        assert all(s.verdict == "below" for s in rep.stability)
    else:
        verdicts = {s.solver: s.verdict for s in rep.stability}
        assert verdicts["gd-4"] == "below" and verdicts["gd-12"] == "crossed"
        assert verdicts["gd-16"] == "diverged" and verdicts["gd-32"] == "diverged"
        assert "diverged (status `diverged`)" in table and "catapult" in table


def ladder_text(lad):
    return compare_report.ladder_text(lad)


def test_a_ladder_warns_once_per_member_that_crossed():
    """GD and its twin (perturbation > 0) share each η but sit in two ladders: each ladder
    names its own members' crossings of 2/η, once each (it named every leg at the η before)."""
    from flowsim.analysis.compare import Ladder, Stability, warn_crossed

    def ladder(names):
        return Ladder(run="r", discrete_kind="gd", flow="rock4", flow_kind="flow", measure="weight_gap",
                      discrete=names, etas=np.array([1.1, 0.9]), gaps=np.array([0.2, 0.1]),
                      used=np.array([True, True]), reasons=["", ""], n_times=3)

    lads = [ladder(["gd-1.1", "gd-0.9"]), ladder(["gd-1.1-twin", "gd-0.9-twin"])]
    stab = [Stability(run="r", solver=name, eta=eta, status="ok", source="sharpness", limit=2,
                      verdict="crossed" if eta > 1 else "below")
            for name, eta in [("gd-1.1", 1.1), ("gd-0.9", 0.9), ("gd-1.1-twin", 1.1), ("gd-0.9-twin", 0.9)]]
    warn_crossed(lads, stab)
    assert [lad.warnings for lad in lads] == [["η = 1.1 crossed 2/η: the fit includes a step outside the "
                                               "small-step regime"]] * 2



class _Sharp:
    """A discrete solver's group as `compare._stability` reads it: times and `sharpness`."""

    def __init__(self, t, sharp, status="done"):
        self.name, self.status, self.t, self.series = "gd", status, np.asarray(t, float), {"sharpness": sharp}

    def __contains__(self, key):
        return key in self.series

    def __getitem__(self, key):
        return np.asarray(self.series[key])



EDGE_GD = (np.arange(11.0), [1.0, 1.5, 1.9, 2.1, 1.95, 2.3, 1.7, 2.05, 3.6, 2.0, 1.9])
# edge-of-stability's gd-12 (η·λ rounded, its checkpoint times)
CATAPULT_GD = ([0, 12, 24, 36, 48, 60, 96, 132, 192, 252, 324, 384, 480],
               [2.41, 2.42, 2.37, 2.4, 2.35, 2.37, 2.26, 2.09, 1.88, 1.85, 1.85, 1.86, 1.87])


@pytest.mark.parametrize("t, el, named", [
    # hovering about 2/η to the end, its last checkpoint in a dip (η·λ = 1.9): at the edge of
    # stability (as central-mlp's GD), not a catapult
    (*EDGE_GD, "crossed 2/η at t = 3 and stayed at the edge of stability, back at or above it until t = 9 of 10 "
               "(η·sharpness ≥ 2 at 62 % of the checkpoints from the crossing on; η·λ/limit: mean 1.1, 88 % of "
               "the checkpoints in [0.75, 1.25])"),
    # above the limit through t = 132, then below it to t = 480: a catapult, though most of
    # its checkpoints from the crossing on are above the limit
    # (named by the time, as its stat says: not by its checkpoints' 62 %, crowded in the spike)
    (*CATAPULT_GD, "crossed 2/η at t = 0 and came back below it after t = 132, to the end at t = 480: a catapult "
                   "(below 2/η for the last 72 % of the time from the crossing on)")])
def test_a_gd_that_crossed_is_named_by_how_it_went_on(t, el, named):
    """A last checkpoint at or above 2/η in the later half of the time from the crossing to
    the end names the run at the edge of stability, whatever its last checkpoint; an earlier
    one, a catapult. The share of checkpoints above the limit (numpy's) cannot tell them apart."""
    eta = 0.1
    t, el = np.asarray(t, float), np.asarray(el)
    s = compare._stability(types.SimpleNamespace(name="r"), _Sharp(t, el / eta),
                           DescentPreset(name="gd", kind="gd", learning_rate=eta))
    cross = int(np.flatnonzero(el >= 2)[0])
    share = np.mean(el[cross:] >= 2)
    assert s.verdict == "crossed" and s.t_judged == t[-1] and s.over_share == pytest.approx(share, rel=1e-15)
    assert share > 0.5
    text = s.text()
    assert named in text
    assert s.at_edge == ("catapult" not in text)


def test_an_adam_leg_is_judged_by_its_preconditioned_sharpness_against_38_over_eta():
    """Adam at β₁ = 0.9: its edge is (2 + 2β₁)/((1 − β₁)η) = 38/η, and its series the
    preconditioned sharpness; EDGE_GD's trace scaled by 19 reaches it at t = 3 and stays, with
    r = η·λ/38 of mean 1.1 and 7 of 8 checkpoints in [0.75, 1.25] from then on."""
    eta = 0.1
    t, el = np.asarray(EDGE_GD[0]), 19 * np.asarray(EDGE_GD[1])
    view = _Sharp(t, el / eta)
    view.series = {"preconditioned_sharpness": view.series.pop("sharpness")}
    s = compare._stability(types.SimpleNamespace(name="r"), view,
                           DescentPreset(name="adam", kind="adam", learning_rate=eta, beta1=0.9))
    assert (s.source, s.limit, s.verdict, s.t_cross) == ("preconditioned_sharpness", pytest.approx(38.0), "crossed", 3)
    assert s.at_edge and s.edge_mean == pytest.approx(1.1) and s.edge_band == pytest.approx(7 / 8)
    assert "crossed 38/η at t = 3 and stayed at the edge of stability" in s.text()
    assert "η·preconditioned sharpness" in s.text()


def test_a_gd_that_crosses_at_its_last_checkpoint_is_named_neither_way():
    """cohen-scale-quick's GD at η = 0.02 reaches 2/η at t = 40, its last checkpoint: one
    checkpoint says nothing of staying at the edge or coming back."""
    eta, t = 0.02, np.arange(0.0, 44.0, 4.0)
    el = np.asarray([0.545, 0.592, 0.716, 0.833, 0.953, 1.089, 1.245, 1.424, 1.616, 1.811, 2.002])
    s = compare._stability(types.SimpleNamespace(name="r"), _Sharp(t, el / eta),
                           DescentPreset(name="gd", kind="gd", learning_rate=eta))
    assert s.verdict == "crossed" and s.t_cross == s.t_judged == 40.0
    assert s.text().startswith("crossed 2/η at t = 40, its last recorded checkpoint: it reaches the limit at the "
                               "end, how it goes on is not recorded, judged at its 11 recorded checkpoints: "
                               "max η·sharpness = 2, final 2"), s.text()
    assert "stayed" not in s.text() and "catapult" not in s.text()



@pytest.mark.slow
def test_an_rmsprop_flow_at_another_step_says_why_nothing_pairs(tmp_path):
    """RMSProp at η = 0.001 beside its stable flow at η = 0.002 (no partner of its step, as an
    rmsprop-central leg would be): `flowsim compare` exits 1 naming each leg's method and η,
    where it said no pair had 'a checkpoint at a common time' (each flow records every
    discrete leg's times)."""
    from helpers import call_cli

    (tmp_path / "apart.toml").write_text(
        'name = "apart"\n[data]\nkind = "random-labels"\nn = 16\nd = 4\n[model]\nkind = "mlp"\nwidths = [8]\n'
        '[loss]\nkind = "mse"\n[run]\nt_end = 0.004\nobserve = ["loss"]\nsolvers = [\n'
        '  { name = "rmsprop", kind = "rmsprop", learning_rate = 0.001 },\n'
        '  { name = "sf", kind = "rmsprop-flow", learning_rate = 0.002 },\n]\n')
    out = tmp_path / "apart.h5"
    assert main(["run", str(tmp_path / "apart.toml"), "-o", str(out), "-q"]) == 0
    rc, text, err = call_cli("compare", out)
    assert rc == 1 and text == ""
    assert (f"{out}: nothing to compare: no flow is of a discrete leg's method and step (a flow of GD's or of an "
            "adaptive method's pairs with that method at its own learning_rate): discrete rmsprop (RMSProp, "
            "η = 0.001); flow sf (RMSProp flow, η = 0.002)") in err
