"""The step model end to end: consistency, jit/eager/vmap/sweep agreement, gradients, cost."""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import example_config, small_config, small_doc, with_tier

import codesign as cd
from codesign import step as step_mod
from codesign.sweep import sweep

CONFIGS = {
    "gpt3-example": example_config,
    "llama8b-small": small_config,
    "llama8b-full-zero3-cp": lambda: small_config(tp=2, pp=2, dp=8, cp=2, recompute="full", zero=3),
    "llama8b-none-zero0-nosp": lambda: small_config(
        tp=4, pp=1, dp=16, recompute="none", zero=0, sequence_parallel=False, flash_attention=False,
        microbatch=2,
    ),
    "llama8b-zero2-pp-inner": lambda: small_config(
        tp=2, pp=4, dp=8, zero=2, interleave=2, overlap_tp=True, placement=["pp", "tp", "cp", "ep", "dp"]
    ),
    "mixtral-ep": lambda: cd.load_run_dict(
        {
            "model": {"preset": "mixtral-8x7b"},
            "training": {"global_batch": 256},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
            "strategy": {"tp": 2, "pp": 2, "dp": 16, "ep": 8},
        }
    ),
}


def report_of(cfg) -> cd.Report:
    return cd.evaluate(*cfg.specs())


def allfloat(tree):
    return [float(x) for x in jax.tree_util.tree_leaves(tree)]


# ---- consistency ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_breakdown_and_memory_sum(name):
    cfg = CONFIGS[name]()
    r = report_of(cfg)
    assert set(r.breakdown_s) == set(cd.BREAKDOWN_KEYS)
    total = sum(float(r.breakdown_s[k]) for k in cd.BREAKDOWN_KEYS)
    assert math.isclose(float(r.step_time_s), total, rel_tol=1e-12)
    assert all(float(v) >= 0.0 for v in r.breakdown_s.values())
    mem = sum(float(r.memory_gb[k]) for k in ("weights", "gradients", "optimizer", "activations", "buffers"))
    assert math.isclose(float(r.memory_gb["total"]), mem, rel_tol=1e-12)
    assert bool(r.fits) == (float(r.memory_gb["total"]) <= float(cfg.system.accelerator.hbm_gb))
    tokens = float(cfg.training.global_batch) * float(cfg.model.seq_len)
    assert math.isclose(float(r.tokens_per_s), tokens / float(r.step_time_s), rel_tol=1e-12)
    n_mb = math.ceil(float(cfg.training.global_batch) / (float(cfg.strategy.dp) * float(cfg.strategy.microbatch)))
    assert float(r.num_microbatches) == n_mb
    assert all(math.isfinite(x) for x in allfloat(r))


def test_example_pipeline_terms_by_hand():
    """Bubble (p - 1)/v T_mb (Narayanan et al. 2021 Sec. 2.2.2) and m T_mb of compute+TP."""
    cfg = example_config()
    r = report_of(cfg)
    b = r.breakdown_s
    n_mb = 96.0
    t_mb = sum(float(b[k]) for k in ("forward", "backward", "recompute", "tp_comm", "cp_comm", "ep_comm")) / n_mb
    assert math.isclose(float(b["pp_bubble"]), (8 - 1) / 4 * t_mb, rel_tol=1e-12)
    assert math.isclose(float(b["backward"]), 2 * float(b["forward"]), rel_tol=1e-12)


def test_data_parallel_only_has_no_pipeline_terms(small_cfg):
    cfg = small_config(tp=1, pp=1, dp=64)
    r = report_of(cfg)
    for k in ("pp_bubble", "pp_p2p", "tp_comm", "cp_comm", "ep_comm"):
        assert float(r.breakdown_s[k]) == 0.0, k


# ---- jit == eager == vmap == sweep ---------------------------------------------------


def assert_reports_close(a, b, rtol=1e-12):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    np.testing.assert_allclose(np.asarray(la, dtype=float), np.asarray(lb, dtype=float), rtol=rtol, atol=0)


