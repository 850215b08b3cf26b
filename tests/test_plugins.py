"""Plug-ins by import path: a model factory (`model.kind = "python"`), an activation and a
loss named "module:name" in a scenario. Each bad one is exit 2 naming its key before
anything is computed or created; `flowsim list` and `inspect` say the scenario runs user
code; reading the archive imports nothing."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import flowsim
from tests.helpers import call_cli

MODULE = "flowsim_test_usercode"

CODE = """
import equinox as eqx, jax.numpy as jnp

class Net(eqx.Module):
    mlp: eqx.nn.MLP
    def __call__(self, x):
        return self.mlp(x)

def make(key, d, k):
    return Net(eqx.nn.MLP(d, k, 16, 1, activation=jnp.tanh, key=key))

def wrong_out(key, d, k):
    return Net(eqx.nn.MLP(d, k + 1, 4, 1, key=key))

def not_module(key, d, k):
    return 3

def softsign(z):
    return z / (1 + jnp.abs(z))

def total(z):
    return jnp.sum(z)

def half_mse(pred, y):
    return 0.5 * jnp.mean((pred - y) ** 2)

def squares(pred, y):
    return (pred - y) ** 2

NUMBER = 3
"""

SCENARIO = f"""
name = "plug"
[data]
kind = "sphere-sine"
n = 10
d = 3
n_test = 4
[model]
kind = "python"
factory = "{MODULE}:make"
[loss]
kind = "{MODULE}:half_mse"
[run]
t_end = 1.0
checkpoints = {{ count = 2 }}
solvers = ["gd-lr0.1"]
observe = ["loss", "ntg_eig", "weight_change"]
"""


@pytest.fixture
def folder(tmp_path):
    """A scenario beside its module (found from the scenario's folder, not sys.path)."""
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(CODE))
    (tmp_path / "plug.toml").write_text(SCENARIO)
    yield tmp_path
    sys.modules.pop(MODULE, None)


@pytest.mark.parametrize("override, key, why", [
    ('model.factory="nomodule_xyz:make"', "model.factory", "does not import"),
    (f'model.factory="{MODULE}:nothere"', "model.factory", "has no 'nothere'"),
    (f'model.factory="{MODULE}:NUMBER"', "model.factory", "not callable"),
    ('model.factory="make"', "model.factory", "is not an import path"),
    (f'model.factory="{MODULE}:wrong_out"', "model.factory", "to (2,)"),
    (f'model.factory="{MODULE}:not_module"', "model.factory", "of type int"),
    (f'loss.kind="{MODULE}:squares"', "loss.kind", "returns shape (4, 2)"),
    (f'loss.kind="{MODULE}:nothere"', "loss.kind", "has no 'nothere'"),
])
def test_a_bad_plugin_is_exit_2_naming_the_key(folder, override, key, why):
    out = folder / "out.h5"
    code, _, err = call_cli("run", folder / "plug.toml", "-o", out, "--set", override)
    assert code == 2, err
    assert f"`{key}`" in err and why in err and "allowed" in err, err
    assert not out.exists()


def test_a_bad_activation_plugin_is_exit_2(folder):
    text = SCENARIO.replace('kind = "python"', 'kind = "mlp"\nwidths = [4]').replace(
        f'factory = "{MODULE}:make"', f'activation = "{MODULE}:total"')
    (folder / "mlp.toml").write_text(text)
    code, _, err = call_cli("run", folder / "mlp.toml", "-o", folder / "out.h5")
    assert code == 2 and "`model.activation`" in err and "returns shape ()" in err, err


def test_list_marks_a_scenario_that_runs_user_code(folder, monkeypatch):
    from flowsim.config import catalog

    monkeypatch.setattr(catalog, "scenarios_dir", lambda: folder)
    monkeypatch.setenv("COLUMNS", "400")       # lines are cut to the terminal's width
    code, out, err = call_cli("list")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("plug"))
    assert f"[runs user code: {MODULE}:half_mse, {MODULE}:make]" in line


@pytest.mark.slow
def test_plugins_run_and_the_archive_reads_without_importing_them(folder):
    text = SCENARIO.replace('kind = "python"', 'kind = "mlp"\nwidths = [8]').replace(
        f'factory = "{MODULE}:make"', f'activation = "{MODULE}:softsign"')
    (folder / "mlp.toml").write_text(text)
    for name in ("plug", "mlp"):
        code, _, err = call_cli("run", folder / f"{name}.toml", "-o", folder / f"{name}.h5", "-q")
        assert code == 0, err
    sys.modules.pop(MODULE, None)
    code, out, err = call_cli("inspect", folder / "plug.h5")
    assert code == 0 and f"ran user code (plug-ins): {MODULE}:half_mse, {MODULE}:make" in out, err
    assert call_cli("plot", folder / "mlp.h5", "-o", folder / "figs")[0] == 0
    with flowsim.open(folder / "mlp.h5") as arch:
        loss = np.asarray(arch.runs["seed0"].solvers["gd-lr0.1"]["loss"])
    assert MODULE not in sys.modules          # nothing read above imported the user's code
    assert loss[-1] < loss[0]


