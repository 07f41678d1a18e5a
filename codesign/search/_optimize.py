"""Gradient co-design: relaxed multi-start search, exact rounding, exact local search.

The steps, one module each: :mod:`~codesign.search._anneal` (Optax in ``lax.scan``, starts
vmapped, temperature annealed), :mod:`~codesign.search._discretize` (the valid layouts nearest
each relaxed optimum, evaluated exactly by :class:`~codesign.search._evaluator.ExactEvaluator`),
:mod:`~codesign.search._local` (best-improvement search on the grid and a bandwidth polish) and,
across hosts, :mod:`~codesign.search._distributed` (every process runs its own starts; one
all-gather agrees on the best design).  :func:`optimize` strings them together.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from codesign.config import RunConfig
from codesign.search._anneal import Settings, relaxed_search
from codesign.search._discretize import Discretizer
from codesign.search._distributed import allgather_best
from codesign.search._evaluator import ExactEvaluator
from codesign.search._grid import OBJECTIVES, config_at
from codesign.search._local import local_search, polish_bandwidths
from codesign.search._problem import Problem
from codesign.step import Report, evaluate

__all__ = ["OptimizeResult", "optimize", "exact_objective"]


@dataclasses.dataclass
class OptimizeResult:
    """What :func:`optimize` returns (host values).

    After a run over several processes (``distributed=True``) the design (``exact_objective``,
    ``point``, ``config``, ``report``), ``relaxed_objective`` and ``gap`` are those of the
    winning process and ``num_exact_evals`` is the sum over processes, identical on every
    process; the search's own record (``relaxed_point``, ``best_start``, the histories,
    ``rounded_objective``, ``exact_trace``, ``start_combos``) stays this process's.
    """

    problem: str
    objective: str
    exact_objective: float
    relaxed_objective: float
    gap: float
    """``(exact - relaxed) / exact``."""
    num_exact_evals: int
    config: RunConfig | None
    report: Report | None
    point: dict
    relaxed_point: dict
    history: np.ndarray
    """(starts, steps) loss history."""
    objective_history: np.ndarray
    """(starts, steps) relaxed objective (natural units) at every step."""
    violation_history: np.ndarray
    """(starts, steps) largest constraint violation (log ratio; <= 0 is feasible)."""
    best_start: int
    rounded_objective: float
    """Best exact objective among the rounded candidates (before the local search)."""
    exact_trace: list
    """``[(exact evaluations so far, best exact objective so far)]`` after rounding and after
    every local-search iteration."""
    wall_s: float
    relaxed_wall_s: float
    exact_wall_s: float
    local_iters: int = 0
    start_combos: list = dataclasses.field(default_factory=list)
    """The (recompute, zero) combination of every start (empty when relaxed softly)."""
    method: str = "relaxed"
    """``relaxed`` (this function) or ``sweep`` (:func:`codesign.search.solve` swept the grid)."""


def _rank_starts(rs: dict, settings: Settings) -> list[int]:
    """Starts ordered for rounding: feasible before infeasible, the best start of every
    categorical combination before the second best of any, then by relaxed objective."""
    viol = np.asarray(rs["violation"])
    obj = np.asarray(rs["objective"])
    score = np.where(viol <= 1e-3, obj, np.inf)
    order = [int(i) for i in np.lexsort((np.asarray(rs["loss"]), score))]
    if not rs["combos"]:
        return order
    seen, first, rest = set(), [], []
    for i in order:
        (rest if rs["combos"][i] in seen else first).append(i)
        seen.add(rs["combos"][i])
    return first + rest


_DEFAULT_SETTINGS = Settings()


def optimize(
    problem: Problem,
    settings: Settings = _DEFAULT_SETTINGS,
    seed: int = 0,
    max_radius: int = 3,
    progress: bool = False,
    distributed: bool = False,
) -> OptimizeResult:
    """Relaxed multi-start search, then exact rounding onto valid layouts and local search.

    A problem with several MoE capacity factors (``Problem.capacity_factors``) or expert
    tensor-parallel degrees (``strategy_values["etp"]``) is searched once per value and the
    best exact design kept (:func:`_each_choice`)."""
    enumerated = (  # (strategy leaf, its values, the with_values keyword)
        ("moe_capacity_factor", problem.capacity_factors, "capacity_factors"),
        ("etp", problem.strategy_values["etp"], "etp"),
    )
    for key, values, axis in enumerated:
        if len(values) > 1:
            return _each_choice(
                problem, key, values, axis, settings, seed, max_radius, progress, distributed
            )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=settings.steps, desc=f"relaxed search ({settings.starts} starts)", unit="step"
        )
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    if distributed and jax.process_count() > 1:
        key = jax.random.fold_in(key, jax.process_index())
    rs = relaxed_search(
        problem,
        settings,
        seed,
        key=key,
        progress=(lambda d: bar.update(d - bar.n)) if bar else None,
    )
    t1 = time.perf_counter()
    order = _rank_starts(rs, settings)
    top = order[: settings.top_starts]
    best = top[0]
    if bar is not None:
        bar.close()
        bar = tqdm(desc="exact discretization", unit="iter", total=None)
    ev = ExactEvaluator(problem, fast_compile=settings.fast_compile)
    disc = Discretizer(problem, ev)
    trace: list = []
    radius = 0
    while True:
        cands = []
        for k in top:
            z = {name: v[k] for name, v in rs["z"].items()}
            cats = [disc.cat_index(rs["combos"][k] if rs["combos"] else None, rs["weights"][k])]
            cands.extend(disc.round(z, cats, settings.nearest_layouts * (1 + radius), radius))
        cands = list(dict.fromkeys(cands))
        vals = ev(cands)
        keys = ev.keys(cands)
        if any(math.isfinite(k[1]) for k in keys) or radius >= max_radius:
            break
        radius += 1
    j0 = int(np.argmin(vals))
    rounded = float(vals[j0])
    trace.append((ev.num_evals, rounded))
    if bar is not None:
        bar.set_postfix_str(f"rounded: {rounded:.6g}")
    pt, val, iters = cands[j0], rounded, 0

    def tick(i, v):
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"best {min(v, val):.6g}, {ev.num_evals} exact evals")

    # Local-search starts: the best rounded points on distinct layouts (feasible first, then
    # the least infeasible), and the best rounding on the layout nearest the best relaxed point.
    by_key = sorted(range(len(cands)), key=lambda i: keys[i])
    starts, lays = [], set()
    for j in by_key:
        if len(starts) >= settings.local_starts or not math.isfinite(keys[j][1]):
            break
        lay = disc.layout_of(cands[j])
        if lay not in lays:
            lays.add(lay)
            starts.append(cands[j])
    z0 = {name: v[best] for name, v in rs["z"].items()}
    own = disc.nearest(disc.relaxed_coord(z0), 1)
    if len(own) and int(own[0]) not in lays:
        mine = [
            j
            for j in by_key
            if disc.layout_of(cands[j]) == int(own[0]) and math.isfinite(keys[j][1])
        ]
        if mine:
            starts.append(cands[mine[0]])
    ends = []
    for s0 in starts:
        p_, v_, it_ = local_search(
            disc, s0, settings.local_layouts, settings.max_local_iters, trace, tick
        )
        iters += it_
        ends.append((v_, p_))
        if v_ < val:
            pt, val = p_, v_
    # Bandwidth polish of the local optima (best first, distinct layouts), then search again.
    # When the bandwidths are all that is free, the relaxed search above was that polish.
    sp = rs["space"]
    only_bw = not (
        sp.free_degrees
        or sp.free_n
        or sp.free_microbatch
        or sp.free_ep
        or sp.free_interleave
        or sp.free_recompute
        or sp.free_zero
    )
    done = set()
    for v_, p_ in [] if only_bw else sorted(ends, key=lambda e: e[0]):
        if not math.isfinite(v_) or disc.layout_of(p_) in done or len(done) >= 2:
            continue
        done.add(disc.layout_of(p_))
        cands_p = polish_bandwidths(disc, p_, settings, seed)
        if not cands_p:
            break
        vals_p = ev(cands_p)
        j = int(np.argmin(vals_p))
        if vals_p[j] < v_ * (1.0 - 1e-12):
            p2, v2, it_ = local_search(
                disc, cands_p[j], settings.local_layouts, settings.max_local_iters, trace, tick
            )
            iters += it_
            if v2 < val:
                pt, val = p2, v2
    n_evals = ev.num_evals
    relaxed_obj = float(rs["objective"][best])
    if distributed and jax.process_count() > 1:
        pt, val, n_evals, relaxed_obj = allgather_best(pt, val, n_evals, relaxed_obj)
    if bar is not None:
        bar.close()
    t2 = time.perf_counter()
    relaxed_point = {
        k: 2.0 ** float(v[best])
        for k, v in rs["z"].items()
        if k not in ("hw", "rest") and not k.startswith("w_")
    }
    relaxed_point["hw"] = {
        p: float(x)
        for p, x in zip(rs["space"].free_hw, np.asarray(rs["z"]["hw"][best]), strict=True)
    }
    for name in ("platform", "placement"):
        if f"w_{name}" in rs["z"]:
            relaxed_point[f"{name}_weights"] = [float(x) for x in rs["z"][f"w_{name}"][best]]
    if rs["combos"]:
        relaxed_point["recompute"], relaxed_point["zero"] = rs["combos"][best]
    if math.isfinite(val):
        point = ev.point(pt)
        cfg = config_at(problem.cfg, point)
        report = evaluate(*cfg.specs())
    else:
        cfg, report, point = None, None, {}
    return OptimizeResult(
        problem=problem.name,
        objective=problem.objective,
        exact_objective=val,
        relaxed_objective=relaxed_obj,
        gap=(val - relaxed_obj) / val if math.isfinite(val) else math.inf,
        num_exact_evals=n_evals,
        config=cfg,
        report=report,
        point=point,
        relaxed_point=relaxed_point,
        history=np.asarray(rs["history"]),
        objective_history=np.asarray(rs["objective_history"]),
        violation_history=np.asarray(rs["violation_history"]),
        best_start=best,
        rounded_objective=rounded,
        exact_trace=trace,
        wall_s=t2 - t0,
        relaxed_wall_s=t1 - t0,
        exact_wall_s=t2 - t1,
        local_iters=iters,
        start_combos=list(rs["combos"]),
    )


def _each_choice(
    problem, key, values, axis, settings, seed, max_radius, progress, distributed
) -> OptimizeResult:
    """:func:`optimize` once per value of an enumerated strategy choice of ``problem``
    (``strategy.<key>``, set through ``problem.with_values(<axis>=[value])``), the best exact
    design kept (the first value on a tie; every design infeasible: the first value's result).

    Dropless routing (capacity factor 0) and padding to ``c`` times the balanced load are two
    modes of the dispatcher (``codesign.workload.moe_load``), not two ends of a range: a soft
    mixture of their factors would describe neither.  The expert tensor-parallel degrees
    (``etp``) are few (``0``, "as tp", and small powers of two), each a different sharding of
    the experts.  So both are enumerated, not relaxed.  The exact evaluations of all searches
    are counted, and the trace runs through them in turn."""
    t0 = time.perf_counter()
    runs = [
        optimize(
            problem.with_values(**{axis: [v]}),
            settings,
            seed=seed,
            max_radius=max_radius,
            progress=progress,
            distributed=distributed,
        )
        for v in values
    ]
    j = int(np.argmin([r.exact_objective for r in runs]))
    trace, offset, best = [], 0, math.inf
    for r in runs:
        for n, v in r.exact_trace:
            best = min(best, v)
            trace.append((offset + n, best))
        offset += r.num_exact_evals
    c = float(values[j])
    win = runs[j]
    return dataclasses.replace(
        win,
        problem=problem.name,
        point={**win.point, f"strategy.{key}": c} if win.point else {},
        relaxed_point={**win.relaxed_point, key: c},
        num_exact_evals=sum(r.num_exact_evals for r in runs),
        exact_trace=trace,
        rounded_objective=min(r.rounded_objective for r in runs),
        wall_s=time.perf_counter() - t0,
        relaxed_wall_s=sum(r.relaxed_wall_s for r in runs),
        exact_wall_s=sum(r.exact_wall_s for r in runs),
        local_iters=sum(r.local_iters for r in runs),
    )


def exact_objective(cfg: RunConfig, objective: str) -> float:
    """The exact objective of a concrete configuration (checked)."""
    return float(OBJECTIVES[objective](evaluate(*cfg.specs())))
