"""The validation result's tables: rows of strings, rendered as plain text or markdown.

Each ``*_rows`` function formats typed statistics (:mod:`codesign.calibration._stats`) or the
stored numbers of a validation result into table cells; :data:`SPLIT_HEAD` and the other
``*_HEAD`` lists are the matching headers; :func:`text_table` and :func:`md_table` render them.
"""

from __future__ import annotations

import numpy as np

from codesign.calibration._dataset import layout_median_gaps
from codesign.calibration._presets import held_out_by_setting
from codesign.calibration._stats import (
    ErrorStats,
    FamilyStats,
    KorthikantiTable,
    Zero3Row,
    error_pct,
    fitted_values,
    held_out_summary,
    pool_entries,
    split_of_kind,
    target_for,
)

__all__ = [
    "ABLATION_HEAD",
    "FAMILY_HEAD",
    "K_HEAD",
    "RANGE_HEAD",
    "SPLIT_HEAD",
    "SUMMARY_HEAD",
    "ZERO3_HEAD",
    "ablation_rows",
    "family_rows",
    "fmt",
    "korthikanti_rows",
    "md_table",
    "range_rows",
    "split_rows",
    "summary_rows",
    "text_table",
    "values_rows",
    "zero3_table_rows",
]


def fmt(x, spec=".1f") -> str:
    """``x`` formatted with ``spec``, ``-`` for None."""
    return "-" if x is None else format(x, spec)


def text_table(head, rows, last_width: int | None = None) -> str:
    """Aligned plain-text table; ``last_width`` caps the padding of the last column."""
    w = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    if last_width is not None:
        w[-1] = min(w[-1], last_width)
    lines = ["  ".join(str(c).ljust(x) for c, x in zip(head, w, strict=True))]
    lines.append("  ".join("-" * x for x in w))
    lines += ["  ".join(str(c).ljust(x) for c, x in zip(r, w, strict=True)) for r in rows]
    return "\n".join(lines)


def md_table(head, rows) -> str:
    """Markdown table (a ``|`` inside a cell becomes ``/``)."""
    esc = [[str(c).replace("|", "/") for c in r] for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# Per split, held-out summary, fitted values
# ------------------------------------------------------------------------------------------

SPLIT_HEAD = [
    "source",
    "train rows",
    "train MAPE % (before -> after)",
    "train max APE %",
    "held-out rows",
    "held-out MAPE % (before -> after)",
    "held-out max APE %",
]


def _ba(st: dict, key: str) -> str:
    b, a = st["before"][key], st["after"][key]
    return "-" if a is None else f"{fmt(b)} -> {fmt(a)}"


def split_rows(split: dict) -> list[list[str]]:
    """Per-source rows of one split's table (before -> after, training and held-out)."""
    out = []
    for g, st in split["per_group"].items():
        tr, he = st["train"], st["held"]
        out.append(
            [
                g,
                str(tr["after"]["rows"]),
                _ba(tr, "mape_pct"),
                _ba(tr, "max_ape_pct"),
                str(he["after"]["rows"]),
                _ba(he, "mape_pct"),
                _ba(he, "max_ape_pct"),
            ]
        )
    return out


SUMMARY_HEAD = [
    "source",
    "target (held-out)",
    "random splits: rows, MAPE / max % before -> after (mean / max over seeds)",
    "met",
    "source held out: rows, MAPE / max % before -> after",
    "met",
    "other generation held out: MAPE / max % before -> after",
]


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "no")


def summary_rows(res: dict) -> list[list[str]]:
    """One row per group: its target and held-out errors by split kind (random splits pooled)."""
    rows = []
    for r in held_out_summary(res):
        t = target_for(r.group)
        tgt = (
            "-"
            if t is None
            else f"MAPE <= {t.mape_pct:g}"
            + (f", max <= {t.max_ape_pct:g}" if t.max_ape_pct is not None else "")
        )

        def cell(entries, t=t):
            if not entries:
                return "-", "-"
            e = pool_entries(entries)
            b, a = e.before, e.after
            n = f"{len(entries)} x " if len(entries) > 1 else ""
            txt = (
                f"{n}{e.rows}: {fmt(b.mape_pct)} / {fmt(b.max_ape_pct)} -> "
                f"{fmt(a.mape_pct)} / {fmt(a.max_ape_pct)}"
            )
            if len(entries) > 1:
                txt += " (per seed " + ", ".join(fmt(x.after.mape_pct) for x in entries) + ")"
            return txt, _met(None if t is None else t.met(a))

        rc, rm = cell(r.random)
        sc, sm = cell(r.source)
        hw = (
            "; ".join(
                f"{e.split}: {fmt(e.before.mape_pct)} / {fmt(e.before.max_ape_pct)} -> "
                f"{fmt(e.after.mape_pct)} / {fmt(e.after.max_ape_pct)}"
                for e in r.hardware
            )
            or "-"
        )
        rows.append([r.group, tgt, rc, rm, sc, sm, hw])
    return rows


