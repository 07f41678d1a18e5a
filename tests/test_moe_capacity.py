"""Token-drop MoE padded to capacity (``Strategy.moe_capacity_factor``) against dropless MoE."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

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


NO_WAIT = {"moe_host_layer_us": 0.0, "moe_host_expert_us": 0.0}
"""The dropless dispatcher's host wait off, where dropless and padded MoE are compared as
loads (padded shapes are static and never wait; tests/test_moe_host_wait.py tests the wait)."""


def leaves(r: cd.Report) -> list:
    """Every figure of the step (time, memory, cost, ...); what token drop costs in quality,
    ``moe_dropped_fraction``, is tested on its own below."""
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(r.replace(moe_dropped_fraction=0.0))]


def test_capacity_one_is_dropless_without_the_busiest_rank_excess():
    """Dropless, even balanced routing (``moe_imbalance`` 1) leaves the busiest expert rank
    above its share by sampling noise (:func:`codesign.workload.moe_sampling_excess`); padded
    to capacity 1 every rank holds exactly its share: faster, and it drops tokens."""
    a, b = (
        report(mixtral(), moe_imbalance=1.0),
        report(mixtral(moe_capacity_factor=1.0), moe_imbalance=1.0),
    )
    assert float(a.step_time_s) > float(b.step_time_s)
    assert float(a.moe_dropped_fraction) == 0.0 < float(b.moe_dropped_fraction)


@pytest.mark.parametrize("c", [2.0, 1.5])
def test_padded_capacity_moves_computes_and_stores_c_times_the_routed_slots(c):
    """Padded to capacity ``c``, every expert takes ``c`` times the balanced slots, whatever the
    routing (Fedus et al. 2021, Sec. 2.2): for time and memory this is dropless MoE with
    ``c x top_k`` slots per token on balanced routing (the all-to-all, the expert GEMMs, the
    permutation and quantization copies and the stored activations all count slots; the
    router does not depend on top-k).  The model FLOPs (MFU) still count ``top_k``: padding is
    not useful work."""
    cap = report(mixtral(moe_capacity_factor=c), moe_imbalance=1.3)
    # dropless at c x top_k, its busiest-rank excess cancelled: exactly c x top_k per rank
    cfg = mixtral()
    excess = workload.moe_sampling_excess(cfg.model.replace(moe_top_k=2.0 * c), cfg.strategy)
    eff = cfg.efficiency.replace(moe_imbalance=1.0 / (1.0 + float(excess)), **NO_WAIT)  # unchecked
    m = cfg.model.replace(moe_top_k=2.0 * c)
    ref = cd.evaluate_unchecked(m, cfg.training, cfg.system, cfg.strategy, eff)
    np.testing.assert_allclose(float(cap.step_time_s), float(ref.step_time_s), rtol=1e-12)
    for k in cap.breakdown_s:
        np.testing.assert_allclose(
            float(cap.breakdown_s[k]), float(ref.breakdown_s[k]), rtol=1e-12, atol=1e-15
        )
    for k in cap.memory_gb:
        np.testing.assert_allclose(float(cap.memory_gb[k]), float(ref.memory_gb[k]), rtol=1e-12)
    dropless = report(mixtral(), **NO_WAIT)
    assert float(cap.breakdown_s["ep_comm"]) > float(dropless.breakdown_s["ep_comm"])
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
    """Dropless: the skew times the busiest of ep = 8 ranks' excess at uniform routing, by
    hand (Mixtral, tp 2 with SP: 2048 tokens per router, gathered over etp = 2; top 2 of 8:
    relative variance ``(1 - 1/8)(8 - 2)/(7 x 2 x 2048 x 2)``, Blom's ``Phi^-1(7.625/8.25)``);
    padded to capacity: the capacity factor."""
    cfg = mixtral()
    z = statistics.NormalDist().inv_cdf(7.625 / 8.25)
    want = 1.2 * (1 + z * math.sqrt((1 - 1 / 8) * 6 / (7 * 2 * 2048 * 2)))
    assert float(workload.moe_load(cfg.model, cfg.strategy, 1.2)) == pytest.approx(want, rel=1e-12)
    st = cfg.strategy.replace(moe_capacity_factor=1.25)
    assert float(workload.moe_load(cfg.model, st, 1.2)) == 1.25
    one_rank = cfg.strategy.replace(ep=1.0, dp=16.0)
    assert float(workload.moe_sampling_excess(cfg.model, one_rank)) == 0.0
    every_expert = cfg.model.replace(moe_top_k=8.0)
    assert float(workload.moe_sampling_excess(every_expert, cfg.strategy)) == 0.0


@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "ep"), [(512, 2, 8, 8), (256, 8, 128, 16), (128, 8, 256, 32)]
)
def test_busiest_rank_excess_against_a_simulation(tokens, top_k, experts, ep):
    """Route ``ep x T`` tokens to ``top_k`` distinct experts uniformly at random (the forced
    balanced routing of the benchmarks), count the slots each rank's ``E / ep`` experts get
    and average the largest over trials: the model's excess is within 8 % of it."""
    rng = np.random.default_rng(0)
    trials, excess = 200, []
    for _ in range(trials):
        picks = np.argpartition(rng.random((ep * tokens, experts)), -top_k, axis=1)[:, -top_k:]
        per_rank = np.bincount(picks.ravel(), minlength=experts).reshape(ep, -1).sum(axis=1)
        excess.append(per_rank.max() / (tokens * top_k) - 1)
    cfg = mixtral(tp=1, dp=32, sequence_parallel=False)  # then ep experts' ranks, unchecked
    st = cfg.strategy.replace(ep=float(ep))
    m = cfg.model.replace(moe_top_k=float(top_k), moe_experts=float(experts), seq_len=float(tokens))
    got = float(workload.moe_sampling_excess(m, st))
    assert got == pytest.approx(float(np.mean(excess)), rel=0.08)


def test_dropless_is_capacity_at_the_busiest_rank_load():
    """Dropless, the busiest expert rank receives, permutes, computes and stores its load
    (:func:`codesign.workload.moe_load`) times its balanced share, and the all-to-all waits
    for it: for time and memory the same as every expert padded to a capacity of that load."""
    cfg = mixtral()
    load = float(workload.moe_load(cfg.model, cfg.strategy, 1.3))
    drop = report(cfg, moe_imbalance=1.3, **NO_WAIT)
    pad = report(mixtral(moe_capacity_factor=load), moe_imbalance=1.0)
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
        tail = (
            " (token drop, padded; 0.00 % of routed tokens dropped at uniform routing, "
            "2048 tokens per router)"
        )
        assert line == [f"moe etp=2 dispatcher=alltoall {expect}" + (tail if extra else "")]
        assert main(["evaluate", str(path), "--json"]) == 0
        moe = json.loads(capsys.readouterr().out)["moe"]
        assert moe["router_tokens"] == 2048.0 and moe["capacity_factor"] == (1.25 if extra else 0)
        assert moe["dropped_fraction"] == (pytest.approx(0.0, abs=1e-12) if extra else 0.0)


def binomial_dropped_fraction(tokens: int, top_k: int, experts: int, c: float) -> float:
    """``E[(X - C)+] / (T p)``, ``X ~ Binomial(T, k/E)``, ``C = ceil(c T k / E)``, summed term
    by term from the binomial probabilities (log-gamma), independently of the model."""
    p = top_k / experts
    cap = math.ceil(tokens * top_k / experts * c)
    total = 0.0
    for x in range(cap + 1, tokens + 1):
        log_pmf = (
            math.lgamma(tokens + 1)
            - math.lgamma(x + 1)
            - math.lgamma(tokens - x + 1)
            + x * math.log(p)
            + (tokens - x) * math.log1p(-p)
        )
        total += (x - cap) * math.exp(log_pmf)
    return total / (tokens * p)


def moe_model(top_k, experts, seq_len):
    return mixtral().model.replace(
        moe_top_k=float(top_k), moe_experts=float(experts), seq_len=float(seq_len)
    )


@pytest.mark.parametrize(
    ("top_k", "experts", "seq_len", "c", "tol_points"),
    [
        (2, 8, 4096, 1.0, 0.1),  # Mixtral: 2048 tokens per router (tp 2), 512 per expert
        (8, 128, 8192, 1.0, 0.1),  # Qwen3-235B: 4096 tokens per router, 256 per expert
        (8, 256, 8192, 1.0, 0.1),  # DeepSeek-V3: 128 per expert
        (8, 128, 8192, 0.8, 0.1),  # under capacity: about 1 - c dropped
        (8, 256, 1024, 1.0, 0.1),  # 32 per expert
        (8, 256, 512, 1.0, 0.5),  # 8 per expert: the normal approximation's weakest here
        (8, 128, 8192, 1.25, 0.1),  # 1.25: 0.00 %
    ],
)
def test_dropped_fraction_against_the_binomial_sum(top_k, experts, seq_len, c, tol_points):
    """Uniform routing (what ``moe_router_force_load_balancing`` runs): an expert's count of a
    router's ``T`` tokens is ``Binomial(T, k/E)``; the model's normal approximation is within
    the stated percentage points of the exact sum (Fedus et al. 2021, Sec. 2.2 capacity)."""
    m = moe_model(top_k, experts, seq_len)
    st = mixtral(moe_capacity_factor=c).strategy  # tp 2, sequence parallel: T = seq_len / 2
    tokens = int(float(workload.moe_router_tokens(m, st)))
    assert tokens == seq_len // 2
    got = float(workload.moe_dropped_fraction(m, st))
    want = binomial_dropped_fraction(tokens, top_k, experts, c)
    assert abs(got - want) * 100 <= tol_points, (got, want)
    if c < 1:  # at least what the capacity cannot take of the mean load
        assert got >= 1 - math.ceil(c * tokens * top_k / experts) / (tokens * top_k / experts)


def test_dropped_fraction_dropless_and_every_token_everywhere():
    """Dropless drops nothing; with ``k = E`` every expert sees every token (no spread, no NaN):
    capacity ``c < 1`` drops ``1 - ceil(c T)/T`` of them."""
    cfg = mixtral(moe_capacity_factor=0.5)
    assert float(workload.moe_dropped_fraction(cfg.model, mixtral().strategy)) == 0.0
    m = moe_model(8, 8, 4096)
    got = float(workload.moe_dropped_fraction(m, cfg.strategy))
    assert got == pytest.approx(0.5, rel=1e-12)


def test_dropped_fraction_router_tokens_follow_the_layout():
    """Capacity is set on one router's tokens (``microbatch x seq / cp``, ``/ tp`` with sequence
    parallelism), so a smaller shard drops more at the same factor."""
    m = mixtral().model
    drop = {
        kw: float(
            workload.moe_dropped_fraction(m, mixtral(moe_capacity_factor=1.0, **dict(kw)).strategy)
        )
        for kw in (
            (("microbatch", 2),),
            (),
            (("sequence_parallel", False), ("tp", 2)),
            (("cp", 2), ("dp", 8)),
        )
    }
    vals = list(drop.values())
    assert vals[0] < vals[1] and vals[2] < vals[1] and vals[3] > vals[1]
    assert vals[2] == pytest.approx(vals[0], rel=1e-12)  # 4096 tokens per router both


@given(c=hs.floats(0.3, 3.0), dc=hs.floats(0.01, 1.0))
@settings(max_examples=30, deadline=None)
def test_more_capacity_never_drops_more(c, dc):
    m = mixtral().model
    st = mixtral().strategy
    a, b = (
        float(workload.moe_dropped_fraction(m, st.replace(moe_capacity_factor=x)))
        for x in (c, c + dc)
    )
    assert 0.0 <= b <= a <= 1.0


@pytest.mark.parametrize("smoothing", [cd.EXACT, cd.Smoothing(exact=False, tau=0.05)])
def test_dropped_fraction_gradient(smoothing):
    """Finite, exact and relaxed.  Relaxed (straight-through ceil: the value is the exact one),
    negative in the capacity factor and in the micro-batch (more tokens per router spread
    less); the exact model's capacity is a whole count, flat in ``c`` between its steps."""
    cfg = mixtral(moe_capacity_factor=1.0)

    def drop(c, mb):
        st = cfg.strategy.replace(moe_capacity_factor=c, microbatch=mb)
        return workload.moe_dropped_fraction(cfg.model, st, smoothing)

    gc, gm = (float(g) for g in jax.grad(drop, argnums=(0, 1))(1.0, 1.0))
    assert math.isfinite(gc) and math.isfinite(gm)
    assert gc == 0.0 if smoothing.exact else (gc < 0 and gm < 0)
    assert float(drop(1.0, 1.0)) == pytest.approx(
        float(workload.moe_dropped_fraction(cfg.model, cfg.strategy)), rel=1e-12
    )


def test_sweep_holds_the_dropped_share_to_its_cap():
    """``moe_dropped_fraction_max`` (a constraint like the others): over capacity factors and
    micro-batches the fastest point drops 1.5 % of the tokens; capped at 1 % the sweep takes
    a layout that drops at most that, and pays for it in step time."""
    from codesign.search import sweep

    cfg = mixtral(moe_capacity_factor=1.0, sequence_parallel=True)
    eff = cfg.efficiency.replace(moe_imbalance=1.2)
    cfg = dataclasses.replace(cfg, efficiency=eff)
    axes = {"strategy.moe_capacity_factor": [1.0, 1.1, 1.25], "strategy.microbatch": [1, 2]}
    free = sweep(cfg, axes, top_k=6, progress=False)
    capped = sweep(
        cfg, axes, top_k=6, progress=False, constraints={"moe_dropped_fraction_max": 0.01}
    )
    drop = {}
    for res in (free, capped):
        for i in range(len(res.best_values)):
            if math.isfinite(float(res.best_values[i])):
                p = res.point(i)
                st = cfg.strategy.replace(
                    moe_capacity_factor=p["strategy.moe_capacity_factor"],
                    microbatch=p["strategy.microbatch"],
                )
                drop[(res is capped, i)] = float(workload.moe_dropped_fraction(cfg.model, st))
    assert drop[(False, 0)] > 0.01  # the unconstrained best drops more than the cap
    kept = [v for (is_capped, _), v in drop.items() if is_capped]
    assert kept and max(kept) <= 0.01
    assert len(kept) < len([k for k in drop if not k[0]])
    assert float(capped.best_values[0]) > float(free.best_values[0])


@pytest.mark.slow
def test_optimizer_holds_the_dropped_share_to_its_cap():
    """The relaxed optimizer meets the dropped-token cap as the sweep does (Mixtral on 1,024
    H100s, capacity 1: the uncapped optimum's 4096 tokens per router drop 1.08 %; capped at
    1 %, a layout with 8192 tokens per router)."""
    from codesign.search import distributed_sweep, load_problem_dict, optimize

    def problem(**constraints):
        return load_problem_dict(
            {
                "model": {"preset": "mixtral-8x7b"},
                "training": {"global_batch": 1024, "tokens": 2e12},
                "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 1024},
                "strategy": {"moe_capacity_factor": 1.0},
                "objective": {"minimize": "step_time"},
                "constraints": constraints,
                "search": {
                    "mode": "strategy",
                    "tp": [1, 2, 4],
                    "pp": [1, 2, 4],
                    "ep": [4, 8],
                    "microbatch": [1, 2],
                    "recompute": ["none", "selective"],
                    "zero": [1],
                },
            }
        )

    free, capped = problem(), problem(moe_dropped_fraction_max=0.01)
    best_free = distributed_sweep(free, progress=False)
    assert float(_report_of(best_free.config(0, free.cfg)).moe_dropped_fraction) > 0.01
    best = distributed_sweep(capped, progress=False)
    res = optimize(capped)
    assert float(res.report.moe_dropped_fraction) <= 0.01
    assert float(_report_of(best.config(0, capped.cfg)).moe_dropped_fraction) <= 0.01
    assert res.exact_objective <= 1.01 * float(best.best_values[0])
    assert float(best.best_values[0]) > float(best_free.best_values[0])


def _report_of(cfg) -> cd.Report:
    return cd.evaluate(*cfg.specs())


def _capacity_problem(capacities, mode="strategy", model="mixtral-8x7b", **constraints):
    from codesign.search import load_problem_dict

    search = {"mode": mode, "moe_capacity_factor": capacities}
    if mode == "strategy":
        search.update(tp=[1, 2], pp=[1], microbatch=[1, 2], recompute=["none"], zero=[1])
    return load_problem_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": 512, "tokens": 1e12},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 256},
            "strategy": {"ep": 8 if model == "mixtral-8x7b" else 1},
            "objective": {"minimize": "step_time"},
            "constraints": constraints,
            "search": search,
        }
    )


