"""What one iteration of a batched solver loop costs when its seeds span two processes
(`flowsim run --distributed`) against one process: the figure behind docs/scale.md's
"When it pays".

    python bench/bench_distributed_loop.py [--quick]    # starts the two processes itself;
                                                        # writes bench/results/distributed_loop.md

A vmapped `lax.while_loop` whose members stop at different iterations (as seeds of a batch
do) runs while any member runs: with the batch sharded over the devices of two processes,
that "any" is a cross-process reduction (Gloo on CPU) on every iteration. Each count of
iterations is timed as the median of 3 calls after a compiling one; the ratio is per
iteration, two processes over one.
"""

import ast
import os
import socket
import subprocess
import sys
import time

COUNTS = (10, 1000, 10000)
QUICK = (10, 1000)


def timed(counts) -> dict[int, float]:
    """Seconds per call of the batched loop, per iteration count, in this process's job."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("batch",))
    spread = NamedSharding(mesh, PartitionSpec("batch"))

    def member(x, n):
        return jax.lax.while_loop(lambda c: c[1] < n, lambda c: (jax.numpy.sin(c[0]) + 1.0, c[1] + 1), (x, 0))[0]

    loop = jax.jit(jax.vmap(member))
    x = jax.make_array_from_callback((2, 8), spread, lambda idx: np.ones((2, 8))[idx])
    out = {}
    for n in counts:
        stops = jax.make_array_from_callback((2,), spread, lambda idx: np.array([n, n - 1])[idx])
        loop(x, stops).block_until_ready()
        times = []
        for _ in range(3):
            tic = time.perf_counter()
            loop(x, stops).block_until_ready()
            times.append(time.perf_counter() - tic)
        out[n] = sorted(times)[1]
    return out


def main() -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if "JAX_PROCESS_ID" in os.environ:       # one of the two processes
        import jax

        jax.distributed.initialize(num_processes=2, process_id=int(os.environ["JAX_PROCESS_ID"]))
        found = timed(QUICK if "--quick" in sys.argv[1:] else COUNTS)
        if jax.process_index() == 0:
            print(repr(found))
        return
    quick = "--quick" in sys.argv[1:]
    counts = QUICK if quick else COUNTS
    here = os.path.dirname(os.path.abspath(__file__))
    one = subprocess.run([sys.executable, "-c", f"import bench_distributed_loop as b; print(repr(b.timed({counts})))"],
                         env=env | {"PYTHONPATH": here}, capture_output=True, text=True, check=True)
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env | {
        "JAX_COORDINATOR_ADDRESS": f"localhost:{port}", "JAX_PROCESS_ID": str(i)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(2)]
    two = procs[0].communicate(timeout=600)[0]
    procs[1].wait(timeout=600)
    single = ast.literal_eval(one.stdout.strip().splitlines()[-1])
    double = ast.literal_eval(two.strip().splitlines()[-1])
    rows = [f"| {n} | {single[n] / n * 1e6:.3f} µs | {double[n] / n * 1e6:.1f} µs | {double[n] / single[n]:.0f} |"
            for n in counts]
    text = ("## A batched loop over two processes (`--distributed`, CPU, Gloo)\n\n"
            "Per iteration of a vmapped while loop whose batch spans two processes, against one process "
            "(median of 3 calls; the ratio per call).\n\n"
            "| iterations | one process | two processes | ratio |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    sys.path.insert(0, here)
    from bench_core import publish

    publish(text, "distributed_loop", quick)


if __name__ == "__main__":
    main()
