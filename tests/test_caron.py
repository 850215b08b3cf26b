"""Caron et al. (2023) analyses and scenarios: pruning, transfer, PCA, lr transfer.

Quick tests check the analyses against brute-force oracles on tiny problems and the
archive/CLI plumbing; the `slow` tests run each `-quick` scenario end to end through the
CLI and assert the paper's qualitative claim on the archive.
"""

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim.archive as archive
from flowsim.nn.activations import activation
from flowsim.analysis import pca, prune, transfer
from flowsim.analysis.compare import match_times
from flowsim.config import ScenarioError, loads_scenario
from tests.conftest import make_problem
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "scenarios"


# ------------------------------------------------------------------------ oracles


def _brute_predict(net, params, X, keep):
    """The network rebuilt from the kept nodes only, one output at a time, in numpy."""
    W = np.asarray(params["W"])[keep]
    a = np.asarray(net.output_weights(params))[keep]
    c = np.asarray(net.c)[keep]
    sig = activation(net.activation)
    X = np.asarray(X)
    out = np.asarray(sig(jnp.asarray(X @ W.T / math.sqrt(X.shape[1])))) * c @ a
    if net.ref is not None:
        W0 = np.asarray(net.ref["W"])[keep]
        out = out - np.asarray(sig(jnp.asarray(X @ W0.T / math.sqrt(X.shape[1])))) * c @ a
    return out


@pytest.mark.parametrize("outputs,zeroed,loss", [(1, False, "half-sse"), (3, True, "mse"),
                                                 (3, False, "cross-entropy")])
@pytest.mark.slow
def test_prune_curve_matches_recomputed_network(outputs, zeroed, loss):
    prob, p0 = make_problem(n=12, d=4, m=9, outputs=outputs, zeroed=zeroed, loss=loss, seed=3)
    # move the weights so that importance λ‖w‖² differs from the init ordering
    params = {"W": p0["W"] + 0.3 * jax.random.normal(jax.random.PRNGKey(1), p0["W"].shape)}
    net = prob.net
    counts = np.arange(0, 10)
    res = prune.prune_curve(net, params, prob.X, prob.y, prob.X_test, prob.y_test, loss_kind=loss,
                            counts=counts)
    assert res["train_risk"].shape == (2, 10)
    for i, kind in enumerate(prune.IMPORTANCES):
        score = prune.importance(net, params, kind)
        order = np.argsort(score, kind="stable")
        for r in counts:
            keep = np.ones(9, bool)
            keep[order[:r]] = False
            for split, X, y in (("train", prob.X, prob.y), ("test", prob.X_test, prob.y_test)):
                f = _brute_predict(net, params, X, keep)
                y = np.asarray(y)
                if loss == "cross-entropy":
                    z = f - f.max(1, keepdims=True)
                    want = -np.mean(np.sum(y * (z - np.log(np.exp(z).sum(1, keepdims=True))), 1))
                else:
                    want = np.mean(np.sum((y - f) ** 2, axis=1))
                np.testing.assert_allclose(res[f"{split}_risk"][i, r], want, rtol=1e-10, atol=1e-12)
                if outputs > 1:
                    acc = np.mean(np.argmax(f, 1) == np.argmax(y, 1))
                    assert res[f"{split}_accuracy"][i, r] == pytest.approx(acc)


def test_importance_kinds():
    prob, p = make_problem(m=7, d=3, n=5)
    lam = np.asarray(prob.net.lam)
    np.testing.assert_allclose(prune.importance(prob.net, p, "weight"), lam * np.sum(np.asarray(p["W"]) ** 2, 1))
    np.testing.assert_allclose(prune.importance(prob.net, p, "lambda"), lam)  # a = ±1


def test_prune_counts_cover_zero_to_all():
    c = prune.prune_counts(2000, 41)
    assert c[0] == 0 and c[-1] == 2000 and np.all(np.diff(c) > 0)


def _hand_loop(F, y, p, steps, lr):
    """Full-batch GD on mean((relu(F W1ᵀ + b1) W2ᵀ + b2 − y)²), gradients by hand."""
    W1, b1, W2, b2 = (np.array(p[k]) for k in ("W1", "b1", "W2", "b2"))
    N, q = y.shape
    for _ in range(steps):
        z = F @ W1.T + b1
        h = np.maximum(z, 0)
        out = h @ W2.T + b2
        g_out = 2 * (out - y) / (N * q)
        gW2, gb2 = g_out.T @ h, g_out.sum(0)
        g_z = (g_out @ W2) * (z > 0)
        gW1, gb1 = g_z.T @ F, g_z.sum(0)
        W1, b1, W2, b2 = W1 - lr * gW1, b1 - lr * gb1, W2 - lr * gW2, b2 - lr * gb2
    return W1, b1, W2, b2


