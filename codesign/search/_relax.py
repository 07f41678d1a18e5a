"""Relaxation: an unconstrained parameter pytree -> specs -> a smooth, penalized objective.

The design variables are reparametrized so that every point of parameter space is a valid
(continuous) design and no projection is needed (see the JAX practices notes):

* **parallel degrees** in log2 space with the product exact: the fixed degrees keep their
  base value and the free ones (``dp`` always among them) share the rest,
  ``z_free = (log2 N - sum log2 fixed) softmax(l)``, ``degree = 2**z``, so
  ``tp pp dp cp == N`` and every free degree is >= 1 by construction;
* **microbatch**, **interleave** and **expert parallelism** ``2**(lo + (hi - lo) sigmoid(u))``
  in their log2 boxes;
* **recompute** and **ZeRO** as softmax weights over the allowed options (the specs store
  them as weight vectors, so the model interpolates its cost terms linearly);
* **accelerator count**, the **scale-up domain** and every **continuous hardware knob**
  (tier bandwidths, latencies and oversubscriptions; HBM capacity and bandwidth, peak
  FLOP/s, host link) in log2 boxes through a sigmoid;
* the **platform** (accelerator type with its scale-up tier and efficiency) and the
  **placement** as soft categoricals: softmax weights over the listed options mix their
  numbers (every field of the platforms, the placement rank vectors) linearly.

Which variables are free is static (:class:`Space`: a fixed one is not a parameter at all,
its value comes from the base configuration, so the compiled program is smaller and faster
to build); every number (bounds, masks of allowed options, caps) is data (:class:`Box`),
so new bounds or budgets do not recompile.

The model is evaluated on its one code path with ``Smoothing(exact=False, tau=tau)``.  The
loss is ``log(objective)`` plus ``rho * sum(relu(g)**2)`` over log-ratio violations ``g`` of
memory fit (total memory vs HBM), every cap of :data:`codesign.rules.CONSTRAINTS` (capex,
power, network capex, deadline, accelerator count, minimum MFU), the degree boxes
(``tp <= max tp``...), ``ep <= dp cp``, ``pp * interleave <= layers``,
``dp * microbatch <= global_batch`` and ``domain <= N``.  Working in logs makes the loss scale free (seconds,
days or dollars alike) and its gradients O(1).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from codesign.rules import CONSTRAINTS, caps_of, constrained_quantities
from codesign.search._grid import OBJECTIVES, PLATFORM, axis_table, set_leaf, specs_of
from codesign.search._problem import LOG_FLOOR, RELAX_OBJECTIVES, Problem
from codesign.smoothing import Smoothing
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES
from codesign.step import evaluate_unchecked

__all__ = [
    "Space",
    "Box",
    "space_of",
    "box_of",
    "base_of",
    "init_params",
    "to_specs",
    "loss_terms",
    "loss",
    "loss_and_aux",
    "degrees_of",
    "VIOLATION_NAMES",
    "DEGREES",
]

DEGREES = ("tp", "pp", "dp", "cp")
VIOLATION_NAMES = (
    "memory",
    *CONSTRAINTS,
    "tp_max",
    "tp_min",
    "pp_max",
    "pp_min",
    "cp_max",
    "cp_min",
    "dp_min",
    "ep_etp_folding",
    "pp_interleave_layers",
    "dp_microbatch_batch",
    "domain_n",
)
_BIG = -1e30


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Space:
    """Which design variables are free (static: changing it recompiles).  A variable that is
    not free takes its value from the base configuration."""

    objective: str = "step_time"
    free_degrees: tuple[str, ...] = ("tp", "pp")
    """Free degrees among tp, pp, cp (dp always takes the rest of log2 N)."""
    free_n: bool = False
    free_hw: tuple[str, ...] = ()
    """Free continuous hardware leaves (:attr:`Problem.continuous_paths`)."""
    free_domain: bool = False
    """The scale-up (tier 0) domain is free."""
    num_platforms: int = 0
    """Platforms to choose from (0 or 1: fixed)."""
    num_placements: int = 0
    """Placements to choose from (0 or 1: fixed)."""
    free_microbatch: bool = True
    free_ep: bool = False
    free_interleave: bool = False
    free_recompute: bool = True
    free_zero: bool = True
    unit: tuple[str, ...] = ()
    """Fixed degrees (among tp, pp, cp, ep, interleave) equal to 1: the model gets a literal
    1, so XLA folds the dimensions away (a structural fact, not a float value)."""

    @property
    def free_tiers(self) -> tuple[int, ...]:
        """Tiers whose bandwidth is free."""
        return tuple(
            int(p[len("system.tiers[") : p.index("]")])
            for p in self.free_hw
            if p.endswith("].bandwidth_gbps")
        )

    @property
    def softmax_names(self) -> tuple[str, ...]:
        """The degrees sharing ``log2 N - sum(fixed)`` through the softmax (dp last)."""
        return (*[d for d in DEGREES if d in self.free_degrees], "dp")


@struct.dataclass(kw_only=True)
class Box:
    """Numeric bounds of the design box (dynamic leaves: new bounds do not recompile)."""

    log2_n: jnp.ndarray
    """(2,) log2 of the accelerator-count range (lo == hi when fixed)."""
    log2_mb: jnp.ndarray
    """(2,) log2 of the microbatch range."""
    log2_ep: jnp.ndarray
    """(2,) log2 of the expert-parallel range."""
    log2_v: jnp.ndarray
    """(2,) log2 of the interleave range."""
    log2_deg_lo: jnp.ndarray
    """(4,) log2 of the smallest allowed tp, pp, dp, cp."""
    log2_deg_hi: jnp.ndarray
    """(4,) log2 of the largest allowed tp, pp, dp, cp."""
    log2_hw: jnp.ndarray
    """(num free hardware leaves, 2) log2 of each continuous knob's range."""
    log2_dom: jnp.ndarray
    """(2,) log2 of the scale-up domain range."""
    recompute_mask: jnp.ndarray
    """(3,) 1 for the allowed recompute modes."""
    zero_mask: jnp.ndarray
    """(4,) 1 for the allowed ZeRO stages."""
    caps: jnp.ndarray
    """(len(CONSTRAINTS),) caps of :func:`codesign.rules.caps_of` (``inf``: none)."""
    platforms: dict | None = None
    """The platforms' numbers stacked (``{"accelerator", "scale_up", "efficiency"}``)."""
    placements: jnp.ndarray | None = None
    """(num placements, 5) rank vectors."""
    train_mask: dict | None = None
    """1 for the parameters the optimizer moves, 0 for frozen ones (like the parameters;
    ``None``: all move).  The polish freezes everything but the continuous hardware knobs
    and reuses the compiled search."""


