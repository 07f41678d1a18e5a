"""The parameters a sensitivity analysis moves: leaf paths of the specs, with their kind.

Every parameter is a leaf of the specs (:func:`codesign.search.get_leaf`) moved by a
multiplicative factor, ``p -> p * exp(s)``, so that ``d ln f / d s`` at ``s = 0`` is the
elasticity ``d ln f / d ln p`` (the percentage change of ``f`` per percent of ``p``).  A
parameter is

* **continuous** when the exact model is a continuous function of it (bandwidths,
  latencies, FLOP/s, HBM, prices, power, PUE, sequence length, hidden size, ...): its
  elasticity is a derivative;
* **discrete** when the exact model only takes it at integer points (accelerator count,
  layers, global batch, experts, top-k): its elasticity is an arc elasticity to the
  neighbouring valid values (one data-parallel replica, one micro-batch per replica, one
  layer per stage, one expert per rank, one routed expert), ``ln(f+/f-) / ln(p+/p-)``.

Moving ``system.num_accelerators`` moves ``dp`` with it (the strategy keeps tp, pp, cp) and
the domain of every tier that spans the whole cluster (the fabric grows with it).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign.goodput import COMPONENTS
from codesign.rules import valid_mask, with_derived_dp
from codesign.search._grid import get_leaf, set_leaf, specs_of
from codesign.specs import SpecError, precision_family

__all__ = [
    "Parameter",
    "parameters_of",
    "apply_scales",
    "GROUPS",
    "lattice_step",
    "neighbour_scales",
]

GROUPS = ("hardware", "economics", "workload")
"""Parameter groups: the cluster's hardware (what a designer buys), its economics (prices,
power, PUE, electricity) and the workload (model and batch)."""

_PEAK = {"bf16": "peak_tflops", "fp8": "peak_tflops_fp8", "fp4": "peak_tflops_fp4"}
_RELIABILITY = (
    *((f"{c}_per_mh", f"{c} failures per million accelerator-hours") for c in COMPONENTS),
    ("checkpoint_gbps", "checkpoint storage (GB/s per accelerator)"),
    ("checkpoint_interval_s", "checkpoint interval (s)"),
    ("restart_s", "restart after a failure (s)"),
    ("rewarm_s", "re-warm after a restart (s)"),
    ("repair_s", "repair wait without a hot spare (s)"),
    ("spares_per_domain", "hot spares per blast unit"),
)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter of a sensitivity analysis.

    ``name`` is the leaf path without its ``system.`` prefix (``tiers[1].bandwidth_gbps``,
    ``accelerator.hbm_gb``, ``num_accelerators``, ``model.seq_len``); ``label`` says it in
    words (with the tier's catalog name); ``lower``/``upper`` are its physical bounds.
    """

    name: str
    path: str
    label: str
    group: str
    value: float
    discrete: bool = False
    lower: float = 0.0
    upper: float = math.inf


def _tier_name(cfg, i: int) -> str:
    names = list((getattr(cfg, "names", {}) or {}).get("tiers", []))
    return str(names[i]) if i < len(names) else f"tier {i}"


def parameters_of(cfg, groups=GROUPS, names=None) -> tuple[Parameter, ...]:
    """Every parameter of a run configuration that has a non-zero value, in a fixed order:
    hardware (peak FLOP/s per precision, HBM capacity and bandwidth, host link, each tier's
    bandwidth, latency, domain, oversubscription and efficiency, the accelerator count),
    economics (accelerator price and power, each tier's price per GB/s and power, host capex
    and power, PUE, electricity price, amortization) and workload (sequence length, global
    batch, hidden size, layers, experts, top-k, training tokens).

    ``groups`` selects groups (:data:`GROUPS`); ``names`` selects parameters by name (a
    name that is not a parameter of this configuration is an error).
    """
    for g in groups:
        if g not in GROUPS:
            raise SpecError("sensitivity group", g, f"one of {list(GROUPS)}")
    sy, m, tr = cfg.system, cfg.model, cfg.training
    n = float(sy.num_accelerators)
    out: list[Parameter] = []

    def add(path, label, group, discrete=False, lower=0.0, upper=math.inf):
        value = float(np.asarray(get_leaf(specs_of(cfg), path)))
        if value > 0:
            out.append(
                Parameter(
                    name=path.removeprefix("system."),
                    path=path,
                    label=label,
                    group=group,
                    value=value,
                    discrete=discrete,
                    lower=lower,
                    upper=upper,
                )
            )

    acc = str((getattr(cfg, "names", {}) or {}).get("accelerator", "accelerator"))
    for prec, field in _PEAK.items():
        used = " (this run's precision)" if precision_family(tr.precision) == prec else ""
        add(f"system.accelerator.{field}", f"{acc} dense {prec} peak TFLOP/s{used}", "hardware")
    add("system.accelerator.hbm_gb", f"{acc} HBM capacity (GB)", "hardware")
    add("system.accelerator.hbm_tbps", f"{acc} HBM bandwidth (TB/s)", "hardware")
    add("system.accelerator.host_link_gbps", f"{acc} host link (GB/s)", "hardware")
    add("system.accelerator.exp_tera_per_s", f"{acc} softmax exponentials (1e12/s)", "hardware")
    for i in range(len(sy.tiers)):
        t = _tier_name(cfg, i)
        p = f"system.tiers[{i}]"
        add(f"{p}.bandwidth_gbps", f"{t} bandwidth (GB/s per accelerator)", "hardware")
        add(f"{p}.latency_us", f"{t} latency (us)", "hardware")
        # A domain lies between the inner tier's and the outer tier's (the cluster's); a
        # tier that already spans the cluster has no domain to move.
        if float(sy.tiers[i].domain) < n:
            inner = float(sy.tiers[i - 1].domain) if i > 0 else 1.0
            outer = float(sy.tiers[i + 1].domain) if i + 1 < len(sy.tiers) else n
            add(
                f"{p}.domain",
                f"{t} domain (accelerators)",
                "hardware",
                lower=inner,
                upper=min(outer, n),
            )
        add(f"{p}.oversubscription", f"{t} oversubscription", "hardware", lower=1.0)
        add(f"{p}.efficiency", f"{t} achieved fraction of bandwidth", "hardware", upper=1.0)
    add("system.num_accelerators", "accelerator count", "hardware", discrete=True, lower=1.0)
    if float(sy.reliability.enabled) > 0:  # goodput at scale (codesign.goodput)
        for f, label in _RELIABILITY:
            add(f"system.reliability.{f}", label, "hardware")
    add("system.accelerator.price_usd", f"{acc} price (USD)", "economics")
    add("system.accelerator.power_w", f"{acc} power (W)", "economics")
    for i in range(len(sy.tiers)):
        t = _tier_name(cfg, i)
        add(f"system.tiers[{i}].price_per_gbps_usd", f"{t} price (USD per GB/s)", "economics")
        add(f"system.tiers[{i}].power_w", f"{t} power (W per accelerator)", "economics")
    add("system.host_capex_usd_per_accelerator", "host capex (USD per accelerator)", "economics")
    add("system.host_power_w_per_accelerator", "host power (W per accelerator)", "economics")
    add("system.pue", "PUE", "economics", lower=1.0)
    add("system.usd_per_kwh", "electricity price (USD/kWh)", "economics")
    add("system.amortization_years", "amortization (years)", "economics")
    add("model.seq_len", "sequence length", "workload")
    add("training.global_batch", "global batch (sequences)", "workload", discrete=True)
    add("model.hidden", "hidden size", "workload")
    add("model.layers", "layers", "workload", discrete=True, lower=1.0)
    if float(m.moe_experts) > 0:
        add("model.moe_experts", "experts", "workload", discrete=True, lower=1.0)
        add("model.moe_top_k", "routed experts per token (top-k)", "workload", discrete=True)
    add("training.tokens", "training tokens", "workload")
    out = [p for p in out if p.group in groups]
    if names is not None:
        known = {p.name: p for p in out}
        bad = [x for x in names if x not in known]
        if bad:
            raise SpecError("sensitivity parameter", bad[0], f"one of {sorted(known)}")
        out = [known[x] for x in names]
    return tuple(out)


