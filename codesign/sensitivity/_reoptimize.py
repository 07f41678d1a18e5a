"""The envelope: elasticities with the parallel strategy re-optimized at every parameter value.

Held fixed, a strategy carries a hardware change straight into the step time.  Re-optimized,
the best strategy absorbs part of it (more bandwidth lets a smaller tensor-parallel degree
win; more HBM lets recomputation go).  At a smooth optimum over continuous choices the
envelope theorem makes the two derivatives equal (Milgrom & Segal, Econometrica 70(2), 2002);
over the discrete strategies of a real cluster they differ by a finite step, so both are
measured as arc elasticities over the same step (``p / factor`` to ``p * factor``): the
fixed-strategy arc and the re-optimized arc, each strategy in the grid evaluated exactly
(:func:`codesign.search.exact_point`: validity, memory fit and the problem's caps), and the
share of the effect the re-optimized strategy absorbs, ``1 - e_reopt / e_fixed``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign._compile import jit
from codesign.rules import active_constraints, caps_of, valid_mask, with_derived_dp
from codesign.search._evaluator import exact_point
from codesign.search._grid import axis_table, set_leaf, specs_of
from codesign.search._problem import STRATEGY_AXES, default_values
from codesign.sensitivity._params import Parameter, _covering_tiers, apply_scales
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES, placement_order

__all__ = ["Envelope", "CHOICE_AXES", "strategy_grid", "strategy_values_at", "envelope"]

CHOICE_AXES = ("placement", "moe_capacity_factor")
"""Strategy choices re-optimized beside :data:`codesign.search.STRATEGY_AXES` where the values
list them (a problem's ``placements`` and ``capacity_factors``,
:func:`~codesign.sensitivity.problem_strategy_values`); held at the run's own otherwise.  A
placement is an innermost-first tuple of :data:`codesign.specs.PARALLEL_DIMS`."""


@dataclasses.dataclass(frozen=True)
class Envelope:
    """Fixed-strategy and re-optimized arc elasticities of one objective to one parameter
    over ``[value / factor, value * factor]``; ``best_low``/``best_high``: the best strategy
    at each end where it differs from the best at the point (changed fields only)."""

    parameter: str
    objective: str
    value: float
    factor: float
    fixed: float | None
    reoptimized: float | None
    absorbed: float | None
    best_low: dict
    best_high: dict


def _strategy_of(cfg) -> dict:
    st = cfg.strategy
    degrees = ("tp", "pp", "cp", "ep", "etp", "microbatch", "interleave")
    out = {k: float(getattr(st, k)) for k in degrees}
    out["recompute"] = RECOMPUTE_MODES[int(np.argmax(np.asarray(st.recompute)))]
    out["zero"] = ZERO_STAGES[int(np.argmax(np.asarray(st.zero)))]
    out["placement"] = placement_order(st.placement)
    out["moe_capacity_factor"] = float(st.moe_capacity_factor)
    return out


def _choice(k: str, v):
    return tuple(v) if k == "placement" else float(v)


def strategy_grid(cfg, values: dict | None = None) -> tuple[list, dict]:
    """The strategies to re-optimize over: ``values`` (``{axis: list}`` over
    :data:`codesign.search.STRATEGY_AXES` and :data:`CHOICE_AXES`, e.g. a problem's
    ``strategy_values`` with its placements and capacity factors) or the defaults of
    :func:`codesign.search.default_values` joined with the run's own strategy; returns the
    valid ones (at the run's hardware) as a list of dicts and their leaf columns
    ``{leaf path: (S, ...) array}``.

    Example (two placements: the run's own and one more):
        >>> import codesign as cd
        >>> cfg = cd.load_run_dict({"model": {"preset": "llama3-8b"},
        ...     "training": {"global_batch": 512},
        ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        ...     "strategy": {"tp": 2, "pp": 2, "dp": 16}})
        >>> combos, cols = strategy_grid(cfg, {"tp": [2], "pp": [2], "microbatch": [1],
        ...     "placement": [("tp", "pp", "cp", "ep", "dp")]})
        >>> sorted({c["placement"] for c in combos})
        [('tp', 'cp', 'ep', 'dp', 'pp'), ('tp', 'pp', 'cp', 'ep', 'dp')]
        >>> cols["strategy.placement"].shape[1]
        5
    """
    own = _strategy_of(cfg)
    vals = dict(values) if values else default_values(cfg)
    grid = {}
    for k in (*STRATEGY_AXES, *(a for a in CHOICE_AXES if vals.get(a))):
        vs = [_choice(k, v) if k in CHOICE_AXES else v for v in vals.get(k) or [own[k]]]
        if own[k] not in vs:
            vs.append(own[k])
        grid[k] = vs
    combos = [dict(zip(grid, c, strict=True)) for c in itertools.product(*grid.values())]
    cols = {f"strategy.{k}": axis_table(f"strategy.{k}", [c[k] for c in combos]) for k in grid}
    specs = specs_of(cfg)
    for p, v in cols.items():
        specs = set_leaf(specs, p, v)
    ok = np.asarray(valid_mask(with_derived_dp(specs, np)))
    keep = np.flatnonzero(ok)
    return [combos[i] for i in keep], {p: v[keep] for p, v in cols.items()}


@functools.cache
def _program(paths: tuple, covering: tuple, objective: str, active: tuple):
    params = tuple(Parameter(name=p, path=p, label=p, group="", value=1.0) for p in paths)

    def run(base, cols, scales, caps):
        def at_scale(s):
            specs0 = apply_scales(base, params, s, covering)

            def at_strategy(c):
                specs = specs0
                for p in cols:
                    specs = set_leaf(specs, p, c[p])
                return exact_point(with_derived_dp(specs), caps, objective, active)[0]

            return jax.vmap(at_strategy)(cols)

        return jax.lax.map(at_scale, scales)

    return jit(run)


def strategy_values_at(cfg, paths: tuple, scales, cols: dict, objective: str, constraints=None):
    """The exact ``objective`` (inf where invalid, not fitting or over a cap) of every
    strategy (``cols``, from :func:`strategy_grid`) at every row of log-scales ``(K, P)`` of
    the parameters ``paths``: a ``(K, S)`` array."""
    caps = caps_of(constraints or {})
    fn = _program(tuple(paths), _covering_tiers(cfg), objective, active_constraints(caps))
    base = jax.tree_util.tree_map(jnp.asarray, specs_of(cfg))
    return np.asarray(
        jax.device_get(
            fn(
                base,
                {p: jnp.asarray(v) for p, v in cols.items()},
                jnp.asarray(scales),
                jnp.asarray(caps, dtype=jnp.result_type(float)),
            )
        )
    )


def _arc(lo, hi, step):
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    if lo <= 0 or hi <= 0:
        return None
    return (math.log(hi) - math.log(lo)) / step


def envelope(
    cfg,
    params: tuple[Parameter, ...],
    fixed_values: np.ndarray,
    *,
    objective: str,
    factor: float = 2.0,
    strategy_values: dict | None = None,
    constraints: dict | None = None,
):
    """Fixed and re-optimized arc elasticities of ``objective`` (one of
    :data:`codesign.search.OBJECTIVES`) for every parameter.

    ``fixed_values`` holds the fixed-strategy objective at ``(p / factor, p * factor)`` of
    each parameter, shape ``(P, 2)`` (inf where that strategy is invalid or does not fit).
    Returns ``(rows, best_at_point, best_value_at_point)``.
    """
    combos, cols = strategy_grid(cfg, strategy_values)
    n_p = len(params)
    ls = math.log(factor)
    scales = np.zeros((2 * n_p + 1, n_p))
    for i in range(n_p):
        scales[2 * i, i] = -ls
        scales[2 * i + 1, i] = ls
    vals = strategy_values_at(
        cfg, tuple(p.path for p in params), scales, cols, objective, constraints
    )
    best = np.argmin(vals, axis=1)
    bval = vals[np.arange(len(best)), best]
    at0 = combos[int(best[-1])] if math.isfinite(bval[-1]) else {}

    def changed(row):
        if not math.isfinite(bval[row]):
            return {"infeasible": True}
        c = combos[int(best[row])]
        return {k: v for k, v in c.items() if at0.get(k) != v}

    rows = []
    for i, prm in enumerate(params):
        fx = _arc(fixed_values[i, 0], fixed_values[i, 1], 2 * ls)
        ro = _arc(bval[2 * i], bval[2 * i + 1], 2 * ls)
        absorbed = 1.0 - ro / fx if fx is not None and ro is not None and abs(fx) > 1e-9 else None
        rows.append(
            Envelope(
                parameter=prm.name,
                objective=objective,
                value=prm.value,
                factor=factor,
                fixed=fx,
                reoptimized=ro,
                absorbed=absorbed,
                best_low=changed(2 * i),
                best_high=changed(2 * i + 1),
            )
        )
    return rows, at0, float(bval[-1])
