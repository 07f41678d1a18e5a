"""Gradient co-design: Optax in ``lax.scan``, multi-start with ``vmap``, exact discretization.

1. **Relaxed search.**  ``K`` random starts (``jax.vmap`` over PRNG keys) each run ``steps``
   iterations of ``clip_by_global_norm -> adam(cosine schedule)`` on the penalized loss of
   :mod:`codesign.relax`, inside ``jax.lax.scan``; the temperature ``tau`` is annealed by an
   ``optax.exponential_decay`` schedule and the penalty weight ``rho`` grows geometrically,
   both evaluated on the step counter and passed as data.  All starts run in one ``jit``;
   the steps are split into a few segments (the same compiled program, called again) only
   to show progress.  Everything that describes the problem is data (:class:`relax.Box`),
   so problems with the same number of tiers share one compiled program.
2. **Rounding.**  For the best ``top_starts`` starts, every numeric axis of the problem's
   grid takes the grid values that bracket the relaxed value (in log2 for the degrees: the
   power-of-two neighbourhood ``floor(z) <= log2 v <= ceil(z)``; ``dp`` is derived from
   ``N / (tp pp cp)``), the categorical axes (recompute, ZeRO) their heaviest relaxed
   option; the product of these candidates is evaluated with the **exact** model
   (divisibility, memory fit, capex and power checked exactly).
3. **Exact local search.**  From the best rounded point, a best-improvement search on the
   grid: all points that differ in one axis (one or two grid steps, or any other option of
   a categorical axis) or in two axes (one step each) are evaluated exactly in one batch;
   move to the best, repeat until none improves.  Only valid points count as exact
   evaluations (``num_exact_evals``).

Running on several hosts
------------------------
The exhaustive sweep and the multi-start optimizer run over several hosts through JAX's
multi-process runtime.  Start the same command on every host, with the coordinator's
address, the number of processes and each host's rank in the environment::

    # host 0 (its address is the coordinator's), host 1, ..., host P-1:
    CODESIGN_COORDINATOR=10.0.0.1:12345 CODESIGN_NUM_PROCESSES=4 CODESIGN_PROCESS_ID=0 \\
        codesign sweep experiments/problems/llama3-405b-codesign-3tier.toml --distributed
    CODESIGN_COORDINATOR=10.0.0.1:12345 CODESIGN_NUM_PROCESSES=4 CODESIGN_PROCESS_ID=1 \\
        codesign sweep experiments/problems/llama3-405b-codesign-3tier.toml --distributed
    ...

(``codesign optimize ... --distributed`` likewise.)  ``--distributed`` calls
``jax.distributed.initialize(coordinator_address=..., num_processes=..., process_id=...)``
from these variables before any JAX computation (:func:`initialize_distributed`); without
them, ``jax.distributed.initialize()`` detects SLURM, Open MPI or a TPU pod by itself
(e.g. ``srun -N 4 codesign sweep PROBLEM.toml --distributed``).  Each process then

* **sweep**: enumerates its share of the grid (the values of the grid's outermost axis
  are dealt out to the processes), sharded over its own devices (``jax.local_devices()``),
  and one ``multihost_utils.process_allgather`` at the end merges the top-k, the counts and
  the per-axis profiles, so every process prints the same global result;
* **optimize**: runs ``starts`` relaxed starts of its own (keys ``fold_in(key(seed),
  process_id)``), rounds and polishes its best point exactly, and the processes agree on
  the best design with one all-gather; the exact-evaluation counts add up.

The grid is dealt out by process rather than sharded over a global mesh, so no collective
runs during the sweep and results never have to be fetched from another host's devices.
A single process with ``--distributed`` (``CODESIGN_NUM_PROCESSES=1``) gives the same
result as without it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from codesign import relax
from codesign.config import RunConfig
from codesign.problem import DEGREE_AXES, RELAX_OBJECTIVES, Problem
from codesign.smoothing import EXACT
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES
from codesign.step import Report, evaluate, evaluate_unchecked
from codesign.sweep import OBJECTIVES, SweepResult, _axis_table, set_leaf, sweep, valid_mask

__all__ = [
    "Settings",
    "OptimizeResult",
    "optimize",
    "relaxed_search",
    "round_candidates",
    "local_search",
    "ExactEvaluator",
    "random_search",
    "initialize_distributed",
    "distributed_sweep",
    "exact_objective",
]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Settings:
    """Optimizer settings (static: part of the compiled program)."""

    steps: int = 300
    starts: int = 16
    lr: float = 0.1
    lr_final_frac: float = 0.05
    tau0: float = 0.3
    tau1: float = 0.01
    rho0: float = 3.0
    rho1: float = 300.0
    clip: float = 1.0
    init_scale: float = 1.0
    segments: int = 4
    """The steps run in this many calls of one compiled segment (progress ticks)."""
    top_starts: int = 3
    """How many of the best starts are rounded."""
    max_local_iters: int = 100
    pair_moves: bool = True
    """Also move two axes at once (one step each) in the exact local search."""


@dataclasses.dataclass
class OptimizeResult:
    """What :func:`optimize` returns (host values)."""

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


# ------------------------------------------------------------------------------------------
# 1. Relaxed multi-start search
# ------------------------------------------------------------------------------------------


def _optimizer(s: Settings):
    lr = optax.cosine_decay_schedule(s.lr, s.steps, alpha=s.lr_final_frac)
    opt = optax.chain(optax.clip_by_global_norm(s.clip), optax.adam(lr))
    tau = optax.exponential_decay(s.tau0, s.steps, s.tau1 / s.tau0)
    rho = optax.exponential_decay(s.rho0, s.steps, s.rho1 / s.rho0)
    return opt, tau, rho


@functools.cache
def _compiled_init(settings: Settings, space: relax.Space):
    opt, _, _ = _optimizer(settings)

    def one(key):
        p = relax.init_params(key, space, settings.init_scale)
        return p, opt.init(p)

    return jax.jit(jax.vmap(one))


@functools.cache
def _compiled_segment(settings: Settings, length: int, space: relax.Space):
    """``length`` optimizer steps of every start from step ``t0`` (one jit; t0 is data)."""
    opt, tau_sched, rho_sched = _optimizer(settings)

    def one(p, st, t0, box, base):
        def body(carry, t):
            p, st = carry
            (val, aux), g = jax.value_and_grad(relax.loss_and_aux, has_aux=True)(p, tau_sched(t), rho_sched(t), space, box, base)
            upd, st = opt.update(g, st, p)
            z = {k: v for k, v in aux["z"].items() if k != "bw"}
            out = (val, aux["objective"], jnp.max(aux["violations"]), z, aux["z"]["bw"])
            return (optax.apply_updates(p, upd), st), out

        (p, st), hist = jax.lax.scan(body, (p, st), t0 + jnp.arange(length))
        return p, st, hist

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None, None)))


def relaxed_search(problem: Problem, settings: Settings = Settings(), seed: int = 0, progress=None, key=None) -> dict:
    """Run the multi-start relaxed optimization; host arrays per start.

    ``progress`` is an optional callable ``progress(done_steps)`` called after each segment.
    """
    space = relax.space_of(problem)
    box = relax.box_of(problem)
    base = relax.base_of(problem)
    key = jax.random.key(seed) if key is None else key
    keys = jax.random.split(key, settings.starts)
    p, st = _compiled_init(settings, space)(keys)
    segs = settings.segments if settings.segments > 0 and settings.steps % settings.segments == 0 else 1
    length = settings.steps // segs
    fn = _compiled_segment(settings, length, space)
    hists = []
    for i in range(segs):
        p, st, h = fn(p, st, jnp.asarray(i * length), box, base)
        hists.append(h)
        if progress is not None:
            jax.block_until_ready(h[0])
            progress((i + 1) * length)
    hists = jax.device_get(hists)
    loss = np.concatenate([h[0] for h in hists], axis=1)
    obj = np.concatenate([h[1] for h in hists], axis=1)
    viol = np.concatenate([h[2] for h in hists], axis=1)
    last = hists[-1]
    z = {k: np.asarray(v)[:, -1] for k, v in last[3].items()}
    z["bw"] = np.asarray(last[4])[:, -1, :]
    return {
        "params": jax.device_get(p),
        "history": loss,
        "objective_history": obj,
        "violation_history": viol,
        "loss": loss[:, -1],
        "objective": obj[:, -1],
        "violation": viol[:, -1],
        "z": z,
        "space": space,
    }


# ------------------------------------------------------------------------------------------
# Exact evaluation of explicit grid points (one compiled program per number of tiers)
# ------------------------------------------------------------------------------------------


def _leaf_paths(num_tiers: int) -> tuple[str, ...]:
    return (
        "system.num_accelerators",
        *(f"strategy.{k}" for k in DEGREE_AXES),
        "strategy.recompute",
        "strategy.zero",
        *(f"system.tiers[{i}].bandwidth_gbps" for i in range(num_tiers)),
    )


@functools.cache
def _compiled_exact():
    def run(base, cols, bounds, obj_index):
        def point(vals):
            specs = base
            for path, v in vals.items():
                specs = set_leaf(specs, path, v)
            st, sy = specs["strategy"], specs["system"]
            specs = set_leaf(specs, "strategy.dp", jnp.round(sy.num_accelerators / (st.tp * st.pp * st.cp)))
            r = evaluate_unchecked(specs["model"], specs["training"], specs["system"], specs["strategy"], specs["efficiency"], EXACT)
            valid = valid_mask(specs)
            feas = valid & r.fits & (r.cost["capex_usd"] <= bounds[0]) & (r.cost["power_kw"] <= bounds[1])
            obj = jnp.stack([OBJECTIVES[k](r) for k in RELAX_OBJECTIVES])[obj_index]
            return jnp.where(feas, obj, jnp.inf), valid, feas

        return jax.vmap(point)(cols)

    return jax.jit(run)


class ExactEvaluator:
    """Exact objective of grid points given as index tuples over ``problem.exhaustive_axes()``.

    Points are evaluated in padded batches (bucketed sizes: no recompilation per problem or
    batch) by the exact model with the sweep's validity and feasibility rules; results are
    memoized.  ``num_evals`` counts the distinct *valid* points evaluated.
    """

    def __init__(self, problem: Problem):
        self.problem = problem
        self.axes = problem.exhaustive_axes()
        self.paths = list(self.axes)
        self.values = [list(v) for v in self.axes.values()]
        self.tables = [np.asarray(_axis_table(p, v)) for p, v in self.axes.items()]
        self.shape = tuple(len(v) for v in self.values)
        self.base = relax.base_of(problem)
        self.bounds = jnp.asarray([problem.capex_max_usd, problem.power_max_kw], dtype=jnp.result_type(float))
        self.obj_index = jnp.asarray(RELAX_OBJECTIVES.index(problem.objective))
        self.memo: dict[tuple, float] = {}
        self.valid: dict[tuple, bool] = {}
        self.num_evals = 0
        cfg = problem.cfg
        specs = {"model": cfg.model, "training": cfg.training, "system": cfg.system, "strategy": cfg.strategy}
        from codesign.sweep import get_leaf

        self._defaults = {p: np.asarray(get_leaf(specs, p), dtype=float) for p in _leaf_paths(problem.num_tiers)}

    def columns(self, idx: np.ndarray) -> dict:
        """Leaf values (``{path: (B, ...)}``) of index rows ``idx`` (B, num_axes)."""
        b = idx.shape[0]
        cols = {p: np.broadcast_to(v, (b, *v.shape)).copy() for p, v in self._defaults.items()}
        for a, p in enumerate(self.paths):
            cols[p] = self.tables[a][idx[:, a]]
        return cols

    def is_valid(self, idx: np.ndarray) -> np.ndarray:
        """Validity (divisibility, products) of index rows, on the host."""
        cols = self.columns(np.asarray(idx, dtype=np.int64).reshape(-1, len(self.paths)))
        specs = {"model": self.problem.cfg.model, "training": self.problem.cfg.training,
                 "system": self.problem.cfg.system, "strategy": self.problem.cfg.strategy}
        for p, v in cols.items():
            specs = set_leaf(specs, p, v)
        st, sy = specs["strategy"], specs["system"]
        specs = set_leaf(specs, "strategy.dp", np.round(sy.num_accelerators / (st.tp * st.pp * st.cp)))
        return np.asarray(valid_mask(specs))

    def __call__(self, points) -> np.ndarray:
        """Exact objectives (inf when invalid or infeasible) of a list of index tuples."""
        points = [tuple(int(i) for i in p) for p in points]
        todo = list(dict.fromkeys(p for p in points if p not in self.memo))
        if todo:
            idx = np.asarray(todo, dtype=np.int64)
            vals, valid = self._run(idx)
            for p, v, ok in zip(todo, vals, valid, strict=True):
                self.memo[p] = float(v)
                self.valid[p] = bool(ok)
            self.num_evals += int(np.sum(valid))
        return np.asarray([self.memo[p] for p in points])

    def _run(self, idx: np.ndarray):
        n = idx.shape[0]
        bucket = 256
        while bucket < n:
            bucket *= 2
        pad = np.concatenate([idx, np.repeat(idx[:1], bucket - n, axis=0)]) if bucket > n else idx
        cols = {p: jnp.asarray(v) for p, v in self.columns(pad).items()}
        vals, valid, _ = _compiled_exact()(self.base, cols, self.bounds, self.obj_index)
        vals, valid = jax.device_get((vals, valid))
        return np.asarray(vals)[:n], np.asarray(valid)[:n]

    def point(self, p: tuple) -> dict:
        return {path: vals[i] for path, vals, i in zip(self.paths, self.values, p, strict=True)}


# ------------------------------------------------------------------------------------------
# 2. Rounding and 3. exact local search
# ------------------------------------------------------------------------------------------


def _bracket(values: list, x: float, log: bool, radius: int = 0) -> list[int]:
    """Indices of the grid values bracketing ``x`` (``radius`` more on each side)."""
    v = np.log2(np.asarray(values, dtype=float)) if log else np.asarray(values, dtype=float)
    xv = math.log2(x) if log else x
    tol = 1e-6
    below = np.nonzero(v <= xv + tol)[0]
    above = np.nonzero(v >= xv - tol)[0]
    lo = int(below[-1]) if len(below) else 0
    hi = int(above[0]) if len(above) else len(values) - 1
    return list(range(max(0, lo - radius), min(len(values), hi + radius + 1)))


def _axis_kind(path: str) -> str:
    return "categorical" if path in ("strategy.recompute", "strategy.zero") else "ordered"


def round_candidates(problem: Problem, z: dict, weights: dict | None = None, radius: int = 0) -> list[tuple]:
    """Grid points (index tuples over ``exhaustive_axes``) around one relaxed point ``z``.

    ``z`` holds log2 values ``tp, pp, cp, ep, mb, v, n`` and the bandwidths ``bw`` (GB/s, one
    per tier); ``weights`` the relaxed ``recompute`` and ``zero`` weights (the heaviest allowed
    option is taken; all options when absent).
    """
    per_axis = []
    zkey = {"strategy.tp": "tp", "strategy.pp": "pp", "strategy.cp": "cp", "strategy.ep": "ep",
            "strategy.microbatch": "mb", "strategy.interleave": "v"}
    for path, vals in problem.exhaustive_axes().items():
        if path == "system.num_accelerators":
            per_axis.append(_bracket(vals, 2.0 ** float(z["n"]), log=True, radius=radius))
        elif path in zkey:
            per_axis.append(_bracket(vals, 2.0 ** float(z[zkey[path]]), log=True, radius=radius))
        elif path.startswith("system.tiers["):
            i = int(path[len("system.tiers[") : path.index("]")])
            per_axis.append(_bracket(vals, float(np.asarray(z["bw"])[i]), log=True, radius=radius))
        else:
            names = RECOMPUTE_MODES if path == "strategy.recompute" else ZERO_STAGES
            key = "recompute" if path == "strategy.recompute" else "zero"
            if weights is None or key not in weights:
                per_axis.append(list(range(len(vals))))
            else:
                w = np.asarray(weights[key])
                order = sorted(range(len(vals)), key=lambda j: -w[names.index(vals[j])])
                per_axis.append(order[: 1 + radius])
    return list(itertools.product(*per_axis))


def _neighbours(point: tuple, shape: tuple, kinds: list[str], pairs: bool) -> list[tuple]:
    free = [a for a, n in enumerate(shape) if n > 1]

    def moves(a, steps):
        i, n = point[a], shape[a]
        if kinds[a] == "categorical":
            return [j for j in range(n) if j != i]
        return [i + d for d in steps if 0 <= i + d < n]

    out = []
    for a in free:
        for j in moves(a, (-2, -1, 1, 2)):
            q = list(point)
            q[a] = j
            out.append(tuple(q))
    if pairs:
        for a, b in itertools.combinations(free, 2):
            for ja in moves(a, (-1, 1)):
                for jb in moves(b, (-1, 1)):
                    q = list(point)
                    q[a], q[b] = ja, jb
                    out.append(tuple(q))
    return out


def local_search(ev: ExactEvaluator, start: tuple, max_iters: int = 100, pairs: bool = True, trace=None, progress=None):
    """Best-improvement search on the grid from ``start``; returns ``(point, value, iters)``."""
    kinds = [_axis_kind(p) for p in ev.paths]
    cur = tuple(start)
    cur_v = float(ev([cur])[0])
    it = 0
    for it in range(1, max_iters + 1):  # noqa: B007
        nb = _neighbours(cur, ev.shape, kinds, pairs)
        vals = ev(nb)
        j = int(np.argmin(vals))
        improved = vals[j] < cur_v * (1.0 - 1e-12)
        if improved:
            cur, cur_v = nb[j], float(vals[j])
        if trace is not None:
            trace.append((ev.num_evals, cur_v))
        if progress is not None:
            progress(it, cur_v)
        if not improved:
            break
    return cur, cur_v, it


# ------------------------------------------------------------------------------------------
# The optimizer
# ------------------------------------------------------------------------------------------


def optimize(
    problem: Problem,
    settings: Settings = Settings(),
    seed: int = 0,
    max_radius: int = 3,
    progress: bool = False,
    distributed: bool = False,
) -> OptimizeResult:
    """Relaxed multi-start search, then exact rounding and local search on the grid."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=settings.steps, desc=f"relaxed search ({settings.starts} starts)", unit="step")
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    if distributed and jax.process_count() > 1:
        key = jax.random.fold_in(key, jax.process_index())
    rs = relaxed_search(problem, settings, seed, key=key, progress=(lambda d: bar.update(d - bar.n)) if bar else None)
    t1 = time.perf_counter()
    # Rank the starts: feasible (max violation <= 1e-3) first, then by relaxed objective.
    viol = np.asarray(rs["violation"])
    obj = np.asarray(rs["objective"])
    score = np.where(viol <= 1e-3, obj, np.inf)
    order = np.lexsort((np.asarray(rs["loss"]), score))
    top = [int(k) for k in order[: settings.top_starts]]
    best = top[0]
    ev = ExactEvaluator(problem)
    if bar is not None:
        bar.close()
        bar = tqdm(desc="exact discretization", unit="iter", total=None)
    weights = {}
    box = relax.box_of(problem)
    for k in top:
        p = rs["params"]
        weights[k] = {}
        if "recompute" in p:
            weights[k]["recompute"] = np.asarray(relax._masked_softmax(jnp.asarray(p["recompute"][k]), box.recompute_mask))
        if "zero" in p:
            weights[k]["zero"] = np.asarray(relax._masked_softmax(jnp.asarray(p["zero"][k]), box.zero_mask))
    trace: list = []
    cands, radius = [], 0
    while True:
        cands = []
        for k in top:
            z = {name: v[k] for name, v in rs["z"].items()}
            cands.extend(round_candidates(problem, z, weights[k], radius))
        cands = list(dict.fromkeys(cands))
        vals = ev(cands)
        if np.isfinite(vals).any() or radius >= max_radius:
            break
        radius += 1
    j = int(np.argmin(vals))
    start_pt, rounded = cands[j], float(vals[j])
    trace.append((ev.num_evals, rounded))
    if bar is not None:
        bar.set_postfix_str(f"rounded: {rounded:.6g}")
    iters = 0
    if math.isfinite(rounded):

        def tick(i, v):
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"best {v:.6g}, {ev.num_evals} exact evals")

        pt, val, iters = local_search(ev, start_pt, settings.max_local_iters, settings.pair_moves, trace, tick)
    else:
        pt, val = start_pt, rounded
    n_evals = ev.num_evals
    if distributed and jax.process_count() > 1:
        pt, val, n_evals = _allgather_best(pt, val, n_evals)
    if bar is not None:
        bar.close()
    t2 = time.perf_counter()
    relaxed_obj = float(obj[best])
    relaxed_point = {k: 2.0 ** float(v[best]) for k, v in rs["z"].items() if k not in ("bw", "rest")}
    relaxed_point["bw"] = [float(x) for x in np.asarray(rs["z"]["bw"][best])]
    if math.isfinite(val):
        point = ev.point(pt)
        cfg = _config_of(problem, point)
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
    )


