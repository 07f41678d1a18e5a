"""Figures of a sensitivity analysis: the tornado, one-at-a-time curves and strategy heat maps.

Each figure has a data function, which computes what is drawn (exact evaluations of the one
step model, :data:`~codesign.smoothing.EXACT` smoothing), and a plotting function, which
draws it and returns the :class:`matplotlib.figure.Figure` (matplotlib is imported when a
plotting function is called, never with this module; nothing is shown, the caller saves or
displays the figure; every plotting function takes an optional ``ax`` to draw into):

* :func:`plot_tornado` (:func:`tornado_rows`): the largest elasticities ``d ln f / d ln p``
  of one objective of a :class:`~codesign.sensitivity.Sensitivity`, the strategy fixed, a
  kink drawn with both one-sided values (the usual tornado diagram of a sensitivity study,
  Eschenbach, *Interfaces* 22(6), 1992, with elasticities in place of swings);
* :func:`plot_curves` (:func:`one_at_a_time`): the exact objective as one parameter alone
  moves over a range of factors, the strategy fixed (a one-at-a-time sensitivity plot,
  Saltelli et al., *Global Sensitivity Analysis: The Primer*, Wiley 2008, sec. 1.2.3), with
  the kinks of the piecewise-smooth model located: where the exposed data-parallel
  communication ``max(t_dp - window, 0)`` starts or ends, where the memory fit switches,
  and where the slope ``d ln f / d ln p`` changes or the value jumps;
* :func:`plot_heatmap` (:func:`heatmap`): the best objective over a grid of strategies at
  every cell of a grid of two parameters (each strategy judged exactly: validity, memory
  fit and the problem's caps, :func:`codesign.search.exact_point`), with the boundaries
  where the best strategy changes.
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
from codesign.sensitivity._elasticity import KINK_ABS, KINK_REL, OBJECTIVES, _report
from codesign.sensitivity._params import (
    Parameter,
    _covering_tiers,
    _valid,
    apply_scales,
    lattice_step,
    parameters_of,
)
from codesign.specs import SpecError

__all__ = [
    "Curve",
    "Kink",
    "one_at_a_time",
    "plot_curves",
]

CHUNK = 128
"""Rows per call of the curve program (one compiled shape)."""
REFINE = 15
ROUNDS = 2
"""A switch of exposed DP communication or of memory fit between two grid points of a
continuous parameter is located by ``ROUNDS`` rounds of ``REFINE`` interior evaluations
(to ``1 / (REFINE + 1)^ROUNDS`` of the grid step in ``ln p``)."""
FINE = 49
"""Evaluations over three grid segments that locate a slope change."""
WINDOW = 6
"""Segments on each side of a segment among which the slope-change test looks for the
curvature estimate it subtracts."""


def _new_axes(ax, size):
    if ax is not None:
        try:
            return ax.get_figure(root=True), ax
        except TypeError:  # matplotlib < 3.10: a subfigure's figure is the root
            return getattr(ax.figure, "figure", ax.figure), ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _plain_log(*axes):
    """Log-scale axes labelled ``0.25 0.5 1 2 4`` (majors, and the minors at 2 and 5 times a
    power of ten) rather than ``2 x 10^-1``."""
    from matplotlib.ticker import FuncFormatter

    def minor(v, _):
        m = v / 10.0 ** math.floor(math.log10(v) + 1e-9) if v > 0 else 0.0
        return f"{v:g}" if any(abs(m - k) < 1e-6 for k in (2.0, 5.0)) else ""

    for axis in axes:
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(FuncFormatter(minor))


# ---- one at a time --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Kink:
    """A kink (or jump) of a one-at-a-time curve.

    ``value`` is where it lies (parameter units; for a continuous parameter, a switch is
    located by bisection and a slope change on a finer grid, to well under a percent; for a
    discrete one, the geometric midpoint of the two valid values), ``factor`` the same
    relative to the design point, ``between`` the two grid values that bracket it,
    ``left``/``right`` the slopes ``d ln f / d ln p`` of the grid segments on either side
    (None at an end of the grid).  ``reason`` is one of "exposed DP communication starts",
    "exposed DP communication ends" (as the parameter grows), "memory fit switches",
    "slope changes" or "value jumps".
    """

    value: float
    factor: float
    reason: str
    between: tuple[float, float]
    left: float | None = None
    right: float | None = None


@dataclasses.dataclass(frozen=True)
class Curve:
    """The exact objective as one parameter moves alone, the strategy fixed.

    ``values`` are the parameter's values (its units; ``factors`` the same relative to the
    design point ``value``), ``objective_values`` the objective (``unit``), ``fits`` whether
    the strategy fits in memory, ``exposed_dp`` the data-parallel communication beyond the
    overlap window (``Report.exposed_comm_s["dp_beyond_window"]``, seconds: the exposed
    ``dp_comm`` without the ``dp_overlap_slowdown`` share of the hidden traffic, so that it
    ends where the window hides everything), ``reference`` the objective at the design
    point and ``kinks`` a list of :class:`Kink`.
    """

    parameter: str
    label: str
    objective: str
    unit: str
    value: float
    reference: float
    values: np.ndarray
    factors: np.ndarray
    objective_values: np.ndarray
    fits: np.ndarray
    exposed_dp: np.ndarray
    kinks: list

    @property
    def relative(self) -> np.ndarray:
        """``objective_values / reference``."""
        return self.objective_values / self.reference


@functools.cache
def _curve_program(paths: tuple, covering: tuple, objective: str):
    """``batch(base, scales)``: the objective, memory fit and exposed DP communication at
    each row of log-scales (compiled once per parameter set and objective)."""
    params = tuple(Parameter(name=p, path=p, label=p, group="", value=1.0) for p in paths)
    fn = OBJECTIVES[objective][1]

    def one(base, s):
        r = _report(apply_scales(base, params, s, covering))
        return fn(r), r.fits, r.exposed_comm_s["dp_beyond_window"]

    return jit(jax.vmap(one, in_axes=(None, 0)))


def _evaluate(cfg, prm: Parameter, objective: str, scales) -> tuple:
    s = np.asarray(scales, dtype=float).reshape(-1)
    fn = _curve_program((prm.path,), _covering_tiers(cfg), objective)
    base = jax.tree_util.tree_map(jnp.asarray, specs_of(cfg))
    m = max(-(-s.size // CHUNK), 1) * CHUNK
    pad = np.zeros((m, 1))
    pad[: s.size, 0] = s
    outs = jax.device_get([fn(base, jnp.asarray(pad[i : i + CHUNK])) for i in range(0, m, CHUNK)])
    f, fits, dp = (np.concatenate([np.asarray(o[j]) for o in outs])[: s.size] for j in range(3))
    return f.astype(float), fits.astype(bool), dp.astype(float)


def _discrete_values(cfg, prm: Parameter, targets) -> np.ndarray:
    """The valid values of a discrete parameter nearest to ``targets`` (with its own value),
    on the lattice of :func:`codesign.sensitivity._params.neighbour_scales`."""
    step, v = lattice_step(cfg, prm), prm.value
    out = {v}
    for t in np.asarray(targets, dtype=float):
        k0 = round((t - v) / step)
        for dk in (0, 1, -1, 2, -2, 3, -3):
            w = v + (k0 + dk) * step
            if max(prm.lower, 1.0) <= w <= prm.upper and (w == v or _valid(cfg, prm.path, w)):
                out.add(w)
                break
    return np.array(sorted(out))


def _switch_reason(kind: str, before: bool) -> str:
    if kind == "dp":
        return "exposed DP communication " + ("ends" if before else "starts")
    return "memory fit switches"


def _slope_kinks(x, y, known=()):
    """Slope changes and jumps of ``y(x)`` (``ln f`` against ``ln p``) between grid points:
    ``[(segment, theta, reason)]`` with the kink at ``x[i] + theta (x[i+1] - x[i])``;
    ``known`` holds the segments of kinks found otherwise (switches), left out.

    With segment slopes ``s_i`` and second differences ``D_p = s_p - s_{p-1}`` at the grid
    points, a kink inside segment ``i`` where the slope changes by ``dS`` gives
    ``P_i = D_i + D_{i+1} = dS`` (split ``(1 - theta) dS`` and ``theta dS``) on top of the
    smooth curvature, which is estimated from the pairs ``P_j`` of the nearest segments that
    share no point with it (``|j - i| >= 2``): interpolated between the nearest on either
    side, or extrapolated from the two nearest on one side, never across a kink already
    found.  A jump gives a segment slope
    outside the range of its two neighbours by more than their spread.  The largest change
    is taken first and its points leave the other segments' curvature estimates.  The
    tolerance is that of the elasticities' kink test
    (:data:`~codesign.sensitivity._elasticity.KINK_ABS`, ``KINK_REL``).
    """
    k = len(x)
    if k < 4:
        return []
    with np.errstate(invalid="ignore"):
        s = np.diff(y) / np.diff(x)
    d = np.full(k, np.nan)
    d[1:-1] = np.diff(s)  # d[p]: second difference at point p
    pair = np.full(k - 1, np.nan)
    pair[1:-1] = d[1:-2] + d[2:-1]  # pair[i]: segment i, points i and i + 1
    xm = 0.5 * (x[:-1] + x[1:])
    out = []
    taken = set()  # segments near a kink: not tested again
    dirty = set()  # segments whose pair carries a kink

    def mark(i, near):
        taken.update(range(i - near, i + near + 1))
        dirty.update(range(i - 1, i + 2))

    for i in known:
        mark(i, 2)
    for i in range(1, k - 2):
        sl, sm, sr = s[i - 1], s[i], s[i + 1]
        if i in taken or not np.all(np.isfinite([sl, sm, sr])):
            continue
        lo, hi = min(sl, sr), max(sl, sr)
        tol = KINK_ABS + KINK_REL * max(abs(lo), abs(hi))
        if sm > hi + tol + (hi - lo) or sm < lo - tol - (hi - lo):
            out.append((i, 0.5, "value jumps"))
            mark(i, 2)

    def side(js):
        # The two nearest usable pairs, not across a kink.
        out = []
        for j in js:
            if j in dirty or len(out) == 2:
                break
            if np.isfinite(pair[j]):
                out.append(j)
        return out

    while True:
        best = None
        for i in range(1, k - 2):
            if i in taken or not np.isfinite(pair[i]):
                continue
            left = side(range(i - 2, max(i - 2 - WINDOW, 0), -1))
            right = side(range(i + 2, min(i + 2 + WINDOW, k - 2)))
            if left and right:
                a, b = left[0], right[0]
            else:
                a, b = ((left or right) + [None, None])[:2]
            if a is None:
                bg = 0.0
            elif b is None:
                bg = float(pair[a])
            else:
                w = (xm[i] - xm[a]) / (xm[b] - xm[a])
                bg = float(pair[a] + w * (pair[b] - pair[a]))
            r = pair[i] - bg
            sl = s[i - 1] if np.isfinite(s[i - 1]) else s[i]
            sr = s[i + 1] if np.isfinite(s[i + 1]) else s[i]
            tol = KINK_ABS + KINK_REL * max(abs(sl), abs(sr))
            if abs(r) > tol and (best is None or abs(r) / tol > best[3]):
                theta = float(np.clip((d[i + 1] - 0.5 * bg) / r, 0.0, 1.0))
                best = (i, theta, "slope changes", abs(r) / tol)
        if best is None:
            break
        out.append(best[:3])
        mark(best[0], 2)
    return sorted(out)


def _refine(cfg, prm, objective, brackets):
    """Bisect each ``(lo, hi, kind, before)`` bracket (log-scales) of a switch of exposed
    DP communication (``kind`` ``dp``) or of memory fit (``fit``); returns the located
    log-scales."""
    lo = np.array([b[0] for b in brackets], dtype=float)
    hi = np.array([b[1] for b in brackets], dtype=float)
    for _ in range(ROUNDS):
        grids = [np.linspace(a, b, REFINE + 2) for a, b in zip(lo, hi, strict=True)]
        _, fits, dp = _evaluate(cfg, prm, objective, np.concatenate([g[1:-1] for g in grids]))
        fits, dp = fits.reshape(len(grids), REFINE), dp.reshape(len(grids), REFINE)
        for j, (_, _, kind, before) in enumerate(brackets):
            flag = dp[j] > 0 if kind == "dp" else fits[j]
            hit = np.flatnonzero(flag != before)
            m = hit[0] + 1 if hit.size else REFINE + 1
            lo[j], hi[j] = grids[j][m - 1], grids[j][m]
    return 0.5 * (lo + hi)


def _refine_slopes(cfg, prm, objective, x, slopes, at):
    """Locate each slope change on a finer grid: ``FINE`` evaluations over the segment and
    its two neighbours, the kink split between the two fine points whose second
    differences stand out most from their median (:func:`_slope_kinks`)."""
    todo = [n for n, (_, _, why) in enumerate(slopes) if why == "slope changes"]
    if not todo:
        return at
    grids = []
    for n in todo:
        i = slopes[n][0]
        grids.append(np.linspace(x[max(i - 1, 0)], x[min(i + 2, len(x) - 1)], FINE))
    f, _, _ = _evaluate(cfg, prm, objective, np.concatenate(grids))
    at = list(at)
    for n, g, fv in zip(todo, grids, f.reshape(len(todo), FINE), strict=True):
        with np.errstate(divide="ignore", invalid="ignore"):
            dd = np.diff(np.diff(np.log(fv)) / np.diff(g))
        if not np.all(np.isfinite(dd)):
            continue
        dev = np.abs(dd - np.median(dd))
        p = int(np.argmax(dev))
        q = p + 1 if p + 1 < dev.size and (p == 0 or dev[p + 1] >= dev[p - 1]) else p - 1
        t = dev[q] / (dev[p] + dev[q]) if dev[p] + dev[q] > 0 else 0.0
        at[n] = float(g[p + 1] + t * (g[q + 1] - g[p + 1]))  # dd[p] is at point p + 1
    return at


def one_at_a_time(
    cfg,
    parameter: str,
    objective: str = "step_time",
    factors=None,
    *,
    num: int = 97,
    span: float = 4.0,
) -> Curve:
    """The exact ``objective`` as ``parameter`` alone moves, the strategy fixed.

    Args:
        cfg: the design point (a :class:`~codesign.config.RunConfig`).
        parameter: a parameter name of :func:`~codesign.sensitivity.parameters_of`
            (``tiers[1].bandwidth_gbps``, ``accelerator.hbm_gb``, ``num_accelerators``).
        objective: one of :data:`~codesign.sensitivity.OBJECTIVES`.
        factors: multiplicative factors on the parameter's value (default
            ``geomspace(1 / span, span, num)``).  A discrete parameter takes the valid
            values nearest to them (its lattice: one data-parallel replica, one
            micro-batch per replica, one layer per stage, ...), and its own value.

    Moving ``num_accelerators`` moves ``dp`` and the domain of every tier that spans the
    cluster with it (:func:`~codesign.sensitivity.apply_scales`).  The kinks are found on
    the grid (a switch of exposed DP communication or memory fit between two neighbouring
    points, or a change of the slope ``d ln f / d ln p`` beyond the tolerance of the
    elasticities' kink test) and, for a continuous parameter, a switch is then located by
    bisection on the exact model.

    Example:
        >>> import codesign as cd
        >>> cfg = cd.load_run("experiments/configs/gpt3-175b-a100.toml")
        >>> c = one_at_a_time(cfg, "tiers[1].bandwidth_gbps", num=33, span=8.0)
        >>> [(k.reason, round(k.value)) for k in c.kinks]
        [('exposed DP communication ends', 105)]
    """
    if objective not in OBJECTIVES:
        raise SpecError("objective", objective, f"one of {list(OBJECTIVES)}")
    (prm,) = parameters_of(cfg, names=[parameter])
    if factors is None:
        if not (float(span) > 1.0 and int(num) >= 2):
            raise SpecError("one-at-a-time range", (span, num), "span > 1 and num >= 2")
        factors = np.geomspace(1.0 / span, span, int(num))
    factors = np.asarray(factors, dtype=float).reshape(-1)
    if factors.size == 0 or np.any(~np.isfinite(factors)) or np.any(factors <= 0):
        raise SpecError("factors", factors, "positive finite numbers")
    if prm.discrete:
        values = _discrete_values(cfg, prm, prm.value * factors)
        factors = values / prm.value
    else:
        factors = np.unique(factors)
        values = prm.value * factors
    scales = np.log(factors)
    f, fits, dp = _evaluate(cfg, prm, objective, np.concatenate([scales, [0.0]]))
    reference = float(f[-1])
    f, fits, dp = f[:-1], fits[:-1], dp[:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(f > 0, np.log(np.where(f > 0, f, 1.0)), np.nan)
        s = np.diff(y) / np.diff(scales)

    def side(i):
        return float(s[i]) if 0 <= i < len(s) and np.isfinite(s[i]) else None

    found = []  # (segment, log-scale, reason)
    brackets = []
    for kind, flag in (("dp", dp > 0), ("fit", fits)):
        for i in np.flatnonzero(flag[:-1] != flag[1:]):
            brackets.append((scales[i], scales[i + 1], kind, bool(flag[i]), int(i)))
    if brackets:
        if prm.discrete:
            at = [0.5 * (b[0] + b[1]) for b in brackets]
        else:
            at = _refine(cfg, prm, objective, [b[:4] for b in brackets])
        for b, a in zip(brackets, at, strict=True):
            found.append((b[4], float(a), _switch_reason(b[2], b[3])))
    slopes = _slope_kinks(scales, y, known=[i for i, _, _ in found])
    at = [scales[i] + t * (scales[i + 1] - scales[i]) for i, t, _ in slopes]
    if not prm.discrete:
        at = _refine_slopes(cfg, prm, objective, scales, slopes, at)
    for (_, _, why), a in zip(slopes, at, strict=True):
        j = int(np.clip(np.searchsorted(scales, a) - 1, 0, len(scales) - 2))
        found.append((j, float(a), why))
    kinks = [
        Kink(
            value=prm.value * math.exp(a),
            factor=math.exp(a),
            reason=why,
            between=(float(values[i]), float(values[i + 1])),
            left=side(i - 1),
            right=side(i + 1),
        )
        for i, a, why in sorted(found, key=lambda t: t[1])
    ]
    return Curve(
        parameter=prm.name,
        label=prm.label,
        objective=objective,
        unit=OBJECTIVES[objective][0],
        value=prm.value,
        reference=reference,
        values=values,
        factors=factors,
        objective_values=f,
        fits=fits,
        exposed_dp=dp,
        kinks=kinks,
    )


def plot_curves(curves, ax=None, x: str = "factor"):
    """One or more :class:`Curve` on one axes, log-log: the objective relative to its value
    at the design point against the factor on the parameter (``x="factor"``) or its value
    (``x="value"``), so that the local slope is the elasticity.

    Points where the strategy does not fit in memory are drawn hollow and grey (no line);
    each kink is a dotted vertical line with its reason in small print.
    """
    if isinstance(curves, Curve):
        curves = [curves]
    if x not in ("factor", "value"):
        raise SpecError("x", x, "'factor' or 'value'")
    fig, ax = _new_axes(ax, (7.0, 4.5))
    ax.axhline(1.0, color="k", lw=0.5)
    hollow = False
    trans = ax.get_xaxis_transform()
    for c in curves:
        xs = c.factors if x == "factor" else c.values
        rel = c.relative
        name = c.label if len({cc.objective for cc in curves}) == 1 else f"{c.label}: {c.objective}"
        (line,) = ax.plot(xs, np.where(c.fits, rel, np.nan), lw=1.4, label=name)
        bad = ~c.fits & np.isfinite(rel)
        if bad.any():
            ax.scatter(
                xs[bad],
                rel[bad],
                s=14,
                facecolors="none",
                edgecolors="0.6",
                label=None if hollow else "does not fit in memory",
            )
            hollow = True
        for k in c.kinks:
            xk = k.factor if x == "factor" else k.value
            ax.axvline(xk, color=line.get_color(), ls=":", lw=0.9)
            ax.text(
                xk,
                0.98,
                f" {k.reason}",
                transform=trans,
                rotation=90,
                va="top",
                ha="right",
                fontsize=6,
                color=line.get_color(),
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis, ax.yaxis)
    if x == "factor":
        ax.set_xlabel("factor on the parameter (p / p at the design point)")
    else:
        ax.set_xlabel(curves[0].label if len({c.parameter for c in curves}) == 1 else "value")
    objs = {c.objective for c in curves}
    ylab = (next(iter(objs)).replace("_", " ") if len(objs) == 1 else "objective") + (
        " relative to the design point"
    )
    ax.set_ylabel(ylab)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title("one at a time, strategy fixed (dotted: kinks)", fontsize=9)
    return fig
