"""What an archive records so that its results can be traced: versions, commit, platform,
device, the content of its data files; the warning owed when a run continues on another
device than it began on; and a data file's identity on resume, which is its content.

`git_commit` and `git_dirty` describe the git checkout whose top level holds this
package, and nothing else: a copy of flowsim inside some other repository (vendored, or
installed into a virtual environment in a project's folder) records "" for both rather
than the enclosing repository's HEAD.
"""

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import diffrax
import equinox as eqx
import h5py
import jax
import numpy as np

from ..version import __version__

_PACKAGE = Path(__file__).resolve().parent.parent     # the flowsim folder (this module is in run/)


def _git(*args: str) -> str | None:
    """The output of `git ARGS` run in the package's folder; None when git fails."""
    try:
        out = subprocess.run(["git", *args], cwd=_PACKAGE, capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str, str]:
    """(commit, dirty) of the checkout that holds this package: dirty is "true" when tracked
    files have uncommitted changes. ("", "") when the package is not the `flowsim` folder at
    the top level of a git checkout (e.g. an installed copy inside some other repository)."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != _PACKAGE.parent:
        return "", ""
    commit = _git("rev-parse", "HEAD") or ""
    status = _git("status", "--porcelain", "--untracked-files=no")
    dirty = "" if status is None else ("true" if status else "false")
    return commit, dirty


def device() -> str:
    """The device the runs compute on, as `platform:kind` (e.g. "cpu:cpu")."""
    dev = jax.devices()[0]
    return f"{dev.platform}:{getattr(dev, 'device_kind', '')}"


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def provenance() -> dict:
    """What a result needs to be traced: versions, commit, platform, device."""
    commit, dirty = git_state()
    extra = {"git_dirty": dirty, "lineax": _version("lineax"), "optimistix": _version("optimistix"),
             "device_count": str(jax.device_count()), "process_count": str(jax.process_count()),
             "processor": platform.processor() or platform.machine(),
             "x64": str(bool(jax.config.jax_enable_x64)).lower()}
    return {"flowsim": __version__, "git_commit": commit, "jax": jax.__version__,
            "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
            "equinox": eqx.__version__, "diffrax": diffrax.__version__, "numpy": np.__version__,
            "h5py": h5py.__version__, "python": sys.version.split()[0], "platform": platform.platform(),
            "device": device()} | extra


def device_change(recorded: str, current: str) -> str:
    """The warning owed when runs recorded on device `recorded` continue on `current`; "" when
    they are the same, or the archive does not say (results agree across devices only to the
    last bits, so the continued runs are no longer those of one uninterrupted run)."""
    if not recorded or recorded == current:
        return ""
    return (f"the archive was written on {recorded} and continues on {current}: the resumed runs "
            "are no longer bit-identical to an uninterrupted run (devices differ in the last bits)")


def warn_on_device_change(path, recorded: dict) -> None:
    """Before `--resume` appends to `path`, whose `recorded` provenance the writer read:
    say so on stderr when this is another device."""
    message = device_change(recorded.get("device", ""), device())
    if message:
        print(f"flowsim: warning: {path}: {message}", file=sys.stderr)


#: The provenance entry holding the SHA-256 of each file the scenario names, by its key.
DATA_DIGESTS = "data_sha256"
_BLOCK = 1 << 20


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _strings(tree, fn, key: str = ""):
    """`tree` (a resolved scenario) with each string `v` at dotted key `k` (sweep lists
    included, `k[i]`) replaced by `fn(k, v)`."""
    if isinstance(tree, dict):
        return {k: _strings(v, fn, f"{key}.{k}" if key else k) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_strings(v, fn, f"{key}[{i}]") for i, v in enumerate(tree)]
    return fn(key, tree) if isinstance(tree, str) else tree


def _file_values(tree) -> dict[str, str]:
    """{dotted key: value} of every string of a resolved scenario."""
    found: dict[str, str] = {}
    _strings(tree, found.__setitem__)
    return found


def data_digests(resolved: dict) -> dict[str, str]:
    """{dotted key: SHA-256 of the file's bytes} of every file a resolved scenario names (the
    loader makes them absolute: data, scalings, initial weights, sweep values too). The
    archive records them (provenance `data_sha256`), so that a file is known by its content,
    wherever the project folder has moved."""
    return {key: _sha256(value) for key, value in _file_values(resolved).items()
            if os.path.isabs(value) and os.path.isfile(value)}


def by_content(recorded, stored: dict, now: dict) -> tuple[list[str], dict, dict]:
    """For `--resume`, a file is known by its content: `recorded` is the archive's
    `data_sha256`, `stored` its resolved scenario, `now` this one. Returns each file whose
    content differs from the one recorded (its key, the file now and then), and `stored`
    and `now` with each file of the same content written as its digest on both sides, so
    that a project folder copied elsewhere resumes. An archive that recorded no digests
    (written before them) has its files compared by path, as then."""
    if not isinstance(recorded, dict) or not recorded:
        return [], stored, now
    then, here = _file_values(stored), _file_values(now)
    digests = data_digests(now)
    changed = [f"`{key}`: {here[key]} has changed (SHA-256 {recorded[key][:12]}… then, {digest[:12]}… now)"
               + (f"; the archive was written from {then[key]}" if then.get(key, here[key]) != here[key] else "")
               for key, digest in digests.items() if key in recorded and recorded[key] != digest]
    same = {key for key, digest in digests.items() if recorded.get(key) == digest}
    return changed, _replaced(stored, same, recorded), _replaced(now, same, recorded)


def _replaced(resolved: dict, keys: set[str], digests: dict) -> dict:
    return _strings(resolved, lambda k, v: f"sha256:{digests[k]}" if k in keys else v)