def _covering_tiers(cfg) -> tuple[int, ...]:
    n = float(cfg.system.num_accelerators)
    return tuple(i for i, t in enumerate(cfg.system.tiers) if float(t.domain) >= n)


def apply_scales(specs: dict, params: tuple[Parameter, ...], scales, covering=()) -> dict:
    """``specs`` with parameter ``i`` multiplied by ``exp(scales[i])`` and ``dp`` derived
    (traced; ``covering``: the tiers whose domain grows with the accelerator count)."""
    for i, prm in enumerate(params):
        f = jnp.exp(scales[i])
        specs = set_leaf(specs, prm.path, _snap(get_leaf(specs, prm.path) * f))
        if prm.path == "system.num_accelerators":
            for t in covering:
                path = f"system.tiers[{t}].domain"
                specs = set_leaf(specs, path, _snap(get_leaf(specs, path) * f))
    return with_derived_dp(specs)


def _snap(x):
    """``x`` rounded to the integer it is within 1e-9 of (``8 * exp(ln 8)`` is 64, not
    64.00000000000001, so a domain still divides the accelerator count), by the
    straight-through estimator: the gradient stays 1."""
    r = jnp.round(x)
    close = jnp.abs(x - r) <= 1e-9 * jnp.maximum(jnp.abs(x), 1.0)
    return x + jax.lax.stop_gradient(jnp.where(close, r - x, 0.0))


def _valid(cfg, path: str, value: float) -> bool:
    specs = set_leaf(specs_of(cfg), path, float(value))
    if path == "system.num_accelerators":
        n0 = float(cfg.system.num_accelerators)
        tiers = tuple(
            dataclasses.replace(t, domain=float(value)) if float(t.domain) >= n0 else t
            for t in specs["system"].tiers
        )
        specs["system"] = dataclasses.replace(specs["system"], tiers=tiers)
    return bool(np.asarray(valid_mask(with_derived_dp(specs, np))))


def lattice_step(cfg, prm: Parameter) -> float:
    """The step between neighbouring values of a discrete parameter under the run's strategy:
    one data-parallel replica, one micro-batch per replica, one layer per pipeline chunk, one
    expert per expert-parallel rank, one routed expert."""
    st = cfg.strategy
    return {
        "system.num_accelerators": float(st.tp * st.pp * st.cp),
        "training.global_batch": float(st.dp * st.microbatch),
        "model.layers": float(st.pp * st.interleave),
        "model.moe_experts": float(st.ep),
        "model.moe_top_k": 1.0,
    }[prm.path]


def neighbour_scales(cfg, prm: Parameter) -> tuple[float | None, float | None]:
    """Log-scale steps ``(down, up)`` to the neighbouring valid values of a discrete
    parameter (None where there is none within 16 steps)."""
    v, step = prm.value, lattice_step(cfg, prm)
    out = []
    for sign in (-1.0, 1.0):
        found = None
        for k in range(1, 17):
            w = v + sign * k * step
            if w < max(prm.lower, 1.0) or w > prm.upper:
                break
            if _valid(cfg, prm.path, w):
                found = math.log(w / v)
                break
        out.append(found)
    return out[0], out[1]
