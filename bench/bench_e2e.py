"""End to end, as a user runs it: `flowsim run` processes, start-up and the cost of a
checkpoint; writes bench/results/e2e.md (bench/results/gpu/e2e.md with `--device gpu`).

    python bench/bench_e2e.py [--quick]

1. Two processes on the Caron et al. Fig. 1 problem (n = 100, d = 50, m = 2000, swish,
   asymmetric γ = α = 0.5, mse, float64, one seed, loss only, 60 log-spaced checkpoints,
   t_end = 20 000): `flowsim run` with the flow alone (tsit5) and with GD alone (η = 1), the
   compile cache warm (one untimed run of each first), then interleaved rounds; wall of the
   whole process, best of the rounds. Target: flow/GD ≤ 0.15.
2. Where a process's time goes before the first step: imports, `prepare` (data, κ_n,
   building the runs), creating the archive, and the driver's set-up and first compiled
   call, timed inside one process.
3. The fixed cost of a checkpoint: the same run (`run_scenario`: build, solve, observe,
   archive) to t_end = 2000 with 2 and with 482 log-spaced checkpoints asked for, in one
   process (compiled programs warm): the difference of the walls per row written (GD's
   checkpoints fall on its steps, so it writes 303 distinct rows of the 482). The flow's
   steps do not depend on its checkpoints (it reads a checkpoint inside a step from the
   step's dense output): its table gives both runs' step counts, which must be equal.
   Target ≤ 1 ms.
On a GPU (`bench/run --device gpu`), two runs of the papers' scale, compilation included:
4. `caron-fig1` (4 scalings × 5 seeds, m = 2000): the flow against GD, and 5 vmapped seeds
   against one (`paper_scale`).
5. `cohen-scale` (Cohen et al.'s fc-tanh, 199 210 parameters, 5 000 MNIST images, t = 150):
   each leg's evaluations and HVPs and its wall against GD's (`cohen_scale`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import ROOT, Table, arguments, fig1_scenario, fmt, report  # noqa: E402

# Timestamps of one run's phases, printed by a child process.
PHASES = """
import sys, time
t0 = time.perf_counter()
marks = []
def mark(name):
    marks.append((name, time.perf_counter()))
import flowsim.cli.command
flowsim.cli.command.load_engine()    # as `flowsim run` imports, and freezes what it imported
flowsim.cli.command.compilation_cache()
mark("import flowsim, JAX, Diffrax")
from flowsim.run import session
job = session.prepare(sys.argv[1], sys.argv[2:-1], output=sys.argv[-1] + ".h5", overwrite=True)
mark("prepare: data, kappa_n, build the runs")
writer = session.open_archive(job)
mark("create the archive")
from flowsim.run import driver
real = driver.Driver._chunk
def first(self, batch, state, rows, ahead=False):
    out = real(self, batch, state, rows, ahead)
    if len(marks) == 3:
        mark("driver set-up and the first compiled call")
    return out
driver.Driver._chunk = first
session.drive(job, writer, progress=False, report=lambda s: None)
writer.close()
mark("the rest of the run")
prev = t0
for name, t in marks:
    print(f"{name}\\t{t - prev:.4f}")
    prev = t
