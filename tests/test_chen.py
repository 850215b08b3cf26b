"""Chen, Vanden-Eijnden & Bruna (ICLR 2022): embedded models, scalings, Gram overlay,
scenarios and their claims (flowsim/models/embedded.py, flowsim/plots/chen.py)."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import archive
from flowsim.plots import chen as plots_chen
from flowsim.nn.activations import activation as act
from flowsim.run.build import build_run
from flowsim.config import ScenarioError, load_scenario, loads_scenario
from flowsim.models.embedded import embed
from flowsim.nn.ntg import jacobian_ntg
from flowsim.config import scenarios_dir
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
EMBEDDINGS = ["identity", "quadratic", "random-features"]
SCALINGS = ["theirs", "ntk", "mean-field"]


def scenario_text(embedding="random-features", scaling="theirs", *, activation="relu", m=12, n=7, d=4,
                  data='kind = "xor-noise"', extra_model="", run_extra=""):
    feats = "features = 9\n" if embedding == "random-features" else ""
    return f"""
seeds = [3]
[data]
{data}
n = {n}
d = {d}
n_test = 5
[model]
kind = "embedded"
embedding = "{embedding}"
{feats}chen_scaling = "{scaling}"
width = {m}
activation = "{activation}"
c_hat = 1.7
{extra_model}
[run]
t_end = 1.0
observe = ["loss", "test_loss", "test_accuracy", "hidden"]
{run_extra}
"""


def built(embedding, scaling, **kw):
    s = loads_scenario(scenario_text(embedding, scaling, **kw))
    r = s.runs[0]
    return r.config, build_run(r.settings, r.seed)


# ------------------------------------------------------------------------ models


def check_ntg(b):
    net, params, X = b.problem.net, b.params, b.problem.X
    closed = net.ntg(params, X)
    oracle = jacobian_ntg(net, params, X)
    assert float(jnp.max(jnp.abs(closed - oracle))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(oracle))))


def direct_model(scaling, W, c, phi, activation):
    """The paper's formulas (eqs. 2-3 and Table 1) written out, with W acting on φ(x)."""
    m, D = W.shape
    s_f = 1 / math.sqrt(m) if scaling == "ntk" else 1 / m
    s_h = 1 / D if scaling == "mean-field" else 1 / math.sqrt(D)
    h = s_h * phi @ W.T                       # h_i(x) = s_h Σ_j W_ij φ_j(x)
    return s_f * act(activation)(h) @ c       # f(x) = s_f Σ_i c_i σ(h_i(x))


