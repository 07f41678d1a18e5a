"""Validation runs: calibrate on every split and collect the errors before and after each fit.

:func:`run_validation` evaluates every mapped row with the uncalibrated efficiencies, fits
the calibrated parameters (:func:`codesign.calibration._fit.calibrate`) on each split of
:func:`~codesign.calibration._dataset.make_splits`, predicts every row with each fit and
returns a JSON-ready result (per split: fitted values, masks, predictions, per-group error
statistics; the micro-batch-range rows with the all-rows fit).  :func:`run_ablation` repeats
it for the candidate parameter sets of :data:`ABLATION_SETS`.
"""

from __future__ import annotations

import hashlib
import json

import jax
import numpy as np

from codesign.calibration._dataset import build_dataset, make_splits, source_weights
from codesign.calibration._fit import calibrate, predict_step_times
from codesign.calibration._grouping import (
    CALIBRATION_START,
    DEFAULT_PARAMS,
    PARAM_GROUPING,
    borrowed_labels,
    config_labels,
    groups_for,
    resolved_groups,
)
from codesign.calibration._rows import load_all_rows
from codesign.calibration._stats import ErrorStats
from codesign.efficiency import FLEX_RATIOS
from codesign.specs import Efficiency

__all__ = ["ABLATION_SETS", "ablation_summary", "run_ablation", "run_validation"]


def _stats(err_pct, mask) -> dict:
    return ErrorStats.of(np.asarray(err_pct)[mask]).as_dict()


def _per_group_stats(points, before, after, split) -> dict:
    """``{group: {train|held: {before|after: error statistics}}}`` of one split."""
    meas = np.array([p["measured_s"] for p in points])
    eb = 100.0 * (before - meas) / meas
    ea = 100.0 * (after - meas) / meas
    groups = []
    for p in points:
        if p["group"] not in groups:
            groups.append(p["group"])
    grp = np.array([p["group"] for p in points])
    out = {}
    for g in groups:
        gm = grp == g
        out[g] = {
            part: {
                "before": _stats(eb, gm & split[part]),
                "after": _stats(ea, gm & split[part]),
            }
            for part in ("train", "held")
        }
    return out


