"""The calibration data set: mapped rows with their labels, and the training/held-out splits.

:func:`build_dataset` maps every measured row once (``points``: one prediction each;
``ranges``: micro-batch unknown, never fitted; ``skipped``: not expressible, with the reason);
:func:`make_splits` gives the training masks of the random, by-source, by-generation and
all-rows splits; :func:`source_weights` the per-row weights of one split.
"""

from __future__ import annotations

import numpy as np

from codesign.calibration._bridge import bridge_key
from codesign.calibration._grouping import config_labels
from codesign.calibration._rows import (
    MICROBATCH_RANGE,
    is_bridge_row,
    measured_step_time,
    row_to_config,
    source_short,
)
from codesign.calibration._unexpressible import bridge_precision
from codesign.specs import precision_family

__all__ = [
    "SOURCES",
    "build_dataset",
    "contradictions",
    "fit_exclusion",
    "is_zero3_exclusion",
    "layout_median_gaps",
    "make_splits",
    "same_layout_groups",
    "same_layout_systems",
    "source_weights",
]

SOURCES = ("SC21", "Korthikanti", "DGXC", "MosaicML", "Bridge")
"""The sources of the data set, in report order."""


ZERO3_EXCLUSION = "DeepSpeed ZeRO-3 (SC21 Table 2): structure the model cannot express (see report)"
CONTRADICTED = "contradicted by another row"
CONTRADICTION_RATIO = 1.5
"""Two rows of the same system, model, number format, layout and batch whose throughputs
differ by more than this factor contradict each other (see :func:`contradictions`)."""


def fit_exclusion(row: dict) -> str | None:
    """Why a row the model expresses is still kept out of every fit (None: it is fitted).

    SC21 Table 2's ZeRO-3 rows ran DeepSpeed ZeRO-3 (2021) inside Megatron: their measured
    step time does not fall when the GPU count doubles (66.7 s at 768 and at 1536 GPUs for
    175B), i.e. a per-step cost that the model's ZeRO-3 term (hierarchical, bandwidth-optimal
    collectives per micro-batch, hidden behind compute up to ``dp_overlap_eff``) cannot
    produce with any efficiency values.  Fitting them would drag the shared overlap and
    fabric efficiencies to wrong values for every other row; they are reported separately.
    Rows that contradict another row are found over the whole data set by
    :func:`contradictions`.
    """
    if row["id"].startswith("sc21_t2_zero3"):
        return ZERO3_EXCLUSION
    return None


def _layout_key(row: dict, exact_precision: bool = False) -> tuple:
    """What fixes a run's step time but the software release: system, GPU count, model,
    sequence, number format (:func:`codesign.specs.precision_family` of the recipe as mapped:
    every FP8 scaling recipe is ``fp8``; with ``exact_precision`` the recipe itself, e.g.
    ``fp8-current`` apart from ``mxfp8``), batch and every parallel degree (the row's own
    figures)."""
    hw, par, mod = row["hardware"], row["parallel"], row["model"]
    prec = bridge_precision(row, bridge_key(row), [])
    degrees = ("tp", "pp", "cp", "ep", "virtual_pp", "microbatch", "global_batch", "fsdp")
    return (
        str(hw.get("system", hw.get("gpu"))),
        int(hw["num_gpus"]),
        str(mod.get("name")),
        int(mod.get("seq_len", 0)),
        prec if exact_precision else precision_family(prec),
        *(str(par.get(k)) for k in degrees),
    )


def same_layout_groups(rows: list[dict], exact_precision: bool = False) -> list[list[tuple]]:
    """Megatron-Bridge rows that ran one layout in several container releases.

    Groups the rows by :func:`_layout_key` (system, GPU count, model, sequence length, number
    format, global and micro-batch, every parallel degree) and returns each group that holds
    more than one release, as ``[(row id, release, measured step time s), ...]`` sorted by
    release.  Such a group is the same job measured under different software: a model that
    knows the hardware and the layout but not the release gives every member one prediction,
    so the spread inside a group bounds how well any such model can predict a release it has
    not seen (see :func:`contradictions`, which keeps the pairs more than 1.5x apart out of
    the fit).
    """
    return _groups_apart(rows, exact_precision, "release")


def same_layout_systems(rows: list[dict], exact_precision: bool = True) -> list[list[tuple]]:
    """Megatron-Bridge rows of one container release that ran one layout on several systems.

    Groups the rows by release and by :func:`_layout_key` without its system (GPU count,
    model, sequence length, number format, global and micro-batch, every parallel degree) and
    returns each group that holds more than one system, as ``[(row id, system, measured step
    time s), ...]`` sorted by system.  Such a group is one job under one software release on
    different hardware: the ratio of its step times is the measured speed-up of one system over
    the other, which a model that knows only the systems' published specifications must
    produce from those specifications (see :func:`same_layout_groups` for one system across
    releases).

    >>> from codesign.calibration import load_all_rows
    >>> groups = same_layout_systems(load_all_rows())
    >>> [(s, round(t, 2)) for g in groups for _, s, t in g if "LLAMA3_70B" in g[0][0]]
    [('dgx_gb200', 7.6), ('dgx_gb300', 7.25)]
    """
    return _groups_apart(rows, exact_precision, "system")


