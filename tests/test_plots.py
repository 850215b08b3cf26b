"""Tests of flowsim.plots on small synthetic archives (no simulation needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure
from matplotlib.image import imread

from flowsim import archive as A
from flowsim import plots
from flowsim.config import Scaling, from_dict, load_solver, loads_scenario, to_dict
from flowsim.config.typed import ModuleModel, Preset
from flowsim.plots import TOP_NODES
from helpers import run_cli

POINTS = [
    ('model.scaling={kind="ntk"}', {"kind": "ntk"}),
    ('model.scaling={kind="asymmetric", gamma=0.5, alpha=0.7}',
     {"kind": "asymmetric", "gamma": 0.5, "alpha": 0.7}),
]
ALL_SERIES = ("loss", "test_loss", "ntg", "ntg_eig", "ntg_change_spectral", "weight_change")
BASE_TEXT = ('name = "x"\n[data]\nkind = "sphere-sine"\n[model]\nkind = "shallow"\n'
             '[run]\nt_end = 1.0\nsolvers = ["tsit5", "gd-lr1"]\n')
BASE = loads_scenario(BASE_TEXT).settings


def config(name="x", width=None, scaling=None):
    """A resolved config (typed) of a shallow model, as validation gives it."""
    model = BASE.model
    if width is not None:
        model = dataclasses.replace(model, width=width)
    if scaling is not None:
        model = dataclasses.replace(model, scaling=from_dict(Scaling, scaling))
    return dataclasses.replace(BASE, name=name, model=model)


K, G = 3, 128      # hessian_top's eigenvalues, hessian_density's grid points


def _series_spec(names, p, m):
    spec = {"hessian_top": ((K,), "float64", ("hessian_eig",)),
            "hessian_density": ((G,), "float64", ("density_grid",)),
            "hessian_density_grid": ((G,), "float64", ("density_grid",)),
            "loss": ((), "float64", ()), "test_loss": ((), "float64", ()),
            "ntg": ((p, p), "float64", ("point", "point_b")), "ntg_eig": ((p,), "float64", ("point",)),
            "ntg_change_spectral": ((), "float64", ()), "weight_change": ((m,), "float64", ("node",))}
    return {k: v for k, v in spec.items() if k in names}


def _rows(rng, t, scale, lam, ntg0, names, blow_up=False):
    """One checkpoint row of plausible values at time t."""
    decay = np.exp(-1e-3 * t * (1 + scale))
    loss = 50.0 * (decay if not blow_up else np.exp(2e-2 * t)) * (1 + 0.02 * rng.normal())
    drift = (1 - decay) * scale
    ntg = ntg0 * (1 - 0.3 * drift) + 0.05 * drift * np.eye(len(ntg0))
    row = {"loss": loss, "test_loss": 1.3 * loss + 5 * (1 - decay), "ntg": ntg,
           "ntg_eig": np.linalg.eigvalsh(ntg),
           "ntg_change_spectral": np.linalg.norm(ntg - ntg0, ord=2),
           "weight_change": np.sqrt(lam) * (1 - decay) * 3 * (1 + 0.1 * rng.random(len(lam))),
           **_hessian_row(rng, t)}
    return {k: v for k, v in row.items() if k in names}


def _hessian_row(rng, t):
    """The K largest eigenvalues, rising past 2 (2/η of gd-lr1) as the flow sharpens, and a
    density on a grid of the row's own: a bulk at 0 and a bump at each of the K, normalised."""
    sharp = (1.5 + (1 - np.exp(-t / 500.0))) * (1 + 0.02 * rng.normal())
    top = sharp * np.array([1.0, 0.7, 0.5])[:K]
    grid = np.linspace(-0.2, 1.1 * sharp, G)
    dens = 0.9 * np.exp(-0.5 * (grid / 0.05) ** 2) + sum(0.1 / K * np.exp(-0.5 * ((grid - e) / 0.02) ** 2)
                                                          for e in top)
    return {"hessian_top": top, "hessian_density": dens / np.trapezoid(dens, grid), "hessian_density_grid": grid}