def run_validation(
    rows: list[dict] | None = None,
    params=DEFAULT_PARAMS,
    *,
    steps: int = 1500,
    learning_rate: float = 0.05,
    seed: int = 0,
    random_splits: int = 10,
    weighting: str = "source",
    recipe_facts: bool = True,
    splits: list[str] | None = None,
    dataset: dict | None = None,
    grouping: dict | None = None,
    prior: float = 1e-5,
    progress=None,
) -> dict:
    """Evaluate every row before calibration, calibrate on each split, evaluate after.

    Returns a JSON-ready dict (plus the dataset under ``"_dataset"``): per point row the
    measured and predicted step times, per split the fitted values, the training/held-out
    masks, the predictions after calibration and per-source statistics, and the
    micro-batch-range rows with the final calibration.
    """
    say = progress or (lambda *_: None)
    if dataset is None:
        dataset = build_dataset(rows if rows is not None else load_all_rows(), recipe_facts)
    points = dataset["points"]
    params = tuple(params)
    cfgs = [p["config"] for p in points]
    meas = np.array([p["measured_s"] for p in points])
    groups = groups_for(points, params, grouping)
    grouping = {**PARAM_GROUPING, **(grouping or {})}
    before = predict_step_times(cfgs, {})
    init = {**{k: v for k, v in CALIBRATION_START.items()}}
    base = Efficiency()
    for p_name in params:
        init.setdefault(p_name, getattr(base, p_name) if p_name != "tier_efficiency" else 0.9)
    all_splits = make_splits(points, seed=seed, random_splits=random_splits)
    if splits is not None:
        all_splits = [s for s in all_splits if s["kind"] in splits or s["name"] in splits]
    results = []
    for sp in all_splits:
        w = source_weights(points, sp["train"], weighting)
        if not np.any(w > 0):  # a small data file: nothing left to fit once the split holds out
            say(f"skipped: {sp['name']} (no training rows)")
            continue
        say(f"calibrating: {sp['name']} ({int(sp['train'].sum())} training rows)")
        fit = calibrate(
            cfgs,
            meas,
            init,
            params,
            groups,
            steps=steps,
            learning_rate=learning_rate,
            weights=w,
            prior=prior,
        )
        rg = resolved_groups(groups, fit.values)
        after = predict_step_times(cfgs, fit.values, rg)
        results.append(
            {
                "name": sp["name"],
                "kind": sp["kind"],
                "held_source": sp.get("held_source"),
                "seed": sp.get("seed"),
                "train": sp["train"].tolist(),
                "held": sp["held"].tolist(),
                "values": fit.values,
                "start": fit.start,
                "msle": fit.msle,
                "loss": fit.loss,
                "loss_first": float(fit.loss_history[0]) if fit.loss_history.size else None,
                "after_s": after.tolist(),
                "borrowed": borrowed_labels(groups, rg),
                "per_group": _per_group_stats(points, before, after, sp),
            }
        )
    final = next((r for r in results if r["kind"] == "all"), results[-1] if results else None)
    range_rows = []
    if final is not None:
        for rr in dataset["ranges"]:
            mbs = sorted(rr["configs"])
            rc = [rr["configs"][mb] for mb in mbs]
            g = groups_for([{"labels": config_labels(c)} for c in rc], params, grouping)
            b = predict_step_times(rc, {})
            a = predict_step_times(rc, final["values"], resolved_groups(g, final["values"]))
            m = rr["measured_s"]
            range_rows.append(
                {
                    "id": rr["id"],
                    "source": rr["source"],
                    "gpus": rr["gpus"],
                    "measured_s": m,
                    "microbatches": mbs,
                    "before_s": b.tolist(),
                    "after_s": a.tolist(),
                    "before_inside": bool(b.min() <= m <= b.max()),
                    "after_inside": bool(a.min() <= m <= a.max()),
                    "before_best_ape_pct": float(np.min(np.abs(b - m)) / m * 100),
                    "after_best_ape_pct": float(np.min(np.abs(a - m)) / m * 100),
                }
            )
    return {
        "params": list(params),
        "grouping": {p_name: grouping.get(p_name, "shared") for p_name in params},
        "prior": prior,
        "weighting": weighting,
        "steps": steps,
        "learning_rate": learning_rate,
        "seed": seed,
        "random_splits": random_splits,
        "recipe_facts": recipe_facts,
        "points": [
            {
                "id": p["id"],
                "source": p["source"],
                "group": p["group"],
                "gpus": p["gpus"],
                "generation": p["labels"]["generation"],
                "precision": p["config"].training.precision,
                "measured_s": p["measured_s"],
                "before_s": float(before[i]),
                "excluded": p["excluded"],
                "moe": bool(float(p["config"].model.moe_experts) > 0),
                "mapping": mapping_fingerprint(p["config"]),
            }
            for i, p in enumerate(points)
        ],
        "splits": results,
        "ranges": range_rows,
        "skipped": dataset["skipped"],
        "same_layout": dataset.get("same_layout", []),
        "same_layout_systems": dataset.get("same_layout_systems", []),
        "_dataset": dataset,
    }


