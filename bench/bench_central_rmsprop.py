"""RMSProp's central flow on central-rmsprop against an independent reference; writes
bench/results/central-rmsprop.md.

    python bench/bench_central_rmsprop.py ARCHIVE [--steps 600] [--substeps 4 8 16]

ARCHIVE: `flowsim run central-rmsprop -o ARCHIVE` (its legs rmsprop, rmsprop-twin,
rmsprop-flow, rmsprop-central; rows every step). The reference is the JAX central-flow
package's algorithm (github alex-damian/central_flows_jax, `central_flow_substep`), corrected
as issue 55 says and written here from its equations, not from flowsim's field: forward Euler
in steps τ with `s` substeps per RMSProp step, each substep
- the dense Hessian H of L̃ = rate·L, P = (√ν + ε)/η, the generalized eigenpairs
  H u = e P u (UᵀPU = I; e the effective eigenvalues) by a dense eigh;
- the discretisation-aware stability problem of the package: A = Uᵀ(2P − H)U = 2 − diag e,
  α = A + dt·dA/dt|_stable, β = dt·∂(dA/dt)/∂X, X ⪰ 0, α + β[X] ⪰ 0, ⟨X, α + β[X]⟩ = 0, on the
  directions with e ≥ 2·THRESHOLD (flowsim's candidates): one at a time here (the closed form
  X = max(0, −α/β)); a substep with two is counted and reported;
- dw/dτ = −P⁻¹(g + ½ Σ_ab X_ab ∇(u_aᵀHu_b)), dν/dτ = (1 − β₂)/β₂ (g² + diag(H U X Uᵀ H) − ν):
  the gradient's covariance (the package adds diag(U X Uᵀ)), X's off-diagonal entries with
  weight 2 (immaterial with one held).
Euler is first order: the reference at step N is Richardson's 2·θ_16 − θ_8 (the ratio of
‖θ_4 − θ_8‖ to ‖θ_8 − θ_16‖, about 2, checks the order).
Figures: ‖θ_central − θ_ref‖ / ‖θ_ref‖ and / ‖θ_ref − θ_0‖ at step N (the "Done when"
target: 1e-3 relative); the predicted loss against RMSProp's loss smoothed by a Gaussian of
σ = 50 steps after the onset (mean and max relative error; target 5 %); the central flow's
cost in gradient-equivalents per RMSProp step (gradients + Hessian-vector products +
third-derivative products; target ≤ 20); the distances of RMSProp to its central and stable
flows (the twin's distance: the noise floor), at steps 400, 600, 1 000.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy.ndimage import gaussian_filter1d

from bench_core import ROOT, Table, fmt, publish, ready  # noqa: E402
import flowsim
from flowsim.config import load_scenario
from flowsim.run.build import build_run

SCENARIO = "central-rmsprop"
K = 5                  # eigenpairs the reference computes (the package's example's k)
THRESHOLD = 0.9        # e ≥ 2·THRESHOLD enters the stability problem (the leg's track_threshold)
SMOOTH_STEPS = 50
AT = (400, 600, 1000)


def reference(problem, p0, eta: float, beta2: float, eps: float, steps: int, substeps: int):
    """The corrected package algorithm by forward Euler (the module's docstring): θ after
    `steps` RMSProp steps, and the substeps where two directions were candidates and unheld."""
    w0, unravel = jax.flatten_util.ravel_pytree(p0)
    loss = lambda w: problem.rate * problem.loss(unravel(w))
    grad = jax.grad(loss)
    c, dt = (1 - beta2) / beta2, 1.0 / substeps

    def substep(carry, _):
        w, nu, bad = carry
        g = grad(w)
        H = jax.hessian(loss)(w)
        P = (jnp.sqrt(nu) + eps) / eta
        e, V = jnp.linalg.eigh(H / jnp.sqrt(P[:, None] * P[None, :]))
        e, U = e[::-1][:K], (V[:, ::-1][:, :K]) / jnp.sqrt(P)[:, None]
        HU = H @ U
        dP = 1 / (2 * eta * jnp.sqrt(nu))                           # ∂P/∂ν
        # the top direction only (one candidate): its third-derivative vector and rates
        u = U[:, 0]
        g00 = jax.grad(lambda v: u @ jax.jvp(grad, (v,), (u,))[1])(w)
        dw_stable, dw_x = -g / P, -0.5 * g00 / P
        dnu_stable, dnu_x = c * (g * g - nu), c * HU[:, 0] ** 2
        dA_stable = 2 * jnp.sum(u * u * dP * dnu_stable) - g00 @ dw_stable
        dA_x = 2 * jnp.sum(u * u * dP * dnu_x) - g00 @ dw_x
        alpha, beta = 2 - e[0] + dt * dA_stable, dt * dA_x
        x = jnp.where(e[0] >= 2 * THRESHOLD, jnp.maximum(0.0, -alpha / beta), 0.0)
        bad = bad + (e[1] >= 2 * THRESHOLD).astype(jnp.int32)
        return (w + dt * (dw_stable + x * dw_x), nu + dt * (dnu_stable + x * dnu_x), bad), None

    @jax.jit
    def run(w, nu):
        def step(carry, _):
            return jax.lax.scan(substep, carry, None, length=substeps)[0], None
        return jax.lax.scan(step, (w, nu, jnp.asarray(0)), None, length=steps)[0]

    g0 = grad(w0)
    w, _, bad = ready(run(w0, g0 * g0))
    return np.asarray(w), int(bad)


def smoothed_error(t_steps, predicted, losses, onset):
    smooth = gaussian_filter1d(losses, SMOOTH_STEPS, mode="nearest")
    after = t_steps >= onset
    rel = np.abs(predicted[after] - smooth[after]) / smooth[after]
    return float(rel.mean()), float(rel.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--substeps", type=int, nargs="+", default=[4, 8, 16])
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)

    sc = load_scenario(str(ROOT / "scenarios" / f"{SCENARIO}.toml"))
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    leg = next(p for p in sc.runs[0].settings.run.solvers if p.kind == "rmsprop-central")
    eta, beta2, eps = leg.learning_rate, leg.beta2, leg.eps
    run = flowsim.open(args.archive).runs["seed0"]
    ds = {name: run.solvers[name] for name in ("rmsprop", "rmsprop-twin", "rmsprop-flow", "rmsprop-central")}
    t_steps = np.rint(np.asarray(ds["rmsprop"].t) / eta).astype(int)
    W = {n: np.concatenate([np.asarray(d[v]).reshape(len(d.t), -1) for v in d.series_names
                            if v.startswith("weights")], axis=1) for n, d in ds.items()}
    row = {int(s): i for i, s in enumerate(t_steps)}
    assert np.allclose(np.rint(np.asarray(ds["rmsprop-central"].t) / eta), t_steps)
    w0 = W["rmsprop"][0]
    runs, took = {}, {}
    for s in args.substeps:
        start = time.perf_counter()
        runs[s], bad = reference(b.problem, b.params, eta, beta2, eps, args.steps, s)
        took[s] = time.perf_counter() - start
        print(f"reference, {s} substeps: {took[s]:.0f} s, substeps with a second candidate above the edge: {bad}",
              flush=True)
    s1, s2, s3 = sorted(args.substeps)[-3:]
    ref = 2 * runs[s3] - runs[s2]
    order = np.linalg.norm(runs[s1] - runs[s2]) / np.linalg.norm(runs[s2] - runs[s3])
    central = W["rmsprop-central"][row[args.steps]]
    err = np.linalg.norm(central - ref)
    fig = {"rel_theta": err / np.linalg.norm(ref), "rel_disp": err / np.linalg.norm(ref - w0), "order": order,
           "euler_richardson": np.linalg.norm(runs[s3] - ref) / np.linalg.norm(ref - w0)}

    c = ds["rmsprop-central"]
    edge = np.asarray(ds["rmsprop"]["preconditioned_sharpness"]) * eta / 2
    onset = int(t_steps[np.argmax(edge >= 1)]) if np.any(edge >= 1) else None
    losses = np.asarray(ds["rmsprop"]["loss"])
    mean_err, max_err = smoothed_error(t_steps, np.asarray(c["predicted_loss"]), losses, onset)
    total = float(c["central_evals"][-1] + c["central_hvps"][-1] + c["central_thirds"][-1])
    per_step = total / t_steps[-1]
    dist = {s: [np.linalg.norm(W["rmsprop"][row[s]] - W[o][row[s]]) for o in
                ("rmsprop-central", "rmsprop-flow", "rmsprop-twin")] for s in AT if s in row}

    table = Table(f"RMSProp's central flow on {SCENARIO} against the corrected package algorithm",
                  ["figure", "value", "target"])
    table.add(f"‖θ_central − θ_ref‖ / ‖θ_ref‖ at step {args.steps}", fmt(fig["rel_theta"]), "≤ 1e-3")
    table.add(f"‖θ_central − θ_ref‖ / ‖θ_ref − θ0‖ at step {args.steps}", fmt(fig["rel_disp"]), "")
    table.add(f"reference: Euler order check ‖θ{s1} − θ{s2}‖ / ‖θ{s2} − θ{s3}‖", fmt(order), "≈ 2")
    table.add(f"reference: ‖θ{s3} − θ_ref‖ / ‖θ_ref − θ0‖ (Euler's own error at {s3})", fmt(fig["euler_richardson"]),
              "")
    table.add("onset (first row with preconditioned sharpness ≥ 2/η), RMSProp step", str(onset), "")
    table.add("predicted loss vs smoothed RMSProp loss after the onset: mean / max relative error",
              f"{fmt(mean_err)} / {fmt(max_err)}", "mean ≤ 5 %")
    table.add("central flow: gradient-equivalents per RMSProp step (evals + HVPs + thirds)", fmt(per_step), "≤ 20")
    for s, (dc, dfl, dtw) in dist.items():
        table.add(f"step {s}: ‖θ_RMSProp − θ_central‖, ‖θ_RMSProp − θ_stable‖, twin", f"{fmt(dc)}, {fmt(dfl)}, "
                  f"{fmt(dtw)}", "")
    times = ", ".join(f"{s} substeps {took[s]:.0f} s" for s in took)
    publish(table.markdown() + f"\nReference run times: {times}.\n", "central-rmsprop", quick=False)


if __name__ == "__main__":
    main()
