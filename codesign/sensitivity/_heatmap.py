"""Strategy heat maps over two parameters, the strategy re-optimized in every cell.

The best objective over a grid of two parameters, the strategy re-optimized exactly in
every cell, with the boundaries where the best strategy changes.

:func:`heatmap` evaluates every strategy of a grid (:func:`codesign.sensitivity.strategy_grid`)
at every cell exactly (validity, memory fit and the problem's caps,
:func:`codesign.search.exact_point`, through the envelope's compiled program) and
:func:`plot_heatmap` draws it (matplotlib imported when called).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from codesign.search._grid import OBJECTIVES as SEARCH_OBJECTIVES
from codesign.sensitivity._elasticity import OBJECTIVES
from codesign.sensitivity._figures import _new_axes, _plain_log
from codesign.sensitivity._params import parameters_of
from codesign.sensitivity._reoptimize import _strategy_of, strategy_grid, strategy_values_at
from codesign.specs import SpecError

__all__ = ["HeatMap", "heatmap", "plot_heatmap", "strategy_boundaries", "strategy_label"]


@dataclasses.dataclass(frozen=True)
class HeatMap:
    """The best objective over a grid of strategies on a grid of two parameters.

    ``best[i, j]`` is the best ``objective`` at ``values1[i]``, ``values2[j]`` (``inf``
    where no strategy is valid, fits and meets the caps), ``strategy_index[i, j]`` the index
    in ``strategies`` of the strategy that attains it (-1 where none), ``fixed[i, j]`` the
    objective of the run's own strategy (``inf`` where it is infeasible; all ``inf`` when it
    is not in the grid), ``reference`` the best at the cell where both factors are 1 (None
    when the grid has no such cell).
    """

    p1: str
    p2: str
    label1: str
    label2: str
    objective: str
    values1: np.ndarray
    values2: np.ndarray
    factors1: np.ndarray
    factors2: np.ndarray
    best: np.ndarray
    strategy_index: np.ndarray
    strategies: list
    fixed: np.ndarray
    reference: float | None


def strategy_label(d: dict) -> str:
    """The short form of a strategy dict (:func:`~codesign.sensitivity.strategy_grid`):
    ``"tp4 pp8 mb1 sel z1"``; cp, ep and interleave appear when above 1 (etp with ep, unless
    0: as tp), recompute as
    ``sel``/``full`` (nothing for none), ZeRO as ``z<stage>``."""
    parts = [f"tp{d['tp']:g}"]
    for k, short in (("cp", "cp"), ("ep", "ep")):
        if float(d.get(k, 1)) > 1:
            parts.append(f"{short}{d[k]:g}")
    if float(d.get("ep", 1)) > 1 and float(d.get("etp", 0)) > 0:  # 0: as tp
        parts.append(f"etp{d['etp']:g}")
    parts.append(f"pp{d['pp']:g}")
    if float(d.get("interleave", 1)) > 1:
        parts.append(f"v{d['interleave']:g}")
    parts.append(f"mb{d['microbatch']:g}")
    rc = {"none": "", "selective": "sel", "full": "full"}.get(str(d.get("recompute")), "")
    if rc:
        parts.append(rc)
    parts.append(f"z{int(d.get('zero', 0))}")
    return " ".join(parts)


def heatmap(
    cfg,
    p1: str,
    p2: str,
    factors1=None,
    factors2=None,
    objective: str = "time_to_train",
    strategy_values: dict | None = None,
    constraints: dict | None = None,
) -> HeatMap:
    """The best ``objective`` (one of :data:`codesign.search.OBJECTIVES`) over the strategy
    grid at every cell of a grid of two parameters.

    Args:
        cfg: the design point.
        p1, p2: parameter names (:func:`~codesign.sensitivity.parameters_of`).
        factors1, factors2: multiplicative factors on each (default ``geomspace(1/4, 4, 9)``).
            A discrete parameter is evaluated as given: a factor that does not land on a
            valid value leaves every strategy invalid there.
        strategy_values: ``{axis: list}`` of the strategy grid
            (:func:`~codesign.sensitivity.strategy_grid`: default
            :func:`codesign.search.default_values` with the run's own strategy); the strategies
            kept are those valid at the run's hardware.
        constraints: caps by name (:data:`codesign.rules.CONSTRAINTS`).
    """
    if objective not in SEARCH_OBJECTIVES:
        raise SpecError("objective", objective, f"one of {sorted(SEARCH_OBJECTIVES)}")
    if p1 == p2:
        raise SpecError("heat map parameters", (p1, p2), "two different parameters")
    prm1, prm2 = parameters_of(cfg, names=[p1, p2])
    fs = []
    for f in (factors1, factors2):
        f = np.geomspace(0.25, 4.0, 9) if f is None else np.asarray(f, dtype=float).reshape(-1)
        if f.size == 0 or np.any(~np.isfinite(f)) or np.any(f <= 0):
            raise SpecError("factors", f, "positive finite numbers")
        fs.append(np.sort(f))
    f1, f2 = fs
    combos, cols = strategy_grid(cfg, strategy_values)
    g1, g2 = np.meshgrid(np.log(f1), np.log(f2), indexing="ij")
    scales = np.stack([g1.ravel(), g2.ravel()], axis=1)
    if combos:
        vals = strategy_values_at(
            cfg, (prm1.path, prm2.path), scales, cols, objective, constraints
        ).reshape(len(f1), len(f2), len(combos))
    else:
        vals = np.full((len(f1), len(f2), 0), np.inf)
    if vals.shape[-1]:
        idx = np.argmin(vals, axis=-1)
        best = np.take_along_axis(vals, idx[..., None], axis=-1)[..., 0]
    else:
        idx, best = np.zeros(vals.shape[:2], int), np.full(vals.shape[:2], np.inf)
    best = np.where(np.isfinite(best), best, np.inf)
    idx = np.where(np.isfinite(best), idx, -1).astype(int)
    own = _strategy_of(cfg)
    at = [i for i, c in enumerate(combos) if all(own[k] == v for k, v in c.items())]
    fixed = vals[..., at[0]] if at else np.full(best.shape, np.inf)
    i1, i2 = np.flatnonzero(np.isclose(f1, 1.0)), np.flatnonzero(np.isclose(f2, 1.0))
    ref = float(best[i1[0], i2[0]]) if i1.size and i2.size else None
    return HeatMap(
        p1=prm1.name,
        p2=prm2.name,
        label1=prm1.label,
        label2=prm2.label,
        objective=objective,
        values1=prm1.value * f1,
        values2=prm2.value * f2,
        factors1=f1,
        factors2=f2,
        best=best,
        strategy_index=idx,
        strategies=list(combos),
        fixed=np.where(np.isfinite(fixed), fixed, np.inf),
        reference=ref if ref is not None and math.isfinite(ref) else None,
    )


def _edges(v) -> np.ndarray:
    """Cell edges of log-spaced centres ``v`` (geometric midpoints)."""
    v = np.asarray(v, dtype=float)
    if v.size == 1:
        return np.array([v[0] / math.sqrt(2.0), v[0] * math.sqrt(2.0)])
    lv = np.log(v)
    mid = 0.5 * (lv[1:] + lv[:-1])
    return np.exp(np.concatenate([[2 * lv[0] - mid[0]], mid, [2 * lv[-1] - mid[-1]]]))


def strategy_boundaries(hm: HeatMap) -> list:
    """The cell edges between neighbouring cells with different best strategies (or one
    feasible, one not), as segments ``((x0, y0), (x1, y1))`` in parameter values (x:
    ``values1``, y: ``values2``)."""
    xe, ye = _edges(hm.values1), _edges(hm.values2)
    idx = hm.strategy_index
    segs = []
    n1, n2 = idx.shape
    for i in range(n1 - 1):
        for j in range(n2):
            if idx[i, j] != idx[i + 1, j]:
                segs.append(((xe[i + 1], ye[j]), (xe[i + 1], ye[j + 1])))
    for i in range(n1):
        for j in range(n2 - 1):
            if idx[i, j] != idx[i, j + 1]:
                segs.append(((xe[i], ye[j + 1]), (xe[i + 1], ye[j + 1])))
    return segs


def _label_cells(hm: HeatMap, count: int) -> list:
    """``[(i, j, strategy index)]``: for the ``count`` strategies that are best on the most
    cells, the cell of its region nearest the region's centre."""
    idx = hm.strategy_index
    ids, sizes = np.unique(idx[idx >= 0], return_counts=True)
    out = []
    for s in ids[np.argsort(-sizes, kind="stable")][:count]:
        cells = np.argwhere(idx == s)
        c = cells.mean(axis=0)
        i, j = cells[np.argmin(((cells - c) ** 2).sum(axis=1))]
        out.append((int(i), int(j), int(s)))
    return out


def plot_heatmap(hm: HeatMap, ax=None, relative: bool = True, annotate: int = 6):
    """The best objective of a :class:`HeatMap` on log axes (x: the first parameter, y: the
    second), relative to the cell where both factors are 1 when ``relative`` and the grid
    has it; a log colour scale where the values span more than 3x; infeasible cells blank.
    Black lines outline where the best strategy changes, and the ``annotate`` strategies
    that win the most cells are named (:func:`strategy_label`); the design point is marked.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.colors import LogNorm, Normalize

    fig, ax = _new_axes(ax, (7.0, 5.5))
    z = hm.best.astype(float)
    rel = relative and hm.reference is not None
    if rel:
        z = z / hm.reference
    finite = np.isfinite(z) & (z > 0)
    xe, ye = _edges(hm.values1), _edges(hm.values2)
    zm = np.ma.masked_where(~finite, z)
    norm = None
    if finite.any():
        lo, hi = float(z[finite].min()), float(z[finite].max())
        norm = LogNorm(lo, hi) if hi > 3.0 * lo else Normalize(lo, hi)
    mesh = ax.pcolormesh(xe, ye, zm.T, norm=norm, cmap="viridis_r", shading="flat")
    unit = OBJECTIVES.get(hm.objective, ("",))[0]
    name = hm.objective.replace("_", " ")
    cbar = fig.colorbar(
        mesh,
        ax=ax,
        label=f"best {name} relative to the design point" if rel else f"best {name} ({unit})",
    )
    if isinstance(norm, LogNorm):
        _plain_log(cbar.ax.yaxis)
    segs = strategy_boundaries(hm)
    if segs:
        ax.add_collection(LineCollection(segs, colors="k", linewidths=1.2))
    for i, j, s in _label_cells(hm, annotate):
        ax.text(
            hm.values1[i],
            hm.values2[j],
            strategy_label(hm.strategies[s]),
            ha="center",
            va="center",
            fontsize=6,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.75},
        )
    v1 = hm.values1[0] / hm.factors1[0]
    v2 = hm.values2[0] / hm.factors2[0]
    ax.plot([v1], [v2], marker="+", color="r", ms=10, mew=1.5, ls="none", zorder=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis, ax.yaxis)
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])
    ax.set_xlabel(hm.label1)
    ax.set_ylabel(hm.label2)
    ax.set_title(
        f"best {name} over {len(hm.strategies)} strategies (lines: the best strategy changes)",
        fontsize=9,
    )
    return fig
