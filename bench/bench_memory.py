"""Memory at paper scale: archive size and peak RSS of `flowsim run caron-fig1` (n = 100,
d = 50, m = 2000, 5 seeds, 4 scalings, tsit5 + GD η = 1); writes bench/results/memory.md.

    python bench/bench_memory.py [--quick]

Each run is a `flowsim` subprocess; its peak RSS is the child's ru_maxrss. The horizon is
shortened (t_end = 500 instead of 50 000: the memory a run holds does not depend on it, only
its duration does). Three runs show what is kept:
- 60 checkpoints (the catalog's) vs 10 checkpoints: if the peak RSS is the same, no
  whole-trajectory array is held in memory (rows go to the archive as they are made);
- the same with `weights` added to `run.observe`: the archive grows by the weights of the
  requested checkpoints only (rows × m × d × 8 bytes per run and solver, before compression).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import Table, arguments, report  # noqa: E402


def run(sets: list[str], out: Path) -> tuple[float, float]:
    """Peak RSS (MiB) and wall of one `flowsim run caron-fig1` subprocess."""
    code = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    cmd = [sys.executable, "-c", code, sys.executable, "-m", "flowsim.cli", "run", "caron-fig1", "-o", str(out),
           "--overwrite", "-q", *(x for s in sets for x in ("--set", s))]
    tic = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return int(p.stdout.strip().splitlines()[-1]) / 1024, time.perf_counter() - tic


def weights_rows(path: Path) -> tuple[int, int, bool]:
    """(runs × solvers holding a `weights` series, total weight rows stored, whether every
    group holds exactly one weight row per checkpoint row)."""
    groups, rows, exact = 0, 0, True
    with h5py.File(path, "r") as f:
        for run in f["runs"].values():
            for g in run.values():
                if isinstance(g, h5py.Group) and "weights" in g:
                    groups += 1
                    rows += g["weights"].shape[0]
                    exact &= g["weights"].shape[0] == g["t"].shape[0]
    return groups, rows, exact


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    t_end = 50.0 if args.quick else 500.0
    base = [f"run.t_end={t_end}"] + (["seeds=[0]", "model.width=500"] if args.quick else [])
    obs = '["loss", "test_loss", "ntg_eig", "ntg_change", "weight_change"]'
    obs_w = '["loss", "test_loss", "ntg_eig", "ntg_change", "weight_change", "weights"]'
    tb = Table(f"flowsim run caron-fig1 (n = 100, d = 50, m = {500 if args.quick else 2000}, "
               f"{1 if args.quick else 5} seed(s) × 4 scalings, tsit5 + GD η = 1), t_end = {t_end:g}",
               ["variant", "peak RSS", "archive size", "weight rows stored", "wall"])
    with tempfile.TemporaryDirectory() as tmp:
        res = {}
        for label, sets in (("60 log checkpoints (catalog)", ['run.checkpoints={count=60, spacing="log"}', f"run.observe={obs}"]),
                            ("10 log checkpoints", ['run.checkpoints={count=10, spacing="log"}', f"run.observe={obs}"]),
                            ("60 checkpoints + `weights` observed", ['run.checkpoints={count=60, spacing="log"}',
                                                                     f"run.observe={obs_w}"])):
            out = Path(tmp) / f"{len(res)}.h5"
            rss, wall = run(base + sets, out)
            size = out.stat().st_size / 2**20
            groups, rows, exact = weights_rows(out)
            res[label] = (rss, size, groups, exact)
            tb.add(label, f"{rss:.0f} MiB", f"{size:.1f} MiB", f"{rows} in {groups} solver groups" if groups else "none",
                   f"{wall:.0f} s")
            print(label, rss, size, rows, flush=True)
    (r60, s60, g60, _), (r10, s10, g10, _), (rw, sw, gw, exact) = res.values()
    summary = Table("Memory" + (" (--quick)" if args.quick else ""), ["what", "measured", "target", "met?"])
    summary.add("peak RSS, 60 vs 10 checkpoints", f"{r60:.0f} vs {r10:.0f} MiB ({100 * (r60 / r10 - 1):+.1f} %)",
                "independent of the checkpoint count", "yes" if r60 <= 1.05 * r10 else "**no**")
    ok = g60 == g10 == 0 and gw > 0 and exact
    summary.add("weights stored", "none unless observed; then one row per checkpoint row" if ok else
                f"groups {g60}/{g10}/{gw}, one row per checkpoint: {exact}", "only at requested checkpoints",
                "yes" if ok else "**no**")
    report("memory", "archive size and peak RSS at paper scale", args, summary, tb,
           context=f"Horizon shortened to t_end = {t_end:g} (memory does not depend on it).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
