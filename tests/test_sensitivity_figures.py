"""The figures of a sensitivity analysis (codesign.sensitivity._figures): their data checked
against the exact model and a brute-force sweep, and the figures drawn (Agg)."""

from __future__ import annotations

import io
import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from conftest import example_config  # noqa: E402

import codesign as cd  # noqa: E402
from codesign.search import sweep  # noqa: E402
from codesign.sensitivity import (  # noqa: E402  # noqa: E402
    Curve,
    Elasticity,
    HeatMap,
    Sensitivity,
    heatmap,
    one_at_a_time,
    parameters_of,
    plot_curves,
    plot_heatmap,
    plot_tornado,
    strategy_boundaries,
    strategy_label,
    tornado_rows,
)
from codesign.sensitivity._figures import _slope_kinks  # noqa: E402

BW1 = "tiers[1].bandwidth_gbps"
SV = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4],
    "microbatch": [1, 2],
    "recompute": ["none", "selective", "full"],
    "zero": [0, 1, 3],
}


def llama():
    return cd.load_run_dict(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 512, "tokens": 1e12},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
            "strategy": {"tp": 2, "pp": 1, "dp": 32},
        }
    )


@pytest.fixture(scope="module")
def gpt3():
    return example_config()


@pytest.fixture(scope="module")
def bw_curve(gpt3):
    # GPT-3 on 1024 A100: 0.66 s of exposed DP communication at 25 GB/s of scale-out; it
    # ends near 175 GB/s (x 7, calibrated presets), so the grid spans x 1/16 .. x 16 to keep
    # grid segments on both sides of the kink whatever the calibration moves it by.
    return one_at_a_time(gpt3, BW1, "step_time", num=41, span=16.0)


@pytest.fixture(scope="module")
def hm():
    f = np.geomspace(0.25, 4.0, 9)
    return heatmap(llama(), BW1, "accelerator.hbm_gb", f, f, strategy_values=SV)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50)
    return buf.getvalue()


# ---- one at a time --------------------------------------------------------------------------


def test_curve_matches_the_exact_model(gpt3, bw_curve):
    c = bw_curve
    r = cd.evaluate(*gpt3.specs())
    assert c.reference == pytest.approx(float(r.step_time_s), rel=1e-12)
    mid = len(c.factors) // 2
    assert c.factors[mid] == pytest.approx(1.0, rel=1e-12)
    assert c.objective_values[mid] == pytest.approx(float(r.step_time_s), rel=1e-9)
    assert c.exposed_dp[mid] == pytest.approx(float(r.breakdown_s["dp_comm"]), rel=1e-9)
    assert np.allclose(c.values, 25.0 * c.factors)
    assert c.fits.all()
    # More scale-out bandwidth never slows the step.
    assert np.all(np.diff(c.objective_values) <= 1e-12)


def test_kink_where_exposed_dp_ends(gpt3, bw_curve):
    c = bw_curve
    assert [k.reason for k in c.kinks] == ["exposed DP communication ends"]
    (k,) = c.kinks
    i = int(np.flatnonzero(c.values == k.between[0])[0])
    assert c.values[i + 1] == k.between[1]
    assert c.exposed_dp[i] > 0.0 and c.exposed_dp[i + 1] == 0.0
    assert k.between[0] < k.value < k.between[1]
    assert k.factor == pytest.approx(k.value / 25.0)
    assert k.left < k.right < 0.0  # the slope flattens where DP stops being exposed
    # Located by bisection to well under 1 % of the value.
    near = one_at_a_time(gpt3, BW1, "step_time", [k.factor * 0.995, k.factor * 1.005])
    assert near.exposed_dp[0] > 0.0 and near.exposed_dp[1] == 0.0


def test_kink_where_memory_fit_switches(gpt3):
    c = one_at_a_time(gpt3, "accelerator.hbm_gb", "step_time", num=17, span=4.0)
    mem = float(cd.evaluate(*gpt3.specs()).memory_gb["total"])
    assert [k.reason for k in c.kinks] == ["memory fit switches"]
    assert c.kinks[0].value == pytest.approx(mem, rel=1e-3)
    assert np.array_equal(c.fits, c.values >= mem)
    # HBM capacity does not enter the step time.
    assert np.allclose(c.objective_values, c.reference, rtol=1e-12)


def test_smooth_curve_has_no_kinks(gpt3):
    c = one_at_a_time(gpt3, "pue", "energy_to_train", num=17, span=2.0)
    assert c.kinks == []
    # Energy is proportional to the PUE: elasticity 1 everywhere.
    assert np.allclose(np.diff(np.log(c.objective_values)) / np.diff(np.log(c.values)), 1.0)