# Plug-ins that try to end the process, or never return: named by key, exit 2 (or 130 for a
# stop), nothing written and an existing archive left as it was.
ENDING = """
import os, pathlib, sys
import equinox as eqx, jax.numpy as jnp

HOW = os.environ.get("FLOWSIM_TEST_HOW", "")

def _end(where):
    if HOW == "sys.exit":
        sys.exit(0)
    if HOW == "os._exit":
        os._exit(0)
    if HOW == "loop":
        pathlib.Path(os.environ["FLOWSIM_TEST_MARK"]).write_text(where)
        while True:
            pass

if os.environ.get("FLOWSIM_TEST_WHERE") == "import":
    _end("import")

def make(key, d, k):
    if os.environ.get("FLOWSIM_TEST_WHERE") == "factory":
        _end("factory")
    return eqx.nn.MLP(d, k, 4, 1, activation=jnp.tanh, key=key)

def half_mse(pred, y):
    if os.environ.get("FLOWSIM_TEST_WHERE") == "loss":
        _end("loss")
    if os.environ.get("FLOWSIM_TEST_WHERE") == "run" and pred.shape[0] != 4:   # not in the probe
        _end("run")
    return 0.5 * jnp.mean((pred - y) ** 2)
"""

ENDING_MODULE = "flowsim_test_ending"


SURVIVOR = b"\x89HDF\r\n\x1a\n an archive that must survive"   # HDF5's signature: what --overwrite replaces


@pytest.fixture
def ending(tmp_path, monkeypatch):
    """A scenario whose plug-ins end the process (FLOWSIM_TEST_HOW) at FLOWSIM_TEST_WHERE,
    with an archive already at its output that `--overwrite` would replace."""
    (tmp_path / f"{ENDING_MODULE}.py").write_text(ENDING)
    (tmp_path / "plug.toml").write_text(SCENARIO.replace(MODULE, ENDING_MODULE))
    old = tmp_path / "out.h5"
    old.write_bytes(SURVIVOR)
    yield tmp_path
    sys.modules.pop(ENDING_MODULE, None)


@pytest.mark.parametrize("where, key", [("import", "model.factory"), ("factory", "model.factory"),
                                        ("loss", "loss.kind")])
def test_sys_exit_in_a_plugin_is_exit_2_naming_it(ending, monkeypatch, where, key):
    monkeypatch.setenv("FLOWSIM_TEST_HOW", "sys.exit")
    monkeypatch.setenv("FLOWSIM_TEST_WHERE", where)
    code, _, err = call_cli("run", ending / "plug.toml", "-o", ending / "out.h5", "--overwrite", "-q")
    assert code == 2, err
    assert f"`{key}`" in err and "SystemExit(0)" in err and "may not end the process" in err, err
    assert (ending / "out.h5").read_bytes() == SURVIVOR


def test_sys_exit_in_a_plugin_during_the_run_is_exit_2(ending, monkeypatch):
    monkeypatch.setenv("FLOWSIM_TEST_HOW", "sys.exit")
    monkeypatch.setenv("FLOWSIM_TEST_WHERE", "run")
    code, _, err = call_cli("run", ending / "plug.toml", "-o", ending / "new.h5", "-q")
    assert code == 2 and "SystemExit(0)" in err and "may not end the process" in err, err
    assert not (ending / "new.h5").exists()


def _command(folder, *args, how, where, **env):
    import os
    import subprocess

    env = {**os.environ, "FLOWSIM_CACHE_DIR": "", "FLOWSIM_TEST_HOW": how, "FLOWSIM_TEST_WHERE": where,
           "FLOWSIM_TEST_MARK": str(folder / "mark"), **env}
    return subprocess.Popen([sys.executable, "-m", "flowsim.cli", *map(str, args)], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("where, key", [("import", "model.factory"), ("factory", "model.factory"),
                                        ("loss", "loss.kind")])
def test_os_exit_in_a_plugin_is_a_non_zero_status_naming_it(ending, where, key):
    """os._exit cannot be caught in the process: the command rehearses the preparation in
    a child first, and says which plug-in ended it."""
    for command in (["run", "plug.toml", "-o", "out.h5", "--overwrite", "-q"], ["show", "plug.toml"]):
        if where == "factory" and command[0] == "show":
            continue    # `show` builds nothing: the factory is not called
        proc = _command(ending, *command, how="os._exit", where=where)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (command, err)
        assert f"`{key}` = '{ENDING_MODULE}:" in err and "ended the process (exit status 0" in err, err
    assert (ending / "out.h5").read_bytes() == SURVIVOR


@pytest.mark.slow
@pytest.mark.parametrize("where", ["import", "factory"])
def test_sigterm_stops_a_plugin_that_never_returns(ending, where):
    import signal
    import time

    proc = _command(ending, "run", "plug.toml", "-o", "out.h5", "--overwrite", "-q", how="loop", where=where)
    deadline = time.monotonic() + 120
    while not (ending / "mark").exists():    # the plug-in is in its loop
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=1.0)    # within a second
    assert proc.returncode == 130 and "interrupted" in err, err
    assert (ending / "out.h5").read_bytes() == SURVIVOR