def space_of(problem: Problem, fold_units: bool = True) -> Space:
    """The free variables of ``problem``.  ``fold_units=False`` keeps fixed unit degrees as
    data (one compiled program for every fixed strategy, as the optimizer's bandwidth polish
    needs)."""
    sv = problem.strategy_values
    if problem.objective not in RELAX_OBJECTIVES:
        raise ValueError(f"objective {problem.objective!r} cannot be relaxed in log space")
    return Space(
        objective=problem.objective,
        free_degrees=tuple(d for d in ("tp", "pp", "cp") if len(sv[d]) > 1),
        free_n=problem.free_n,
        free_hw=problem.continuous_paths,
        free_domain=bool(problem.domain_tiers),
        num_platforms=len(problem.platforms) if len(problem.platforms) > 1 else 0,
        num_placements=len(problem.placements) if len(problem.placements) > 1 else 0,
        free_microbatch=len(sv["microbatch"]) > 1,
        free_ep=len(sv["ep"]) > 1,
        free_interleave=len(sv["interleave"]) > 1,
        free_recompute=len(sv["recompute"]) > 1,
        free_zero=len(sv["zero"]) > 1,
        unit=tuple(k for k in ("tp", "pp", "cp", "ep", "interleave") if tuple(sv[k]) == (1.0,))
        if fold_units
        else (),
    )


