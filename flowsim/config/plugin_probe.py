"""A scenario key that may name a plug-in (`flowsim.plugins`): `Plugin`, its validator, which
imports the object and probes it; `callable_probe` and `shape_probe`, the probes the keys use.

A probe returns what is wrong with the object, or "". `shape_probe` calls it abstractly
(`jax.eval_shape`: no compute), importing JAX only when a scenario names a plug-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import plugins
from .spec import Str


@dataclass(frozen=True)
class Plugin(Str):
    """One of `choices`, or a plug-in "package.module:name" that imports (from the scenario's
    folder first) and passes `probe` (which returns what is wrong with the object, or "")."""

    probe: Callable[[Any], str] = lambda obj: ""
    what: str = "a function"

    def allowed(self) -> str:
        plugin = f'a plug-in {plugins.FORM} naming {self.what}'
        return f"{super().allowed()}, or {plugin}" if self.choices else plugin

    def check(self, value, key, ctx):
        if not plugins.is_path(value):
            if not self.choices:
                raise ctx.bad(key, value, "is not an import path", self.allowed())
            return super().check(value, key, ctx)
        with plugins.running(key, value, "imported and probed"):
            try:
                obj = plugins.load(value, ctx.base_dir)
            except plugins.PluginError as err:
                raise ctx.bad(key, value, str(err), self.allowed()) from None
            wrong = self.probe(obj)
        if wrong:
            raise ctx.bad(key, value, wrong, self.allowed())
        return value


def callable_probe(obj) -> str:
    return "" if callable(obj) else f"is of type {type(obj).__name__}, not callable"


def shape_probe(shapes: tuple[tuple[int, ...], ...], want: tuple[int, ...], what: str) -> Callable[[Any], str]:
    """A probe calling the object on zeros of `shapes` (abstractly, no compute) and asking
    for an output of shape `want`."""
    def probe(obj) -> str:
        import jax
        import jax.numpy as jnp

        if not callable(obj):
            return callable_probe(obj)
        try:
            out = jax.eval_shape(obj, *(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes))
        except plugins.RAISED as err:  # the user's code may raise anything
            return f"fails on arrays of shapes {list(shapes)} ({plugins.describe(err)})"
        shape = getattr(out, "shape", None)
        return "" if shape == want else f"returns shape {shape} on {list(shapes)}; {what} returns {want}"
    return probe
