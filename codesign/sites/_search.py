"""Each site's inner strategy and the split, chosen together by exact batched evaluation."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import numpy as np

from codesign._compile import jit
from codesign.sites._balance import balance, even_shares
from codesign.sites._config import check_sites
from codesign.sites._evaluate import evaluate_sites_unchecked
from codesign.sites._spec import Sites, _check, _replace, _with_needed_parts, _with_shares
from codesign.specs import SpecError

MAX_COMBOS = 50_000

_batched = jit(jax.vmap(functools.partial(evaluate_sites_unchecked, homogeneous=False)))


def strategy_grid(
    tp=(1, 2, 4, 8),
    pp=(1, 2, 4, 8),
    microbatch=(1, 2, 4),
    recompute=("none", "selective", "full"),
    zero=(0, 1, 2, 3),
    **fixed,
) -> list[dict]:
    """Strategy tables (run-file ``[strategy]`` form, without ``dp``: each site derives it
    from its accelerator count) over the product of the axes, with ``fixed`` keys added."""
    keys = ("tp", "pp", "microbatch", "recompute", "zero")
    return [
        dict(zip(keys, combo, strict=True), **fixed)
        for combo in itertools.product(tp, pp, microbatch, recompute, zero)
    ]


def _site_strategy(job: Sites, i: int, table: dict):
    """Site ``i``'s :class:`~codesign.specs.Strategy` from a table (``dp`` derived from its
    accelerator count, a ``dp`` of the table ignored), or None when the degrees do not divide
    that count."""
    from codesign._strategy_table import _parse_strategy

    table = {k: v for k, v in table.items() if k != "dp"}
    try:
        return _parse_strategy(table, job.model, float(job.sites[i].system.num_accelerators))
    except SpecError as e:
        if e.field == "strategy.dp":  # no whole dp: not a layout of this site
            return None
        raise


def best_strategies(
    job: Sites, candidates, tied: bool | None = None, top: int = 4, max_combos=MAX_COMBOS
) -> tuple[Sites, dict]:
    """The fastest job over the sites' strategies and splits that fits in memory.

    ``candidates``: strategy tables (:func:`strategy_grid`), one list for every site or a list
    of lists (one per site).  With ``tied`` (default: one list given) every site takes the
    same table; otherwise every combination is tried (at most ``max_combos``).  Every valid
    combination is evaluated exactly at its :func:`~codesign.sites.even_shares` in one
    vmapped batch; the ``top`` fastest that fit are then balanced
    (:func:`~codesign.sites.balance`).  Returns the best job and a dict with ``combos``
    (evaluated), ``valid``, ``fitting``, ``best_step_s``, ``even_step_s`` (the best combination
    at its even split) and ``strategies`` (the winning tables).
    """
    _check(job)
    n = len(job.sites)
    per_site = isinstance(candidates[0], list | tuple)
    tied = (not per_site) if tied is None else tied
    lists = list(candidates) if per_site else [list(candidates)] * n
    if tied:
        combos = list(zip(*lists, strict=True))
    else:
        count = math.prod(len(c) for c in lists)
        if count > max_combos:
            raise SpecError("candidates", count, f"at most {max_combos:,} combinations")
        combos = list(itertools.product(*lists))
    jobs, tables = [], []
    for combo in combos:
        sts = [_site_strategy(job, i, t) for i, t in enumerate(combo)]
        if any(s is None for s in sts):
            continue
        cand = _replace(
            job, sites=tuple(_replace(s, strategy=st) for s, st in zip(job.sites, sts, strict=True))
        )
        try:
            _check(cand)
            cand = _with_shares(cand, even_shares(cand))
            check_sites(cand)
        except SpecError:
            continue
        jobs.append(cand)
        tables.append(combo)
    if not jobs:
        raise SpecError("candidates", len(combos), "at least one valid strategy for every site")
    # Padded to a power of two so that batches of one structure share compiled programs.
    padded = jobs + [jobs[-1]] * ((1 << (len(jobs) - 1).bit_length()) - len(jobs))
    batch = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *padded)
    # Compiled with only the model parts the job's values need; the returned job keeps its own.
    parts = _with_needed_parts(job).model.parts
    r = _batched(_replace(batch, model=batch.model.replace(parts=parts)))
    step = np.asarray(r.step_time_s)[: len(jobs)]
    fits = np.asarray(r.fits)[: len(jobs)]
    order = np.argsort(np.where(fits, step, np.inf))
    best, best_info, best_k = None, None, None
    for k in order[: max(top, 1)]:
        if not fits[k] and fits.any():
            break
        balanced, info = balance(jobs[k])
        if info["fits"] and (best_info is None or info["best_step_s"] < best_info["best_step_s"]):
            best, best_info, best_k = balanced, info, int(k)
    if best is None:
        k = int(order[0])
        best, best_info, best_k = jobs[k], {"best_step_s": float(step[k]), "fits": False}, k
    return best, {
        "combos": len(combos),
        "valid": len(jobs),
        "fitting": int(fits.sum()),
        "best_step_s": best_info["best_step_s"],
        "even_step_s": float(step[best_k]),
        "fits": bool(best_info["fits"]),
        "strategies": list(tables[best_k]),
    }
