"""Gradient co-design: Optax in ``lax.scan``, multi-start with ``vmap``, exact discretization.

1. **Relaxed search.**  ``K`` random starts (``jax.vmap`` over PRNG keys) each run ``steps``
   iterations of ``clip_by_global_norm -> adam(cosine schedule)`` on the penalized loss of
   :mod:`codesign.relax`, inside one ``jax.lax.scan``; the temperature ``tau`` is annealed
   by an ``optax.exponential_decay`` schedule and the penalty weight ``rho`` grows
   geometrically, both evaluated on the step counter and passed as data.  The whole run
   (all starts, all steps) is one ``jit``.
2. **Discretization.**  For the best few starts, each parallel degree's relaxed log2 value
   ``z`` selects the allowed values with ``floor(z) - r <= log2 v <= ceil(z) + r`` (the
   power-of-two neighbourhood; ``dp`` is derived from ``N / (tp pp cp)``), the microbatch
   likewise, the accelerator count and tier bandwidths their bracketing grid values +- r,
   and every allowed recompute mode and ZeRO stage.  The union over starts is one Cartesian
   grid, evaluated by :func:`codesign.sweep.sweep` with the **exact** model (divisibility,
   memory fit, capex and power masked exactly).  If nothing is feasible, the radius grows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from codesign import relax
from codesign.config import RunConfig
from codesign.problem import Problem
from codesign.step import Report, evaluate
from codesign.sweep import OBJECTIVES, SweepResult, sweep

__all__ = ["Settings", "OptimizeResult", "optimize", "relaxed_search", "neighbourhood_axes"]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Settings:
    """Optimizer settings (static: part of the compiled program)."""

    steps: int = 300
    starts: int = 8
    lr: float = 0.1
    lr_final_frac: float = 0.05
    tau0: float = 0.3
    tau1: float = 0.01
    rho0: float = 3.0
    rho1: float = 300.0
    clip: float = 1.0
    init_scale: float = 1.0
    top_starts: int = 3
    radius: int = 1


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
    wall_s: float
    relaxed_wall_s: float
    exact_wall_s: float
    sweep: SweepResult | None = None


@functools.cache
def _compiled_search(space: relax.Space, settings: Settings):
    """One jitted function per (space, settings): all starts, all steps."""
    s = settings
    lr = optax.cosine_decay_schedule(s.lr, s.steps, alpha=s.lr_final_frac)
    opt = optax.chain(optax.clip_by_global_norm(s.clip), optax.adam(lr))
    tau_sched = optax.exponential_decay(s.tau0, s.steps, s.tau1 / s.tau0)
    rho_sched = optax.exponential_decay(s.rho0, s.steps, s.rho1 / s.rho0)

    def one(key, box, base):
        p0 = relax.init_params(key, space, s.init_scale)

        def body(carry, t):
            p, st = carry
            tau, rho = tau_sched(t), rho_sched(t)
            (val, aux), g = jax.value_and_grad(relax.loss_and_aux, has_aux=True)(p, tau, rho, space, box, base)
            upd, st = opt.update(g, st, p)
            return (optax.apply_updates(p, upd), st), (val, aux)

        # The last step's loss and aux (objective, violations, degrees) describe the final
        # design up to one small Adam step; evaluating the model again after the scan would
        # double the compile time.
        (p, _), (hist, aux) = jax.lax.scan(body, (p0, opt.init(p0)), jnp.arange(s.steps))
        last = jax.tree_util.tree_map(lambda x: x[-1], aux)
        return p, hist, hist[-1], last["objective"], last["violations"], last["z"]

    return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


def relaxed_search(problem: Problem, settings: Settings = Settings(), seed: int = 0) -> dict:
    """Run the multi-start relaxed optimization; host arrays per start."""
    space = relax.space_of(problem)
    box = relax.box_of(problem)
    base = relax.base_of(problem)
    keys = jax.random.split(jax.random.key(seed), settings.starts)
    fn = _compiled_search(space, settings)
    p, hist, final, obj, viol, z = jax.device_get(fn(keys, box, base))
    return {"params": p, "history": hist, "loss": final, "objective": obj, "violations": viol, "z": z, "space": space}


def _near_log2(values, z: float, r: int) -> list:
    vals = sorted(values)
    lo, hi = math.floor(z + 1e-9) - r, math.ceil(z - 1e-9) + r
    out = [v for v in vals if lo - 1e-9 <= math.log2(v) <= hi + 1e-9]
    if not out:  # nothing in range: the nearest allowed value
        out = [min(vals, key=lambda v: abs(math.log2(v) - z))]
    return out


def _near_grid(values, x: float, r: int) -> list:
    vals = sorted(values)
    i = int(np.searchsorted(vals, x))  # vals[i-1] < x <= vals[i]
    return vals[max(0, i - 1 - r) : min(len(vals), i + 1 + r)]


def neighbourhood_axes(problem: Problem, zs: list[dict], radius: int = 1) -> dict:
    """Sweep axes: the union over relaxed points ``zs`` (log2 values) of their neighbourhoods."""
    sv, hv = problem.strategy_values, problem.hardware_values
    axes = {}
    if problem.free_n:
        vals = set()
        for z in zs:
            vals.update(_near_grid(hv["system.num_accelerators"], 2.0 ** float(z["n"]), radius))
        axes["system.num_accelerators"] = sorted(vals)
    for k, zk in (("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("microbatch", "mb")):
        vals = set()
        for z in zs:
            vals.update(_near_log2(sv[k], float(z[zk]), radius))
        axes[f"strategy.{k}"] = sorted(vals)
    axes["strategy.recompute"] = list(sv["recompute"])
    axes["strategy.zero"] = list(sv["zero"])
    for i in problem.free_tiers:
        path = f"system.tiers[{i}].bandwidth_gbps"
        vals = set()
        for z in zs:
            vals.update(_near_grid(hv[path], float(z["bw"][i]), radius))
        axes[path] = sorted(vals)
    return axes


def optimize(
    problem: Problem,
    settings: Settings = Settings(),
    seed: int = 0,
    max_radius: int = 3,
    progress: bool = False,
) -> OptimizeResult:
    """Relaxed multi-start search, then exact discretization of its neighbourhood."""
    t0 = time.perf_counter()
    rs = relaxed_search(problem, settings, seed)
    t1 = time.perf_counter()
    order = np.argsort(rs["loss"], kind="stable")
    top = order[: settings.top_starts]
    space = rs["space"]
    zs = []
    for k in top:
        z = {name: float(np.asarray(v)[k]) for name, v in rs["z"].items()}
        if space.free_tiers:
            bw = 2.0 ** relax._in_box(jnp.asarray(rs["params"]["bw"][k]), relax.box_of(problem).log2_bw)
            z["bw"] = dict(zip(space.free_tiers, np.asarray(bw).tolist(), strict=True))
        zs.append(z)
    n_evals, res, radius = 0, None, settings.radius
    while True:
        axes = neighbourhood_axes(problem, zs, radius)
        res = sweep(
            problem.cfg,
            axes,
            objective=problem.objective,
            capex_max_usd=problem.capex_max_usd,
            power_max_kw=problem.power_max_kw,
            top_k=1,
            progress=progress,
        )
        n_evals += res.num_points
        if len(res.best_values) or radius >= max_radius:
            break
        radius += 1
    t2 = time.perf_counter()
    best = int(top[0])
    relaxed_obj = float(rs["objective"][best])
    relaxed_point = {k: 2.0 ** v for k, v in zs[0].items() if k != "bw"}
    if "bw" in zs[0]:
        relaxed_point["bw"] = zs[0]["bw"]
    if len(res.best_values):
        cfg = res.config(0, problem.cfg)
        exact = float(res.best_values[0])
        report = evaluate(*cfg.specs())
        point = res.best()
    else:
        cfg, exact, report, point = None, math.inf, None, {}
    return OptimizeResult(
        problem=problem.name,
        objective=problem.objective,
        exact_objective=exact,
        relaxed_objective=relaxed_obj,
        gap=(exact - relaxed_obj) / exact if math.isfinite(exact) else math.inf,
        num_exact_evals=n_evals,
        config=cfg,
        report=report,
        point=point,
        relaxed_point=relaxed_point,
        history=np.asarray(rs["history"]),
        wall_s=t2 - t0,
        relaxed_wall_s=t1 - t0,
        exact_wall_s=t2 - t1,
        sweep=res,
    )


def exact_objective(cfg: RunConfig, objective: str) -> float:
    """The exact objective of a concrete configuration (checked)."""
    return float(OBJECTIVES[objective](evaluate(*cfg.specs())))
