"""The uneven split of a job's work over unlike sites, found exactly over every valid split."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from codesign.sites._evaluate import combine, site_table
from codesign.sites._spec import Sites, _check, _total_work, _with_needed_parts, _with_shares
from codesign.smoothing import EXACT
from codesign.specs import SpecError

MAX_SPLITS = 2_000_000
"""The most splits :func:`balance` compares (the product of the first ``S - 1`` sites'
candidate counts)."""


def share_candidates(job: Sites, i: int) -> np.ndarray:
    """Every share site ``i`` may take: whole micro-batches of its replicas (``dp``:
    multiples of ``dp_i x microbatch_i`` sequences) or at least one layer per stage (``pp``),
    leaving the other sites their least."""
    total = _total_work(job)
    if job.across == "dp":
        units = [float(s.strategy.dp * s.strategy.microbatch) for s in job.sites]
    else:
        units = [float(s.strategy.pp) for s in job.sites]
    room = total - (sum(units) - units[i])
    if job.across == "dp":
        return np.arange(1, math.floor(room / units[i] + 1e-9) + 1, dtype=float) * units[i]
    return np.arange(units[i], math.floor(room + 1e-9) + 1, dtype=float)


def _compositions(job: Sites, max_splits: int = MAX_SPLITS) -> tuple[list, list]:
    """Every valid split of the work: ``(candidates per site, index arrays per site)``."""
    n = len(job.sites)
    total = _total_work(job)
    cands = [share_candidates(job, i) for i in range(n)]
    if any(len(c) == 0 for c in cands):
        raise SpecError("sites.share", total, "enough work for one share unit on every site")
    count = math.prod(len(c) for c in cands[:-1])
    if count > max_splits:
        raise SpecError("sites", n, f"at most {max_splits:,} splits to compare (got {count:,})")
    grids = np.meshgrid(*[np.arange(len(c)) for c in cands[:-1]], indexing="ij")
    idx = [g.ravel() for g in grids]
    first = [cands[i][idx[i]] for i in range(n - 1)]
    last = total - sum(first) if n > 1 else np.full(1, total)
    pos = np.clip(np.searchsorted(cands[-1], last), 0, len(cands[-1]) - 1)
    ok = cands[-1][pos] == last
    if not ok.any():
        raise SpecError(
            "sites.share", total, "a split into whole micro-batches (dp) or stages (pp)"
        )
    return cands, [i[ok] for i in idx] + [pos[ok]]


def _even_index(job: Sites, shares: list) -> int:
    """The split nearest to shares in proportion to replicas (``dp``) or stages (``pp``)."""
    total = _total_work(job)
    w = np.array([float(s.strategy.dp if job.across == "dp" else s.strategy.pp) for s in job.sites])
    target = total * w / w.sum()
    dev = sum(((sh - t) / t) ** 2 for sh, t in zip(shares, target, strict=True))
    return int(np.argmin(dev))


def even_shares(job: Sites) -> list[float]:
    """The split that ignores the sites' differences: shares in proportion to data-parallel
    replicas (``dp``) or pipeline stages (``pp``); when that is not a valid split (whole
    micro-batches, at least one layer per stage), the valid split nearest to it."""
    cands, idx = _compositions(job)
    shares = [cands[i][idx[i]] for i in range(len(job.sites))]
    k = _even_index(job, shares)
    return [float(x[k]) for x in shares]


def balance(job: Sites, max_splits: int = MAX_SPLITS) -> tuple[Sites, dict]:
    """The fastest split of the work over the sites that fits in memory, found exactly.

    Each site's figures are vmapped over all its :func:`share_candidates` (one compiled
    program per site), then every composition of the total (batch or layers) is combined at
    once by the same formulas as :func:`~codesign.sites.evaluate_sites`.  Returns the job
    with the best shares and a dict: ``splits`` (how many were compared), ``best_shares``,
    ``best_step_s``, ``even_shares`` and ``even_step_s`` (:func:`even_shares`, one of the
    compositions, so the best is never slower unless only the even split fits), ``even_fits``
    and ``fits`` (False when no split fits: the fastest is returned).
    """
    _check(job)
    work = _with_needed_parts(job)  # compiled with only the model parts it needs
    n = len(job.sites)
    cands, idx = _compositions(job, max_splits)
    tables = []
    for i in range(n):
        # Padded to a power of two so that jobs of one structure share compiled programs.
        c = cands[i]
        padded = np.concatenate([c, np.full((1 << (len(c) - 1).bit_length()) - len(c), c[-1])])
        t = site_table(work, i, jnp.asarray(padded))
        tables.append({k: np.asarray(v)[: len(c)] for k, v in t.items()})
    shares = [cands[i][idx[i]] for i in range(n)]
    parts = [{k: v[idx[i]] for k, v in tables[i].items()} for i in range(n)]
    c = jax.tree_util.tree_map(np.asarray, combine(work, parts, shares, EXACT))
    step = np.asarray(c["step"], dtype=float)
    fits = np.asarray(c["fits"], dtype=bool)
    score = np.where(fits, step, np.inf) if fits.any() else step
    k = int(np.argmin(score))
    ke = _even_index(job, shares)
    best = [float(shares[i][k]) for i in range(n)]
    info = {
        "splits": int(step.size),
        "best_shares": best,
        "best_step_s": float(step[k]),
        "even_shares": [float(x[ke]) for x in shares],
        "even_step_s": float(step[ke]),
        "even_fits": bool(fits[ke]),
        "fits": bool(fits[k]),
    }
    return _with_shares(job, best), info
