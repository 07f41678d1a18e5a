"""The specs of a job over several sites: :class:`Site`, :class:`Sites`, :class:`SitesReport`."""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import struct

from codesign.specs import (
    Efficiency,
    Model,
    SpecError,
    Strategy,
    System,
    Tier,
    Training,
    placement_ranks,
)

ACROSS = ("dp", "pp")
"""Which parallel dimension crosses the sites' link."""
SCHEDULES = ("1f1b", "crosspipe")
"""Pipeline schedules across sites (``across = "pp"``): plain 1F1B, or extra warm-up
micro-batches before each boundary to cover the link's round trip (CrossPipe-style)."""
DP_OUTERMOST = placement_ranks(("tp", "cp", "ep", "pp", "dp"))


@struct.dataclass(kw_only=True)
class Site:
    """One site: its cluster (accelerator, count, inner tiers), efficiency and strategy.

    ``share`` is the site's part of the work: sequences of the global batch per step
    (``across = "dp"``) or consecutive layers (``across = "pp"``).  The strategy's ``dp`` is
    counted inside the site.
    """

    system: System
    strategy: Strategy
    efficiency: Efficiency
    share: float
    name: str = struct.field(pytree_node=False, default="site")


@struct.dataclass(kw_only=True)
class Sites:
    """A job over several sites joined by ``link`` (see :mod:`codesign.sites`)."""

    model: Model
    training: Training
    sites: tuple[Site, ...]
    link: Tier
    across: str = struct.field(pytree_node=False, default="dp")
    schedule: str = struct.field(pytree_node=False, default="1f1b")


@struct.dataclass(kw_only=True)
class SitesReport:
    """The job's step over its sites (times in s, memory in GB per accelerator, USD).

    Per-site fields are arrays over the sites (in their order).
    """

    step_time_s: Any
    site_busy_s: Any
    """Per site: the time it would take without waiting for the others (``dp``: its own
    step; ``pp``: its slowest stage's micro-batch time times the micro-batch count plus its
    own reduction and optimizer step)."""
    idle_fraction: Any
    """Per site: the share of the step it waits for the others."""
    balance_loss: Any
    """``1 - T_ideal / T``: the step's share lost to waiting (``T_ideal``: every site kept its
    pace and none waited; for ``pp`` also without the link's crossings)."""
    vs_homogeneous: Any
    """Per site type: step / step of a homogeneous cluster of that type with the same total
    peak FLOP/s and the site's inner strategy (> 1: the job over sites is slower)."""
    memory_gb: Any
    """Per site: the most loaded accelerator's memory."""
    site_fits: Any
    fits: Any
    link_exposed_s: Any
    """``dp``: the slowest site's exposed gradient reduction (inside the site, then over the
    link); ``pp``: what the link adds to the pipeline (fill/drain crossings and stalls)."""
    extra_warmup: Any
    """Per boundary (``pp``): extra warm-up micro-batches of the cross-site schedule."""
    tokens_per_s: Any
    mfu: Any
    """Model FLOPs per second over the sites' summed peak."""
    cost: dict
    shares: Any


def _replace(obj, **kw):
    return dataclasses.replace(obj, **kw)


def _with_needed_parts(job: Sites) -> Sites:
    """``job`` whose model lists only the parts its values need
    (:func:`codesign.workload.with_parts`): what a checked entry point compiles."""
    from codesign.workload import with_parts

    return _replace(job, model=with_parts(job.model))


def _check(job: Sites) -> None:
    """The checks of a concrete job that the site-by-site run checks do not cover."""
    if job.across not in ACROSS:
        raise SpecError("sites.across", job.across, f"one of {ACROSS}")
    if job.schedule not in SCHEDULES:
        raise SpecError("sites.schedule", job.schedule, f"one of {SCHEDULES}")
    if not job.sites:
        raise SpecError("sites", [], "at least one site")
    bw, lat = float(job.link.bandwidth_gbps), float(job.link.latency_us)
    if not bw > 0:
        raise SpecError("link.bandwidth_gbps", bw, "a positive number (GB/s per accelerator)")
    if not lat >= 0:
        raise SpecError("link.latency_us", lat, "a number >= 0 (microseconds)")
    if not float(job.link.oversubscription) >= 1:
        raise SpecError("link.oversubscription", float(job.link.oversubscription), ">= 1")
    on = float(job.sites[0].system.reliability.enabled)
    for i, s in enumerate(job.sites):
        if float(s.system.reliability.enabled) != on:
            raise SpecError(
                f"sites[{i}].system.reliability.enabled",
                float(s.system.reliability.enabled),
                f"{on:g} as on site 0 (goodput is the whole job's: on or off at every site)",
            )
    if job.across == "pp":
        first = job.sites[0].strategy
        for i, s in enumerate(job.sites):
            st = s.strategy
            for k in ("dp", "cp", "microbatch"):
                if float(getattr(st, k)) != float(getattr(first, k)):
                    raise SpecError(
                        f"sites[{i}].strategy.{k}",
                        float(getattr(st, k)),
                        f"{float(getattr(first, k)):g} as on site 0 (a pipeline replica spans "
                        "every site)",
                    )
            if float(st.interleave) != 1.0:
                raise SpecError(
                    f"sites[{i}].strategy.interleave", float(st.interleave), "1 across sites"
                )


def _total_work(job: Sites) -> float:
    """The work to split: the global batch (``dp``) or the model's layers (``pp``)."""
    return float(job.training.global_batch if job.across == "dp" else job.model.layers)


def _with_shares(job: Sites, shares) -> Sites:
    sites = tuple(_replace(s, share=float(x)) for s, x in zip(job.sites, shares, strict=True))
    return _replace(job, sites=sites)