"""


# The processes keep Python's bytecode cache, as a user's Python does: this machine's
# environment sets PYTHONDONTWRITEBYTECODE, which would compile flowsim's own modules again
# in every process (about 0.06 s each; the untimed first runs below write the cache).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def flowsim_run(scenario: Path, solver: str, out: Path, *extra: str) -> float:
    """Wall time of one `flowsim run` process."""
    cmd = [sys.executable, "-m", "flowsim.cli", "run", str(scenario), "-q", "--overwrite", "-o", str(out),
           "--set", f'run.solvers=["{solver}"]', *extra]
    tic = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - tic


def cold_run(scenario: str, out: Path, *extra: str) -> float:
    """Wall time of one `flowsim run` process with an empty compile cache (compilation included)."""
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-m", "flowsim.cli", "run", scenario, "-q", "--overwrite", "-o", str(out), *extra],
                   check=True, cwd=ROOT, env={**ENV, "FLOWSIM_CACHE_DIR": ""}, stderr=subprocess.DEVNULL)
    return time.perf_counter() - tic


def solver_wall(path: Path, solver: str) -> tuple[float, int]:
    import flowsim

    with flowsim.open(path) as a:
        (run,) = a.runs.values()
        view = run.solvers[solver]
        return view.stats["wall_time"], view.n_checkpoints


def batches_wall(archive, solver: str) -> float:
    """The solver's wall over the archive's batches: the seeds of a sweep point run as one
    vmapped batch and each records the batch's wall (`docs/archive.md`: `wall_time`), so a
    point counts once, not once per seed."""
    walls: dict[int, float] = {}
    for run in archive.runs.values():
        walls[run.point] = max(walls.get(run.point, 0.0), run.solvers[solver].stats["wall_time"])
    return sum(walls.values())


def paper_scale(summary: Table) -> Table:
    """On a GPU: the paper-scale `caron-fig1` (4 scalings × 5 seeds, exact flow and 50 000 GD
    steps, NTG at 60 checkpoints) end to end with compilation (an empty compile cache), the
    flow's share of the solvers' wall, and 5 vmapped seeds against one (each sweep point's
    batch of seeds timed once: `batches_wall`)."""
    import flowsim

    tb = Table("Paper scale on the GPU: `flowsim run caron-fig1`", ["run", "process wall (s)", "flow solver (s)",
                                                                    "GD solver (s)", "flow / GD"])
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("5 seeds (the catalog)", []), ("1 seed", ["--set", "seeds={count=1}"])):
            out = Path(tmp) / "fig1.h5"
            wall = cold_run("caron-fig1", out, *extra)
            with flowsim.open(out) as a:
                flow, gd = batches_wall(a, "tsit5"), batches_wall(a, "gd-lr1")
            walls[label] = (wall, flow, gd)
            tb.add(label, fmt(wall), fmt(flow), fmt(gd), fmt(flow / gd))
    wall, flow, gd = walls["5 seeds (the catalog)"]
    summary.add("GPU: paper-scale caron-fig1 end to end, compilation included", f"{wall:.1f} s", "≤ 25 s",
                "yes" if wall <= 25 else "**no**")
    summary.add("GPU: flow / GD solver wall at paper scale", fmt(flow / gd), "≤ 0.05",
                "yes" if flow / gd <= 0.05 else "**no**")
    one = walls["1 seed"]
    summary.add("GPU: 5 vmapped seeds / 1 seed (solvers' wall)", fmt((flow + gd) / (one[1] + one[2])), "≤ 1.5",
                "yes" if (flow + gd) / (one[1] + one[2]) <= 1.5 else "**no**")
    return tb


def cohen_scale(summary: Table, sets: tuple[str, ...] = ()) -> Table:
    """`flowsim run cohen-scale` end to end (an empty compile cache; `sets`: `--set` options,
    for a smoke run on a CPU), tabulated by `cohen_scale_table`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cohen-scale.h5"
        return cohen_scale_table(out, cold_run("cohen-scale", out, *sets), summary)


def cohen_scale_table(path: Path, wall: float, summary: Table) -> Table:
    """A cohen-scale archive: each leg's steps, its evaluations and Hessian-vector products
    against GD η = 0.2's gradients (the most GD takes), its solving wall against that GD's
    (compilation apart) and the sharpness it ends at; `wall`: the process's."""
    import numpy as np

    import flowsim

    with flowsim.open(path) as a:
        (run,) = a.runs.values()
        t_end = float(np.asarray(run.solvers["gd-0.2"].t)[-1])
        legs = {name: (sv.stats, float(np.asarray(sv["sharpness"])[-1])) for name, sv in run.solvers.items()}
    tb = Table(f"The papers' scale: `flowsim run cohen-scale` (fc-tanh 784-200-200-10, 199 210 parameters, 5 000 "
               f"MNIST images) to t = {t_end:g}: the process took {wall:.0f} s",
               ["leg", "steps (rejected)", "evaluations + HVPs", "÷ GD η = 0.2's gradients", "solving (s)",
                "÷ GD η = 0.2's", "compiling (s)", "sharpness at the end"])
    cost = {name: st["vf_evals"] + st.get("hvps", 0) for name, (st, _) in legs.items()}
    gd_cost, gd_wall = cost["gd-0.2"], legs["gd-0.2"][0]["wall_time"]
    for name, (st, sharp) in legs.items():
        tb.add(name, f"{st['steps']} ({st['rejected']})", str(cost[name]), f"{fmt(cost[name] / gd_cost)}×",
               fmt(st["wall_time"]), f"{fmt(st['wall_time'] / gd_wall)}×", fmt(st["compile_time"]), fmt(sharp))
    flow = legs["rock4-pi"][0]
    summary.add("cohen-scale: flow (rock4) / GD η = 0.2, evaluations + HVPs over gradients",
                fmt(cost["rock4-pi"] / gd_cost), "", "")
    summary.add("cohen-scale: flow (rock4) / GD η = 0.2, solving wall", fmt(flow["wall_time"] / gd_wall), "", "")
    return tb


