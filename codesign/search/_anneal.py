"""The relaxed multi-start search: Optax in ``lax.scan``, starts vmapped, temperature annealed.

**Relaxed search.**  ``K`` random starts (``jax.vmap`` over PRNG keys) each run ``steps``
iterations of ``clip_by_global_norm -> adam(cosine schedule)`` on the penalized loss of
:mod:`codesign.search.relax`, inside ``jax.lax.scan``; the temperature ``tau`` is annealed by an
``optax.exponential_decay`` schedule and the penalty weight ``rho`` grows geometrically,
both evaluated on the step counter and passed as data.  All starts run in one ``jit``;
the steps are split into a few segments (the same compiled program, called again) only
to show progress.  By default every start gets one fixed (recompute, ZeRO) combination,
dealt out round-robin (``enumerate_categorical``): the combinations are separate basins
(memory fit flips with them), and a softmax mixture of them is a poor guide to any one.
Each start's allowed options are data (a per-start :class:`relax.Box`), so this costs
no extra compilation.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from codesign._compile import jit
from codesign.search import _relax as relax
from codesign.search._problem import Problem
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES

__all__ = ["Settings", "relaxed_search", "categorical_combos"]


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
    """Hardware polish: relaxed steps over the free continuous hardware knobs with the layout
    and strategy of a local-search result pinned (0 turns the polish off); it runs the last
    segments of the main search's compiled program, with every start."""
    fast_compile: bool = False
    """Compile the relaxed search without XLA's backend optimizations: about half the
    compile time, a few times slower per step (worth it when the search runs once)."""
    polish_starts: int = 4
    """Unused (the polish runs every start of the compiled search); kept for old callers."""


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

    return jit(jax.vmap(one))


@functools.cache
def _compiled_segment(settings: Settings, length: int, space: relax.Space):
    """``length`` optimizer steps of every start from step ``t0`` (one jit; t0 is data).
    Each start has its own :class:`relax.Box` (the allowed options may differ by start)."""
    opt, tau_sched, rho_sched = _optimizer(settings)

    def one(p, st, t0, box, base):
        def body(carry, t):
            p, st = carry
            (val, aux), g = jax.value_and_grad(relax.loss_and_aux, has_aux=True)(
                p, tau_sched(t), rho_sched(t), space, box, base
            )
            upd, st = opt.update(g, st, p)
            upd = jax.tree_util.tree_map(lambda u, m: u * m, upd, box.train_mask)
            out = (val, aux["objective"], jnp.max(aux["violations"]), aux["z"])
            return (optax.apply_updates(p, upd), st), out

        (p, st), hist = jax.lax.scan(body, (p, st), t0 + jnp.arange(length))
        return p, st, hist

    opts = {"xla_backend_optimization_level": 0} if settings.fast_compile else None
    return jit(jax.vmap(one, in_axes=(0, 0, None, 0, None)), compiler_options=opts)


def categorical_combos(problem: Problem) -> list[tuple]:
    """The allowed (recompute, zero) combinations of ``problem``."""
    sv = problem.strategy_values
    return list(itertools.product(sv["recompute"], sv["zero"]))


def relaxed_search(
    problem: Problem,
    settings: Settings = Settings(),
    seed: int = 0,
    progress=None,
    key=None,
    space=None,
    adjust=None,
    first_segment: int = 0,
) -> dict:
    """Run the multi-start relaxed optimization; host arrays per start.

    ``progress`` is an optional callable ``progress(done_steps)`` called after each segment.
    ``adjust(params, boxes) -> (params, boxes)`` may change the initial parameters and the
    per-start boxes (with ``train_mask``) before the run, without recompiling: the polish
    of :func:`codesign.search._local.polish_bandwidths` pins a layout that way, and runs only
    the last segments (``first_segment``: the later, colder part of the temperature and
    penalty schedules, with a fresh learning-rate schedule).
    """
    space = relax.space_of(problem) if space is None else space
    box = relax.box_of(problem)
    base = relax.base_of(problem)
    k = settings.starts
    boxes = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (k, *jnp.shape(x))), box)
    combos = []
    if settings.enumerate_categorical and adjust is None:
        allowed = categorical_combos(problem)
        combos = [allowed[i % len(allowed)] for i in range(k)]
        rec = np.stack([np.eye(3)[RECOMPUTE_MODES.index(c[0])] for c in combos])
        zer = np.stack([np.eye(4)[ZERO_STAGES.index(c[1])] for c in combos])
        boxes = dataclasses.replace(
            boxes, recompute_mask=jnp.asarray(rec), zero_mask=jnp.asarray(zer)
        )
    key = jax.random.key(seed) if key is None else key
    keys = jax.random.split(key, k)
    p, st = _compiled_init(settings, space)(keys)
    boxes = dataclasses.replace(
        boxes, train_mask=jax.tree_util.tree_map(lambda x: jnp.ones_like(x), p)
    )
    if adjust is not None:
        p, boxes = adjust(p, boxes)
    segs = (
        settings.segments
        if settings.segments > 0 and settings.steps % settings.segments == 0
        else 1
    )
    length = settings.steps // segs
    fn = _compiled_segment(settings, length, space)
    hists = []
    for i in range(min(first_segment, segs - 1), segs):
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
    params = jax.device_get(p)
    soft = {}  # every start's weights at once (softmax over the last axis)
    for name, mask in (("recompute", boxes.recompute_mask), ("zero", boxes.zero_mask)):
        mask = np.asarray(mask)
        if name in params:
            soft[name] = np.asarray(relax.masked_softmax(jnp.asarray(params[name]), mask))
        else:
            soft[name] = mask / np.maximum(np.sum(mask, axis=-1, keepdims=True), 1.0)
    weights = []
    for i in range(k):
        w = {name: soft[name][i] for name in ("recompute", "zero")}
        for name in ("platform", "placement"):
            if f"w_{name}" in z:
                w[name] = np.asarray(z[f"w_{name}"][i])
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
