"""What the commands print and write tells the truth: `-q` is quiet, a missing archive
leaves nothing behind, and the reports say what they can and cannot show."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import call_cli, run_cli

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
ONE = ["--set", "seeds=[0]", "--set", 'run.solvers=["gd-lr1"]', "--set", 'run.observe=["loss"]']


def test_quiet_run_prints_nothing(tmp_path):
    out = tmp_path / "tiny.h5"
    rc, stdout, stderr = call_cli("run", TINY, "-o", out, "-q", *ONE)
    assert rc == 0 and out.exists()
    assert stdout == "" and stderr == "", (stdout, stderr)


def test_plot_of_a_missing_archive_creates_nothing(tmp_path):
    rc, _, err = call_cli("plot", tmp_path / "nope.h5", "-o", tmp_path / "figs")
    assert rc == 2 and "nope.h5" in err
    rc, _, err = call_cli("plot", "runs/nope.h5", cwd=tmp_path)     # the default folder, runs/nope
    assert rc == 2
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def no_weights(tmp_path_factory):
    """tiny (two sweep points of two seeds), flow and GD recording the NTG, weight changes
    and sharpness but not `weights`."""
    out = tmp_path_factory.mktemp("cmp") / "tiny.h5"
    run_cli("run", TINY, "-o", out, "-q", "--set", 'run.observe=["loss", "ntg", "weight_change", "sharpness"]')
    return out


@pytest.mark.slow
def test_compare_shows_the_gaps_it_reports_and_names_the_missing_ones(no_weights):
    from flowsim.analysis.compare import compare_archive
    from flowsim.plots.compare import figure_run

    text = run_cli("compare", no_weights)
    head = next(line for line in text.splitlines() if line.strip().startswith("discrete"))
    assert head.split()[4:] == ["|ΔL|", "max/final", "rel", "‖ΔΘ̂‖", "max/final", "Δ‖w−w0‖", "max/final",
                                "unresolved"], head
    assert "— / —" not in text
    assert "every run: not reported: rel ‖ΔW‖ (needs `weights`) recorded by both solvers" in text
    # stability is judged where sharpness was recorded: tiny's 12 checkpoints and t = 0
    assert "stability gd-lr1 (η = 1): stayed below 2/η at its 13 recorded checkpoints: max η·sharpness" in text
    assert "(between checkpoints unknown)" in text
    rep = compare_archive(no_weights)
    fig = figure_run(rep, next(iter(rep.runs)))
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.split(") ", 1)[1].split(";")[0] for t in titles] == [
        "loss gap", "NTG gap", "weight-change gap", "sharpness"], titles


@pytest.mark.slow
def test_inspect_shows_a_batch_wall_time_once_and_the_final_loss(no_weights):
    import numpy as np

    import flowsim

    text = run_cli("inspect", no_weights)
    with flowsim.open(no_weights) as arch:
        for name, run in arch.runs.items():
            block = text.split(f"run {name}:", 1)[1].split("\n  run ", 1)[0]
            for solver, sv in run.solvers.items():
                line = next(x for x in block.splitlines() if x.strip().startswith(solver + " "))
                assert f"loss {float(np.asarray(sv['loss'])[-1]):.6g}," in line, line
                first = run.seed == 0       # tiny's seeds 0 and 1 form each sweep point's batch
                assert ("wall" in line) == first, line
                if first:
                    assert f", wall {sv.wall_time:.3g} s for its 2 seeds together (observing ≈ " in line, line


@pytest.mark.slow
def test_bench_e2e_counts_a_batch_of_seeds_once(no_weights):
    """Each seed of a vmapped batch records the batch's wall (docs/archive.md), so summing
    `wall_time` over runs counts a batch once per seed: the bench's 7× for 5 GPU seeds."""
    import sys

    import flowsim

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_e2e import batches_wall

    with flowsim.open(no_weights) as arch:
        for solver in ("tsit5", "gd-lr1"):
            walls: dict[int, list[float]] = {}
            for run in arch.runs.values():
                walls.setdefault(run.point, []).append(run.solvers[solver].wall_time)
            assert sorted(len(w) for w in walls.values()) == [2, 2]     # two points of two seeds
            assert all(w[0] == w[1] > 0 for w in walls.values()), walls
            assert batches_wall(arch, solver) == pytest.approx(sum(w[0] for w in walls.values()), rel=1e-12)
            assert sum(sum(w) for w in walls.values()) == pytest.approx(2 * batches_wall(arch, solver), rel=1e-12)