@pytest.mark.slow
def test_transfer_network_matches_hand_written_gd_and_padding_is_exact():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(30, 6))
    y = rng.normal(size=(30, 2))
    k, k_max = 3, 6
    p = transfer.init_external(jax.random.PRNGKey(0), k_max, jnp.asarray(k), 8, 2)
    assert np.all(np.asarray(p["W1"])[:, k:] == 0)
    assert np.abs(np.asarray(p["W1"])[:, :k]).max() <= 1 / math.sqrt(k)
    mask = (np.arange(k_max) < k).astype(float)
    got = transfer.train_external(p, jnp.asarray(F * mask), jnp.asarray(y), steps=7, learning_rate=0.05,
                                  cross_entropy=False)
    small = {"W1": np.asarray(p["W1"])[:, :k], "b1": p["b1"], "W2": p["W2"], "b2": p["b2"]}
    W1, b1, W2, b2 = _hand_loop(F[:, :k], y, small, 7, 0.05)
    np.testing.assert_allclose(np.asarray(got["W1"])[:, :k], W1, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(np.asarray(got["W1"])[:, k:], 0.0)   # padded columns never move
    for name, want in (("b1", b1), ("W2", W2), ("b2", b2)):
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=1e-10, atol=1e-13)


@pytest.mark.slow
def test_transfer_curve_prefers_informative_features():
    rng = np.random.default_rng(1)
    F = rng.normal(size=(200, 10))
    y = F[:, [0]] + 0.1 * rng.normal(size=(200, 1))
    score = np.arange(10.0)[::-1]          # feature 0 is the most important
    good = transfer.transfer_curve(F, y, score, [1, 3], hidden=16, steps=300, learning_rate=0.1)
    bad = transfer.transfer_curve(F, y, -score, [1], hidden=16, steps=300, learning_rate=0.1)
    assert good["test_risk"][0] < 0.1 < bad["test_risk"][0]


def test_pca_scores_match_eigendecomposition():
    rng = np.random.default_rng(2)
    F = rng.normal(size=(50, 4)) @ np.diag([3.0, 2.0, 0.5, 0.1])
    s, ratio = pca.pca_scores(F)
    C = np.cov(F.T, bias=True)
    vals, vecs = np.linalg.eigh(C)
    vals, vecs = vals[::-1], vecs[:, ::-1]
    np.testing.assert_allclose(ratio, vals[:2] / vals.sum(), rtol=1e-10)
    np.testing.assert_allclose(np.abs(s), np.abs((F - F.mean(0)) @ vecs[:, :2]), rtol=1e-8, atol=1e-10)
    labels = (F[:, 0] > 0).astype(int)
    assert pca.class_separation(s, labels) > pca.class_separation(s, rng.permutation(labels))


# ------------------------------------------------------------------------ schema


BASE = """
name = "t"
[data]
kind = "sphere-sine"
n = 8
d = 3
[model]
width = 16
[run]
t_end = 1.0
"""


def test_analysis_table_resolves_shorthands():
    s = loads_scenario(BASE + "[analysis]\nprune = true\ntransfer = { k = [1, 2] }\n", path="t.toml")
    a = s.resolved["analysis"]
    assert a["prune"] == {"enabled": True, "points": 41, "importance": ["weight", "lambda"]}
    assert a["transfer"]["k"] == [1, 2] and a["transfer"]["learning_rate"] == 0.1
    assert a["pca"]["enabled"] is False
    assert "analysis" not in loads_scenario(BASE, path="t.toml").resolved


def test_analysis_table_errors_name_the_key():
    with pytest.raises(ScenarioError, match="analysis.prune.importance"):
        loads_scenario(BASE + "[analysis]\nprune = { importance = [\"weights\"] }\n", path="t.toml")


# ------------------------------------------------------------------------ CLI plumbing


