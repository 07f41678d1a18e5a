"""The step model end to end: consistency, jit/eager/vmap/sweep agreement, gradients, cost."""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import example_config, small_config, small_doc, with_tier

import codesign as cd
from codesign import step as step_mod
from codesign import workload
from codesign._compile import jit
from codesign.goodput import reliability_preset
from codesign.search import sweep

CONFIGS = {
    "gpt3-example": example_config,
    "llama8b-small": small_config,
    "llama8b-full-zero3-cp": lambda: small_config(tp=2, pp=2, dp=8, cp=2, recompute="full", zero=3),
    "llama8b-none-zero0-nosp": lambda: small_config(
        tp=4,
        pp=1,
        dp=16,
        recompute="none",
        zero=0,
        sequence_parallel=False,
        flash_attention=False,
        microbatch=2,
    ),
    "llama8b-zero2-pp-inner": lambda: small_config(
        tp=2,
        pp=4,
        dp=8,
        zero=2,
        interleave=2,
        overlap_tp=True,
        placement=["pp", "tp", "cp", "ep", "dp"],
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
    mem = sum(
        float(r.memory_gb[k])
        for k in ("weights", "gradients", "optimizer", "activations", "buffers")
    )
    assert math.isclose(float(r.memory_gb["total"]), mem, rel_tol=1e-12)
    assert bool(r.fits) == (float(r.memory_gb["total"]) <= float(cfg.system.accelerator.hbm_gb))
    tokens = float(cfg.training.global_batch) * float(cfg.model.seq_len)
    assert math.isclose(float(r.tokens_per_s), tokens / float(r.step_time_s), rel_tol=1e-12)
    n_mb = math.ceil(
        float(cfg.training.global_batch) / (float(cfg.strategy.dp) * float(cfg.strategy.microbatch))
    )
    assert float(r.num_microbatches) == n_mb
    assert all(math.isfinite(x) for x in allfloat(r))


def test_example_pipeline_terms_by_hand():
    """Bubble (p - 1)/v T_mb (Narayanan et al. 2021 Sec. 2.2.2) and m T_mb of compute+TP."""
    cfg = example_config()
    r = report_of(cfg)
    b = r.breakdown_s
    n_mb = 96.0
    t_mb = (
        sum(
            float(b[k])
            for k in ("forward", "backward", "recompute", "tp_comm", "cp_comm", "ep_comm")
        )
        / n_mb
    )
    assert math.isclose(float(b["pp_bubble"]), (8 - 1) / 4 * t_mb, rel_tol=1e-12)


def test_data_parallel_only_has_no_pipeline_terms():
    cfg = small_config(tp=1, pp=1, dp=64)
    r = report_of(cfg)
    for k in ("pp_bubble", "pp_p2p", "tp_comm", "cp_comm", "ep_comm"):
        assert float(r.breakdown_s[k]) == 0.0, k


# ---- jit == eager == vmap == sweep ---------------------------------------------------


def assert_reports_close(a, b, rtol=1e-12):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    np.testing.assert_allclose(
        np.asarray(la, dtype=float), np.asarray(lb, dtype=float), rtol=rtol, atol=0
    )


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
    cfgs = [
        small_config(),
        small_config(tp=4, pp=2, dp=8, recompute="full"),
        small_config(tp=1, pp=4, dp=16, zero=3),
    ]
    m, tr, sy, _, eff = cfgs[0].specs()
    strategies = stack(*[c.strategy for c in cfgs])
    batched = jit(jax.vmap(cd.evaluate_unchecked, in_axes=(None, None, None, 0, None)))(
        m, tr, sy, strategies, eff
    )
    for i, c in enumerate(cfgs):
        single = report_of(c)
        assert_reports_close(jax.tree.map(lambda x, i=i: x[i], batched), single)


def test_vmap_over_bandwidth():
    cfg = small_config(tp=2, pp=4, dp=8)
    m, tr, sy, st, eff = cfg.specs()
    bws = [12.5, 50.0, 200.0]
    systems = stack(*[with_tier(sy, 1, bandwidth_gbps=b) for b in bws])
    batched = jax.vmap(cd.evaluate_unchecked, in_axes=(None, None, 0, None, None))(
        m, tr, systems, st, eff
    )
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
    return cd.evaluate(
        c.model, c.training, with_tier(c.system, 1, bandwidth_gbps=bw), c.strategy, c.efficiency
    )


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
                (
                    v
                    for flat, v in values.items()
                    if np.unravel_index(flat, [len(x) for x in SWEEP_AXES.values()])[a] == j
                ),
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
    assert dict(
        zip(many.best_indices.tolist(), many.best_values.tolist(), strict=True)
    ) == pytest.approx(
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
        times.append(
            float(cd.evaluate(m, tr, with_tier(sy, 1, bandwidth_gbps=bw), st, eff).step_time_s)
        )
    for c in (
        small_config(tp=4, pp=1, dp=16, recompute="full", zero=3),
        small_config(tp=1, pp=8, dp=8, zero=0),
    ):
        cd.evaluate(*c.specs())
    assert step_mod._evaluate_jit._cache_size() == before
    assert len(set(times)) > 1  # the values really changed the result
    # The checked calls took the packed path (one array per call), not the plain jit.
    assert step_mod._evaluate_jit.packed._cache_size() >= 1

    # A fresh jit compiles exactly once for the three bandwidths.  (A new function object:
    # jax shares one compilation cache between jit wrappers of the same function.)
    fresh = jit(lambda *specs: cd.evaluate_unchecked(*specs))
    for bw in (12.5, 25.0, 100.0):
        fresh(m, tr, with_tier(sy, 1, bandwidth_gbps=bw), st, eff)
    assert fresh._cache_size() == 1


# ---- gradients -------------------------------------------------------------------------


def _step_time(m, tr, sy, st, eff):
    return cd.evaluate_unchecked(m, tr, sy, st, eff).step_time_s


# One compiled gradient for every configuration of the same structure.
_grad_step_time = jit(jax.grad(_step_time, argnums=(2, 3)))

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
    # a100-sxm4-80gb US$15,000; nvlink3 300 GB/s x US$5; ib-hdr-200 25 GB/s x US$215 (catalog);
    # the A100 default reliability preset (rsc1-a100, reliability.toml) buys checkpoint
    # storage: 0.122 GB/s per accelerator at US$5,000 and 40 W per GB/s.
    capex = n * (15000.0 + 300.0 * 5.0 + 25.0 * 215.0 + 0.122 * 5000.0)
    assert cfg.names["reliability"] == "rsc1-a100"
    assert math.isclose(float(r.cost["capex_usd"]), capex, rel_tol=1e-12)
    assert math.isclose(float(r.cost["network_capex_usd"]), n * (1500.0 + 5375.0), rel_tol=1e-12)
    power_kw = n * (400.0 + 30.0 + 70.0 + 0.122 * 40.0) * 1.2 / 1e3
    assert math.isclose(float(r.cost["power_kw"]), power_kw, rel_tol=1e-12)
    usd_per_hour = capex / (4.0 * 8760.0) + power_kw * 0.08
    assert math.isclose(float(r.cost["usd_per_hour"]), usd_per_hour, rel_tol=1e-12)
    step = float(r.step_time_s)
    assert math.isclose(float(r.cost["usd_per_step"]), usd_per_hour * step / 3600.0, rel_tol=1e-12)
    assert math.isclose(
        float(r.cost["energy_kwh_per_step"]), power_kw * step / 3600.0, rel_tol=1e-12
    )
    # Goodput (Daly 2006; codesign.goodput): RSC-1's failures per M GPU-hours (reliability.toml
    # rsc1-a100: accelerator, HBM, host, network, switch; 33.85 per M GPU-h in all); a
    # synchronous checkpoint of 14 bytes per parameter at 0.122 GB/s per GPU; restart 600 s,
    # re-warm 120 s, the host as blast unit (no repair wait).
    lam = n * (18.639 + 6.8469 + 4.3744 + 0.66567 + 3.3284) / (1e6 * 3600.0)
    mtbf = 1.0 / lam
    params = float(workload.total_params(cfg.model)["total"])
    write = 14.0 * params / (n * 0.122e9)
    ratio = write / (2.0 * mtbf)
    tau = math.sqrt(2.0 * write * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - write
    x = (tau + write) / mtbf
    goodput = tau / (tau + write) * x / math.expm1(x) * math.exp(-(600.0 + write + 120.0) / mtbf)
    assert math.isclose(float(r.cost["goodput"]), goodput, rel_tol=1e-9)
    assert math.isclose(float(r.cost["checkpoint_interval_s"]), tau, rel_tol=1e-9)
    steps = 3.0e11 / (1536.0 * 2048.0) / goodput
    assert math.isclose(float(r.cost["time_to_train_days"]), steps * step / 86400.0, rel_tol=1e-9)
    assert math.isclose(
        float(r.cost["cost_to_train_usd"]), steps * usd_per_hour * step / 3600.0, rel_tol=1e-9
    )


def test_capex_general_formula():
    """capex = N (price + host + sum_t bw_t price_t) for arbitrary tier prices (failures off:
    no checkpoint storage is bought)."""
    cfg = small_config()
    sy = dataclasses.replace(
        with_tier(with_tier(cfg.system, 0, price_per_gbps_usd=7.0), 1, price_per_gbps_usd=111.0),
        host_capex_usd_per_accelerator=3000.0,
        reliability=reliability_preset("none"),
    )
    r = cd.evaluate(cfg.model, cfg.training, sy, cfg.strategy, cfg.efficiency)
    expected = 64.0 * (27500.0 + 3000.0 + 450.0 * 7.0 + 50.0 * 111.0)
    assert math.isclose(float(r.cost["capex_usd"]), expected, rel_tol=1e-12)


def test_no_tokens_means_zero_time_to_train():
    r = report_of(small_config())
    assert float(r.cost["time_to_train_days"]) == 0.0


def test_small_doc_is_checked():
    with pytest.raises(cd.SpecError):
        cd.load_run_dict(small_doc(tp=3, pp=2, dp=16))


# ---- time terms by hand -----------------------------------------------------------------


def links(cfg):
    """``(alpha_s, beta_bytes_per_s)`` of each tier: latency, and bandwidth derated by the
    tier's efficiency and oversubscription (the catalog's nvlink3 is 300 GB/s and 3 us,
    ib-hdr-200 25 GB/s and 5 us, nvlink4 450 GB/s and 2.5 us, ib-ndr-400 50 GB/s and 5 us)."""
    return [
        (
            float(t.latency_us) * 1e-6,
            float(t.bandwidth_gbps) * 1e9 * float(t.efficiency) / float(t.oversubscription),
        )
        for t in cfg.system.tiers
    ]


def attention_core_by_hand(mm_s, exps, acc, eff):
    """A fused attention core: tensor-core seconds ``mm_s`` and ``exps`` softmax exponentials
    on the special-function units, the shorter part hidden up to ``softmax_overlap_eff``
    (FlashAttention-3, arXiv:2407.08608, Sec. 3.1-3.2)."""
    exp_s = exps / (float(acc.exp_tera_per_s) * 1e12)
    o = float(eff.softmax_overlap_eff)
    return (1 - o) * (mm_s + exp_s) + o * max(mm_s, exp_s)


def test_dp_comm_eff_scales_only_the_bandwidth_term():
    """The data-parallel collectives take ``latency + bytes / (bandwidth * dp_comm_eff)``:
    from 1 to 1/2 to 1/4 the bandwidth term doubles twice, the latency stays, and no other
    term of the step moves."""
    cfg = example_config()
    reps = []
    for e in (1.0, 0.5, 0.25):
        eff = dataclasses.replace(cfg.efficiency, dp_comm_eff=e)
        reps.append(cd.evaluate(cfg.model, cfg.training, cfg.system, cfg.strategy, eff))
    t = [float(r.exposed_comm_s["dp_total"]) for r in reps]
    assert t[0] > 0
    assert math.isclose(t[2] - t[1], 2 * (t[1] - t[0]), rel_tol=1e-9)
    for k in ("forward", "backward", "tp_comm", "pp_bubble", "pp_p2p", "optimizer"):
        assert float(reps[2].breakdown_s[k]) == float(reps[0].breakdown_s[k])


def test_dp_overlap_slowdown_charges_a_fraction_of_the_hidden_traffic():
    """Hidden data-parallel traffic slows the compute it overlaps (Rashidi et al. 2021, ISCA):
    ``dp_comm = exposed + k (t_dp - exposed)``, with ``exposed = max(t_dp - window, 0)`` as
    at k = 0, so k = 1 charges the whole collective time and no other term of the step moves.
    Tested where the traffic is partly hidden (the example) and where it is all exposed
    (overlap off)."""
    cfg = example_config()
    for overlap in (1.0, 0.0):
        st = dataclasses.replace(cfg.strategy, overlap_dp=overlap)
        reps = {}
        for k in (0.0, 0.3, 1.0):
            eff = dataclasses.replace(cfg.efficiency, dp_overlap_slowdown=k)
            reps[k] = cd.evaluate(cfg.model, cfg.training, cfg.system, st, eff)
        t_dp = float(reps[0.0].exposed_comm_s["dp_total"])
        exposed = float(reps[0.0].breakdown_s["dp_comm"])
        assert 0 < exposed <= t_dp
        for r in reps.values():  # the part beyond the window does not depend on k
            assert float(r.exposed_comm_s["dp_beyond_window"]) == exposed
        if overlap:
            assert exposed < t_dp  # the example hides part of it
        for k, r in reps.items():
            assert math.isclose(
                float(r.breakdown_s["dp_comm"]), exposed + k * (t_dp - exposed), rel_tol=1e-12
            )
            for name in ("forward", "backward", "tp_comm", "pp_bubble", "pp_p2p", "optimizer"):
                assert float(r.breakdown_s[name]) == float(reps[0.0].breakdown_s[name])
        assert math.isclose(float(reps[1.0].breakdown_s["dp_comm"]), t_dp, rel_tol=1e-12)


def test_example_time_terms_by_hand():
    """GPT-3 175B, 1024 A100-80GB, tp 8 pp 8 (v = 4) dp 16, b = 1, SP, selective, ZeRO-1,
    flash attention; every term from the documented formulas."""
    cfg = example_config()
    r = report_of(cfg)
    b = {k: float(v) for k, v in r.breakdown_s.items()}
    eff = cfg.efficiency
    (a0, b0), (a1, b1) = links(cfg)
    acc = cfg.system.accelerator
    l, h, V, s, B = 96.0, 12288.0, 51200.0, 2048.0, 1536.0
    tp, pp, dp, v = 8.0, 8.0, 16.0, 4.0
    n_mb, lps, tokens = B / dp, l / pp, s  # micro-batch of 1 sequence, no CP
    peak, hbm = float(acc.peak_tflops) * 1e12, float(acc.hbm_tbps) * 1e12 * eff.hbm_eff

    def g(m_, n_, k_):  # GEMM at gemm_max * d / (d + d_half) of peak, d = mnk / (mk + kn + mn)
        d = 1 / (1 / m_ + 1 / n_ + 1 / k_)  # arithmetic intensity, FLOP per byte of 16-bit operands
        return 2 * m_ * n_ * k_ / (peak * eff.gemm_max * d / (d + eff.gemm_half_dim))

    gemm = (
        g(tokens, 3 * h / tp, h)
        + g(tokens, h, h / tp)
        + g(tokens, 4 * h / tp, h)
        + g(tokens, h, 4 * h / tp)
    )
    attention_mm = 4 * tokens * s * h / tp / (peak * eff.attention_eff)
    # Softmax exponentials: one per causal score of the 96 heads, forward and backward.
    exps = tokens * 96 / tp * s / 2
    assert float(acc.exp_tera_per_s) > 0
    attention = attention_core_by_hand(attention_mm, exps, acc, eff)
    attention_bwd = attention_core_by_hand(eff.backward_factor * attention_mm, exps, acc, eff)
    elementwise = eff.elementwise_traffic * (34 * s * h / tp) / hbm  # Korthikanti: SP, flash
    logits = g(tokens, V / tp, h)
    # Softmax cross-entropy over the tokens x V/t logits: bf16 output + fp32 copy, memory bound.
    ce = eff.elementwise_traffic * 6 * tokens * V / tp / hbm
    t_fwd = lps * (gemm + attention + elementwise) + logits + ce
    assert math.isclose(b["forward"], n_mb * t_fwd, rel_tol=1e-12)
    # Backward: backward_factor x GEMMs and the attention's tensor-core part (the exponentials
    # once more, to recompute P), 2 x the element-wise traffic.
    t_bwd = (
        eff.backward_factor * (lps * gemm + logits)
        + lps * attention_bwd
        + 2 * (lps * elementwise + ce)
    )
    assert math.isclose(b["backward"], n_mb * t_bwd, rel_tol=1e-12)
    assert math.isclose(b["recompute"], n_mb * lps * attention, rel_tol=1e-12)

    # TP: 2 forward + 2 backward all-reduces (RS + AG with SP) of the b s h bf16 activations
    # per layer, ring of 8 on NVLink 3.
    S = 2 * tokens * h
    ar = 2 * (7 * a0 + 7 / 8 * S / b0)
    # With SP the backward all-gathers the stored input shards again (QKV and MLP inputs),
    # hidden behind the input-gradient GEMMs up to tp_overlap_eff.
    ag = 7 * a0 + 7 / 8 * S / b0
    t_tp = lps * 4 * ar + lps * 2 * ag * (1 - eff.tp_overlap_eff)
    assert math.isclose(b["tp_comm"], n_mb * t_tp, rel_tol=1e-12)
    for k in ("cp_comm", "ep_comm"):
        assert b[k] == 0.0
    assert b["overhead"] == eff.step_overhead_s

    # 1F1B interleaved bubble: (p - 1)/v micro-batch times.
    t_mb = t_fwd + t_bwd + lps * attention + t_tp
    assert math.isclose(b["pp_bubble"], (pp - 1) / v * t_mb, rel_tol=1e-12)

    # P2P: stages are tp*dp = 128 ranks apart, so every hop crosses HDR IB; b s h / t bf16
    # elements per message (scatter/gather, Narayanan Sec. 4.1); the warm-up and cool-down
    # p - 1 transfers and the unhidden (1 - p2p_overlap_eff) of the n_mb v steady-state ones
    # are exposed, forward and backward.
    p2p_one = a1 + 2 * tokens * h / tp / b1
    exposed = (pp - 1) + (1 - eff.p2p_overlap_eff) * n_mb * v
    assert math.isclose(b["pp_p2p"], 2 * p2p_one * exposed, rel_tol=1e-12)

    # DP (ZeRO-1, Megatron distributed optimizer): reduce-scatter fp32 grads and all-gather
    # bf16 weights over the 16 dp ranks, 8 ranks apart: one per node, a ring of 16 on IB;
    # hidden behind dp_overlap_eff of one micro-batch's forward + backward on the critical
    # path (stretched by the exposed TP time in the ratio t_mb / compute, as the TP
    # transfers hide behind parts of the same compute); the DP collectives reach dp_comm_eff
    # of the tier's collective bandwidth.
    pd = lps * (12 * h**2 + 2 * h) / tp + V * h / tp

    def rs(size):
        return 15 * a1 + 15 / 16 * size / (b1 * eff.dp_comm_eff)

    t_dp = rs(4 * pd) + rs(2 * pd)
    window = eff.dp_overlap_eff * (t_fwd + t_bwd) * t_mb / (t_fwd + t_bwd + lps * attention)
    assert math.isclose(b["dp_comm"], max(t_dp - window, 0.0), rel_tol=1e-12)

    # Optimizer: optimizer_bytes_per_param over the ZeRO-1 shard at hbm_eff of HBM bandwidth.
    assert math.isclose(
        b["optimizer"], eff.optimizer_bytes_per_param * pd / dp / hbm, rel_tol=1e-12
    )
    assert math.isclose(float(r.step_time_s), sum(b.values()), rel_tol=1e-12)


def test_pipeline_p2p_is_hidden_only_under_the_interleaved_schedule():
    """Megatron-Core overlaps the steady-state send/receive with compute only with virtual
    stages (overlap_p2p_comm; at vp = 1 batch_p2p_comm waits on them): p2p_overlap_eff hides
    (1 - eff) of the n_mb v steady-state transfers at v = 4 and none at v = 1."""
    cfg = example_config()
    (_, _), (a1, b1) = links(cfg)
    h, s, B, tp, pp, dp = 12288.0, 2048.0, 1536.0, 8.0, 8.0, 16.0
    n_mb = B / dp
    p2p_one = a1 + 2 * s * h / tp / b1

    def p2p(v, o):
        eff = cfg.efficiency.replace(p2p_overlap_eff=o)
        st = cfg.strategy.replace(interleave=v)
        return float(
            report_of(dataclasses.replace(cfg, strategy=st, efficiency=eff)).breakdown_s["pp_p2p"]
        )

    for o in (0.0, 0.7):
        assert math.isclose(
            p2p(4.0, o), 2 * p2p_one * ((pp - 1) + (1 - o) * n_mb * 4), rel_tol=1e-12
        )
        assert math.isclose(p2p(1.0, o), 2 * p2p_one * ((pp - 1) + n_mb), rel_tol=1e-12)


def busiest_rank_load(ep, tokens, etp=2.0, experts=8.0, top_k=2.0, imbalance=1.0):
    """The busiest of ``ep`` expert ranks' slots over their mean at uniform random routing,
    by hand: ``1 + Phi^-1((ep - 3/8)/(ep + 1/4)) sqrt((1 - 1/ep)(E - k)/((E - 1) etp T k))``
    (hypergeometric counts; Blom's expected maximum of ``ep`` normals), times the skew."""
    z = statistics.NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    var = (1 - 1 / ep) * (experts - top_k) / ((experts - 1) * etp * tokens * top_k)
    return imbalance * (1 + z * math.sqrt(var))


def no_host_wait(cfg):
    """The config with the dropless dispatcher's host wait off (tests/test_moe_host_wait.py)."""
    eff = cfg.efficiency.replace(moe_host_layer_us=0.0, moe_host_expert_us=0.0)
    return dataclasses.replace(cfg, efficiency=eff)


def test_moe_expert_parallel_terms_by_hand():
    """Mixtral 8x7B, 64 H100, tp 2 pp 2 dp 16 ep 8, SP, selective (no CP): the all-to-all of
    each MoE layer's top-2 slots (Lepikhin et al. 2020), 2 forward + 2 backward per layer;
    the ep group holds 8 consecutive dp ranks at stride tp = 2: 4 per NVLink node (share 3/8)
    and 8 over IB (share 4/8).  The experts are split etp = tp = 2 ways (Megatron's default),
    so the 2 expert-TP ranks (adjacent, one NVLink hop) all-gather their dispatched slots
    (Megatron-Core's MoEAlltoAllTokenDispatcher) with each pass: a ring all-gather of
    ``etp * S`` bytes, (r - 1) alpha + (r - 1)/r * size / beta with r = 2.  Dropless, the
    busiest rank's slots set the pace: ``moe_imbalance`` times the balanced ones, times the
    excess of the busiest of 8 ranks at uniform random routing (:func:`busiest_rank_load`);
    the dropless dispatcher's host wait off (tested on its own)."""
    cfg = no_host_wait(CONFIGS["mixtral-ep"]())
    r = report_of(cfg)
    (a0, b0), (a1, b1) = links(cfg)
    h, s, l, k, pp, tp = 4096.0, 4096.0, 32.0, 2.0, 2.0, 2.0
    n_mb = 256 / 16
    tokens = s / tp  # with SP each TP rank dispatches its 1/tp of the tokens
    load = busiest_rank_load(8.0, tokens, imbalance=float(cfg.efficiency.moe_imbalance))
    S = 2 * tokens * k * h * load  # the busiest rank's slots
    a2a = (a0 + 3 / 8 * S / b0) + (a1 + 4 / 8 * S / b1)
    etp_ag = a0 + 0.5 * (2 * S) / b0
    t_ep = l / pp * 4 * (a2a + etp_ag)
    assert math.isclose(float(r.breakdown_s["ep_comm"]), n_mb * t_ep, rel_tol=1e-12)
    # Expert parameters: 8 experts x 3 h f per layer, sharded tp x ep ways.
    expert = (l / pp) * 8 * 3 * h * 14336 / (tp * 8)
    assert math.isclose(float(r.params["local_expert"]), expert, rel_tol=1e-12)


@pytest.mark.parametrize("ep", [8.0, 4.0])
def test_moe_permute_copies_by_hand(ep):
    """Mixtral 8x7B (tp 2, pp 2, mb 1, SP): each copy of the routed slots that the dispatcher
    makes beside its communication reads and writes ``slots h`` 16-bit values on dispatch and
    again on combine, ``2 x 2 x 2 slots h / (HBM eff)`` seconds times moe_permute_factor, with
    ``slots = s/tp x top-k x etp`` per rank (times the busiest rank's load,
    :func:`busiest_rank_load`); the backward pass runs the element-wise work twice.
    Megatron-Core's alltoall dispatcher makes 2 copies (permute, then sort by local expert),
    the sort skipped at ep 8 = 8 experts (one per rank); DeepEP and HybridEP make 1."""
    cfg = CONFIGS["mixtral-ep"]()
    h, s, k, tp, layers, pp = 4096.0, 4096.0, 2.0, 2.0, 32.0, 2.0
    n_mb = 256 / 16
    acc, eff = cfg.system.accelerator, cfg.efficiency
    hbm = float(acc.hbm_tbps) * 1e12 * float(eff.hbm_eff)
    load = busiest_rank_load(ep, s / tp, imbalance=float(eff.moe_imbalance))
    slots = s / tp * k * tp * load  # etp = tp; the busiest rank
    one_copy = 2 * 2 * 2 * slots * h / hbm * float(eff.moe_permute_factor)

    def fwd_bwd(copies):
        st = cfg.strategy.replace(ep=ep, moe_permute_copies=copies)
        b = report_of(dataclasses.replace(cfg, strategy=st)).breakdown_s
        return float(b["forward"]), float(b["backward"])

    f0, b0 = fwd_bwd(0.0)
    per_copy = n_mb * layers / pp * one_copy
    expected_copies = {8.0: 1.0, 4.0: 2.0}[ep]  # alltoall: the sort only with > 1 local expert
    f2, b2 = fwd_bwd(2.0)
    assert math.isclose(f2 - f0, expected_copies * per_copy, rel_tol=1e-9)
    assert math.isclose(b2 - b0, 2 * expected_copies * per_copy, rel_tol=1e-9)
    f1, _ = fwd_bwd(1.0)
    assert math.isclose(f1 - f0, per_copy, rel_tol=1e-9)


@pytest.mark.parametrize("d", [1.0, 0.5, 0.0])
def test_flex_dispatcher_ratios_by_hand(d):
    """The flex dispatcher (``moe_hierarchical_dispatch`` d = 1) takes the alltoall
    dispatcher's ``moe_permute_factor`` and ``ep_overlap_eff`` times its own ratios; a
    fractional d mixes linearly, ``1 - d + d r``.  Mixtral 8x7B (tp 2, ep 4, 2 copies): the
    permutation's forward time is ``copies x 2 x 2 x 2 slots h / (HBM eff)`` times the factor;
    the all-to-all left exposed under ``overlap_moe_comm`` is ``1 - ep_overlap_eff x mix`` of
    it without overlap (the dropless dispatcher's host wait off: tested on its own)."""
    cfg = no_host_wait(CONFIGS["mixtral-ep"]())
    h, s, k, tp, layers, pp = 4096.0, 4096.0, 2.0, 2.0, 32.0, 2.0
    n_mb = 256 / 16
    r_perm, r_ovl, e = 0.4, 0.25, 0.6

    def run(copies, overlap, r_perm=r_perm, r_ovl=r_ovl):
        st = cfg.strategy.replace(
            ep=4.0,
            moe_permute_copies=copies,
            overlap_moe_comm=overlap,
            moe_hierarchical_dispatch=d,
        )
        eff = cfg.efficiency.replace(
            ep_overlap_eff=e, moe_permute_flex_ratio=r_perm, ep_overlap_flex_ratio=r_ovl
        )
        out = report_of(dataclasses.replace(cfg, strategy=st, efficiency=eff)).breakdown_s
        return float(out["forward"]), float(out["ep_comm"])

    acc, eff = cfg.system.accelerator, cfg.efficiency
    hbm = float(acc.hbm_tbps) * 1e12 * float(eff.hbm_eff)
    load = busiest_rank_load(4.0, s / tp, imbalance=float(eff.moe_imbalance))
    slots = s / tp * k * tp * load  # etp = tp; the busiest rank
    factor = float(eff.moe_permute_factor) * (1 - d + d * r_perm)
    per_copy = n_mb * layers / pp * 2 * 2 * 2 * slots * h / hbm * factor
    f0, c_off = run(0.0, 0.0)
    f2, c_on = run(2.0, 1.0)
    assert math.isclose(f2 - f0, 2 * per_copy, rel_tol=1e-9)
    assert math.isclose(c_on / c_off, 1 - e * (1 - d + d * r_ovl), rel_tol=1e-9)
    # Ratios of 1 (the defaults) give the flex dispatcher the alltoall dispatcher's values.
    f1, c1 = run(2.0, 1.0, r_perm=1.0, r_ovl=1.0)
    assert math.isclose(f1 - f0, 2 * per_copy / (1 - d + d * r_perm), rel_tol=1e-9)
    assert math.isclose(c1 / c_off, 1 - e, rel_tol=1e-9)


def _rs_time(size, fans, tiers, dp_comm_eff=1.0):
    """Hierarchical ring reduce-scatter by hand: fans r_t, tiers (latency s, bandwidth B/s);
    a data-parallel collective reaches ``dp_comm_eff`` of each tier's bandwidth."""
    total, prev = 0.0, 1.0
    for r, (alpha, beta) in zip(fans, tiers, strict=True):
        total += (r - 1) * alpha + (r - 1) / r * (size / prev) / (beta * dp_comm_eff)
        prev *= r
    return total


def _two_regions(**strategy) -> dict:
    """Llama 3 8B on 2 x 64 H100 in two regions (nvlink4 x 8, NDR IB x 64, cross-region link),
    tp 8, dp 16 (its ranks 8 apart: none share a node, 8 share an IB domain, 2 regions)."""
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 512},
        "system": {
            "accelerator": "h100-sxm5-80gb",
            "num_accelerators": 128,
            "tiers": [
                {"preset": "nvlink4", "domain": 8},
                {"preset": "ib-ndr-400", "domain": 64},
                {"preset": "cross-region"},
            ],
        },
        "strategy": {"tp": 8, "pp": 1, "dp": 16, **strategy},
    }


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_dense_model_dp_comm_by_hand_three_tiers(zero):
    """Llama 3 8B on 2 x 64 H100 in two regions (nvlink4 x 8, NDR IB x 64, cross-region link),
    tp 8, dp 16, data-parallel communication not overlapped.  A dense model has no expert
    parameters, so the data-parallel traffic is that of the dense gradients only:
    ZeRO-0 all-reduces the fp32 gradients (= 2 reduce-scatters), ZeRO-1/2 reduce-scatter
    them and all-gather the bf16 weights, ZeRO-3 does that every micro-batch with two
    all-gathers (forward and backward)."""
    cfg = cd.load_run_dict(_two_regions(zero=zero, overlap_dp=False))
    r = report_of(cfg)
    h, V, f = 4096.0, 128256.0, 14336.0
    layer = h * (h + 2 * 1024) + h * h + 3 * h * f + 2 * h
    pd = 32 * layer / 8 + 2 * V * h / 8  # untied embeddings, single stage
    assert math.isclose(float(r.params["local_dense"]), pd, rel_tol=1e-12)
    # dp ranks are 8 apart: none share a node, 8 share an IB domain, 2 regions.
    fans = [1, 8, 2]
    tiers = links(cfg)  # nvlink4, ib-ndr-400, cross-region (1 GB/s, 10 ms)
    e = float(cfg.efficiency.dp_comm_eff)
    rs4, ag2 = _rs_time(4 * pd, fans, tiers, e), _rs_time(2 * pd, fans, tiers, e)
    n_mb = 512 / 16
    expected = {0: 2 * rs4, 1: rs4 + ag2, 3: n_mb * (rs4 + 2 * ag2)}[zero]
    assert math.isclose(float(r.breakdown_s["dp_comm"]), expected, rel_tol=1e-12)


def test_param_gather_overlap_off_by_hand():
    """Megatron-Core's ``overlap_param_gather`` (ZeRO-1, the distributed optimizer): on, the
    reduce-scatter and the all-gather hide behind ``dp_overlap_eff`` of one micro-batch's
    forward and backward; off, the all-gather is exposed whole and the reduce-scatter hides
    behind the backward alone.  Llama 3 8B over two regions (the three-tier case above), whose
    cross-region link makes the traffic far longer than either window; ZeRO-0 and ZeRO-3 and a
    run without ``overlap_dp`` do not see the flag."""

    def doc(**strategy):
        return {**_two_regions(**strategy), "efficiency": {"dp_overlap_slowdown": 0.0}}

    reps = {
        opg: report_of(cd.load_run_dict(doc(zero=1, overlap_param_gather=opg)))
        for opg in (True, False)
    }
    cfg = cd.load_run_dict(doc(zero=1))
    pd = float(reps[True].params["local_dense"])
    tiers, e = links(cfg), float(cfg.efficiency.dp_comm_eff)
    rs4, ag2 = _rs_time(4 * pd, [1, 8, 2], tiers, e), _rs_time(2 * pd, [1, 8, 2], tiers, e)
    n_mb, o = 512 / 16, float(cfg.efficiency.dp_overlap_eff)
    b = {k: float(v) for k, v in reps[True].breakdown_s.items()}
    t_fwd, t_bwd = b["forward"] / n_mb, b["backward"] / n_mb
    # the passes count with the micro-batch's exposed TP/CP/EP/offload time (t_mb / compute)
    comp = t_fwd + t_bwd + b["recompute"] / n_mb
    exposed = sum(b[k] for k in ("tp_comm", "cp_comm", "ep_comm", "offload")) / n_mb
    stretch = (comp + exposed) / comp
    on = rs4 + ag2 - o * (t_fwd + t_bwd) * stretch
    off = (rs4 - o * t_bwd * stretch) + ag2
    assert math.isclose(b["dp_comm"], on, rel_tol=1e-12)
    assert math.isclose(float(reps[False].breakdown_s["dp_comm"]), off, rel_tol=1e-12)
    assert off > on
    for k in ("forward", "backward", "optimizer"):
        assert float(reps[False].breakdown_s[k]) == b[k]
    for strat in ({"zero": 0}, {"zero": 3}, {"zero": 1, "overlap_dp": False}):
        times = [
            float(report_of(cd.load_run_dict(doc(**strat, overlap_param_gather=o))).step_time_s)
            for o in (True, False)
        ]
        assert times[0] == times[1], strat


def test_moe_dp_comm_by_hand():
    """Mixtral on 64 H100, tp 2 pp 2 dp 16 ep 8, ZeRO-1, no overlap: the dense parameters
    reduce over the 16 dp ranks (2 apart: 4 per node, 16 over IB), the expert parameters over
    the expert-data-parallel group of dp/ep = 2 ranks, 16 apart (different nodes)."""
    d = {
        "model": {"preset": "mixtral-8x7b"},
        "training": {"global_batch": 256},
        "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        "strategy": {"tp": 2, "pp": 2, "dp": 16, "ep": 8, "overlap_dp": False},
    }
    cfg = cd.load_run_dict(d)
    r = report_of(cfg)
    pd, pe = float(r.params["local_dense"]), float(r.params["local_expert"])
    h, V = 4096.0, 32000.0
    attn = h * (h + 2 * 1024) + h * h
    assert math.isclose(pd, 16 * (attn + 2 * h + 8 * h) / 2 + V * h / 2, rel_tol=1e-12)
    tiers = links(cfg)
    e = float(cfg.efficiency.dp_comm_eff)
    dense = _rs_time(4 * pd, [4, 4], tiers, e) + _rs_time(2 * pd, [4, 4], tiers, e)
    expert = _rs_time(4 * pe, [1, 2], tiers, e) + _rs_time(2 * pe, [1, 2], tiers, e)
    assert math.isclose(float(r.breakdown_s["dp_comm"]), dense + expert, rel_tol=1e-12)


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_context_parallel_comm_by_hand(recompute):
    """Llama 3 8B, tp 2 pp 2 dp 8 cp 2 with cp laid outermost (its 2 ranks in different
    nodes) and a slow 2 GB/s scale-out: each layer all-gathers K and V (2 x 2 bytes x b s kv/t)
    once forward and twice backward (AG + RS of the gradients), once more under full
    recomputation, each hidden behind cp_overlap_eff of its pass's attention (half the
    backward's for each of its two), plus cp - 1 ring steps' fixed cost per pass."""
    doc = small_doc(
        tp=2, pp=2, dp=8, cp=2, recompute=recompute, placement=["tp", "ep", "dp", "pp", "cp"]
    )
    doc["system"]["tiers"] = [
        {"preset": "nvlink4", "domain": 8},
        {"preset": "ib-ndr-400", "domain": 64, "bandwidth_gbps": 2.0},
    ]
    cfg = cd.load_run_dict(doc)
    r = report_of(cfg)
    eff = cfg.efficiency
    _, (a1, b1) = links(cfg)
    peak_half = float(cfg.system.accelerator.peak_tflops) * 1e12
    s, q, kv, tp, cp, lps = 8192.0, 4096.0, 1024.0, 2.0, 2.0, 16.0
    S = 2 * 2 * s * kv / tp
    ag = a1 + 1 / 2 * S / b1
    mm = 4 * (s / cp) * s * q / tp / (peak_half * eff.attention_eff)
    exps = (s / cp) * 32 / tp * s / 2
    acc = cfg.system.accelerator
    attention = attention_core_by_hand(mm, exps, acc, eff)
    attention_bwd = attention_core_by_hand(eff.backward_factor * mm, exps, acc, eff)
    # Forward (and recompute) all-gather behind the forward attention; the backward's AG and
    # RS each behind half the backward attention.
    fwd = max(ag - eff.cp_overlap_eff * attention, 0.0)
    bwd = max(ag - eff.cp_overlap_eff * attention_bwd / 2, 0.0)
    assert fwd > 0 and bwd > 0
    # Each pass also pays cp - 1 ring steps' fixed cost.
    steps = (cp - 1) * float(eff.cp_step_overhead_us) * 1e-6
    assert steps > 0
    passes = 3 + (recompute == "full")
    n_mb = 512 / 8
    per_layer = (passes - 2) * fwd + 2 * bwd + passes * steps
    assert math.isclose(float(r.breakdown_s["cp_comm"]), n_mb * lps * per_layer, rel_tol=1e-12)


@pytest.mark.parametrize("factor", [1.0, 0.7])
def test_full_recompute_by_hand(factor):
    """Full recomputation re-runs every layer's forward (GEMMs, attention, element-wise) in
    ``recompute_factor`` times its time (Korthikanti et al. 2022 Sec. 5: one extra forward)
    and adds two TP all-reduces per layer; forward and backward are unchanged."""
    base = example_config()
    m, t, s, st, eff = base.specs()
    eff = dataclasses.replace(eff, recompute_factor=factor)
    full = dataclasses.replace(st, recompute=jnp.asarray([0.0, 0.0, 1.0]))
    b_sel = {k: float(v) for k, v in cd.evaluate(m, t, s, st, eff).breakdown_s.items()}
    b = {k: float(v) for k, v in cd.evaluate(m, t, s, full, eff).breakdown_s.items()}
    acc = s.accelerator
    l, h, s_len, B = 96.0, 12288.0, 2048.0, 1536.0
    tp, pp, dp = 8.0, 8.0, 16.0
    n_mb, lps, tokens = B / dp, l / pp, s_len
    peak, hbm = float(acc.peak_tflops) * 1e12, float(acc.hbm_tbps) * 1e12 * eff.hbm_eff

    def g(m_, n_, k_):
        d = 1 / (1 / m_ + 1 / n_ + 1 / k_)
        return 2 * m_ * n_ * k_ / (peak * eff.gemm_max * d / (d + eff.gemm_half_dim))

    gemm = (
        g(tokens, 3 * h / tp, h)
        + g(tokens, h, h / tp)
        + g(tokens, 4 * h / tp, h)
        + g(tokens, h, 4 * h / tp)
    )
    attention = attention_core_by_hand(
        4 * tokens * s_len * h / tp / (peak * eff.attention_eff),
        tokens * 96 / tp * s_len / 2,
        acc,
        eff,
    )
    elementwise = eff.elementwise_traffic * (34 * s_len * h / tp) / hbm
    assert math.isclose(
        b["recompute"], n_mb * lps * factor * (gemm + attention + elementwise), rel_tol=1e-12
    )
    assert b["forward"] == b_sel["forward"] and b["backward"] == b_sel["backward"]
    # Selective recomputation (attention core only) does not use the factor.
    assert math.isclose(b_sel["recompute"], n_mb * lps * attention, rel_tol=1e-12)
    # Six TP collectives per layer instead of four (the SP re-gather term is unchanged).
    (a0, b0), _ = links(base)
    ar = 2 * (7 * a0 + 7 / 8 * 2 * tokens * h / b0)
    assert math.isclose(b["tp_comm"] - b_sel["tp_comm"], n_mb * lps * 2 * ar, rel_tol=1e-9)


def test_recompute_factor_must_be_positive():
    cfg = example_config()
    m, t, s, st, eff = cfg.specs()
    with pytest.raises(cd.SpecError, match="efficiency.recompute_factor"):
        cd.evaluate(m, t, s, st, dataclasses.replace(eff, recompute_factor=0.0))


def test_fp8_gathers_quantized_sequence_parallel_inputs():
    """In FP8 training Transformer Engine quantizes a column-parallel GEMM's input before the
    sequence-parallel all-gather (layernorm_linear.py / linear.py, ``with_input_all_gather``),
    so each all-gather carries 1 byte per element instead of 2 while the reduce-scatters stay
    in bf16; without sequence parallelism the all-reduces are bf16 in both."""
    cfg = example_config()
    acc = cfg.system.accelerator.replace(peak_tflops_fp8=2 * cfg.system.accelerator.peak_tflops)
    cfg = dataclasses.replace(cfg, system=cfg.system.replace(accelerator=acc))
    eff = cfg.efficiency
    (a0, b0), _ = links(cfg)
    l, h, s, B, pp, dp = 96.0, 12288.0, 2048.0, 1536.0, 8.0, 16.0
    n_mb, lps = B / dp, l / pp

    def tp_comm(precision, sp):
        c = dataclasses.replace(
            cfg,
            training=cfg.training.replace(precision=precision),
            strategy=cfg.strategy.replace(sequence_parallel=float(sp)),
        )
        return float(report_of(c).breakdown_s["tp_comm"])

    # Ring of 8 on NVLink: an all-gather of S bytes costs 7 a0 + 7/8 S / b0; in FP8 each of
    # the 4 gathers of an all-reduce pair and the 2 backward re-gathers moves S/2.
    S = 2 * s * h
    saved = 7 / 8 * (S / 2) / b0
    want = n_mb * lps * (4 + 2 * (1 - eff.tp_overlap_eff)) * saved
    assert math.isclose(tp_comm("bf16", True) - tp_comm("fp8", True), want, rel_tol=1e-9)
    assert tp_comm("mxfp8", True) > tp_comm("fp8", True)  # MXFP8 also gathers its scales
    assert tp_comm("bf16", False) == tp_comm("fp8", False)


def test_packed_call_equals_the_plain_jit():
    """``codesign.evaluate`` sends a configuration's ~170 host floats as one packed array
    (``codesign._dispatch.packed_jit``): every report leaf equals the plain (unpacked) jit of
    the same function, exact and relaxed, to rounding (XLA may fuse the two programs
    differently); device-array leaves (the plain path) give the same report."""
    from codesign import workload
    from codesign.smoothing import Smoothing

    for c in (small_config(), small_config(tp=4, pp=1, dp=16, recompute="full", zero=3)):
        m, tr, sy, st, eff = c.specs()
        m = workload.with_parts(m)
        for sm in (cd.smoothing.EXACT, Smoothing(exact=False, tau=0.05)):
            a = step_mod._evaluate_jit(m, tr, sy, st, eff, sm)
            b = step_mod._evaluate_jit.plain(m, tr, sy, st, eff, sm)
            for x, y in zip(
                jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True
            ):
                assert x.dtype == y.dtype
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=0)
    # Device arrays (not packed) give the same report.
    on_device = jax.tree_util.tree_map(jnp.asarray, (m, tr, sy, st, eff))
    a = step_mod._evaluate_jit(*on_device, cd.smoothing.EXACT)
    b = step_mod._evaluate_jit(m, tr, sy, st, eff, cd.smoothing.EXACT)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=0)
