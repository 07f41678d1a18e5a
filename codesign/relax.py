"""Relaxation: an unconstrained parameter pytree -> specs -> a smooth, penalized objective.

The design variables are reparametrized so that every point of parameter space is a valid
(continuous) design and no projection is needed (see the JAX practices notes):

* **parallel degrees** in log2 space with the product exact: ``z = log2(N) softmax(l)``
  over (tp, pp, dp[, cp]), ``degree = 2**z``, so ``tp pp dp cp == N`` and every degree
  is >= 1 by construction (``cp = 1`` when the problem fixes it);
* **microbatch** ``2**(lo + (hi - lo) sigmoid(u))`` in its log2 box;
* **recompute** and **ZeRO** as softmax weights over the allowed options (the specs store
  them as weight vectors, so the model interpolates its cost terms linearly);
* **accelerator count** and **tier bandwidths** in log2 boxes through a sigmoid.

The model is evaluated on its one code path with ``Smoothing(exact=False, tau=tau)``.  The
loss is ``log(objective)`` plus ``rho * sum(relu(g)**2)`` over log-ratio violations ``g`` of
memory fit (total memory vs HBM), the capex budget, the power cap, the degree boxes
(``tp <= max tp``...) and ``dp * microbatch <= global_batch``.  Working in logs makes the
loss scale free (seconds, days or dollars alike) and its gradients O(1).

``Space`` is static (it selects code: which variables exist); ``Box`` holds every number
(bounds, caps) as dynamic leaves, so new bounds do not recompile.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign._pytree import pytree_dataclass
from codesign.problem import Problem
from codesign.smoothing import Smoothing
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES
from codesign.step import Report, evaluate_unchecked
from codesign.sweep import OBJECTIVES

__all__ = ["Space", "Box", "space_of", "box_of", "base_of", "init_params", "to_specs", "relaxed_report", "loss_terms", "loss", "loss_and_aux", "degrees_of"]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Space:
    """Which design variables exist (static: changing it recompiles)."""

    objective: str = "step_time"
    free_cp: bool = False
    free_n: bool = False
    free_microbatch: bool = True
    free_tiers: tuple[int, ...] = ()
    recompute_options: tuple[int, ...] = (0, 1, 2)
    zero_options: tuple[int, ...] = (0, 1, 2, 3)

    @property
    def degree_names(self) -> tuple[str, ...]:
        return ("tp", "pp", "dp", "cp") if self.free_cp else ("tp", "pp", "dp")


@pytree_dataclass
class Box:
    """Numeric bounds of the design box (dynamic leaves)."""

    log2_n: jnp.ndarray
    """(2,) log2 of the accelerator-count range (lo == hi when fixed)."""
    log2_mb: jnp.ndarray
    """(2,) log2 of the microbatch range."""
    log2_deg_max: jnp.ndarray
    """(4,) log2 of the largest allowed tp, pp, dp, cp."""
    log2_bw: jnp.ndarray
    """(len(free_tiers), 2) log2 of each free tier's bandwidth range (GB/s)."""
    capex_max_usd: jnp.ndarray
    power_max_kw: jnp.ndarray


def space_of(problem: Problem) -> Space:
    sv = problem.strategy_values
    if problem.objective not in ("step_time", "time_to_train", "cost_to_train", "usd_per_token"):
        raise ValueError(f"objective {problem.objective!r} cannot be relaxed in log space")
    return Space(
        objective=problem.objective,
        free_cp=len(sv["cp"]) > 1 or sv["cp"][0] != 1.0,
        free_n=problem.free_n,
        free_microbatch=len(sv["microbatch"]) > 1,
        free_tiers=problem.free_tiers,
        recompute_options=tuple(RECOMPUTE_MODES.index(r) for r in sv["recompute"]),
        zero_options=tuple(ZERO_STAGES.index(z) for z in sv["zero"]),
    )


def box_of(problem: Problem) -> Box:
    sv, hv = problem.strategy_values, problem.hardware_values
    n = hv.get("system.num_accelerators", (float(problem.cfg.system.num_accelerators),))
    mb = sv["microbatch"]
    big = math.log2(max(n)) + 1.0
    deg_max = [math.log2(max(sv["tp"])), math.log2(max(sv["pp"])), big, math.log2(max(sv["cp"]))]
    bw = [
        [math.log2(min(hv[f"system.tiers[{i}].bandwidth_gbps"])), math.log2(max(hv[f"system.tiers[{i}].bandwidth_gbps"]))]
        for i in problem.free_tiers
    ]
    return Box(
        log2_n=jnp.asarray([math.log2(min(n)), math.log2(max(n))]),
        log2_mb=jnp.asarray([math.log2(min(mb)), math.log2(max(mb))]),
        log2_deg_max=jnp.asarray(deg_max),
        log2_bw=jnp.asarray(np.asarray(bw, dtype=float).reshape(len(bw), 2)),
        capex_max_usd=jnp.asarray(problem.capex_max_usd),
        power_max_kw=jnp.asarray(problem.power_max_kw),
    )


def base_of(problem: Problem) -> dict:
    """The base specs as a pytree of arrays (model, training, system, strategy, efficiency)."""
    c = problem.cfg
    base = {"model": c.model, "training": c.training, "system": c.system, "strategy": c.strategy, "efficiency": c.efficiency}
    return jax.tree_util.tree_map(jnp.asarray, base)


