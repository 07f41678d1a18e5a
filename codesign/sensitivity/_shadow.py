"""Shadow prices: what relaxing each active constraint is worth at a co-designed optimum.

At a design whose discrete choices (strategy degrees, accelerator count, platform, domain)
are fixed, the continuous choices (the problem's continuous hardware axes, and the memory
knobs of the strategy: the fraction of layers fully recomputed, the offloaded fractions)
solve a smooth problem

    minimize f(x) / f_ref   subject to   g_j(x) = ln(q_j(x) / c_j) <= 0,

``q_j`` the capex, power, network capex, time to train, ``1/MFU`` of
:data:`codesign.rules.CONSTRAINTS` that the problem caps, and the memory per accelerator
against the HBM capacity (always required).  It is solved by the augmented Lagrangian
method (Hestenes 1969, Powell 1969; Nocedal & Wright, *Numerical Optimization*, 2nd ed.
2006, Alg. 17.4) with Optax L-BFGS for the inner minimization (log knobs in ``ln x``), the
box of each variable as two more constraints of the same method.  At the solution the multiplier ``lambda_j >= 0`` is the derivative
``-d (f*/f_ref) / d ln c_j`` (Nocedal & Wright Thm. 12.1 and sec. 12.8), so the shadow price
of constraint ``j``, the decrease of the optimum per unit of relaxed cap, is

    price_j = lambda_j f_ref / c_j          (objective units per cap unit).

Each price is confirmed by re-solving with the cap moved by ``+-eps`` (default 0.1 %):
``(f*(c - eps c) - f*(c + eps c)) / (2 eps c)``.  The memory constraint's cap is held apart
from ``hbm_gb`` (which also sets the accelerator's price), so its price is the value of
capacity alone; :class:`ShadowPrice` reports the marginal price of HBM beside it.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from codesign._compile import jit
from codesign.rules import CONSTRAINTS, active_constraints, caps_of, constrained_quantities
from codesign.search._grid import OBJECTIVES, get_leaf, set_leaf, specs_of
from codesign.sensitivity._elasticity import _report
from codesign.specs import RECOMPUTE_MODES, SpecError

__all__ = ["ShadowPrice", "Knob", "memory_knobs", "shadow_prices", "solve_continuous"]

_UNITS = {
    "capex_max_usd": "USD",
    "power_max_kw": "kW",
    "network_capex_max_usd": "USD",
    "time_to_train_max_days": "days",
    "num_accelerators_max": "accelerators",
    "mfu_min": "1/MFU",
    "moe_dropped_fraction_max": "fraction of routed tokens",
    "memory": "GB per accelerator",
}


@dataclasses.dataclass(frozen=True)
class Knob:
    """A continuous variable of the problem: a leaf path and its box ``[lo, hi]`` (natural
    units; searched in log space when ``log``, else linearly, e.g. a fraction in [0, 1])."""

    path: str
    lo: float
    hi: float
    log: bool = True


@dataclasses.dataclass(frozen=True)
class ShadowPrice:
    """The value of relaxing one constraint at the continuous optimum.

    ``multiplier``: the Lagrange multiplier (``-d ln``-free form: ``-d (f*/f_ref) / d ln c``);
    ``price``: decrease of the objective per unit of cap (``objective_unit`` per
    ``cap_unit``); ``resolved``: the same from re-solving with the cap moved by ``+-eps``;
    ``agreement``: ``|price - resolved| / max(|price|, |resolved|)`` (None when both are ~0);
    ``resolved_left``/``resolved_right``: the one-sided re-solves (tightening, relaxing);
    ``status``: ``smooth``, or ``kink`` when they differ by more than 5 % (the optimum sits on
    a kink of the model, e.g. where offloaded activations start to be exposed: the
    multiplier is then one of several, and both one-sided values are the answer).
    """

    constraint: str
    cap: float
    cap_unit: str
    quantity: float
    active: bool
    multiplier: float
    price: float
    resolved: float | None
    agreement: float | None
    objective: str
    objective_value: float
    resolved_left: float | None = None
    resolved_right: float | None = None
    status: str = "smooth"


def memory_knobs(cfg) -> tuple[Knob, ...]:
    """The strategy's continuous memory knobs that apply to ``cfg``: the fraction of layers
    fully recomputed (with ``recompute = "full"``) and, with a host link, the offloaded
    fractions of activations and optimizer state."""
    out = []
    st = cfg.strategy
    if RECOMPUTE_MODES[int(np.argmax(np.asarray(st.recompute)))] == "full":
        out.append(Knob("strategy.recompute_fraction", 0.0, 1.0, log=False))
    if float(cfg.system.accelerator.host_link_gbps) > 0:
        out.append(Knob("strategy.offload_activations", 0.0, 1.0, log=False))
        out.append(Knob("strategy.offload_optimizer", 0.0, 1.0, log=False))
    return tuple(out)


def _to_z(knob: Knob, x: float) -> float:
    """The solver's variable of a knob: ``ln x`` (log knobs) or ``x``."""
    return math.log(x) if knob.log else float(x)