def _config_of(problem: Problem, point: dict) -> RunConfig:
    """The configuration of a grid point (``dp`` derived), via :meth:`SweepResult.config`."""
    axes = {k: [v] for k, v in point.items()}
    res = SweepResult(axes=axes, objective=problem.objective, num_points=1, num_valid=1, num_feasible=1,
                      best_values=np.zeros(1), best_indices=np.zeros(1, np.int64), profiles={}, wall_s=0.0)
    return res.config(0, problem.cfg)


def exact_objective(cfg: RunConfig, objective: str) -> float:
    """The exact objective of a concrete configuration (checked)."""
    return float(OBJECTIVES[objective](evaluate(*cfg.specs())))


# ------------------------------------------------------------------------------------------
# Random search (the equal-budget baseline)
# ------------------------------------------------------------------------------------------


def valid_points(problem: Problem, ev: ExactEvaluator | None = None) -> np.ndarray:
    """Index rows of every valid point of the grid's non-bandwidth axes (bandwidths never
    affect validity), as an ``(M, num_non_bandwidth_axes)`` array."""
    ev = ev or ExactEvaluator(problem)
    sub = [a for a, p in enumerate(ev.paths) if not p.startswith("system.tiers[")]
    sub_shape = [ev.shape[a] for a in sub]
    grid = np.indices(sub_shape).reshape(len(sub), -1).T
    full = np.zeros((grid.shape[0], len(ev.paths)), dtype=np.int64)
    full[:, sub] = grid
    ok = np.zeros(grid.shape[0], bool)
    for i in range(0, grid.shape[0], 1 << 16):
        ok[i : i + (1 << 16)] = ev.is_valid(full[i : i + (1 << 16)])
    return grid[ok]