def test_capacity_factor_is_a_problem_axis():
    """``[search] moe_capacity_factor`` (0: dropless) is an axis of the problem's grid, the
    smallest value fixed in its base; one value fixes it (no axis)."""
    pb = _capacity_problem([1.25, 0, 1])
    assert pb.capacity_factors == (0.0, 1.0, 1.25)
    axes = pb.exhaustive_axes()
    assert axes["strategy.moe_capacity_factor"] == [0.0, 1.0, 1.25]
    assert pb.grid_size() == 3 * 2 * 2  # capacity, tp, microbatch
    assert float(pb.cfg.strategy.moe_capacity_factor) == 0.0
    one = pb.with_values(capacity_factors=[1.25])
    assert "strategy.moe_capacity_factor" not in one.exhaustive_axes()
    assert float(one.cfg.strategy.moe_capacity_factor) == 1.25 and one.grid_size() == 4
    fixed = _capacity_problem([1.5])
    assert float(fixed.cfg.strategy.moe_capacity_factor) == 1.5
    assert "strategy.moe_capacity_factor" not in fixed.exhaustive_axes()


@pytest.mark.parametrize(
    "capacities, kw, allowed",
    [
        ([0, -1], {}, "a number >= 0"),
        ("1.25", {}, "a non-empty list of numbers"),
        ([0, 1], {"model": "llama3-8b"}, "one value (or none) for a dense model"),
        ([0, 1], {"mode": "hardware"}, "absent in hardware mode: set it in [strategy]"),
    ],
)
def test_bad_capacity_axes_name_the_field(capacities, kw, allowed):
    with pytest.raises(SpecError) as e:
        _capacity_problem(capacities, **kw)
    assert e.value.field == "search.moe_capacity_factor"
    assert e.value.allowed == allowed


