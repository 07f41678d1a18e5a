"""Capital cost, hourly cost, energy, and the cost and time to train.

* capex = N (accelerator price + host capex per accelerator)
  + N sum_t (tier bandwidth GB/s x tier price per GB/s): each accelerator has a port on
  every tier, priced per unit of its bandwidth (the per-GB/s costing of LIBRA, Won et al.
  2023, arXiv:2109.11762); a part or tier moved away from its listed values (HBM, FLOP/s,
  domain, latency, oversubscription) is priced at the margin by :mod:`codesign.pricing`;
* power = N (accelerator TDP + host power + sum_t tier power) x PUE (Barroso, Hölzle &
  Ranganathan, *The Datacenter as a Computer*, 3rd ed., 2018, ch. 5); nameplate power is
  an upper bound of the average;
* $/hour = capex / (amortization years x 8760 h) + power (kW) x $/kWh (straight-line
  amortization, no cost of capital);
* $/step and kWh/step scale the hourly figures by the step time; time and cost to train
  are ``tokens / tokens_per_s`` and ``steps x $/step``, divided by the expected goodput
  (:mod:`codesign.goodput`: failures, checkpoints, restarts) when
  ``system.reliability.enabled``;
* with reliability on, checkpoint storage (``checkpoint_gbps`` per accelerator at
  ``usd_per_checkpoint_gbps`` and ``w_per_checkpoint_gbps``) and hot spares (idle accelerators
  with their host and network share, powered) add to capex and power.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.goodput import goodput
from codesign.pricing import accelerator_power_w, accelerator_price_usd, tier_price_factor
from codesign.smoothing import EXACT, Smoothing, safe_div
from codesign.specs import Strategy, System, Training

__all__ = ["CLUSTER_COST_KEYS", "cluster_cost", "to_train", "tokens_to_train"]

HOURS_PER_YEAR = 8760.0
CLUSTER_COST_KEYS = (
    "capex_usd",
    "network_capex_usd",
    "power_kw",
    "usd_per_hour",
    "usd_per_step",
    "energy_kwh_per_step",
)
"""The cluster's own cost figures (what it costs to own and run, per hour and per step)."""


def cluster_cost(
    system: System,
    step_time_s,
    tokens_per_step,
    total_tokens,
    checkpoint_bytes=0.0,
    replica=1.0,
) -> dict:
    """Cost figures of a cluster running steps of ``step_time_s`` seconds.

    ``checkpoint_bytes`` (a full checkpoint) and ``replica`` (accelerators of one model
    replica, ``tp pp cp``) feed the goodput model (:func:`codesign.goodput.goodput`), whose
    figures the dict carries too (``goodput``, ``failures_per_day``, ...).
    """
    n = system.num_accelerators
    a = system.accelerator
    pr = system.pricing
    rel = system.reliability
    g = goodput(
        rel,
        n,
        checkpoint_bytes,
        a.host_link_gbps,
        jnp.minimum(system.tiers[0].domain, n),
        replica,
    )
    spares = g["spare_accelerators"]
    network_capex = sum(
        t.bandwidth_gbps * t.price_per_gbps_usd * tier_price_factor(t, pr, i == 0)
        for i, t in enumerate(system.tiers)
    )
    storage = rel.enabled * rel.checkpoint_gbps
    storage_capex = n * storage * rel.usd_per_checkpoint_gbps
    per_accelerator = (
        accelerator_price_usd(a, pr) + system.host_capex_usd_per_accelerator + network_capex
    )
    capex = (n + spares) * per_accelerator + storage_capex
    network_power = sum(t.power_w for t in system.tiers)
    power_kw = (
        (
            (n + spares)
            * (accelerator_power_w(a, pr) + system.host_power_w_per_accelerator + network_power)
            + n * storage * rel.w_per_checkpoint_gbps
        )
        * system.pue
        / 1e3
    )
    usd_per_hour = (
        capex / (system.amortization_years * HOURS_PER_YEAR) + power_kw * system.usd_per_kwh
    )
    usd_per_step = usd_per_hour * step_time_s / 3600.0
    energy_kwh_per_step = power_kw * step_time_s / 3600.0
    return {
        "capex_usd": capex,
        "network_capex_usd": n * network_capex,
        "power_kw": power_kw,
        "usd_per_hour": usd_per_hour,
        "usd_per_step": usd_per_step,
        "energy_kwh_per_step": energy_kwh_per_step,
        **to_train(
            step_time_s,
            tokens_per_step,
            total_tokens,
            g["goodput"],
            usd_per_step,
            energy_kwh_per_step,
        ),
        **g,
        "storage_capex_usd": storage_capex,
        "spare_capex_usd": spares * per_accelerator,
    }


def to_train(
    step_time_s, tokens_per_step, total_tokens, goodput, usd_per_step, energy_kwh_per_step
) -> dict:
    """Time, cost and energy to train: ``total_tokens / tokens_per_step`` steps, divided by
    the expected ``goodput`` (:mod:`codesign.goodput`), at the step's time, dollars and energy."""
    steps = safe_div(total_tokens, tokens_per_step) / goodput
    return {
        "time_to_train_days": steps * step_time_s / 86400.0,
        "cost_to_train_usd": steps * usd_per_step,
        "energy_to_train_mwh": steps * energy_kwh_per_step / 1e3,
    }


def tokens_to_train(training: Training, strategy: Strategy, sm: Smoothing = EXACT):
    """Tokens the run needs: ``training.tokens``, times ``outer_tokens_factor`` with
    reduced-frequency synchronization (DiLoCo, ``outer_sync_interval > 1``)."""
    diloco = sm.step(strategy.outer_sync_interval - 1.0)
    return training.tokens * (1.0 + diloco * (training.outer_tokens_factor - 1.0))
