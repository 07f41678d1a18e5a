"""The relaxed model and its parametrization: exact limit, constraints by construction, finite gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import codesign as cd
from codesign._compile import jit
from codesign.search import load_problem_dict, relax
from codesign.smoothing import Smoothing

BASE_DOC = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 512, "tokens": 1e12},
    "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
}

INTEGER_POINTS = [
    dict(tp=2, pp=2, dp=16),
    dict(tp=8, pp=4, dp=2, recompute="full", zero=3, microbatch=2),
    dict(tp=1, pp=8, dp=4, cp=2, zero=0, recompute="none"),
    dict(tp=4, pp=2, dp=8, zero=2, interleave=2, placement=["pp", "tp", "cp", "ep", "dp"]),
]

_eval = jit(cd.evaluate_unchecked)


def _objectives(r):
    return np.array(
        [
            float(r.step_time_s),
            float(r.memory_gb["total"]),
            float(r.cost["cost_to_train_usd"]),
            float(r.cost["time_to_train_days"]),
        ]
    )


@pytest.mark.parametrize(
    "st",
    INTEGER_POINTS,
    ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items() if k != "placement"),
)
def test_relaxed_converges_to_exact_at_integer_points(st):
    cfg = cd.load_run_dict({**BASE_DOC, "strategy": st})
    exact = _objectives(_eval(*cfg.specs()))
    # First-order convergence: the relative error of every objective is at most tau at every
    # decade (the smooth max overshoots by <= n**tau - 1, the softplus by tau * scale * log 2).
    # Not asserted: that the error shrinks monotonically -- relaxed terms of opposite sign can
    # cancel at any tau (test_properties.py::CANCELLING is such a point).
    for tau in (0.1, 0.01, 1e-3, 1e-4):
        relaxed = _objectives(_eval(*cfg.specs(), Smoothing(exact=False, tau=tau)))
        err = np.max(np.abs(relaxed / exact - 1.0))
        assert err <= tau, (tau, err)


def test_relaxed_step_is_continuous_across_a_divisor_of_the_batch():
    """The rules make ``dp * microbatch`` divide the global batch, so the micro-batch count is
    an integer at every valid point and the relaxed model takes ``B / (dp * b)`` itself: a
    relaxed point a hair off a divisor must not pay a whole extra micro-batch (with the
    straight-through ceil, ``B / (dp * b) = 2.0016`` counted 3 micro-batches: +50 % step
    time), while the exact model keeps its ceil."""
    import dataclasses

    cfg = cd.load_run_dict({**BASE_DOC, "strategy": dict(tp=8, pp=1, dp=8, microbatch=32)})
    m, tr, sy, st, eff = cfg.specs()
    assert float(tr.global_batch / (st.dp * st.microbatch)) == 2.0
    soft = Smoothing(exact=False, tau=0.01)
    at = {}
    for rel in (-1e-3, 0.0, 1e-3):
        s2 = dataclasses.replace(st, dp=st.dp * (1.0 + rel))
        at[rel] = (
            float(_eval(m, tr, sy, s2, eff, soft).step_time_s),
            float(_eval(m, tr, sy, s2, eff).num_microbatches),
        )
    assert abs(at[1e-3][0] / at[0.0][0] - 1.0) < 0.01
    assert abs(at[-1e-3][0] / at[0.0][0] - 1.0) < 0.01
    # The exact model between valid points still counts whole micro-batches.
    assert at[-1e-3][1] == 3.0 and at[0.0][1] == 2.0 and at[1e-3][1] == 2.0


def _codesign_problem():
    doc = {
        **BASE_DOC,
        "objective": {"minimize": "cost_to_train"},
        "constraints": {"capex_max_usd": 3e6, "power_max_kw": 80.0},
        "search": {
            "num_accelerators": [16, 32, 64, 128],
            "tp": [1, 2, 4, 8],
            "pp": [1, 2, 4, 8],
            "cp": [1, 2, 4],
            "microbatch": [1, 2, 4],
            "interleave": [1, 2],
            "tiers": [{"index": 1, "bandwidth_gbps": [12.5, 25, 50, 100]}],
        },
    }
    return load_problem_dict(doc)


def _moe_problem():
    """Every variable free: N, both bandwidths, tp, pp, cp, ep, microbatch, interleave, recompute, ZeRO."""
    doc = {
        "model": {"preset": "mixtral-8x7b"},
        "training": {"global_batch": 1024, "tokens": 1e12},
        "system": {"accelerator": "h100-sxm5-80gb"},
        "objective": {"minimize": "time_to_train"},
        "constraints": {"capex_max_usd": 2e7, "power_max_kw": 1000.0},
        "search": {
            "num_accelerators": [64, 128, 256, 512],
            "tp": [1, 2, 4, 8],
            "pp": [1, 2, 4, 8],
            "cp": [1, 2],
            "ep": [1, 2, 4, 8],
            "microbatch": [1, 2, 4],
            "interleave": [1, 2],
            "tiers": [
                {"index": 0, "bandwidth_gbps": [112.5, 225, 450, 900]},
                {"index": 1, "bandwidth_gbps": {"min": 12.5, "max": 200, "num": 5}},
            ],
        },
    }
    return load_problem_dict(doc)


def test_parametrization_satisfies_product_and_boxes():
    pb = _codesign_problem()
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space.free_n and space.free_tiers == (1,) and space.free_degrees == ("tp", "pp", "cp")
    assert space.free_interleave and not space.free_ep and "ep" in space.unit
    for seed in range(20):
        p = relax.init_params(jax.random.key(seed), space, scale=3.0)
        s = relax.to_specs(p, space, box, base)
        st, sy = s["strategy"], s["system"]
        n = float(sy.num_accelerators)
        assert float(st.tp * st.pp * st.dp * st.cp) == pytest.approx(n, rel=1e-12)
        assert 16.0 - 1e-9 <= n <= 128.0 + 1e-9
        for d in (st.tp, st.pp, st.dp, st.cp):
            assert float(d) >= 1.0 - 1e-12
        assert 1.0 - 1e-12 <= float(st.microbatch) <= 4.0 + 1e-9
        assert 1.0 - 1e-12 <= float(st.interleave) <= 2.0 + 1e-9
        assert float(st.ep) == 1.0
        assert 12.5 - 1e-9 <= float(sy.tiers[1].bandwidth_gbps) <= 100.0 + 1e-9
        assert float(sy.tiers[0].bandwidth_gbps) == float(pb.cfg.system.tiers[0].bandwidth_gbps)
        for w in (st.recompute, st.zero):
            assert float(jnp.sum(w)) == pytest.approx(1.0) and float(jnp.min(w)) >= 0.0


def test_fixed_variables_keep_their_values():
    """Hardware mode: the strategy is fixed, only bandwidths move; N fixed keeps dp exact."""
    doc = {
        **BASE_DOC,
        "strategy": {"tp": 4, "pp": 2, "microbatch": 2, "recompute": "full", "zero": 3},
        "constraints": {"capex_max_usd": 3e6},
        "search": {
            "mode": "hardware",
            "tiers": [
                {"index": 0, "bandwidth_gbps": [100, 200, 400]},
                {"index": 1, "bandwidth_gbps": {"min": 10, "max": 80, "num": 4}},
            ],
        },
    }
    pb = load_problem_dict(doc)
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space.free_degrees == () and not space.free_n and space.free_tiers == (0, 1)
    assert not (space.free_recompute or space.free_zero or space.free_microbatch)
    for seed in range(5):
        p = relax.init_params(jax.random.key(seed), space, scale=3.0)
        assert set(p) == {"hw"}
        st = relax.to_specs(p, space, box, base)["strategy"]
        assert (float(st.tp), float(st.pp), float(st.dp), float(st.microbatch)) == pytest.approx(
            (4.0, 2.0, 8.0, 2.0)
        )
        np.testing.assert_allclose(np.asarray(st.recompute), [0, 0, 1])
        np.testing.assert_allclose(np.asarray(st.zero), [0, 0, 0, 1])
        bw = relax.to_specs(p, space, box, base)["system"].tiers
        assert 100 - 1e-9 <= float(bw[0].bandwidth_gbps) <= 400 + 1e-9
        assert 10 - 1e-9 <= float(bw[1].bandwidth_gbps) <= 80 + 1e-9


def test_gradients_finite_in_design_box():
    """Random points across (and beyond) the box, at several temperatures, with every variable
    free (MoE: expert parallelism too): finite loss and gradients."""
    pb = _moe_problem()
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space.free_ep and space.free_interleave and space.free_n and space.free_tiers == (0, 1)
    keys = jax.random.split(jax.random.key(0), 64)
    params = jax.vmap(lambda k: relax.init_params(k, space, scale=4.0))(keys)
    taus = jnp.geomspace(0.5, 0.003, 64)
    rhos = jnp.geomspace(1.0, 1e3, 64)

    @jit
    def vg(p, tau, rho):
        return jax.vmap(jax.value_and_grad(relax.loss), in_axes=(0, 0, 0, None, None, None))(
            p, tau, rho, space, box, base
        )

    val, g = vg(params, taus, rhos)
    assert bool(jnp.all(jnp.isfinite(val)))
    for name, leaf in g.items():
        assert bool(jnp.all(jnp.isfinite(leaf))), name
        # Every free variable gets an informative gradient somewhere in the box.
        assert float(jnp.max(jnp.abs(leaf))) > 1e-6, name


@pytest.mark.parametrize("tau", [0.3, 0.1, 0.01, 1e-3])
@pytest.mark.parametrize("n", [2, 5, 16, 64])
def test_smooth_max_stays_within_its_documented_factor(n, tau):
    """The relaxed maximum of ``n`` non-negative terms lies in ``[max, max * n**tau]``
    (codesign.smoothing: the p-norm with p = 1/tau; equality at the top when all terms are
    equal): the relative error of one maximum is at most ``tau ln n`` to first order, which
    is why a step that takes maxima over many stages approaches the exact model with a
    constant above 1."""
    soft = Smoothing(exact=False, tau=tau)
    rng = np.random.default_rng(n)
    for x in (rng.uniform(0.0, 3.0, size=(50, n)), np.full((1, n), 2.0)):
        hard = x.max(axis=1)
        got = np.asarray(soft.max_reduce(jnp.asarray(x), axis=1))
        assert np.all(got >= hard * (1 - 1e-12))
        assert np.all(got <= hard * n**tau * (1 + 1e-12))
    np.testing.assert_allclose(got, 2.0 * n**tau, rtol=1e-9)  # all equal: the bound is attained


@pytest.mark.parametrize("tau", [0.3, 0.05, 1e-3])
def test_list_max_and_weights_equal_the_stacked_forms(tau):
    """``Smoothing.max`` and ``argmax_weights`` take their relaxed forms term by term over the
    list (so that XLA fuses them); they are the p-norm over the stacked arguments (written
    out here) and a softmax at ``tau`` times the largest magnitude: values, and gradients
    (those of the largest terms aside), zeros and ties included."""
    soft = Smoothing(exact=False, tau=tau)
    rng = np.random.default_rng(7)
    xs = [jnp.asarray(rng.uniform(0.0, 3.0, size=20)) for _ in range(4)]
    xs[1] = xs[1].at[:3].set(0.0)
    xs[2] = xs[2].at[3:6].set(xs[0][3:6])  # ties
    xs[3] = xs[3].at[:3].set(0.0)
    xs[0] = xs[0].at[:3].set(0.0)  # one column of zeros only

    def listed(*a):
        return jnp.sum(soft.max(*a))

    def stacked(*a):  # the p-norm over a stacked axis, written here as reference
        x = jnp.stack(a)
        m = jax.lax.stop_gradient(jnp.max(x, axis=0))
        safe_m = jnp.where(m > 0, m, 1.0)
        ratio = jnp.clip(x / safe_m, 0.0, 1.0)
        pw = jnp.where(ratio > 0, ratio ** (1.0 / tau), 0.0)
        out = safe_m * jnp.sum(pw, axis=0) ** tau
        return jnp.sum(jnp.where(m > 0, out, 0.0))

    np.testing.assert_allclose(listed(*xs), stacked(*xs), rtol=1e-12)
    # The largest term's derivative depends on whether its ratio to the maximum rounds to
    # exactly 1 (half, the clip's tie rule) or an ulp below (all): compared elsewhere.
    top = jnp.max(jnp.stack(xs), axis=0)
    for x, g1, g2 in zip(
        xs,
        jax.grad(listed, argnums=(0, 1, 2, 3))(*xs),
        jax.grad(stacked, argnums=(0, 1, 2, 3))(*xs),
        strict=True,
    ):
        other = np.asarray(x < top)
        assert other.sum() >= 10
        np.testing.assert_allclose(g1[other], g2[other], rtol=1e-10, atol=1e-12)

    def weights_listed(*a):
        return jnp.stack(soft.argmax_weights(*a))

    def weights_softmax(*a):
        x = jnp.stack(a)
        scale = jax.lax.stop_gradient(jnp.maximum(jnp.max(jnp.abs(x), axis=0), 1e-30))
        return jax.nn.softmax(x / (tau * scale), axis=0)

    ys = [x - 1.0 for x in xs]  # signed arguments
    np.testing.assert_allclose(weights_listed(*ys), weights_softmax(*ys), rtol=1e-10, atol=1e-300)
    for g1, g2 in zip(
        jax.jacobian(lambda a: weights_listed(*a)[1])(ys),
        jax.jacobian(lambda a: weights_softmax(*a)[1])(ys),
        strict=True,
    ):
        np.testing.assert_allclose(g1, g2, rtol=1e-8, atol=1e-10)