def main(argv=None) -> None:
    args = arguments(__doc__, argv)
    width, t_end, rounds = (500, 2000.0, 2) if args.quick else (2000, 20000.0, 3)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scenario = tmp / "fig1.toml"
        scenario.write_text(fig1_scenario("e2e", width, t_end, noise=0.1, init_std=2 ** 0.5, loss="mse"))
        solvers = {"flow (tsit5)": "tsit5", "GD (η = 1)": "gd-lr1"}
        for s in solvers.values():          # fill the compile cache
            flowsim_run(scenario, s, tmp / f"{s}.h5")
        walls = {k: [] for k in solvers}     # (process wall, the solver's own wall) per round
        for _ in range(rounds):
            for k, s in solvers.items():
                wall = flowsim_run(scenario, s, tmp / f"{s}.h5")
                walls[k].append((wall, solver_wall(tmp / f"{s}.h5", s)[0]))
        best = {k: min(v)[0] for k, v in walls.items()}
        inner = {k: min(v)[1] for k, v in walls.items()}     # the best round's
        flow, gd = best["flow (tsit5)"], best["GD (η = 1)"]

        e2e = Table(f"Two processes, `flowsim run` (n = 100, d = 50, m = {width}, one seed, loss at 60 "
                    f"checkpoints, t_end = {t_end:g}; compile cache warm; best of {rounds} interleaved rounds)",
                    ["process", "wall (s)", "solver's own wall (s)", "the rest: start-up, archive (s)"])
        for k in solvers:
            e2e.add(k, fmt(best[k]), fmt(inner[k]), fmt(best[k] - inner[k]))
        summary = Table("End to end", ["what", "measured", "target", "met?"])
        summary.add("flow process wall / GD process wall", fmt(flow / gd), "≤ 0.15",
                    "yes" if flow / gd <= 0.15 else "**no**")
        summary.add("flow solver / GD solver (inside the processes)",
                    fmt(inner["flow (tsit5)"] / inner["GD (η = 1)"]), "", "")

        phases = Table("Where the flow process's time goes (one process, cache warm)", ["phase", "seconds"])
        out = subprocess.run([sys.executable, "-c", PHASES, str(scenario), 'run.solvers=["tsit5"]', str(tmp / "ph")],
                             check=True, cwd=ROOT, capture_output=True, text=True, env=ENV).stdout
        for line in out.strip().splitlines():
            name, sec = line.split("\t")
            phases.add(name, fmt(float(sec)))

        import flowsim
        from flowsim.run.session import run_scenario

        # t_end 2000: GD's 2000 steps take about a second, so that the difference of the two
        # runs is not lost in the noise of two long ones (a checkpoint's cost does not depend
        # on the horizon). GD's checkpoints fall on its steps: of 482 log-spaced times, 303
        # are distinct steps, so the cost is per row written.
        few, many = 2, 482
        cost = Table("The fixed cost of a checkpoint (one process, programs warm, t_end = 2000, best of 3 "
                     f"alternating rounds; {few} and {many} log-spaced checkpoints asked for)",
                     ["solver", f"run, {few} (s)", f"run, {many} (s)", "rows written", "per row (ms)",
                      "steps, both runs"])
        for k, s in solvers.items():
            w, rows, steps = {few: [], many: []}, {}, {}
            for count in (few, many) * 4:      # the first round compiles
                path = tmp / f"c{count}.h5"
                tic = time.perf_counter()
                run_scenario(scenario, [f'run.solvers=["{s}"]', f'run.checkpoints={{count={count}, spacing="log"}}',
                                        "run.t_end=2000.0"],
                             output=path, overwrite=True, progress=False, report=lambda s: None)
                w[count].append(time.perf_counter() - tic)
                with flowsim.open(path) as a:
                    (run,) = a.runs.values()
                    view = run.solvers[s]
                    rows[count], steps[count] = len(view.t), view.stats["steps"]
            w = {c: min(v[1:]) for c, v in w.items()}
            per = (w[many] - w[few]) / (rows[many] - rows[few])
            cost.add(k, fmt(w[few]), fmt(w[many]), f"{rows[few]} / {rows[many]}", fmt(1e3 * per),
                     f"{steps[few]} / {steps[many]}")
            summary.add(f"{k}: fixed cost per checkpoint", f"{1e3 * per:.2f} ms", "≤ 1 ms",
                        "yes" if per <= 1e-3 else "**no**")

    import jax

    device = os.environ.get("FLOWSIM_BENCH_DEVICE", "cpu")
    tables = [summary, e2e, phases, cost]
    if device == "gpu" and not args.quick:
        tables += [paper_scale(summary), cohen_scale(summary)]
    report("e2e", f"`flowsim run` end to end ({device})", args, *tables,
           context=f"{len(jax.devices())} device(s); ratios measured in one run.")


if __name__ == "__main__":
    main()