def make_archive(path, *, name="synthetic-fig1", seeds=(0, 1, 2), points=POINTS,
                 series=ALL_SERIES, diverge=True, k=21, m=40, p=8, d=3, times=None,
                 solvers=("tsit5", "gd-lr1"), widths=None, sweep="", model=None, loss=None):
    """A small archive as the driver writes it: points × seeds runs, each with `solvers`
    (preset names, or ``(name, {"kind": "gd", "learning_rate": η})``).

    `widths` gives each point its width (else `m`), `sweep` the scenario's ``[sweep]`` table
    in TOML (as `flowsim compare` reads it), `model` a typed model for every run in place of
    the shallow one (`m` is then its number of leaves), `loss` the loss kind. With ``diverge`` the GD run of the
    last point, first seed, blows up and stops early with status "diverged".
    """
    rng = np.random.default_rng(0)
    settings = loads_scenario(BASE_TEXT + sweep).settings if sweep else BASE
    if loss is not None:
        settings = dataclasses.replace(settings, loss=dataclasses.replace(settings.loss, kind=loss))
    resolved = to_dict(dataclasses.replace(settings, name=name))
    presets = {}
    for s in solvers:
        name_s, spec = (s, load_solver(s)) if isinstance(s, str) else (s[0], to_dict(from_dict(Preset, s[1])))
        presets[name_s] = spec
    w = A.ArchiveWriter.create(path, scenario_text=f'name = "{name}"\n', resolved=resolved,
                               provenance={}, dtype="float64")
    try:
        w.write_data({"X_train": rng.normal(size=(p, d)), "y_train": rng.normal(size=(p, 1))})
        ts = np.linspace(0.0, 2000.0, k) if times is None else np.asarray(times, float)
        k = len(ts)
        for pi, (label, scaling) in enumerate(points):
            width = m if widths is None else widths[pi]
            params = dataclasses.replace(config(name, width, scaling), loss=settings.loss)
            params = to_dict(params if model is None else dataclasses.replace(params, model=model))
            gamma = 1.0 if scaling["kind"] == "ntk" else scaling.get("gamma", 0.0)
            lam = gamma / m + (1 - gamma) * (np.arange(1, m + 1) ** -1.4) / np.sum(np.arange(1, m + 1) ** -1.4)
            for seed in seeds:
                run = f"p{pi}-s{seed}"
                a = rng.normal(size=(p, p))
                ntg0 = a @ a.T / p + 0.2 * np.eye(p)
                kappa = float(np.linalg.eigvalsh(ntg0)[0]) * 0.9
                w.create_run(run, params=params, seed=seed, label=label, point=pi,
                             init={"W0": rng.normal(size=(m, d)), "a": np.sign(rng.normal(size=m)),
                                   "lam": lam, "c": np.zeros(1), "kappa_n": np.float64(kappa),
                                   "loss0": np.float64(50.0)})
                for sname, preset in presets.items():
                    discrete = preset["kind"] == "gd"
                    w.create_solver(run, sname, preset=preset, series=_series_spec(series, p, m),
                                    discrete=discrete)
                    blow = diverge and discrete and pi == len(points) - 1 and seed == seeds[0]
                    n = k // 2 if blow else k
                    for i in range(n):
                        w.append(run, sname, t=ts[i], step=round(ts[i] / preset["learning_rate"]) if discrete else None,
                                 values=_rows(rng, ts[i], pi, lam, ntg0, series, blow),
                                 checkpoint={"x": np.zeros(1)}, checkpoint_attrs={})
                    w.set_status(run, sname, status="diverged" if blow else "done",
                                 stats={}, wall_time=0.1)
    finally:
        w.close()
    return path


@pytest.fixture(scope="module")
def full_archive(tmp_path_factory):
    return make_archive(tmp_path_factory.mktemp("plots") / "full.h5")


def _texts(fig):
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


