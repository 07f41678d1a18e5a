"""Goodput at scale: failures, checkpoints, restarts and spares, as a fraction of wall time.

Time and cost to train assume every step succeeds; at tens of thousands of accelerators they
do not (Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100, Dubey et al.
2024, arXiv:2407.21783, Sec. 3.3.4 and Table 5).  This module turns a :class:`Reliability`
spec into the expected **goodput** (useful compute time over wall time) of a synchronous
job, with every part of the loss:

* **failure rate** ``lambda = N sum_c r_c`` (per second), the per-accelerator rates ``r_c``
  of the components (accelerator, HBM, host, network links and NICs, switches, software)
  scaled by the count; the MTBF of the job is ``M = 1 / lambda``.  Hot spares do not run the
  job, so their failures do not interrupt it;
* **checkpoint**: ``C = (2 + 12) P`` bytes (bf16 weights plus fp32 master weights and Adam's
  two moments, the memory model's weight and optimizer terms, unsharded), written by all
  ``N`` accelerators at ``checkpoint_gbps`` each: ``write = C / (N b)``, and read back at
  the same rate on restart.  A synchronous checkpoint blocks for ``write``; an asynchronous
  one only for the device-to-host snapshot ``C / N`` over the host link, the write overlapping
  training (``async_checkpoint`` in [0, 1] mixes the two): blocking time ``delta``;
* **interval** (``checkpoint_interval_s``, 0 = optimal): Daly's higher-order optimum
  (Daly 2006, FGCS 22(3)) ``tau = sqrt(2 delta M) [1 + (delta / 2M)^(1/2) / 3 +
  (delta / 2M) / 9] - delta`` for ``delta < 2M`` (else ``M``), whose first term is Young's
  ``sqrt(2 delta M)`` (Young 1974, CACM 17(9)); an asynchronous write cannot start before the
  previous one ends, so ``tau >= async * write``;
* **downtime per failure** ``R = restart_s + read + rewarm_s [+ (1 - cover) repair_s]``: detect,
  reschedule and restart the job, read the checkpoint, re-warm to full throughput (expressed
  as seconds at zero throughput) and, when no hot spare covers the failed host, wait for the
  failed *blast unit* to be repaired or replaced;
* **blast radius and spares**: a failure drains its host (``accelerators_per_host``
  accelerators: GPU, HBM, host and NIC failures all take the node out in practice), and the
  job's layout needs whole *blast units* of ``B`` accelerators: the host, the scale-up domain
  (a 72-GPU NVLink domain must be intact for a layout laid on it) or the model replica
  (``tp pp cp``).  When the unit is the host itself, the drained host is replaced from the
  cluster's pool within the restart (any idle host will do).  When the unit is larger, the
  replacement must join the same unit (the NVLink domain), so the job waits ``repair_s``
  unless a hot spare inside the unit covers the failure: ``spares_per_domain`` hot-spare
  accelerators per unit (idle, powered, priced like the others: ``s N / B`` extra
  accelerators) cover it when they hold a whole host, ``cover = min(s /
  accelerators_per_host, 1)`` (a second failure in the same unit during a repair is
  neglected).  A larger unit amortizes its spares over more accelerators but needs them;
* **goodput** for exponential failures (Daly 2006: the expected wall time of a segment
  of ``tau`` useful seconds is ``M e^(R/M) (e^((tau + delta)/M) - 1)``)::

      goodput = tau / (tau + delta) * x / (e^x - 1) * e^(-R / M),  x = (tau + delta) / M

  always in (0, 1]: 1 exactly with no failures and no checkpoints.  Its loss ``1 - goodput``
  is split into checkpoint writes ``delta / (tau + delta)``, lost work (half an interval,
  ``lambda (tau + delta) / 2``), restart and re-warm ``lambda (restart + read + rewarm)`` and
  repair waits ``lambda (1 - cover) repair``, in proportion to these first-order terms.

Time, cost and energy to train divide by the goodput (:mod:`codesign.cost`).  Run files
count failures by default: without ``[system.reliability]`` (or with ``preset = "auto"``)
a run gets its platform's preset (:func:`default_reliability_preset`).  With ``enabled = 0``
(``preset = "none"``, or :class:`Reliability` as constructed) the goodput is exactly 1 and
neither storage nor spares are priced, so every figure is bit-identical to the model
without it.  A job over several sites has one goodput (:func:`job_goodput`).
Every field is a dynamic leaf: ``blast_radius`` is stored as weights over
:data:`BLAST_RADII` (one-hot for a named radius, like ``Strategy.recompute``), so platforms
with different blast units stack into one sweep and relax into one optimization.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import struct

from codesign._catalog import _fill, _load_catalog_file
from codesign.checks import BLAST_RADII, SpecError, blast_weights
from codesign.smoothing import safe_div

__all__ = [
    "Reliability",
    "COMPONENTS",
    "BLAST_RADII",
    "PLATFORM_FIELDS",
    "CHECKPOINT_WEIGHT_BYTES",
    "checkpoint_size_bytes",
    "reliability_preset",
    "reliability_presets",
    "failure_rate_per_s",
    "checkpoint_times",
    "young_interval",
    "daly_interval",
    "goodput",
    "fleet_failures",
    "job_goodput",
    "blast_size",
    "blast_radius_name",
    "blast_weights",
    "default_reliability_preset",
]

COMPONENTS = ("accelerator", "hbm", "host", "network", "switch", "software")
"""Failure sources; ``<c>_per_mh`` is failures per million accelerator-hours."""
PLATFORM_FIELDS = (
    *(f"{c}_per_mh" for c in COMPONENTS),
    "accelerators_per_host",
    "repair_s",
    "blast_radius",
)
"""The :class:`Reliability` fields that belong to a hardware platform (its failure rates,
host size, repair wait and blast unit): a ``system.platform`` axis of a search carries them,
each platform with its own run file's values; the rest (storage, interval, restart, spares,
prices) are the problem's."""
CHECKPOINT_WEIGHT_BYTES = 2.0
"""bf16 weights per parameter in a checkpoint, beside the optimizer state
(``Training.optimizer_state_bytes``: 12 for fp32 master weights and Adam's two moments)."""