def random_search(problem: Problem, budget: int, seed: int = 0, ev: ExactEvaluator | None = None, valid: np.ndarray | None = None) -> tuple[float, dict]:
    """Best exact objective among ``budget`` points drawn uniformly without replacement from
    the grid's valid points (seeded).  Returns ``(value, point)``."""
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
    fresh = ExactEvaluator.__new__(ExactEvaluator)
    fresh.__dict__.update(ev.__dict__)
    fresh.memo, fresh.valid, fresh.num_evals = {}, {}, 0
    vals = fresh([tuple(p) for p in pts])
    j = int(np.argmin(vals))
    return float(vals[j]), fresh.point(tuple(pts[j]))


# ------------------------------------------------------------------------------------------
# Several hosts (see the module docstring)
# ------------------------------------------------------------------------------------------


def initialize_distributed() -> None:
    """``jax.distributed.initialize`` from ``CODESIGN_COORDINATOR`` (host:port),
    ``CODESIGN_NUM_PROCESSES`` and ``CODESIGN_PROCESS_ID`` (optionally
    ``CODESIGN_LOCAL_DEVICE_IDS``, comma-separated); without them, JAX's own cluster
    detection (SLURM, Open MPI, TPU pods).  Call before any JAX computation."""
    env = os.environ
    kw = {}
    if env.get("CODESIGN_COORDINATOR"):
        kw["coordinator_address"] = env["CODESIGN_COORDINATOR"]
        kw["num_processes"] = int(env.get("CODESIGN_NUM_PROCESSES", "1"))
        kw["process_id"] = int(env.get("CODESIGN_PROCESS_ID", "0"))
    if env.get("CODESIGN_LOCAL_DEVICE_IDS"):
        kw["local_device_ids"] = [int(x) for x in env["CODESIGN_LOCAL_DEVICE_IDS"].split(",")]
    jax.distributed.initialize(**kw)


