"""Parametric prices and powers: what a different HBM, FLOP rate, domain or latency costs.

The catalog lists a price and a power for each accelerator and fabric as it is sold.  A
co-design that moves a part's HBM capacity, HBM bandwidth, peak FLOP/s or host link, or a
tier's scale-up domain, latency or oversubscription away from the listed part needs those
knobs priced.  Each knob is priced *at the margin*, relative to the listed part, so a part
evaluated as listed costs exactly its catalog price:

* accelerator price ``= price_usd + sum_k usd_per_k (x_k - ref_k)`` and power
  ``= power_w + sum_k w_per_k (x_k - ref_k)`` over ``k`` in HBM GB, HBM TB/s, dense BF16
  TFLOP/s and host-link GB/s, where ``ref_k`` is the listed value (``Accelerator.ref_*``; a
  reference of 0 means "as listed": no adjustment).  The linear marginal form is the
  hedonic price model of the hardware-economics literature (e.g. Cockburn & Griliches,
  NBER WP 2442, 1987); the coefficients are fitted to the catalog
  (``experiments/fit_pricing.py``, ``codesign/hardware/pricing.toml``);
* a tier's price per GB/s is scaled by
  ``(1 + domain_premium * log2(domain / ref_domain)) * (ref_latency_us / latency_us) **
  latency_exponent * (1 - spine_share + spine_share * ref_oversubscription /
  oversubscription)``: a larger scale-up domain needs more switch levels (switch trays,
  a copper or optical spine), a lower latency costs more, and an oversubscribed (tapered)
  fabric saves the share of the ports above the leaf (a fat tree of taper ``o`` buys ``1/o``
  of its spine ports, Leiserson 1985, IEEE Trans. Comput. C-34(10)).  The domain premium
  applies to tier 0 (scale-up) only; every factor is 1 at the listed values.

All coefficients are dynamic leaves (a sweep axis or a gradient needs no recompile).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from codesign._catalog import _fill, _load_catalog_file

__all__ = [
    "Pricing",
    "ACCELERATOR_KNOBS",
    "accelerator_price_usd",
    "accelerator_power_w",
    "tier_price_factor",
    "pricing_preset",
]

ACCELERATOR_KNOBS = ("hbm_gb", "hbm_tbps", "peak_tflops", "host_link_gbps")
"""The accelerator fields with a marginal price and power (``ref_<field>`` is the listed
value; ``usd_per_<unit>``/``w_per_<unit>`` in :class:`Pricing`)."""

_UNIT = {
    "hbm_gb": "hbm_gb",
    "hbm_tbps": "hbm_tbps",
    "peak_tflops": "tflops",
    "host_link_gbps": "host_link_gbps",
}


@struct.dataclass(kw_only=True)
class Pricing:
    """Marginal prices and powers of the hardware knobs (zeros: nothing is adjusted)."""

    usd_per_hbm_gb: float = 0.0
    """USD per GB of HBM capacity (per accelerator)."""
    usd_per_hbm_tbps: float = 0.0
    """USD per TB/s of HBM bandwidth."""
    usd_per_tflops: float = 0.0
    """USD per dense BF16 TFLOP/s."""
    usd_per_host_link_gbps: float = 0.0
    """USD per GB/s of host link (PCIe / C2C)."""
    w_per_hbm_gb: float = 0.0
    """W per GB of HBM capacity."""
    w_per_hbm_tbps: float = 0.0
    """W per TB/s of HBM bandwidth."""
    w_per_tflops: float = 0.0
    """W per dense BF16 TFLOP/s."""
    w_per_host_link_gbps: float = 0.0
    """W per GB/s of host link."""
    domain_premium: float = 0.0
    """Fractional increase of the scale-up tier's price per GB/s per doubling of its domain
    above the listed domain (decrease below it)."""
    latency_exponent: float = 0.0
    """Tier price scales as ``(listed latency / latency) ** latency_exponent``."""
    spine_share: float = 0.0
    """Share of a tier's price per GB/s in the ports and links above the leaf, which an
    oversubscribed fabric buys ``1 / oversubscription`` of."""


def _ref(x, ref):
    """``x - ref`` where a reference is given (``ref > 0``), else 0."""
    return jnp.where(ref > 0, x - ref, 0.0)


def _marginal(acc, pricing: Pricing, listed, prefix: str):
    """``listed + sum_k <prefix><unit_k> (x_k - ref_k)`` over :data:`ACCELERATOR_KNOBS`."""
    out = listed
    for k in ACCELERATOR_KNOBS:
        coeff = getattr(pricing, f"{prefix}{_UNIT[k]}")
        out = out + coeff * _ref(getattr(acc, k), getattr(acc, f"ref_{k}"))
    return out


def accelerator_price_usd(acc, pricing: Pricing):
    """Price of an accelerator whose knobs may differ from the listed part (module doc)."""
    return _marginal(acc, pricing, acc.price_usd, "usd_per_")


def accelerator_power_w(acc, pricing: Pricing):
    """Power of an accelerator whose knobs may differ from the listed part (module doc)."""
    return _marginal(acc, pricing, acc.power_w, "w_per_")


def _ratio(ref, x):
    """``ref / x`` where a reference is given, else 1 (NaN-free: the double where)."""
    ok = ref > 0
    return jnp.where(ok, jnp.where(ok, ref, 1.0) / jnp.where(ok, x, 1.0), 1.0)


def tier_price_factor(tier, pricing: Pricing, scale_up: bool):
    """Multiplier of a tier's listed price per GB/s (module doc); 1 at the listed values."""
    # A latency below 1 % of the listed one is priced as 1 % (a zero-latency tier would
    # otherwise cost infinitely much).
    latency = jnp.maximum(tier.latency_us, 0.01 * tier.ref_latency_us)
    lat = _ratio(tier.ref_latency_us, latency) ** pricing.latency_exponent
    over = (
        1.0
        - pricing.spine_share
        + pricing.spine_share * _ratio(tier.ref_oversubscription, tier.oversubscription)
    )
    out = lat * over
    if scale_up:
        dom = -jnp.log2(_ratio(tier.ref_domain, tier.domain))  # log2(domain / ref_domain)
        out = out * jnp.maximum(1.0 + pricing.domain_premium * dom, 0.05)
    return out


def pricing_preset(**overrides) -> Pricing:
    """The marginal prices fitted to the catalog (``codesign/hardware/pricing.toml``,
    table ``[coefficients]``), with overrides (a run file's ``[system.pricing]``)."""
    t = dict(_load_catalog_file("pricing").get("coefficients", {}))
    t.update(overrides)
    return _fill(Pricing, t, "system.pricing")