def checkpoint_size_bytes(total_params, optimizer_state_bytes=12.0):
    """Bytes of one checkpoint: the weights and the optimizer state of every parameter (the
    memory model's weight and optimizer terms, unsharded: 2 + 12 = 14 bytes a parameter with
    fp32 master weights and Adam's two moments)."""
    return (CHECKPOINT_WEIGHT_BYTES + optimizer_state_bytes) * total_params


@struct.dataclass(kw_only=True)
class Reliability:
    """Failure rates, checkpointing, restart and spares of a cluster (:mod:`codesign.goodput`).

    Rates are failures per million accelerator-hours (``_per_mh``); times in seconds;
    ``checkpoint_gbps`` is GB/s per accelerator (the storage system's aggregate write and read
    bandwidth over the accelerator count).  The constructor's defaults are off
    (``enabled = 0``); run files get their platform's catalog preset
    (``codesign/hardware/reliability.toml``, each number with its source) unless they say
    ``preset = "none"``.
    """

    enabled: float = 0.0
    """1: time, cost and energy to train count failures, checkpoints and spares; 0: not."""
    accelerator_per_mh: float = 0.0
    """Accelerator failures (the GPU itself, its SRAM, system processor, thermals, silent data
    corruption) per million accelerator-hours."""
    hbm_per_mh: float = 0.0
    """HBM failures per million accelerator-hours."""
    host_per_mh: float = 0.0
    """Host failures (unplanned maintenance, CPU, DRAM, SSD, power supply, chassis, boards) per
    million accelerator-hours."""
    network_per_mh: float = 0.0
    """NIC, link and cable failures per million accelerator-hours."""
    switch_per_mh: float = 0.0
    """Network switch failures per million accelerator-hours."""
    software_per_mh: float = 0.0
    """Software and unknown interruptions (bugs, dependencies, collective timeouts) per million
    accelerator-hours."""
    accelerators_per_host: float = 8.0
    """Accelerators one failure drains (an HGX node: 8; a GB200 compute tray: 4)."""
    checkpoint_gbps: float = 0.12
    """Checkpoint storage bandwidth, GB/s per accelerator (write and read)."""
    async_checkpoint: float = 0.0
    """1: asynchronous checkpoints (block only for the device-to-host snapshot); 0: synchronous."""
    checkpoint_interval_s: float = 0.0
    """Seconds of training between checkpoints; 0: Daly's optimum."""
    restart_s: float = 600.0
    """Detection, rescheduling and process restart after a failure, s."""
    rewarm_s: float = 0.0
    """Re-warm after a restart (compilation, data loader, first slow steps), s at zero throughput."""
    repair_s: float = 0.0
    """Extra wait when no hot spare covers the failure (drain, repair or provision the blast unit), s."""
    spares_per_domain: float = 0.0
    """Hot-spare accelerators per blast unit (idle, powered, priced)."""
    usd_per_checkpoint_gbps: float = 0.0
    """Capex of checkpoint storage per GB/s per accelerator, USD."""
    w_per_checkpoint_gbps: float = 0.0
    """Power of checkpoint storage per GB/s per accelerator, W."""
    blast_radius: jnp.ndarray = dataclasses.field(default_factory=lambda: np.array([0.0, 1.0, 0.0]))
    """Weights over :data:`BLAST_RADII` (``host``, ``domain``: the scale-up domain, tier 0,
    ``replica``: ``tp pp cp``); one-hot for a named radius (:func:`reliability_preset` takes
    the name)."""


