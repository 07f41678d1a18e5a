"""Expert tensor parallelism (``etp``, MoE parallel folding) as a problem-file search axis."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

import codesign as cd
from codesign.search import load_problem_dict, solve
from codesign.specs import SpecError


def _problem(etp, mode="strategy", model="gpt-oss-120b", **search):
    """GPT-OSS 120B (128 experts) on 64 H100s at tensor parallelism 4."""
    s = {"mode": mode}
    if etp is not None:
        s["etp"] = etp
    if mode == "strategy":
        s.update(tp=[4], pp=[1, 2], ep=[8, 16, 32, 64], microbatch=[1, 2])
        s.update(recompute=["none", "selective"], zero=[1])
    s.update(search)
    return load_problem_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": 512, "tokens": 1e12},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
            "strategy": {"tp": 4, "ep": 8 if model == "gpt-oss-120b" else 1},
            "objective": {"minimize": "step_time"},
            "search": s,
        }
    )


def test_etp_is_a_problem_axis():
    """``[search] etp`` (0: as tp) is an axis of the grid; one value fixes it in the base."""
    pb = _problem([1, 0, 2])
    assert pb.strategy_values["etp"] == (0.0, 1.0, 2.0)
    assert pb.exhaustive_axes()["strategy.etp"] == [0.0, 1.0, 2.0]
    assert pb.grid_size() == 3 * 2 * 4 * 2 * 2  # etp, pp, ep, microbatch, recompute
    one = pb.with_values(etp=[1])
    assert "strategy.etp" not in one.exhaustive_axes()
    assert float(one.cfg.strategy.etp) == 1.0
    assert float(_problem(None).cfg.strategy.etp) == 0.0  # Megatron-Core's default: as tp


@pytest.mark.parametrize(
    "etp, kw, field, allowed",
    [
        ([1, -1], {}, "search.etp", "a number >= 0"),
        ([1.5], {}, "search.etp", "a positive integer"),
        ("1", {}, "search.etp", "a non-empty list of numbers"),
        (
            [0, 1],
            {"model": "llama3-8b", "ep": [1]},
            "search.etp",
            "one value (or none) for a dense model",
        ),
        (
            [0, 1],
            {"mode": "hardware"},
            "search.etp",
            "absent in hardware mode: set the strategy in [strategy]",
        ),
    ],
)
def test_bad_etp_axes_name_the_field(etp, kw, field, allowed):
    with pytest.raises(SpecError) as e:
        _problem(etp, **kw)
    assert e.value.field == field
    assert e.value.allowed == allowed


def test_sweep_over_etp_unfolds_the_experts():
    """At tensor parallelism 4, experts sharded like the dense layers (etp = tp) allow at
    most ep 16 on 64 ranks (ep x etp divides tp x dp x cp): ep 32 and 64 have no valid point;
    etp 1 folds the experts over the whole tp x dp group, which makes them valid.  The sweep
    over etp finds the best of both, and its value is the exact model's at the chosen
    strategy."""
    as_tp = solve(_problem([0]), method="sweep")
    whole = solve(_problem([1]), method="sweep")
    both = solve(_problem([0, 1]), method="sweep")
    assert as_tp.point["strategy.ep"] * 4 <= 64
    assert solve(_problem([0], ep=[32, 64]), method="sweep").exact_objective == math.inf
    folded = solve(_problem([1], ep=[32, 64]), method="sweep")
    assert folded.point["strategy.ep"] > 16 and math.isfinite(folded.exact_objective)
    best = min(as_tp.exact_objective, whole.exact_objective)
    assert both.exact_objective == pytest.approx(best, rel=1e-12)
    assert both.point["strategy.etp"] == 1.0  # whole experts: no tensor-parallel traffic
    assert both.exact_objective < as_tp.exact_objective
    r = cd.evaluate(*both.config.specs())
    assert float(both.config.strategy.etp) == 1.0
    assert float(r.step_time_s) == pytest.approx(both.exact_objective, rel=1e-12)
    from codesign.cli._describe import _describe_design, _design_dict

    assert " etp=1 " in _describe_design(both.config)[-1]
    assert _design_dict(both.config)["strategy"]["etp"] == 1.0


@pytest.mark.slow
def test_optimizer_searches_each_etp():
    """The optimizer runs one relaxed search per etp value and keeps the best exact design:
    the sweep's optimum, its etp in the point, every search's evaluations counted."""
    from codesign.search import Settings, distributed_sweep, optimize

    pb = _problem([0, 1, 2])
    best = distributed_sweep(pb, progress=False)
    res = optimize(pb, Settings(steps=150, starts=4))
    assert res.exact_objective == pytest.approx(float(best.best_values[0]), rel=1e-9)
    assert res.point["strategy.etp"] == best.best()["strategy.etp"]
    assert float(res.config.strategy.etp) == res.point["strategy.etp"]
    assert res.num_exact_evals >= 3 and res.exact_trace[-1][1] == res.exact_objective


@pytest.mark.parametrize("etp, violated", [(1, False), (2, False), (0, True)])
def test_relaxed_folding_constraint_counts_etp(etp, violated):
    """The relaxed constraint of MoE parallel folding, ``log2 ep + log2 etp <= log2 (tp dp
    cp)``: at tp 4 on 64 ranks (dp 16), ep 32 folds with etp 1 (32 x 1 divides 64) and, on
    the bound, etp 2 (32 x 2 = 64), but not with the experts sharded as tp (etp 0: 32 x 4)."""
    from codesign.search import relax

    pb = _problem([etp], ep=[8, 32], pp=[1], microbatch=[1], recompute=["none"])
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space.free_ep and not space.free_degrees
    p = relax.init_params(jax.random.key(0), space)
    p["ep"] = jnp.asarray(40.0)  # the top of the box: ep = 32
    t = relax.loss_terms(p, 0.01, space, box, base)
    fold = float(t["violations"][relax.VIOLATION_NAMES.index("ep_etp_folding")])
    expected = math.log2(32) + math.log2(etp if etp else 4) - math.log2(4 * 16)
    assert fold == pytest.approx(expected, abs=1e-9)
    assert (fold > 1e-9) == violated
