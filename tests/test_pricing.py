"""The parametric prices and powers (codesign/pricing.py) and their fit to the catalog.

Golden values are worked out by hand from the numbers of ``codesign/hardware/pricing.toml``
(written by ``experiments/fit_pricing.py``), ``accelerators.toml`` and ``fabrics.toml``; the
comment next to each gives the arithmetic.  :func:`test_golden_coefficients` pins the toml
numbers the goldens use, so a refit that moves them fails there first, with the new values.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO, experiment_module, with_tier

from codesign.config import pricing_preset, system_preset, tier_preset
from codesign.cost import cluster_cost
from codesign.goodput import reliability_preset
from codesign.pricing import (
    Pricing,
    accelerator_power_w,
    accelerator_price_usd,
    tier_price_factor,
)

HARDWARE = REPO / "codesign" / "hardware"
N = 64


def _toml(kind: str) -> dict:
    return tomllib.loads((HARDWARE / f"{kind}.toml").read_text())


def _capex(system) -> float:
    return cluster_cost(system, 1.0, 1e6, 1e9)["capex_usd"]


def _power_kw(system) -> float:
    return cluster_cost(system, 1.0, 1e6, 1e9)["power_kw"]


def _with_acc(system, **changes):
    return dataclasses.replace(
        system, accelerator=dataclasses.replace(system.accelerator, **changes)
    )


def test_golden_coefficients():
    """The pricing.toml numbers the goldens below are computed from (rerun
    experiments/fit_pricing.py and update the goldens if the catalog changes)."""
    c = _toml("pricing")["coefficients"]
    assert c["usd_per_hbm_gb"] == 47.85
    assert c["usd_per_hbm_tbps"] == 1504.0
    assert c["usd_per_tflops"] == 5.642
    assert c["w_per_hbm_gb"] == 0.376
    assert c["latency_exponent"] == 0.6416
    assert c["spine_share"] == 0.5672
    assert c["domain_premium"] == 0.3606


# ---- (a) a part as listed costs its catalog price ---------------------------------------------


def test_listed_h100_cluster_costs_its_catalog_price():
    sy = system_preset("h100-sxm5-80gb", N)
    # accelerators.toml h100-sxm5-80gb: price_usd 27,500, power_w 700; fabrics.toml nvlink4:
    # 450 GB/s x US$5/GB/s = 2,250, 25 W; ib-ndr-400: 50 GB/s x US$150/GB/s = 7,500, 100 W.
    # The default reliability (llama3-h100, reliability.toml) buys checkpoint storage:
    # 0.122 GB/s per accelerator at US$5,000 and 40 W per GB/s = US$610 and 4.88 W.
    # capex = 64 x (27,500 + 2,250 + 7,500 + 610) = 64 x 37,860 = 2,423,040 USD
    # power = 64 x (700 + 25 + 100 + 4.88) W x PUE 1.2 = 63.734784 kW (no host by default)
    assert _capex(sy) == pytest.approx(2_423_040.0, rel=1e-12)
    assert _power_kw(sy) == pytest.approx(63.734784, rel=1e-12)
    # without failures (preset none) nothing is bought for them
    off = dataclasses.replace(sy, reliability=reliability_preset("none"))
    assert _capex(off) == pytest.approx(2_384_000.0, rel=1e-12)
    assert _power_kw(off) == pytest.approx(63.36, rel=1e-12)
    # the same, from the catalog numbers
    acc, fab = _toml("accelerators")["h100-sxm5-80gb"], _toml("fabrics")
    net = sum(
        fab[t]["bandwidth_gbps"] * fab[t]["price_per_gbps_usd"] for t in ("nvlink4", "ib-ndr-400")
    )
    assert _capex(off) == pytest.approx(N * (acc["price_usd"] + net), rel=1e-12)


@pytest.mark.parametrize("name", sorted(_toml("accelerators")))
def test_every_listed_part_costs_its_catalog_price(name):
    """Every preset, as listed, has its catalog price and power (no margin is charged)."""
    sy = system_preset(name, N)
    acc, fab = _toml("accelerators")[name], _toml("fabrics")
    assert float(accelerator_price_usd(sy.accelerator, sy.pricing)) == acc["price_usd"]
    assert float(accelerator_power_w(sy.accelerator, sy.pricing)) == acc["power_w"]
    tiers = (acc["scale_up"], acc["scale_out"])
    net = sum(fab[t]["bandwidth_gbps"] * fab[t]["price_per_gbps_usd"] for t in tiers)
    rel = sy.reliability  # the platform's default: checkpoint storage is bought too
    storage = N * float(rel.checkpoint_gbps) * float(rel.usd_per_checkpoint_gbps)
    assert storage > 0
    assert _capex(sy) == pytest.approx(N * (acc["price_usd"] + net) + storage, rel=1e-12)


# ---- (b) a moved knob pays its marginal price --------------------------------------------------


def test_more_hbm_costs_its_marginal_price_and_power():
    sy = system_preset("h100-sxm5-80gb", N)
    more = _with_acc(sy, hbm_gb=sy.accelerator.hbm_gb + 10.0)
    # capex: 64 x 10 GB x US$47.85/GB = 30,624 USD
    assert _capex(more) - _capex(sy) == pytest.approx(30_624.0, rel=1e-9)
    # power: 64 x 10 GB x 0.376 W/GB x PUE 1.2 / 1000 = 0.288768 kW
    assert _power_kw(more) - _power_kw(sy) == pytest.approx(0.288768, rel=1e-9)


def test_every_knob_at_the_margin():
    sy = system_preset("b200", N)
    p = sy.pricing
    # +1 TB/s: US$1,504; +100 TFLOP/s: 100 x US$5.642 = 564.2; +64 GB/s host link: 64 x US$4
    moved = _with_acc(
        sy,
        hbm_tbps=sy.accelerator.hbm_tbps + 1.0,
        peak_tflops=sy.accelerator.peak_tflops + 100.0,
        host_link_gbps=sy.accelerator.host_link_gbps + 64.0,
    )
    got = float(accelerator_price_usd(moved.accelerator, p))
    assert got == pytest.approx(35_000.0 + 1504.0 + 564.2 + 256.0, rel=1e-12)


# ---- (c) the coefficient file ------------------------------------------------------------------


def test_pricing_toml_is_complete_finite_non_negative_and_sourced():
    t = _toml("pricing")
    coef, src = t["coefficients"], t["sources"]
    names = {f.name for f in dataclasses.fields(Pricing)}
    assert set(coef) == names
    assert set(src) == names
    for k, v in coef.items():
        assert isinstance(v, float) and math.isfinite(v) and v >= 0.0, k
        assert "fit of the catalog" in src[k] or "estimate" in src[k] or "derived" in src[k], k
    fitted = [k for k in names if "fit of the catalog" in src[k]]
    assert fitted and all("leave-one-out" in src[k] for k in fitted)
    loaded = pricing_preset()
    for k, v in coef.items():
        assert getattr(loaded, k) == v, k
    assert pricing_preset(domain_premium=0.0).domain_premium == 0.0


# ---- (d) the fit -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fit_module():
    return experiment_module("fit_pricing")


def test_fit_leave_one_out_error_is_bounded(fit_module):
    """Bounds: the catalog prices being fitted are themselves estimates with ranges of about
    +-10-20% (H100 US$25-30k, H200 and B200 US$30-40k, MI300X US$10-15k), and 8 parts carry 5
    parameters, so a leave-one-out error of ~20% per part is the data's own uncertainty; 35%
    leaves room for a catalog update and stays well below the constant model (the geometric
    mean: ~53%), which is what an unconverged or mis-specified fit falls to.  Powers are
    vendor TDPs (little uncertainty): 15%."""
    acc = fit_module.load("accelerators")
    price = fit_module.fit_target(acc, "price_usd")
    power = fit_module.fit_target(acc, "power_w", vendor=False)
    base = fit_module.constant_baseline(price["listed"])
    assert price["errors"]["loo_mape"] < 0.35
    assert price["errors"]["loo_mape"] < 0.7 * base["loo_mape"]
    assert price["errors"]["loo_max"] < 0.6
    assert power["errors"]["loo_mape"] < 0.15
    assert power["errors"]["loo_max"] < 0.35
    assert all(v >= 0.0 for v in (*price["coef"].values(), *power["coef"].values()))
    # the shrinkage keeps every knob priced (no zero price from the collinear knobs)
    assert min(price["coef"].values()) > 0.0
    assert price["errors"]["mape"] <= price["errors"]["loo_mape"]


def test_fabric_coefficients_reproduce_the_catalog(fit_module):
    fab = fit_module.load("fabrics")
    p = pricing_preset()
    # domain premium: nvlink5 (8 GPUs, 2.0 us, US$3.5/GB/s) moved to 72 GPUs and 2.5 us is
    # priced as nvlink5-nvl72 (US$6.5/GB/s): (1 + 0.3606 log2 9) (2.0 / 2.5)^0.6416 = 1.857
    big = dataclasses.replace(tier_preset("nvlink5"), domain=72.0, latency_us=2.5)
    assert 3.5 * float(tier_price_factor(big, p, True)) == pytest.approx(6.5, rel=1e-3)
    # latency: roce-400 (6 us, US$135) at 5 us: 135 (6/5)^0.6416 = 151.75 (ib-ndr-400: US$150)
    fast = dataclasses.replace(tier_preset("roce-400"), latency_us=5.0)
    assert 135.0 * float(tier_price_factor(fast, p, False)) == pytest.approx(151.75, rel=1e-4)
    # spine share: ib-ndr-400 bill 1,800 + 5 x 440 + 6 x 550 + 300 = 7,600, of which above
    # the leaf 4 x 440 + 4 x 550 + 200 = 4,160 (0.547); the mean of the 5 bills is 0.5672
    assert fit_module.spine_share(fab)["rows"][1][3] == pytest.approx(4160 / 7600)
    assert fit_module.spine_share(fab)["value"] == pytest.approx(0.5672, abs=5e-5)


# ---- (e) gradients -----------------------------------------------------------------------------


def test_capex_gradients_are_finite_with_the_right_sign():
    sy = system_preset("h100-sxm5-80gb", N)
    acc = sy.accelerator

    def d_acc(field):
        return float(jax.grad(lambda x: _capex(_with_acc(sy, **{field: x})))(getattr(acc, field)))

    def d_tier(i, field):
        f = lambda x: _capex(with_tier(sy, i, **{field: x}))
        return float(jax.grad(f)(getattr(sy.tiers[i], field)))

    grads = {
        # d capex / d knob = N x usd_per_knob: 64 x 47.85, 64 x 1504, 64 x 5.642
        "hbm_gb": (d_acc("hbm_gb"), 64 * 47.85),
        "hbm_tbps": (d_acc("hbm_tbps"), 64 * 1504.0),
        "peak_tflops": (d_acc("peak_tflops"), 64 * 5.642),
        # latency: N bw price (ref/lat)^e -> -N bw price e / lat at lat = ref
        # nvlink4: -64 x 2,250 x 0.6416 / 2.5; ib-ndr-400: -64 x 7,500 x 0.6416 / 5
        "latency tier 0": (d_tier(0, "latency_us"), -64 * 2250 * 0.6416 / 2.5),
        "latency tier 1": (d_tier(1, "latency_us"), -64 * 7500 * 0.6416 / 5.0),
        # oversubscription: N bw price (1 - s + s ref/o) -> -N bw price s at o = ref = 1
        "oversubscription tier 1": (d_tier(1, "oversubscription"), -64 * 7500 * 0.5672),
        # domain: N bw price (1 + p log2(d/ref)) -> N bw price p / (d ln 2) at d = ref = 8
        "domain tier 0": (d_tier(0, "domain"), 64 * 2250 * 0.3606 / (8 * math.log(2))),
    }
    for k, (got, want) in grads.items():
        assert math.isfinite(got), k
        assert got == pytest.approx(want, rel=1e-9), k
        assert (got > 0) == (want > 0), k
    # the scale-out domain carries no premium (tier 0 only)
    assert d_tier(1, "domain") == 0.0


def test_power_gradient():
    sy = system_preset("h100-sxm5-80gb", N)
    g = jax.grad(lambda x: _power_kw(_with_acc(sy, hbm_gb=x)))(sy.accelerator.hbm_gb)
    # 64 x 0.376 W/GB x PUE 1.2 / 1000 kW/W
    assert float(g) == pytest.approx(64 * 0.376 * 1.2 / 1e3, rel=1e-12)


# ---- (f) every factor is 1 at the listed values --------------------------------------------------


@pytest.mark.parametrize("name", sorted(_toml("fabrics")))
def test_tier_price_factor_is_one_at_listed_values(name):
    tier = tier_preset(name, 1024.0)
    p = pricing_preset()
    assert float(tier_price_factor(tier, p, True)) == 1.0
    assert float(tier_price_factor(tier, p, False)) == 1.0
    # jitted too (the traced path)
    assert float(jax.jit(tier_price_factor, static_argnums=2)(tier, p, True)) == 1.0


def test_tier_price_factor_directions():
    p = pricing_preset()
    t = tier_preset("ib-ndr-400", 1024.0)
    assert float(tier_price_factor(dataclasses.replace(t, oversubscription=2.0), p, False)) == (
        pytest.approx(1 - 0.5672 / 2)  # 1 - s + s/2
    )
    nv = tier_preset("nvlink5")
    smaller = float(tier_price_factor(dataclasses.replace(nv, domain=4.0), p, True))
    assert smaller == pytest.approx(1 - 0.3606)  # one halving: 1 + p log2(1/2)
    assert float(tier_price_factor(dataclasses.replace(nv, domain=1.0), p, True)) == 0.05
    assert (
        float(jnp.asarray(tier_price_factor(dataclasses.replace(nv, domain=1.0), p, False))) == 1.0
    )