def test_discrete_parameter_takes_valid_values():
    cfg = llama()
    c = one_at_a_time(cfg, "num_accelerators", "time_to_train", num=9, span=4.0)
    assert 64.0 in c.values
    assert np.all(c.values % 2 == 0) and np.all(np.diff(c.values) > 0)
    assert 16 <= c.values.min() and c.values.max() <= 256
    r = cd.evaluate(*cfg.specs())
    assert c.reference == pytest.approx(float(r.cost["time_to_train_days"]), rel=1e-12)
    # More accelerators train faster (same strategy, more data-parallel replicas).
    assert np.all(np.diff(c.objective_values) < 0)


def test_slope_kinks_synthetic():
    x = np.linspace(-2.0, 2.0, 41)
    x0 = 0.537
    y = 0.1 * x**2 + np.where(x < x0, -0.4 * (x - x0), 0.2 * (x - x0))
    ((i, t, why),) = _slope_kinks(x, y)
    assert why == "slope changes"
    assert x[i] + t * (x[i + 1] - x[i]) == pytest.approx(x0, abs=1e-9)
    # A jump, and smooth curves with strong curvature: nothing else.
    ((i, _, why),) = _slope_kinks(x, 0.1 * x + 0.05 * (x > 0.31))
    assert why == "value jumps" and x[i] < 0.31 < x[i + 1]
    assert _slope_kinks(x, np.log(1.0 + 4.0 * np.exp(-2.0 * x))) == []
    assert _slope_kinks(x, np.log(2.0 + np.exp(x))) == []


def test_one_at_a_time_rejects_bad_input(gpt3):
    with pytest.raises(cd.SpecError):
        one_at_a_time(gpt3, "no_such_parameter")
    with pytest.raises(cd.SpecError):
        one_at_a_time(gpt3, BW1, "usd_per_fortnight")
    with pytest.raises(cd.SpecError):
        one_at_a_time(gpt3, BW1, factors=[0.5, -1.0])


# ---- heat map -------------------------------------------------------------------------------


def test_heatmap_center_is_the_best_strategy(hm):
    cfg = llama()
    assert hm.best.shape == hm.strategy_index.shape == (9, 9)
    assert hm.reference == hm.best[4, 4]
    own = float(cd.evaluate(*cfg.specs()).cost["time_to_train_days"])
    assert hm.fixed[4, 4] == pytest.approx(own, rel=1e-9)
    assert hm.best[4, 4] <= hm.fixed[4, 4]
    assert np.all(hm.best <= hm.fixed)
    ok = np.isfinite(hm.best)
    assert np.array_equal(hm.strategy_index >= 0, ok)
    assert ok[4, 4]
    assert np.isinf(hm.fixed[:, 0]).all()  # the run's own strategy needs more than 20 GB
    assert strategy_label(hm.strategies[hm.strategy_index[4, 4]]).startswith("tp")


@pytest.mark.parametrize("cell", [(4, 4), (0, 8)])
def test_heatmap_matches_a_sweep(hm, cell):
    i, j = cell
    axes = {f"strategy.{k}": sorted({s[k] for s in hm.strategies}) for k in SV}
    axes[f"system.{BW1}"] = [float(hm.values1[i])]
    axes["system.accelerator.hbm_gb"] = [float(hm.values2[j])]
    res = sweep(llama(), axes, objective="time_to_train", top_k=2, progress=False)
    assert hm.best[i, j] == pytest.approx(float(res.best_values[0]), rel=1e-9)
    best = hm.strategies[hm.strategy_index[i, j]]
    assert {k: best[k] for k in SV} == {k: res.best()[f"strategy.{k}"] for k in SV} or hm.best[
        i, j
    ] == pytest.approx(float(res.best_values[1]), rel=1e-12)


def test_strategy_label():
    d = {"tp": 4.0, "pp": 8.0, "cp": 1.0, "ep": 1.0, "microbatch": 1.0, "interleave": 1.0}
    assert strategy_label({**d, "recompute": "selective", "zero": 1}) == "tp4 pp8 mb1 sel z1"
    assert strategy_label({**d, "recompute": "none", "zero": 0}) == "tp4 pp8 mb1 z0"
    d2 = {**d, "cp": 2.0, "interleave": 4.0, "recompute": "full", "zero": 3}
    assert strategy_label(d2) == "tp4 cp2 pp8 v4 mb1 full z3"


def _toy(idx) -> HeatMap:
    idx = np.asarray(idx)
    n1, n2 = idx.shape
    v1, v2 = 2.0 ** np.arange(n1), 3.0 ** np.arange(n2)
    best = np.where(idx >= 0, 1.0 + idx, np.inf)
    s = {"tp": 1.0, "pp": 1.0, "microbatch": 1.0, "recompute": "none", "zero": 0}
    return HeatMap(
        p1="a",
        p2="b",
        label1="a",
        label2="b",
        objective="step_time",
        values1=v1,
        values2=v2,
        factors1=v1,
        factors2=v2,
        best=best,
        strategy_index=idx,
        strategies=[{**s, "tp": 2.0**k} for k in range(3)],
        fixed=best,
        reference=1.0,
    )