def test_jit_equals_eager_as_loaded():
    """evaluate_unchecked on the specs exactly as load_run_dict builds them (Python floats)
    under jax.disable_jit() must agree with the jitted evaluation."""
    cfg = small_config()
    jitted = cd.evaluate(*cfg.specs())
    with jax.disable_jit():
        eager = cd.evaluate_unchecked(*cfg.specs())
    assert_reports_close(eager, jitted)


def test_jit_equals_eager_array_leaves():
    cfg = example_config()
    jitted = cd.evaluate(*cfg.specs())
    specs = jax.tree.map(jnp.asarray, cfg.specs())
    with jax.disable_jit():
        eager = cd.evaluate_unchecked(*specs)
    assert_reports_close(eager, jitted)


def stack(*trees):
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def test_vmap_over_strategies():
    cfgs = [small_config(), small_config(tp=4, pp=2, dp=8, recompute="full"), small_config(tp=1, pp=4, dp=16, zero=3)]
    m, tr, sy, _, eff = cfgs[0].specs()
    strategies = stack(*[c.strategy for c in cfgs])
    batched = jax.jit(jax.vmap(cd.evaluate_unchecked, in_axes=(None, None, None, 0, None)))(m, tr, sy, strategies, eff)
    for i, c in enumerate(cfgs):
        single = report_of(c)
        assert_reports_close(jax.tree.map(lambda x, i=i: x[i], batched), single)


def test_vmap_over_bandwidth():
    cfg = small_config(tp=2, pp=4, dp=8)
    m, tr, sy, st, eff = cfg.specs()
    bws = [12.5, 50.0, 200.0]
    systems = stack(*[with_tier(sy, 1, bandwidth_gbps=b) for b in bws])
    batched = jax.vmap(cd.evaluate_unchecked, in_axes=(None, None, 0, None, None))(m, tr, systems, st, eff)
    for i, b in enumerate(bws):
        single = cd.evaluate(m, tr, with_tier(sy, 1, bandwidth_gbps=b), st, eff)
        assert_reports_close(jax.tree.map(lambda x, i=i: x[i], batched), single)
    # A slower scale-out network never makes the step faster.
    t = np.asarray(batched.step_time_s)
    assert t[0] >= t[1] >= t[2]


SWEEP_AXES = {
    "strategy.tp": [1, 2, 4, 8],
    "strategy.pp": [1, 2, 4],
    "strategy.recompute": ["selective", "full"],
    "system.tiers[1].bandwidth_gbps": [12.5, 50.0],
}


def _point_report(cfg, tp, pp, rec, bw):
    n = float(cfg.system.num_accelerators)
    c = small_config(tp=tp, pp=pp, dp=int(n / (tp * pp)), recompute=rec)
    return cd.evaluate(c.model, c.training, with_tier(c.system, 1, bandwidth_gbps=bw), c.strategy, c.efficiency)


def test_sweep_matches_individual_points():
    cfg = small_config()
    n_total = int(np.prod([len(v) for v in SWEEP_AXES.values()]))
    res = sweep(cfg, SWEEP_AXES, progress=False, top_k=n_total)
    assert res.num_points == n_total
    values = {}
    for flat, combo in enumerate(itertools.product(*SWEEP_AXES.values())):
        r = _point_report(cfg, *combo)
        if bool(r.fits):
            values[flat] = float(r.step_time_s)
    assert res.num_valid == n_total  # every point of this grid is a valid strategy
    assert res.num_feasible == len(values)
    assert len(res.best_values) == len(values)
    np.testing.assert_allclose(res.best_values, sorted(values.values()), rtol=1e-12)
    for i, (v, idx) in enumerate(zip(res.best_values, res.best_indices, strict=True)):
        assert math.isclose(v, values[int(idx)], rel_tol=1e-12)
        p = res.point(i)
        multi = [SWEEP_AXES[k].index(p[k]) for k in SWEEP_AXES]
        assert int(np.ravel_multi_index(multi, [len(x) for x in SWEEP_AXES.values()])) == int(idx)
    # Profiles: best objective at each value of each axis.
    names = list(SWEEP_AXES)
    for a, name in enumerate(names):
        for j, val in enumerate(SWEEP_AXES[name]):
            best = min(
                (v for flat, v in values.items()
                 if np.unravel_index(flat, [len(x) for x in SWEEP_AXES.values()])[a] == j),
                default=math.inf,
            )
            assert math.isclose(res.profiles[name][j], best, rel_tol=1e-12), (name, val)


