"""Exact local search on the grid, and the bandwidth polish of its results.

**Exact local search.**  From the best rounded points on ``local_starts`` distinct
layouts (and the best rounding of the best start's own layout), a best-improvement
search on the grid: the nearest valid layouts, every other categorical combination (also
on the nearest few layouts), one or two grid steps of one bandwidth (and steps of an
eighth and a quarter of its axis, so that a refined bandwidth grid keeps moves as large
as a coarse one's) or one or two steps of two at once, and layout-bandwidth pairs are
evaluated exactly in one batch; move to the best, repeat until none improves.  A stalled
search also tries whole-axis layout moves and, on its own layout, every other categorical
combination with the bandwidths searched again for it (a bandwidth-only search that first
walks into the feasible set): under a capex cap, dropping recomputation pays off only once
capacity is bought back from compute, a change no single move makes; and it restarts from
the layouts of those whole-axis moves, and its own, ranked by their best point on a coarse
scan of the bandwidth axes (under a capex cap, a smaller cluster pays off only with the
faster fabric its savings buy, so at the stalled point's bandwidths it ranks far down; and
the own layout's best bandwidths may lie several steps away on three axes at once).
Infeasible points rank after feasible ones by how far they exceed memory, budget and power,
so a rounding just over the budget walks into the feasible set.
Only valid points count as exact evaluations (``num_exact_evals``); results are memoized.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign.search import _relax as relax
from codesign.search._anneal import Settings, relaxed_search
from codesign.search._discretize import Discretizer, bracket
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES

__all__ = ["local_search", "polish_bandwidths"]

STALL_LAYOUTS = 8
"""Distinct layouts from whose best whole-axis moves a stalled search runs its short plain
local searches.  Four missed the optimum of ``llama3-8b-codesign-cost`` (1.6 % above it):
the optimum (128 accelerators, micro-batch 2, ZeRO-3, at 99.8 % of HBM) is a three-way
move from the rounded point (32 accelerators, micro-batch 1, ZeRO-2), and at the
rounded point's bandwidths its layout ranks eighth among the whole-axis moves' layouts
(``experiments/bench_codesign.py``).  More layouts cost more exact evaluations per stall."""


def local_search(
    disc: Discretizer,
    start: tuple,
    k_layouts: int = 12,
    max_iters: int = 100,
    trace=None,
    progress=None,
    deep: bool = True,
    bandwidths_only: bool = False,
):
    """Best-improvement search on the grid from ``start``; returns ``(point, value, iters)``.
    When no neighbour improves and ``deep``, moves along whole layout axes (one, or two at
    once: :meth:`Discretizer.axis_moves`) are tried before stopping.  ``bandwidths_only``:
    only moves of the bandwidth (and hardware) axes, keeping ``start``'s layout and
    categorical combination (recompute, ZeRO, ...).

    Points compare by :meth:`ExactEvaluator.keys`, so a search that starts infeasible (a
    rounding just over the budget) first walks into the feasible set."""
    ev = disc.ev
    cur = tuple(start)
    cur_k = ev.keys([cur])[0]
    it = 0

    def better(a, b):
        return a[0] < b[0] or (a[0] == b[0] and a[1] < b[1] * (1.0 - 1e-12))

    for it in range(1, max_iters + 1):  # noqa: B007
        nb = disc.neighbours(cur, k_layouts, bandwidths_only)
        if not nb:
            break
        ks = ev.keys(nb)
        j = ks.index(min(ks))
        improved = better(ks[j], cur_k)
        if not improved and deep:
            # Stalled: moves along whole axes, one or two at a time (coupled changes) ...
            nb = disc.axis_moves(cur)
            if nb:
                ks = ev.keys(nb)
                j = ks.index(min(ks))
                improved = better(ks[j], cur_k)
            if nb and not improved:
                # ... and, from the best of them on STALL_LAYOUTS distinct layouts, a short
                # plain local search (which also moves the bandwidths: a layout that needs
                # another bandwidth to pay off under a budget).
                order = sorted(range(len(nb)), key=lambda i: ks[i])
                lays: set = set()
                best_q, best_qk = None, cur_k
                for i in order:
                    lay = disc.layout_of(nb[i])
                    if lay in lays or not math.isfinite(ks[i][1]):
                        continue
                    lays.add(lay)
                    q, _, _ = local_search(disc, nb[i], k_layouts, 8, None, None, deep=False)
                    qk = ev.keys([q])[0]
                    if better(qk, best_qk):
                        best_q, best_qk = q, qk
                    if len(lays) >= STALL_LAYOUTS:
                        break
                # ... and from the point's own layout with each other categorical combination
                # (recompute, ZeRO, ...), its best few by key, infeasible ones included: a
                # combination that only pays off with other bandwidths (under a capex cap, no
                # recomputation once capacity is bought back from compute) is reached by the
                # walk into the feasible set, which single moves never start.
                for q0 in _category_starts(disc, cur, 4):
                    q, _, _ = local_search(
                        disc, q0, k_layouts, 12, None, None, deep=False, bandwidths_only=True
                    )
                    qk = ev.keys([q])[0]
                    if better(qk, best_qk):
                        best_q, best_qk = q, qk
                # ... and from the layouts of those moves and the point's own layout, ranked
                # by their best point on a coarse scan of the bandwidth axes (STALL_LAYOUTS of
                # them, where that point, or a bandwidth-only search from one scanned within
                # SCAN_SLACK, is better than the stalled one): under a capex cap, a smaller
                # cluster pays off only with the faster fabric its savings buy, so ranked at
                # the point's own or the cheapest bandwidths it ranks far down (74th of 214
                # layouts for gpt3-175b-h100-nvlink-domain's optimum); and the point's own
                # layout may pay off more on one tier and less on two others at once, a move
                # of three bandwidths that no step makes (the benchmark's 5.5e6-point 3-tier
                # grid: NVLink 225 -> 900 GB/s, scale-out 57 -> 38, cross-building 2.5 -> 1.6).
                scan_pts, scan_ks = [cur, *nb], [cur_k, *ks]
                for q0 in _bandwidth_scan_starts(disc, scan_pts, scan_ks, STALL_LAYOUTS, cur_k):
                    q, _, _ = local_search(disc, q0, k_layouts, 8, None, None, deep=False)
                    qk = ev.keys([q])[0]
                    if better(qk, best_qk):
                        best_q, best_qk = q, qk
                if best_q is not None:
                    nb, ks, j, improved = [best_q], [best_qk], 0, True
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


def _category_starts(disc: Discretizer, point: tuple, k: int) -> list[tuple]:
    """The ``k`` best (by :meth:`ExactEvaluator.keys`) points with ``point``'s layout and
    bandwidths and another categorical combination."""
    lay, cat, bw = disc.split(point)
    if lay is None:
        return []
    pts = [disc.compose(lay, c, bw) for c in disc.all_cats if c != cat]
    if not pts:
        return []
    ks = disc.ev.keys(pts)
    order = sorted(range(len(pts)), key=lambda i: ks[i])
    return [pts[i] for i in order if math.isfinite(ks[i][1])][:k]


SCAN_VALUES = 3
"""Values per bandwidth axis in the stalled search's bandwidth scan (evenly spaced grid
indices, both ends included; every value of a shorter axis).  Five per axis made the
optimizer about twice as slow on the benchmark's 1.06e9-point 3-tier grid (3.8 s against
1.2 s warm, 44,234 exact evaluations against 17,923); three cost 22k and still find the
nvlink-domain optimum."""

SCAN_POINTS = 128
"""At most this many bandwidth combinations per layout in that scan (fewer values per axis
when the axes are many)."""


SCAN_SLACK = 0.05
"""A layout whose best scanned point is within this fraction above the stalled point gets a
short bandwidth-only search from it before the stalled search decides whether to restart
there: three values per axis are up to half a scan step (in log-bandwidth) from the
layout's own best bandwidths, and where the objective is sharp in bandwidth (dollars per
token, the network's capex against its speed) that costs a few percent
(``llama3-70b-usd-per-token``: the optimum's layout scanned 3.8 % above the stalled point,
at 50 GB/s where its optimum is 35 GB/s)."""

SCAN_POLISH_ITERS = 6
"""Iterations of that bandwidth-only search."""


def _scan_indices(n: int, k: int) -> list[int]:
    """``k`` evenly spaced indices of an axis of ``n`` values, both ends included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _bandwidth_scan_starts(
    disc: Discretizer, pts: list, ks: list, k: int, below: tuple | None = None
) -> list[tuple]:
    """Starts for a stalled search: the layouts of ``pts`` (with the two best categorical
    combinations each has among ``pts``, by ``ks``) evaluated on a coarse scan of the
    bandwidth axes (:data:`SCAN_VALUES` per axis, at most :data:`SCAN_POINTS` combinations),
    and the best point of each of the ``k`` best layouts by that scan, feasible first; with
    ``below``, only points whose key is below it (a stalled search restarts only from points
    better than where it stalled, which keeps the scan cheap where the search has converged),
    where layouts whose best scanned point is at most :data:`SCAN_SLACK` above it first get
    a short bandwidth-only search from that point (kept where it ends below).  Nothing when
    the problem has no bandwidth axis."""
    if not disc.bw_axes:
        return []
    sizes = [disc.ev.shape[a] for a in disc.bw_axes]
    per = SCAN_VALUES
    while per > 2 and math.prod(min(n, per) for n in sizes) > SCAN_POINTS:
        per -= 1
    grid = list(itertools.product(*[_scan_indices(n, per) for n in sizes]))
    cats: dict = {}
    for i in sorted(range(len(pts)), key=lambda i: ks[i]):
        if not math.isfinite(ks[i][1]):
            continue
        lay, cat, _ = disc.split(pts[i])
        lst = cats.setdefault(lay, [])
        if cat not in lst and len(lst) < 2:
            lst.append(cat)
    cand = [disc.compose(lay, c, b) for lay, cs in cats.items() for c in cs for b in grid]
    if not cand:
        return []
    cand_lay = [lay for lay, cs in cats.items() for _ in cs for _ in grid]
    ck = disc.ev.keys(cand)
    best: dict = {}
    for q, qk, lay in zip(cand, ck, cand_lay, strict=True):
        if math.isfinite(qk[1]) and (lay not in best or qk < best[lay][1]):
            best[lay] = (q, qk)
    ranked = sorted(best.values(), key=lambda e: e[1])
    if below is None:
        return [q for q, _ in ranked[:k]]
    out = [e for e in ranked if e[1] < below]
    near = [
        q
        for q, qk in ranked
        if not qk < below and qk[0] == below[0] == 0 and qk[1] <= below[1] * (1.0 + SCAN_SLACK)
    ]
    for q in near[:k]:
        q2, _, _ = local_search(
            disc, q, 1, SCAN_POLISH_ITERS, None, None, deep=False, bandwidths_only=True
        )
        qk2 = disc.ev.keys([q2])[0]
        if qk2 < below:
            out.append((q2, qk2))
    return [q for q, _ in sorted(out, key=lambda e: e[1])[:k]]


