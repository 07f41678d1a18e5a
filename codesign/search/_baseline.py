"""Random search over the valid points of a grid: the equal-budget baseline of the optimizer."""

from __future__ import annotations

import numpy as np

from codesign.search._evaluator import ExactEvaluator
from codesign.search._problem import Problem

__all__ = ["valid_points", "random_search"]


def valid_points(problem: Problem, ev: ExactEvaluator | None = None) -> np.ndarray:
    """Index rows of every valid point of the grid's non-bandwidth axes (bandwidths never
    affect validity), as an ``(M, num_non_bandwidth_axes)`` array."""
    ev = ev or ExactEvaluator(problem)
    sub = [a for a, p in enumerate(ev.paths) if not p.startswith("system.tiers[")]
    sub_shape = [ev.shape[a] for a in sub]
    grid = np.indices(sub_shape).reshape(len(sub), -1).T if sub else np.zeros((1, 0), np.int64)
    full = np.zeros((grid.shape[0], len(ev.paths)), dtype=np.int64)
    full[:, sub] = grid
    ok = np.zeros(grid.shape[0], bool)
    for i in range(0, grid.shape[0], 1 << 16):
        ok[i : i + (1 << 16)] = ev.is_valid(full[i : i + (1 << 16)])
    return grid[ok]


def random_search(
    problem: Problem,
    budget: int,
    seed: int = 0,
    ev: ExactEvaluator | None = None,
    valid: np.ndarray | None = None,
    trace: bool = False,
):
    """Best exact objective among ``budget`` points drawn uniformly without replacement from
    the grid's valid points (seeded).  Returns ``(value, point)``, and with ``trace`` also the
    best-so-far objective after each draw."""
    ev = ev or ExactEvaluator(problem)
    valid = valid_points(problem, ev) if valid is None else valid
    sub = [a for a, p in enumerate(ev.paths) if not p.startswith("system.tiers[")]
    bw = [a for a, p in enumerate(ev.paths) if p.startswith("system.tiers[")]
    n_bw = int(np.prod([ev.shape[a] for a in bw])) if bw else 1
    total = valid.shape[0] * n_bw
    rng = np.random.default_rng(seed)
    k = min(budget, total)
    flat = rng.choice(total, size=k, replace=False) if total > 4 * k else rng.permutation(total)[:k]
    rows = valid[flat // n_bw]
    pts = np.zeros((k, len(ev.paths)), dtype=np.int64)
    pts[:, sub] = rows
    if bw:
        pts[:, bw] = np.stack(np.unravel_index(flat % n_bw, [ev.shape[a] for a in bw]), axis=1)
    fresh = ExactEvaluator(problem)  # its own memo and count: the budget is exact evaluations
    vals = fresh([tuple(p) for p in pts])
    j = int(np.argmin(vals))
    if trace:
        return float(vals[j]), fresh.point(tuple(pts[j])), np.minimum.accumulate(vals)
    return float(vals[j]), fresh.point(tuple(pts[j]))
