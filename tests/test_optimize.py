"""Optimizer and discretization: reaches the enumerated optimum, deterministic, valid and feasible."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

import codesign as cd
from codesign.rules import check_all
from codesign.search import (
    Discretizer,
    ExactEvaluator,
    OptimizeResult,
    Settings,
    load_problem,
    optimize,
    random_search,
    sweep,
    valid_points,
)

PROBLEM = (
    Path(__file__).resolve().parent.parent
    / "experiments"
    / "problems"
    / "llama3-8b-64xh100-step.toml"
)
SETTINGS = Settings(steps=200, starts=12)


@pytest.fixture(scope="module")
def problem():
    return load_problem(PROBLEM)


@pytest.fixture(scope="module")
def result(problem) -> OptimizeResult:
    return optimize(problem, SETTINGS, seed=0)


@pytest.fixture(scope="module")
def exhaustive(problem):
    return _exhaustive(problem)


def _exhaustive(pb):
    # codesign.search.sweep directly (not distributed_sweep): the independent ground truth.
    return sweep(
        pb.cfg,
        pb.exhaustive_axes(),
        objective=pb.objective,
        capex_max_usd=pb.capex_max_usd,
        power_max_kw=pb.power_max_kw,
        top_k=1,
        progress=False,
    )


def _assert_valid_feasible(pb, res: OptimizeResult):
    cfg = res.config
    assert cfg is not None and math.isfinite(res.exact_objective)
    check_all(cfg.model, cfg.training, cfg.system, cfg.strategy)  # raises on any invalid choice
    r = cd.evaluate(*cfg.specs())
    assert bool(r.fits)
    assert float(r.cost["capex_usd"]) <= pb.capex_max_usd
    assert float(r.cost["power_kw"]) <= pb.power_max_kw
    for k, v in res.point.items():
        name = k.split(".")[-1]
        allowed = pb.strategy_values.get(name, pb.hardware_values.get(k))
        assert v in allowed, (k, v, allowed)
    assert float(r.step_time_s) == pytest.approx(res.exact_objective, rel=1e-12)


@pytest.mark.slow
def test_reaches_exhaustive_optimum(problem, result, exhaustive):
    assert problem.grid_size() == 4 * 6 * 4 * 3 * 4
    assert exhaustive.num_feasible > 0
    assert result.exact_objective == pytest.approx(float(exhaustive.best_values[0]), rel=1e-9)
    # On a grid this small the stalled local search's whole-axis moves (one and two axes at
    # once, every categorical combination) reach most valid points; `codesign optimize`
    # sweeps such grids instead.  It never evaluates a point twice.
    assert result.num_exact_evals <= exhaustive.num_valid
    assert math.isfinite(result.relaxed_objective) and abs(result.gap) < 0.15
    # The histories describe every start and step; the exact trace only improves.
    assert (
        result.history.shape == result.objective_history.shape == (SETTINGS.starts, SETTINGS.steps)
    )
    trace = [v for _, v in result.exact_trace]
    assert (
        all(b <= a for a, b in zip(trace, trace[1:], strict=False))
        and trace[-1] == result.exact_objective
    )
    # Every start had one (recompute, zero) combination, and all 12 were covered.
    assert len(set(result.start_combos)) == 12


@pytest.mark.slow
def test_same_seed_same_result(problem, result):
    again = optimize(problem, SETTINGS, seed=0)
    np.testing.assert_array_equal(again.history, result.history)
    assert again.point == result.point and again.exact_objective == result.exact_objective
    assert again.num_exact_evals == result.num_exact_evals
    other = optimize(problem, SETTINGS, seed=1)
    assert not np.array_equal(other.history, result.history)


@pytest.mark.slow
def test_discretization_valid_and_feasible(problem, result):
    _assert_valid_feasible(problem, result)
    # A harder variant with the same structure (no recompilation): 40 GB of HBM.
    cfg = problem.cfg
    small = dataclasses.replace(
        cfg.system, accelerator=dataclasses.replace(cfg.system.accelerator, hbm_gb=40.0)
    )
    pb40 = dataclasses.replace(problem, cfg=dataclasses.replace(cfg, system=small))
    res = optimize(pb40, SETTINGS, seed=0)
    _assert_valid_feasible(pb40, res)
    assert float(res.report.memory_gb["total"]) <= 40.0
    ex = _exhaustive(pb40)
    assert res.exact_objective >= float(ex.best_values[0]) * (1 - 1e-12)
    assert res.exact_objective <= float(ex.best_values[0]) * 1.01


def test_layouts_are_the_valid_points(problem, exhaustive):
    ev = ExactEvaluator(problem)
    disc = Discretizer(problem, ev)
    # Validity does not depend on recompute or ZeRO: valid layouts x 12 = the sweep's count.
    assert len(disc.layouts) * 12 == exhaustive.num_valid
    assert ev.is_valid(
        np.stack([disc.compose(i, (0, 0), ()) for i in range(len(disc.layouts))])
    ).all()
    # Rounding a relaxed point near tp=3, pp=1, mb=4 gives the nearest valid layouts first.
    z = {"tp": np.log2(3.0), "pp": 0.0, "cp": 0.0, "mb": 2.0, "hw": np.zeros(0)}
    cands = disc.round(z, [(0, 0)], k=2, k_all=0)
    pts = [ev.point(c) for c in cands]
    assert {p["strategy.tp"] for p in pts} == {2.0, 4.0}
    assert all(p["strategy.pp"] == 1.0 and p["strategy.microbatch"] == 4.0 for p in pts)
    # Neighbours stay on the grid and differ from the point.
    p0 = cands[0]
    nb = disc.neighbours(p0, 8)
    assert (
        nb
        and p0 not in nb
        and all(0 <= i < n for q in nb for i, n in zip(q, ev.shape, strict=True))
    )


def test_random_search_samples_valid_points(problem, exhaustive):
    ev = ExactEvaluator(problem)
    vp = valid_points(problem, ev)
    assert len(vp) == exhaustive.num_valid
    best, point = random_search(problem, 50, seed=3, ev=ev, valid=vp)
    assert best >= float(exhaustive.best_values[0])
    assert random_search(problem, 50, seed=3, ev=ev, valid=vp)[0] == best
    # With every valid point in the budget, random search is the exhaustive search.
    assert random_search(problem, len(vp), seed=0, ev=ev, valid=vp)[0] == pytest.approx(
        float(exhaustive.best_values[0]), rel=1e-12
    )


def _grid_index(ev: ExactEvaluator, values: dict) -> tuple:
    """The grid point (one index per axis of ``ev``) with these axis values."""
    return tuple(ev.values[a].index(values[p]) for a, p in enumerate(ev.paths))


def _with_tier_efficiencies(pb, efficiencies, **eff_changes):
    """``pb`` with its tiers' efficiencies (and ``eff_changes`` of its efficiency) pinned."""
    sy = pb.cfg.system
    tiers = tuple(t.replace(efficiency=e) for t, e in zip(sy.tiers, efficiencies, strict=True))
    cfg = dataclasses.replace(
        pb.cfg,
        efficiency=dataclasses.replace(pb.cfg.efficiency, **eff_changes),
        system=sy.replace(tiers=tiers),
    )
    return dataclasses.replace(pb, cfg=cfg)


