"""Elasticities of the exact model, strategy held fixed, and checked against finite differences.

The elasticity of an objective ``f`` to a parameter ``p`` is ``e = d ln f / d ln p``: the
percentage change of ``f`` per percent of ``p`` (Sydsaeter & Hammond, *Essential
Mathematics for Economic Analysis*, 5th ed. 2016, sec. 7.7).  For a continuous parameter it
is one pass of forward-mode automatic differentiation of the exact model
(:func:`jax.jacfwd` over the log-scale of every parameter at once).  The exact model is
piecewise smooth (a max, an exposed time ``max(t - window, 0)``, a clamp), so each
derivative is checked against one-sided finite differences of the exact model,

    left = (ln f(p) - ln f(p e^-d)) / d,    right = (ln f(p e^d) - ln f(p)) / d,

with ``d = 1e-4``: where the two differ (beyond the curvature a smooth function shows over
``d``), or the derivative disagrees with their mean, the point is a **kink** and both
one-sided values are reported instead of a derivative that holds on one side only.  A
discrete parameter (accelerator count, layers, batch, experts, top-k) gets arc elasticities
to its neighbouring valid values (:func:`codesign.sensitivity._params.neighbour_scales`).

All exact evaluations of one analysis (the finite differences, the arcs, the scans of
"what it would take") go through one compiled, vmapped program per parameter set
(functions that close over the static setup, in the style of jax-md).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign._compile import jit
from codesign.search._grid import specs_of
from codesign.sensitivity._params import Parameter, _covering_tiers, apply_scales, neighbour_scales
from codesign.smoothing import EXACT
from codesign.step import evaluate_specs

__all__ = ["OBJECTIVES", "Elasticity", "Model", "elasticities"]

OBJECTIVES = {
    "step_time": ("s", lambda r: r.step_time_s),
    "time_to_train": ("days", lambda r: r.cost["time_to_train_days"]),
    "cost_to_train": ("USD", lambda r: r.cost["cost_to_train_usd"]),
    "energy_to_train": ("MWh", lambda r: r.cost["energy_to_train_mwh"]),
    "memory": ("GB", lambda r: r.memory_gb["total"]),
}
"""The objectives of a sensitivity analysis: name -> (unit, function of the Report)."""

DELTA = 1e-4
"""Log step of the one-sided finite differences."""
KINK_ABS = 2e-3
KINK_REL = 1e-2
"""A continuous parameter is at a kink when ``|right - left| > KINK_ABS + KINK_REL *
max(|left|, |right|)`` (a smooth function's secants differ by about ``d`` times its
curvature, ~1e-4 here), or when the derivative differs from ``(left + right) / 2`` by as
much."""
CHUNK = 256
"""Rows per call of the batch program (one compiled shape)."""


def _report(specs):
    return evaluate_specs(specs, EXACT)


@functools.cache
def _programs(paths: tuple, covering: tuple, objectives: tuple):
    """``(first, batch)`` compiled for one parameter set: ``first(base)`` gives the objectives
    and their Jacobian in the log-scales at 0; ``batch(base, scales)`` the objectives (and
    memory fit) at each row of log-scales."""
    params = tuple(Parameter(name=p, path=p, label=p, group="", value=1.0) for p in paths)
    fns = [OBJECTIVES[o][1] for o in objectives]

    def values(base, s):
        r = _report(apply_scales(base, params, s, covering))
        return jnp.stack([f(r) for f in fns]), r.fits

    def first(base):
        s0 = jnp.zeros(len(params))
        r = _report(apply_scales(base, params, s0, covering))
        f0 = jnp.stack([f(r) for f in fns])
        jac = jax.jacfwd(lambda s: values(base, s)[0])(s0)
        return f0, jac, r.fits, r.breakdown_s, r.step_time_s

    batch = jax.vmap(values, in_axes=(None, 0))
    return jit(first), jit(batch)


class Model:
    """The exact model of one run as a function of its parameters' log-scales (host API).

    ``values(scales)`` evaluates rows of log-scales ``(K, P)`` (chunked, one compiled
    shape); ``first()`` gives the objectives at the point and their Jacobian.
    """

    def __init__(self, cfg, params: tuple[Parameter, ...], objectives=tuple(OBJECTIVES)):
        self.cfg = cfg
        self.params = tuple(params)
        self.objectives = tuple(objectives)
        self.base = jax.tree_util.tree_map(jnp.asarray, specs_of(cfg))
        self._first, self._batch = _programs(
            tuple(p.path for p in self.params), _covering_tiers(cfg), self.objectives
        )
        self._cache = None
        self.breakdown_s: dict = {}
        self.step_time_s = math.nan

    def first(self):
        """Objectives ``(O,)``, their Jacobian ``(O, P)`` in the log-scales, memory fit."""
        if self._cache is None:
            f0, jac, fits, breakdown, step = jax.device_get(self._first(self.base))
            self._cache = (np.asarray(f0), np.asarray(jac), bool(fits))
            self.breakdown_s = {k: float(v) for k, v in breakdown.items()}
            self.step_time_s = float(step)
        return self._cache

    def values(self, scales) -> tuple[np.ndarray, np.ndarray]:
        """Objectives ``(K, O)`` and memory fit ``(K,)`` at each row of log-scales."""
        scales = np.atleast_2d(np.asarray(scales, dtype=float))
        k = scales.shape[0]
        m = -(-k // CHUNK) * CHUNK
        pad = np.zeros((m, len(self.params)))
        pad[:k] = scales
        outs = [self._batch(self.base, jnp.asarray(pad[i : i + CHUNK])) for i in range(0, m, CHUNK)]
        outs = jax.device_get(outs)
        vals = np.concatenate([np.asarray(o[0]) for o in outs])[:k]
        fits = np.concatenate([np.asarray(o[1]) for o in outs])[:k]
        return vals, fits

    def scaled(self, i: int, s) -> np.ndarray:
        """Rows of log-scales moving parameter ``i`` alone by each of ``s``."""
        s = np.asarray(s, dtype=float).reshape(-1)
        rows = np.zeros((s.size, len(self.params)))
        rows[:, i] = s
        return rows


@dataclasses.dataclass(frozen=True)
class Elasticity:
    """The elasticity of one objective to one parameter, strategy held fixed.

    ``status`` is ``smooth`` (``elasticity`` is the derivative; ``left``/``right`` the
    one-sided finite differences that confirm it), ``kink`` (``elasticity`` is None: the
    exact model has a kink or a jump at the point; ``left`` and ``right`` are its one-sided
    elasticities) or ``discrete`` (``elasticity`` is the arc elasticity over the neighbouring
    valid values ``lower_value``/``upper_value``, ``left``/``right`` its one-sided arcs).
    """

    parameter: str
    objective: str
    value: float
    elasticity: float | None
    left: float | None
    right: float | None
    status: str
    derivative: float | None = None
    """The automatic-differentiation elasticity (continuous parameters), kink or not."""
    lower_value: float | None = None
    upper_value: float | None = None


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _log(x):
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.nan)


def elasticities(model: Model, delta: float = DELTA):
    """Every elasticity of ``model`` (a :class:`Model`): ``(f0, fits, rows)`` where ``rows``
    is a list of :class:`Elasticity` (parameter-major) and ``f0`` the objectives at the
    point."""
    f0, jac, fits = model.first()
    n_p = len(model.params)
    rows_s, where = [], []
    arcs = []
    for i, prm in enumerate(model.params):
        if prm.discrete:
            down, up = neighbour_scales(model.cfg, prm)
        else:
            down, up = -delta, delta
        arcs.append((down, up))
        for s in (down, up):
            if s is not None:
                where.append((i, s))
                rows_s.append(model.scaled(i, s)[0])
    vals, _ = model.values(np.asarray(rows_s).reshape(-1, n_p)) if rows_s else (None, None)
    at = {}
    for (i, s), v in zip(where, vals if vals is not None else [], strict=True):
        at[(i, s)] = v
    lf0 = _log(f0)
    out = []
    for i, prm in enumerate(model.params):
        down, up = arcs[i]
        lo = _log(at[(i, down)]) if down is not None else None
        hi = _log(at[(i, up)]) if up is not None else None
        for o, name in enumerate(model.objectives):
            left = (lf0[o] - lo[o]) / (-down) if lo is not None else None
            right = (hi[o] - lf0[o]) / up if hi is not None else None
            left, right = _finite(left), _finite(right)
            if prm.discrete:
                if left is not None and right is not None:
                    e = (hi[o] - lo[o]) / (up - down)
                else:
                    e = left if left is not None else right
                out.append(
                    Elasticity(
                        parameter=prm.name,
                        objective=name,
                        value=prm.value,
                        elasticity=_finite(e),
                        left=left,
                        right=right,
                        status="discrete",
                        lower_value=prm.value * math.exp(down) if down is not None else None,
                        upper_value=prm.value * math.exp(up) if up is not None else None,
                    )
                )
                continue
            d = _finite(jac[o, i] / f0[o]) if f0[o] > 0 else None
            if d is None or left is None or right is None:
                out.append(
                    Elasticity(
                        parameter=prm.name,
                        objective=name,
                        value=prm.value,
                        elasticity=None,
                        left=left,
                        right=right,
                        status="undefined",
                        derivative=d,
                    )
                )
                continue
            tol = KINK_ABS + KINK_REL * max(abs(left), abs(right))
            smooth = abs(right - left) <= tol and abs(d - 0.5 * (left + right)) <= tol
            out.append(
                Elasticity(
                    parameter=prm.name,
                    objective=name,
                    value=prm.value,
                    elasticity=d if smooth else None,
                    left=left,
                    right=right,
                    status="smooth" if smooth else "kink",
                    derivative=d,
                )
            )
    return f0, fits, out