def reliability_presets() -> dict:
    """The presets of ``codesign/hardware/reliability.toml`` by name (tables with sources)."""
    return {k: v for k, v in _load_catalog_file("reliability").items() if isinstance(v, dict)}


def blast_radius_name(rel: Reliability) -> str:
    """The name of the heaviest blast radius of ``rel`` (its name when one-hot)."""
    return BLAST_RADII[int(np.argmax(np.asarray(rel.blast_radius, dtype=float)))]


def reliability_preset(name: str | None = None, **overrides) -> Reliability:
    """A :class:`Reliability` from a catalog preset (``None``: the defaults, off) with
    overrides; a preset turns the model on unless ``enabled`` is given.

    Example:
        >>> from codesign.goodput import blast_radius_name, reliability_preset
        >>> r = reliability_preset("llama3-h100")
        >>> float(r.enabled), blast_radius_name(r)
        (1.0, 'host')
    """
    table: dict = {}
    if name is not None:
        presets = reliability_presets()
        if not isinstance(name, str) or name not in presets:
            raise SpecError(
                "system.reliability.preset", name, f"one of auto, {', '.join(sorted(presets))}"
            )
        table = dict(presets[name])
        table.setdefault("enabled", 1.0)
    table.update(overrides)
    if isinstance(table.get("enabled"), bool):
        table["enabled"] = float(table["enabled"])
    blast = blast_weights(table.pop("blast_radius", "domain"))
    return _fill(Reliability, table, "system.reliability", extra={"blast_radius": blast})


def default_reliability_preset(accelerator_name: str | None, scale_up_domain) -> str:
    """The reliability preset a run file gets when it names none (``preset = "auto"``).

    By platform: an A100 (name starting ``a100``) gets ``rsc1-a100`` (Meta RSC-1's measured
    A100 rate); a scale-up domain wider than an 8-accelerator host (a rack-scale NVLink domain
    such as GB200/GB300 NVL72, or a TPU/Trainium pod slice) gets ``gb200-nvl72`` (the domain is
    the blast unit); anything else gets ``llama3-h100`` (Llama 3's measured H100 rates, the host
    as blast unit).

    Example:
        >>> default_reliability_preset("h100-sxm5-80gb", 8), default_reliability_preset("gb200", 72)
        ('llama3-h100', 'gb200-nvl72')
    """
    if str(accelerator_name or "").lower().startswith("a100"):
        return "rsc1-a100"
    if float(scale_up_domain) > 8:
        return "gb200-nvl72"
    return "llama3-h100"