@pytest.mark.slow
def test_stalled_search_retries_its_layout_with_other_categorical_choices():
    """Under a capex cap on a priced accelerator (``llama3-70b-accelerator-design``), the
    exhaustive optimum drops recomputation, which pays only once HBM capacity is bought back
    from compute: no single move does both.  Without the stalled search's restarts from its
    own layout with each other categorical combination (then a bandwidth-only search), seed 0
    stopped 2.1 % above the optimum."""
    from codesign.search._local import _category_starts

    pb = load_problem(PROBLEM.parent / "llama3-70b-accelerator-design.toml")
    res = optimize(pb, Settings(), seed=0)
    ex = _exhaustive(pb)
    assert res.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-9)
    r = cd.evaluate(*res.config.specs())
    assert bool(r.fits) and float(r.cost["capex_usd"]) <= pb.capex_max_usd

    # The restarts keep the point's layout and bandwidths, change the categorical choice,
    # and come best first by the exact keys (infeasible ones rank after feasible ones).
    ev = ExactEvaluator(pb)
    disc = Discretizer(pb, ev)
    cat0 = tuple(0 for _ in disc.cat_axes)
    p0 = disc.compose(0, cat0, tuple(ev.shape[a] // 2 for a in disc.bw_axes))
    starts = _category_starts(disc, p0, 4)
    lay, cat, bw = disc.split(p0)
    assert 0 < len(starts) <= 4
    assert all(disc.split(q)[0] == lay and disc.split(q)[2] == bw for q in starts)
    assert all(disc.split(q)[1] != cat for q in starts)
    ks = ev.keys(starts)
    assert ks == sorted(ks) and all(math.isfinite(k[1]) for k in ks)


@pytest.mark.slow
def test_stalled_search_ranks_layouts_by_a_scan_of_the_bandwidths():
    """Under a capex cap (``gpt3-175b-h100-nvlink-domain``: 150 M$), the optimum (3,072 H100
    in 64-GPU domains at 900 / 71 GB/s, tp 4, pp 1, ZeRO-3) is a smaller cluster than a
    local optimum of the grid (4,096 at 450 / 25 GB/s, pp 4, ZeRO-2): its savings buy the
    faster fabric.  At the stalled point's own bandwidths its layout ranked 74th of the 214
    whole-axis moves, beyond the restarts; seed 0 of the benchmark stopped 10 % above the
    optimum.  Ranked by a scan of the bandwidth axes it is a restart, and the search reaches
    the optimum."""
    from codesign.search._local import (
        SCAN_POINTS,
        SCAN_VALUES,
        _bandwidth_scan_starts,
        _scan_indices,
    )

    assert _scan_indices(4, 5) == [0, 1, 2, 3]
    assert _scan_indices(9, 5) == [0, 2, 4, 6, 8]
    assert _scan_indices(9, 3) == [0, 4, 8]

    pb = load_problem(PROBLEM.parent / "gpt3-175b-h100-nvlink-domain.toml")
    ev = ExactEvaluator(pb)
    disc = Discretizer(pb, ev)

    base = {p: v[0] for p, v in zip(ev.paths, ev.values, strict=True)}
    stuck = _grid_index(
        ev,
        {
            **base,
            "system.num_accelerators": 4096,
            "system.tiers[0].domain": 64,
            "strategy.tp": 4,
            "strategy.pp": 4,
            "strategy.zero": 2,
            "system.tiers[0].bandwidth_gbps": ev.values[
                ev.paths.index("system.tiers[0].bandwidth_gbps")
            ][1],
        },
    )
    moves = disc.axis_moves(stuck)
    ks = ev.keys(moves)
    starts = _bandwidth_scan_starts(disc, moves, ks, 8)
    assert 0 < len(starts) <= 8
    sk = ev.keys(starts)
    assert sk == sorted(sk) and all(math.isfinite(k[1]) for k in sk)
    # One start per layout, on the scan grid (SCAN_VALUES evenly spaced values per bandwidth
    # axis, both ends), and the best of its layout's scan points with its categorical choices.
    lays = [disc.layout_of(q) for q in starts]
    assert len(set(lays)) == len(lays)
    grid = list(itertools.product(*[_scan_indices(ev.shape[a], SCAN_VALUES) for a in disc.bw_axes]))
    assert 1 < len(grid) <= SCAN_POINTS
    for q, qk in zip(starts, sk, strict=True):
        lay, cat, bw = disc.split(q)
        assert bw in grid
        assert qk == min(ev.keys([disc.compose(lay, cat, b) for b in grid]))
    # With ``below`` (as the search calls it), only points better than the stalled one.
    (cur,) = ev.keys([stuck])
    assert any(not k < cur for k in sk)
    below = ev.keys(_bandwidth_scan_starts(disc, moves, ks, 8, below=cur))
    assert below and all(k < cur for k in below)
    res = optimize(pb, Settings(), seed=0)
    ex = _exhaustive(pb)
    assert res.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-9)


_USD_PER_TOKEN_PINNED = """
[efficiency]
gemm_max = 0.7758
gemm_half_dim = 258.8
attention_eff = 0.895
hbm_eff = 0.653
dp_comm_eff = 0.9653
dp_overlap_eff = 0.9203
dp_overlap_slowdown = 0.0
tp_overlap_eff = 0.3373
cp_step_overhead_us = 26.9
p2p_overlap_eff = 0.07459
backward_factor = 2.017
"""
"""The H200 preset's values of 2026-12-04 (before ``dp_overlap_slowdown``), pinned so that the
stalled-search scenario below stays whatever later calibrations do (with the presets of
2026-12-05 the optimum moved to pp 2, ZeRO-2 at 18 GB/s, which seed 0 reaches without the
polish); the tier efficiencies are pinned too (:data:`_USD_PER_TOKEN_TIERS`)."""
_USD_PER_TOKEN_TIERS = (0.9705, 0.9294)
"""The H200 preset's tier efficiencies (NVLink 4, InfiniBand NDR) of 2026-12-05 before GPT-OSS
on B200 took its recipe's EP: the scale-out's, 0.93 then and 0.89 after, moves the scenario."""


@pytest.mark.slow
def test_stalled_search_polishes_the_bandwidths_of_near_scanned_layouts(monkeypatch, tmp_path):
    """Dollars per token (``llama3-70b-usd-per-token``, efficiencies pinned:
    :data:`_USD_PER_TOKEN_PINNED`) is sharp in the scale-out bandwidth: the optimum (256 H200s,
    tp 2, pp 1, ZeRO-3, 35 GB/s) is three coordinates from the point where seed 0 stalls without
    the polish (pp 2, ZeRO-2, 18 GB/s), and on the 3-value scan of the bandwidths (12.5 / 50 /
    200 GB/s) its layout's best point is above the stalled one, so no scanned point restarts the
    search there.  A short bandwidth-only search from the layouts scanned within ``SCAN_SLACK``
    of the stalled point finds one below it, and the search reaches the optimum (it stops 1.0 %
    above it without)."""
    import codesign.search._local as local

    src = (PROBLEM.parent / "llama3-70b-usd-per-token.toml").read_text()
    path = tmp_path / "usd-per-token-pinned.toml"
    path.write_text(src.replace("[objective]", _USD_PER_TOKEN_PINNED + "\n[objective]", 1))
    pb = _with_tier_efficiencies(load_problem(path), _USD_PER_TOKEN_TIERS)
    ev = ExactEvaluator(pb)
    disc = Discretizer(pb, ev)
    bw = ev.values[ev.paths.index("system.tiers[1].bandwidth_gbps")]

    stuck_v = {
        "system.num_accelerators": 256.0,
        "strategy.tp": 2.0,
        "strategy.pp": 2.0,
        "strategy.cp": 1.0,
        "strategy.microbatch": 1.0,
        "strategy.recompute": "none",
        "strategy.zero": 2,
        "system.tiers[1].bandwidth_gbps": bw[1],
    }
    stuck = _grid_index(ev, stuck_v)
    best = _grid_index(
        ev,
        {
            **stuck_v,
            "strategy.pp": 1.0,
            "strategy.zero": 3,
            "system.tiers[1].bandwidth_gbps": bw[3],
        },
    )
    (cur,) = ev.keys([stuck])
    moves = disc.axis_moves(stuck)
    ks = ev.keys(moves)
    # Stalled there: no single move or whole-axis move is better.
    assert min(ev.keys(disc.neighbours(stuck, Settings().local_layouts))) >= cur
    assert min(ks) >= cur
    starts = local._bandwidth_scan_starts(disc, moves, ks, local.STALL_LAYOUTS, below=cur)
    assert starts and all(k < cur for k in ev.keys(starts))
    assert disc.layout_of(best) in {disc.layout_of(q) for q in starts}
    monkeypatch.setattr(local, "SCAN_SLACK", 0.0)
    assert local._bandwidth_scan_starts(disc, moves, ks, local.STALL_LAYOUTS, below=cur) == []
    monkeypatch.undo()
    res = optimize(pb, Settings(), seed=0)
    ex = _exhaustive(pb)
    assert res.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-9)
    assert ev.keys([best])[0][1] == pytest.approx(float(ex.best_values[0]), rel=1e-12)


