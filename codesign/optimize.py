"""Gradient co-design: Optax in ``lax.scan``, multi-start with ``vmap``, exact discretization.

1. **Relaxed search.**  ``K`` random starts (``jax.vmap`` over PRNG keys) each run ``steps``
   iterations of ``clip_by_global_norm -> adam(cosine schedule)`` on the penalized loss of
   :mod:`codesign.relax`, inside ``jax.lax.scan``; the temperature ``tau`` is annealed by an
   ``optax.exponential_decay`` schedule and the penalty weight ``rho`` grows geometrically,
   both evaluated on the step counter and passed as data.  All starts run in one ``jit``;
   the steps are split into a few segments (the same compiled program, called again) only
   to show progress.  By default every start gets one fixed (recompute, ZeRO) combination,
   dealt out round-robin (``enumerate_categorical``): the combinations are separate basins
   (memory fit flips with them), and a softmax mixture of them is a poor guide to any one.
   Each start's allowed options are data (a per-start :class:`relax.Box`), so this costs
   no extra compilation.
2. **Rounding onto valid layouts.**  A *layout* is a value of every axis that decides
   validity (accelerator count, tp, pp, cp, ep, microbatch, interleave; ``dp`` is derived
   as ``N / (tp pp cp)``).  The valid layouts are enumerated once on the host (the sweep's
   divisibility rules: heads by tp, layers by pp x interleave, batch by dp x microbatch,
   experts by ep).  For each of the best ``top_starts`` starts (the best of every
   combination first), the ``nearest_layouts`` valid layouts nearest to its relaxed point in
   log2 distance, with its categorical combination (and every combination on the two
   nearest), times the grid bandwidths bracketing its relaxed bandwidths, are evaluated with
   the **exact** model (memory fit, capex and power checked exactly).  This is the
   power-of-two neighbourhood of the relaxed optimum restricted to valid points; it also
   reaches non-power-of-two values (pp = 3, 7, 9 ... when the grid lists them).
3. **Exact local search.**  From the best rounded points on ``local_starts`` distinct
   layouts (and the best rounding of the best start's own layout), a best-improvement
   search on the grid: the nearest valid layouts, every other categorical combination (also
   on the nearest few layouts), one or two grid steps of one bandwidth (and steps of an
   eighth and a quarter of its axis, so that a refined bandwidth grid keeps moves as large
   as a coarse one's) or one step of two, and layout-bandwidth pairs are evaluated exactly
   in one batch; move to the best, repeat
   until none improves.  Infeasible points rank after feasible ones by how far they exceed
   memory, budget and power, so a rounding just over the budget walks into the feasible set.
   Only valid points count as exact evaluations (``num_exact_evals``); results are memoized.

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

* **sweep**: enumerates its share of the grid (the values of the outermost axis that has at
  least one value per process are dealt out to the processes), sharded over its own devices
  (``jax.local_devices()``: its GPUs, or its CPU cores with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>``), and one
  ``multihost_utils.process_allgather`` at the end merges the top-k, the counts and the
  per-axis profiles, so every process holds the same global result (process 0 prints it);
* **optimize**: runs ``starts`` relaxed starts of its own (keys ``fold_in(key(seed),
  process_id)``), rounds and polishes its best point exactly, and the processes agree on
  the best design with one all-gather; the exact-evaluation counts add up.

The grid is dealt out by process rather than sharded over a global mesh, so no collective
runs during the sweep and results never have to be fetched from another host's devices.
A single process with ``--distributed`` (``CODESIGN_NUM_PROCESSES=1``) gives the same
result as without it.  Checked on one machine with two processes (``127.0.0.1`` as the
coordinator, CPU collectives over gloo): the sweep's optimum, counts and top-k equal the
single-process sweep's.  Not tested across real hosts.
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
    "categorical_combos",
    "Discretizer",
    "local_search",
    "polish_bandwidths",
    "ExactEvaluator",
    "valid_points",
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
    starts: int = 24
    """Random starts (vmapped).  With ``enumerate_categorical`` the starts are dealt out
    round-robin over the allowed (recompute, ZeRO) combinations (at most 12)."""
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
    enumerate_categorical: bool = True
    """Give every start one fixed (recompute, ZeRO) combination instead of relaxing them
    to softmax weights: the combinations are separate basins of the relaxed landscape
    (memory fit flips with them), so each gets starts of its own."""
    top_starts: int = 6
    """How many starts (the best of each combination first) are rounded (4 missed the optimum
    of a 3-tier Llama 3 405B co-design by 5.6 %: its relaxed optimum lies in another basin
    than the exact one; rounding the six best starts finds it)."""
    nearest_layouts: int = 16
    """Rounding takes this many valid layouts nearest to the relaxed point (log2 distance)."""
    local_starts: int = 6
    """The exact local search starts from the best rounded points on this many layouts
    (3 was too few on a 1e9-point grid with a fine NVLink axis: the search from the best
    rounding stopped at 1.07x the optimum; each start costs a few hundred exact evaluations)."""
    local_layouts: int = 12
    """Layout moves of the local search: this many nearest valid layouts."""
    max_local_iters: int = 100
    polish_steps: int = 150
    """Bandwidth polish: relaxed steps over the free tier bandwidths with the layout and
    strategy of a local-search result fixed (0 turns the polish off)."""
    polish_starts: int = 4


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
    start_combos: list = dataclasses.field(default_factory=list)
    """The (recompute, zero) combination of every start (empty when relaxed softly)."""


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
    """``length`` optimizer steps of every start from step ``t0`` (one jit; t0 is data).
    Each start has its own :class:`relax.Box` (the allowed options may differ by start)."""
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

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, 0, None)))


def categorical_combos(problem: Problem) -> list[tuple]:
    """The allowed (recompute, zero) combinations of ``problem``."""
    sv = problem.strategy_values
    return list(itertools.product(sv["recompute"], sv["zero"]))


def relaxed_search(problem: Problem, settings: Settings = Settings(), seed: int = 0, progress=None, key=None, space=None) -> dict:
    """Run the multi-start relaxed optimization; host arrays per start.

    ``progress`` is an optional callable ``progress(done_steps)`` called after each segment.
    """
    space = relax.space_of(problem) if space is None else space
    box = relax.box_of(problem)
    base = relax.base_of(problem)
    k = settings.starts
    boxes = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (k, *jnp.shape(x))), box)
    combos = []
    if settings.enumerate_categorical:
        allowed = categorical_combos(problem)
        combos = [allowed[i % len(allowed)] for i in range(k)]
        rec = np.stack([np.eye(3)[RECOMPUTE_MODES.index(c[0])] for c in combos])
        zer = np.stack([np.eye(4)[ZERO_STAGES.index(c[1])] for c in combos])
        boxes = dataclasses.replace(boxes, recompute_mask=jnp.asarray(rec), zero_mask=jnp.asarray(zer))
    key = jax.random.key(seed) if key is None else key
    keys = jax.random.split(key, k)
    p, st = _compiled_init(settings, space)(keys)
    segs = settings.segments if settings.segments > 0 and settings.steps % settings.segments == 0 else 1
    length = settings.steps // segs
    fn = _compiled_segment(settings, length, space)
    hists = []
    for i in range(segs):
        p, st, h = fn(p, st, jnp.asarray(i * length), boxes, base)
        hists.append(h)
        if progress is not None:
            jax.block_until_ready(h[0])
            progress((i + 1) * length)
    hists = jax.device_get(hists)
    loss = np.concatenate([h[0] for h in hists], axis=1)
    obj = np.concatenate([h[1] for h in hists], axis=1)
    viol = np.concatenate([h[2] for h in hists], axis=1)
    last = hists[-1]
    z = {name: np.asarray(v)[:, -1] for name, v in last[3].items()}
    z["bw"] = np.asarray(last[4])[:, -1, :]
    params = jax.device_get(p)
    weights = []
    for i in range(k):
        w = {}
        for name, mask in (("recompute", boxes.recompute_mask), ("zero", boxes.zero_mask)):
            if name in params:
                w[name] = np.asarray(relax._masked_softmax(jnp.asarray(params[name][i]), mask[i]))
            else:
                w[name] = np.asarray(mask[i]) / max(float(np.sum(mask[i])), 1.0)
        weights.append(w)
    return {
        "params": params,
        "history": loss,
        "objective_history": obj,
        "violation_history": viol,
        "loss": loss[:, -1],
        "objective": obj[:, -1],
        "violation": viol[:, -1],
        "z": z,
        "weights": weights,
        "combos": combos,
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
            # How far an infeasible point is from feasibility (sum of log-ratio excesses),
            # so the local search can walk from an infeasible rounding into the feasible set.
            excess = jax.nn.relu(jnp.log(r.memory_gb["total"] / sy.accelerator.hbm_gb))
            for x, cap in ((r.cost["capex_usd"], bounds[0]), (r.cost["power_kw"], bounds[1])):
                ok = jnp.isfinite(cap)
                excess = excess + jnp.where(ok, jax.nn.relu(jnp.log(x / jnp.where(ok, cap, 1.0))), 0.0)
            excess = jnp.where(valid, jnp.where(feas, 0.0, jnp.maximum(excess, 1e-12)), jnp.inf)
            return jnp.where(feas, obj, jnp.inf), valid, excess

        return jax.vmap(point)(cols)

    return jax.jit(run)


class ExactEvaluator:
    """Exact objective of grid points given as index tuples over ``problem.exhaustive_axes()``.

    Points are evaluated in padded chunks of one size (no recompilation per problem or
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
        self.excess: dict[tuple, float] = {}
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
            vals, valid, excess = self._run(idx)
            for p, v, ok, ex in zip(todo, vals, valid, excess, strict=True):
                self.memo[p] = float(v)
                self.valid[p] = bool(ok)
                self.excess[p] = float(ex)
            self.num_evals += int(np.sum(valid))
        return np.asarray([self.memo[p] for p in points])

    CHUNK = 512
    """Points per call of the compiled evaluator (one shape: one compilation per structure)."""

    def _run(self, idx: np.ndarray):
        n = idx.shape[0]
        m = -(-n // self.CHUNK) * self.CHUNK
        pad = np.concatenate([idx, np.repeat(idx[:1], m - n, axis=0)]) if m > n else idx
        fn = _compiled_exact()
        outs = []
        for i in range(0, m, self.CHUNK):
            cols = {p: jnp.asarray(v) for p, v in self.columns(pad[i : i + self.CHUNK]).items()}
            outs.append(fn(self.base, cols, self.bounds, self.obj_index))
        outs = jax.device_get(outs)
        return tuple(np.concatenate([np.asarray(o[k]) for o in outs])[:n] for k in range(3))

    def keys(self, points) -> list[tuple]:
        """Sort keys: feasible points by objective first, then infeasible ones by how far
        they are from feasibility (invalid points last)."""
        vals = self(points)
        out = []
        for p, v in zip(points, vals, strict=True):
            ex = self.excess[tuple(int(i) for i in p)]
            out.append((0, v) if ex == 0.0 else (1, ex))
        return out

    def point(self, p: tuple) -> dict:
        return {path: vals[i] for path, vals, i in zip(self.paths, self.values, p, strict=True)}


# ------------------------------------------------------------------------------------------
# 2. Rounding onto valid layouts and 3. exact local search
# ------------------------------------------------------------------------------------------

_CATEGORICAL = ("strategy.recompute", "strategy.zero")
_ZKEY = {
    "system.num_accelerators": "n",
    "strategy.tp": "tp",
    "strategy.pp": "pp",
    "strategy.cp": "cp",
    "strategy.ep": "ep",
    "strategy.microbatch": "mb",
    "strategy.interleave": "v",
}


def _bracket(values: list, x: float, radius: int = 0) -> list[int]:
    """Indices of the grid values bracketing ``x`` in log2 (``radius`` more on each side)."""
    v = np.log2(np.asarray(values, dtype=float))
    xv = math.log2(x)
    tol = 1e-6
    below = np.nonzero(v <= xv + tol)[0]
    above = np.nonzero(v >= xv - tol)[0]
    lo = int(below[-1]) if len(below) else 0
    hi = int(above[0]) if len(above) else len(values) - 1
    return list(range(max(0, lo - radius), min(len(values), hi + radius + 1)))


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
        self.bw_axes = [a for a, p in enumerate(paths) if p.startswith("system.tiers[")]
        self.bw_tier = [int(paths[a][len("system.tiers[") : paths[a].index("]")]) for a in self.bw_axes]
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
        self.coords = np.stack([logs[j][self.layouts[:, j]] for j in range(len(logs))], axis=1) if logs else np.zeros((len(self.layouts), 0))
        self._index = {tuple(r): i for i, r in enumerate(self.layouts)}
        self._near: dict[int, np.ndarray] = {}

    def layout_of(self, point: tuple) -> int | None:
        return self._index.get(tuple(point[a] for a in self.layout_axes))

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
        p = [0] * len(self.ev.paths)
        for a, i in zip(self.layout_axes, self.layouts[layout], strict=True):
            p[a] = int(i)
        for a, i in zip(self.cat_axes, cat, strict=True):
            p[a] = int(i)
        for a, i in zip(self.bw_axes, bw, strict=True):
            p[a] = int(i)
        return tuple(p)

    def split(self, point: tuple):
        return (
            self.layout_of(point),
            tuple(point[a] for a in self.cat_axes),
            tuple(point[a] for a in self.bw_axes),
        )

    def relaxed_coord(self, z: dict) -> np.ndarray:
        return np.asarray([float(z[_ZKEY[self.ev.paths[a]]]) for a in self.layout_axes])

    def cat_index(self, combo: tuple) -> tuple:
        """Index tuple over the categorical axes of a (recompute, zero) combination."""
        out = []
        for a in self.cat_axes:
            name = self.ev.paths[a]
            out.append(self.ev.values[a].index(combo[0] if name == "strategy.recompute" else combo[1]))
        return tuple(out)

    def round(self, z: dict, cats: list[tuple], k: int, radius: int = 0, k_all: int = 2) -> list[tuple]:
        """Candidates around one relaxed point: the ``k`` nearest valid layouts x the given
        categorical index tuples x the bracketing bandwidths (+- ``radius`` grid steps), and
        every categorical combination on the ``k_all`` nearest layouts."""
        lays = self.nearest(self.relaxed_coord(z), k)
        bws = list(itertools.product(*[
            _bracket(self.ev.values[a], float(np.asarray(z["bw"])[t]), radius)
            for a, t in zip(self.bw_axes, self.bw_tier, strict=True)
        ]))
        out = [self.compose(int(lay), c, b) for lay in lays for c in cats for b in bws]
        all_cats = list(itertools.product(*[range(self.ev.shape[a]) for a in self.cat_axes]))
        out += [self.compose(int(lay), c, b) for lay in lays[:k_all] for c in all_cats for b in bws]
        return out

    def neighbours(self, point: tuple, k_layouts: int) -> list[tuple]:
        """The local-search neighbourhood of a point (see the module docstring)."""
        lay, cat, bw = self.split(point)
        near = self.near_layouts(lay, k_layouts) if lay is not None else np.zeros(0, np.int64)
        cat_shape = [self.ev.shape[a] for a in self.cat_axes]
        all_cats = list(itertools.product(*[range(n) for n in cat_shape]))
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

        def bw_moves(steps_single, steps_pair):
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
            return out

        out = []
        if lay is not None:
            few = near[: max(1, k_layouts // 3)]
            out += [self.compose(int(m), cat, bw) for m in near]
            out += [self.compose(lay, c, bw) for c in all_cats if c != cat]
            out += [self.compose(int(m), c, bw) for m in few for c in all_cats if c != cat]
            out += [self.compose(lay, cat, b) for b in bw_moves((-2, -1, 1, 2), (-1, 1))]
            out += [self.compose(int(m), cat, b) for m in few for b in bw_moves((-1, 1), ())]
        return out


def local_search(disc: Discretizer, start: tuple, k_layouts: int = 12, max_iters: int = 100, trace=None, progress=None):
    """Best-improvement search on the grid from ``start``; returns ``(point, value, iters)``.

    Points compare by :meth:`ExactEvaluator.keys`, so a search that starts infeasible (a
    rounding just over the budget) first walks into the feasible set."""
    ev = disc.ev
    cur = tuple(start)
    cur_k = ev.keys([cur])[0]
    it = 0
    for it in range(1, max_iters + 1):  # noqa: B007
        nb = disc.neighbours(cur, k_layouts)
        if not nb:
            break
        ks = ev.keys(nb)
        j = min(range(len(nb)), key=lambda i: ks[i])
        improved = ks[j][0] < cur_k[0] or (ks[j][0] == cur_k[0] and ks[j][1] < cur_k[1] * (1.0 - 1e-12))
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


def polish_bandwidths(disc: Discretizer, point: tuple, settings: Settings, seed: int = 0) -> list[tuple]:
    """Candidates from a relaxed search over the free bandwidths only, with the layout and the
    strategy of ``point`` fixed (a hardware-mode sub-problem): the grid values bracketing the
    relaxed bandwidths, +- one step.  Trading bandwidth between tiers along a budget is a
    continuous problem that the gradient solves at any grid resolution, where a grid search
    would need many steps of several axes at once."""
    if not disc.bw_axes or settings.polish_steps <= 0:
        return []
    ev = disc.ev
    vals = ev.point(point)
    changes = {}
    sv = disc.problem.strategy_values
    for k in ("tp", "pp", "cp", "ep", "microbatch", "interleave", "recompute", "zero"):
        changes[k] = [vals[f"strategy.{k}"]] if f"strategy.{k}" in vals else list(sv[k][:1])
    n = vals.get("system.num_accelerators", float(disc.problem.cfg.system.num_accelerators))
    sub = disc.problem.with_values(num_accelerators=[n], mode="hardware", **changes)
    sub_settings = dataclasses.replace(
        settings, steps=settings.polish_steps, starts=settings.polish_starts, segments=1, enumerate_categorical=True
    )
    rs = relaxed_search(sub, sub_settings, seed=seed, space=relax.space_of(sub, fold_units=False))
    ok = np.asarray(rs["violation"]) <= 1e-3
    score = np.where(ok, np.asarray(rs["objective"]), np.inf)
    k = int(np.argmin(score)) if np.isfinite(score).any() else int(np.argmin(rs["loss"]))
    bw = np.asarray(rs["z"]["bw"][k])
    lay, cat, _ = disc.split(point)
    brackets = [_bracket(ev.values[a], float(bw[t]), 1) for a, t in zip(disc.bw_axes, disc.bw_tier, strict=True)]
    return [disc.compose(lay, cat, b) for b in itertools.product(*brackets)]


# ------------------------------------------------------------------------------------------
# The optimizer
# ------------------------------------------------------------------------------------------


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


def optimize(
    problem: Problem,
    settings: Settings = Settings(),
    seed: int = 0,
    max_radius: int = 3,
    progress: bool = False,
    distributed: bool = False,
) -> OptimizeResult:
    """Relaxed multi-start search, then exact rounding onto valid layouts and local search."""
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
    order = _rank_starts(rs, settings)
    top = order[: settings.top_starts]
    best = top[0]
    if bar is not None:
        bar.close()
        bar = tqdm(desc="exact discretization", unit="iter", total=None)
    ev = ExactEvaluator(problem)
    disc = Discretizer(problem, ev)
    trace: list = []
    radius = 0
    while True:
        cands = []
        for k in top:
            z = {name: v[k] for name, v in rs["z"].items()}
            if rs["combos"]:
                cats = [disc.cat_index(rs["combos"][k])]
            else:  # soft weights: the heaviest allowed option of each
                w = rs["weights"][k]
                cats = [tuple(
                    int(np.argmax([w["recompute" if ev.paths[a] == "strategy.recompute" else "zero"][
                        (RECOMPUTE_MODES if ev.paths[a] == "strategy.recompute" else ZERO_STAGES).index(v)] for v in ev.values[a]]))
                    for a in disc.cat_axes
                )]
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
        mine = [j for j in by_key if disc.layout_of(cands[j]) == int(own[0]) and math.isfinite(keys[j][1])]
        if mine:
            starts.append(cands[mine[0]])
    ends = []
    for s0 in starts:
        p_, v_, it_ = local_search(disc, s0, settings.local_layouts, settings.max_local_iters, trace, tick)
        iters += it_
        ends.append((v_, p_))
        if v_ < val:
            pt, val = p_, v_
    # Bandwidth polish of the local optima (best first, distinct layouts), then search again.
    # When the bandwidths are all that is free, the relaxed search above was that polish.
    sp = rs["space"]
    only_bw = not (sp.free_degrees or sp.free_n or sp.free_microbatch or sp.free_ep or sp.free_interleave
                   or sp.free_recompute or sp.free_zero)
    done = set()
    for v_, p_ in ([] if only_bw else sorted(ends, key=lambda e: e[0])):
        if not math.isfinite(v_) or disc.layout_of(p_) in done or len(done) >= 2:
            continue
        done.add(disc.layout_of(p_))
        cands_p = polish_bandwidths(disc, p_, settings, seed)
        if not cands_p:
            break
        vals_p = ev(cands_p)
        j = int(np.argmin(vals_p))
        if vals_p[j] < v_ * (1.0 - 1e-12):
            p2, v2, it_ = local_search(disc, cands_p[j], settings.local_layouts, settings.max_local_iters, trace, tick)
            iters += it_
            if v2 < val:
                pt, val = p2, v2
    n_evals = ev.num_evals
    relaxed_obj = float(rs["objective"][best])
    if distributed and jax.process_count() > 1:
        pt, val, n_evals, relaxed_obj = _allgather_best(pt, val, n_evals, relaxed_obj)
    if bar is not None:
        bar.close()
    t2 = time.perf_counter()
    relaxed_point = {k: 2.0 ** float(v[best]) for k, v in rs["z"].items() if k not in ("bw", "rest")}
    relaxed_point["bw"] = [float(x) for x in np.asarray(rs["z"]["bw"][best])]
    if rs["combos"]:
        relaxed_point["recompute"], relaxed_point["zero"] = rs["combos"][best]
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
        start_combos=list(rs["combos"]),
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
    grid = np.indices(sub_shape).reshape(len(sub), -1).T if sub else np.zeros((1, 0), np.int64)
    full = np.zeros((grid.shape[0], len(ev.paths)), dtype=np.int64)
    full[:, sub] = grid
    ok = np.zeros(grid.shape[0], bool)
    for i in range(0, grid.shape[0], 1 << 16):
        ok[i : i + (1 << 16)] = ev.is_valid(full[i : i + (1 << 16)])
    return grid[ok]


def random_search(
    problem: Problem,
    budget: int,
    seed: int = 0,
    ev: ExactEvaluator | None = None,
    valid: np.ndarray | None = None,
    trace: bool = False,
):
    """Best exact objective among ``budget`` points drawn uniformly without replacement from
    the grid's valid points (seeded).  Returns ``(value, point)``, and with ``trace`` also the
    best-so-far objective after each draw."""
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
    fresh.memo, fresh.valid, fresh.excess, fresh.num_evals = {}, {}, {}, 0
    vals = fresh([tuple(p) for p in pts])
    j = int(np.argmin(vals))
    if trace:
        return float(vals[j]), fresh.point(tuple(pts[j])), np.minimum.accumulate(vals)
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


def _allgather_best(pt: tuple, val: float, n_evals: int, relaxed: float):
    """The best point over all processes, its relaxed objective and the summed evaluations."""
    from jax.experimental import multihost_utils

    g = multihost_utils.process_allgather(
        {
            "pt": np.asarray(pt, dtype=np.int64),
            "val": np.asarray(val, dtype=float),
            "n": np.asarray(n_evals, dtype=np.int64),
            "relaxed": np.asarray(relaxed, dtype=float),
        }
    )
    j = int(np.argmin(g["val"]))
    return tuple(int(i) for i in g["pt"][j]), float(g["val"][j]), int(np.sum(g["n"])), float(g["relaxed"][j])


def distributed_sweep(
    problem: Problem, top_k: int = 5, progress: bool = True, distributed: bool = False, block_size: int = 4096
) -> SweepResult:
    """The exhaustive sweep of ``problem``; with ``distributed`` and several processes, each
    process sweeps its share of the outermost axis on its local devices and the results are
    merged (every process returns the same global result).  ``block_size``: see
    :func:`codesign.sweep.sweep`."""
    axes = problem.exhaustive_axes()
    kw = dict(
        objective=problem.objective,
        capex_max_usd=problem.capex_max_usd,
        power_max_kw=problem.power_max_kw,
        top_k=top_k,
        block_size=block_size,
    )
    nproc = jax.process_count() if distributed else 1
    if nproc == 1:
        return sweep(problem.cfg, axes, progress=progress, **kw)
    from jax.experimental import multihost_utils

    paths = list(axes)
    shape = [len(v) for v in axes.values()]
    # Deal out the values of the outermost axis with at least one value per process.
    split = next((a for a, n in enumerate(shape) if n >= nproc), int(np.argmax(shape)))
    name = paths[split]
    vals = list(axes[name])
    mine = np.array_split(np.arange(len(vals)), nproc)[jax.process_index()]
    if len(mine):
        local_axes = {**axes, name: [vals[i] for i in mine]}
        res = sweep(problem.cfg, local_axes, progress=progress, devices=jax.local_devices(), **kw)
        lshape = [len(v) for v in local_axes.values()]
        if len(res.best_indices):
            loc = list(np.unravel_index(res.best_indices, lshape))
            loc[split] = np.asarray(loc[split]) + mine[0]
            glob = np.ravel_multi_index(loc, shape)
        else:
            glob = np.zeros(0, np.int64)
        bv = np.full(top_k, np.inf)
        bi = np.full(top_k, -1, np.int64)
        bv[: len(res.best_values)] = res.best_values
        bi[: len(glob)] = glob
        prof = [np.full(n, np.inf) for n in shape]
        for a, p in enumerate(paths):
            if a == split:
                prof[a][mine] = res.profiles[p]
            else:
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
