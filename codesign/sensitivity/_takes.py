"""Bottlenecks, and what one parameter alone must become for a target reduction.

"What it would take": how much one parameter must improve, alone, for a given reduction of
an objective.

For a target reduction ``r`` (say 10 %) of ``f``, the first-order answer from the elasticity
``e`` is the factor ``k1 = (1 - r)^(1/e)`` (``ln f`` linear in ``ln p``).  The model is not
linear (a communication term shrinks until another term dominates; an exposed time reaches
zero and stops paying), so the answer is solved on the exact model: a scan of exact
evaluations of ``f(p k)`` over ``k`` from 1 to ``max_factor`` in the improving direction (the
sign of the derivative; both directions where it is zero), then bisection of the first
crossing of ``(1 - r) f(p)`` to a relative precision of about 1e-4 in ``k``.  Where the scan
reaches the parameter's physical bound (oversubscription 1, efficiency 1, a domain as large
as the cluster) or ``max_factor`` without crossing, the parameter cannot do it alone; the
report then gives the best reduction it can give in that range.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from codesign.step import BREAKDOWN_KEYS

__all__ = ["Requirement", "what_it_would_take", "Bottleneck", "bottleneck", "TERM_GROUPS"]

TERM_GROUPS = {
    "compute": ("forward", "backward", "recompute", "optimizer"),
    "communication": ("tp_comm", "cp_comm", "ep_comm", "pp_p2p", "dp_comm"),
    "pipeline bubble": ("pp_bubble",),
    "offload": ("offload",),
    "overhead": ("overhead",),
}
"""The breakdown terms of :data:`codesign.BREAKDOWN_KEYS` by the resource that bounds them."""


@dataclasses.dataclass(frozen=True)
class Bottleneck:
    """What the step time is made of: every term's share, the dominant term and the
    dominant resource group (:data:`TERM_GROUPS`)."""

    step_time_s: float
    shares: dict
    dominant_term: str
    dominant_group: str
    group_shares: dict


def bottleneck(breakdown_s: dict) -> Bottleneck:
    """The bottleneck of one point from its step-time breakdown (``Report.breakdown_s``)."""
    b = {k: float(np.asarray(breakdown_s[k])) for k in BREAKDOWN_KEYS}
    total = sum(b.values())
    shares = {k: (v / total if total > 0 else 0.0) for k, v in b.items()}
    groups = {g: sum(shares[k] for k in ks) for g, ks in TERM_GROUPS.items()}
    return Bottleneck(
        step_time_s=total,
        shares=dict(sorted(shares.items(), key=lambda kv: -kv[1])),
        dominant_term=max(shares, key=shares.get),
        dominant_group=max(groups, key=groups.get),
        group_shares=dict(sorted(groups.items(), key=lambda kv: -kv[1])),
    )


@dataclasses.dataclass(frozen=True)
class Requirement:
    """What one parameter alone must become for the target reduction of the objective.

    ``reachable``: whether it can; ``factor``/``required_value`` the exact answer (None when
    not reachable); ``first_order_factor`` what the elasticity alone predicts;
    ``best_reduction`` the largest reduction found in the scanned range and
    ``best_factor`` where; ``limit`` why the scan stopped (``bound`` or ``max_factor``).
    """

    parameter: str
    objective: str
    value: float
    reduction: float
    reachable: bool
    factor: float | None
    required_value: float | None
    first_order_factor: float | None
    best_reduction: float
    best_factor: float
    limit: str


SCAN = 48
REFINE = 32


def first_order_factor(e, reduction: float, direction: float) -> float | None:
    """The factor ``k = (1 - reduction) ** (1 / e)`` that a constant elasticity ``e`` asks of
    a parameter for ``reduction`` of the objective, moving it in ``direction`` (+1 up, -1
    down); None when ``e`` is missing or zero, points the other way, or asks for a factor
    beyond floating point (a tiny elasticity: 10 % with ``e = -1e-4`` asks for ``exp(1054)``).

    >>> round(first_order_factor(-0.8, 0.1, 1.0), 4)
    1.1408
    >>> first_order_factor(-1e-4, 0.1, 1.0) is None, first_order_factor(0.5, 0.1, 1.0) is None
    (True, True)
    """
    if e is None or abs(e) <= 1e-12:
        return None
    x = math.log(1.0 - reduction) / e
    if abs(x) >= 700.0:  # exp overflows (or underflows to a meaningless 0) past ~709
        return None
    k = math.exp(x)
    return k if (k > 1.0) == (direction > 0) else None


def _directions(e_left, e_right):
    """Improving directions (+1: increase the parameter) from one-sided elasticities."""
    dirs = []
    if e_right is not None and e_right < -1e-12:
        dirs.append(1.0)
    if e_left is not None and e_left > 1e-12:
        dirs.append(-1.0)
    return dirs or [1.0, -1.0]


def what_it_would_take(model, objective: str, elast: dict, reduction=0.10, max_factor=1e3):
    """:class:`Requirement` of every parameter of ``model`` (a
    :class:`~codesign.sensitivity._elasticity.Model`) for a ``reduction`` of ``objective``.

    ``elast`` maps each parameter name to its :class:`Elasticity` for ``objective`` (its
    one-sided values choose the direction and the first-order estimate).
    """
    if not 0.0 < reduction < 1.0:
        from codesign.specs import SpecError

        raise SpecError("reduction", reduction, "a fraction in (0, 1)")
    o = model.objectives.index(objective)
    f0 = float(model.first()[0][o])
    target = (1.0 - reduction) * f0
    plans = []  # (i, direction, smax, limit)
    for i, prm in enumerate(model.params):
        el = elast[prm.name]
        for d in _directions(el.left, el.right):
            bound = prm.upper if d > 0 else prm.lower
            smax = math.log(max_factor)
            limit = "max_factor"
            if bound not in (0.0, math.inf) and bound > 0:
                sb = abs(math.log(bound / prm.value))
                if sb < smax:
                    smax, limit = sb, "bound"
            plans.append((i, d, smax, limit))
    # 1. scan
    rows, idx = [], []
    for j, (i, d, smax, _) in enumerate(plans):
        s = d * np.linspace(0.0, smax, SCAN + 1)[1:]
        rows.append(model.scaled(i, s))
        idx.append(j)
    vals = model.values(np.concatenate(rows))[0][:, o].reshape(len(plans), SCAN)
    # 2. bisect the first crossing of every plan that crosses
    lo = np.zeros(len(plans))
    hi = np.full(len(plans), np.nan)
    for j, (_, _, smax, _) in enumerate(plans):
        grid = np.linspace(0.0, smax, SCAN + 1)
        hit = np.flatnonzero(vals[j] <= target)
        if hit.size:
            lo[j], hi[j] = grid[hit[0]], grid[hit[0] + 1]
    crossing = np.flatnonzero(np.isfinite(hi))
    for _ in range(3):
        if not crossing.size:
            break
        rows = []
        for j in crossing:
            i, d = plans[j][0], plans[j][1]
            rows.append(model.scaled(i, d * np.linspace(lo[j], hi[j], REFINE + 2)[1:-1]))
        v = model.values(np.concatenate(rows))[0][:, o].reshape(len(crossing), REFINE)
        for r, j in enumerate(crossing):
            g = np.linspace(lo[j], hi[j], REFINE + 2)
            hit = np.flatnonzero(v[r] <= target)
            k = hit[0] + 1 if hit.size else REFINE + 1
            lo[j], hi[j] = g[k - 1], g[k]
    out = {}
    for j, (i, d, smax, limit) in enumerate(plans):
        prm = model.params[i]
        el = elast[prm.name]
        k1 = first_order_factor(el.right if d > 0 else el.left, reduction, d)
        b = int(np.argmin(vals[j]))
        best_red = 1.0 - float(vals[j][b]) / f0 if f0 > 0 else 0.0
        reach = bool(np.isfinite(hi[j]))
        req = Requirement(
            parameter=prm.name,
            objective=objective,
            value=prm.value,
            reduction=reduction,
            reachable=reach,
            factor=math.exp(d * hi[j]) if reach else None,
            required_value=prm.value * math.exp(d * hi[j]) if reach else None,
            first_order_factor=k1,
            best_reduction=max(best_red, 0.0),
            best_factor=math.exp(d * np.linspace(0.0, smax, SCAN + 1)[1:][b]),
            limit=limit,
        )
        prev = out.get(prm.name)
        # Two directions (a zero derivative): keep the one that reaches, or reduces more.
        if prev is None or (req.reachable, req.best_reduction) > (
            prev.reachable,
            prev.best_reduction,
        ):
            out[prm.name] = req
    return [out[p.name] for p in model.params]
