"""Problem files: modes, grids, errors; hardware-only (LIBRA) optimization on a cross-building tier."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from codesign.search import Settings, distributed_sweep, load_problem, load_problem_dict, optimize
from codesign.specs import SpecError

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = sorted((ROOT / "experiments" / "problems").glob("*.toml"))

BASE = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 512, "tokens": 1e12},
    "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
}

THREE_TIERS = [
    {"preset": "nvlink4"},
    {"preset": "ib-ndr-400", "domain": 32},
    {"preset": "cross-building", "domain": 0},
]


@pytest.mark.parametrize("path", PROBLEMS, ids=[p.stem for p in PROBLEMS])
def test_example_problems_load(path):
    pb = load_problem(path)
    assert pb.grid_size() >= 1 and pb.title
    axes = pb.exhaustive_axes()
    # Continuous hardware axes (bandwidths, latencies, HBM...) last (cheap axes innermost),
    # N first; a searched scale-up domain is a layout axis (early).
    names = list(axes)
    bw = [i for i, k in enumerate(names) if k in pb.continuous_paths]
    assert all(k in pb.continuous_paths for k in names if k.endswith("bandwidth_gbps"))
    assert bw == list(range(len(names) - len(bw), len(names)))
    if pb.free_n:
        assert names[0] == "system.num_accelerators"
        assert float(pb.cfg.system.num_accelerators) == max(axes["system.num_accelerators"])
    assert float(pb.cfg.system.tiers[-1].domain) >= float(pb.cfg.system.num_accelerators)


def test_modes_of_the_example_problems():
    modes = {p.stem: load_problem(p).mode for p in PROBLEMS}
    assert "hardware" in modes.values()
    tiers = {p.stem: load_problem(p).num_tiers for p in PROBLEMS}
    assert {2, 3, 4} <= set(tiers.values())
    names = {p.stem: load_problem(p).cfg.names["tiers"] for p in PROBLEMS}
    assert any("cross-building" in n for n in names.values())


def test_ranges_and_fixed_values():
    doc = {
        **BASE,
        "search": {
            "num_accelerators": {"min": 16, "max": 64, "step": 16},
            "tp": [1, 2],
            "pp": [4],
            "recompute": ["full"],
            "tiers": [
                {"index": 1, "bandwidth_gbps": {"min": 10, "max": 80, "num": 4}},
                {"index": 0, "bandwidth_gbps": [300]},
            ],
        },
    }
    pb = load_problem_dict(doc)
    assert pb.hardware_values["system.num_accelerators"] == (16.0, 32.0, 48.0, 64.0)
    assert pb.hardware_values["system.tiers[1].bandwidth_gbps"] == (10.0, 20.0, 40.0, 80.0)
    # One value fixes the dimension in the base configuration (no axis).
    assert "system.tiers[0].bandwidth_gbps" not in pb.hardware_values
    assert float(pb.cfg.system.tiers[0].bandwidth_gbps) == 300.0
    assert float(pb.cfg.strategy.pp) == 4.0 and float(pb.cfg.strategy.recompute[2]) == 1.0
    axes = pb.exhaustive_axes()
    assert "strategy.recompute" not in axes and axes["strategy.pp"] == [4.0]
    assert pb.grid_size() == 4 * 2 * 1 * 1 * 5 * 4 * 4  # N, tp, pp, cp, microbatch, zero, bw
    # with_values: a new grid and budget on the same structure.
    pb2 = pb.with_values(tp=[1, 2, 4, 8], capex_max_usd=1e6, bandwidth={1: [10, 20]})
    assert pb2.grid_size() == 4 * 4 * 1 * 1 * 5 * 4 * 2 and pb2.capex_max_usd == 1e6


@pytest.mark.parametrize(
    "search, field",
    [
        ({"mode": "strategy", "num_accelerators": [32, 64]}, "search.mode"),
        (
            {"mode": "hardware", "tp": [1, 2], "tiers": [{"index": 1, "bandwidth_gbps": [10, 20]}]},
            "search.tp",
        ),
        ({"mode": "hardware"}, "search.mode"),
        ({"mode": "both"}, "search.mode"),
        ({"ep": [1, 2]}, "search.ep"),
        ({"tiers": [{"index": 5, "bandwidth_gbps": [10, 20]}]}, "search.tiers.index"),
        (
            {"tiers": [{"index": 1, "bandwidth_gbps": {"min": 10, "max": 5, "num": 3}}]},
            "search.tiers[1].bandwidth_gbps",
        ),
        (
            {"tiers": [{"index": 1, "bandwidth_gbps": {"min": 10, "max": 50}}]},
            "search.tiers[1].bandwidth_gbps.num",
        ),
        ({"bandwidth": [1]}, "search.bandwidth"),
    ],
)
def test_bad_problems_name_the_field(search, field):
    with pytest.raises(SpecError) as e:
        load_problem_dict({**BASE, "search": search})
    assert e.value.field == field


def test_strategy_mode_and_hardware_mode():
    pb = load_problem_dict({**BASE, "search": {"mode": "strategy", "tp": [1, 2, 4]}})
    assert pb.mode == "strategy" and not pb.hardware_values
    doc = {
        **BASE,
        "strategy": {"tp": 2, "pp": 4, "zero": 3},
        "search": {"mode": "hardware", "tiers": [{"index": 1, "bandwidth_gbps": [10, 20, 40]}]},
    }
    pb = load_problem_dict(doc)
    assert list(pb.exhaustive_axes()) == ["system.tiers[1].bandwidth_gbps"]
    assert float(pb.cfg.strategy.dp) == 8.0 and float(pb.cfg.strategy.zero[3]) == 1.0
    with pytest.raises(SpecError):  # tp pp cp must divide N
        load_problem_dict({**doc, "strategy": {"tp": 3, "pp": 4}})


@pytest.mark.slow
def test_hardware_mode_reaches_the_libra_optimum():
    """Bandwidth of three tiers (NVLink, a scale-out tier, cross-building) for a fixed strategy
    under a capex budget: the optimizer finds the exhaustive optimum of the grid."""
    doc = {
        **BASE,
        "system": {**BASE["system"], "tiers": THREE_TIERS},
        "strategy": {"tp": 4, "pp": 2, "recompute": "selective", "zero": 1},
        "objective": {"minimize": "step_time"},
        "constraints": {"capex_max_usd": 2.45e6},
        "search": {
            "mode": "hardware",
            "tiers": [
                {"index": 0, "bandwidth_gbps": {"min": 50, "max": 900, "num": 9}},
                {"index": 1, "bandwidth_gbps": {"min": 6.25, "max": 100, "num": 9}},
                {"index": 2, "bandwidth_gbps": {"min": 1.5625, "max": 50, "num": 11}},
            ],
        },
    }
    pb = load_problem_dict(doc)
    assert pb.cfg.names["tiers"][2] == "cross-building" and pb.grid_size() == 9 * 9 * 11
    ex = distributed_sweep(pb, top_k=1, progress=False)
    assert 0 < ex.num_feasible < ex.num_points  # the budget binds
    res = optimize(pb, Settings(steps=150, starts=4), seed=0)
    assert res.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-12)
    assert res.num_exact_evals < pb.grid_size() / 4
    assert math.isfinite(res.relaxed_objective) and abs(res.gap) < 0.05
    assert float(res.report.cost["capex_usd"]) <= 2.45e6