def _pin(disc: Discretizer, point: tuple, space: relax.Space, box: relax.Box):
    """``adjust`` for :func:`relaxed_search`: every start pinned to the layout, categorical
    choices, platform and placement of ``point`` (box ranges of zero width, one-hot masks,
    saturated logits, degree logits that give the point's degrees exactly), only the
    continuous hardware knobs (``hw``) trained."""
    ev, pb = disc.ev, disc.problem
    vals = ev.point(point)
    cfg = pb.cfg
    st = cfg.strategy

    def get(path, default):
        return float(vals.get(path, default))

    n = get("system.num_accelerators", cfg.system.num_accelerators)
    deg = {d: get(f"strategy.{d}", getattr(st, d)) for d in ("tp", "pp", "cp")}
    deg["dp"] = n / (deg["tp"] * deg["pp"] * deg["cp"])
    pinned = {
        "log2_n": n,
        "log2_mb": get("strategy.microbatch", st.microbatch),
        "log2_ep": get("strategy.ep", st.ep),
        "log2_v": get("strategy.interleave", st.interleave),
        "log2_dom": get("system.tiers[0].domain", cfg.system.tiers[0].domain),
    }
    rec = vals.get("strategy.recompute", pb.strategy_values["recompute"][0])
    zero = vals.get("strategy.zero", pb.strategy_values["zero"][0])

    def adjust(p, boxes):
        k = jax.tree_util.tree_leaves(p)[0].shape[0]
        kw = {
            name: jnp.broadcast_to(jnp.asarray([math.log2(v)] * 2), (k, 2))
            for name, v in pinned.items()
        }
        kw["recompute_mask"] = jnp.broadcast_to(
            jnp.asarray(np.eye(3)[RECOMPUTE_MODES.index(rec)]), (k, 3)
        )
        kw["zero_mask"] = jnp.broadcast_to(jnp.asarray(np.eye(4)[ZERO_STAGES.index(zero)]), (k, 4))
        p = dict(p)
        if "deg" in p:
            fixed = sum(
                math.log2(deg[d]) for d in ("tp", "pp", "cp") if d not in space.free_degrees
            )
            rest = max(math.log2(n) - fixed, 1e-12)
            w = [max(math.log2(deg[d]) / rest, 1e-30) for d in space.softmax_names]
            p["deg"] = jnp.broadcast_to(jnp.log(jnp.asarray(w)), p["deg"].shape)
        for name, path in (("platform", "system.platform"), ("placement", "strategy.placement")):
            if name in p:
                j = ev.values[ev.paths.index(path)].index(vals[path])
                p[name] = jnp.broadcast_to(50.0 * jnp.eye(p[name].shape[1])[j], p[name].shape)
        mask = {key: jnp.zeros_like(v) if key != "hw" else jnp.ones_like(v) for key, v in p.items()}
        return p, dataclasses.replace(boxes, train_mask=mask, **kw)

    return adjust


def polish_bandwidths(
    disc: Discretizer, point: tuple, settings: Settings, seed: int = 0
) -> list[tuple]:
    """Candidates from a relaxed search over the free continuous hardware knobs only
    (bandwidths, latencies, HBM...), with the layout, platform and strategy of ``point``
    pinned: the grid values bracketing the relaxed knobs, +- one step.  Trading bandwidth
    between tiers along a budget is a continuous problem that the gradient solves at any
    grid resolution, where a grid search would need many steps of several axes at once.
    The pinned search is the main search's compiled program (same space and settings; the
    layout is pinned through data), so the polish compiles nothing."""
    if not disc.bw_axes or settings.polish_steps <= 0:
        return []
    ev = disc.ev
    space = relax.space_of(disc.problem)
    rs = relaxed_search(
        disc.problem,
        settings,
        seed=seed,
        space=space,
        adjust=_pin(disc, point, space, relax.box_of(disc.problem)),
        first_segment=settings.segments
        - max(1, round(settings.segments * settings.polish_steps / settings.steps)),
    )
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
