"""Helpers shared by the test modules."""

import contextlib
import io
from typing import NamedTuple

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
