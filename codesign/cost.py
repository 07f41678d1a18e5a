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
  are ``tokens / tokens_per_s`` and ``steps x $/step``.
"""

from __future__ import annotations

from codesign.pricing import accelerator_power_w, accelerator_price_usd, tier_price_factor
from codesign.smoothing import safe_div
from codesign.specs import System

__all__ = ["cluster_cost"]

HOURS_PER_YEAR = 8760.0


def cluster_cost(system: System, step_time_s, tokens_per_step, total_tokens) -> dict:
    """Cost figures of a cluster running steps of ``step_time_s`` seconds."""
    n = system.num_accelerators
    a = system.accelerator
    pr = system.pricing
    network_capex = sum(
        t.bandwidth_gbps * t.price_per_gbps_usd * tier_price_factor(t, pr, i == 0)
        for i, t in enumerate(system.tiers)
    )
    capex = n * (
        accelerator_price_usd(a, pr) + system.host_capex_usd_per_accelerator + network_capex
    )
    network_power = sum(t.power_w for t in system.tiers)
    power_kw = (
        n
        * (accelerator_power_w(a, pr) + system.host_power_w_per_accelerator + network_power)
        * system.pue
        / 1e3
    )
    usd_per_hour = (
        capex / (system.amortization_years * HOURS_PER_YEAR) + power_kw * system.usd_per_kwh
    )
    usd_per_step = usd_per_hour * step_time_s / 3600.0
    energy_kwh_per_step = power_kw * step_time_s / 3600.0
    steps = safe_div(total_tokens, tokens_per_step)
    return {
        "capex_usd": capex,
        "network_capex_usd": n * network_capex,
        "power_kw": power_kw,
        "usd_per_hour": usd_per_hour,
        "usd_per_step": usd_per_step,
        "energy_kwh_per_step": energy_kwh_per_step,
        "time_to_train_days": steps * step_time_s / 86400.0,
        "cost_to_train_usd": steps * usd_per_step,
        "energy_to_train_mwh": steps * energy_kwh_per_step / 1e3,
    }