def failure_rate_per_s(rel: Reliability, n):
    """Interruptions per second of a job on ``n`` accelerators: ``enabled n sum_c r_c``."""
    per_mh = sum(getattr(rel, f"{c}_per_mh") for c in COMPONENTS)
    return rel.enabled * n * per_mh / (1e6 * 3600.0)


def checkpoint_times(rel: Reliability, n, checkpoint_bytes, host_link_gbps) -> dict:
    """``write_s`` (and read) of a checkpoint of ``checkpoint_bytes`` by ``n`` accelerators,
    the device-to-host ``snapshot_s`` (the write where there is no host link) and the
    blocking time ``delta_s`` (synchronous: the write; asynchronous: the snapshot)."""
    return _checkpoint_times(
        rel, checkpoint_bytes, n * rel.checkpoint_gbps * 1e9, n * host_link_gbps * 1e9
    )


def _checkpoint_times(rel: Reliability, checkpoint_bytes, write_bytes_per_s, host_bytes_per_s):
    write = safe_div(checkpoint_bytes, write_bytes_per_s)
    snap = safe_div(checkpoint_bytes, host_bytes_per_s, fallback=write)
    snap = jnp.where(host_bytes_per_s > 0, snap, write)
    a = rel.async_checkpoint
    return {"write_s": write, "snapshot_s": snap, "delta_s": (1.0 - a) * write + a * snap}


def young_interval(delta_s, mtbf_s):
    """Young's first-order optimum ``sqrt(2 delta M)`` (Young 1974)."""
    return jnp.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s, mtbf_s):
    """Daly's higher-order optimum (Daly 2006); ``M`` when ``delta >= 2M``."""
    ratio = delta_s / (2.0 * mtbf_s)
    safe = jnp.where(ratio > 0, ratio, 1.0)
    root = jnp.where(ratio > 0, jnp.sqrt(safe), 0.0)  # double where: finite gradient at 0
    tau = young_interval(delta_s, mtbf_s) * (1.0 + root / 3.0 + ratio / 9.0) - delta_s
    return jnp.where(ratio < 1.0, tau, mtbf_s)


def _cover(rel: Reliability):
    """Share of failures a hot spare covers: ``min(spares / accelerators_per_host, 1)``."""
    return jnp.minimum(rel.spares_per_domain / rel.accelerators_per_host, 1.0)


def blast_size(rel: Reliability, domain, replica):
    """Accelerators of one blast unit: the weights of ``rel.blast_radius`` over the host, the
    scale-up ``domain`` and the ``replica`` (:data:`BLAST_RADII`)."""
    w = rel.blast_radius
    return w[0] * rel.accelerators_per_host + w[1] * domain + w[2] * replica


def fleet_failures(rel: Reliability, n, host_link_gbps, domain, replica) -> dict:
    """The failure terms of ``n`` accelerators under ``rel`` that add over the fleets
    (the sites) of one synchronous job: interruptions per second ``lambda``, the repair wait
    they cause per second ``lambda (1 - cover) repair`` (for blast units wider than a host),
    checkpoint storage and device-to-host bytes per second, and hot-spare accelerators."""
    lam = failure_rate_per_s(rel, n)
    unit = blast_size(rel, domain, replica)
    wider = jnp.where(unit > rel.accelerators_per_host, 1.0, 0.0)  # the host must rejoin its unit
    return {
        "lambda_per_s": lam,
        "repair_per_s": lam * wider * (1.0 - _cover(rel)) * rel.repair_s,
        "write_bytes_per_s": n * rel.checkpoint_gbps * 1e9,
        "host_bytes_per_s": n * host_link_gbps * 1e9,
        "spare_accelerators": rel.enabled * rel.spares_per_domain * safe_div(n, unit),
    }


