"""Rounding a relaxed design onto the valid layouts of the grid, with exact evaluation.

**Rounding onto valid layouts.**  A *layout* is a value of every axis that decides
validity (accelerator count, tp, pp, cp, ep, microbatch, interleave; ``dp`` is derived
as ``N / (tp pp cp)``).  The valid layouts are enumerated once on the host (the sweep's
rules: heads by tp, a stage layout for pp and interleave, batch by dp x microbatch, experts
by ep).  For each of the best ``top_starts`` starts (the best of every
combination first), the ``nearest_layouts`` valid layouts nearest to its relaxed point in
log2 distance, with its categorical combination (and every combination on the two
nearest), times the grid bandwidths bracketing its relaxed bandwidths, are evaluated with
the **exact** model (memory fit, capex and power checked exactly).  This is the
power-of-two neighbourhood of the relaxed optimum restricted to valid points; it also
reaches non-power-of-two values (pp = 3, 7, 9 ... when the grid lists them).
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np

from codesign.search._evaluator import ExactEvaluator
from codesign.search._problem import LOG_FLOOR, Problem
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES

__all__ = ["Discretizer", "bracket"]

_CATEGORICAL = ("strategy.recompute", "strategy.zero", "system.platform", "strategy.placement")
_ZKEY = {
    "system.num_accelerators": "n",
    "strategy.tp": "tp",
    "strategy.pp": "pp",
    "strategy.cp": "cp",
    "strategy.ep": "ep",
    "strategy.microbatch": "mb",
    "strategy.interleave": "v",
    "system.tiers[0].domain": "dom",
}


def bracket(values: list, x: float, radius: int = 0) -> list[int]:
    """Indices of the grid values bracketing ``x`` in log2 (``radius`` more on each side)."""
    v = np.log2(np.maximum(np.asarray(values, dtype=float), LOG_FLOOR))
    xv = math.log2(max(x, LOG_FLOOR))
    tol = 1e-6
    below = np.nonzero(v <= xv + tol)[0]
    above = np.nonzero(v >= xv - tol)[0]
    lo = int(below[-1]) if len(below) else 0
    hi = int(above[0]) if len(above) else len(values) - 1
    return list(range(max(0, lo - radius), min(len(values), hi + radius + 1)))


_STEPS2 = (-2, -1, 1, 2)
_STEPS1 = (-1, 1)


def _tuple_getter(axes: list[int]):
    """``point -> tuple(point[a] for a in axes)``, as one C-level call where it can be."""
    if len(axes) > 1:
        return operator.itemgetter(*axes)
    if len(axes) == 1:
        a = axes[0]
        return lambda point: (point[a],)
    return lambda point: ()


class Discretizer:
    """The grid of a problem split into its parts: the *layout* axes (accelerator count and
    the numeric strategy axes, which decide validity), the categorical axes (recompute,
    ZeRO) and the bandwidth axes (always valid).  Valid layouts are enumerated once on the
    host (``valid_mask`` of the sweep), with their log2 coordinates for nearest-layout
    queries.  Points are index tuples over ``problem.exhaustive_axes()``."""

    def __init__(self, problem: Problem, ev: ExactEvaluator):
        self.problem, self.ev = problem, ev
        paths = ev.paths
        self.layout_axes = [a for a, p in enumerate(paths) if p in _ZKEY]
        self.cat_axes = [a for a, p in enumerate(paths) if p in _CATEGORICAL]
        self.all_cats = list(itertools.product(*[range(ev.shape[a]) for a in self.cat_axes]))
        """Every categorical combination (recompute, ZeRO, platform, placement) as index tuples."""
        cont = list(problem.continuous_paths)
        self.bw_axes = [a for a, p in enumerate(paths) if p in cont]
        """The continuous hardware axes (bandwidths, latencies, HBM...): always valid."""
        self.bw_tier = [cont.index(paths[a]) for a in self.bw_axes]
        """Position of each continuous axis in the relaxed ``z["hw"]`` vector."""
        shape = [ev.shape[a] for a in self.layout_axes]
        grid = np.indices(shape).reshape(len(shape), -1).T if shape else np.zeros((1, 0), np.int64)
        full = np.zeros((grid.shape[0], len(paths)), np.int64)
        full[:, self.layout_axes] = grid
        ok = np.zeros(grid.shape[0], bool)
        for i in range(0, grid.shape[0], 1 << 16):
            ok[i : i + (1 << 16)] = ev.is_valid(full[i : i + (1 << 16)])
        self.layouts = grid[ok]
        """(M, num_layout_axes) index rows of the valid layouts."""
        logs = [np.log2(np.asarray(ev.values[a], dtype=float)) for a in self.layout_axes]
        self.coords = (
            np.stack([logs[j][self.layouts[:, j]] for j in range(len(logs))], axis=1)
            if logs
            else np.zeros((len(self.layouts), 0))
        )
        self._rows = [tuple(int(i) for i in r) for r in self.layouts]
        self._index = {r: i for i, r in enumerate(self._rows)}
        self._near: dict[int, np.ndarray] = {}
        self._bw_memo: dict[tuple, list] = {}
        self._nb_memo: dict[tuple, list] = {}
        # compose() as one C-level gather: a point is (layout row, categories, bandwidths, 0)
        # read at each axis's position (axes of none of the three stay at index 0).
        nl, nc = len(self.layout_axes), len(self.cat_axes)
        pos = {a: j for j, a in enumerate(self.layout_axes)}
        pos.update({a: nl + j for j, a in enumerate(self.cat_axes)})
        pos.update({a: nl + nc + j for j, a in enumerate(self.bw_axes)})
        zero = nl + nc + len(self.bw_axes)
        self._gather = _tuple_getter([pos.get(a, zero) for a in range(len(paths))])
        self._lay_of = _tuple_getter(self.layout_axes)
        self._cat_of = _tuple_getter(self.cat_axes)
        self._bw_of = _tuple_getter(self.bw_axes)

    def layout_of(self, point: tuple) -> int | None:
        return self._index.get(self._lay_of(point))

    def nearest(self, coord: np.ndarray, k: int) -> np.ndarray:
        """Indices of the ``k`` valid layouts nearest to log2 coordinates ``coord`` (L1)."""
        if len(self.layouts) == 0:
            return np.zeros(0, np.int64)
        d = np.abs(self.coords - coord[None, :]).sum(axis=1)
        k = min(k, len(d))
        idx = np.argpartition(d, k - 1)[:k]
        return idx[np.argsort(d[idx], kind="stable")]

    def near_layouts(self, layout: int, k: int) -> np.ndarray:
        if layout not in self._near:
            self._near[layout] = self.nearest(self.coords[layout], k + 1)[1:]
        return self._near[layout]

    def compose(self, layout: int, cat: tuple, bw: tuple) -> tuple:
        """The index tuple of a valid layout (its index), a categorical index tuple and a
        bandwidth index tuple."""
        return self._gather((*self._rows[layout], *cat, *bw, 0))

    def split(self, point: tuple):
        return (self._index.get(self._lay_of(point)), self._cat_of(point), self._bw_of(point))

    def relaxed_coord(self, z: dict) -> np.ndarray:
        return np.asarray([float(z[_ZKEY[self.ev.paths[a]]]) for a in self.layout_axes])

    def cat_index(self, combo: tuple | None, weights: dict) -> tuple:
        """Index tuple over the categorical axes: recompute and ZeRO from a start's fixed
        (recompute, zero) ``combo`` (else its heaviest allowed option), the platform and
        the placement from its heaviest weight."""
        out = []
        for a in self.cat_axes:
            name = self.ev.paths[a]
            vals = self.ev.values[a]
            if name in ("strategy.recompute", "strategy.zero"):
                j = 0 if name == "strategy.recompute" else 1
                if combo:
                    out.append(vals.index(combo[j]))
                    continue
                opts = RECOMPUTE_MODES if j == 0 else ZERO_STAGES
                w = weights["recompute" if j == 0 else "zero"]
                out.append(int(np.argmax([w[opts.index(v)] for v in vals])))
            else:
                out.append(
                    int(
                        np.argmax(weights["platform" if name == "system.platform" else "placement"])
                    )
                )
        return tuple(out)

    def round(
        self, z: dict, cats: list[tuple], k: int, radius: int = 0, k_all: int = 2
    ) -> list[tuple]:
        """Candidates around one relaxed point: the ``k`` nearest valid layouts x the given
        categorical index tuples x the bracketing bandwidths (+- ``radius`` grid steps), and
        every categorical combination on the ``k_all`` nearest layouts."""
        lays = self.nearest(self.relaxed_coord(z), k)
        bws = list(
            itertools.product(
                *[
                    bracket(self.ev.values[a], float(np.asarray(z["hw"])[t]), radius)
                    for a, t in zip(self.bw_axes, self.bw_tier, strict=True)
                ]
            )
        )
        out = [self.compose(int(lay), c, b) for lay in lays for c in cats for b in bws]
        out += [
            self.compose(int(lay), c, b) for lay in lays[:k_all] for c in self.all_cats for b in bws
        ]
        return out

    def axis_moves(self, point: tuple, pairs: bool = True) -> list[tuple]:
        """Points whose layout differs from ``point``'s along one layout axis, to any of its
        values, or (``pairs``) along two axes at once, to any pair of values, with every
        categorical combination (recompute, ZeRO, platform, placement); each with the
        point's bandwidths and again with the cheapest ones (index 0 on every bandwidth
        axis).  These moves cross gaps that single steps cannot (a constraint that excludes
        the layouts in between, or a pipeline depth that only pays off with another
        microbatch or accelerator count; under a capex cap, a larger cluster that is only
        affordable on a cheaper fabric)."""
        lay, cat, bw = self.split(point)
        if lay is None:
            return []
        out = self._layout_moves(lay, bw, pairs)
        low = tuple(0 for _ in bw)
        if low != tuple(bw):
            out += self._layout_moves(lay, low, pairs)
        return out

    def _layout_moves(self, lay: int, bw: tuple, pairs: bool) -> list[tuple]:
        row = tuple(int(i) for i in self.layouts[lay])
        sizes = [self.ev.shape[a] for a in self.layout_axes]
        cats = self.all_cats
        out = []
        seen = {row}

        def add(r):
            if r not in seen:
                seen.add(r)
                j = self._index.get(r)
                if j is not None:
                    out.extend(self.compose(j, c, bw) for c in cats)

        for i, n in enumerate(sizes):
            for v in range(n):
                add(row[:i] + (v,) + row[i + 1 :])
        if pairs:
            for i, j in itertools.combinations(range(len(sizes)), 2):
                for vi in range(sizes[i]):
                    for vj in range(sizes[j]):
                        r = list(row)
                        r[i], r[j] = vi, vj
                        add(tuple(r))
        return out

    def neighbours(
        self, point: tuple, k_layouts: int, bandwidths_only: bool = False
    ) -> list[tuple]:
        """The local-search neighbourhood of a point (see the module docstring);
        ``bandwidths_only``: only its moves of the bandwidth (and hardware) axes, with the
        point's layout and categorical combination.  Memoized (the searches from several
        starts walk through the same points): the list is shared, not to be changed."""
        key = (point, k_layouts, bandwidths_only)
        hit = self._nb_memo.get(key)
        if hit is None:
            hit = self._nb_memo[key] = self._neighbours(point, k_layouts, bandwidths_only)
        return hit

    def _neighbours(self, point: tuple, k_layouts: int, bandwidths_only: bool) -> list[tuple]:
        lay, cat, bw = self.split(point)
        near = self.near_layouts(lay, k_layouts) if lay is not None else np.zeros(0, np.int64)
        all_cats = self.all_cats
        bw_moves = self._bw_moves

        out = []
        if lay is not None and bandwidths_only:
            out += [self.compose(lay, cat, b) for b in bw_moves(bw, _STEPS2, _STEPS2)]
        elif lay is not None:
            few = near[: max(1, k_layouts // 3)]
            out += [self.compose(int(m), cat, bw) for m in near]
            out += [self.compose(lay, c, bw) for c in all_cats if c != cat]
            out += [self.compose(int(m), c, bw) for m in few for c in all_cats if c != cat]
            out += [self.compose(lay, cat, b) for b in bw_moves(bw, _STEPS2, _STEPS2)]
            out += [self.compose(int(m), cat, b) for m in few for b in bw_moves(bw, _STEPS1, ())]
        return out

    def _bw_moves(self, bw: tuple, steps_single: tuple, steps_pair: tuple) -> list[tuple]:
        """Bandwidth index tuples one move from ``bw``: each axis by ``steps_single`` (and by
        an eighth and a quarter of the axis), two axes at once by ``steps_pair`` (memoized)."""
        key = (bw, steps_single, steps_pair)
        hit = self._bw_memo.get(key)
        if hit is not None:
            return hit
        nbw = [self.ev.shape[a] for a in self.bw_axes]

        def scaled(steps, n):
            # Index steps plus the same moves at the scale of a coarse grid (an eighth and a
            # quarter of the axis), so that refining a bandwidth axis does not shrink the
            # neighbourhood in log-bandwidth (a fine grid's single steps are too small to
            # trade bandwidth capex against a larger layout).
            out = set(steps)
            if steps:
                for c in (max(1, round(n / 8)), max(1, round(n / 4))):
                    out |= {c, -c}
            return sorted(out)

        out = []
        for j in range(len(bw)):
            for d in scaled(steps_single, nbw[j]):
                if 0 <= bw[j] + d < nbw[j]:
                    q = list(bw)
                    q[j] += d
                    out.append(tuple(q))
        for i, j in itertools.combinations(range(len(bw)), 2):
            for di in steps_pair:
                for dj in steps_pair:
                    if 0 <= bw[i] + di < nbw[i] and 0 <= bw[j] + dj < nbw[j]:
                        q = list(bw)
                        q[i] += di
                        q[j] += dj
                        out.append(tuple(q))
        self._bw_memo[key] = out
        return out
