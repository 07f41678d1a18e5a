"""The dropless ``alltoall`` dispatcher's host wait (``Efficiency.moe_host_layer_us``,
``moe_host_expert_us``; :func:`codesign.compute.moe_host_wait`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import codesign as cd
from codesign.compute import moe_host_wait

HOST = {"moe_host_layer_us": 4000.0, "moe_host_expert_us": 250.0}


def gpt_oss(**strategy):
    """GPT-OSS 120B (128 experts, top 4) on 8 H100s, ep 8: 16 local experts."""
    return cd.load_run_dict(
        {
            "model": {"preset": "gpt-oss-120b"},
            "training": {"global_batch": 64, "precision": "bf16"},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 8},
            "strategy": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "microbatch": 1, **strategy},
        }
    )


def step(cfg, smoothing=cd.EXACT, **eff) -> cd.Report:
    return cd.evaluate(
        cfg.model, cfg.training, cfg.system, cfg.strategy, cfg.efficiency.replace(**eff), smoothing
    )


def test_wait_by_hand():
    # relu(layer + E/ep x expert - forward), in seconds: 4 ms + 16 x 0.25 ms - 5 ms = 3 ms.
    cfg = gpt_oss()
    eff = cd.Efficiency(**HOST)
    assert float(moe_host_wait(cfg.model, cfg.strategy, eff, 5e-3, cd.EXACT)) == pytest.approx(3e-3)
    # a layer whose forward outlasts the host's launches waits for nothing
    assert float(moe_host_wait(cfg.model, cfg.strategy, eff, 9e-3, cd.EXACT)) == 0.0
    # padded to capacity (static shapes), or with the flex dispatcher: no wait; half-way: half
    padded = cfg.strategy.replace(moe_capacity_factor=1.0)
    assert float(moe_host_wait(cfg.model, padded, eff, 5e-3, cd.EXACT)) == 0.0
    flex = cfg.strategy.replace(moe_hierarchical_dispatch=1.0)
    assert float(moe_host_wait(cfg.model, flex, eff, 5e-3, cd.EXACT)) == 0.0
    half = cfg.strategy.replace(moe_hierarchical_dispatch=0.5)
    assert float(moe_host_wait(cfg.model, half, eff, 5e-3, cd.EXACT)) == pytest.approx(1.5e-3)


def test_the_step_pays_the_wait_once_per_moe_layer_and_micro_batch():
    # One stage (pp 1): each micro-batch's MoE layers each wait, charged to the expert
    # all-to-all's exposed time.  Where the host outlasts every layer's forward (the wait is
    # in its linear part), 1 ms more host time per layer costs micro-batches x MoE layers ms.
    cfg = gpt_oss()
    base, host = step(cfg), step(cfg, **HOST)
    more = step(cfg, **{**HOST, "moe_host_layer_us": HOST["moe_host_layer_us"] + 1000.0})
    n = float(base.num_microbatches) * float(cfg.model.moe_layers)
    assert n == 8 * 36
    per = (float(more.step_time_s) - float(host.step_time_s)) / n
    assert per == pytest.approx(1e-3, rel=1e-6)
    extra = float(host.step_time_s) - float(base.step_time_s)
    assert 0.0 < extra / n < 8e-3  # 4 ms + 16 x 0.25 ms, less the layer's forward
    d_ep = float(host.breakdown_s["ep_comm"]) - float(base.breakdown_s["ep_comm"])
    assert d_ep == pytest.approx(extra, rel=1e-6)
    # the same layout padded to capacity does not wait
    padded = gpt_oss(moe_capacity_factor=1.0)
    assert float(step(padded, **HOST).step_time_s) == float(step(padded).step_time_s)


def test_gradient_is_finite_in_the_host_times_and_the_hardware():
    cfg = gpt_oss()
    soft = cd.Smoothing(exact=False, tau=0.05)

    def t(eff, system):
        r = cd.evaluate_unchecked(cfg.model, cfg.training, system, cfg.strategy, eff, soft)
        return r.step_time_s

    g_eff, g_sys = jax.grad(t, argnums=(0, 1))(cfg.efficiency.replace(**HOST), cfg.system)
    assert np.isfinite(float(g_eff.moe_host_layer_us)) and float(g_eff.moe_host_layer_us) > 0
    assert np.isfinite(float(g_eff.moe_host_expert_us)) and float(g_eff.moe_host_expert_us) > 0
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(g_sys))


@pytest.mark.parametrize("field", ["moe_host_layer_us", "moe_host_expert_us"])
def test_a_negative_host_time_is_named(field):
    with pytest.raises(cd.SpecError, match=f"efficiency.{field}"):
        cd.load_run_dict(
            {
                "model": {"preset": "gpt-oss-120b"},
                "training": {"global_batch": 64},
                "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 8},
                "strategy": {"tp": 1, "pp": 1, "dp": 8, "ep": 8},
                "efficiency": {field: -1.0},
            }
        )