@pytest.mark.slow
def test_driver_analyses_equal_flowsim_analyze(tmp_path):
    """Analyses stored by the driver (in-memory final weights) equal those recomputed by
    `flowsim analyze` from the archived checkpoint; `flowsim plot` draws their figures."""
    toml = tmp_path / "a.toml"
    toml.write_text("""
name = "tiny-caron"
seeds = [0, 1]
[data]
kind = "digits"
n = 60
n_test = 40
[model]
width = 24
activation = "swish"
[loss]
kind = "mse"
[run]
t_end = 20.0
checkpoints = { count = 2 }
solvers = ["gd-lr1"]
observe = ["loss", "test_loss", "accuracy", "test_accuracy"]
[sweep]
"model.scaling" = [{ kind = "ntk" }, { kind = "asymmetric", gamma = 0.0, alpha = 0.4 }]
[analysis]
prune = { points = 5 }
transfer = { k = [1, 4], hidden = 8, steps = 20 }
pca = true
""")
    out = tmp_path / "a.h5"
    run_cli("run", toml, "-o", out, "-q")
    with archive.open(out) as a:
        before = {r.name: r.solvers["gd-lr1"].analysis for r in a.runs.values()}
    assert set(before["p0-seed0"]) == {"prune", "transfer", "pca"}
    arr, attrs = before["p1-seed1"]["prune"]
    assert arr["test_accuracy"].shape == (2, len(arr["counts"]))
    assert json.loads(attrs["importance"]) == ["weight", "lambda"]
    run_cli("analyze", out)
    with archive.open(out) as a:
        for r in a.runs.values():
            after = r.solvers["gd-lr1"].analysis
            for name, (arrays, _) in before[r.name].items():
                for k, v in arrays.items():
                    np.testing.assert_allclose(after[name][0][k], v, rtol=1e-9, atol=1e-12, err_msg=f"{name}/{k}")
    plotted = run_cli("plot", out, "-o", tmp_path / "fig")
    for tag in ("prune", "transfer", "pca", "accuracy"):
        assert f"tiny-caron-{tag}.png" in plotted


# ------------------------------------------------------------------------ quick scenarios (slow)


def _run_quick(tmp_path, name):
    out = tmp_path / f"{name}.h5"
    run_cli("run", SCEN / f"{name}.toml", "-o", out, "-q")
    return out


def _by_point(path, solver=None):
    """point -> list of (run view data) dicts: params, init, series, analysis (per seed)."""
    pts = {}
    with archive.open(path) as a:
        for r in a.runs.values():
            for s, v in r.solvers.items():
                if solver and s != solver:
                    continue
                sc = r.params["model"]["scaling"]
                gamma = 1.0 if sc["kind"] == "ntk" else sc.get("gamma", float("nan"))
                pts.setdefault((r.point, s), []).append({
                    "scaling": sc, "gamma": gamma, "init": r.init, "status": v.status, "t": v.t,
                    "series": {k: v[k] for k in v.series_names}, "analysis": v.analysis})
    return pts