def test_sweep_over_capacity_factors_weighs_speed_against_dropped_tokens():
    """Over dropless and capacities 1 and 1.25: uncapped, capacity 1 is fastest (every rank
    holds exactly its share; dropless carries the busiest rank's sampling excess) and drops
    more than 1 % of the routed tokens at one sequence per router; capped at 1 %, the sweep
    goes dropless, and the design text says so."""
    from codesign.cli._describe import _describe_design, _design_dict
    from codesign.search import solve

    free = solve(_capacity_problem([0, 1, 1.25]), method="sweep")
    capped = solve(_capacity_problem([0, 1, 1.25], moe_dropped_fraction_max=0.01), method="sweep")
    assert free.point["strategy.moe_capacity_factor"] == 1.0
    assert float(free.report.moe_dropped_fraction) > 0.01
    assert capped.point["strategy.moe_capacity_factor"] == 0.0
    assert float(capped.report.moe_dropped_fraction) == 0.0
    assert capped.exact_objective > free.exact_objective
    assert _describe_design(free.config)[-1].endswith("capacity=1")
    assert _describe_design(capped.config)[-1].endswith("dropless")
    assert _design_dict(capped.config)["strategy"]["moe_capacity_factor"] == 0.0


@pytest.mark.slow
def test_optimizer_searches_each_capacity_factor():
    """The optimizer runs one relaxed search per capacity factor and keeps the best exact
    design: the sweep's optimum, its factor in the point, every search's evaluations
    counted."""
    from codesign.search import Settings, distributed_sweep, optimize

    for cons in ({}, {"moe_dropped_fraction_max": 0.01}):
        pb = _capacity_problem([0, 1, 1.25], **cons)
        best = distributed_sweep(pb, progress=False)
        res = optimize(pb, Settings(steps=150, starts=4))
        assert res.exact_objective == pytest.approx(float(best.best_values[0]), rel=1e-9)
        c = res.point["strategy.moe_capacity_factor"]
        assert c == best.best()["strategy.moe_capacity_factor"]
        assert float(res.config.strategy.moe_capacity_factor) == c
        assert res.num_exact_evals >= 3 and res.exact_trace[-1][1] == res.exact_objective