def _from_z(knob: Knob, z):
    return jnp.exp(z) if knob.log else z


def _box(knobs: tuple, z):
    """The box of every knob as constraints ``b <= 0`` (upper, then lower, per knob; in the
    solver's variables: ``ln x`` for log knobs)."""
    out = []
    for i, k in enumerate(knobs):
        lo, hi = (math.log(k.lo), math.log(k.hi)) if k.log else (k.lo, k.hi)
        out += [z[i] - hi, lo - z[i]]
    return jnp.stack(out)


@functools.cache
def _program(knobs: tuple, objective: str, active: tuple, inner_steps: int):
    """Compiled ``(solve, measure, kkt)`` for one structure (knobs, objective, active caps)."""

    def measure(base, z):
        specs = base
        for i, k in enumerate(knobs):
            specs = set_leaf(specs, k.path, _from_z(k, z[i]))
        r = _report(specs)
        q = constrained_quantities(r, specs["system"], active) if active else jnp.zeros((0,))
        q = jnp.concatenate([q, r.memory_gb["total"][None]])
        return OBJECTIVES[objective](r), q

    def constraints(base, z, caps):
        """Every constraint ``<= 0``: the caps (log ratios), then the boxes."""
        return jnp.concatenate([jnp.log(measure(base, z)[1] / caps), _box(knobs, z)])

    def lagrangian(z, base, caps, lam, rho, f_ref):
        f = measure(base, z)[0]
        g = constraints(base, z, caps)
        pen = jnp.maximum(0.0, lam / rho + g) ** 2 - (lam / rho) ** 2
        return f / f_ref + 0.5 * rho * jnp.sum(pen)

    def solve(z, base, caps, lam, rho, f_ref):
        fun = functools.partial(lagrangian, base=base, caps=caps, lam=lam, rho=rho, f_ref=f_ref)
        opt = optax.lbfgs()
        vg = optax.value_and_grad_from_state(fun)

        def body(_, carry):
            z, state = carry
            value, grad = vg(z, state=state)
            upd, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(z, upd), state

        z, _ = jax.lax.fori_loop(0, inner_steps, body, (z, opt.init(z)))
        f, q = measure(base, z)
        return z, f, q, constraints(base, z, caps)

    def kkt(base, z, caps, f_ref):
        gf = jax.grad(lambda z: measure(base, z)[0] / f_ref)(z)
        jg = jax.jacfwd(lambda z: constraints(base, z, caps))(z)
        return gf, jg

    return jit(solve), jit(measure), jit(kkt)