def _mean(items, fn):
    return float(np.mean([fn(x) for x in items]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["caron-fig1-quick", "caron-fig1-relu-quick"])
def test_fig1_quick_claims(tmp_path, name):
    pts = _by_point(_run_quick(tmp_path, name))
    flow = "filippov" if name == "caron-fig1-relu-quick" else "tsit5"   # the exact flow through the kinks
    solvers = sorted({s for _, s in pts})
    assert solvers == sorted([flow, "gd-lr1"])
    for p in range(4):   # the flow and GD (η = 1) agree wherever the loss is above 1e-6 L0
        for f, g in zip(pts[(p, flow)], pts[(p, "gd-lr1")]):
            ig, jf = match_times(g["t"], f["t"])
            assert len(ig) == len(g["t"])   # the flow is observed at every GD checkpoint
            lf, lg = f["series"]["loss"][jf], g["series"]["loss"][ig]
            seen = lg > 1e-6 * g["init"]["loss0"]
            assert np.max(np.abs(lf[seen] - lg[seen]) / lg[seen]) < 0.1
    for solver in solvers:
        rows = [pts[(p, solver)] for p in range(4)]   # ntk, (.5,.7), (.5,.5), (0,.4)
        for items in rows:
            assert all(x["status"] == "done" for x in items)
            # eig_min Θ̂_t ≥ γ κ_n / 4 at every checkpoint
            for x in items:
                assert x["series"]["ntg_eig"][:, 0].min() >= x["gamma"] * float(x["init"]["kappa_n"]) / 4
        for items in rows[:3]:  # γ > 0 reaches ≈ 0 training error
            assert _mean(items, lambda x: x["series"]["loss"][-1] / x["init"]["loss0"]) < 1e-3
        wc = [_mean(i, lambda x: x["series"]["weight_change"][-1].max()) for i in rows]
        ntg = [_mean(i, lambda x: x["series"]["ntg_change_spectral"][-1]) for i in rows]
        assert wc == sorted(wc) and ntg == sorted(ntg), (wc, ntg)   # grow as γ, α shrink
        assert wc[-1] > 3 * wc[0] and ntg[-1] > 3 * ntg[0]


def _prune_at(items, key, frac, imp=0):
    def one(x):
        arr = x["analysis"]["prune"][0]
        j = int(np.argmin(np.abs(arr["counts"] / arr["counts"][-1] - frac)))
        return arr[key][imp, j]
    return _mean(items, one)


@pytest.mark.slow
@pytest.mark.parametrize("name, few", [("concrete", slice(0, 2)), ("energy", slice(0, 2)),
                                       ("plant", slice(0, 2)), ("airfoil", slice(2, 3))])
def test_uci_quick_pruning_and_transfer(tmp_path, name, few):
    pts = _by_point(_run_quick(tmp_path, f"caron-uci-{name}-quick"))
    rows = [pts[(p, "gd-lr1")] for p in range(4)]
    # smaller γ prunes best: test risk with 90 % of the nodes removed
    pr = [_prune_at(i, "test_risk", 0.9) for i in rows]
    assert pr[3] < pr[1] < pr[0] and pr[2] < pr[0], pr
    # smaller γ transfers better with few features: k = 1, 2 (airfoil: k = 5, see its description)
    tr = [_mean(i, lambda x: x["analysis"]["transfer"][0]["test_risk"][0, few].mean()) for i in rows]
    assert tr[3] < tr[0], tr
    wc = [_mean(i, lambda x: x["series"]["weight_change"][-1].max()) for i in rows]
    assert wc[0] < wc[1] < wc[3], wc


@pytest.mark.slow
def test_digits_quick_pruning_transfer_pca(tmp_path):
    pts = _by_point(_run_quick(tmp_path, "caron-digits-quick"))
    rows = [pts[(p, "gd-lr1")] for p in range(4)]
    acc = [_prune_at(i, "test_accuracy", 0.9) for i in rows]
    assert acc[3] > acc[0] and acc[1] > acc[0], acc
    # transfer with few features (k <= 5): smaller γ has the lower external test risk
    tr = [_mean(i, lambda x: x["analysis"]["transfer"][0]["test_risk"][0, :3].mean()) for i in rows]
    assert tr[3] < tr[0], tr
    # PCA (appendix M): NTK features stay as they started (between-class share of the first two
    # components moves < 0.1), but on optdigits those random features already separate the
    # classes (> 0.5), so the asymmetric scalings do not separate more (see the description)
    assert all(x["analysis"]["pca"][0]["scores"].shape[1] == 2 for i in rows for x in i)
    for x in rows[0]:
        start, end = x["analysis"]["pca"][0]["separation"]
        assert min(start, end) > 0.5 and abs(end - start) < 0.1, (start, end)


@pytest.mark.slow
def test_cifar_quick_pruning(tmp_path):
    pts = _by_point(_run_quick(tmp_path, "caron-cifar-quick"))
    rows = [pts[(p, "sgd-lr5")] for p in range(4)]
    assert all(x["status"] == "done" for i in rows for x in i)
    acc = [_prune_at(i, "test_accuracy", 0.9) for i in rows]
    assert acc[3] > acc[0], acc


@pytest.mark.slow
def test_single_relu_quick_generalisation(tmp_path):
    pts = _by_point(_run_quick(tmp_path, "caron-single-relu-quick"))
    rows = [pts[(p, "gd-lr1")] for p in range(5)]   # ntk, 3 asymmetric, standard
    for items in rows:   # every model fits the training set
        assert _mean(items, lambda x: x["series"]["loss"][-1] / x["series"]["loss"][0]) < 1e-3
    test = [_mean(i, lambda x: x["series"]["test_loss"][-1]) for i in rows]
    # every asymmetric scaling generalises better than NTK; γ = 0 better than the standard init
    assert max(test[1:4]) < test[0] and test[3] < test[4], test


@pytest.mark.slow
def test_lr_transfer_quick(tmp_path):
    from flowsim.plots.caron import lr_transfer_table

    with archive.open(_run_quick(tmp_path, "caron-lr-transfer-quick")) as a:
        table = lr_transfer_table(a)
    best = {}
    for (kind, width), row in table.items():
        lrs = sorted(row)
        losses = [np.nanmean(row[lr]) if np.isfinite(row[lr]).any() else np.inf for lr in lrs]
        best.setdefault(kind, []).append(np.log10(lrs[int(np.argmin(losses))]))
    spread = {k: max(v) - min(v) for k, v in best.items()}
    std = spread.pop("standard")
    assert std >= max(spread.values()), (std, spread)
