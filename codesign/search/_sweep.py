"""The exhaustive sweep: every point of a grid, evaluated exactly and reduced on the device.

A grid is a dict of axes, each a leaf path and its values (:mod:`codesign.search._grid`)::

    {"strategy.tp": [1, 2, 4, 8], "strategy.pp": [1, 2, 4, 8, 16],
     "strategy.recompute": ["none", "selective", "full"],
     "system.tiers[1].bandwidth_gbps": [25, 50, 100]}

The Cartesian product is never materialized: each flat index is decoded on the device
(``jnp.unravel_index``) into per-axis value tables, the configuration is built by replacing
leaves of the base specs, judged by the exact evaluator
(:func:`codesign.search._evaluator.exact_point`: the exact model, the validity rules and the
feasibility of :mod:`codesign.rules`), and reduced on the device: a running top-k of the objective, counts, and for every axis the best objective at
each of its values (a "profile").  Chunks of ``batch_size`` points are vmapped inside a
``lax.scan`` (bounded memory); super-chunks are sharded over all JAX devices with
``jax.shard_map`` and looped over in Python with a progress bar.  ``strategy.dp`` is derived
as ``num_accelerators / (tp pp cp)`` unless it is an axis.

Example:
    >>> import codesign as cd
    >>> from codesign.search import sweep
    >>> cfg = cd.config.load_run_dict({"model": {"preset": "llama3-8b"},
    ...     "training": {"global_batch": 512},
    ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
    ...     "strategy": {"tp": 1, "pp": 1, "dp": 64}})
    >>> res = sweep(cfg, {"strategy.tp": [1, 2, 4, 8], "strategy.pp": [1, 2, 4]}, progress=False)
    >>> res.num_points, res.num_valid
    (12, 12)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from codesign._compile import jit
from codesign.rules import CONSTRAINTS, active_constraints, caps_of, with_derived_dp
from codesign.search._evaluator import CHECKS, base_specs, exact_point
from codesign.search._grid import OBJECTIVES, axis_table, config_at, set_leaf, take
from codesign.specs import SpecError

__all__ = ["SweepResult", "sweep"]


@dataclasses.dataclass
class SweepResult:
    """What a sweep returns (host numpy arrays)."""

    axes: dict
    objective: str
    num_points: int
    num_valid: int
    num_feasible: int
    best_values: np.ndarray
    best_indices: np.ndarray
    profiles: dict
    wall_s: float
    counts: dict = dataclasses.field(default_factory=dict)
    """Points per check of :data:`~codesign.search._evaluator.CHECKS` (``valid``, ``feasible``,
    and among valid points ``fits`` and one ``within_*`` per constraint)."""

    def point(self, i: int) -> dict:
        """The axis values of the ``i``-th best point."""
        idx = np.unravel_index(int(self.best_indices[i]), [len(v) for v in self.axes.values()])
        return {k: v[j] for (k, v), j in zip(self.axes.items(), idx, strict=True)}

    def best(self) -> dict:
        """The axis values of the best point."""
        return self.point(0)

    def config(self, i: int, cfg):
        """The :class:`~codesign.config.RunConfig` of the ``i``-th best point (``dp`` derived)."""
        return config_at(cfg, self.point(i))


def _split_point(shape, max_block: int) -> int:
    """First axis of the inner block: the trailing axes whose product fits ``max_block``, and
    one more while the block is under a quarter of it and stays within 4 ``max_block`` (each
    scan step has a fixed cost, which would dominate a small block).

    >>> _split_point((5, 7, 8, 6, 3, 4, 2, 2, 2), 4096)  # 576 -> 4,608 points a block
    2
    """
    p, inner = len(shape), 1
    while p > 0 and (
        inner * shape[p - 1] <= max_block
        or (inner < max_block // 4 and inner * shape[p - 1] <= 4 * max_block)
    ):
        p -= 1
        inner *= shape[p]
    return p


@functools.cache
def _compiled_call(
    treedef, paths, shape, split, derive_dp, objective, k, n_steps, devices, n_checks, active
):
    """One compiled, sharded reducer per grid structure (values are arguments: no recompile).

    The grid is split into outer axes ``shape[:split]`` and an inner block ``shape[split:]``.
    Each scan step takes one outer point (decoded as scalars) and vmaps the model over the
    whole inner block, so everything that depends only on outer axes is computed once per
    step rather than once per point (vmap leaves unbatched values unbatched).
    """
    outer_shape, inner_shape = shape[:split], shape[split:]
    n_outer = int(np.prod(outer_shape))
    inner = int(np.prod(inner_shape))

    def point(specs, bounds):
        value, checks, _ = exact_point(specs, bounds, objective, active)
        return value, checks[:n_checks]  # the others are compiled away

    def with_dp(specs):
        return with_derived_dp(specs) if derive_dp else specs

    def run(base, tables, inner_vals, inner_idx, bounds, start):
        dtype = jnp.result_type(float)
        itype = start.dtype
        init = (
            jnp.full((k,), jnp.inf, dtype),
            jnp.full((k,), -1, itype),
            jnp.zeros((n_checks,), itype),
            tuple(jnp.full((n,), jnp.inf, dtype) for n in shape),
        )

        def body(carry, c):
            best_v, best_i, counts, prof = carry
            o = start + c
            in_range = o < n_outer
            o_multi = jnp.unravel_index(jnp.minimum(o, n_outer - 1), outer_shape) if split else ()
            specs = base
            for path, table, i in zip(paths[:split], tables[:split], o_multi, strict=True):
                specs = set_leaf(specs, path, take(table, i))

            def inner_point(vals):
                sp = specs
                for path, v in zip(paths[split:], vals, strict=True):
                    sp = set_leaf(sp, path, v)
                return point(with_dp(sp), bounds)

            val, checks = jax.vmap(inner_point)(inner_vals)
            val = jnp.where(in_range, val, jnp.inf)
            checks = tuple(c & in_range for c in checks)
            vmin = jnp.min(val)

            def merged(best):
                allv = jnp.concatenate([best[0], val])
                alli = jnp.concatenate([best[1], o * inner + jnp.arange(inner, dtype=itype)])
                neg, pos = jax.lax.top_k(-allv, k)
                return -neg, alli[pos]

            # A block whose best is no better than the k-th kept one changes nothing (ties
            # keep the earlier point, as top_k does): skip the merge, most blocks do.
            best_v, best_i = jax.lax.cond(
                vmin < best_v[-1], merged, lambda best: best, (best_v, best_i)
            )
            new_prof = []
            for a, p in enumerate(prof):
                if a < split:
                    new_prof.append(p.at[o_multi[a]].min(vmin))
                else:
                    seg = jax.ops.segment_min(val, inner_idx[a - split], num_segments=p.shape[0])
                    new_prof.append(jnp.minimum(p, seg))
            counts = counts + jnp.stack([c.sum(dtype=itype) for c in checks])
            return (best_v, best_i, counts, tuple(new_prof)), None

        out, _ = jax.lax.scan(body, init, jnp.arange(n_steps, dtype=start.dtype))
        return out

    mesh = Mesh(np.array(devices), ("d",))
    rep, spec = PartitionSpec(), PartitionSpec("d")

    def sharded(base, tables, inner_vals, inner_idx, bounds, starts):
        out = run(base, tables, inner_vals, inner_idx, bounds, starts[0])
        return jax.tree_util.tree_map(lambda x: x[None], out)

    return jit(
        jax.shard_map(
            sharded,
            mesh=mesh,
            in_specs=(rep, rep, rep, rep, rep, spec),
            out_specs=spec,
            check_vma=False,
        )
    )


def sweep(
    cfg,
    axes: dict,
    *,
    objective: str = "step_time",
    top_k: int = 10,
    block_size: int = 4096,
    steps_per_call: int = 256,
    capex_max_usd: float = math.inf,
    power_max_kw: float = math.inf,
    constraints: dict | None = None,
    progress: bool = True,
    devices=None,
    diagnose: bool = False,
) -> SweepResult:
    """Evaluate every point of the grid ``axes`` around the base run ``cfg`` (a RunConfig).

    Put the axes that are cheap to vary (network bandwidths, latencies, prices) last: the
    trailing axes whose product fits ``block_size`` form the vmapped inner block, and the
    model's work that depends only on the other (outer) axes is done once per block.

    Args:
        cfg: the base configuration; every leaf not on an axis keeps its value.
        axes: ``{leaf path: list of values}`` (see the module docstring).
        objective: one of :data:`OBJECTIVES` (minimized); infeasible points count as ``inf``.
        top_k: how many best points to return.
        block_size: points of one vmapped inner block, at most (memory is ``O(block_size)``;
            a block under a quarter of it takes one more axis, up to ``4 block_size``).
        steps_per_call: inner blocks per device per compiled call (one progress-bar tick).
        capex_max_usd, power_max_kw: constraints; points above them are infeasible.
        constraints: more caps by name (:data:`codesign.rules.CONSTRAINTS`: also
            ``network_capex_max_usd``, ``time_to_train_max_days``, ``num_accelerators_max``,
            ``mfu_min``, ``moe_dropped_fraction_max``).
        devices: JAX devices to shard over (default: all).
        diagnose: also count, among valid points, those that fit in memory and those within
            each cap (``counts``; a little slower, so only asked for when a
            sweep found nothing feasible and the user should learn why).
    """
    if objective not in OBJECTIVES:
        raise SpecError("objective", objective, f"one of {sorted(OBJECTIVES)}")
    base = base_specs(cfg)
    if not axes:
        raise SpecError("sweep axes", axes, "at least one axis")
    paths = list(axes)
    tables = [axis_table(p, axes[p]) for p in paths]
    for p in paths:
        set_leaf(base, p, None)  # path check
    shape = tuple(len(axes[p]) for p in paths)
    n_total = int(np.prod(shape))
    if n_total >= 2**31 and not jax.config.jax_enable_x64:
        raise SpecError("sweep size", n_total, "below 2**31 points unless jax_enable_x64 is on")
    derive_dp = "strategy.dp" not in axes
    devices = list(jax.devices() if devices is None else devices)
    n_dev = len(devices)
    split = _split_point(shape, block_size)
    n_outer = int(np.prod(shape[:split]))
    inner_shape = shape[split:]
    inner_idx = (
        np.indices(inner_shape).reshape(len(inner_shape), -1)
        if inner_shape
        else np.zeros((0, 1), int)
    )
    inner_vals = tuple(
        jax.tree_util.tree_map(jnp.asarray, take(tables[split + a], inner_idx[a]))
        for a in range(len(inner_shape))
    )
    n_steps = int(min(steps_per_call, -(-n_outer // n_dev)))
    per_call = n_steps * n_dev
    k = int(min(top_k, n_total))
    itype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    n_checks = len(CHECKS) if diagnose else 2  # valid and feasible only, unless diagnosing
    cons = {"capex_max_usd": capex_max_usd, "power_max_kw": power_max_kw, **(constraints or {})}
    bad = sorted(set(cons) - set(CONSTRAINTS))
    if bad:
        raise SpecError(f"constraints.{bad[0]}", cons[bad[0]], f"one of {list(CONSTRAINTS)}")
    caps = caps_of(cons)
    bounds = jnp.asarray(caps, dtype=jnp.result_type(float))
    call = _compiled_call(
        jax.tree_util.tree_structure(base),
        tuple(paths),
        shape,
        split,
        derive_dp,
        objective,
        k,
        n_steps,
        tuple(devices),
        n_checks,
        active_constraints(caps),
    )
    tables_dev = tuple(jax.tree_util.tree_map(jnp.asarray, t) for t in tables)
    inner_idx_dev = tuple(jnp.asarray(i, dtype=itype) for i in inner_idx)
    n_calls = -(-n_outer // per_call)
    best_v = np.full((0,), np.inf)
    best_i = np.zeros((0,), np.int64)
    counts = np.zeros(n_checks, np.int64)
    prof = [np.full((n,), np.inf) for n in shape]
    t0 = time.perf_counter()
    it = range(n_calls)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"sweep {n_total:,} points", unit="call")
    pending = None
    for c in it:
        starts = jnp.asarray(c * per_call + np.arange(n_dev) * n_steps, dtype=itype)
        out = call(base, tables_dev, inner_vals, inner_idx_dev, bounds, starts)
        if pending is not None:  # overlap the host merge with the next device call
            best_v, best_i, counts, prof = _merge(pending, best_v, best_i, counts, prof, k)
        pending = out
    if pending is not None:
        best_v, best_i, counts, prof = _merge(pending, best_v, best_i, counts, prof, k)
    wall = time.perf_counter() - t0
    keep = np.isfinite(best_v)
    best_v, best_i = best_v[keep], best_i[keep]
    return SweepResult(
        axes={p: list(axes[p]) for p in paths},
        objective=objective,
        num_points=n_total,
        num_valid=int(counts[0]),
        num_feasible=int(counts[1]),
        best_values=best_v,
        best_indices=best_i,
        profiles={p: prof[i] for i, p in enumerate(paths)},
        wall_s=wall,
        counts=dict(zip(CHECKS[:n_checks], (int(c) for c in counts), strict=True)),
    )


def _merge(out, best_v, best_i, counts, prof, k):
    bv, bi, cnt, pf = jax.device_get(out)
    best_v = np.concatenate([best_v, bv.ravel()])
    best_i = np.concatenate([best_i, bi.ravel().astype(np.int64)])
    order = np.argsort(best_v, kind="stable")[:k]
    prof = [np.minimum(p, q.min(axis=0)) for p, q in zip(prof, pf, strict=True)]
    return best_v[order], best_i[order], counts + np.asarray(cnt, np.int64).sum(axis=0), prof