def test_sweep_sharded_equals_single_device():
    cfg = small_config()
    n_total = int(np.prod([len(v) for v in SWEEP_AXES.values()]))
    kw = dict(progress=False, top_k=n_total, block_size=2)  # 24 outer blocks: spread over devices
    many = sweep(cfg, SWEEP_AXES, devices=jax.devices(), **kw)
    one = sweep(cfg, SWEEP_AXES, devices=jax.devices()[:1], **kw)
    assert len(jax.devices()) == 4
    assert (many.num_valid, many.num_feasible) == (one.num_valid, one.num_feasible)
    assert dict(zip(many.best_indices.tolist(), many.best_values.tolist(), strict=True)) == pytest.approx(
        dict(zip(one.best_indices.tolist(), one.best_values.tolist(), strict=True)), rel=1e-12
    )
    np.testing.assert_allclose(many.best_values, one.best_values, rtol=1e-12)
    for k in SWEEP_AXES:
        np.testing.assert_allclose(many.profiles[k], one.profiles[k], rtol=1e-12)


# ---- compilation -----------------------------------------------------------------------


def test_no_recompilation_when_values_change():
    cfg = small_config()
    m, tr, sy, st, eff = cfg.specs()
    cd.evaluate(m, tr, sy, st, eff)
    before = step_mod._evaluate_jit._cache_size()
    times = []
    for bw in (12.5, 25.0, 100.0):
        times.append(float(cd.evaluate(m, tr, with_tier(sy, 1, bandwidth_gbps=bw), st, eff).step_time_s))
    for c in (small_config(tp=4, pp=1, dp=16, recompute="full", zero=3), small_config(tp=1, pp=8, dp=8, zero=0)):
        cd.evaluate(*c.specs())
    assert step_mod._evaluate_jit._cache_size() == before
    assert len(set(times)) > 1  # the values really changed the result

    # A fresh jit compiles exactly once for the three bandwidths.  (A new function object:
    # jax shares one compilation cache between jit wrappers of the same function.)
    fresh = jax.jit(lambda *specs: cd.evaluate_unchecked(*specs))
    for bw in (12.5, 25.0, 100.0):
        fresh(m, tr, with_tier(sy, 1, bandwidth_gbps=bw), st, eff)
    assert fresh._cache_size() == 1


# ---- gradients -------------------------------------------------------------------------

def _step_time(m, tr, sy, st, eff):
    return cd.evaluate_unchecked(m, tr, sy, st, eff).step_time_s


# One compiled gradient for every configuration of the same structure.
_grad_step_time = jax.jit(jax.grad(_step_time, argnums=(2, 3)))

GRAD_CONFIGS = ["gpt3-example", "llama8b-full-zero3-cp", "mixtral-ep", "llama8b-none-zero0-nosp"]