def _allgather_best(pt: tuple, val: float, n_evals: int):
    from jax.experimental import multihost_utils

    g = multihost_utils.process_allgather(
        {"pt": np.asarray(pt, dtype=np.int64), "val": np.asarray(val, dtype=float), "n": np.asarray(n_evals, dtype=np.int64)}
    )
    j = int(np.argmin(g["val"]))
    return tuple(int(i) for i in g["pt"][j]), float(g["val"][j]), int(np.sum(g["n"]))


def distributed_sweep(problem: Problem, top_k: int = 5, progress: bool = True, distributed: bool = False) -> SweepResult:
    """The exhaustive sweep of ``problem``; with ``distributed`` and several processes, each
    process sweeps its share of the outermost axis on its local devices and the results are
    merged (every process returns the same global result)."""
    axes = problem.exhaustive_axes()
    kw = dict(objective=problem.objective, capex_max_usd=problem.capex_max_usd, power_max_kw=problem.power_max_kw, top_k=top_k)
    nproc = jax.process_count() if distributed else 1
    if nproc == 1:
        return sweep(problem.cfg, axes, progress=progress, **kw)
    from jax.experimental import multihost_utils

    paths = list(axes)
    first = paths[0]
    vals = list(axes[first])
    shares = np.array_split(np.arange(len(vals)), nproc)
    mine = shares[jax.process_index()]
    shape = [len(v) for v in axes.values()]
    if len(mine):
        local_axes = {**axes, first: [vals[i] for i in mine]}
        res = sweep(problem.cfg, local_axes, progress=progress, devices=jax.local_devices(), **kw)
        lshape = [len(v) for v in local_axes.values()]
        loc = np.unravel_index(res.best_indices, lshape) if len(res.best_indices) else [np.zeros(0, int)] * len(paths)
        glob = np.ravel_multi_index([np.asarray(loc[0]) + mine[0], *loc[1:]], shape) if len(res.best_indices) else np.zeros(0, np.int64)
        bv = np.full(top_k, np.inf)
        bi = np.full(top_k, -1, np.int64)
        bv[: len(res.best_values)] = res.best_values
        bi[: len(glob)] = glob
        prof = [np.full(n, np.inf) for n in shape]
        prof[0][mine] = res.profiles[first]
        for a, p in enumerate(paths[1:], start=1):
            prof[a] = res.profiles[p]
        counts = np.asarray([res.num_valid, res.num_feasible], dtype=np.int64)
        wall = res.wall_s
    else:
        bv, bi = np.full(top_k, np.inf), np.full(top_k, -1, np.int64)
        prof = [np.full(n, np.inf) for n in shape]
        counts, wall = np.zeros(2, np.int64), 0.0
    g = multihost_utils.process_allgather({"bv": bv, "bi": bi, "prof": prof, "counts": counts, "wall": np.asarray(wall)})
    allv, alli = np.asarray(g["bv"]).ravel(), np.asarray(g["bi"]).ravel()
    order = np.argsort(allv, kind="stable")[:top_k]
    keep = order[np.isfinite(allv[order])]
    return SweepResult(
        axes={p: list(axes[p]) for p in paths},
        objective=problem.objective,
        num_points=int(np.prod(shape)),
        num_valid=int(np.asarray(g["counts"])[:, 0].sum()),
        num_feasible=int(np.asarray(g["counts"])[:, 1].sum()),
        best_values=allv[keep],
        best_indices=alli[keep],
        profiles={p: np.asarray(g["prof"][a]).min(axis=0) for a, p in enumerate(paths)},
        wall_s=float(np.max(g["wall"])),
    )