def values_rows(res: dict) -> list[list[str]]:
    """One row per parameter and label, one column per split: the fitted values."""
    return [
        [fv.name, str(fv.label), fmt(fv.start, ".3g"), *(fmt(v, ".3g") for v in fv.values)]
        for fv in fitted_values(res)
    ]


# ------------------------------------------------------------------------------------------
# Korthikanti Table 5, micro-batch ranges, families, ZeRO-3 rows, ablation
# ------------------------------------------------------------------------------------------

K_HEAD = [
    "run",
    "gpus",
    "measured s",
    "before: error %",
    "Korthikanti held out: predicted s (error %)",
    "random splits: mean error % where held out",
    "all rows (presets): predicted s (error %)",
]


def korthikanti_rows(table: KorthikantiTable) -> list[list[str]]:
    """The Table 5 rows: before, source held out, mean over the random splits that held the row
    out (and in how many of them), all rows."""
    rows = []
    n = table.n_random
    for r in table.rows:
        held = r.random_pct
        rows.append(
            [
                r.id.removeprefix("korthikanti_"),
                str(r.gpus),
                f"{r.measured_s:.2f}",
                f"{r.before_pct:+.1f}",
                "-" if r.source_s is None else f"{r.source_s:.2f} ({r.source_pct:+.1f})",
                f"{sum(held) / len(held):+.1f} (held out in {len(held)} of {n})"
                if held
                else f"- (held out in 0 of {n})",
                "-" if r.all_s is None else f"{r.all_s:.2f} ({r.all_pct:+.1f})",
            ]
        )
    return rows


def range_rows(res: dict) -> list[list[str]]:
    """The micro-batch-range rows: predicted range before and after, measured inside or not."""
    out = []
    for r in res["ranges"]:
        out.append(
            [
                r["id"],
                str(r["gpus"]),
                f"{r['measured_s']:.2f}",
                ",".join(str(x) for x in r["microbatches"]),
                f"{min(r['before_s']):.2f}-{max(r['before_s']):.2f}",
                "inside"
                if r["before_inside"]
                else f"outside (best {r['before_best_ape_pct']:.1f} %)",
                f"{min(r['after_s']):.2f}-{max(r['after_s']):.2f}",
                "inside"
                if r["after_inside"]
                else f"outside (best {r['after_best_ape_pct']:.1f} %)",
            ]
        )
    return out


RANGE_HEAD = [
    "run",
    "gpus",
    "measured s",
    "micro-batches",
    "before: predicted s",
    "before",
    "after (presets): predicted s",
    "after",
]


FAMILY_HEAD = [
    "family",
    "rows",
    "before: mean error %",
    "after: mean error %",
    "after: MAPE %",
    "after: range %",
]


def family_rows(stats: list[FamilyStats]) -> list[list[str]]:
    """Mean signed and absolute error per model family (:func:`~._stats.family_stats`)."""
    return [
        [
            f.family,
            str(f.rows),
            f"{f.before_mean_pct:+.1f}",
            f"{f.after_mean_pct:+.1f}",
            f"{f.after_mape_pct:.1f}",
            f"{f.after_min_pct:+.1f} .. {f.after_max_pct:+.1f}",
        ]
        for f in stats
    ]


ZERO3_HEAD = [
    "run",
    "gpus",
    "measured s",
    "model before s",
    "model after (presets) s",
    "measured - model s",
    "model + flat-ring ZeRO-3 traffic, no overlap s (error)",
]


def zero3_table_rows(rows: list[Zero3Row]) -> list[list[str]]:
    """The ZeRO-3 rows (:func:`~._stats.zero3_rows`) as table cells."""
    return [
        [
            r.id,
            str(r.gpus),
            f"{r.measured_s:.1f}",
            f"{r.before_s:.1f}",
            f"{r.after_s:.1f}",
            f"{r.measured_s - r.after_s:+.1f}",
            "-" if r.flat_s is None else f"{r.flat_s:.1f} ({r.flat_error_pct:+.0f} %)",
        ]
        for r in rows
    ]