@pytest.mark.slow
def test_plot_archive_writes_nontrivial_files(full_archive, tmp_path):
    files = plots.plot_archive(full_archive, tmp_path / "figs")
    names = sorted(f.name for f in files)
    assert names == ["synthetic-fig1-fig1.pdf", "synthetic-fig1-fig1.png",
                     "synthetic-fig1-test.pdf", "synthetic-fig1-test.png"]
    for f in files:
        assert f.exists() and f.stat().st_size > 5_000
    png = tmp_path / "figs" / "synthetic-fig1-fig1.png"
    assert png.stat().st_size > 20_000
    img = imread(png)
    assert img.ndim == 3 and img.shape[0] > 500
    assert np.ptp(img[..., :3]) > 0.5                 # not one colour
    grey = (img[::4, ::4, :3] @ np.array([0.299, 0.587, 0.114]) * 255).astype(np.uint8)
    assert len(np.unique(grey)) > 30                  # lines, text, bands: many shades
    assert (grey < 128).mean() > 0.002                # some ink on the white page


def test_fig1_panels_and_legend(full_archive):
    with A.open(full_archive) as arch:
        traces = plots.gather(arch)
    assert len(traces) == 4                                     # 2 points × 2 solvers
    assert all(tr.series["loss"].shape[0] == 3 for tr in traces)  # 3 seeds stacked
    fig = plots.figure_fig1(traces, "synthetic")
    assert len(fig.axes) == 4
    assert all(ax.has_data() for ax in fig.axes)
    texts = _texts(fig)
    assert "NTK" in texts and "asymmetric γ=0.5 α=0.7" in texts
    gd = next(t for t in texts if t.startswith("gd-lr1"))
    assert "diverged" in gd and "η=1" in gd
    # the diverged seed is NaN-padded past its end, and its end is marked with ×
    gd1 = next(tr for tr in traces if tr.solver == "gd-lr1" and tr.point == 1)
    assert gd1.early_ends == [(0, "diverged")]
    assert np.isnan(gd1.series["loss"][0, -1]) and np.isfinite(gd1.series["loss"][1, -1])
    marks = [ln for ln in fig.axes[0].lines if ln.get_marker() == "x"]
    assert len(marks) == 1
    # theory overlays: two horizontal γκ_n/4 lines on (d), two flow bounds on (a)
    dotted = [ln for ln in fig.axes[3].lines if ln.get_linestyle() == ":"]
    assert len(dotted) == 2


def test_missing_series_drawn_as_not_recorded(tmp_path):
    path = make_archive(tmp_path / "few.h5", series=("loss",), seeds=(0,), diverge=True)
    files = plots.plot_archive(path, tmp_path / "out", formats=("png",))
    assert [f.name for f in files] == ["synthetic-fig1-fig1.png"]   # no test loss: no test fig
    with A.open(path) as arch:
        fig = plots.figure_fig1(plots.gather(arch), "few")
    assert len(fig.axes) == 1 and fig.axes[0].has_data()     # the panels with nothing to draw are left out
    assert fig._suptitle.get_text().endswith("\nnot recorded: weight change, NTG change, NTG eigenvalues")


def test_ntg_fallbacks_from_full_matrix(tmp_path):
    path = make_archive(tmp_path / "ntg.h5", series=("loss", "ntg"), seeds=(0, 1),
                        diverge=False, points=POINTS[:1])
    with A.open(path) as arch:
        traces = plots.gather(arch)
    tr = traces[0]
    assert tr.series["ntg_change"][:, 0] == pytest.approx(0.0)
    assert np.all(np.isfinite(tr.series["eig_min"]))
    fig = plots.figure_fig1(traces, "ntg")
    assert [ax.get_title(loc="left") for ax in fig.axes] == [
        "(a) training loss", "(b) NTG change", "(c) smallest NTG eigenvalue"]
    assert fig._suptitle.get_text().endswith("\nnot recorded: weight change")


