"""The public surface: `import flowsim` offers what a user calls, flat, to type checkers
too; it imports no JAX and sets no Equinox default; reading an archive (open, inspect,
plot, compare) imports no JAX."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import flowsim

INIT = Path(flowsim.__file__)
JAX_MODULES = "sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'equinox'))"


def _type_checked() -> dict[str, str]:
    """name -> module of the imports under `if TYPE_CHECKING:` in flowsim/__init__.py."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {a.asname or a.name: f"flowsim.{node.module}" for node in block.body for a in node.names}


def test_type_checkers_see_every_name_the_package_loads():
    from flowsim.config import typed

    checked = _type_checked()
    assert checked.pop("*") == "flowsim.config.typed"     # every configuration class (typed.__all__)
    assert checked == flowsim._EXPORTS
    assert flowsim.__all__ == ["__version__", *flowsim._EXPORTS, *typed.__all__]


def test_every_name_loads_and_is_its_module_s():
    import importlib

    from flowsim.config import typed

    for name, module in [*flowsim._EXPORTS.items(), *dict.fromkeys(typed.__all__, "flowsim.config").items()]:
        assert getattr(flowsim, name) is getattr(importlib.import_module(module), name), name
    assert flowsim.FlowPreset(method="tsit5", rtol=1e-8).rtol == 1e-8
    assert set(flowsim.__all__) <= set(dir(flowsim))


def _run(code: str) -> list[str]:
    env = {k: v for k, v in __import__("os").environ.items() if k != "EQX_ON_ERROR"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_import_flowsim_sets_no_equinox_default_and_the_engine_names_do():
    out = _run(f"""
        import os, sys
        import flowsim
        flowsim.Config, flowsim.FlowPreset, flowsim.load_scenario, flowsim.open
        print({JAX_MODULES}, os.environ.get("EQX_ON_ERROR"))
        flowsim.make_integrator
        import equinox._config
        print(equinox._config.EQX_ON_ERROR)
    """)
    assert out == ["[] None", "nan"]


def test_reading_an_archive_imports_no_jax(tmp_path):
    from tests.test_plots import make_archive

    path = make_archive(tmp_path / "a.h5", seeds=(0,), k=5)
    out = _run(f"""
        import sys
        import flowsim.archive, flowsim.plots, flowsim.analysis.compare
        print({JAX_MODULES})
        from flowsim import cli
        with flowsim.open({str(path)!r}) as a:
            a.runs
        codes = [cli.main([*args, {str(path)!r}])
                 for args in (["inspect"], ["compare"], ["plot", "-o", {str(tmp_path / "figs")!r}])]
        print(codes, {JAX_MODULES})
    """)
    assert out[0] == "[]" and out[-1] == "[0, 0, 0] []", out