def test_strategy_boundaries():
    # x: values1 (edges at geometric midpoints), y: values2.
    segs = strategy_boundaries(_toy([[0, 0], [1, 1]]))
    assert len(segs) == 2
    for (x0, _), (x1, _) in segs:
        assert x0 == x1 == pytest.approx(math.sqrt(2.0))
    assert sorted(s[0][1] for s in segs) == pytest.approx([1 / math.sqrt(3), math.sqrt(3)])
    assert len(strategy_boundaries(_toy([[0, 1, 1], [0, 1, 2], [-1, -1, 2]]))) == 7


# ---- figures --------------------------------------------------------------------------------


def _sens() -> Sensitivity:
    """A Sensitivity of the Llama run built by hand: one elasticity of each status."""
    cfg = llama()
    names = ["accelerator.peak_tflops", BW1, "num_accelerators", "pue", "tiers[0].latency_us"]
    params = parameters_of(cfg, names=names)
    rows = [
        ("accelerator.peak_tflops", "smooth", -0.8, -0.8, -0.8),
        (BW1, "kink", None, -0.5, -0.1),
        ("num_accelerators", "discrete", -0.95, -0.97, -0.93),
        ("pue", "smooth", 0.0, 0.0, 0.0),
        ("tiers[0].latency_us", "undefined", None, None, 0.3),
    ]
    els = [Elasticity(n, "time_to_train", 1.0, e, lf, rt, st) for n, st, e, lf, rt in rows]
    return Sensitivity(
        config=cfg,
        parameters=params,
        objectives=("time_to_train",),
        values={"time_to_train": 17.0},
        fits=True,
        elasticities=els,
        bottleneck=None,
        requirements=[],
        target_objective="time_to_train",
        reduction=0.1,
    )


def test_plot_tornado():
    s = _sens()
    rows = tornado_rows(s, "time_to_train", 3)
    assert [r["parameter"] for r in rows] == ["num_accelerators", "accelerator.peak_tflops", BW1]
    assert rows[0]["label"] == "accelerator count"
    fig = plot_tornado(s, "time_to_train", n=3)
    ax = fig.axes[0]
    # One bar for the discrete and the smooth parameter, two for the kink.
    assert len(ax.patches) == 1 + 1 + 2
    top = max(ax.patches, key=lambda p: p.get_y())
    assert top.get_width() == pytest.approx(-0.95)
    assert sorted(p.get_width() for p in ax.patches if p.get_height() < 0.5) == [-0.5, -0.1]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "accelerator count (arc)" in labels and len(labels) == 3
    assert "kink" in [t.get_text() for t in ax.texts]
    assert ax.get_xlabel() == "elasticity d ln f / d ln p"
    fig = plot_tornado(s, "time_to_train")  # all five: a zero bar, an undefined one
    assert len(fig.axes[0].patches) == 5
    assert "undefined" in [t.get_text() for t in fig.axes[0].texts]
    assert _png(fig)[:4] == b"\x89PNG"
    with pytest.raises(cd.SpecError):
        plot_tornado(s, "step_time")


def test_plot_curves(gpt3, bw_curve):
    hbm = one_at_a_time(gpt3, "accelerator.hbm_gb", "step_time", num=17, span=4.0)
    fig = plot_curves([bw_curve, hbm])
    ax = fig.axes[0]
    # Two curves, the reference line, one dotted line per kink.
    assert len(ax.lines) == 2 + 1 + 2
    assert sum(line.get_linestyle() == ":" for line in ax.lines) == 2
    assert len(ax.collections) == 1  # the hollow points of the HBM curve
    assert ax.get_xscale() == "log"
    assert isinstance(bw_curve, Curve)
    assert _png(fig)[:4] == b"\x89PNG"
    fig = plot_curves(bw_curve, x="value")
    assert fig.axes[0].get_xlabel() == bw_curve.label


def test_plot_heatmap(hm):
    from matplotlib.collections import LineCollection, QuadMesh

    fig = plot_heatmap(hm)
    ax = fig.axes[0]
    meshes = [c for c in ax.collections if isinstance(c, QuadMesh)]
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(meshes) == 1 and len(lines) == 1
    assert len(lines[0].get_segments()) == len(strategy_boundaries(hm))
    assert meshes[0].get_array().shape == (9, 9)
    assert meshes[0].get_array()[4, 4] == pytest.approx(1.0)
    assert 1 <= len(ax.texts) <= 6
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert _png(fig)[:4] == b"\x89PNG"