def _groups_apart(rows: list[dict], exact_precision: bool, apart: str) -> list[list[tuple]]:
    """The Megatron-Bridge rows with a measured step time grouped by release and
    :func:`_layout_key`, all but ``apart`` (``"release"`` or ``"system"``), which labels the
    members: each group with more than one label, as ``[(row id, label, step time s), ...]``
    sorted by label."""
    groups: dict[tuple, list[tuple[str, str, float]]] = {}
    for row in rows:
        if not is_bridge_row(row):
            continue
        t, _ = measured_step_time(row)
        if t:
            system, *rest = _layout_key(row, exact_precision)
            release = row["id"].split("_")[1]
            key, label = (
                ((system, *rest), release) if apart == "release" else ((release, *rest), system)
            )
            groups.setdefault(key, []).append((row["id"], label, float(t)))
    return [
        sorted(members, key=lambda m: m[1])
        for members in groups.values()
        if len({m[1] for m in members}) > 1
    ]


def layout_median_gaps(groups) -> dict[str, float]:
    """``{row id: |m / t - 1|}`` over the groups of :func:`same_layout_groups`, ``m`` the median
    step time of the row's group: the error of one prediction per layout at its median, about
    the least that a prediction which depends on the layout and not on the release can make
    (the optimum in mean absolute percentage error is a weighted median)."""
    out = {}
    for members in groups:
        med = float(np.median([t for _, _, t in members]))
        for row_id, _, t in members:
            out[row_id] = abs(med / t - 1.0)
    return out


def contradictions(rows: list[dict], ratio: float = CONTRADICTION_RATIO) -> dict[str, str]:
    """Rows that contradict another row of the data set: ``{id: reason}``.

    Two Megatron-Bridge rows of the same system, GPU count, model, sequence length, number
    format (:func:`codesign.specs.precision_family`: the FP8 scaling recipes differ by a few
    per cent of a step, not by a factor, so they are one), global and micro-batch and
    parallel degrees (two container releases of one recipe) whose measured step times differ
    by more than ``ratio``.  A model that does not tell the two recipes apart gives both the
    same prediction, so no such model can put both within ``(ratio - 1) / (ratio + 1)`` of
    their measurements (20 % at 1.5x): the page prints one layout, but the software differs
    (in the pairs found here, token drop with capacity padding in 25.09 against dropless MoE,
    which waits for the host in every layer, in 25.11; the model charges that wait,
    :func:`codesign.compute.moe_host_wait`, fitted on the other rows).  Both
    rows of the pair are kept out of every fit and reported apart, so that which one is kept does not
    depend on which the model prefers.  In the copied data this finds Qwen3-30B-A3B on 16 H100
    in FP8 current scaling (25.09: 12.5 s, 25.11: 24.8 s) and on 8 B200 (25.09, FP8 current
    scaling: 14.5 s; 25.11, MXFP8: 28.2 s), while on 8 GB200 the same two releases and
    recipes agree within 5 %.
    """
    out = {}
    for members in same_layout_groups(rows):
        for a, _, ta in members:
            for b, _, tb in members:
                if a != b and max(ta, tb) / min(ta, tb) > ratio:
                    out[a] = (
                        f"{CONTRADICTED}: {b} has the same system, model, number format, batch "
                        "and layout and "
                        f"measured {tb:.2f} s against {ta:.2f} s ({max(ta, tb) / min(ta, tb):.2f}x)"
                    )
    return out


def is_zero3_exclusion(point: dict) -> bool:
    """Whether a point is one of SC21 Table 2's ZeRO-3 rows (kept out of every fit)."""
    return point.get("excluded") == ZERO3_EXCLUSION


def _report_group(source: str, excluded: str | None) -> str:
    if not excluded:
        return source
    kind = "ZeRO-3" if excluded == ZERO3_EXCLUSION else "contradicted"
    return f"{source} {kind} (not fitted)"


