"""Several sites in one training job (buildings or regions, heterogeneous ones included).

A :class:`Sites` job runs on ``S`` sites, each with its own accelerator type and count, inner
tiers, calibrated efficiency and inner strategy (:class:`Site`), joined by one cross-site
``link`` (a :class:`~codesign.specs.Tier`: bandwidth per accelerator, latency, oversubscription,
price per GB/s and power of the optics).  Which dimension crosses the link is ``across``:

* ``"dp"``, **data parallelism across sites**: every site holds whole model replicas and takes
  ``share`` sequences of the global batch per step; the gradients are reduced inside each site
  and then over the link (hierarchically: each accelerator sends ``1/dp_site`` of its stage's
  gradient), overlapped with the backward pass, or every ``H`` steps with DiLoCo
  (:attr:`~codesign.specs.Strategy.outer_sync_interval`).  Site ``i``'s step is exactly the
  single-site model's step of a cluster of ``S`` copies of site ``i`` joined by the link (its
  view of the job), so identical sites give the single-site model's answer; the job's step is
  the slowest site's (they meet at every reduction).
* ``"pp"``, **pipeline parallelism across sites**: site ``i`` holds ``share`` consecutive layers
  on its ``pp_i`` stages (every pipeline replica spans all sites, so ``dp``, ``cp`` and the
  micro-batch size are the same everywhere; ``tp`` may differ).  No gradient crosses the
  link; activations and their gradients do, once per micro-batch per boundary, taking
  ``delta = latency + bytes / bandwidth`` one way.  Under 1F1B (Narayanan et al. 2021) the
  stage ``k`` just before a boundary has ``W = P - k`` micro-batches in flight and must wait a
  round trip ``R_k + 2 delta`` (``R_k``: the stages from ``k`` on, forward and backward) for
  every ``W`` of them, so its cycle is ``max(t_max, (R_k + 2 delta) / W)``: a long link stalls
  the whole pipeline.  The **cross-site schedule** (``schedule = "crosspipe"``, in the spirit
  of CrossPipe, Chen et al., USENIX ATC 2025) warms up ``e = ceil((R_k + 2 delta) / t_max - W)``
  extra micro-batches on the stages before the boundary, so that the cycle is ``t_max``, at
  the price of ``e`` more micro-batches' activations on those stages.  The step is
  ``(m - 1) cycle + sum_j t_j + 2 sum delta`` plus the slowest site's exposed data-parallel
  reduction and optimizer step (1F1B with ``m`` micro-batches and stage times ``t_j``; each
  stage of a site is taken at the site's slowest stage).

**Uneven split** (:func:`balance`): with unlike sites the work is split so that no site waits
for another more than it must: the batch shares (``dp``) or layer counts (``pp``) are chosen
by evaluating every valid split exactly (each site's figures vmapped over its possible shares,
then all compositions combined at once by the same formulas).  The report's ``balance_loss``
is the step's share lost to waiting and ``vs_homogeneous`` the step against a homogeneous
cluster of each site's type with the same total peak FLOP/s.

Costs add over the sites (each site's accelerators, inner tiers and link ports,
:func:`codesign.cost.cluster_cost`).  Convergence effects of DiLoCo are outside the model
(``Training.outer_tokens_factor`` takes the user's tokens penalty).

Example (two sites of 64 H100, data parallelism across a 1 ms metro link):
    >>> from codesign import sites
    >>> site = {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64,
    ...         "tiers": [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 64}],
    ...         "strategy": {"tp": 8, "pp": 1, "dp": 8}}
    >>> job = sites.load_sites_dict({"model": {"preset": "llama3-8b"},
    ...     "training": {"global_batch": 512, "tokens": 1e11},
    ...     "link": {"preset": "cross-building", "latency_us": 1000},
    ...     "sites": [site, site], "across": "dp"})
    >>> r = sites.evaluate_sites(job)
    >>> [float(x) for x in r.shares], bool(r.fits), round(float(r.balance_loss), 6)
    ([256.0, 256.0], True, 0.0)
"""

from codesign.sites._balance import MAX_SPLITS, balance, even_shares, share_candidates
from codesign.sites._config import (
    check_sites,
    format_sites,
    load_sites,
    load_sites_dict,
    sites_to_dict,
)
from codesign.sites._evaluate import evaluate_sites, evaluate_sites_unchecked
from codesign.sites._search import best_strategies, strategy_grid
from codesign.sites._spec import ACROSS, SCHEDULES, Site, Sites, SitesReport

__all__ = [
    "ACROSS",
    "MAX_SPLITS",
    "SCHEDULES",
    "Site",
    "Sites",
    "SitesReport",
    "balance",
    "best_strategies",
    "check_sites",
    "even_shares",
    "evaluate_sites",
    "evaluate_sites_unchecked",
    "format_sites",
    "load_sites",
    "load_sites_dict",
    "share_candidates",
    "sites_to_dict",
    "strategy_grid",
]