def solve_continuous(
    cfg,
    knobs: tuple[Knob, ...],
    *,
    objective: str,
    constraints: dict | None = None,
    memory_cap_gb: float | None = None,
    z0=None,
    lam0=None,
    rho: float = 10.0,
    outer: int = 60,
    inner_steps: int = 60,
    tol: float = 1e-10,
):
    """The continuous optimum of ``objective`` over ``knobs`` (discrete choices fixed at
    ``cfg``) under the caps of ``constraints`` and memory <= ``memory_cap_gb`` (default: the
    accelerator's HBM).  ``z0``, ``lam0`` and ``rho`` warm-start the variables (in the
    sigmoid's space), the multipliers and the penalty (a re-solve near a solution).  Returns
    a dict: ``z``, ``x`` (``{path: value}``), ``value``, ``quantities``, ``caps``, ``names``
    (constraint names, ``memory`` last), ``lam`` (from the KKT conditions), ``lam_al`` (the
    augmented Lagrangian's), ``rho``, ``feasible``."""
    if objective not in OBJECTIVES:
        raise SpecError("objective", objective, f"one of {sorted(OBJECTIVES)}")
    if not knobs:
        raise SpecError("shadow-price knobs", knobs, "at least one continuous variable")
    caps_all = caps_of(constraints or {})
    active = active_constraints(caps_all)
    names = [CONSTRAINTS[i] for i in active] + ["memory"]
    hbm = float(cfg.system.accelerator.hbm_gb) if memory_cap_gb is None else memory_cap_gb
    caps = np.asarray([caps_all[i] for i in active] + [hbm], dtype=float)
    for k in knobs:
        if not (k.lo < k.hi and (k.lo > 0 or not k.log)):
            raise SpecError(f"knob {k.path}", (k.lo, k.hi), "lo < hi (lo > 0 for a log knob)")
    solve, measure, kkt = _program(tuple(knobs), objective, active, inner_steps)
    base = jax.tree_util.tree_map(jnp.asarray, specs_of(cfg))
    if z0 is None:
        specs = specs_of(cfg)
        z0 = [_to_z(k, float(np.asarray(get_leaf(specs, k.path)))) for k in knobs]
    z = jnp.asarray(z0, dtype=float)
    f_ref = float(measure(base, z)[0])
    n_all = len(caps) + 2 * len(knobs)
    lam = np.zeros(n_all) if lam0 is None else np.asarray(lam0, dtype=float).copy()
    viol_prev = math.inf
    for _ in range(outer):
        z, f, q, g = solve(z, base, jnp.asarray(caps), jnp.asarray(lam), rho, f_ref)
        g = np.asarray(g)
        lam_new = np.maximum(0.0, lam + rho * g)
        viol = float(np.max(np.maximum(g, 0.0)))
        done = viol < tol and float(np.max(np.abs(lam_new - lam))) < 1e-6 * (1 + np.max(lam))
        lam = lam_new
        if done:
            break
        if viol > 0.25 * viol_prev:
            rho = min(rho * 5.0, 1e7)
        viol_prev = viol
    f, q = measure(base, z)
    # Multipliers from the KKT conditions at the solution (least squares over the active
    # constraints, caps and boxes, clipped at 0): grad F + sum_j lam_j grad g_j = 0.
    gf, jg = (np.asarray(a) for a in kkt(base, z, jnp.asarray(caps), f_ref))
    g = _constraint_values(z, caps, q, knobs)
    act = np.flatnonzero((g > -1e-6) & (lam > 0))
    lam_kkt = np.zeros(n_all)
    if act.size:
        sol_ls = np.linalg.lstsq(jg[act].T, -gf, rcond=None)[0]
        lam_kkt[act] = np.maximum(sol_ls, 0.0)
    return {
        "z": np.asarray(z),
        "x": {k.path: float(_from_z(k, z[i])) for i, k in enumerate(knobs)},
        "value": float(f),
        "f_ref": f_ref,
        "quantities": np.asarray(q),
        "caps": caps,
        "names": names,
        "lam": lam_kkt[: len(caps)],
        "lam_al": lam,
        "rho": rho,
        "feasible": bool(np.all(np.asarray(q) <= caps * (1 + 1e-6))),
    }


