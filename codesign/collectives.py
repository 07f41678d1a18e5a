"""Collectives over a group of accelerators that spans several network tiers.

A parallel group is described by its dimensions, each a ``(size, stride)`` pair in the
linear rank order that the placement defines (a tensor-parallel group with tp innermost is
``[(tp, 1)]``; a data-parallel group outside tp and cp is ``[(dp, tp*cp)]``).  Inside one
instance of tier ``t`` (``domain`` accelerators, aligned to the rank order) a dimension of
stride ``s`` has ``clamp(domain / s, 1, size)`` members, so the group has

    m_t = prod_d clamp(D_t / s_d, 1, g_d)          (m_{-1} = 1, m_T = G)

members per tier-t domain, and tier ``t`` joins ``r_t = m_t / m_{t-1}`` sub-groups.

Hierarchical algorithms (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1); the two-level scheme of NCCL's
hierarchical all-reduce and of Jia et al. 2018, arXiv:1807.11205): a reduce-scatter runs
a ring inside each tier from the innermost out, shrinking the data by ``r_t`` at each
level; an all-gather is its mirror image.  With the latency-bandwidth (alpha-beta) model of
Hockney (1994), tier ``t`` costs

    RS_t = AG_t = (r_t - 1) * alpha_t + (r_t - 1) / r_t * (S / m_{t-1}) / beta_t

for a buffer of ``S`` bytes (the full, unsharded size), where ``beta_t`` is the effective
per-accelerator bandwidth ``bandwidth * efficiency / oversubscription``.  An all-reduce is
a reduce-scatter followed by an all-gather (Patarasuk & Yuan 2009, bandwidth-optimal
``2 (p-1)/p S / beta``).  An all-to-all sends ``S (m_t - m_{t-1}) / G`` bytes of each rank's
``S`` over tier ``t`` (destinations first reached at that tier), posting all peers at once
(one ``alpha_t`` per tier).  A point-to-point transfer between neighbours of a pipeline
crosses the outermost tier that any neighbour pair crosses.

All functions take a :class:`~codesign.smoothing.Smoothing`; the clamps go through it so
that the relaxed model shares this code.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.smoothing import Smoothing, safe_div
from codesign.specs import System

__all__ = [
    "members_per_tier",
    "tier_bandwidth_bytes_per_s",
    "reduce_scatter_coeffs",
    "reduce_scatter_tier_coeffs",
    "reduce_scatter_time",
    "tier_dot",
    "all_gather_time",
    "all_reduce_time",
    "all_to_all_time",
    "p2p_time",
]


# The collectives are computed tier by tier on Python lists of per-tier arrays: element-wise
# arithmetic that XLA fuses into one loop of a sweep, where a stacked tier axis (reductions
# and concatenations over it) would end a fused loop at each collective.


def tier_dot(weights: list, values: list):
    """``sum_t w_t v_t`` over the tiers (lists, innermost first)."""
    return sum(w * v for w, v in zip(weights, values, strict=True))


def tier_bytes_per_s(tier):
    """Effective bandwidth of one tier, bytes/s per accelerator per direction: the listed
    GB/s times the calibrated efficiency, over the oversubscription."""
    return tier.bandwidth_gbps * 1e9 * tier.efficiency / tier.oversubscription


def tier_bandwidth_bytes_per_s(system: System) -> list:
    """Effective bandwidth of each tier, bytes/s per accelerator per direction."""
    return [tier_bytes_per_s(t) for t in system.tiers]


def _latencies_s(system: System) -> list:
    return [t.latency_us * 1e-6 for t in system.tiers]


def _domains(system: System) -> list:
    """Each tier's domain, capped by every outer tier's: an instance holds no more
    accelerators than the tiers around it reach (a 72-GPU NVLink rack in a 64-GPU cluster
    joins 64), so the domains nest and ``m_t`` never falls outwards."""
    dom = [t.domain for t in system.tiers]
    for t in range(len(dom) - 2, -1, -1):
        dom[t] = jnp.minimum(dom[t], dom[t + 1])
    return dom


def members_per_tier(group, system: System, sm: Smoothing) -> list:
    """``m_t`` for each tier, innermost first (see module docstring).

    Args:
        group: sequence of ``(size, stride)`` pairs.
    """
    out = []
    for dom in _domains(system):
        m = 1.0
        for size, stride in group:
            m = m * sm.clamp(safe_div(dom, stride, 1.0), 1.0, jnp.maximum(size, 1.0))
        out.append(m)
    return out


def _fans(group, system: System, sm: Smoothing) -> tuple:
    """``(m, prev, r)``: per tier, the members ``m_t``, those of the tier inside ``m_{t-1}``
    (1 inside the innermost) and the fan-in ``r_t = m_t / m_{t-1}``."""
    m = members_per_tier(group, system, sm)
    prev = [1.0, *m[:-1]]
    # m_t >= m_{t-1} holds for nested domains; max() keeps r_t >= 1 under smoothing noise.
    r = [jnp.maximum(safe_div(a, b, 1.0), 1.0) for a, b in zip(m, prev, strict=True)]
    return m, prev, r


def reduce_scatter_tier_coeffs(group, system: System, sm: Smoothing) -> tuple:
    """``(latency_s, s_per_byte)`` of each tier's ring of a hierarchical reduce-scatter, as
    lists over the tiers (innermost first): tier ``t`` takes ``a_t + S * b_t``."""
    _, prev, r = _fans(group, system, sm)
    lat = [(rt - 1.0) * a for rt, a in zip(r, _latencies_s(system), strict=True)]
    bw = tier_bandwidth_bytes_per_s(system)
    per_byte = [(rt - 1.0) / rt / (p * b) for rt, p, b in zip(r, prev, bw, strict=True)]
    return lat, per_byte


def reduce_scatter_coeffs(group, system: System, sm: Smoothing):
    """``(latency_s, s_per_byte)`` of a hierarchical ring reduce-scatter: time = a + S * b.

    Collectives are affine in the buffer size, so callers that need several sizes over one
    group compute the coefficients once.
    """
    lat, per_byte = reduce_scatter_tier_coeffs(group, system, sm)
    return sum(lat), sum(per_byte)


def reduce_scatter_time(size_bytes, group, system: System, sm: Smoothing):
    """Hierarchical ring reduce-scatter of a ``size_bytes`` buffer, seconds."""
    lat, per_byte = reduce_scatter_coeffs(group, system, sm)
    return lat + size_bytes * per_byte


def all_gather_time(size_bytes, group, system: System, sm: Smoothing):
    """Hierarchical ring all-gather producing a ``size_bytes`` buffer, seconds."""
    return reduce_scatter_time(size_bytes, group, system, sm)


def all_reduce_time(size_bytes, group, system: System, sm: Smoothing):
    """All-reduce as reduce-scatter + all-gather (Patarasuk & Yuan 2009), seconds."""
    return 2.0 * reduce_scatter_time(size_bytes, group, system, sm)


def all_to_all_time(size_bytes, group, system: System, sm: Smoothing, dedup_copies=0.0):
    """All-to-all where each rank holds ``size_bytes`` spread evenly over the group.

    ``dedup_copies`` (``k > 0``): the buffer is ``k`` copies of each token routed to ``k``
    uniformly random destinations, and a hierarchical dispatcher (DeepEP, DeepSeek-AI 2025;
    Megatron-Core's flex dispatcher) sends a token once to each distinct outer domain and
    forwards it inside: over tier ``t >= 1`` the traffic falls by the factor
    ``n (1 - (1 - 1/n)^k) / k`` with ``n = G / m_{t-1}`` the number of tier-``(t-1)``
    domains of the group (the expected count of distinct domains among ``k`` draws, over ``k``).
    """
    m, prev, r = _fans(group, system, sm)
    g = m[-1]
    k = jnp.maximum(dedup_copies, 1.0)
    tiers = zip(m, prev, r, _latencies_s(system), tier_bandwidth_bytes_per_s(system), strict=True)
    total = 0.0
    for t, (mt, pt, rt, lat, bw) in enumerate(tiers):
        share = safe_div(mt - pt, g)
        if t > 0:
            n = safe_div(g, pt, 1.0)
            many = n > 1.0 + 1e-9
            log_miss = jnp.log1p(-1.0 / jnp.where(many, n, 2.0))
            distinct = jnp.where(many, n * (1.0 - jnp.exp(k * log_miss)) / k, 1.0)
            share = share * jnp.where(dedup_copies > 0, distinct, 1.0)
        total = total + (sm.step(rt - 1.0) * lat + size_bytes * share / bw)
    return total


def p2p_time(size_bytes, group, system: System, sm: Smoothing):
    """Send ``size_bytes`` to the next rank of a (pipeline) group: the slowest tier crossed."""
    _, _, r = _fans(group, system, sm)
    tiers = zip(r, _latencies_s(system), tier_bandwidth_bytes_per_s(system), strict=True)
    return sm.max(*[sm.step(rt - 1.0) * (lat + size_bytes / bw) for rt, lat, bw in tiers])
