"""Deterministic archive content for tests/test_archive.py, and (run as a script) the writer
its crash tests SIGKILL: `python tests/archive_sample.py PATH` appends rows until killed,
printing "ready" once and then "done k" after each committed row k. Rows are committed three
at a time (as the driver batches its commits): rows 3j and 3j+1 are appended without a
state, row 3j+2 with one. `python tests/archive_sample.py PATH K` stops writing after row K
is committed and waits to be killed (a kill between two writes)."""

COMMIT_EVERY = 3

import sys
import time

import numpy as np

SERIES = {
    "loss": ((), "float64", ()),
    "ntg": ((50, 50), "float64", ("point", "point_b")),
    "weights": ((200, 20), "float64", ("node", "feature")),
    "eig": ((50,), "float32", ("point",)),
}


def rows(k: int) -> dict[str, np.ndarray]:
    """Deterministic series row k (so a reader can check every row it finds)."""
    base = np.arange(50 * 50, dtype=np.float64).reshape(50, 50)
    return {"loss": np.float64(1.0 / (k + 1)),
            "ntg": base * 0.001 + k,
            "weights": np.sin(np.arange(4000.0).reshape(200, 20) + k),
            "eig": np.arange(50, dtype=np.float32) - k}


def state(k: int) -> tuple[dict[str, np.ndarray], dict]:
    """Deterministic checkpoint after row k."""
    return ({"W": np.cos(np.arange(4000.0).reshape(200, 20) * (k + 1)),
             "key": np.array([k, k + 1], dtype=np.uint32)},
            {"k": k, "name": "x" * (k % 7)})


def write_until_killed(path: str, last: int | None = None) -> None:
    from flowsim.archive import ArchiveWriter     # imports no JAX: the child starts fast

    w = ArchiveWriter.create(path, scenario_text="kill", resolved={}, provenance={}, dtype="float64")
    w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(3)})
    w.create_solver("r0", "gd", preset={}, series=SERIES, discrete=True)
    print("ready", flush=True)
    for k in range(100000):
        arrays, attrs = state(k) if (k + 1) % COMMIT_EVERY == 0 else (None, None)
        w.append("r0", "gd", t=0.1 * k, step=10 * k, values=rows(k), checkpoint=arrays,
                 checkpoint_attrs=attrs)
        if arrays is not None:
            print(f"done {k}", flush=True)
        if k == last:
            time.sleep(3600)
        if k % 5 == 4:   # exercise the plain-mode (non-SWMR) window too
            w.set_status("r0", "gd", status="running", stats={"k": k}, wall_time=k)


if __name__ == "__main__":
    write_until_killed(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
