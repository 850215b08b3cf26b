"""RMSProp's central flow on central-rmsprop against an independent reference; writes
bench/results/central-rmsprop.md.

    python bench/bench_central_rmsprop.py [ARCHIVE] [--steps 600] [--substeps 4 8 16] [--quick]

ARCHIVE: `flowsim run central-rmsprop -o ARCHIVE` (its legs rmsprop, rmsprop-twin,
rmsprop-flow, rmsprop-central; rows every step); without it the script runs the scenario
first (3 min on 2 cores; --quick: to step 300, read there). The
reference is the JAX central-flow
package's algorithm (github alex-damian/central_flows_jax, `central_flow_substep`), corrected
as issue 55 says and written here from its equations, not from flowsim's field: forward Euler
in steps τ with `s` substeps per RMSProp step, each substep
- L̃ = rate·L, P = (√ν + ε)/η, the top two generalized eigenpairs H u = e P u (UᵀPU = I; e
  the effective eigenvalues) by jax's LOBPCG on P^{-1/2}HP^{-1/2} (warm-started from the last
  substep's, residual tolerance 1e-9; a dense Hessian and eigh per substep took > 0.3 s here);
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
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.sparse.linalg import lobpcg_standard
from scipy.ndimage import gaussian_filter1d

from bench_core import ROOT, Table, fmt, publish, ready  # noqa: E402
import flowsim
from flowsim.cli.command import main as flowsim_main
from flowsim.config import load_scenario
from flowsim.run.build import build_run

SCENARIO = "central-rmsprop"
EIGS = 2               # eigenpairs the reference tracks: the held one and the next (a second candidate is reported)
LOBPCG_ITERS = 200     # jax's LOBPCG, warm-started from the last substep's vectors
LOBPCG_TOL = 1e-9
THRESHOLD = 0.9        # e ≥ 2·THRESHOLD enters the stability problem (the leg's track_threshold)
SMOOTH_STEPS = 50
QUICK_STEPS = 300      # --quick: the scenario to this step, past the onset (step 166)
AT = (400, 600, 1000)


def reference(problem, p0, eta: float, beta2: float, eps: float, steps: int, substeps: int):
    """The corrected package algorithm by forward Euler (the module's docstring): θ after
    `steps` RMSProp steps, and the substeps where the second effective eigenvalue was at the
    threshold 2·THRESHOLD or above (a candidate, which the one-direction problem leaves out),
    and at 2 or above (where leaving it out would be wrong)."""
    w0, unravel = jax.flatten_util.ravel_pytree(p0)
    n = w0.size
    loss = lambda w: problem.rate * problem.loss(unravel(w))
    grad = jax.grad(loss)
    c, dt = (1 - beta2) / beta2, 1.0 / substeps

    def substep(carry, _):
        w, nu, V, bad = carry
        g = grad(w)
        hvp = lambda v: jax.jvp(grad, (w,), (v,))[1]
        P = (jnp.sqrt(nu) + eps) / eta
        root = jnp.sqrt(P)
        # the top EIGS eigenpairs of P^{-1/2}HP^{-1/2} (effective eigenvalues e), warm-started
        e, V, _ = lobpcg_standard(jax.vmap(lambda v: hvp(v / root) / root, in_axes=1, out_axes=1), V, m=LOBPCG_ITERS,
                                  tol=LOBPCG_TOL / (10 * n))
        U = V / root[:, None]                                       # UᵀPU = I
        u = U[:, 0]
        Hu = hvp(u)
        dP = 1 / (2 * eta * jnp.sqrt(nu))                           # ∂P/∂ν
        # the top direction alone (one candidate): its third-derivative vector and rates
        g00 = jax.grad(lambda v: u @ jax.jvp(grad, (v,), (u,))[1])(w)
        dw_stable, dw_x = -g / P, -0.5 * g00 / P
        dnu_stable, dnu_x = c * (g * g - nu), c * Hu ** 2
        dA_stable = 2 * jnp.sum(u * u * dP * dnu_stable) - g00 @ dw_stable
        dA_x = 2 * jnp.sum(u * u * dP * dnu_x) - g00 @ dw_x
        alpha, beta = 2 - e[0] + dt * dA_stable, dt * dA_x
        x = jnp.where(e[0] >= 2 * THRESHOLD, jnp.maximum(0.0, -alpha / beta), 0.0)
        bad = bad + jnp.stack([e[1] >= 2 * THRESHOLD, e[1] >= 2]).astype(jnp.int32)
        return (w + dt * (dw_stable + x * dw_x), nu + dt * (dnu_stable + x * dnu_x), V, bad), None

    @jax.jit
    def run(w, nu, V):
        def step(carry, _):
            return jax.lax.scan(substep, carry, None, length=substeps)[0], None
        return jax.lax.scan(step, (w, nu, V, jnp.zeros(2, jnp.int32)), None, length=steps)[0]

    g0 = grad(w0)
    V0 = jax.random.normal(jax.random.PRNGKey(1), (n, EIGS), w0.dtype)
    w, _, _, bad = ready(run(w0, g0 * g0, V0))
    return np.asarray(w), tuple(int(b) for b in bad)


def smoothed_error(t_steps, predicted, losses, onset):
    smooth = gaussian_filter1d(losses, SMOOTH_STEPS, mode="nearest")
    after = t_steps >= onset
    rel = np.abs(predicted[after] - smooth[after]) / smooth[after]
    return float(rel.mean()), float(rel.max())


def run_scenario(out: str, steps: int | None = None) -> None:
    """`flowsim run central-rmsprop -o out`; with `steps`, to that step (rows every step)."""
    short = [] if steps is None else ["--set", f"run.t_end={steps / 1000}",
                                      "--set", f"run.checkpoints={{count={steps}}}"]
    assert flowsim_main(["run", SCENARIO, "-o", out, "-q", "--overwrite", *short]) == 0


def measure(archive: str, steps: int, substeps=(4, 8, 16)) -> tuple[Table, dict, str]:
    """The figures of the module's docstring from the archive of `flowsim run central-rmsprop`
    (its `rmsprop` and `rmsprop-central` legs; the stable flow's and the twin's distances where
    the archive has them) at step `steps`: the table, the figures by name and the reference's
    run times."""
    sc = load_scenario(str(ROOT / "scenarios" / f"{SCENARIO}.toml"))
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    leg = next(p for p in sc.runs[0].settings.run.solvers if p.kind == "rmsprop-central")
    eta, beta2, eps = leg.learning_rate, leg.beta2, leg.eps
    run = flowsim.open(archive).runs["seed0"]
    ds = {name: run.solvers[name] for name in ("rmsprop", "rmsprop-twin", "rmsprop-flow", "rmsprop-central")
          if name in run.solvers}
    t_steps = np.rint(np.asarray(ds["rmsprop"].t) / eta).astype(int)
    W = {n: np.concatenate([np.asarray(d[v]).reshape(len(d.t), -1) for v in d.series_names
                            if v.startswith("weights")], axis=1) for n, d in ds.items()}
    row = {int(s): i for i, s in enumerate(t_steps)}
    assert np.allclose(np.rint(np.asarray(ds["rmsprop-central"].t) / eta), t_steps)
    w0 = W["rmsprop"][0]

    runs, took, seconds = {}, {}, {}
    for s in substeps:
        start = time.perf_counter()
        runs[s], seconds[s] = reference(b.problem, b.params, eta, beta2, eps, steps, s)
        took[s] = time.perf_counter() - start
        print(f"reference, {s} substeps: {took[s]:.0f} s", flush=True)
    s1, s2, s3 = sorted(substeps)[-3:]
    ref = 2 * runs[s3] - runs[s2]
    err = np.linalg.norm(W["rmsprop-central"][row[steps]] - ref)
    c = ds["rmsprop-central"]
    edge = np.asarray(ds["rmsprop"]["preconditioned_sharpness"]) * eta / 2
    onset = int(t_steps[np.argmax(edge >= 1)]) if np.any(edge >= 1) else None
    mean_err, max_err = smoothed_error(t_steps, np.asarray(c["predicted_loss"]), np.asarray(ds["rmsprop"]["loss"]),
                                       onset)
    fig = {"rel_theta": err / np.linalg.norm(ref), "rel_disp": err / np.linalg.norm(ref - w0),
           "order": np.linalg.norm(runs[s1] - runs[s2]) / np.linalg.norm(runs[s2] - runs[s3]),
           "euler_richardson": np.linalg.norm(runs[s3] - ref) / np.linalg.norm(ref - w0),
           "second_held": max(b for _, b in seconds.values()), "onset": onset, "loss_mean": mean_err,
           "loss_max": max_err, "sigma2": float(np.max(c["central_sigma2"])),
           "per_step": float(c["central_evals"][-1] + c["central_hvps"][-1] + c["central_thirds"][-1]) / t_steps[-1]}
    others = [o for o in ("rmsprop-central", "rmsprop-flow", "rmsprop-twin") if o in W]
    dist = {s: [np.linalg.norm(W["rmsprop"][row[s]] - W[o][row[s]]) for o in others] for s in AT if s in row}

    table = Table(f"RMSProp's central flow on {SCENARIO} against the corrected package algorithm",
                  ["figure", "value", "target"])
    table.add(f"‖θ_central − θ_ref‖ / ‖θ_ref‖ at step {steps}", fmt(fig["rel_theta"]), "≤ 1e-3")
    table.add(f"‖θ_central − θ_ref‖ / ‖θ_ref − θ0‖ at step {steps}", fmt(fig["rel_disp"]), "")
    table.add(f"reference: Euler order check ‖θ{s1} − θ{s2}‖ / ‖θ{s2} − θ{s3}‖", fmt(fig["order"]), "≈ 2")
    table.add(f"reference: ‖θ{s3} − θ_ref‖ / ‖θ_ref − θ0‖ (Euler's own error at {s3})", fmt(fig["euler_richardson"]),
              "")
    table.add(f"reference: substeps with the second effective eigenvalue ≥ {2 * THRESHOLD:g} / ≥ 2 (at "
              f"{', '.join(map(str, seconds))} substeps)", ", ".join(f"{a} / {b}" for a, b in seconds.values()),
              "0 at ≥ 2")
    table.add("central flow: X's second eigenvalue at most (rank 1 if ~0)", fmt(fig["sigma2"]), "")
    table.add("onset (first row with preconditioned sharpness ≥ 2/η), RMSProp step", str(onset), "")
    table.add("predicted loss vs smoothed RMSProp loss after the onset: mean / max relative error",
              f"{fmt(mean_err)} / {fmt(max_err)}", "mean ≤ 5 %")
    table.add("central flow: gradient-equivalents per RMSProp step (evals + HVPs + thirds)", fmt(fig["per_step"]),
              "≤ 20")
    for s, d in dist.items():
        table.add(f"step {s}: ‖θ_RMSProp − θ‖ to {', '.join(others)}", ", ".join(map(fmt, d)), "")
    return table, fig, ", ".join(f"{s} substeps {took[s]:.0f} s" for s in took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive", nargs="?")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--substeps", type=int, nargs=3, default=[4, 8, 16])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    steps = QUICK_STEPS if args.quick else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        archive = args.archive
        if archive is None:
            archive = str(Path(tmp) / f"{SCENARIO}.h5")
            run_scenario(archive, QUICK_STEPS if args.quick else None)
        table, _, times = measure(archive, steps, args.substeps)
    publish(table.markdown() + f"\nReference run times: {times}.\n", "central-rmsprop", quick=args.quick)


if __name__ == "__main__":
    main()