def test_short_label():
    asym = config(scaling={"kind": "asymmetric", "gamma": 0.5, "alpha": 0.7})
    assert plots.short_label(asym, 'model.scaling={kind="asymmetric", gamma=0.5, alpha=0.7}') \
        == "asymmetric γ=0.5 α=0.7"
    assert plots.short_label(config(scaling={"kind": "ntk"}), 'model.scaling={kind="ntk"}') == "NTK"
    assert plots.short_label(asym, "") == "asymmetric γ=0.5 α=0.7"        # no sweep
    assert plots.short_label(None, 'model.scaling={kind="single", gamma=0.0}') == "single γ=0"
    both = config(width=200, scaling={"kind": "ntk"})
    assert plots.short_label(both, 'model.scaling={kind="ntk"}; model.width=200') == "NTK, m=200"
    assert plots.short_label(None, 'data={kind="uci", name="concrete"}') == "data=uci name=concrete"
    assert plots.short_label(None, "model.scaling.gamma=0.25") == "γ=0.25"


def test_log_spaced_times_use_symlog_axis(tmp_path):
    times = np.concatenate([[0.0], np.geomspace(1.0, 2000.0, 15)])
    path = make_archive(tmp_path / "log.h5", seeds=(0,), times=times, points=POINTS[:1])
    with A.open(path) as arch:
        fig = plots.figure_fig1(plots.gather(arch), "log")
    assert all(ax.get_xscale() == "symlog" for ax in fig.axes)


@pytest.mark.parametrize("rows, marked", [(11, True), (21, False)])
def test_a_line_of_few_rows_marks_each(tmp_path, rows, marked):
    """cohen-scale-quick's 11 rows are marked, so the straight segments between them (100 GD
    steps) are not read as dynamics; a line of more than `MARKED_ROWS` is not."""
    path = make_archive(tmp_path / "few.h5", seeds=(0,), points=POINTS[:1], k=rows, diverge=False)
    with A.open(path) as arch:
        fig = plots.figure_fig1(plots.gather(arch), "few")
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) == rows]
    assert lines and all((ln.get_marker() == "o") == marked for ln in lines), [ln.get_marker() for ln in lines]


# --------------------------------------------------------------------------------------
# Ticks, labels, colours and legends, through `flowsim plot` and `flowsim compare -o`
# (issue 52, the newcomer's item 6): asserted on the figures the commands save.
# --------------------------------------------------------------------------------------

@pytest.fixture
def saved(monkeypatch):
    """file name -> the Figure a command saved under it (each still written)."""
    figures, real = {}, Figure.savefig

    def keep(fig, fname, *args, **kw):
        figures[Path(fname).name] = fig
        return real(fig, fname, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _renderer(fig):
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    return renderer


def _tick_labels(ax, axis="x"):
    """(text, position) of the tick labels drawn on `axis` (non-empty, inside the view)."""
    ax_ = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = sorted(ax_.get_view_interval())
    out = []
    for label in ax_.get_majorticklabels() + ax_.get_minorticklabels():
        pos = label.get_position()[0 if axis == "x" else 1]
        if label.get_visible() and label.get_text() and lo <= pos <= hi:
            out.append((label, pos))
    return sorted(out, key=lambda lp: lp[1])


def _overlaps(texts, renderer):
    """The pairs of `texts` whose drawn boxes overlap."""
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
            if min(ba.x1, bb.x1) > max(ba.x0, bb.x0) and min(ba.y1, bb.y1) > max(ba.y0, bb.y0)]


def _plain(text: str) -> str:
    return text.replace("$", "").replace("\\mathdefault", "").replace("{", "").replace("}", "").replace("−", "-")


def test_a_width_sweep_is_labelled_at_its_widths(tmp_path, saved):
    """`flowsim compare -o` over widths 25, 100, 400 (the README's walkthrough) labels those
    three values on each panel's log x-axis, and nothing between them (`3×10¹4×10¹6×10¹`
    collided there)."""
    widths = [25, 100, 400]
    path = make_archive(tmp_path / "width.h5", name="width", seeds=(0, 1), diverge=False,
                        points=[(f"model.width={w}", {"kind": "ntk"}) for w in widths], widths=widths,
                        sweep='[sweep]\n"model.width" = [25, 100, 400]\n', series=("loss", "weight_change"))
    run_cli("compare", path, "-o", tmp_path / "figs")
    fig = saved["width-compare-sweep-model.width.png"]
    renderer = _renderer(fig)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        ticks = _tick_labels(ax)
        assert [t.get_text() for t, _ in ticks] == ["25", "100", "400"]
        assert [pos for _, pos in ticks] == widths
        assert not _overlaps([t for t, _ in ticks], renderer)