def _constraint_values(z, caps, q, knobs):
    """The constraint values at the solution (caps as log ratios, then the boxes)."""
    return np.concatenate([np.log(np.asarray(q) / caps), np.asarray(_box(tuple(knobs), z))])


def shadow_prices(
    cfg,
    knobs: tuple[Knob, ...],
    *,
    objective: str,
    constraints: dict | None = None,
    eps: float = 1e-3,
    confirm: bool = True,
) -> tuple[list[ShadowPrice], dict]:
    """Shadow price of every constraint (the problem's finite caps, then memory) at the
    continuous optimum over ``knobs``; returns ``(prices, solution)``.

    Example:
        >>> import codesign as cd
        >>> from codesign.sensitivity import Knob, shadow_prices
        >>> cfg = cd.load_run_dict({"model": {"preset": "llama3-8b"},
        ...     "training": {"global_batch": 512, "tokens": 1e12},
        ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        ...     "strategy": {"tp": 1, "pp": 1, "dp": 64}})
        >>> prices, sol = shadow_prices(cfg, (Knob("system.tiers[1].bandwidth_gbps", 5, 400),),
        ...     objective="time_to_train", constraints={"capex_max_usd": 2.4e6}, confirm=False)
        >>> [p.constraint for p in prices]
        ['capex_max_usd', 'memory']
    """
    sol = solve_continuous(cfg, knobs, objective=objective, constraints=constraints)
    f_ref, caps = sol["f_ref"], sol["caps"]
    out = []
    for j, name in enumerate(sol["names"]):
        lam = float(sol["lam"][j])
        cap = float(caps[j])
        price = lam * f_ref / cap
        resolved = left = right = None
        if confirm and math.isfinite(cap):
            vals = []
            for sign in (-1.0, 1.0):
                c = dict(constraints or {})
                mem = None
                if name == "memory":
                    mem = cap * (1.0 + sign * eps)
                elif name == "mfu_min":
                    c[name] = 1.0 / (cap * (1.0 + sign * eps))
                else:
                    c[name] = cap * (1.0 + sign * eps)
                s = solve_continuous(
                    cfg,
                    knobs,
                    objective=objective,
                    constraints=c,
                    memory_cap_gb=mem,
                    z0=sol["z"],
                    lam0=sol["lam_al"],
                    rho=sol["rho"],
                )
                vals.append(s["value"] if s["feasible"] else math.nan)
            resolved = (vals[0] - vals[1]) / (2.0 * eps * cap)
            resolved = resolved if math.isfinite(resolved) else None
            one = [(vals[0] - sol["value"]) / (eps * cap), (sol["value"] - vals[1]) / (eps * cap)]
            left, right = (v if math.isfinite(v) else None for v in one)
        agree = None
        if resolved is not None:
            scale = max(abs(price), abs(resolved))
            if scale > 1e-12 * max(abs(sol["value"]), 1e-300) / max(abs(cap), 1e-300):
                agree = abs(price - resolved) / scale
        out.append(
            ShadowPrice(
                constraint=name,
                cap=cap if name != "mfu_min" else 1.0 / cap,
                cap_unit=_UNITS[name],
                quantity=float(sol["quantities"][j]),
                active=lam > 1e-9,
                multiplier=lam,
                price=price,
                resolved=resolved,
                agreement=agree,
                objective=objective,
                objective_value=sol["value"],
                resolved_left=left,
                resolved_right=right,
                status=_status(left, right, cap / max(abs(sol["value"]), 1e-300)),
            )
        )
    return out, sol


def _status(left, right, cap_over_f: float) -> str:
    """``kink`` when the one-sided re-solves differ by more than 5 % of the larger, unless
    both are re-solving noise (an elasticity of the optimum to the cap below 1e-5)."""
    if left is None or right is None:
        return "smooth"
    scale = max(abs(left), abs(right))
    if scale * cap_over_f < 1e-5:
        return "smooth"
    return "kink" if abs(left - right) > 0.05 * scale else "smooth"