def ablation_rows(ablation: dict) -> list[list[str]]:
    """One row per candidate parameter set: number of fitted values and errors per split kind."""

    rows = []
    for name, res in ablation.items():
        allsp = next(s for s in res["splits"] if s["kind"] == "all")
        n_vals = sum(len(t) for t in allsp["values"].values())

        def held(kind, only_own=False, res=res):
            out = []
            for sp in res["splits"]:
                if sp["kind"] != kind:
                    continue
                for g, st in sp["per_group"].items():
                    if "not fitted" in g or st["held"]["after"]["rows"] == 0:
                        continue
                    if only_own and g != sp.get("held_source"):
                        continue
                    out.append((g, st["held"]["after"]["mape_pct"]))
            return out

        rnd_all: dict = {}
        for g, v in held("random"):
            rnd_all.setdefault(g, []).append(v)
        rnd = [(g, float(np.mean(v))) for g, v in rnd_all.items()]  # mean over the seeds
        src = held("source", only_own=True)
        hw = held("hardware")
        tr = [
            (g, st["train"]["after"]["mape_pct"])
            for g, st in allsp["per_group"].items()
            if st["train"]["after"]["rows"]
        ]
        k = dict(src).get("Korthikanti")
        rows.append(
            [
                name,
                str(n_vals),
                " ".join(f"{g[:4]} {v:.1f}" for g, v in tr),
                f"{np.mean([v for _, v in rnd]):.2f}" if rnd else "-",
                " ".join(f"{g[:4]} {v:.1f}" for g, v in rnd),
                " ".join(f"{g[:4]} {v:.1f}" for g, v in src),
                fmt(k, ".2f"),
                f"{np.mean([v for _, v in hw]):.1f}" if hw else "-",
            ]
        )
    return rows


ABLATION_HEAD = [
    "parameter set",
    "fitted values",
    "all rows: training MAPE % per source",
    "random splits: mean held-out MAPE % (over sources and seeds)",
    "random splits: held-out MAPE % per source (mean over seeds)",
    "source held out: MAPE % of that source",
    "Korthikanti held out MAPE %",
    "generation held out: mean MAPE %",
]


# ------------------------------------------------------------------------------------------
# Issue 11's targets: held-out error by model kind and by container version
# ------------------------------------------------------------------------------------------

FRONTIER_HEAD = [
    "group",
    "split",
    "held-out MAPE % (mean over splits)",
    "max APE %",
    "target",
    "met",
]


def blackwell_bridge(p: dict) -> bool:
    """A Megatron-Bridge row on a Blackwell generation (the container target's rows)."""
    return p["source"] == "Bridge" and str(p["generation"]).startswith("blackwell")


_FRONTIER_GROUPS = (
    ("dense, every source", "random", lambda p: not p.get("moe"), 5.0),
    ("MoE, every source", "random", lambda p: bool(p.get("moe")), 8.0),
    (
        "Megatron-Bridge dense",
        "random",
        lambda p: p["source"] == "Bridge" and not p.get("moe"),
        None,
    ),
    (
        "Megatron-Bridge MoE",
        "random",
        lambda p: p["source"] == "Bridge" and bool(p.get("moe")),
        None,
    ),
    ("Megatron-Bridge, all", "container", lambda p: p["source"] == "Bridge", None),
    ("Megatron-Bridge Blackwell", "container", blackwell_bridge, 8.0),
)
CONTAINER_TARGET_PCT = _FRONTIER_GROUPS[-1][3]
"""Issue 11's target for the Megatron-Bridge Blackwell rows held out by container version."""


_CONTAINER_PARTS = (
    ("Megatron-Bridge Blackwell, every value fitted on its own labels", False),
    ("Megatron-Bridge Blackwell, borrowing a value (label not in 25.09)", True),
)
"""The container target's rows split by whether the 25.09 fit carried every calibration label
of the row (:func:`container_part`)."""


def container_part(res: dict, sel, borrowed: bool | None) -> ErrorStats | None:
    """Held-out errors of the container split (fit without 25.11, predict 25.11) over the
    fitted rows selected by ``sel`` that borrow (``borrowed``) or do not borrow a calibrated
    value from another label (the split's ``borrowed`` record: a label no training row
    carried, such as an accelerator or a number format without 25.09 rows), or all of them
    (``borrowed=None``); None without such rows or without the record (results written
    before it)."""
    sp = split_of_kind(res, "container")
    if sp is None or "borrowed" not in sp:
        return None
    errs = [
        error_pct(sp["after_s"][i], p["measured_s"])
        for i, p in enumerate(res["points"])
        if sp["held"][i]
        and p["excluded"] is None
        and sel(p)
        and (borrowed is None or bool(sp["borrowed"][i]) == borrowed)
    ]
    return ErrorStats.of(errs) if errs else None


