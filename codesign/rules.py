"""The rules of a configuration: derived degrees, validity, feasibility, sharding fractions.

One definition of each rule, used in two places: on the host, on concrete values, to raise a
:class:`~codesign.specs.SpecError` that names the field, its value and what is allowed
(:func:`check_strategy`, before any tracing), and traced, on batches of configurations, as
a boolean mask (:func:`valid_mask`, what the sweep and the optimizer's exact evaluator use).
Each rule of :data:`RULES` is a predicate written once against an array namespace ``xp``
(``numpy`` on the host, ``jax.numpy`` under ``jit``/``vmap``), so the two can never disagree
(a property test checks it on random configurations anyway).

The rules are Megatron-LM's (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al.
2022): ``tp pp dp cp`` equals the accelerator count; ``tp`` divides the attention heads and
divides or is a multiple of the key/value heads (GQA) and divides the Mamba-2 groups of a
hybrid model; ``pp * interleave`` divides the
layers and interleaving needs ``pp > 1`` and at least ``pp`` micro-batches per step
(Megatron-Core's ``microbatch_group_size_per_vp_stage`` lies in ``[pp, num_microbatches]``);
``cp`` divides the sequence; expert parallelism is
carved out of the ``dp * cp`` ranks (``ep`` divides ``dp * cp`` and the expert count); the
global batch is a multiple of ``dp * microbatch``; the cluster is made of whole scale-up
domains (tier 0's domain divides the accelerator count; outer tiers such as buildings may be
partly filled); FP8 needs an FP8 peak; whole-layer activation offloading (Megatron-Core's
``cpu_offloading``, ``Strategy.offload_whole_layers``) needs ``pp = 1``, no recomputation and
fewer than all layers offloaded.

Data parallelism is never chosen freely: ``dp = N / (tp pp cp)`` (:func:`derive_dp`).  ZeRO
stages shard model states over the data-parallel group (Rajbhandari et al. 2020, "ZeRO",
arXiv:1910.02054): stage 1 the optimizer state, 2 also the gradients, 3 also the weights
(:func:`zero_fractions`); expert parameters shard over the expert-data-parallel group
``dp cp / ep`` (:func:`data_parallel_groups`).

A valid configuration is *feasible* when it also fits in memory and stays within every cap
of :data:`CONSTRAINTS` (capex, power, network capex, deadline, accelerator count, minimum
MFU; :func:`feasible`, :func:`infeasibility`): an infeasible configuration is a result, not
an error.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from codesign.checks import MAX_COUNT
from codesign.pipeline import layout_valid
from codesign.specs import (
    PRECISIONS,
    RECOMPUTE_MODES,
    RECOMPUTE_MODULES,
    Model,
    SpecError,
    Strategy,
    System,
    Training,
    check_efficiency,
    check_model,
    check_system,
    check_training,
    positive,
    precision_family,
)

__all__ = [
    "Rule",
    "RULES",
    "check_strategy",
    "check_all",
    "derive_dp",
    "with_derived_dp",
    "valid_mask",
    "feasible",
    "CONSTRAINTS",
    "caps_of",
    "constrained_quantities",
    "within_caps",
    "active_constraints",
    "log_excess",
    "infeasibility",
    "zero_fractions",
    "expert_tp",
    "data_parallel_groups",
    "sharded",
]


# --------------------------------------------------------------------------------------
# Derived degrees and sharding groups
# --------------------------------------------------------------------------------------


def derive_dp(num_accelerators, tp, pp, cp, xp: Any = jnp):
    """Data-parallel degree ``round(N / (tp pp cp))`` (valid only when it divides exactly).

    Example:
        >>> import numpy as np
        >>> float(derive_dp(1024, 8, 16, 1, np))
        8.0
    """
    return xp.round(num_accelerators / (tp * pp * cp))


def with_derived_dp(specs: dict, xp: Any = jnp) -> dict:
    """``specs`` (a dict with ``system`` and ``strategy``) with ``strategy.dp`` derived."""
    st, sy = specs["strategy"], specs["system"]
    dp = derive_dp(sy.num_accelerators, st.tp, st.pp, st.cp, xp)
    return {**specs, "strategy": dataclasses.replace(st, dp=dp)}


def expert_tp(strategy: Strategy, xp: Any = jnp):
    """Expert tensor-parallel degree: ``etp``, or ``tp`` when ``etp`` is 0 (Megatron's default)."""
    return xp.where(strategy.etp > 0, strategy.etp, strategy.tp)


def zero_fractions(zero) -> dict:
    """Weights (0..1) of sharding each model state over the data-parallel group, from the
    ZeRO-stage weights ``zero`` over stages 0..3 (one-hot in the exact model):
    ``optimizer`` (stages 1-3), ``gradients`` (2-3), ``weights`` (3)."""
    z = zero
    return {"optimizer": z[1] + z[2] + z[3], "gradients": z[2] + z[3], "weights": z[3]}


def data_parallel_groups(strategy: Strategy) -> tuple:
    """``(dense, expert)`` data-parallel group sizes: ``dp cp`` and, by MoE parallel folding,
    ``max(tp dp cp / (ep etp), 1)`` (``dp cp / ep`` when ``etp = tp``)."""
    st = strategy
    dense = st.dp * st.cp
    return dense, jnp.maximum(st.tp * dense / (st.ep * expert_tp(st)), 1.0)


def sharded(dense_params, expert_params, fraction, strategy: Strategy):
    """Parameters held per rank when a ``fraction`` (0..1) of them is sharded over the dense
    and expert data-parallel groups (``p (1 - f + f / group)`` for each kind)."""
    dense, expert = data_parallel_groups(strategy)
    keep = 1.0 - fraction
    return dense_params * (keep + fraction / dense) + expert_params * (keep + fraction / expert)


# --------------------------------------------------------------------------------------
# Validity: one definition, host and traced
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    """A validity rule: ``ok(xp, model, training, system, strategy)`` is a boolean array;
    ``field``, ``value`` and ``allowed`` (functions of the same concrete specs) word the
    error when it fails."""

    field: str
    ok: Callable
    value: Callable
    allowed: Callable


def _domain_hint(sy) -> str:
    """``; e.g. system.scale_up_domain = d ...``: ``d`` the largest divisor of the accelerator
    count within the listed domain (the part of each rack a job uses, as 64 of an NVL72's 72 GPUs for 256 GPUs)."""
    n, dom = int(sy.num_accelerators), int(sy.tiers[0].domain)
    if n < 1 or not 1 <= dom <= 100_000 or n != float(sy.num_accelerators):
        return ""
    d = max(k for k in range(1, min(dom, n) + 1) if n % k == 0)
    use = f"{d} of each {dom}-accelerator domain used"
    return f"; e.g. system.scale_up_domain = {d} or that tier's domain: {use}" if d > 1 else ""


def _divides(xp, a, b):
    """``a`` divides ``b`` (both positive integers stored as floats)."""
    return (xp.mod(b, a) == 0) & (a >= 1)


def _integer(xp, x, low=1.0):
    """``x`` is an integer from ``low`` up to what float64 holds exactly
    (:data:`~codesign.checks.MAX_COUNT`)."""
    return (xp.floor(x) == x) & (x >= low) & (x <= MAX_COUNT)


def _g(x) -> str:
    return f"{float(x):g}"


def _recompute_name(st) -> str:
    return RECOMPUTE_MODES[int(np.argmax(np.asarray(st.recompute, dtype=float)))]


RULES: tuple[Rule, ...] = (
    Rule(
        "strategy.tp*pp*dp*cp",
        lambda xp, m, tr, sy, st: xp.abs(st.tp * st.pp * st.dp * st.cp - sy.num_accelerators) < 0.5,
        lambda m, tr, sy, st: (
            f"{_g(st.tp)}*{_g(st.pp)}*{_g(st.dp)}*{_g(st.cp)} = {_g(st.tp * st.pp * st.dp * st.cp)}"
        ),
        lambda m, tr, sy, st: f"equal to system.num_accelerators = {_g(sy.num_accelerators)}",
    ),
    Rule(
        "strategy.tp",
        lambda xp, m, tr, sy, st: _divides(xp, st.tp, m.heads),
        lambda m, tr, sy, st: st.tp,
        lambda m, tr, sy, st: f"a divisor of model.heads = {_g(m.heads)}",
    ),
    Rule(
        "strategy.tp",
        lambda xp, m, tr, sy, st: _divides(xp, st.tp, m.kv_heads) | _divides(xp, m.kv_heads, st.tp),
        lambda m, tr, sy, st: st.tp,
        lambda m, tr, sy, st: f"a divisor or multiple of model.kv_heads = {_g(m.kv_heads)}",
    ),
    Rule(
        "strategy.tp",
        lambda xp, m, tr, sy, st: (m.mamba_layers == 0) | _divides(xp, st.tp, m.mamba_groups),
        lambda m, tr, sy, st: st.tp,
        lambda m, tr, sy, st: (
            f"a divisor of model.mamba_groups = {_g(m.mamba_groups)} (Megatron-Core's Mamba-2 "
            "mixer splits its B/C groups over the tensor-parallel ranks)"
        ),
    ),
    Rule(
        "strategy.pp",
        lambda xp, m, tr, sy, st: layout_valid(xp, m.layers, st),
        lambda m, tr, sy, st: (
            f"{_g(st.pp)} (interleave {_g(st.interleave)}, first {_g(st.pp_first_layers)}, "
            f"last {_g(st.pp_last_layers)}, embedding/loss in split "
            f"{_g(st.pp_embedding_in_split)}/{_g(st.pp_loss_in_split)})"
        ),
        lambda m, tr, sy, st: (
            f"a stage layout Megatron-Core accepts for model.layers = {_g(m.layers)}: at least "
            "pp*interleave layers; explicit first/last stage layers with the rest split evenly "
            "over the other stages; or, with the embedding/loss counted, pp*interleave dividing "
            "layers + 1 per counted part (not together with explicit counts); when interleaved, "
            "the most loaded stage's layers divisible by interleave (equal chunks)"
        ),
    ),
    Rule(
        "strategy.interleave",
        lambda xp, m, tr, sy, st: (st.interleave == 1) | (st.pp > 1),
        lambda m, tr, sy, st: st.interleave,
        lambda m, tr, sy, st: "1 when pp = 1",
    ),
    Rule(
        "strategy.interleave",
        lambda xp, m, tr, sy, st: (
            (st.interleave == 1) | (tr.global_batch >= st.pp * st.dp * st.microbatch - 0.5)
        ),
        lambda m, tr, sy, st: (
            f"{_g(st.interleave)} with {_g(tr.global_batch / (st.dp * st.microbatch))} "
            f"micro-batches per step"
        ),
        lambda m, tr, sy, st: (
            f"1 when a step has fewer micro-batches than pp = {_g(st.pp)} (Megatron-Core's "
            "interleaved schedule runs micro-batches in groups of pp to num_microbatches: "
            "microbatch_group_size_per_vp_stage)"
        ),
    ),
    Rule(
        "strategy.cp",
        lambda xp, m, tr, sy, st: _divides(xp, st.cp, m.seq_len),
        lambda m, tr, sy, st: st.cp,
        lambda m, tr, sy, st: f"a divisor of model.seq_len = {_g(m.seq_len)}",
    ),
    Rule(
        "strategy.etp",
        lambda xp, m, tr, sy, st: (st.etp == 0) | _integer(xp, st.etp),
        lambda m, tr, sy, st: st.etp,
        lambda m, tr, sy, st: "0 (same as tp) or a positive integer",
    ),
    Rule(
        "strategy.ep*etp",
        lambda xp, m, tr, sy, st: _divides(xp, st.ep * expert_tp(st, xp), st.tp * st.dp * st.cp),
        lambda m, tr, sy, st: f"{_g(st.ep)}*{_g(expert_tp(st, np))}",
        lambda m, tr, sy, st: (
            f"a divisor of tp*dp*cp = {_g(st.tp * st.dp * st.cp)} (MoE parallel folding)"
        ),
    ),
    Rule(
        "strategy.ep",
        lambda xp, m, tr, sy, st: (
            (st.ep == 1)
            | ((m.moe_experts > 0) & _divides(xp, st.ep, xp.maximum(m.moe_experts, 1.0)))
        ),
        lambda m, tr, sy, st: st.ep,
        lambda m, tr, sy, st: (
            f"1 for a dense model, else a divisor of moe_experts = {_g(m.moe_experts)}"
        ),
    ),
    Rule(
        "training.global_batch",
        lambda xp, m, tr, sy, st: _divides(xp, st.dp * st.microbatch, tr.global_batch),
        lambda m, tr, sy, st: tr.global_batch,
        lambda m, tr, sy, st: f"a multiple of dp*microbatch = {_g(st.dp * st.microbatch)}",
    ),
    Rule(
        "system.tiers[0].domain",
        lambda xp, m, tr, sy, st: (
            (sy.tiers[0].domain >= sy.num_accelerators)
            | (xp.mod(sy.num_accelerators, sy.tiers[0].domain) == 0)
        ),
        lambda m, tr, sy, st: sy.tiers[0].domain,
        lambda m, tr, sy, st: (
            f"a divisor of num_accelerators = {_g(sy.num_accelerators)} (whole scale-up domains"
            f"{_domain_hint(sy)})"
        ),
    ),
    Rule(
        "training.precision",
        lambda xp, m, tr, sy, st: (
            (
                xp.asarray(precision_family(tr.precision) != "fp8")
                | (sy.accelerator.peak_tflops_fp8 > 0)
            )
            & (
                xp.asarray(precision_family(tr.precision) != "fp4")
                | (sy.accelerator.peak_tflops_fp4 > 0)
            )
        ),
        lambda m, tr, sy, st: tr.precision,
        lambda m, tr, sy, st: (
            "a precision the accelerator has a peak for (system.peak_tflops_fp8 / "
            "peak_tflops_fp4 > 0); bf16 runs everywhere"
        ),
    ),
    Rule(
        "training.bf16_layers_start",
        lambda xp, m, tr, sy, st: tr.bf16_layers_start + tr.bf16_layers_end <= m.layers,
        lambda m, tr, sy, st: (
            f"{_g(tr.bf16_layers_start)} (bf16_layers_end {_g(tr.bf16_layers_end)})"
        ),
        lambda m, tr, sy, st: (
            f"at most layers - bf16_layers_end = {_g(m.layers - tr.bf16_layers_end)} "
            "(the 16-bit layers at both ends are model layers)"
        ),
    ),
    Rule(
        "training.fp8_attention",
        lambda xp, m, tr, sy, st: (
            (tr.fp8_attention == 0)
            | (
                xp.asarray(precision_family(tr.precision) in ("fp8", "fp4"))
                & (sy.accelerator.peak_tflops_fp8 > 0)
            )
        ),
        lambda m, tr, sy, st: tr.fp8_attention,
        lambda m, tr, sy, st: (
            "0 unless the precision is FP8 or FP4 and the accelerator has an FP8 peak "
            "(system.peak_tflops_fp8 > 0): FP8 attention runs inside an FP8 recipe"
        ),
    ),
    Rule(
        "strategy.offload_activations",
        lambda xp, m, tr, sy, st: (
            ((st.offload_activations == 0) & (st.offload_optimizer == 0))
            | (sy.accelerator.host_link_gbps > 0)
        ),
        lambda m, tr, sy, st: (
            f"{_g(st.offload_activations)} (optimizer {_g(st.offload_optimizer)})"
        ),
        lambda m, tr, sy, st: "0 unless system.host_link_gbps > 0 (offloading needs a host link)",
    ),
    Rule(
        "strategy.offload_whole_layers",
        lambda xp, m, tr, sy, st: (
            (st.offload_activations == 0)
            | (st.offload_whole_layers == 0)
            | (
                (st.pp == 1)
                & (st.recompute[..., 0] == 1)
                & (st.offload_activations * m.layers <= m.layers - 1)
            )
        ),
        lambda m, tr, sy, st: (
            f"true with offload_activations {_g(st.offload_activations)}, pp {_g(st.pp)}, "
            f"recompute {_recompute_name(st)}"
        ),
        lambda m, tr, sy, st: (
            "false (module-level offloading), or pp = 1, recompute none and fewer than all "
            "layers offloaded (Megatron-Core's cpu_offloading rejects pipeline parallelism "
            "and recomputation)"
        ),
    ),
    Rule(
        "strategy.recompute_modules",
        lambda xp, m, tr, sy, st: (st.recompute_modules[5] == 0) | (m.kv_lora_rank > 0),
        lambda m, tr, sy, st: "mla_up_proj",
        lambda m, tr, sy, st: "mla_up_proj only for an MLA model (model.kv_lora_rank > 0)",
    ),
)
"""The validity rules, in the order :func:`check_strategy` reports them."""

_DEGREES = ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave")
_LAYER_COUNTS = ("pp_first_layers", "pp_last_layers")
_FRACTIONS = ("recompute_fraction", "offload_activations", "offload_optimizer")


def valid_mask(specs: dict):
    """Validity of a (batched, traced) configuration: integer degrees and every rule of
    :data:`RULES`.  ``specs`` is a dict with ``model``, ``training``, ``system`` and
    ``strategy``."""
    m, tr, sy, st = specs["model"], specs["training"], specs["system"], specs["strategy"]
    ok = jnp.asarray(True)
    for d in _DEGREES:
        ok &= _integer(jnp, getattr(st, d))
    for d in _LAYER_COUNTS:
        ok &= _integer(jnp, getattr(st, d), low=0.0)
    for d in _FRACTIONS:
        x = getattr(st, d)
        ok &= (x >= 0) & (x <= 1)
    ok &= st.moe_capacity_factor >= 0
    for rule in RULES:
        ok &= rule.ok(jnp, m, tr, sy, st)
    return ok


def check_strategy(st: Strategy, model: Model, training: Training, system: System) -> None:
    """Check a concrete strategy against the model, batch and system it runs; raise
    :class:`SpecError` on the first broken rule (the same rules as :func:`valid_mask`)."""
    for d in _DEGREES:
        positive(f"strategy.{d}", getattr(st, d), integer=True)
    positive("training.global_batch", training.global_batch, integer=True)
    if training.precision not in PRECISIONS:
        raise SpecError("training.precision", training.precision, f"one of {list(PRECISIONS)}")
    for name, vec, k in (("recompute", st.recompute, 3), ("zero", st.zero, 4)):
        arr = np.asarray(vec, dtype=float)
        if arr.shape != (k,) or np.any(arr < 0) or abs(arr.sum() - 1) > 1e-9:
            raise SpecError(
                f"strategy.{name}", arr.tolist(), f"weights over {k} options summing to 1"
            )
    for d in (*_LAYER_COUNTS, "etp"):  # etp: finite before the rules read it (0: same as tp)
        positive(f"strategy.{d}", getattr(st, d), integer=True, allow_zero=True)
    for d in _FRACTIONS:
        if not 0 <= positive(f"strategy.{d}", getattr(st, d), allow_zero=True) <= 1:
            raise SpecError(f"strategy.{d}", getattr(st, d), "a fraction in [0, 1]")
    positive("strategy.moe_capacity_factor", st.moe_capacity_factor, allow_zero=True)
    mods = np.asarray(st.recompute_modules, dtype=float)
    if mods.shape != (len(RECOMPUTE_MODULES),) or np.any((mods < 0) | (mods > 1)):
        raise SpecError(
            "strategy.recompute_modules",
            mods.tolist(),
            f"weights in [0, 1] over {list(RECOMPUTE_MODULES)}",
        )
    pl = np.asarray(st.placement, dtype=float)
    if pl.shape != (5,):
        raise SpecError("strategy.placement", pl.tolist(), "5 ranks for (tp, cp, ep, dp, pp)")
    positive("training.tokens", training.tokens, allow_zero=True)
    m, tr, sy, s = _Floats(model), _Floats(training), _Floats(system), _Floats(st)
    for rule in RULES:
        if not bool(rule.ok(_Host, m, tr, sy, s)):
            raise SpecError(rule.field, rule.value(m, tr, sy, s), rule.allowed(m, tr, sy, s))


class _Floats:
    """A concrete spec seen through Python floats: each scalar leaf the rules read is converted
    when read (fast host arithmetic; strings stay strings, sub-specs and tiers are wrapped)."""

    def __init__(self, spec):
        self._spec = spec

    def __getattr__(self, name):  # called once per field: the value is then an attribute
        v = getattr(self._spec, name)
        if isinstance(v, tuple):
            v = tuple(_Floats(x) for x in v)
        elif dataclasses.is_dataclass(v):
            v = _Floats(v)
        elif np.ndim(v) > 0:
            v = np.asarray(v, dtype=float)
        elif not (type(v) is float or isinstance(v, str)):
            v = float(v)
        setattr(self, name, v)
        return v


class _Host:
    """The array namespace of the rules on the host: Python arithmetic on floats (numpy
    scalars cost a microsecond per operation; one checked evaluation runs every rule)."""

    mod = staticmethod(operator.mod)
    abs = staticmethod(abs)
    floor = staticmethod(math.floor)
    maximum = staticmethod(max)
    asarray = staticmethod(bool)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b


# --------------------------------------------------------------------------------------
# Feasibility
# --------------------------------------------------------------------------------------


CONSTRAINTS = (
    "capex_max_usd",
    "power_max_kw",
    "network_capex_max_usd",
    "time_to_train_max_days",
    "num_accelerators_max",
    "mfu_min",
    "moe_dropped_fraction_max",
)
"""The constraints a design may be held to, in the order of the ``caps`` vectors below
(memory fit is always required).  ``mfu_min`` is a lower bound; it is held as the cap
``1 / mfu_min`` on ``1 / MFU`` so that every constraint reads ``quantity <= cap``.
``moe_dropped_fraction_max`` caps the share of routed tokens that MoE token drop discards
(:attr:`codesign.step.Report.moe_dropped_fraction`; dropless and dense models: 0)."""


_QUANTITIES = {
    "capex_max_usd": lambda r, sy: r.cost["capex_usd"],
    "power_max_kw": lambda r, sy: r.cost["power_kw"],
    "network_capex_max_usd": lambda r, sy: r.cost["network_capex_usd"],
    "time_to_train_max_days": lambda r, sy: r.cost["time_to_train_days"],
    "num_accelerators_max": lambda r, sy: sy.num_accelerators + 0.0 * r.cost["capex_usd"],
    "mfu_min": lambda r, sy: 1.0 / jnp.maximum(r.mfu, 1e-30),
    "moe_dropped_fraction_max": lambda r, sy: jnp.maximum(r.moe_dropped_fraction, 1e-30),
}


def constrained_quantities(report, system: System, active=None):
    """The quantities of :data:`CONSTRAINTS` (``1 / MFU`` for ``mfu_min``), stacked; only
    those at the indices ``active`` (static) when given: a compiled sweep then computes
    nothing for a constraint that the problem does not set."""
    idx = range(len(CONSTRAINTS)) if active is None else active
    q = [_QUANTITIES[CONSTRAINTS[i]](report, system) for i in idx]
    return jnp.stack([jnp.asarray(x, dtype=float) for x in jnp.broadcast_arrays(*q)])


def caps_of(constraints: dict) -> list[float]:
    """The caps vector of a ``{constraint name: value}`` dict (``inf``: no constraint)."""
    out = []
    for k in CONSTRAINTS:
        v = float(constraints.get(k, math.inf if k != "mfu_min" else 0.0))
        out.append((1.0 / v if v > 0 else math.inf) if k == "mfu_min" else v)
    return out


def active_constraints(caps) -> tuple[int, ...]:
    """Indices of the finite caps (host values): the constraints a problem sets."""
    return tuple(i for i, c in enumerate(caps) if math.isfinite(float(c)))


def within_caps(report, system: System, caps, active=None):
    """Each quantity within its cap (``(len(active),)`` booleans; all constraints when
    ``active`` is None)."""
    idx = tuple(range(len(CONSTRAINTS))) if active is None else active
    if not idx:
        return jnp.zeros((0,), dtype=bool)
    return constrained_quantities(report, system, idx) <= jnp.stack([caps[i] for i in idx])


def feasible(report, system: System, caps):
    """A valid configuration is feasible when it fits in memory and every quantity of
    :data:`CONSTRAINTS` is within its cap (``caps`` from :func:`caps_of`; ``inf``: none)."""
    return report.fits & jnp.all(within_caps(report, system, caps))


def log_excess(x, cap):
    """``max(log(x / cap), 0)`` where ``cap`` is finite, else 0 (NaN-free)."""
    ok = jnp.isfinite(cap)
    return jnp.where(ok, jnp.maximum(jnp.log(x) - jnp.log(jnp.where(ok, cap, 1.0)), 0.0), 0.0)


def infeasibility(report, system: System, caps, active=None):
    """How far a configuration is from feasibility: the sum of the log-ratio excesses of
    memory over HBM and of every constrained quantity over its cap (0 when feasible), so a
    search can walk from an infeasible point into the feasible set."""
    excess = jnp.maximum(jnp.log(report.memory_gb["total"] / system.accelerator.hbm_gb), 0.0)
    idx = tuple(range(len(CONSTRAINTS))) if active is None else active
    if not idx:
        return excess
    q = constrained_quantities(report, system, idx)
    return excess + jnp.sum(log_excess(q, jnp.stack([caps[i] for i in idx])))


def check_all(
    model: Model, training: Training, system: System, strategy: Strategy, efficiency=None
) -> None:
    """All checks of one concrete configuration (what :func:`codesign.evaluate` runs first)."""
    check_model(model)
    check_training(training)
    check_system(system)
    check_strategy(strategy, model, training, system)
    if efficiency is not None:
        check_efficiency(efficiency)
