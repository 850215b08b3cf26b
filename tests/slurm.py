"""A single-node Slurm for the test suite, from Debian's packages, started without systemd
(facts measured: /work/shared/CLUSTER.md).

    with cluster() as conf:        # installs what is missing, starts munged, slurmctld, slurmd
        job = sbatch(...)          # (the tests go through `flowsim submit`)
        wait_for_jobs([job])       # polls squeue every 0.2 s (`sbatch --wait` adds 10-40 s)

Slurm's ports (6817, 6818) are fixed, so there is one cluster per machine, shared by the
pytest-xdist workers: a file lock guards a marker (`STATE / "cluster.json"`) holding the
daemons' pids and the pids of the processes using the cluster; the first user starts it,
the last one to leave stops it by those pids (and a cluster whose daemons died, or whose
users died, is started again). `Unavailable` says why there can be none here (no root, no
packages, a daemon that does not come up); the fixture then skips, or fails where
FLOWSIM_REQUIRE_SLURM=1 (CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

STATE = Path(os.environ.get("FLOWSIM_SLURM_DIR", "/tmp/flowsim-slurm"))
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/sbin/munged")
POLL = 0.2


class Unavailable(Exception):
    """No Slurm can be stood up here; the message says why."""


def _run(*cmd, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def install() -> None:
    """Debian's packages, where a binary is missing (about 10 s; nothing when present)."""
    if all(Path(b).exists() for b in BINARIES):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable(f"the packages {', '.join(PACKAGES)} are missing and apt-get cannot install them "
                          "here (needs root and Debian's apt)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        try:
            proc = _run(*cmd, timeout=600, env=env)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"`{' '.join(cmd)}` did not finish in 600 s") from None
        if proc.returncode != 0:
            raise Unavailable(f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout)[-800:]}")


def alive(pid: int) -> bool:
    """A live process (not a zombie: the machine's first process reaps orphans slowly)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _config(folder: Path) -> str:
    host = socket.gethostname().split(".")[0]
    try:
        socket.gethostbyname(host)
    except OSError:
        raise Unavailable(f"the host name {host!r} does not resolve (Slurm and jax.distributed need it)") from None
    node = _run("/usr/sbin/slurmd", "-C").stdout.splitlines()[0].split()
    # RealMemory lowered 5 %: a node reporting less than its configured memory drains
    node = [f"RealMemory={int(int(w.split('=')[1]) * 0.95)}" if w.startswith("RealMemory=") else w for w in node]
    return "\n".join([
        "ClusterName=flowsim-test", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",     # any container
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        # scancel's SIGTERM reaches flowsim, which stops after its checkpoint: Slurm's default
        # 30 s before SIGKILL (5 s killed a --distributed run before its checkpoint)
        "KillWait=30",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        " ".join(node) + " NodeAddr=127.0.0.1 State=UNKNOWN",
        "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


def _daemon(cmd: list[str], pidfile: Path, log: Path) -> int:
    """Start a daemon (it forks and writes `pidfile`); its pid. Every descriptor but the
    standard ones is closed, and those go to /dev/null: a daemon inheriting the lock's
    descriptor would hold the lock forever."""
    pidfile.unlink(missing_ok=True)
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          close_fds=True, timeout=60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().split()[0])
            if alive(pid):
                return pid
        time.sleep(POLL)
    tail = log.read_text()[-800:] if log.exists() else ""
    raise Unavailable(f"`{' '.join(cmd)}` (exit {proc.returncode}) wrote no live pid to {pidfile}: {tail}")


def _munge_works() -> bool:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        token = _run("munge", "-n", timeout=10)
        return token.returncode == 0 and _run("unmunge", input=token.stdout, timeout=10).returncode == 0
    return False


def _start(folder: Path) -> dict:
    """munged (unless one answers already), slurmctld and slurmd; their pids, once the node
    is idle."""
    install()
    shutil.rmtree(folder, ignore_errors=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True)
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder))
    pids = {}
    if not _munge_works():
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        pids["munged"] = _daemon(["runuser", "-u", "munge", "--", "/usr/sbin/munged"],
                                 Path("/run/munge/munged.pid"), Path("/var/log/munge/munged.log"))
    try:
        pids["slurmctld"] = _daemon(["/usr/sbin/slurmctld", "-f", str(conf)], folder / "slurmctld.pid",
                                    folder / "slurmctld.log")
        pids["slurmd"] = _daemon(["/usr/sbin/slurmd", "-f", str(conf)], folder / "slurmd.pid", folder / "slurmd.log")
        env = dict(os.environ, SLURM_CONF=str(conf))
        deadline = time.monotonic() + 30
        while _run("sinfo", "-h", "-o", "%T", env=env).stdout.strip() != "idle":
            if time.monotonic() > deadline:
                raise Unavailable(f"the node is not idle after 30 s: {_run('sinfo', env=env).stdout}"
                                  f"{(folder / 'slurmd.log').read_text()[-800:]}")
            time.sleep(POLL)
    except BaseException:
        _stop(pids)
        raise
    return {"conf": str(conf), "pids": pids}


def _stop(pids: dict) -> None:
    """The daemons we started, by pid: SIGTERM, then SIGKILL after 10 s."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(POLL)
    for pid in pids.values():
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _locked():
    STATE.parent.mkdir(parents=True, exist_ok=True)
    with open(STATE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield STATE / "cluster.json"


def acquire() -> str:
    """Join the machine's test cluster (starting it where none is up); its slurm.conf."""
    with _locked() as marker:
        state = json.loads(marker.read_text()) if marker.exists() else None
        if state is None or not all(alive(p) for p in state["pids"].values()):
            if state is not None:
                _stop(state["pids"])
            state = _start(STATE) | {"users": []}
        state["users"] = [u for u in state["users"] if alive(u)] + [os.getpid()]
        marker.write_text(json.dumps(state))
        return state["conf"]


def release() -> None:
    """Leave the cluster; the last user cancels what is left of its jobs and stops it."""
    with _locked() as marker:
        if not marker.exists():
            return
        state = json.loads(marker.read_text())
        state["users"] = [u for u in state["users"] if alive(u) and u != os.getpid()]
        if state["users"]:
            marker.write_text(json.dumps(state))
            return
        env = dict(os.environ, SLURM_CONF=state["conf"])
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run("scancel", "--full", "--user", str(os.getuid()), env=env)
            wait_for_jobs(None, timeout=40, env=env)
        _stop(state["pids"])
        marker.unlink()


def jobs(name: str | None = None, env=None) -> dict[str, str]:
    """Every queued or running job (of that name), array tasks one by one (`ID_TASK`) ->
    its state."""
    out = _run("squeue", "-h", "-r", *([f"--name={name}"] if name else []), "-o", "%i %T", env=env).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_for_jobs(ids: list[str] | None, timeout: float = 300, env=None) -> None:
    """Until none of the jobs `ids` (an array job's id covers its tasks; None: every job)
    is queued or running; polled every 0.2 s."""
    deadline = time.monotonic() + timeout
    while True:
        left = [j for j in jobs(env=env) if ids is None or j in ids or j.split("_")[0] in ids]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs still queued or running after {timeout} s: {left}")
        time.sleep(POLL)


def job_state(job: str) -> tuple[str, str]:
    """(JobState, ExitCode) of a job Slurm still remembers (MinJobAge: 300 s after its end)."""
    text = _run("scontrol", "show", "job", job).stdout
    fields = dict(w.split("=", 1) for w in text.split() if "=" in w)
    return fields.get("JobState", "?"), fields.get("ExitCode", "?")
