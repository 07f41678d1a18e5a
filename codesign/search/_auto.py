"""Choosing the method, and the time-cost Pareto front over a budget range.

A relaxed search costs a compile of the model's gradient (seconds to tens of seconds on a
laptop CPU, once per problem structure; the on-disk cache of ``codesign optimize`` skips it
on a repeat run) and then well under a second.  The exhaustive sweep costs a smaller
compile and time proportional to the grid.  :func:`choose_method` compares the two
estimates (measured on a 2-core x86 CPU, ``experiments/bench_codesign.py``): grids that sweep
faster than the relaxed search compiles are swept, which is also exact.  :func:`solve` runs
the chosen method and returns an :class:`~codesign.search.OptimizeResult` either way.

:func:`pareto` solves one problem under a range of capex budgets (the time-to-train vs
cost-to-train front): every budget is new data for the same compiled programs.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from codesign.search._anneal import Settings
from codesign.search._distributed import distributed_sweep
from codesign.search._optimize import OptimizeResult, optimize
from codesign.search._problem import Problem
from codesign.specs import SpecError
from codesign.step import evaluate

__all__ = ["METHODS", "choose_method", "solve", "pareto", "SWEEP_POINTS_PER_S", "RELAXED_COLD_S"]

METHODS = ("auto", "relaxed", "sweep")
_DEFAULT = Settings()

SWEEP_POINTS_PER_S = 15e6
"""Exact points per second per CPU device of the sweep, float64 (26-32e6 measured warm on the
suite's large grids by ``experiments/bench_codesign.py`` on a 2-core CPU, 2026-12-06; half of
that for a loaded machine; ``codesign`` gives JAX one CPU device per core)."""
SWEEP_COMPILE_S = 5.0
"""The sweep's compile, seconds (3-6 s measured)."""
RELAXED_COLD_S = 25.0
"""The relaxed search's cold start, seconds: compile of the gradient program (with
``Settings.fast_compile``, as ``codesign optimize`` runs it), of the exact evaluator, and the
search itself (measured 20-24 s end to end on a 2-core CPU, 2026-12-06; 21-28 s before)."""


def estimate_sweep_s(problem: Problem, devices: int | None = None) -> float:
    """Seconds the exhaustive sweep of ``problem`` should take here, compile included."""
    d = len(jax.devices()) if devices is None else devices
    return SWEEP_COMPILE_S + problem.grid_size() / (SWEEP_POINTS_PER_S * max(d, 1))


def choose_method(problem: Problem, method: str = "auto") -> tuple[str, str]:
    """``(method, reason)``: ``"sweep"`` when the grid sweeps faster than the relaxed search
    starts cold (and always for ``method="sweep"``), else ``"relaxed"``."""
    if method not in METHODS:
        raise SpecError("method", method, f"one of {list(METHODS)}")
    est = estimate_sweep_s(problem)
    n = problem.grid_size()
    if method == "sweep":
        return "sweep", f"exhaustive sweep of {n:,} points (asked for)"
    if method == "relaxed":
        return "relaxed", "relaxed search + exact rounding and local search (asked for)"
    if est <= RELAXED_COLD_S:
        return "sweep", (
            f"exhaustive sweep: the grid of {n:,} points sweeps in about {est:.0f} s, no longer "
            f"than the relaxed search takes to compile (~{RELAXED_COLD_S:.0f} s); the answer is "
            "the exact optimum (--method relaxed forces the gradient search)"
        )
    return "relaxed", (
        f"relaxed search: the grid of {n:,} points would take about {est:.0f} s to sweep "
        "(--method sweep forces the exhaustive sweep)"
    )


def _from_sweep(problem: Problem, res, wall: float) -> OptimizeResult:
    if len(res.best_values):
        point = res.best()
        cfg = res.config(0, problem.cfg)
        report = evaluate(*cfg.specs())
        val = float(res.best_values[0])
    else:
        point, cfg, report, val = {}, None, None, math.inf
    empty = np.zeros((0, 0))
    return OptimizeResult(
        problem=problem.name,
        objective=problem.objective,
        exact_objective=val,
        relaxed_objective=math.nan,
        gap=math.nan,
        num_exact_evals=res.num_points,
        config=cfg,
        report=report,
        point=point,
        relaxed_point={},
        history=empty,
        objective_history=empty,
        violation_history=empty,
        best_start=-1,
        rounded_objective=val,
        exact_trace=[(res.num_points, val)],
        wall_s=wall,
        relaxed_wall_s=0.0,
        exact_wall_s=wall,
        method="sweep",
    )


def solve(
    problem: Problem,
    settings: Settings = _DEFAULT,
    seed: int = 0,
    method: str = "auto",
    progress: bool = False,
    distributed: bool = False,
) -> OptimizeResult:
    """The best design of ``problem`` by the method :func:`choose_method` picks."""
    how, _ = choose_method(problem, method)
    if how == "relaxed":
        return optimize(problem, settings, seed=seed, progress=progress, distributed=distributed)
    t0 = time.perf_counter()
    res = distributed_sweep(problem, top_k=1, progress=progress, distributed=distributed)
    return _from_sweep(problem, res, time.perf_counter() - t0)


@dataclasses.dataclass
class ParetoPoint:
    """One budget of :func:`pareto`: the design minimizing time to train under it."""

    capex_max_usd: float
    time_to_train_days: float
    cost_to_train_usd: float
    capex_usd: float
    result: OptimizeResult


def pareto(
    problem: Problem,
    budgets,
    settings: Settings = _DEFAULT,
    seed: int = 0,
    method: str = "auto",
    progress: bool = False,
) -> list[ParetoPoint]:
    """The time-cost front: for each capex budget, the design with the least time to train
    (``problem``'s objective is replaced by ``time_to_train``), with its cost to train.
    Points dominated by a cheaper budget's design are kept (the caller sees the whole
    curve); :func:`codesign.search._auto.front` keeps the non-dominated ones."""
    out = []
    for b in budgets:
        pb = problem.with_values(capex_max_usd=float(b), objective="time_to_train")
        r = solve(pb, settings, seed=seed, method=method, progress=progress)
        rep = r.report
        out.append(
            ParetoPoint(
                capex_max_usd=float(b),
                time_to_train_days=float(rep.cost["time_to_train_days"]) if rep else math.inf,
                cost_to_train_usd=float(rep.cost["cost_to_train_usd"]) if rep else math.inf,
                capex_usd=float(rep.cost["capex_usd"]) if rep else math.inf,
                result=r,
            )
        )
    return out


def front(points: list[ParetoPoint]) -> list[ParetoPoint]:
    """The non-dominated points (no other is both faster and cheaper to train)."""
    keep = []
    for p in points:
        dominated = any(
            q.time_to_train_days <= p.time_to_train_days
            and q.cost_to_train_usd <= p.cost_to_train_usd
            and (
                q.time_to_train_days < p.time_to_train_days
                or q.cost_to_train_usd < p.cost_to_train_usd
            )
            for q in points
        )
        if not dominated and math.isfinite(p.time_to_train_days):
            keep.append(p)
    return keep