_BEFORE_HOST = tuple(p for p in DEFAULT_PARAMS if not p.startswith("moe_host_"))
"""The set shipped until the dropless ``alltoall`` dispatcher's host wait was fitted (2026-12-07,
:func:`codesign.compute.moe_host_wait`): every candidate up to it builds on it."""
_AFTER_BACKWARD = _BEFORE_HOST.index("backward_factor") + 1
_WITH_IMBALANCE = (
    _BEFORE_HOST[:_AFTER_BACKWARD] + ("moe_imbalance",) + _BEFORE_HOST[_AFTER_BACKWARD:]
)
"""The set shipped until 2026-12-06, which fitted ``moe_imbalance`` as well: every candidate
up to the one that dropped it builds on it."""
_AFTER_DP_OVERLAP = _WITH_IMBALANCE.index("dp_overlap_eff") + 1
_WITH_DP_COMM = (
    _WITH_IMBALANCE[:_AFTER_DP_OVERLAP] + ("dp_comm_eff",) + _WITH_IMBALANCE[_AFTER_DP_OVERLAP:]
)
"""The set shipped until 2026-12-05, which fitted ``dp_comm_eff`` per software stack as well:
every candidate up to the one that dropped it builds on it."""
_BEFORE_SLOWDOWN = tuple(p for p in _WITH_DP_COMM if p != "dp_overlap_slowdown")
_BEFORE_FLEX = tuple(p for p in _BEFORE_SLOWDOWN if p not in FLEX_RATIOS)
_PER_STACK = tuple(p for p in _BEFORE_FLEX if p != "dp_comm_eff")
_WITH_RECOMPUTE = _PER_STACK + ("recompute_factor",)
_DP_PER_STACK = {"dp_overlap_eff": "shared+stack"}
"""``dp_overlap_eff`` as every candidate before ``dp_overlap_slowdown`` fitted it: one value per
software stack (the chosen set shares one, :data:`PARAM_GROUPING`)."""
_HALF_SHARED = {"grouped_gemm_half_tokens": "shared"}
"""``grouped_gemm_half_tokens`` as every candidate before the chosen set fitted it (the sets
shipped until 2026-12-07): one value for all rows (the chosen set fits one per software stack,
:data:`PARAM_GROUPING`)."""
_SHARED_GROUPED = {"grouped_gemm_eff": "shared", **_DP_PER_STACK, **_HALF_SHARED}
"""``grouped_gemm_eff`` as every candidate before the grouped-GEMM ablation fitted it: one value
for all rows (the chosen set fits one per software stack, :data:`PARAM_GROUPING`); with
``dp_overlap_eff`` per stack and ``grouped_gemm_half_tokens`` shared, as those candidates had
them."""
_DP_HALF = {**_DP_PER_STACK, **_HALF_SHARED}


def _shared_grouped(overrides: dict) -> dict:
    return {**_SHARED_GROUPED, **overrides}