@pytest.mark.slow
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("embedding", EMBEDDINGS)
def test_scalings_match_the_papers_formulas_and_ntg_matches_autodiff(embedding, scaling):
    cfg, b = built(embedding, scaling)
    check_ntg(b)   # closed form on φ̃(X) vs the Jacobian contraction, ≤ 1e-12
    m = cfg["model"]["width"]
    data = b.dataset
    z = b.init.get("z")
    phi = jnp.asarray(embed(embedding, data.X_train, z=z))
    phi_test = jnp.asarray(embed(embedding, data.X_test, z=z))
    if embedding == "random-features":   # φ_j(x) = σ(z_j·x/√d) with z_j ~ N(0, I_d)
        d = data.X_train.shape[1]
        assert np.allclose(phi, np.maximum(data.X_train @ z.T / math.sqrt(d), 0))
        assert z.shape == (9, d)
    c = 1.7 * b.problem.net.a[:, 0]         # c_i = ±ĉ
    W = b.params["W"]
    f = direct_model(scaling, W, c, phi, "relu")
    assert np.allclose(b.problem.net(b.params, b.problem.X)[:, 0], f, rtol=1e-13, atol=1e-15)
    assert np.allclose(b.problem.net(b.params, b.problem.X_test)[:, 0],
                       direct_model(scaling, W, c, phi_test, "relu"), rtol=1e-13, atol=1e-15)
    # their update W ← W − r δ ∂L/∂W: r = m (theirs), 1 (NTK), m² (MF)
    rate = {"theirs": m, "ntk": 1, "mean-field": m**2}[scaling]
    y = jnp.asarray(data.y_train[:, 0])

    def loss(W):
        return 0.5 * jnp.sum((direct_model(scaling, W, c, phi, "relu") - y) ** 2)

    assert b.problem.rate == rate
    assert np.allclose(b.problem.velocity(b.params)["W"], -rate * jax.grad(loss)(W), rtol=1e-12, atol=1e-14)
    if scaling == "ntk":  # symmetrised initialisation: f₀ ≡ 0 (node pairs, opposite signs)
        assert float(jnp.max(jnp.abs(f))) < 1e-14
        assert np.array_equal(W[: m // 2], W[m // 2:])
        assert np.array_equal(c[: m // 2], -c[m // 2:])


@pytest.mark.parametrize("embedding", EMBEDDINGS)
def test_gram_matrix_and_overlay_constant(embedding):
    _, b = built(embedding, "theirs", n=6, d=4, data='kind = "random-labels"')
    phi = embed(embedding, b.dataset.X_train, z=b.init.get("z"))
    G = phi @ phi.T / phi.shape[1]                       # G = φ(X)φ(X)ᵀ/D
    assert float(b.init["G_lambda_min"]) == pytest.approx(np.linalg.eigvalsh(G)[0], rel=1e-10, abs=1e-13)
    assert float(b.init["embedding_dim"]) == {"identity": 4, "quadratic": 16, "random-features": 9}[embedding]


@pytest.mark.slow
@pytest.mark.parametrize("scaling", SCALINGS)
def test_overlay_rate_is_the_initial_pl_rate(scaling):
    """At t = 0, dL/dt = −rate ‖∇L‖² ≤ −r ĉ² λ_min(G) L_0 with r = chen_r (the
    paper's eqs. 14-16 with η_0 = min_a mean_i σ'(h_i(x_a))²). n ≤ d so λ_min(G) > 0."""
    _, b = built("identity", scaling, activation="tanh", n=5, d=8, m=40, data='kind = "random-labels"')
    p, w = b.problem, b.params
    g = p.grad(w)["W"]
    dLdt = -p.rate * float(jnp.sum(g**2))
    lam, r, c = (float(b.init[k]) for k in ("G_lambda_min", "chen_r", "c_hat"))
    assert lam > 0
    assert dLdt <= -r * c**2 * lam * float(b.init["loss0"]) * (1 - 1e-12)
    if scaling != "mean-field":
        assert float(b.init["chen_r"]) == pytest.approx(2 * float(b.init["eta0"]))


def test_embedding_weights_archived_and_seeded():
    _, b1 = built("random-features", "theirs")
    _, b2 = built("random-features", "theirs")
    assert np.array_equal(b1.init["z"], b2.init["z"])
    s = loads_scenario(scenario_text().replace("seeds = [3]", "seeds = [4]"))
    b3 = build_run(s.runs[0].settings, 4)
    assert not np.allclose(b1.init["z"], b3.init["z"])


# ------------------------------------------------------------------------ schema


def test_schema_defaults_and_kinds():
    r = loads_scenario(scenario_text()).resolved["model"]
    assert r == {"kind": "embedded", "width": 12, "activation": "relu", "init_std": 1.0, "zeroed": False,
                 "embedding": "random-features", "features": 9, "chen_scaling": "theirs", "c_hat": 1.7}
    text = scenario_text().replace("features = 9\n", "")
    assert loads_scenario(text).resolved["model"]["features"] == 12   # D = m by default
    shallow = loads_scenario(scenario_text(), overrides=["model.kind=shallow"]).resolved["model"]
    assert shallow["kind"] == "shallow" and "chen_scaling" not in shallow and shallow["scaling"] == {"kind": "ntk"}


@pytest.mark.parametrize("edit, key, words", [
    (dict(embedding="identity", extra_model="features = 10"), "model.features", "does not apply"),
    (dict(extra_model='chen_scaling2 = "x"'), "model.chen_scaling2", "unknown key"),
    (dict(extra_model="[model.scaling]\nkind = \"ntk\""), "model.scaling", "another kind"),
    (dict(scaling="ntk", m=11), "model.width", "odd"),
    (dict(scaling="lazy"), "model.chen_scaling", '"theirs", "ntk", "mean-field"'),
    (dict(embedding="cubic"), "model.embedding", "random-features"),
    (dict(extra_model="c_hat = 0"), "model.c_hat", "> 0"),
])
def test_schema_errors_name_the_key(edit, key, words):
    text = scenario_text(**edit)
    if "c_hat = 0" in text:
        text = text.replace("c_hat = 1.7\n", "")
    with pytest.raises(ScenarioError) as e:
        loads_scenario(text)
    assert e.value.key == key and words in str(e.value)


def test_shallow_rejects_chen_keys():
    text = '[data]\nkind = "xor-noise"\n[model]\nwidth = 4\nchen_scaling = "ntk"\n[run]\nt_end = 1.0\n'
    with pytest.raises(ScenarioError, match="another kind") as e:
        loads_scenario(text)
    assert e.value.key == "model.chen_scaling"


@pytest.mark.parametrize("name", ["chen-exp1", "chen-exp2", "chen-exp3"])
def test_paper_scale_scenarios_validate(name):
    s = load_scenario(scenarios_dir() / f"{name}.toml")
    assert s.resolved["model"]["kind"] == "embedded"
    assert s.resolved["plot"]["figure"] == name
    assert s.resolved["run"]["t_end"] == 50000.0
    assert "gd-lr1" in [p["name"] for p in s.resolved["run"]["solvers"]]


# ------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_plot_dispatch_tiny(tmp_path):
    """A tiny exp3-layout run goes through `flowsim run` and `flowsim plot`."""
    text = scenario_text(m=6, n=6, run_extra='solvers = ["gd-lr1"]\n[plot]\nfigure = "chen-exp3"\n'
                         '[sweep]\n"model.chen_scaling" = ["theirs", "ntk"]')
    (tmp_path / "tiny.toml").write_text(text)
    run_cli("run", "tiny.toml", "-o", "tiny.h5", "-q", cwd=tmp_path)
    out = run_cli("plot", "tiny.h5", "-o", "figs", cwd=tmp_path).split()
    assert sorted(Path(p).name for p in out) == ["tiny-exp3.pdf", "tiny-exp3.png"]
    assert all(Path(tmp_path, p).stat().st_size > 5000 for p in out)


def run_quick(name, tmp_path):
    run_cli("run", scenarios_dir() / f"{name}.toml", "-o", tmp_path / f"{name}.h5", "-q")
    paths = run_cli("plot", tmp_path / f"{name}.h5", "-o", tmp_path / "figs").split()
    assert len(paths) == 2
    with archive.open(tmp_path / f"{name}.h5") as a:
        runs = plots_chen.read_runs(a)
        assert all(s["status"] == "done" for r in runs for s in r.solvers.values())
        return runs


@pytest.mark.slow
def test_exp1_quick_rate_larger_below_d(tmp_path):
    """Chen exp. 1: the fitted linear rate of log L is larger for every n ≤ d than for
    every n > d (both for GD with δ = 1 and for the exact flow)."""
    runs = run_quick("chen-exp1-quick", tmp_path)
    d = runs[0].params.data.d
    for solver, rates in plots_chen.exp1_summary(runs).items():
        below = [r for n, r in rates.items() if n <= d]
        above = [r for n, r in rates.items() if n > d]
        assert below and above
        assert min(below) > max(above), (solver, rates)


@pytest.mark.slow
def test_exp2_quick_embedding_generalises_better(tmp_path):
    runs = run_quick("chen-exp2-quick", tmp_path)
    summary = plots_chen.exp2_summary(runs)
    assert set(summary) == {"filippov16", "gd-lr0.1"}      # the exact flow through the kinks, and GD
    for solver, per in summary.items():
        n = max(per["quadratic"])
        assert per["quadratic"][n][0] < per["identity"][n][0], (solver, per)


@pytest.mark.slow
def test_exp3_quick_feature_learning_and_test_error(tmp_path):
    runs = run_quick("chen-exp3-quick", tmp_path)
    for solver, per in plots_chen.exp3_summary(runs).items():
        ntk = per["ntk"]["movement"]
        assert per["theirs"]["movement"] > 5 * ntk, (solver, per)
        assert per["mean-field"]["movement"] > 5 * ntk, (solver, per)
        assert per["theirs"]["test_error"] < min(per["ntk"]["test_error"], per["mean-field"]["test_error"]), \
            (solver, per)