def goodput(rel: Reliability, n, checkpoint_bytes, host_link_gbps, domain, replica) -> dict:
    """Expected goodput of a synchronous job on ``n`` accelerators and its parts (module doc).

    ``domain`` is the scale-up domain (tier 0) and ``replica`` the model replica ``tp pp cp``
    (blast units); returns ``goodput``, ``failures_per_day``, ``mtbf_h`` (0: no failures),
    ``checkpoint_interval_s`` (0: no checkpoint needed), ``checkpoint_write_s``,
    ``checkpoint_delta_s``, ``downtime_s`` per failure, the loss parts ``lost_checkpoint``,
    ``lost_work``, ``lost_restart``, ``lost_repair`` (fractions of wall time, summing to
    ``1 - goodput``), and ``spare_accelerators``.
    """
    return job_goodput(
        rel, [fleet_failures(rel, n, host_link_gbps, domain, replica)], checkpoint_bytes
    )


def job_goodput(rel: Reliability, fleets: list, checkpoint_bytes) -> dict:
    """:func:`goodput` of one synchronous job over several fleets (:func:`fleet_failures`
    of each site): a failure anywhere interrupts the whole job, so the rates, repair waits,
    storage and host bandwidths add; ``rel`` gives the job's policy (``enabled``,
    ``async_checkpoint``, ``checkpoint_interval_s``, ``restart_s``, ``rewarm_s``).  The
    checkpoint (``checkpoint_bytes``) is written and read by all fleets at once."""
    tot = {k: sum(f[k] for f in fleets) for k in fleets[0]}
    lam = tot["lambda_per_s"]
    ok = lam > 0
    lam_s = jnp.where(ok, lam, 1.0)
    mtbf = 1.0 / lam_s
    ck = _checkpoint_times(rel, checkpoint_bytes, tot["write_bytes_per_s"], tot["host_bytes_per_s"])
    delta = ck["delta_s"]
    auto = jnp.maximum(daly_interval(delta, mtbf), rel.async_checkpoint * ck["write_s"])
    given = (rel.checkpoint_interval_s > 0) & (rel.enabled > 0)
    tau = jnp.where(given, rel.checkpoint_interval_s, jnp.where(ok, auto, 0.0))
    checkpoints = given | ok
    tau_s = jnp.where(checkpoints, tau, 1.0)
    ck_frac = jnp.where(checkpoints, tau_s / (tau_s + delta), 1.0)
    restart = rel.restart_s + ck["write_s"] + rel.rewarm_s
    lost_restart = lam * jnp.where(ok, restart, 0.0)
    lost_repair = jnp.where(ok, tot["repair_per_s"], 0.0)
    x = lam * (tau_s + delta)
    xs = jnp.where(x > 0, x, 1.0)
    work = jnp.where(x > 0, xs / jnp.expm1(xs), 1.0)
    g = ck_frac * work * jnp.exp(-(lost_restart + lost_repair))
    w = {
        "lost_checkpoint": 1.0 - ck_frac,
        "lost_work": jnp.where(ok, 0.5 * x, 0.0),
        "lost_restart": lost_restart,
        "lost_repair": lost_repair,
    }
    total = sum(w.values())
    parts = {k: safe_div(v * (1.0 - g), total) for k, v in w.items()}
    return {
        "goodput": g,
        "failures_per_day": lam * 86400.0,
        "mtbf_h": jnp.where(ok, mtbf / 3600.0, 0.0),
        "checkpoint_interval_s": jnp.where(checkpoints, tau, 0.0),
        "checkpoint_write_s": ck["write_s"],
        "checkpoint_delta_s": delta,
        "downtime_s": jnp.where(ok, restart + safe_div(lost_repair, lam_s), 0.0),
        **parts,
        "spare_accelerators": tot["spare_accelerators"],
    }