ABLATION_SETS = {
    "gemm_max": (("gemm_max",), {}),
    "+ attention_eff": (("gemm_max", "attention_eff"), {}),
    "+ attention_eff (per generation only)": (
        ("gemm_max", "attention_eff"),
        {"attention_eff": "generation"},
    ),
    "+ hbm_eff, gemm_half_dim": (("gemm_max", "attention_eff", "hbm_eff", "gemm_half_dim"), {}),
    "+ dp/tp overlap, tier efficiency, per generation": (
        _PER_STACK,
        _shared_grouped(
            {
                "gemm_max": "generation+precision",
                "attention_eff": "generation+attention",
                "hbm_eff": "generation",
            }
        ),
    ),
    "+ per software stack": (_PER_STACK, _SHARED_GROUPED),
    "+ dp_comm_eff per stack": (_BEFORE_FLEX, _SHARED_GROUPED),
    "+ flex dispatcher ratios": (_BEFORE_SLOWDOWN, _SHARED_GROUPED),
    "+ flex ratios, grouped GEMMs per generation": (
        _BEFORE_SLOWDOWN,
        {
            "grouped_gemm_eff": "generation",
            "grouped_gemm_half_tokens": "generation",
            **_DP_PER_STACK,
        },
    ),
    "+ flex ratios, moe_imbalance per stack": (
        _BEFORE_SLOWDOWN,
        _shared_grouped({"moe_imbalance": "shared+stack"}),
    ),
    "+ grouped_gemm_eff per stack": (_BEFORE_SLOWDOWN, _DP_HALF),
    "+ dp_overlap_slowdown shared": (
        _WITH_DP_COMM,
        {**_DP_HALF, "dp_overlap_slowdown": "shared"},
    ),
    "+ dp_overlap_slowdown per stack": (_WITH_DP_COMM, _DP_HALF),
    "+ dp_overlap_slowdown per stack, dp_overlap_eff shared": (_WITH_DP_COMM, _HALF_SHARED),
    "+ dp_overlap_slowdown per generation and stack, dp_overlap_eff shared": (
        _WITH_DP_COMM,
        {"dp_overlap_slowdown": "generation+stack", **_HALF_SHARED},
    ),
    "- dp_comm_eff": (_WITH_IMBALANCE, _HALF_SHARED),
    "- moe_imbalance": (_BEFORE_HOST, _HALF_SHARED),
    "- moe_imbalance, grouped_gemm_half_tokens per stack": (_BEFORE_HOST, {}),
    "grouped_gemm_half_tokens per generation and stack": (
        _BEFORE_HOST,
        {"grouped_gemm_half_tokens": "generation+stack"},
    ),
    "grouped GEMMs (efficiency, half_tokens) per generation and stack": (
        _BEFORE_HOST,
        {"grouped_gemm_eff": "generation+stack", "grouped_gemm_half_tokens": "generation+stack"},
    ),
    "gemm_max per accelerator (B200, GB200 apart)": (
        _BEFORE_HOST,
        {"gemm_max": "accelerator+precision+stack"},
    ),
    "backward_factor per GEMM precision": (_BEFORE_HOST, {"backward_factor": "precision"}),
    "gemm_half_dim per stack": (_BEFORE_HOST, {"gemm_half_dim": "shared+stack"}),
    "+ moe_host_expert_us (dropless alltoall host wait)": (
        (*_BEFORE_HOST, "moe_host_expert_us"),
        {},
    ),
    "+ moe_host_layer_us, moe_host_expert_us (dropless alltoall host wait) (chosen)": (
        DEFAULT_PARAMS,
        {},
    ),
    "tp_overlap_eff per stack": (_BEFORE_HOST, {"tp_overlap_eff": "shared+stack"}),
    "ep_overlap_eff per stack": (_BEFORE_HOST, {"ep_overlap_eff": "shared+stack"}),
    "per stack, dp_overlap_eff shared": (
        _PER_STACK,
        _shared_grouped({"dp_overlap_eff": "shared"}),
    ),
    "per stack + recompute_factor": (_WITH_RECOMPUTE, _SHARED_GROUPED),
    "per stack + recompute_factor, tier efficiency per fabric": (
        _WITH_RECOMPUTE,
        _shared_grouped({"tier_efficiency": "fabric"}),
    ),
    "per stack + recompute_factor, backward_factor per stack": (
        _WITH_RECOMPUTE,
        _shared_grouped({"backward_factor": "shared+stack"}),
    ),
    "per stack + recompute_factor, gemm_half_dim per generation": (
        _WITH_RECOMPUTE,
        _shared_grouped({"gemm_half_dim": "generation"}),
    ),
    "per stack + recompute_factor, ep_overlap_eff per stack": (
        _WITH_RECOMPUTE,
        _shared_grouped({"ep_overlap_eff": "shared+stack"}),
    ),
    "per stack + recompute_factor, elementwise_traffic, optimizer_bytes_per_param per stack": (
        _WITH_RECOMPUTE + ("elementwise_traffic", "optimizer_bytes_per_param"),
        _shared_grouped(
            {"elementwise_traffic": "shared+stack", "optimizer_bytes_per_param": "shared+stack"}
        ),
    ),
}
"""Candidate parameter sets compared by ``--ablation``: (parameters, grouping overrides)."""


def _candidate(params, grouping, settings: dict, x64: bool, rows=None, dataset=None) -> dict:
    """One ablation candidate's :func:`run_validation` (without ``_dataset``), on ``dataset``
    or on ``rows`` mapped here; also the target of :func:`run_ablation`'s child processes,
    so it sets JAX's precision itself."""
    import jax

    jax.config.update("jax_enable_x64", x64)
    r = run_validation(rows=rows, dataset=dataset, params=params, grouping=grouping, **settings)
    r.pop("_dataset")
    return r


