import numpy as np
import pytest

from flowsim.nn.scaling import node_scalings, output_scale, zipf_weights

M = 500


@pytest.mark.parametrize("kind,params", [
    ("ntk", {}), ("asymmetric", {"gamma": 0.5, "alpha": 0.7}), ("asymmetric", {"gamma": 0.0, "alpha": 0.4}),
    ("single", {"gamma": 0.2}), ("finite", {"gamma": 0.1, "k": 10}), ("custom", {"gamma": 0.3, "lam": np.arange(M) + 1.0}),
])
def test_scalings_sum_to_one_and_are_positive(kind, params):
    lam = node_scalings(kind, M, **params)
    assert lam.shape == (M,)
    assert abs(lam.sum() - 1.0) < 1e-13
    assert np.all(lam >= 0)


def test_gamma_one_is_ntk():
    np.testing.assert_allclose(node_scalings("asymmetric", M, gamma=1.0, alpha=0.5), np.full(M, 1 / M), rtol=1e-14)
    np.testing.assert_allclose(node_scalings("ntk", M), np.full(M, 1 / M), rtol=0)


def test_zipf_order_and_tail():
    alpha = 0.5
    lam = node_scalings("asymmetric", M, gamma=0.0, alpha=alpha)
    assert np.all(np.diff(lam) < 0)  # decreasing in j
    j = np.arange(1, M + 1)
    np.testing.assert_allclose(lam / lam[0], j ** (-1 / alpha), rtol=1e-12)
    # γ/m floor: with γ > 0 the tail flattens at γ/m
    lam_g = node_scalings("asymmetric", M, gamma=0.5, alpha=alpha)
    tilde = j ** (-1 / alpha)
    np.testing.assert_allclose(lam_g - 0.5 / M, 0.5 * tilde / tilde.sum(), rtol=1e-12, atol=1e-17)


def test_single_and_finite():
    lam = node_scalings("single", M, gamma=0.0)
    assert lam[0] == 1.0 and np.all(lam[1:] == 0)
    lam = node_scalings("finite", M, gamma=0.0, k=10)
    np.testing.assert_allclose(lam[:10], 0.1, rtol=1e-14)
    assert np.all(lam[10:] == 0)


def test_output_scales():
    assert output_scale("mean-field", 10).rate == 10.0
    np.testing.assert_allclose(output_scale("mean-field", 10).c, 0.1)
    np.testing.assert_allclose(output_scale("standard", 10).c, 1.0)
    sc = output_scale("asymmetric", M, gamma=0.5, alpha=0.5)
    np.testing.assert_allclose(sc.c**2, sc.lam, rtol=1e-14)
    assert sc.rate == 1.0


@pytest.mark.parametrize("kwargs,name,allowed", [
    ({"kind": "asymmetric", "gamma": 1.5, "alpha": 0.5}, "gamma", "[0, 1]"),
    ({"kind": "asymmetric", "gamma": -0.1, "alpha": 0.5}, "gamma", "[0, 1]"),
    ({"kind": "asymmetric", "gamma": 0.5, "alpha": 0.0}, "alpha", "(0, 1)"),
    ({"kind": "asymmetric", "gamma": 0.5, "alpha": 1.0}, "alpha", "(0, 1)"),
    ({"kind": "finite", "gamma": 0.5, "k": M + 1}, "k", f"[1, m = {M}]"),
    ({"kind": "finite", "gamma": 0.5, "k": 0}, "k", f"[1, m = {M}]"),
])
def test_bad_parameters_name_the_parameter_and_range(kwargs, name, allowed):
    kind = kwargs.pop("kind")
    with pytest.raises(ValueError) as err:
        node_scalings(kind, M, **kwargs)
    assert f"`{name}`" in str(err.value) and allowed in str(err.value)


def test_bad_kind_and_width():
    with pytest.raises(ValueError, match="allowed: ntk, asymmetric"):
        node_scalings("zipf", M)
    with pytest.raises(ValueError, match="`m`"):
        node_scalings("ntk", 0)
    with pytest.raises(ValueError, match="alpha"):
        zipf_weights(10, 1.2)