def container_twins(res: dict, sel) -> tuple[ErrorStats, float] | None:
    """The container split's held-out rows selected by ``sel`` that ran the same layout in a
    training release (``res["same_layout"]``: :func:`codesign.calibration.same_layout_groups`,
    exact number format): the model's errors on them, and the mean of ``|m / t - 1|`` with
    ``m`` the median step time of each row's layout over its releases, about the least error
    of a prediction that depends on the layout and not on the release.  None without such
    rows or without the record (results written before it)."""
    sp = split_of_kind(res, "container")
    groups = res.get("same_layout")
    if sp is None or not groups:
        return None
    index = {p["id"]: i for i, p in enumerate(res["points"])}
    gaps = layout_median_gaps(groups)
    errs, floor = [], []
    for members in groups:
        ids = [m[0] for m in members if m[0] in index]
        if not any(sp["train"][index[i]] for i in ids):
            continue
        for row_id in ids:
            i = index[row_id]
            p = res["points"][i]
            if sp["held"][i] and p["excluded"] is None and sel(p):
                errs.append(error_pct(sp["after_s"][i], p["measured_s"]))
                floor.append(100.0 * gaps[row_id])
    if not errs:
        return None
    return ErrorStats.of(errs), float(np.mean(floor))


def frontier_rows(res: dict) -> list[list[str]]:
    """Held-out MAPE of the fitted rows by model kind (random splits, mean over the seeds) and
    of the Megatron-Bridge rows held out by container version (fit without 25.11, predict
    25.11), against issue 11's targets; then the rows of the all-rows fit more than 25 % off."""
    pts = res["points"]
    out = []
    for name, kind, sel, target in _FRONTIER_GROUPS:
        means, worst = [], 0.0
        for sp in res["splits"]:
            if sp["kind"] != kind:
                continue
            errs = [
                abs(error_pct(sp["after_s"][i], p["measured_s"]))
                for i, p in enumerate(pts)
                if sp["held"][i] and p["excluded"] is None and sel(p)
            ]
            if errs:
                means.append(sum(errs) / len(errs))
                worst = max(worst, max(errs))
        if not means:
            continue
        mean = sum(means) / len(means)
        split = f"{len(means)} random" if kind == "random" else "25.09 -> 25.11"
        out.append(
            [
                name,
                split,
                f"{mean:.1f}",
                f"{worst:.1f}",
                "-" if target is None else f"<= {target:g}",
                "-" if target is None else _met(mean <= target),
            ]
        )
    for name, borrowed in _CONTAINER_PARTS:
        st = container_part(res, blackwell_bridge, borrowed)
        if st is not None:
            out.append(
                [name, "25.09 -> 25.11", f"{st.mape_pct:.1f}", f"{st.max_ape_pct:.1f}", "-", "-"]
            )
    allsp = split_of_kind(res, "all")
    if allsp is not None:
        fitted = [(i, p) for i, p in enumerate(pts) if p["excluded"] is None]
        over = [
            p["id"] for i, p in fitted if abs(error_pct(allsp["after_s"][i], p["measured_s"])) > 25
        ]
        out.append(
            [
                "fitted rows more than 25 % off (all-rows fit)",
                "all rows",
                f"{len(over)} of {len(fitted)}",
                ", ".join(over) or "-",
                "0",
                _met(not over),
            ]
        )
    return out


SETTING_HEAD = [
    "generation",
    "stack",
    "model",
    "rows",
    "held-out MAPE % (random splits)",
    "90th pct. %",
    "bias %",
    "next release MAPE % (rows)",
]


def setting_rows(res: dict) -> list[list[str]]:
    """One row per setting of :func:`~codesign.calibration._presets.held_out_by_setting`: the
    expected error ``codesign evaluate`` prints for a run of that setting."""
    rows = []
    for gen, stacks in held_out_by_setting(res).items():
        for stack, kinds in stacks.items():
            for kind, h in kinds.items():
                rel = (
                    f"{h['release_mape_pct']:.1f} ({h['release_rows']})"
                    if h.get("release_rows")
                    else "-"
                )
                rows.append(
                    [
                        gen,
                        stack,
                        kind,
                        str(h["rows"]),
                        f"{h['mape_pct']:.1f}",
                        f"{h['p90_pct']:.1f}",
                        f"{h['bias_pct']:+.1f}",
                        rel,
                    ]
                )
    return rows
