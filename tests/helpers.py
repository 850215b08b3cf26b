"""Helpers shared by the test modules."""

import contextlib
import io
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np

from flowsim.cli import command as cli


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def call_cli(*args, cwd=None) -> Result:
    """`flowsim ARGS` in this process (compiled programs are shared with the rest of the
    suite), as `subprocess.run` would report it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            rc = cli.main([str(a) for a in args])
        except SystemExit as exit_:      # argparse's usage errors exit the process
            rc = exit_.code
    return Result(rc, out.getvalue(), err.getvalue())


def run_cli(*args, cwd=None, expect: int = 0) -> str:
    """`flowsim ARGS` in this process; returns its standard output, and fails with the tail
    of its standard error when the exit status is not `expect`."""
    rc, out, err = call_cli(*args, cwd=cwd)
    assert rc == expect, f"flowsim {' '.join(map(str, args))} exited {rc}:\n{err[-3000:]}"
    return out


def mlp_factory(key, d, k):
    """A `model.kind = "python"` factory for tests: "tests.helpers:mlp_factory"."""
    import equinox as eqx
    import jax.numpy as jnp

    return eqx.nn.MLP(d, k, 8, 1, activation=jnp.tanh, key=key)


def nan_bias_factory(key, d, k):
    """A factory whose network holds a NaN bias: its loss is NaN at t = 0."""
    import equinox as eqx
    import jax.numpy as jnp

    model = mlp_factory(key, d, k)
    return eqx.tree_at(lambda m: m.layers[0].bias, model, model.layers[0].bias.at[0].set(jnp.nan))


def pendulum_convergence_rates(solver, counts) -> list[float]:
    """The pendulum θ'' = −sin θ from (1, 0) to t = 2 by `solver` at constant steps 2/n for each n
    of `counts` (each twice the last): the observed orders log2(e_h / e_{h/2}) against Dopri8
    at rtol 1e-13."""
    import diffrax as dfx
    import jax.numpy as jnp
    import numpy as np

    term = dfx.ODETerm(lambda t, y, args: jnp.stack([y[1], -jnp.sin(y[0])]))
    y0 = jnp.asarray([1.0, 0.0])
    ref = dfx.diffeqsolve(term, dfx.Dopri8(), 0.0, 2.0, None, y0,
                          stepsize_controller=dfx.PIDController(rtol=1e-13, atol=1e-15)).ys[-1]
    errs = [float(jnp.max(jnp.abs(dfx.diffeqsolve(term, solver, 0.0, 2.0, 2.0 / n, y0).ys[-1] - ref)))
            for n in counts]
    return list(np.log2(np.asarray(errs[:-1]) / np.asarray(errs[1:])))


def counting(problem, calls: list):
    """`problem` whose every evaluation of the velocity appends to `calls` (a host callback, so
    it counts inside compiled code): the oracle of an integrator's evaluation counts."""

    class Counting(type(problem)):
        def velocity(self, params):
            jax.debug.callback(lambda: calls.append(1))
            return super().velocity(params)

    return Counting(**{f: getattr(problem, f) for f in problem.__dataclass_fields__})


def leaf_count(params) -> int:
    """The sum of the sizes of the trainable array leaves."""
    return sum(int(np.size(x)) for x in jax.tree.leaves(eqx.filter(params, eqx.is_inexact_array)))