def _log2_range(values) -> list[float]:
    lo, hi = max(min(values), LOG_FLOOR), max(max(values), LOG_FLOOR)
    return [math.log2(lo), math.log2(hi)]


def box_of(problem: Problem) -> Box:
    sv, hv = problem.strategy_values, problem.hardware_values
    sy = problem.cfg.system
    n = hv.get("system.num_accelerators", (float(sy.num_accelerators),))
    big = math.log2(max(n)) + 1.0
    lo = [math.log2(min(sv["tp"])), math.log2(min(sv["pp"])), 0.0, math.log2(min(sv["cp"]))]
    hi = [math.log2(max(sv["tp"])), math.log2(max(sv["pp"])), big, math.log2(max(sv["cp"]))]
    hw = [_log2_range(hv[p]) for p in problem.continuous_paths]
    dom = hv.get("system.tiers[0].domain", (float(sy.tiers[0].domain),))
    plat = axis_table(PLATFORM, problem.platforms) if len(problem.platforms) > 1 else None
    pls = (
        jnp.asarray(axis_table("strategy.placement", problem.placements))
        if len(problem.placements) > 1
        else None
    )
    return Box(
        log2_n=jnp.asarray(_log2_range(n)),
        log2_mb=jnp.asarray(_log2_range(sv["microbatch"])),
        log2_ep=jnp.asarray(_log2_range(sv["ep"])),
        log2_v=jnp.asarray(_log2_range(sv["interleave"])),
        log2_deg_lo=jnp.asarray(lo),
        log2_deg_hi=jnp.asarray(hi),
        log2_hw=jnp.asarray(np.asarray(hw, dtype=float).reshape(len(hw), 2)),
        log2_dom=jnp.asarray(_log2_range(dom)),
        recompute_mask=jnp.asarray([float(r in sv["recompute"]) for r in RECOMPUTE_MODES]),
        zero_mask=jnp.asarray([float(z in sv["zero"]) for z in ZERO_STAGES]),
        caps=jnp.asarray(caps_of(problem.constraints)),
        platforms=None if plat is None else jax.tree_util.tree_map(jnp.asarray, plat),
        placements=pls,
    )


def base_of(problem: Problem) -> dict:
    """The base specs as a pytree of arrays (model, training, system, strategy, efficiency)."""
    return jax.tree_util.tree_map(jnp.asarray, specs_of(problem.cfg))


def init_params(key, space: Space, scale: float = 1.0) -> dict:
    """Random unconstrained parameters (a multi-start point): only the free variables."""
    ks = jax.random.split(key, 11)
    p = {}
    if space.free_degrees:
        p["deg"] = scale * jax.random.normal(ks[0], (len(space.softmax_names),))
    if space.free_recompute:
        p["recompute"] = scale * jax.random.normal(ks[1], (3,))
    if space.free_zero:
        p["zero"] = scale * jax.random.normal(ks[2], (4,))
    if space.free_microbatch:
        p["mb"] = scale * jax.random.normal(ks[3], ())
    if space.free_n:
        p["n"] = scale * jax.random.normal(ks[4], ())
    if space.free_hw:
        p["hw"] = scale * jax.random.normal(ks[5], (len(space.free_hw),))
    if space.free_domain:
        p["dom"] = scale * jax.random.normal(ks[8], ())
    if space.num_platforms:
        p["platform"] = scale * jax.random.normal(ks[9], (space.num_platforms,))
    if space.num_placements:
        p["placement"] = scale * jax.random.normal(ks[10], (space.num_placements,))
    if space.free_ep:
        p["ep"] = scale * jax.random.normal(ks[6], ())
    if space.free_interleave:
        p["v"] = scale * jax.random.normal(ks[7], ())
    return p


def _in_box(u, lo_hi):
    return lo_hi[..., 0] + (lo_hi[..., 1] - lo_hi[..., 0]) * jax.nn.sigmoid(u)