def test_a_ladder_of_two_steps_labels_both(tmp_path, saved):
    """cohen-scale-quick's ladder, η = 0.04 and 0.02, had one x tick (2⁻⁵) between its two
    points: each step of the ladder is labelled, as written."""
    path = make_archive(tmp_path / "ladder.h5", name="ladder", seeds=(0,), points=POINTS[:1], diverge=False,
                        times=np.linspace(0.0, 8.0, 11), series=("loss",),
                        solvers=("tsit5", ("gd-0.04", {"kind": "gd", "learning_rate": 0.04}),
                                 ("gd-0.02", {"kind": "gd", "learning_rate": 0.02})))
    run_cli("compare", path, "-o", tmp_path / "figs")
    fig = saved["ladder-compare-p0-s0.png"]
    renderer = _renderer(fig)
    ladder = next(ax for ax in fig.axes if "step-size ladder" in ax.get_title())
    ticks = _tick_labels(ladder)
    assert [(t.get_text(), pos) for t, pos in ticks] == [("0.02", 0.02), ("0.04", 0.04)]
    assert not _overlaps([t for t, _ in ticks], renderer)


def test_a_log_axis_over_a_decade_reads_as_plain_numbers(tmp_path, saved):
    """Times 0.8 to 8 (cohen-scale-quick shortened): matplotlib labels 2×10⁰, 3×10⁰, … between
    the decades, which run together on a narrow panel; every log axis of every figure
    `flowsim compare -o` and `flowsim plot` save reads 1, 2, 3 … instead, no label over another."""
    path = make_archive(tmp_path / "short.h5", name="short", seeds=(0,), points=POINTS[:1], diverge=False,
                        times=np.linspace(0.0, 8.0, 11), series=("loss", "weight_change"),
                        solvers=("tsit5", ("gd-0.04", {"kind": "gd", "learning_rate": 0.04}),
                                 ("gd-0.02", {"kind": "gd", "learning_rate": 0.02})))
    run_cli("compare", path, "-o", tmp_path / "figs")
    run_cli("plot", path, "-o", tmp_path / "figs")
    gaps = saved["short-compare-p0-s0.png"].axes[0]
    assert [_plain(t.get_text()) for t, _ in _tick_labels(gaps)] == ["1", "2", "3", "4", "6"]
    checked = 0
    for name, fig in saved.items():
        renderer = _renderer(fig)
        for ax in fig.axes:
            for axis in "xy":
                labels = [t for t, _ in _tick_labels(ax, axis)]
                assert not any("times" in t.get_text() for t in labels), (name, [t.get_text() for t in labels])
                assert not _overlaps(labels, renderer), (name, [t.get_text() for t in labels])
                checked += len(labels)
    assert checked > 50


def test_time_axis_from_zero_over_decades_keeps_zero_apart(tmp_path, saved):
    """Log-spaced checkpoints from t = 0.05 (the README's `flowsim.simulate` example): the
    symlog time axis labels 0 and the decades, none drawn over another (`0` sat on `10⁻²`)."""
    times = np.concatenate([[0.0], np.geomspace(0.05, 50.0, 19)])
    path = make_archive(tmp_path / "sim.h5", name="simulate", seeds=(0, 1), points=POINTS[:1], times=times,
                        diverge=False)
    run_cli("plot", path, "-o", tmp_path / "figs")
    fig = saved["simulate-fig1.png"]
    renderer = _renderer(fig)
    for ax in fig.axes:
        assert ax.get_xscale() == "symlog"
        ticks = _tick_labels(ax)
        assert [_plain(t.get_text()) for t, _ in ticks] == ["0", "10^-2", "10^-1", "10^0", "10^1"]
        assert not _overlaps([t for t, _ in ticks], renderer), [t.get_text() for t, _ in ticks]


