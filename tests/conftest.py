"""Shared fixtures: float64 on (the tests build Problems directly, not through build_run),
small problems, helpers."""

import gc
import os
from pathlib import Path

# On a GPU, JAX takes 75 % of its memory at the first use by default; the suite's
# subprocesses share the device with this process, so each takes what it needs.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The suite drives the engine through its modules, in-process: it sets the run path's
# environment default itself (`flowsim run` and the package's engine names do), before
# anything imports Equinox.
from flowsim.engine_env import set_engine_defaults  # noqa: E402

set_engine_defaults()

import jax  # noqa: E402
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim.cli.lifecycle import compilation_cache
from flowsim.models import init_shallow
from flowsim.run.precision import enable_x64
from flowsim.nn.problem import Problem
from flowsim.nn.scaling import output_scale

enable_x64()

# One persistent compilation cache for the `flowsim` subprocesses the end-to-end tests start
# (the CLI reads FLOWSIM_CACHE_DIR) and for scripts that import this module: each solver
# program is compiled once per machine instead of once per test.
os.environ.setdefault("FLOWSIM_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "jax"))
compilation_cache()


def pytest_configure(config):
    """Not for the test processes themselves, which compile each program once anyway: XLA
    aborted a CI worker while serialising a Filippov executable for the cache (two runs of
    the full suite, a different test each time, never alone). The in-process CLI calls set
    a directory only."""
    jax.config.update("jax_enable_compilation_cache", False)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Each test module's compiled programs freed after it: a CI worker that had compiled
    hundreds of programs crashed inside XLA compiling a Filippov program (a segmentation
    fault in `backend_compile_and_load`, an abort in the cache's serialisation; a different
    test_filippov test each time, each passing alone), so a worker keeps no more than one
    module's programs."""
    yield
    jax.clear_caches()
    gc.collect()


def sphere(rng, n, d):
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_problem(*, n=20, d=5, m=50, activation="swish", scaling="asymmetric", gamma=0.5, alpha=0.5,
                 k=3, output="fixed", zeroed=False, loss="half-sse", outputs=1, seed=0, dtype=jnp.float64,
                 init_std=1.0, radius=None):
    """A small random problem: inputs on the sphere of `radius` (default sqrt(d)), Gaussian targets."""
    rng = np.random.default_rng(seed)
    X = sphere(rng, n, d) * (np.sqrt(d) if radius is None else radius)
    y = rng.normal(size=(n, outputs))
    params = {"gamma": gamma, "alpha": alpha} if scaling == "asymmetric" else {}
    if scaling in ("single", "finite"):
        params = {"gamma": gamma} | ({"k": k} if scaling == "finite" else {})
    scale = output_scale(scaling, m, **params)
    net, p0 = init_shallow(jax.random.PRNGKey(seed), d=d, outputs=outputs, scale=scale,
                           scaling_kind=scaling, activation_name=activation, init_std=init_std,
                           train_output=output == "trained", zeroed=zeroed, dtype=dtype)
    prob = Problem(net=net, X=jnp.asarray(X, dtype), y=jnp.asarray(y, dtype), X_test=jnp.asarray(X[:5], dtype),
                   y_test=jnp.asarray(y[:5], dtype), rate=scale.rate, loss_kind=loss, ntg_points=n)
    return prob, p0


def resumed_beside_uninterrupted(integ, pairs, every_member=False):
    """Two seeds' problems and weights (`pairs`) through `flowsim.run.batch` to t = 1; seed 1's
    state stored as named arrays, restored into a fresh batch, and both batches advanced to
    t = 2 (horizon 3: a flow holds the step that passes t = 1 and t = 2, its scratch).
    `every_member`: every seed's state restored, as a resumed run restores its batch.
    Returns the uninterrupted state, the resumed one and each one's statistics."""
    from flowsim.run import batch, state_arrays
    problems, params = batch.stack_problems([p for p, _ in pairs]), batch.stack([w for _, w in pairs])
    keys = batch.stack([jax.random.PRNGKey(s) for s in range(len(pairs))])
    horizon = jnp.asarray(3.0)
    n = len(pairs)
    state, _ = batch.advance(integ, problems, batch.init(integ, problems, params, keys), jnp.full(n, 1.0), horizon)
    restored = jax.tree.map(np.asarray, batch.init(integ, problems, params, keys))
    for i in range(n) if every_member else [1]:
        stored = state_arrays.as_arrays(jax.tree.map(lambda x: np.asarray(x)[i], state))
        restored = state_arrays.restore(restored, i, stored)
    a, stats = batch.advance(integ, problems, state, jnp.full(n, 2.0), horizon)
    b, stats_b = batch.advance(integ, problems, restored, jnp.full(n, 2.0), horizon)
    return a, b, stats, stats_b


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture
def problem():
    return make_problem()


@pytest.fixture(scope="session")
def slurm_cluster():
    """The machine's single-node Slurm (tests/slurm.py), shared by the xdist workers; its
    slurm.conf is in SLURM_CONF for the tests and the commands they start. Skipped, with
    the reason, where none can be stood up, except where FLOWSIM_REQUIRE_SLURM=1 (CI)."""
    import slurm

    try:
        conf = slurm.acquire()
    except slurm.Unavailable as why:
        if os.environ.get("FLOWSIM_REQUIRE_SLURM") == "1":
            pytest.fail(f"no Slurm, and FLOWSIM_REQUIRE_SLURM=1: {why}")
        pytest.skip(f"no Slurm here: {why}")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield conf
    if saved is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = saved
    slurm.release()