def init_params(key, space: Space, scale: float = 1.0) -> dict:
    """Random unconstrained parameters (a multi-start point)."""
    ks = jax.random.split(key, 6)
    p = {
        "deg": scale * jax.random.normal(ks[0], (len(space.degree_names),)),
        "recompute": scale * jax.random.normal(ks[1], (len(space.recompute_options),)),
        "zero": scale * jax.random.normal(ks[2], (len(space.zero_options),)),
    }
    if space.free_microbatch:
        p["mb"] = scale * jax.random.normal(ks[3], ())
    if space.free_n:
        p["n"] = scale * jax.random.normal(ks[4], ())
    if space.free_tiers:
        p["bw"] = scale * jax.random.normal(ks[5], (len(space.free_tiers),))
    return p


def _in_box(u, lo_hi):
    return lo_hi[..., 0] + (lo_hi[..., 1] - lo_hi[..., 0]) * jax.nn.sigmoid(u)


def _weights(logits, options, k):
    w = jax.nn.softmax(logits)
    return jnp.zeros((k,), w.dtype).at[jnp.asarray(options)].set(w)


def degrees_of(params: dict, space: Space, box: Box) -> dict:
    """Relaxed log2 degrees (tp, pp, dp, cp), log2 N, log2 microbatch."""
    log2_n = _in_box(params["n"], box.log2_n) if space.free_n else box.log2_n[0]
    z = log2_n * jax.nn.softmax(params["deg"])
    out = dict(zip(space.degree_names, z, strict=True))
    out.setdefault("cp", jnp.zeros_like(log2_n))
    out["n"] = log2_n
    out["mb"] = _in_box(params["mb"], box.log2_mb) if space.free_microbatch else box.log2_mb[0]
    return out


def to_specs(params: dict, space: Space, box: Box, base: dict) -> dict:
    """Specs of the relaxed design ``params`` (a dict like ``base``)."""
    z = degrees_of(params, space, box)
    sy, st = base["system"], base["strategy"]
    rec = _weights(params["recompute"], space.recompute_options, 3)
    zero = _weights(params["zero"], space.zero_options, 4)
    st = dataclasses.replace(
        st,
        tp=2.0 ** z["tp"],
        pp=2.0 ** z["pp"],
        dp=2.0 ** z["dp"],
        cp=2.0 ** z["cp"],
        microbatch=2.0 ** z["mb"],
        recompute=rec.astype(jnp.result_type(float)),
        zero=zero.astype(jnp.result_type(float)),
    )
    if space.free_n:
        sy = dataclasses.replace(sy, num_accelerators=2.0 ** z["n"])
    if space.free_tiers:
        bw = 2.0 ** _in_box(params["bw"], box.log2_bw)
        tiers = list(sy.tiers)
        for j, i in enumerate(space.free_tiers):
            tiers[i] = dataclasses.replace(tiers[i], bandwidth_gbps=bw[j])
        sy = dataclasses.replace(sy, tiers=tuple(tiers))
    return {**base, "system": sy, "strategy": st}


def relaxed_report(params: dict, tau, space: Space, box: Box, base: dict) -> Report:
    s = to_specs(params, space, box, base)
    sm = Smoothing(exact=False, tau=tau)
    return evaluate_unchecked(s["model"], s["training"], s["system"], s["strategy"], s["efficiency"], sm)


def _log_ratio_capped(x, cap):
    """``log(x / cap)`` where ``cap`` is finite, else ``-1`` (no constraint), NaN-free."""
    ok = jnp.isfinite(cap)
    safe = jnp.where(ok, cap, 1.0)
    return jnp.where(ok, jnp.log(x) - jnp.log(safe), -1.0)


def loss_terms(params: dict, tau, space: Space, box: Box, base: dict) -> dict:
    """Objective (its natural units), log objective and the constraint violations."""
    s = to_specs(params, space, box, base)
    sm = Smoothing(exact=False, tau=tau)
    r = evaluate_unchecked(s["model"], s["training"], s["system"], s["strategy"], s["efficiency"], sm)
    z = degrees_of(params, space, box)
    obj = OBJECTIVES[space.objective](r)
    sy = s["system"]
    tr = base["training"]
    viol = jnp.stack(
        [
            jnp.log(r.memory_gb["total"]) - jnp.log(sy.accelerator.hbm_gb),
            _log_ratio_capped(r.cost["capex_usd"], box.capex_max_usd),
            _log_ratio_capped(r.cost["power_kw"], box.power_max_kw),
            z["tp"] - box.log2_deg_max[0],
            z["pp"] - box.log2_deg_max[1],
            z["cp"] - box.log2_deg_max[3],
            (z["dp"] + z["mb"]) - jnp.log2(tr.global_batch),
        ]
    )
    return {"objective": obj, "log_objective": jnp.log(obj), "violations": viol, "report": r}


def loss_and_aux(params: dict, tau, rho, space: Space, box: Box, base: dict):
    """``(loss, aux)``: the loss of :func:`loss` and ``aux`` = objective, violations and the
    relaxed log2 degrees (for ``jax.value_and_grad(..., has_aux=True)``)."""
    t = loss_terms(params, tau, space, box, base)
    val = t["log_objective"] + rho * jnp.sum(jax.nn.relu(t["violations"]) ** 2)
    aux = {"objective": t["objective"], "violations": t["violations"], "z": degrees_of(params, space, box)}
    return val, aux


def loss(params: dict, tau, rho, space: Space, box: Box, base: dict):
    """``log(objective) + rho * sum(relu(violations)**2)`` (scalar)."""
    return loss_and_aux(params, tau, rho, space, box, base)[0]
