"""Exact local search on the grid, and the bandwidth polish of its results.

**Exact local search.**  From the best rounded points on ``local_starts`` distinct
layouts (and the best rounding of the best start's own layout), a best-improvement
search on the grid: the nearest valid layouts, every other categorical combination (also
on the nearest few layouts), one or two grid steps of one bandwidth (and steps of an
eighth and a quarter of its axis, so that a refined bandwidth grid keeps moves as large
as a coarse one's) or one step of two, and layout-bandwidth pairs are evaluated exactly
in one batch; move to the best, repeat
until none improves.  Infeasible points rank after feasible ones by how far they exceed
memory, budget and power, so a rounding just over the budget walks into the feasible set.
Only valid points count as exact evaluations (``num_exact_evals``); results are memoized.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from codesign.search import _relax as relax
from codesign.search._anneal import Settings, relaxed_search
from codesign.search._discretize import Discretizer, bracket

__all__ = ["local_search", "polish_bandwidths"]


def local_search(
    disc: Discretizer,
    start: tuple,
    k_layouts: int = 12,
    max_iters: int = 100,
    trace=None,
    progress=None,
):
    """Best-improvement search on the grid from ``start``; returns ``(point, value, iters)``.

    Points compare by :meth:`ExactEvaluator.keys`, so a search that starts infeasible (a
    rounding just over the budget) first walks into the feasible set."""
    ev = disc.ev
    cur = tuple(start)
    cur_k = ev.keys([cur])[0]
    it = 0
    for it in range(1, max_iters + 1):  # noqa: B007
        nb = disc.neighbours(cur, k_layouts)
        if not nb:
            break
        ks = ev.keys(nb)
        j = min(range(len(nb)), key=lambda i: ks[i])
        improved = ks[j][0] < cur_k[0] or (
            ks[j][0] == cur_k[0] and ks[j][1] < cur_k[1] * (1.0 - 1e-12)
        )
        if improved:
            cur, cur_k = nb[j], ks[j]
        cur_v = cur_k[1] if cur_k[0] == 0 else math.inf
        if trace is not None:
            trace.append((ev.num_evals, min(cur_v, trace[-1][1]) if trace else cur_v))
        if progress is not None:
            progress(it, cur_v)
        if not improved:
            break
    return cur, (cur_k[1] if cur_k[0] == 0 else math.inf), it


def polish_bandwidths(
    disc: Discretizer, point: tuple, settings: Settings, seed: int = 0
) -> list[tuple]:
    """Candidates from a relaxed search over the free continuous hardware knobs only
    (bandwidths, latencies, HBM...), with the layout, platform and strategy of ``point`` fixed (a hardware-mode sub-problem): the grid values bracketing the
    relaxed bandwidths, +- one step.  Trading bandwidth between tiers along a budget is a
    continuous problem that the gradient solves at any grid resolution, where a grid search
    would need many steps of several axes at once."""
    if not disc.bw_axes or settings.polish_steps <= 0:
        return []
    ev = disc.ev
    vals = ev.point(point)
    changes = {}
    sv = disc.problem.strategy_values
    for k in ("tp", "pp", "cp", "ep", "microbatch", "interleave", "recompute", "zero"):
        changes[k] = [vals[f"strategy.{k}"]] if f"strategy.{k}" in vals else list(sv[k][:1])
    n = vals.get("system.num_accelerators", float(disc.problem.cfg.system.num_accelerators))
    if "system.platform" in vals:
        changes["platforms"] = [vals["system.platform"]]
    if "strategy.placement" in vals:
        changes["placements"] = [vals["strategy.placement"]]
    if "system.tiers[0].domain" in vals:
        changes["hardware"] = {"system.tiers[0].domain": [vals["system.tiers[0].domain"]]}
    sub = disc.problem.with_values(num_accelerators=[n], mode="hardware", **changes)
    sub_settings = dataclasses.replace(
        settings,
        steps=settings.polish_steps,
        starts=settings.polish_starts,
        segments=1,
        enumerate_categorical=True,
    )
    rs = relaxed_search(sub, sub_settings, seed=seed, space=relax.space_of(sub, fold_units=False))
    ok = np.asarray(rs["violation"]) <= 1e-3
    score = np.where(ok, np.asarray(rs["objective"]), np.inf)
    k = int(np.argmin(score)) if np.isfinite(score).any() else int(np.argmin(rs["loss"]))
    bw = np.asarray(rs["z"]["hw"][k])
    lay, cat, _ = disc.split(point)
    brackets = [
        bracket(ev.values[a], float(bw[t]), 1)
        for a, t in zip(disc.bw_axes, disc.bw_tier, strict=True)
    ]
    return [disc.compose(lay, cat, b) for b in itertools.product(*brackets)]
