"""Optimizer and discretization: reaches the enumerated optimum, deterministic, valid and feasible."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import codesign as cd
from codesign.optimize import OptimizeResult, Settings, neighbourhood_axes, optimize
from codesign.problem import load_problem
from codesign.specs import check_all
from codesign.sweep import sweep

PROBLEM = Path(__file__).resolve().parent.parent / "experiments" / "problems" / "llama3-8b-64xh100-step.toml"
SETTINGS = Settings(steps=200, starts=6)


@pytest.fixture(scope="module")
def problem():
    return load_problem(PROBLEM)


@pytest.fixture(scope="module")
def result(problem) -> OptimizeResult:
    return optimize(problem, SETTINGS, seed=0)


def _exhaustive(pb):
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


def test_reaches_exhaustive_optimum(problem, result):
    assert problem.grid_size() == 4 * 6 * 4 * 3 * 4
    ex = _exhaustive(problem)
    assert ex.num_feasible > 0
    assert result.exact_objective == pytest.approx(float(ex.best_values[0]), rel=1e-9)
    assert result.num_exact_evals < problem.grid_size()
    assert math.isfinite(result.relaxed_objective) and abs(result.gap) < 0.1


def test_same_seed_same_result(problem, result):
    again = optimize(problem, SETTINGS, seed=0)
    np.testing.assert_array_equal(again.history, result.history)
    assert again.point == result.point and again.exact_objective == result.exact_objective
    other = optimize(problem, SETTINGS, seed=1)
    assert not np.array_equal(other.history, result.history)


def test_discretization_valid_and_feasible(problem, result):
    _assert_valid_feasible(problem, result)
    # A harder variant with the same structure (no recompilation): 40 GB of HBM.
    cfg = problem.cfg
    small = dataclasses.replace(cfg.system, accelerator=dataclasses.replace(cfg.system.accelerator, hbm_gb=40.0))
    pb40 = dataclasses.replace(problem, cfg=dataclasses.replace(cfg, system=small))
    res = optimize(pb40, SETTINGS, seed=0)
    _assert_valid_feasible(pb40, res)
    assert float(res.report.memory_gb["total"]) <= 40.0
    ex = _exhaustive(pb40)
    assert res.exact_objective >= float(ex.best_values[0]) * (1 - 1e-12)


def test_neighbourhood_is_power_of_two_ring(problem):
    z = {"tp": 1.58, "pp": 0.0, "cp": 0.0, "mb": 2.0}  # tp ~ 3, pp = 1, mb = 4
    axes = neighbourhood_axes(problem, [z], radius=1)
    assert axes["strategy.tp"] == [1.0, 2.0, 4.0, 8.0]
    assert axes["strategy.pp"] == [1.0, 2.0]
    assert axes["strategy.microbatch"] == [2.0, 4.0, 8.0]
    assert axes["strategy.cp"] == [1.0]
    assert axes["strategy.recompute"] == list(problem.strategy_values["recompute"])