@pytest.mark.parametrize("name", GRAD_CONFIGS)
def test_gradients_finite(name):
    cfg = CONFIGS[name]()
    m, tr, sy, st, eff = cfg.specs()

    g_sys, g_st = _grad_step_time(m, tr, sy, st, eff)
    for path, leaf in jax.tree_util.tree_leaves_with_path(g_sys):
        assert np.all(np.isfinite(np.asarray(leaf))), jax.tree_util.keystr(path)
    for name_ in ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave"):
        assert math.isfinite(float(getattr(g_st, name_))), name_
    for path, leaf in jax.tree_util.tree_leaves_with_path(g_st):
        assert np.all(np.isfinite(np.asarray(leaf))), jax.tree_util.keystr(path)
    # Faster hardware never slows a step down.
    assert float(g_sys.accelerator.peak_tflops) < 0.0
    assert all(float(t.bandwidth_gbps) <= 0.0 for t in g_sys.tiers)


# ---- infeasible and cost -------------------------------------------------------------


def test_infeasible_config_is_finite_and_does_not_fit():
    cfg = cd.load_run_dict(
        {
            "model": {"preset": "gpt3-175b"},
            "training": {"global_batch": 64},
            "system": {"accelerator": "a100-sxm4-40gb", "num_accelerators": 64},
            "strategy": {"tp": 8, "pp": 8, "dp": 1, "recompute": "none", "zero": 0},
        }
    )
    r = report_of(cfg)
    assert not bool(r.fits)
    assert float(r.memory_gb["total"]) > 40.0
    assert all(math.isfinite(x) for x in allfloat(r))
    assert float(r.step_time_s) > 0


def test_costs_by_hand():
    cfg = example_config()
    r = report_of(cfg)
    n = 1024.0
    # a100-sxm4-80gb US$15,000; nvlink3 300 GB/s x US$5; ib-hdr-200 25 GB/s x US$215 (catalog).
    capex = n * (15000.0 + 300.0 * 5.0 + 25.0 * 215.0)
    assert math.isclose(float(r.cost["capex_usd"]), capex, rel_tol=1e-12)
    assert math.isclose(float(r.cost["network_capex_usd"]), n * (1500.0 + 5375.0), rel_tol=1e-12)
    power_kw = n * (400.0 + 30.0 + 70.0) * 1.2 / 1e3
    assert math.isclose(float(r.cost["power_kw"]), power_kw, rel_tol=1e-12)
    usd_per_hour = capex / (4.0 * 8760.0) + power_kw * 0.08
    assert math.isclose(float(r.cost["usd_per_hour"]), usd_per_hour, rel_tol=1e-12)
    step = float(r.step_time_s)
    assert math.isclose(float(r.cost["usd_per_step"]), usd_per_hour * step / 3600.0, rel_tol=1e-12)
    assert math.isclose(float(r.cost["energy_kwh_per_step"]), power_kw * step / 3600.0, rel_tol=1e-12)
    steps = 3.0e11 / (1536.0 * 2048.0)
    assert math.isclose(float(r.cost["time_to_train_days"]), steps * step / 86400.0, rel_tol=1e-12)
    assert math.isclose(float(r.cost["cost_to_train_usd"]), steps * usd_per_hour * step / 3600.0, rel_tol=1e-12)


def test_capex_general_formula():
    """capex = N (price + host + sum_t bw_t price_t) for arbitrary tier prices."""
    cfg = small_config()
    sy = dataclasses.replace(
        with_tier(with_tier(cfg.system, 0, price_per_gbps_usd=7.0), 1, price_per_gbps_usd=111.0),
        host_capex_usd_per_accelerator=3000.0,
    )
    r = cd.evaluate(cfg.model, cfg.training, sy, cfg.strategy)
    expected = 64.0 * (27500.0 + 3000.0 + 450.0 * 7.0 + 50.0 * 111.0)
    assert math.isclose(float(r.cost["capex_usd"]), expected, rel_tol=1e-12)


def test_no_tokens_means_zero_time_to_train():
    r = report_of(small_config())
    assert float(r.cost["time_to_train_days"]) == 0.0


def test_small_doc_is_checked():
    with pytest.raises(cd.SpecError):
        cd.load_run_dict(small_doc(tp=3, pp=2, dp=16))
