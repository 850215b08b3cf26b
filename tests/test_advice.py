"""The solver advisor (flowsim.run.advice): from a flow's statistics, a word on its preset; in
the run's report as soon as the statistics show it, in its summary, its JSON log and
`flowsim inspect`."""

import json

import pytest
from helpers import call_cli, run_cli

import diffrax as dfx

from flowsim.run.advice import MIN_STEPS, advise
from flowsim.integrate.stiffness import stiffness_probe


def stats(steps, rejected=0, held=0, at_limit=0):
    return {"steps": steps, "accepted": steps - rejected, "rejected": rejected, "stiff_steps": held,
            "stiff_rejections": at_limit}


@pytest.mark.parametrize("method, limit", [("Tsit5", 3.5), ("Dopri5", 3.3), ("Heun", 2.0), ("Bosh3", 2.5)])
def test_the_stability_limits_are_the_methods_real_axis_intervals(method, limit):
    """Published real-axis stability intervals (Hairer & Wanner; Tsitouras 2011), to 0.03."""
    tableau = getattr(dfx, method)().tableau
    weights, found = stiffness_probe(tableau)
    assert found == pytest.approx(limit, abs=0.03)
    c = [0.0, *tableau.c]      # Y_s − Y_{s−1} = h Σ w_j f_j: on a constant field, (c_s − c_{s−1}) h f
    assert sum(weights) == pytest.approx(c[-1] - c[-2], abs=1e-12)


def test_steps_held_by_stability_advise_auto_with_the_figure():
    text = advise("tsit5", stats(1457, rejected=247, held=1041))
    assert '"auto"' in text and "86 % of 1210 accepted steps" in text
    # never the preset already running: a preset named "auto" that steps with tsit5 is told rock4
    assert '"rock4"' in advise("tsit5", stats(1457, rejected=247, held=1041), preset="auto")
    assert advise("tsit5", stats(1457, rejected=247, held=500)) is None      # under half: silent
    assert advise("tsit5", stats(MIN_STEPS - 1, held=MIN_STEPS - 1)) is None  # too early to tell


def test_clustered_rejections_advise_the_kink_aware_presets():
    text = advise("tsit5", stats(2134, rejected=889))
    assert "889 of 2134 steps" in text and "filippov" in text and "bosh3-relu" in text
    assert advise("tsit5", stats(2134, rejected=100)) is None
    # never the preset already running
    text = advise("bosh3", stats(2134, rejected=889), preset="bosh3-relu")
    assert "889 of 2134 steps" in text and "filippov" in text and "bosh3-relu" not in text


def test_rejections_at_the_stability_limit_are_not_called_kinks():
    """Rejected tries at h·ρ's limit (`stiff_rejections`: a held step's chatter, or ROCK4 at its
    round-off ceiling, as on the smooth log-spaced quadratic) are not evidence of kinks; only the
    others count, and the advice names both figures."""
    assert advise("rock4", stats(2360, rejected=797, at_limit=700)) is None
    text = advise("rock4", stats(2360, rejected=797, at_limit=100))
    assert "697 of 2360 steps" in text and "of 797 rejected, 100 at h·ρ's limit" in text


@pytest.mark.parametrize("method", ["rock4", "kvaerno5", "filippov", "auto"])
def test_methods_that_are_the_cure_are_not_advised_against_stiffness(method):
    assert advise(method, stats(1000, held=1000)) is None
    assert (advise(method, stats(1000, rejected=600)) is None) == (method == "filippov")


def test_a_descent_or_an_unknown_method_gets_no_advice():
    assert advise("", stats(1000, rejected=900)) is None


@pytest.mark.slow
def test_the_advisor_speaks_on_cohen_eos_quick_under_tsit5_and_not_on_quickstart(tmp_path):
    """cohen-eos-quick's flow is stiff (tsit5 held by stability on 86 % of its steps): the
    advice comes during the run (before the summary), in the summary, the JSON log and
    `inspect`. quickstart's flow is not (0 steps held): no advice anywhere."""
    log = tmp_path / "eos.jsonl"
    rc, _, err = call_cli("run", "cohen-eos-quick", "-o", tmp_path / "eos.h5", "--log-jsonl", log,
                          "--set", 'run.solvers=["tsit5"]', "--set", 'run.observe=["loss"]',
                          "--set", "run.checkpoints={count=20}")
    assert rc == 0, err[-2000:]
    early = err.index("advice: tsit5's steps were held by stability")
    assert early < err.index("cohen-eos-quick · tsit5: 1 done")
    assert '"auto"' in err[early:] and err.count("advice:") == 2
    records = [json.loads(line) for line in log.read_text().splitlines()]
    advice = [r for r in records if r["event"] == "advice"]
    assert len(advice) == 1 and advice[0]["t"] < 1980 and '"auto"' in advice[0]["advice"]
    assert "advice: tsit5's steps were held by stability" in run_cli("inspect", tmp_path / "eos.h5")

    rc, _, err = call_cli("run", "quickstart", "-o", tmp_path / "q.h5")
    assert rc == 0 and "advice" not in err
    assert "advice" not in run_cli("inspect", tmp_path / "q.h5")


def test_a_central_flow_gets_no_advice_and_a_modified_flow_does():
    """A central flow's rejections are its events (an eigenvalue joining the held set), not
    kinks: central-scale's tanh network once drew the kink advice at 35 of 139 steps; a
    modified flow's field is smooth, and is advised as a gradient flow's."""
    assert advise("rock4", stats(139, rejected=35), "central-0.04", kind="central-flow") is None
    assert advise("tsit5", stats(1000, held=1000), "central-0.04", kind="central-flow") is None
    assert "35 of 139 steps" in advise("rock4", stats(139, rejected=35), "m", kind="modified-flow")