# an Equinox model as `flowsim.simulate` records it (the README's MLP)
MODULE = ModuleModel(kind="module", source="tests.make_model", trainable="is_inexact_array", parameters=1249,
                     leaves=("layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                             "layers.2.weight", "layers.2.bias"), digest="0" * 16)


def test_leaf_names_do_not_overlap(tmp_path, saved):
    """Panel (b) of an Equinox model names its five top leaves beside the axes, at their
    curves' ends; six leaves moving alike (ends within 10 %) are pushed apart, each name in
    the figure, none over another or over the panel."""
    leaves = MODULE.leaves
    path = make_archive(tmp_path / "leaves.h5", name="simulate", seeds=(0, 1), points=POINTS[:1], m=len(leaves),
                        model=MODULE, diverge=False, series=("loss", "weight_change", "ntg_eig"))
    run_cli("plot", path, "-o", tmp_path / "figs")
    fig = saved["simulate-fig1.png"]
    renderer = _renderer(fig)
    panel = fig.axes[1]
    names = [t for t in panel.texts if t.get_text() in leaves]
    assert len(names) == TOP_NODES == len({t.get_text() for t in names})
    assert not _overlaps(names, renderer), [t.get_text() for t in names]
    frame = panel.get_window_extent(renderer)
    for t in names:
        box = t.get_window_extent(renderer)
        assert box.x0 >= frame.x1 and box.x1 <= fig.bbox.x1        # beside the panel, inside the figure
        assert frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1     # within its height


def test_one_point_colours_each_solver_and_one_seed_has_no_band(tmp_path, saved):
    """cohen-scale-quick's fig1 (no sweep, one seed): the flow and each GD drawn in colours of
    their own, shown in the solver legend, and no seed band described for one seed."""
    path = make_archive(tmp_path / "one.h5", name="cohen", seeds=(0,), points=[("", {"kind": "ntk"})], model=MODULE,
                        m=len(MODULE.leaves), diverge=False,
                        times=np.linspace(0.0, 8.0, 11), series=("loss",),
                        solvers=("tsit5", ("gd-0.04", {"kind": "gd", "learning_rate": 0.04}),
                                 ("gd-0.02", {"kind": "gd", "learning_rate": 0.02})))
    run_cli("plot", path, "-o", tmp_path / "figs")
    fig = saved["cohen-fig1.png"]
    drawn = {ln.get_color() for ln in fig.axes[0].lines if len(ln.get_xdata()) == 11}
    assert len(drawn) == 3
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["solver", "tsit5: flow", "gd-0.04: GD η=0.04", "gd-0.02: GD η=0.02"]
    assert {h.get_color() for h in legend.legend_handles[1:]} == drawn
    # two seeds: the band is drawn and described
    path = make_archive(tmp_path / "two.h5", name="cohen2", seeds=(0, 1), points=[("", {"kind": "ntk"})],
                        model=MODULE, m=len(MODULE.leaves), diverge=False, series=("loss",))
    run_cli("plot", path, "-o", tmp_path / "figs")
    assert "line: mean over seeds, band: min–max" in _texts(saved["cohen2-fig1.png"])


@pytest.mark.slow
def test_the_theory_legend_names_the_panels_its_bounds_are_on(tmp_path, saved):
    """The dotted bounds' legend names the panels they are drawn on: (a) and (d) with every
    panel; (a) alone without the NTG's; nothing where the loss is not half-sse and (d) is
    not drawn (caron-fig1-quick's mse loss was said to have a bound on (a))."""
    def words(name, **kw):
        path = make_archive(tmp_path / f"{name}.h5", name=name, seeds=(0,), diverge=False, **kw)
        run_cli("plot", path, "-o", tmp_path / "figs")
        return [t for t in _texts(saved[f"{name}-fig1.png"]) if t.startswith("theory")]

    assert words("all") == [r"theory: $\gamma\kappa_n/4$ on (d), $L_0\,e^{-\gamma\kappa_n t/2}$ on (a)"]
    assert words("no-ntg", series=("loss", "weight_change")) == [r"theory: $L_0\,e^{-\gamma\kappa_n t/2}$ on (a)"]
    assert words("mse", series=("loss", "weight_change"), loss="mse") == []


# --------------------------------------------------------------------------------------
# The Hessian's spectrum (issue 53): `hessian_top` against 2/η, `hessian_density` as a heat
# map over time, from `flowsim plot` and `flowsim compare -o`; absent series, no figure.
# --------------------------------------------------------------------------------------

HESSIAN = ("loss", "hessian_top", "hessian_density", "hessian_density_grid")


def _mesh(ax):
    return next(c for c in ax.collections if isinstance(c, QuadMesh))


def _raw(path, point, solver, name):
    """Every seed's rows of series `name` of a sweep point's solver, as the archive holds them."""
    with A.open(path) as arch:
        return [np.asarray(run.solvers[solver][name], float) for run in arch.runs.values() if run.point == point]


def test_plot_draws_the_top_eigenvalues_and_the_density_over_time(tmp_path, saved):
    path = make_archive(tmp_path / "eig.h5", name="eig", seeds=(0, 1), diverge=False, series=HESSIAN)
    run_cli("plot", path, "-o", tmp_path / "figs")
    assert (tmp_path / "figs" / "eig-hessian.png").stat().st_size > 20_000
    fig = saved["eig-hessian.png"]
    top, *heat = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert top.get_title(loc="left") == "(a) the 3 largest Hessian eigenvalues (bold: the largest); dotted: 2/η"
    # each point × solver: K lines, the largest the mean over the seeds of the archive's rows
    rows = [ln for ln in top.lines if len(ln.get_xdata()) == 21]
    assert len(rows) == 2 * 2 * K
    largest = np.mean([r[:, 0] for r in _raw(path, 1, "gd-lr1", "hessian_top")], axis=0)
    assert any(np.allclose(ln.get_ydata(), largest, rtol=1e-12) for ln in rows)
    limits = [ln.get_ydata()[0] for ln in top.lines if ln.get_linestyle() == ":"]
    assert limits == [2.0]                                  # gd-lr1's 2/η
    assert [t.get_text() for t in top.get_legend().get_texts()] == [
        "NTK, tsit5: flow", "NTK, gd-lr1: GD η=1", "asymmetric γ=0.5 α=0.7, tsit5: flow",
        "asymmetric γ=0.5 α=0.7, gd-lr1: GD η=1"]
    # a heat map per point × solver: the seeds' densities interpolated onto one grid, averaged
    assert [ax.get_title(loc="left") for ax in heat] == [
        "(b) spectral density: NTK, tsit5: flow", "(c) spectral density: NTK, gd-lr1: GD η=1",
        "(d) spectral density: asymmetric γ=0.5 α=0.7, tsit5: flow",
        "(e) spectral density: asymmetric γ=0.5 α=0.7, gd-lr1: GD η=1"]
    mesh = _mesh(heat[3])
    cells = np.asarray(mesh.get_array()).reshape(-1, 21)    # (eigenvalue cells, rows)
    every = [g for p in (0, 1) for solver in ("tsit5", "gd-lr1") for g in _raw(path, p, solver, "hessian_density_grid")]
    grid = np.linspace(min(g.min() for g in every), max(g.max() for g in every), 240)   # every panel's
    grids, dens = _raw(path, 1, "gd-lr1", "hessian_density_grid"), _raw(path, 1, "gd-lr1", "hessian_density")
    for j in (0, 10, 20):
        expected = np.mean([np.interp(grid, g[j], d[j], left=0, right=0) for g, d in zip(grids, dens)], axis=0)
        np.testing.assert_allclose(cells[:, j], expected, rtol=1e-12, atol=0)
    assert mesh.norm.vmax == pytest.approx(max(d.max() for p in (0, 1) for solver in ("tsit5", "gd-lr1")
                                               for d in _raw(path, p, solver, "hessian_density")), rel=0.02)
    white = [ln for ln in heat[3].lines if ln.get_linestyle() == ":"]
    assert [ln.get_ydata()[0] for ln in white] == [2.0]     # GD's own 2/η over its density
    assert not [ln for ln in heat[2].lines if ln.get_linestyle() == ":"]   # a flow has none


def test_compare_draws_each_solver_s_spectrum(tmp_path, saved):
    """`flowsim compare -o`: per run, a figure of each solver's top eigenvalues (GD in its
    η's colour, dashed; the flow grey) against 2/η, and a heat map per solver."""
    path = make_archive(tmp_path / "eig.h5", name="eig", seeds=(0,), points=POINTS[:1], diverge=False,
                        series=HESSIAN)
    run_cli("compare", path, "-o", tmp_path / "figs")
    fig = saved["eig-compare-p0-s0-hessian.png"]
    run = saved["eig-compare-p0-s0.png"]
    assert fig is not run
    top, flow, gd = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    rows = {(ln.get_color() if isinstance(ln.get_color(), str) else tuple(ln.get_color()), ln.get_linestyle())
            for ln in top.lines if len(ln.get_xdata()) == 21}
    assert len(rows) == 2 and ("0.25", "-") in rows                  # the flow grey and solid, GD dashed
    (raw,) = _raw(path, 0, "gd-lr1", "hessian_top")
    drawn = {tuple(np.round(ln.get_ydata(), 12)) for ln in top.lines if ln.get_linestyle() == "--"}
    assert drawn == {tuple(np.round(raw[:, r], 12)) for r in range(K)}
    assert [ln.get_ydata()[0] for ln in top.lines if ln.get_linestyle() == ":"] == [2.0]
    assert flow.get_title(loc="left") == "(b) spectral density: tsit5: flow"
    assert gd.get_title(loc="left") == "(c) spectral density: gd-lr1: GD η=1"
    assert _mesh(gd).get_array().shape == (240, 21)


@pytest.mark.parametrize("series, panels", [
    (("loss",), None),                                                      # neither: no figure
    (("loss", "hessian_top"), ["(a) the 3 largest Hessian eigenvalues (bold: the largest); dotted: 2/η"]),
    (("loss", "hessian_density", "hessian_density_grid"), ["(a) spectral density: tsit5: flow",
                                                           "(b) spectral density: gd-lr1: GD η=1"]),
])
def test_the_spectrum_shows_what_is_recorded(tmp_path, saved, series, panels):
    path = make_archive(tmp_path / "some.h5", name="some", seeds=(0,), points=[("", {"kind": "ntk"})],
                        model=MODULE, m=len(MODULE.leaves), diverge=False, series=series)
    run_cli("plot", path, "-o", tmp_path / "plots")
    run_cli("compare", path, "-o", tmp_path / "compare")
    for name in ("some-hessian.png", "some-compare-p0-s0-hessian.png"):
        if panels is None:
            assert name not in saved
            continue
        fig = saved[name]
        assert [ax.get_title(loc="left") for ax in fig.axes if ax.get_label() != "<colorbar>"] == panels
        assert len(fig.axes) == len(panels) + ("hessian_density" in series)      # one colour bar


def test_a_log_axis_in_the_thousands_reads_as_plain_numbers():
    """A preconditioned sharpness from 1 000 to 4 000 (central-rmsprop to step 250): its ticks
    read 1000 … 4000, not `1e+03` … `4e+03` (a 3-digit `g` format wrote them in exponents)."""
    from flowsim.plots.style import plain_multiples

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0.01, 0.25], [1000.0, 4000.0])
    ax.set_yscale("log")
    plain_multiples(fig)
    _renderer(fig)
    texts = [_plain(t.get_text()) for t, _ in _tick_labels(ax, "y")]
    assert texts and all("e" not in t for t in texts), texts
    assert {"1000", "2000", "3000", "4000"} <= set(texts), texts