def masked_softmax(logits, mask):
    return jax.nn.softmax(jnp.where(mask > 0, logits, _BIG))


def _log2_axis(params: dict, key: str, lo_hi, free: bool, unit: bool, value, zero):
    """log2 of one box axis: the free variable in its box, else 0 for a unit degree (a literal
    the compiler folds away), else the base value."""
    if free:
        return _in_box(params[key], lo_hi)
    return zero if unit else jnp.log2(value)


def degrees_of(params: dict, space: Space, box: Box, base: dict) -> dict:
    """Relaxed log2 values: degrees (tp, pp, dp, cp, ep), N (``n``), microbatch (``mb``),
    interleave (``v``), the share of log2 N left to the free degrees (``rest``), the
    scale-up domain (``dom``), the free continuous hardware knobs (``hw``, in the order of
    ``space.free_hw``, natural units, not log) and the platform and placement weights
    (``w_platform``, ``w_placement``, when free)."""
    st, sy = base["strategy"], base["system"]
    log2_n = _in_box(params["n"], box.log2_n) if space.free_n else jnp.log2(sy.num_accelerators)
    zero = jnp.zeros_like(log2_n)
    out = {
        d: zero if d in space.unit else jnp.log2(getattr(st, d))
        for d in ("tp", "pp", "cp")
        if d not in space.free_degrees
    }
    rest = log2_n - sum(out.values(), jnp.zeros_like(log2_n))
    if space.free_degrees:
        w = jax.nn.softmax(params["deg"])
        for d, wd in zip(space.softmax_names, w, strict=True):
            out[d] = jnp.maximum(rest, 0.0) * wd
    else:
        out["dp"] = rest
    out["n"] = log2_n
    out["rest"] = rest
    out["mb"] = _log2_axis(
        params, "mb", box.log2_mb, space.free_microbatch, False, st.microbatch, zero
    )
    out["ep"] = _log2_axis(
        params, "ep", box.log2_ep, space.free_ep, "ep" in space.unit, st.ep, zero
    )
    out["v"] = _log2_axis(
        params,
        "v",
        box.log2_v,
        space.free_interleave,
        "interleave" in space.unit,
        st.interleave,
        zero,
    )
    out["dom"] = (
        _in_box(params["dom"], box.log2_dom) if space.free_domain else jnp.log2(sy.tiers[0].domain)
    )
    out["hw"] = (
        2.0 ** _in_box(params["hw"], box.log2_hw)
        if space.free_hw
        else jnp.zeros((0,), dtype=log2_n.dtype)
    )
    if space.num_platforms:
        out["w_platform"] = jax.nn.softmax(params["platform"])
    if space.num_placements:
        out["w_placement"] = jax.nn.softmax(params["placement"])
    return out


def to_specs(params: dict, space: Space, box: Box, base: dict, z: dict | None = None) -> dict:
    """Specs of the relaxed design ``params`` (a dict like ``base``); ``z`` is
    :func:`degrees_of` when the caller has it already."""
    z = degrees_of(params, space, box, base) if z is None else z
    sy, st = base["system"], base["strategy"]
    dtype = jnp.result_type(float)
    kw = {d: 1.0 if d in space.unit else 2.0 ** z[d] for d in ("tp", "pp", "dp", "cp")}
    if space.free_microbatch:
        kw["microbatch"] = 2.0 ** z["mb"]
    if space.free_ep:
        kw["ep"] = 2.0 ** z["ep"]
    if space.free_interleave:
        kw["interleave"] = 2.0 ** z["v"]
    for k in ("ep", "interleave"):
        if k in space.unit:
            kw[k] = 1.0
    if space.free_recompute:
        kw["recompute"] = masked_softmax(params["recompute"], box.recompute_mask).astype(dtype)
    if space.free_zero:
        kw["zero"] = masked_softmax(params["zero"], box.zero_mask).astype(dtype)
    if space.num_placements:
        kw["placement"] = z["w_placement"] @ box.placements
    st = dataclasses.replace(st, **kw)
    if space.free_n:
        sy = dataclasses.replace(sy, num_accelerators=2.0 ** z["n"])
    specs = {**base, "system": sy, "strategy": st}
    if space.num_platforms:
        w = z["w_platform"]
        mixed = jax.tree_util.tree_map(lambda t: jnp.tensordot(w, t, axes=1), box.platforms)
        specs = set_leaf(specs, PLATFORM, mixed)
    if space.free_domain:
        specs = set_leaf(specs, "system.tiers[0].domain", 2.0 ** z["dom"])
    for j, path in enumerate(space.free_hw):
        specs = set_leaf(specs, path, z["hw"][j])
    return specs