def test_sampling_excess_gradient_is_finite_where_it_vanishes():
    """At one expert rank, and with every expert chosen (``k = E``), the busiest rank's
    excess is 0 and its spread is 0: the square root's gradient stays finite there
    (``codesign.smoothing.safe_sqrt``), as it must for the relaxed search that starts at
    ``ep = 1``."""
    cfg = mixtral()

    def excess(ep, k):
        m = cfg.model.replace(moe_top_k=k)
        return workload.moe_sampling_excess(m, cfg.strategy.replace(ep=ep))

    for ep, k in ((1.0, 2.0), (8.0, 8.0)):
        assert float(excess(ep, k)) == 0.0
        g = jax.grad(excess, argnums=(0, 1))(ep, k)
        assert all(math.isfinite(float(x)) for x in g)


@pytest.mark.slow
def test_envelope_reoptimizes_the_problems_capacity_factors():
    """A problem's sensitivity envelope re-optimizes its capacity factors with the rest of
    the strategy: at the uncapped optimum (capacity 1), re-optimized under a 1 % cap on the
    dropped share, the best strategy goes dropless and matches the capped sweep's optimum;
    held at capacity 1 nothing in the grid would be feasible."""
    from codesign.cli.sensitivity import _strategy
    from codesign.search import solve
    from codesign.sensitivity import problem_strategy_values, sensitivity, strategy_grid

    capped = _capacity_problem([0, 1, 1.25], moe_dropped_fraction_max=0.01)
    free = solve(_capacity_problem([0, 1, 1.25]), method="sweep")
    best = solve(capped, method="sweep")
    values = problem_strategy_values(capped)
    assert values["moe_capacity_factor"] == [0.0, 1.0, 1.25]
    combos, _ = strategy_grid(free.config, values)
    assert {c["moe_capacity_factor"] for c in combos} == {0.0, 1.0, 1.25}

    def envelope_at(strategy_values):
        return sensitivity(
            free.config,
            objectives=("step_time",),
            parameters=["tiers[0].bandwidth_gbps"],
            reoptimize=True,
            envelope_objective="step_time",
            strategy_values=strategy_values,
            constraints=capped.constraints,
        )

    s = envelope_at(values)
    assert s.best_strategy["moe_capacity_factor"] == 0.0
    assert _strategy(s.best_strategy).endswith(" dropless")
    assert s.best_value == pytest.approx(best.exact_objective, rel=1e-9)
    held = {k: v for k, v in values.items() if k != "moe_capacity_factor"}
    assert envelope_at(held).best_value is None