def build_dataset(rows: list[dict], recipe_facts: bool = True) -> dict:
    """Map every row: ``points`` (one prediction), ``ranges`` (micro-batch unknown), ``skipped``.

    A point carries its run configuration, its grouping labels, why it is kept out of every
    fit (``excluded``, :func:`fit_exclusion`), its report group and, for the report, the row's
    model name and published MFU.
    """
    points, ranges, skipped = [], [], []
    contradicted = contradictions(rows)
    for row in rows:
        src = source_short(row)
        meas, how = measured_step_time(row)
        par = row["parallel"]
        base = {"id": row["id"], "source": src, "gpus": int(row["hardware"]["num_gpus"])}
        if not par.get("global_batch"):
            skipped.append({**base, "reason": "parallel.global_batch not published"})
            continue
        if meas is None:
            skipped.append({**base, "reason": how})
            continue
        if par.get("microbatch") is None:
            cfgs = {}
            reasons = []
            for mb in MICROBATCH_RANGE:
                if int(par["global_batch"]) % (int(par["dp"]) * mb):
                    continue
                cfg, msg = row_to_config(row, microbatch=mb, recipe_facts=recipe_facts)
                if cfg is None:
                    reasons.append(f"mb={mb}: {msg}")
                else:
                    cfgs[mb] = cfg
            if not cfgs:
                skipped.append({**base, "reason": "no valid micro-batch: " + "; ".join(reasons)})
            else:
                ranges.append({**base, "measured_s": meas, "configs": cfgs})
            continue
        cfg, note = row_to_config(row, recipe_facts=recipe_facts)
        if cfg is None:
            skipped.append({**base, "reason": note})
            continue
        excl = fit_exclusion(row) or contradicted.get(row["id"])
        points.append(
            {
                **base,
                "measured_s": meas,
                "measured_from": how,
                "config": cfg,
                "labels": config_labels(cfg),
                "excluded": excl,
                "group": _report_group(src, excl),
                "notes": note,
                "model": row["model"].get("name"),
                "measured_mfu": row.get("measured", {}).get("mfu"),
            }
        )
    same = [[list(m) for m in g] for g in same_layout_groups(rows, exact_precision=True)]
    systems = [[list(m) for m in g] for g in same_layout_systems(rows)]
    return {
        "points": points,
        "ranges": ranges,
        "skipped": skipped,
        "same_layout": same,
        "same_layout_systems": systems,
    }


def make_splits(
    points: list[dict], seed: int = 0, held_fraction: float = 0.25, random_splits: int = 1
) -> list[dict]:
    """Training/held-out masks over ``points``: random, by source, by generation, all rows.

    Rows excluded from fitting (:func:`fit_exclusion`) are never trained on.  Each of the
    ``random_splits`` random splits (seeds ``seed``, ``seed + 1``, ...) holds out
    ``held_fraction`` of each source's fittable rows (at least one), drawn with
    ``numpy.random.default_rng(seed)``: with only 8 Korthikanti rows, one random split holds
    out 2 of them, so a single seed says little; the report averages over the seeds.
    """

    n = len(points)
    fittable = np.array([p["excluded"] is None for p in points])
    src = np.array([p["source"] for p in points])
    gen = np.array([p["labels"]["generation"] for p in points])
    splits = []
    for sd in range(seed, seed + max(int(random_splits), 1)):
        rng = np.random.default_rng(sd)
        held = np.zeros(n, dtype=bool)
        for s in SOURCES:
            ix = np.flatnonzero(fittable & (src == s))
            if ix.size:
                k = max(1, int(round(held_fraction * ix.size)))
                held[rng.permutation(ix)[:k]] = True
        splits.append(
            {
                "name": f"random (seed {sd}, {int(100 * held_fraction)} % of each source held out)",
                "kind": "random",
                "seed": sd,
                "train": fittable & ~held,
            }
        )
    for s in SOURCES:
        if np.any(src == s) and np.any(fittable & (src != s)):  # something left to fit on
            splits.append(
                {
                    "name": f"hold out {s}",
                    "kind": "source",
                    "held_source": s,
                    "train": fittable & (src != s),
                }
            )
    # The honest test of a model used to predict the next software release: fit on every row
    # but the Megatron-Bridge 25.11 ones, predict those (the 25.09 runs of the same recipes
    # are in the training set).
    newer = np.array([p.get("id", "").startswith("mbridge_25.11") for p in points])
    if np.any(newer):
        splits.append(
            {
                "name": "container: fit without Megatron-Bridge 25.11, test 25.11",
                "kind": "container",
                "train": fittable & ~newer,
            }
        )
    for g, other in (("a100", "h100"), ("h100", "a100")):
        if np.any(gen == g) and np.any(gen == other):
            splits.append(
                {
                    "name": f"train {g.upper()}, test {other.upper()}",
                    "kind": "hardware",
                    "train": fittable & (gen == g),
                }
            )
    splits.append({"name": "all rows (the presets)", "kind": "all", "train": fittable.copy()})
    for sp in splits:
        sp["held"] = ~sp["train"]
    return splits


def source_weights(points: list[dict], train, weighting: str = "source"):
    """Per-row weights: ``source`` gives every source the same total weight, ``row`` 1 each."""

    w = np.zeros(len(points))
    train = np.asarray(train, dtype=bool)
    if weighting == "row":
        w[train] = 1.0
        return w
    src = np.array([p["source"] for p in points])
    for s in set(src[train]):
        m = train & (src == s)
        w[m] = 1.0 / m.sum()
    return w