def _log_ratio_capped(x, cap):
    """``log(x / cap)`` where ``cap`` is finite, else ``-1`` (no constraint), NaN-free."""
    ok = jnp.isfinite(cap)
    safe = jnp.where(ok, cap, 1.0)
    return jnp.where(ok, jnp.log(x) - jnp.log(safe), -1.0)


def loss_terms(params: dict, tau, space: Space, box: Box, base: dict) -> dict:
    """Objective (its natural units), log objective and the constraint violations
    (:data:`VIOLATION_NAMES`, log ratios: <= 0 is feasible)."""
    z = degrees_of(params, space, box, base)
    s = to_specs(params, space, box, base, z)
    sm = Smoothing(exact=False, tau=tau)
    r = evaluate_unchecked(
        s["model"], s["training"], s["system"], s["strategy"], s["efficiency"], sm
    )
    obj = OBJECTIVES[space.objective](r)
    sy = s["system"]
    tr, m = base["training"], base["model"]
    lo, hi = box.log2_deg_lo, box.log2_deg_hi
    caps = _log_ratio_capped(constrained_quantities(r, sy), box.caps)
    # MoE parallel folding: ep x etp divides tp x dp x cp; etp 0 (as tp): ep divides dp x cp
    etp = base["strategy"].etp
    log2_etp = jnp.log2(jnp.where(etp > 0, etp, 1.0))
    folding = jnp.where(
        etp > 0, z["ep"] + log2_etp - (z["tp"] + z["dp"] + z["cp"]), z["ep"] - (z["dp"] + z["cp"])
    )
    viol = jnp.stack(
        [
            jnp.log(r.memory_gb["total"]) - jnp.log(sy.accelerator.hbm_gb),
            *(caps[i] for i in range(len(CONSTRAINTS))),
            z["tp"] - hi[0],
            lo[0] - z["tp"],
            z["pp"] - hi[1],
            lo[1] - z["pp"],
            z["cp"] - hi[3],
            lo[3] - z["cp"],
            -z["rest"],
            folding,
            z["pp"] + z["v"] - jnp.log2(m.layers),
            (z["dp"] + z["mb"]) - jnp.log2(tr.global_batch),
            z["dom"] - z["n"] if space.free_domain else -jnp.ones_like(z["n"]),
        ]
    )
    return {
        "objective": obj,
        "log_objective": jnp.log(obj),
        "violations": viol,
        "report": r,
        "z": z,
    }


def loss_and_aux(params: dict, tau, rho, space: Space, box: Box, base: dict):
    """``(loss, aux)``: the loss of :func:`loss` and ``aux`` = objective, violations and the
    relaxed log2 degrees (for ``jax.value_and_grad(..., has_aux=True)``)."""
    t = loss_terms(params, tau, space, box, base)
    val = t["log_objective"] + rho * jnp.sum(jax.nn.relu(t["violations"]) ** 2)
    aux = {"objective": t["objective"], "violations": t["violations"], "z": t["z"]}
    return val, aux


def loss(params: dict, tau, rho, space: Space, box: Box, base: dict):
    """``log(objective) + rho * sum(relu(violations)**2)`` (scalar)."""
    return loss_and_aux(params, tau, rho, space, box, base)[0]