@pytest.mark.parametrize("solver, shown, hidden", [
    ("tsit5", {"rtol", "pcoeff", "dtmax", "max_steps"},
     {"newton_rtol", "linear_atol", "krylov_restart", "slots", "rho_every"}),
    ("kvaerno5", {"rtol", "pcoeff", "newton_rtol", "krylov_max_steps"}, {"slots", "rho_safety"}),
    ("rock4", {"rtol", "pcoeff", "rho_every", "rho_safety"}, {"newton_rtol", "slots"}),
])
def test_show_lists_only_the_keys_a_flow_preset_uses(solver, shown, hidden):
    text = run_cli("show", "quickstart", "--set", f'run.solvers=["{solver}", "gd-lr1"]')
    keys = {line.split("=")[0].strip().split(".")[-1] for line in text.splitlines()
            if line.strip().startswith("run.solvers[0].")}
    assert shown <= keys and not hidden & keys, keys


def test_list_long_tells_a_quick_file_from_its_twin(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = run_cli("list", "--long")
    blocks: dict[str, list[str]] = {}     # name -> its description's lines (the name column cut off)
    for line in text.splitlines():
        if line.startswith("  ") and line[2] != " ":
            name = line.split()[0]
            blocks[name] = [line[31:]]
        elif line.startswith(" " * 31):
            blocks[name].append(line[31:])
    assert all(len(line) <= 100 for line in text.splitlines())
    twins = [n for n in blocks if n.endswith("-quick") and n[: -len("-quick")] in blocks]
    assert len(twins) >= 5
    for quick in twins:
        assert blocks[quick] != blocks[quick[: -len("-quick")]], quick
    from flowsim.config import list_scenarios, list_solvers

    for name, desc in list_scenarios() + list_solvers():    # whole, nothing cut from the middle
        assert " ".join(" ".join(blocks[name]).split()) == " ".join(desc.split()), name


@pytest.mark.slow
def test_plot_of_a_simulate_run_names_its_leaves_and_draws_no_empty_panel_or_sweep(tmp_path):
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import flowsim
    from flowsim import plots

    X = np.random.default_rng(0).normal(size=(10, 3))
    model = eqx.nn.MLP(3, 1, 6, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    out = tmp_path / "mine.h5"
    flowsim.simulate(model, data=(X, np.sin(X[:, 0])), solvers=["tsit5", "gd-lr0.1"], t_end=1.0,
                     checkpoints={"count": 4}, observe=["loss", "weight_change", "ntg_eig"], output=out,
                     progress=False).close()
    with flowsim.open(out) as arch:
        fig = plots.figure_fig1(plots.gather(arch), "mine")
    assert [ax.get_title(loc="left") for ax in fig.axes] == [
        "(a) training loss", "(b) weight change per trainable leaf (top 5)", "(c) smallest NTG eigenvalue"]
    leaves = {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "layers.2.weight",
              "layers.2.bias"}
    named = {t.get_text() for t in fig.axes[1].texts}
    assert len(named) == 5 and named <= leaves, named
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "sweep point" not in legend and not any(t.startswith("point ") for t in legend), legend
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:      # every title inside the figure
        box = ax._left_title.get_window_extent(renderer)      # the panels' titles sit on the left
        assert 0 <= box.x0 and box.x1 <= fig.bbox.x1, ax.get_title(loc="left")


@pytest.mark.slow
def test_log_and_inspect_tell_observation_from_integration(tmp_path):
    import json

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    import flowsim
    from flowsim.run.progress import Progress

    X = np.random.default_rng(0).normal(size=(10, 3))
    model = eqx.nn.MLP(3, 1, 6, 1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    out, log = tmp_path / "obs.h5", tmp_path / "obs.jsonl"
    flowsim.simulate(model, data=(X, np.sin(X[:, 0])), solvers=["tsit5"], t_end=1.0, checkpoints={"count": 5},
                     observe=["loss", "sharpness"], output=out, progress=Progress(False, jsonl=log)).close()
    (end,) = [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == "finished"]
    assert 0 <= end["observe_s"] <= end["wall_s"]
    assert end["integrate_s"] == pytest.approx(end["wall_s"] - end["observe_s"], abs=2e-3)
    with flowsim.open(out) as arch:
        sv = arch.runs["seed0"].solvers["tsit5"]
        observing, wall, compiling = sv.stats["observe_time"], sv.wall_time, sv.stats["compile_time"]
    assert end["observe_s"] == pytest.approx(observing, abs=1e-3) and end["wall_s"] == pytest.approx(wall, abs=1e-3)
    line = next(x for x in run_cli("inspect", out).splitlines() if x.strip().startswith("tsit5"))
    assert line.endswith(f"wall {wall:.3g} s (observing ≈ {observing:.3g} s, integrating ≈ "
                         f"{wall - observing:.3g} s), compiling {compiling:.3g} s"), line


def test_gd_at_any_step_a_twin_left_out_of_the_pairs_and_the_ntg_gap_on_its_scale(tmp_path):
    """`gd-lr0.5` is GD at η = 0.5 though no preset file has that name; a perturbed twin is the
    central section's noise floor, not one more flow pair; the NTG gap is reported relative to
    the flow's ‖Θ̂‖₂ (recomputed with numpy from the archive)."""
    import numpy as np

    from flowsim import archive
    from flowsim.analysis.compare import compare_archive

    out = tmp_path / "tiny.h5"
    run_cli("run", TINY, "-o", out, "-q", "--set", "seeds=[0]", "--set", 'sweep."model.scaling"=[{kind="ntk"}]',
            "--set", "run.t_end=3.0", "--set", 'run.observe=["loss", "ntg"]', "--set",
            'run.solvers=["tsit5", "gd-lr0.5", {name="twin", kind="gd", learning_rate=0.5, perturbation=1e-9}]')
    with archive.open(out) as a:
        (run,) = a.runs.values()
        assert run.solvers["gd-lr0.5"].preset["learning_rate"] == 0.5
        assert run.solvers["gd-lr0.5"].t[-1] == 3.0 and run.solvers["gd-lr0.5"].step[-1] == 6
        ntg_gd, ntg_flow, t_flow = run.solvers["gd-lr0.5"]["ntg"], run.solvers["tsit5"]["ntg"], run.solvers["tsit5"].t
    rep = compare_archive(out)
    assert [(p.discrete, p.flow) for p in rep.pairs] == [("gd-lr0.5", "tsit5")]
    assert any("twin: perturbed twin(s)" in note for note in rep.notes)
    (pair,) = rep.pairs
    rows = [int(np.flatnonzero(np.isclose(t_flow, t))[0]) for t in pair.t]
    norm = lambda m: np.abs(np.linalg.eigvalsh(m)).max()   # noqa: E731
    expected = [norm(ntg_gd[k] - ntg_flow[j]) / norm(ntg_flow[j]) for k, j in zip(pair.step, rows)]
    np.testing.assert_allclose(pair.gaps["ntg_gap_rel"], expected, rtol=1e-10)
    assert "rel ‖ΔΘ̂‖" in run_cli("compare", out)


def test_a_preset_guess_gets_the_inline_form_never_another_number():
    rc, _, err = call_cli("show", "quickstart", "--set", 'run.solvers=["tsit5", "gd-lr0.x"]')
    assert rc == 2 and "did you mean" not in err, err                # not "gd-lr0.1": another step size
    assert 'gd-lr<η> for any step η > 0 (e.g. "gd-lr0.5")' in err
    assert '{ name = "gd-0.5", kind = "gd", learning_rate = 0.5 }' in err
    rc, _, err = call_cli("show", "quickstart", "--set", 'run.solvers=["tsit"]')
    assert rc == 2 and 'did you mean "tsit5"?' in err, err          # a spelling is still helped


def test_the_top_level_help_names_simulate():
    rc, out, _ = call_cli("--help")
    assert rc == 0
    assert "flowsim.simulate(model, data=(X, y)" in out and "flowsim.open(path)" in out, out


def test_accuracy_is_stored_in_the_runs_dtype():
    import jax.numpy as jnp

    from flowsim.observe.observables import _accuracy

    for dtype in (jnp.float32, jnp.float64):
        pred = jnp.asarray([[0.2, 0.9], [0.7, 0.1], [0.4, 0.6]], dtype=dtype)
        y = jnp.asarray([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=dtype)
        acc = _accuracy(pred, y)
        assert acc.dtype == dtype and float(acc) == pytest.approx(2 / 3, rel=1e-6)
