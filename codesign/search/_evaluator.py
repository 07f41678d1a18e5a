"""The exact evaluator: one compiled point function that the sweep and the optimizer share.

:func:`exact_point` is the whole exact verdict on one configuration, traced: the step model
with :data:`~codesign.smoothing.EXACT` smoothing, the validity mask and the feasibility of
:mod:`codesign.rules`, the objective (``inf`` unless feasible) and the distance to
feasibility.  Two batch forms use it and nothing else:

* :mod:`codesign.search._sweep` vmaps it over blocks of an enumerated grid inside a scan,
  reducing on the device;
* :class:`ExactEvaluator` vmaps it over explicit lists of grid points (index tuples) in
  padded chunks of one size, memoized: what the optimizer's rounding and local search ask for.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from codesign._compile import jit
from codesign.rules import (
    CONSTRAINTS,
    active_constraints,
    caps_of,
    infeasibility,
    valid_mask,
    with_derived_dp,
    within_caps,
)
from codesign.search._grid import (
    OBJECTIVES,
    PLATFORM,
    axis_table,
    get_leaf,
    set_leaf,
    specs_of,
    take,
)
from codesign.search._problem import DEGREE_AXES, Problem
from codesign.step import evaluate_specs

__all__ = ["CHECKS", "exact_point", "ExactEvaluator", "base_specs"]


CHECKS = (
    "valid",
    "feasible",
    "fits",
    "within_capex",
    "within_power",
    "within_network_capex",
    "within_deadline",
    "within_count",
    "above_mfu",
    "within_dropped",
)
"""What :func:`exact_point` reports of each point, in this order (after ``feasible``, among
valid points; one per constraint of :data:`codesign.rules.CONSTRAINTS`): what the sweep
counts, so an empty result can say which rule excluded the grid."""


def exact_point(specs: dict, caps, objective: str, active=None):
    """``(value, checks, excess)`` of one configuration (traced).

    ``value`` is the objective where the point is valid and feasible, else ``inf``;
    ``checks`` the tuple of booleans of :data:`CHECKS`; ``excess`` is 0 when feasible, the log-ratio
    distance to feasibility (at least 1e-12) when valid but infeasible, and ``inf`` when
    invalid.  ``caps`` is the vector of :func:`codesign.rules.caps_of`; ``active`` (static)
    the indices of the constraints to check (default: all; a sweep passes the finite ones so
    that it computes nothing for the others).
    """
    r = evaluate_specs(specs)
    valid = valid_mask(specs)
    idx = tuple(range(len(CONSTRAINTS))) if active is None else tuple(active)
    within = within_caps(r, specs["system"], caps, idx)
    feas = valid & r.fits & jnp.all(within)
    value = jnp.where(feas, OBJECTIVES[objective](r), jnp.inf)
    ex = infeasibility(r, specs["system"], caps, idx)
    excess = jnp.where(valid, jnp.where(feas, 0.0, jnp.maximum(ex, 1e-12)), jnp.inf)
    ok = {i: within[j] for j, i in enumerate(idx)}
    checks = (
        valid,
        feas,
        valid & r.fits,
        *(valid & ok[i] if i in ok else valid for i in range(len(CONSTRAINTS))),
    )
    return value, checks, excess


def base_specs(cfg) -> dict:
    """The specs of a run configuration as a pytree of arrays (the base of a batch)."""
    return jax.tree_util.tree_map(jnp.asarray, specs_of(cfg))


def _leaf_paths(problem: Problem) -> tuple[str, ...]:
    """The leaves every evaluator call sets (the axes of any problem of this structure), so
    that one compiled program serves every grid: the platform first (it sets tier 0 and the
    accelerator), then the leaves under it."""
    axes = problem.exhaustive_axes()
    plat = (PLATFORM,) if PLATFORM in axes else ()
    return (
        *plat,
        "system.num_accelerators",
        *(f"strategy.{k}" for k in DEGREE_AXES),
        "strategy.recompute",
        "strategy.zero",
        *(p for p in axes if p not in _BASE_PATHS and p != PLATFORM),
        *(
            f"system.tiers[{i}].bandwidth_gbps"
            for i in range(problem.num_tiers)
            if not plat or i > 0 or f"system.tiers[{i}].bandwidth_gbps" in axes
        ),
    )


_BASE_PATHS = {
    "system.num_accelerators",
    *(f"strategy.{k}" for k in DEGREE_AXES),
    "strategy.recompute",
    "strategy.zero",
}


@functools.cache
def _compiled_points(objective: str, fast_compile: bool = False, active=None):
    def run(base, cols, bounds):
        def point(vals):
            specs = base
            # A traced dict comes back with sorted keys: the platform (which sets the
            # accelerator and tier 0) must go first, the leaves under it after.
            for path in sorted(vals, key=lambda p: p != PLATFORM):
                specs = set_leaf(specs, path, vals[path])
            value, checks, excess = exact_point(with_derived_dp(specs), bounds, objective, active)
            return value, checks[0], excess

        return jax.vmap(point)(cols)

    opts = {"xla_backend_optimization_level": 0} if fast_compile else None
    return jit(run, compiler_options=opts)


class ExactEvaluator:
    """Exact objective of grid points given as index tuples over ``problem.exhaustive_axes()``.

    Points are evaluated by :func:`exact_point` in padded chunks of :attr:`CHUNK` points (one
    compiled program per objective, whatever the problem or batch); results are memoized.
    ``num_evals`` counts the distinct *valid* points evaluated.
    """

    CHUNK = 512
    """Points per call of the compiled evaluator."""

    def __init__(self, problem: Problem, fast_compile: bool = False):
        self.problem = problem
        self.fast_compile = fast_compile
        self.axes = problem.exhaustive_axes()
        self.paths = list(self.axes)
        self.values = [list(v) for v in self.axes.values()]
        self.tables = [axis_table(p, v) for p, v in self.axes.items()]
        self.shape = tuple(len(v) for v in self.values)
        self.base = base_specs(problem.cfg)
        self.bounds = jnp.asarray(caps_of(problem.constraints), dtype=jnp.result_type(float))
        self.reset()
        specs = specs_of(problem.cfg)
        self._defaults = {
            p: jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=float), get_leaf(specs, p))
            for p in _leaf_paths(problem)
        }

    def reset(self) -> None:
        """Forget every memoized point and the evaluation count."""
        self.memo: dict[tuple, float] = {}
        self.excess: dict[tuple, float] = {}
        self._key: dict[tuple, tuple] = {}
        self.num_evals = 0

    def columns(self, idx: np.ndarray) -> dict:
        """Leaf values (``{path: (B, ...)}``) of index rows ``idx`` (B, num_axes)."""
        b = idx.shape[0]
        cols = {
            p: jax.tree_util.tree_map(lambda x: np.broadcast_to(x, (b, *x.shape)).copy(), v)
            for p, v in self._defaults.items()
        }
        for a, p in enumerate(self.paths):
            cols[p] = take(self.tables[a], idx[:, a])
        return cols

    def is_valid(self, idx: np.ndarray) -> np.ndarray:
        """Validity (the rules of :mod:`codesign.rules`) of index rows, without the model."""
        cols = self.columns(np.asarray(idx, dtype=np.int64).reshape(-1, len(self.paths)))
        specs = specs_of(self.problem.cfg)
        for p, v in cols.items():
            specs = set_leaf(specs, p, v)
        return np.asarray(valid_mask(with_derived_dp(specs, np)))

    def __call__(self, points) -> np.ndarray:
        """Exact objectives (inf when invalid or infeasible) of a list of index tuples."""
        return np.asarray(list(map(self.memo.__getitem__, self._ensure(points))), dtype=float)

    def _ensure(self, points) -> list:
        """``points`` as hashable index tuples, every one evaluated (memoized).

        The optimizer's own points are tuples already (``Discretizer.compose``); a tuple of
        NumPy integers hashes and compares as the same tuple of ints."""
        if not isinstance(points, list):
            points = list(points)
        if not set(map(type, points)) <= {tuple}:
            points = [p if type(p) is tuple else tuple(int(i) for i in p) for p in points]
        memo = self.memo
        todo = list(itertools.filterfalse(memo.__contains__, dict.fromkeys(points)))
        if todo:
            idx = np.asarray(todo, dtype=np.int64)
            vals, valid, excess = self._run(idx)
            for p, v, ex in zip(todo, vals.tolist(), excess.tolist(), strict=True):
                memo[p] = v
                self.excess[p] = ex
                self._key[p] = (0, v) if ex == 0.0 else (1, ex)
            self.num_evals += int(np.sum(valid))
        return points

    def _run(self, idx: np.ndarray):
        n = idx.shape[0]
        m = -(-n // self.CHUNK) * self.CHUNK
        pad = np.concatenate([idx, np.repeat(idx[:1], m - n, axis=0)]) if m > n else idx
        fn = _compiled_points(
            self.problem.objective,
            self.fast_compile,
            active_constraints(caps_of(self.problem.constraints)),
        )
        outs = []
        for i in range(0, m, self.CHUNK):
            # NumPy leaves straight into the jitted call (its C++ path converts them; one
            # jnp.asarray per leaf cost more than the chunk's evaluation).
            outs.append(fn(self.base, self.columns(pad[i : i + self.CHUNK]), self.bounds))
        outs = jax.device_get(outs)
        return tuple(np.concatenate([np.asarray(o[k]) for o in outs])[:n] for k in range(3))

    def keys(self, points) -> list[tuple]:
        """Sort keys: feasible points by objective first, then infeasible ones by how far
        they are from feasibility (invalid points last)."""
        return list(map(self._key.__getitem__, self._ensure(points)))

    def point(self, p: tuple) -> dict:
        """The axis values of an index tuple."""
        return {path: vals[i] for path, vals, i in zip(self.paths, self.values, p, strict=True)}
