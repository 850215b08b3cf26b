"""Determinism and provenance: the same scenario and seeds on the same machine give
bit-identical archives (timestamps and wall times aside), and every archive says what
made it."""

from __future__ import annotations

import json
import platform

import h5py
import pytest

from flowsim import archive as A
from flowsim.run.provenance import device, device_change
from flowsim.config import load_scenario

from .conftest import FAULT, GD_ONLY, assert_same_archive, set_args, snapshot


@pytest.mark.slow
def test_two_runs_are_bit_identical(tmp_path, inproc):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for path in (a, b):
        code, _, err = inproc("run", FAULT, "-o", path, "-q", *set_args(GD_ONLY))
        assert code == 0, err
    assert_same_archive(a, b)
    # ... and the comparison is not vacuous: it sees every series, checkpoint and attribute
    snap = snapshot(a)
    assert any(k.endswith("gd-lr0.1/weights") for k in snap)
    assert any(k.endswith("checkpoint#state") for k in snap)
    assert "/@provenance" in snap and "/@scenario_resolved" in snap
    # both record when they were made, and the comparison leaves it out: it may differ
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert fa.attrs["created"] and fb.attrs["created"]
    assert "/@created" not in snap


@pytest.mark.slow
def test_two_runs_with_a_flow_are_bit_identical(tmp_path, inproc):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for path in (a, b):
        code, _, err = inproc("run", FAULT, "-o", path, "-q")
        assert code == 0, err
    assert_same_archive(a, b)


@pytest.mark.slow
def test_provenance_is_recorded(tmp_path, inproc):
    out = tmp_path / "p.h5"
    overrides = [*GD_ONLY, "seeds=[0]", "run.checkpoints={count=2}"]
    code, _, err = inproc("run", FAULT, "-o", out, "-q", *set_args(overrides))
    assert code == 0, err
    with A.open(out) as arch:
        attrs = arch.attrs
        prov = attrs["provenance"]
        assert attrs["flowsim_version"]
        for key in ("flowsim", "git_commit", "git_dirty", "jax", "jaxlib", "equinox", "diffrax", "lineax",
                    "optimistix", "numpy", "h5py", "python", "platform", "device", "device_count", "x64"):
            assert key in prov, key
        assert prov["python"] == platform.python_version() and prov["x64"] == "true"
        assert prov["device"].startswith(("cpu", "gpu", "cuda", "tpu", "rocm"))
        if prov["git_commit"]:
            assert len(prov["git_commit"]) == 40 and prov["git_dirty"] in ("true", "false")
        # the resolved scenario, stored as JSON, reads back as the scenario the run loaded
        assert attrs["scenario_resolved"] == json.loads(json.dumps(load_scenario(FAULT, overrides).resolved))
        assert "fault" in attrs["scenario_text"]
    code, text, _ = inproc("inspect", out)
    assert code == 0 and "git_commit" in text and "jax" in text and "device" in text


@pytest.mark.slow
def test_resume_on_another_device_says_bit_identity_is_lost(tmp_path, inproc):
    """Devices agree only to the last bits: `--resume` on another device than the archive's
    warns (and goes on); on the same device it says nothing."""
    out = tmp_path / "d.h5"
    overrides = [*GD_ONLY, "seeds=[0]", "run.checkpoints={count=2}"]
    code, _, err = inproc("run", FAULT, "-o", out, "-q", *set_args(overrides))
    assert code == 0, err
    code, _, err = inproc("run", FAULT, "-o", out, "-q", "--resume", *set_args(overrides))
    assert code == 0, err
    assert "warning" not in err
    here = device()
    with h5py.File(out, "r+") as f:              # as if an earlier part ran elsewhere
        f.attrs["provenance"] = json.dumps(json.loads(f.attrs["provenance"]) | {"device": "tpu:Elsewhere"})
        f.attrs["device"] = "tpu:Elsewhere"
    code, _, err = inproc("run", FAULT, "-o", out, "-q", "--resume", *set_args(overrides))
    assert code == 0, err
    assert (f"flowsim: warning: {out}: the archive was written on tpu:Elsewhere and continues on "
            f"{here}: the resumed runs are no longer bit-identical") in err


def test_device_change():
    assert device_change("cpu:cpu", "cpu:cpu") == ""
    assert device_change("", "cpu:cpu") == ""              # an archive that does not say
    assert "no longer bit-identical" in device_change("gpu:NVIDIA H100", "cpu:cpu")
