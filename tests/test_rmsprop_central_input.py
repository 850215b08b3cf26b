"""Bad input on an `rmsprop-central` leg through `flowsim run`, in a scenario file and by
--set: each error names where the value came from, the key, the value and what is allowed,
exits 2 and writes no archive."""

import pytest
from helpers import call_cli

LEG = '{ name = "rc", kind = "rmsprop-central", learning_rate = 0.001, beta2 = 0.99, max_eigen = 5, method = "rock4"'
SCENARIO = ('name = "bad"\n[data]\nkind = "random-labels"\nn = 16\nd = 4\n[model]\nkind = "mlp"\nwidths = [8]\n'
            '[loss]\nkind = "mse"\n[run]\nt_end = 0.01\nobserve = ["loss", "preconditioned_sharpness"]\nsolvers = [\n'
            '  { name = "rmsprop", kind = "rmsprop", learning_rate = 0.001, beta2 = 0.99, nu0 = "grad-squared" },\n'
            '  ' + LEG + '{extra} },\n]\n')
KEY = "run.solvers[1]"


@pytest.mark.parametrize("extra, said", [
    (", beta1 = 0.9", "unknown key `run.solvers[1].beta1` (it belongs to another kind); did you mean `beta2`? "
                      "allowed keys in [run.solvers[1]] for kind = \"rmsprop-central\": atol, beta2,"),
    (", nu0 = \"zero\"", "unknown key `run.solvers[1].nu0` (it belongs to another kind)"),
    (", beta2 = 1.5", "key `run.solvers[1].beta2` = 1.5 is out of range; allowed: a number in (0, 1)"),
    (", learning_rate = -1", "key `run.solvers[1].learning_rate` = -1 is out of range; allowed: a number > 0"),
    (", learning_rate = \"fast\"", "key `run.solvers[1].learning_rate` = \"fast\" has the wrong type (string); "
                                   "allowed: a number > 0"),
    (", max_eigen = 0", "key `run.solvers[1].max_eigen` = 0 is out of range; allowed: an integer in [1, 16]"),
    (", max_eigen = 2.5", "key `run.solvers[1].max_eigen` = 2.5 has the wrong type (float); allowed: an integer "
                          "in [1, 16]"),
    (", method = \"filippov\"", "key `run.solvers[1].method` = \"filippov\" cannot step a central flow; allowed: "
                                "an explicit method: tsit5, dopri5, dopri8, heun, bosh3, ralston, rock4"),
    (", method = \"auto\"", "key `run.solvers[1].method` = \"auto\" cannot step a central flow"),
    (", eps_in_sqrt = \"yes\"", "key `run.solvers[1].eps_in_sqrt` = \"yes\" has the wrong type (string); "
                                "allowed: true or false"),
    (", eps = -1", "key `run.solvers[1].eps` = -1 is out of range; allowed: a number >= 0"),
    (", track_threshold = 2", "key `run.solvers[1].track_threshold` = 2 is out of range; allowed: a number in (0, 1]"),
])
def test_a_bad_rmsprop_central_key_is_named_and_nothing_is_written(tmp_path, extra, said):
    """The duplicated key (a second `method`, `learning_rate`, …) of the leg's table is replaced
    by the bad one."""
    key = extra.split("=")[0].strip(", ").strip()
    leg = ", ".join(p for p in LEG.split(", ") if not p.startswith(f"{key} ="))
    (tmp_path / "bad.toml").write_text(SCENARIO.replace(LEG, leg).replace("{extra}", extra))
    rc, out, err = call_cli("run", tmp_path / "bad.toml", "-o", tmp_path / "bad.h5")
    assert rc == 2 and f"bad.toml: {said}" in err, err
    assert not (tmp_path / "bad.h5").exists()


def test_a_bad_rmsprop_central_key_by_set_names_set(tmp_path):
    rc, _, err = call_cli("run", "central-rmsprop", "-o", tmp_path / "x.h5", "--set", "run.solvers[3].beta2=1.5")
    assert rc == 2 and "--set: key `run.solvers[3].beta2` = 1.5 is out of range; allowed: a number in (0, 1)" in err
    assert not (tmp_path / "x.h5").exists()
