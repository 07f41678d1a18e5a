"""Token-drop MoE padded to capacity (``Strategy.moe_capacity_factor``) against dropless MoE."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

import codesign as cd
from codesign import workload
from codesign.rules import valid_mask
from codesign.specs import SpecError, make_strategy


def mixtral(**strategy):
    """Mixtral 8x7B (top-2 of 8 experts) on 64 H100s, tp 2, pp 2, ep 8."""
    return cd.load_run_dict(
        {
            "model": {"preset": "mixtral-8x7b"},
            "training": {"global_batch": 256},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
            "strategy": {"tp": 2, "pp": 2, "dp": 16, "ep": 8, **strategy},
        }
    )


def report(cfg, *, top_k=None, smoothing=cd.EXACT, **eff) -> cd.Report:
    model = cfg.model if top_k is None else cfg.model.replace(moe_top_k=float(top_k))
    return cd.evaluate(
        model, cfg.training, cfg.system, cfg.strategy, cfg.efficiency.replace(**eff), smoothing
    )


def leaves(r: cd.Report) -> list:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(r)]


def test_capacity_one_on_balanced_routing_is_dropless():
    """With balanced routing (``moe_imbalance`` 1) an expert padded to capacity 1 holds exactly
    the balanced load, as dropless MoE does: every figure of the report is the same."""
    a, b = (
        report(mixtral(), moe_imbalance=1.0),
        report(mixtral(moe_capacity_factor=1.0), moe_imbalance=1.0),
    )
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0)


@pytest.mark.parametrize("c", [2.0, 1.5])
def test_padded_capacity_moves_computes_and_stores_c_times_the_routed_slots(c):
    """Padded to capacity ``c``, every expert takes ``c`` times the balanced slots, whatever the
    routing (Fedus et al. 2021, Sec. 2.2): for time and memory this is dropless MoE with
    ``c x top_k`` slots per token on balanced routing (the all-to-all, the expert GEMMs, the
    permutation and quantization copies and the stored activations all count slots; the
    router does not depend on top-k).  The model FLOPs (MFU) still count ``top_k``: padding is
    not useful work."""
    cap = report(mixtral(moe_capacity_factor=c), moe_imbalance=1.3)
    ref = report(mixtral(), top_k=2 * c, moe_imbalance=1.0)
    np.testing.assert_allclose(float(cap.step_time_s), float(ref.step_time_s), rtol=1e-12)
    for k in cap.breakdown_s:
        np.testing.assert_allclose(
            float(cap.breakdown_s[k]), float(ref.breakdown_s[k]), rtol=1e-12, atol=1e-15
        )
    for k in cap.memory_gb:
        np.testing.assert_allclose(float(cap.memory_gb[k]), float(ref.memory_gb[k]), rtol=1e-12)
    assert float(cap.breakdown_s["ep_comm"]) > float(report(mixtral()).breakdown_s["ep_comm"])
    assert float(cap.mfu) < float(ref.mfu)  # the same time for fewer model FLOPs


def test_padded_experts_do_not_see_the_routing_imbalance():
    """Dropless, the busiest expert rank computes ``moe_imbalance`` times its share and the step
    slows with it; padded to capacity the shapes are static and the imbalance changes nothing."""
    drop = [float(report(mixtral(), moe_imbalance=b).step_time_s) for b in (1.0, 1.5)]
    pad = [
        float(report(mixtral(moe_capacity_factor=1.0), moe_imbalance=b).step_time_s)
        for b in (1.0, 1.5)
    ]
    assert drop[1] > drop[0] * 1.01
    assert pad[1] == pad[0]


def test_moe_load_by_hand():
    st = make_strategy(tp=1, pp=1, dp=8)
    assert float(workload.moe_load(st, 1.2)) == 1.2
    st = make_strategy(tp=1, pp=1, dp=8, moe_capacity_factor=1.25)
    assert float(workload.moe_load(st, 1.2)) == 1.25


def test_dropless_imbalance_is_the_busiest_rank_at_that_load():
    """Dropless, the busiest expert rank receives, permutes, computes and stores
    ``moe_imbalance`` times its balanced share, and the all-to-all waits for it: for time and
    memory the same as every expert padded to a capacity of that factor."""
    drop = report(mixtral(), moe_imbalance=1.3)
    pad = report(mixtral(moe_capacity_factor=1.3), moe_imbalance=1.0)
    for x, y in zip(leaves(drop), leaves(pad), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0)


@pytest.mark.parametrize("smoothing", [cd.EXACT, cd.Smoothing(exact=False, tau=0.05)])
def test_gradient_in_the_capacity_factor_is_finite_and_positive(smoothing):
    """More padding never speeds a step: d(step)/d(capacity) > 0, finite, exact and relaxed."""
    cfg = mixtral(moe_capacity_factor=1.25)

    def step(c):
        st = cfg.strategy.replace(moe_capacity_factor=c)
        return cd.evaluate_unchecked(
            cfg.model, cfg.training, cfg.system, st, cfg.efficiency, smoothing
        ).step_time_s

    g = float(jax.grad(step)(1.25))
    assert math.isfinite(g) and g > 0


def test_bad_capacity_factor_is_named():
    with pytest.raises(SpecError, match="strategy.moe_capacity_factor"):
        make_strategy(tp=1, pp=1, dp=8, moe_capacity_factor=-1.0)
    with pytest.raises(SpecError, match="strategy.moe_capacity_factor"):
        mixtral(moe_capacity_factor=-0.5)
    with pytest.raises(SpecError, match="strategy.moe_capacity_factor"):
        mixtral(moe_capacity_factor="full")
    cfg = mixtral()
    specs = dict(zip(("model", "training", "system", "strategy"), cfg.specs()[:4], strict=True))
    ok = [
        bool(valid_mask(dict(specs, strategy=cfg.strategy.replace(moe_capacity_factor=c))))
        for c in (-1.0, 0.0, 1.0)
    ]
    assert ok == [False, True, True]


def test_run_file_key():
    """``[strategy] moe_capacity_factor`` reaches the strategy (and the report)."""
    cfg = mixtral(moe_capacity_factor=1.25)
    assert float(cfg.strategy.moe_capacity_factor) == 1.25
    assert dataclasses.replace(cfg.strategy).moe_capacity_factor == 1.25


def test_evaluate_prints_the_moe_mode(tmp_path, capsys):
    """``codesign evaluate`` names the MoE dispatcher and the routing mode of an MoE run."""
    from codesign.cli import main

    body = (
        '[model]\npreset = "mixtral-8x7b"\n[training]\nglobal_batch = 256\n[system]\n'
        'accelerator = "h100-sxm5-80gb"\nnum_accelerators = 64\n'
        "[strategy]\ntp = 2\npp = 2\ndp = 16\nep = 8\n"
    )
    for extra, expect in (("", "dropless"), ("moe_capacity_factor = 1.25\n", "capacity=1.25")):
        path = tmp_path / "run.toml"
        path.write_text(body + extra)
        assert main(["evaluate", str(path)]) == 0
        line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("moe ")]
        assert line == [
            f"moe etp=2 dispatcher=alltoall {expect}" + (" (token drop, padded)" if extra else "")
        ]
