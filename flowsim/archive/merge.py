"""Job arrays: the `--shard i/N` value, and the parts' archives joined into one.

`flowsim run SCENARIO --shard i/N` runs the i-th of N contiguous parts of the scenario's
run list (`flowsim.config.sweep.shard_runs`) into its own archive. `flowsim merge OUT.h5 PART.h5 …` then writes a small
HDF5 file whose `/runs/<run>` groups and `/data` are *external links* into the parts: no
array is copied, the parts must stay where they are (a relative link is resolved against
the merged file's folder first), and `flowsim.archive.open`, `flowsim inspect`, `plot` and
`compare` read the merged file as if it were one run of the whole scenario.
"""

import json
import os
from pathlib import Path

import h5py

from .errors import ArchiveError
from .format import FILE, decode_root_attrs, loads, write_attrs
from .recovery import check_replaceable, open_h5_readonly, require_flowsim


class ShardError(ValueError):
    """A malformed `--shard` value or a set of parts that cannot be merged."""


def parse_shard(text: str) -> tuple[int, int]:
    """"i/N" with 0 ≤ i < N."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"--shard {text!r}: allowed: i/N with integers 0 ≤ i < N, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ShardError(f"--shard {text!r}: allowed: i/N with integers 0 ≤ i < N, e.g. 0/4")
    return i, n


def _link_target(part: Path, out: Path) -> str:
    """The part's path as the link stores it: relative to the merged file's folder when the
    part lies below it (so the pair can be moved together), else absolute."""
    part, folder = part.resolve(), out.resolve().parent
    try:
        return os.path.relpath(part, folder) if part.is_relative_to(folder) else str(part)
    except ValueError:
        return str(part)


def _code(version: dict) -> str:
    return version["flowsim"] + (f" (commit {version['git_commit'][:12]})" if version["git_commit"] else "")


def merge(out: str | os.PathLike, parts: list[str | os.PathLike], *, overwrite: bool = False) -> dict:
    """Write `out` linking every run of `parts`; returns a summary (runs, parts). Refused
    (`ShardError`, naming the part): parts of another scenario or other `--set` values, of
    another flowsim version or commit, a merged archive, a shard given twice or from
    another split into N, a run in two parts, and a split with parts missing."""
    out = Path(out)
    if not parts:
        raise ShardError("flowsim merge: give at least one part archive")
    check_replaceable(out)
    if out.exists() and not overwrite:
        raise ShardError(f"{out} exists; pass --overwrite to replace it")
    if any(Path(p).resolve() == out.resolve() for p in parts):
        raise ShardError(f"{out} is also one of the parts")
    resolved, first_attrs, runs, shards = None, None, {}, {}
    data_part, code = None, None
    for p in parts:
        f = open_h5_readonly(os.fspath(p))
        try:
            require_flowsim(os.fspath(p), f)
            attrs = decode_root_attrs(f.attrs)
            if attrs.get("merged_from") is not None:
                raise ShardError(f"{p}: is itself a merged archive; merge the original parts")
            res = attrs.get("scenario_resolved")
            if resolved is None:
                resolved, first_attrs = res, dict(f.attrs)
            elif json.dumps(res, sort_keys=True) != json.dumps(resolved, sort_keys=True):
                raise ShardError(f"{p}: was written by a different scenario (or different --set values) "
                                 f"than {parts[0]}; allowed: parts of one `flowsim run --shard` job")
            prov = attrs.get("provenance") or {}
            # the same code: parts of one job agree bit for bit only if one version computed them
            version = {k: prov.get(k, "") for k in ("flowsim", "git_commit")}
            if code is None:
                code = version
            elif version != code:
                raise ShardError(f"{p}: was written by flowsim {_code(version)}, {parts[0]} by {_code(code)}; "
                                 "allowed: parts computed by one version (run the others again with it)")
            shard = prov.get("shard", "")
            if shard:
                if shard in shards:
                    raise ShardError(f"{p}: shard {shard} given twice (also {shards[shard]})")
                other = next(((s, q) for s, q in shards.items() if s.split("/")[1] != shard.split("/")[1]), None)
                if other is not None:    # another N cuts the run list elsewhere: the parts overlap
                    raise ShardError(f"{p}: shard {shard} overlaps {other[1]} (shard {other[0]}); allowed: the "
                                     "parts of one split into N")
                shards[shard] = Path(p)
            for name in f.get("runs", {}):
                if name in runs:
                    raise ShardError(f"{p}: run {name!r} is also in {runs[name]}")
                runs[name] = Path(p)
            # /data of every part holds the scenario's first run's dataset (the driver keeps
            # it so); link the first part's.
            if data_part is None and "data" in f:
                data_part = Path(p)
        finally:
            f.close()
    if shards:
        n = int(next(iter(shards)).split("/")[1])
        missing = [f"{i}/{n}" for i in range(n) if f"{i}/{n}" not in shards]
        if missing:
            raise ShardError(f"shard(s) {', '.join(missing)} of {n} missing: no part given holds them (parts "
                             f"given: {', '.join(f'{s} {q}' for s, q in sorted(shards.items()))}); allowed: "
                             "every part of the job")
    tmp = out.with_name(out.name + ".tmp")
    with h5py.File(tmp, "w") as g:
        for k, v in first_attrs.items():
            g.attrs[k] = v
        if "provenance" in first_attrs:     # the merged file is the whole job, not part 0
            prov = loads(first_attrs["provenance"])
            prov.pop("shard", None)
            write_attrs(g, FILE, {"provenance": prov | {"shards": sorted(shards)}})
            if "shard" in g.attrs:
                del g.attrs["shard"]
        write_attrs(g, FILE, {"merged_from": [_link_target(Path(p), out) for p in parts]})
        if data_part is not None:
            g["data"] = h5py.ExternalLink(_link_target(data_part, out), "/data")
        r = g.create_group("runs")
        for name in sorted(runs):
            r[name] = h5py.ExternalLink(_link_target(runs[name], out), f"/runs/{name}")
    os.replace(tmp, out)
    return {"runs": len(runs), "parts": len(parts)}


def check_readable(out: str | os.PathLike) -> None:
    """Open every link of a merged archive (a moved or deleted part is an ArchiveError)."""
    f = open_h5_readonly(os.fspath(out))
    try:
        for name in f.get("runs", {}):
            try:
                f["runs"][name]
            except KeyError:
                raise ArchiveError(f"{out}: run {name!r} links to a part that cannot be opened "
                                   f"(moved or deleted?)") from None
    finally:
        f.close()