_THREE_TIER_PINNED = dict(
    gemm_max=0.7849,
    gemm_half_dim=335.5,
    attention_eff=0.9048,
    hbm_eff=0.6104,
    dp_comm_eff=1.0,
    dp_overlap_eff=0.8969,
    dp_overlap_slowdown=0.04357,
    tp_overlap_eff=0.1949,
    cp_step_overhead_us=97.7,
    p2p_overlap_eff=0.07071,
    backward_factor=1.837,
)
"""The H100 preset's dense values of 2026-12-05 (the set without ``dp_comm_eff``), and its tier
efficiencies (:data:`_THREE_TIER_TIERS`), pinned so that the scenario below stays whatever
later calibrations do."""
_THREE_TIER_TIERS = (0.9575, 0.8836, 1.0)


@pytest.mark.slow
def test_stalled_search_scans_the_bandwidths_of_its_own_layout():
    """The benchmark's scaling grid of ``llama3-70b-codesign-3tier`` at 5.5e6 points (NVLink
    225 or 900 GB/s, 16 scale-out and 16 cross-building values; 100 M$ cap): seed 0 stalled at
    3,072 H100, tp 4, pp 1, ZeRO-2 on 225 / 57 / 2.5 GB/s, 3.4 % above the optimum, which is the
    same layout on 900 / 38 / 1.6 GB/s: faster NVLink paid for by slower scale-out and
    cross-building links, a move of three bandwidths at once (one, three and two grid steps)
    that no neighbour makes, and the whole-axis moves' scan leaves the point's own layout out.
    Scanning its own layout too restarts the search at the better bandwidths."""
    import codesign.search._local as local

    pb = load_problem(PROBLEM.parent / "llama3-70b-codesign-3tier.toml")
    pb = _with_tier_efficiencies(pb, _THREE_TIER_TIERS, **_THREE_TIER_PINNED).with_values(
        num_accelerators=list(range(512, 4097, 256)),
        bandwidth={
            0: np.geomspace(225, 900, 2),
            1: np.geomspace(12.5, 100, 16),
            2: np.geomspace(1.5625, 50, 16),
        },
    )
    ev = ExactEvaluator(pb)
    disc = Discretizer(pb, ev)

    bw = [ev.values[ev.paths.index(f"system.tiers[{i}].bandwidth_gbps")] for i in range(3)]
    lay_v = {
        "system.num_accelerators": 3072.0,
        "strategy.tp": 4.0,
        "strategy.pp": 1.0,
        "strategy.cp": 1.0,
        "strategy.microbatch": 1.0,
        "strategy.recompute": "none",
        "strategy.zero": 2,
    }

    def at(*js):
        return {f"system.tiers[{i}].bandwidth_gbps": bw[i][j] for i, j in enumerate(js)}

    # Grid indices: stalled at 225 / 57.4 / 2.48 GB/s, the optimum at 900 / 37.9 / 1.5625.
    stuck = _grid_index(ev, {**lay_v, **at(0, 11, 2)})
    best = _grid_index(ev, {**lay_v, **at(1, 8, 0)})
    ex = _exhaustive(pb)
    assert ev.keys([best])[0][1] == pytest.approx(float(ex.best_values[0]), rel=1e-12)
    (cur,) = ev.keys([stuck])
    assert cur[0] == 0 and cur[1] > float(ex.best_values[0]) * 1.02
    # Stalled there: no neighbour and no whole-axis move is better, and the scan of the moves'
    # layouts alone gives no start on the point's own layout.
    assert min(ev.keys(disc.neighbours(stuck, Settings().local_layouts))) >= cur
    moves = disc.axis_moves(stuck)
    ks = ev.keys(moves)
    assert min(ks) >= cur
    own = disc.layout_of(stuck)
    starts = local._bandwidth_scan_starts(disc, moves, ks, local.STALL_LAYOUTS, below=cur)
    assert own not in {disc.layout_of(q) for q in starts}
    with_own = local._bandwidth_scan_starts(
        disc, [stuck, *moves], [cur, *ks], local.STALL_LAYOUTS, below=cur
    )
    assert own in {disc.layout_of(q) for q in with_own}
    res = optimize(pb, Settings(), seed=0)
    assert res.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-9)


def test_evaluator_takes_points_in_any_index_form(problem):
    """The memoized evaluator answers the same for index tuples, lists, NumPy rows, tuples of
    NumPy integers and a generator, evaluates each distinct point once, and its sort keys
    order feasible points by value before infeasible ones by their distance."""
    ev = ExactEvaluator(problem)
    disc = Discretizer(problem, ev)
    pts = [disc.compose(i, (0, 0), ()) for i in range(min(6, len(disc.layouts)))]
    want = ev(pts)
    n = ev.num_evals
    arr = np.asarray(pts, dtype=np.int64)
    for form in (
        [list(p) for p in pts],
        arr,
        [tuple(r) for r in arr],
        (p for p in pts),
        pts + pts,
    ):
        got = ev(form)
        np.testing.assert_array_equal(got[: len(pts)], want)
    assert ev.num_evals == n  # nothing evaluated twice
    keys = ev.keys(arr)
    for p, k, v in zip(pts, keys, want, strict=True):
        assert k == ((0, v) if ev.excess[p] == 0.0 else (1, ev.excess[p]))