def _candidate_in_process(rows, params, grouping, settings: dict, x64: bool) -> dict:
    """:func:`_candidate` in a fresh interpreter (``spawn``): its memory, JIT caches and
    compiled code go when it ends.  A child that dies (a signal) raises ``BrokenProcessPool``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_candidate, params, grouping, settings, x64, rows).result()


def run_ablation(
    dataset: dict | None = None,
    *,
    rows: list[dict] | None = None,
    steps: int = 1500,
    seed: int = 0,
    random_splits: int = 10,
    prior: float = 1e-5,
    splits: list[str] | None = None,
    sets: dict | None = None,
    processes: bool = False,
    progress=None,
) -> dict:
    """``{candidate name: validation result}`` for every set of ``sets`` (default
    :data:`ABLATION_SETS`), each fitted on every split exactly as :func:`run_validation`
    (results without ``_dataset``).

    With ``processes`` each candidate runs in a fresh process built from ``rows`` (default:
    every data file's rows), one after the other: a long single process that fits dozens of
    candidates accumulates compiled programs (ours died of a segmentation fault at the third
    candidate, ten minutes in, every time), while a fresh process per candidate holds one
    candidate's.  A child that dies (a signal) is retried once in a new process; a second
    death raises ``RuntimeError`` naming the candidate.  A Python exception in a child is
    raised here as it is.
    """
    from concurrent.futures.process import BrokenProcessPool

    import jax

    say = progress or (lambda *_: None)
    settings = dict(steps=steps, seed=seed, random_splits=random_splits, prior=prior, splits=splits)
    if not processes and dataset is None:
        dataset = build_dataset(rows if rows is not None else load_all_rows())
    x64 = bool(jax.config.jax_enable_x64)
    out = {}
    for name, (params, grouping) in (ABLATION_SETS if sets is None else sets).items():
        say(f"ablation: {name}" + (" (own process)" if processes else ""))
        if not processes:
            out[name] = _candidate(params, grouping, settings, x64, dataset=dataset)
            continue
        for attempt in (1, 2):
            try:
                out[name] = _candidate_in_process(rows, params, grouping, settings, x64)
                break
            except BrokenProcessPool as exc:
                if attempt == 2:
                    raise RuntimeError(
                        f"ablation candidate {name!r}: its process died twice ({exc})"
                    ) from exc
                say(f"ablation: {name}: the child process died; retrying once in a new one")
    return out


def ablation_summary(ablation: dict) -> dict:
    """What :func:`~codesign.calibration._tables.ablation_rows` needs of each candidate's results (no per-row arrays)."""
    keep = ("name", "kind", "held_source", "values", "start", "msle", "loss", "per_group")
    return {
        name: {
            **{
                k: v
                for k, v in res.items()
                if k not in ("points", "splits", "ranges", "skipped", "same_layout", "_dataset")
            },
            "data": data_fingerprint(res),
            "splits": [{k: sp[k] for k in keep if k in sp} for sp in res["splits"]],
        }
        for name, res in ablation.items()
    }


def mapping_fingerprint(cfg) -> str:
    """Short hash of a row's mapped run: every leaf and the tree structure (static fields
    included) of its specs.  Two points with the same hash were evaluated as the same run, so
    a change of the row -> run mapping (a recipe fact, a corrected page value) shows."""
    leaves, treedef = jax.tree_util.tree_flatten(cfg.specs())
    values = [np.round(np.asarray(x, dtype=float), 9).tolist() for x in leaves]
    return hashlib.sha256(json.dumps([str(treedef), values]).encode()).hexdigest()[:12]


def data_fingerprint(res: dict) -> str:
    """``"<n> fitted rows, <sha256 prefix>"`` of a validation result's fittable rows (their ids,
    measured step times and mapped runs, :func:`mapping_fingerprint`): two results with the same
    fingerprint were fitted on the same data, so a stored ablation can be checked against the
    data of the report that reuses it."""
    fit = sorted(
        (p["id"], round(float(p["measured_s"]), 6), p.get("mapping", ""))
        for p in res["points"]
        if not p.get("excluded")
    )
    digest = hashlib.sha256(json.dumps(fit).encode()).hexdigest()[:16]
    return f"{len(fit)} fitted rows, {digest}"
