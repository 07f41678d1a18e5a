"""The first cut: every measured row evaluated with the uncalibrated efficiencies, nothing fitted.

:func:`predict` evaluates one row with the ``codesign.Efficiency()`` defaults the mapping
(:mod:`codesign.calibration._rows`) puts in its document; rows that do not state their
micro-batch are evaluated over :data:`~codesign.calibration._rows.MICROBATCH_RANGE` and
reported as a range.  :func:`summarize` gives the per-source statistics.
"""

from __future__ import annotations

from codesign.calibration._rows import (
    MICROBATCH_RANGE,
    measured_step_time,
    row_to_config,
    source_short,
)
from codesign.step import evaluate

__all__ = ["predict", "summarize"]


def _evaluate(cfg) -> dict:
    r = evaluate(*cfg.specs())
    step = float(r.step_time_s)
    return {
        "predicted_s": step,
        "breakdown_s": {k: float(v) for k, v in r.breakdown_s.items()},
        "memory_gb": float(r.memory_gb["total"]),
        "hbm_gb": float(cfg.system.accelerator.hbm_gb),
        "fits": bool(r.fits),
        "mfu": float(r.mfu),
        "hfu": float(r.hfu),
    }


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def predict(row: dict, recipe_facts: bool = True) -> dict:
    """Evaluate one row.  Returns a JSON-ready dict.

    ``kind`` is ``point`` (one prediction, ``error_pct`` = 100 (pred - meas) / meas), ``range``
    (micro-batch unknown: ``range`` holds one entry per plausible micro-batch) or ``skipped``
    (``reason`` says why).
    """
    out = {
        "id": row["id"],
        "source": source_short(row),
        "gpus": int(row["hardware"]["num_gpus"]),
        "verification": row.get("verification", ""),
    }
    par = row["parallel"]
    meas, how = measured_step_time(row)
    out["measured_s"], out["measured_from"] = meas, how
    if not par.get("global_batch"):
        return {**out, "kind": "skipped", "reason": "parallel.global_batch not published"}
    if meas is None:
        return {**out, "kind": "skipped", "reason": how}
    unknown_mb = par.get("microbatch") is None
    if not unknown_mb:
        cfg, note = row_to_config(row, recipe_facts=recipe_facts)
        if cfg is None:
            return {**out, "kind": "skipped", "reason": note}
        res = _evaluate(cfg)
        return {
            **out,
            "kind": "point",
            "notes": note,
            **res,
            "error_pct": _err(res["predicted_s"], meas),
        }
    # Micro-batch unknown: the plausible range.
    dp = int(par["dp"])
    gb = int(par["global_batch"])
    entries, reasons, note = {}, [], ""
    for mb in MICROBATCH_RANGE:
        if gb % (dp * mb):
            continue
        cfg, msg = row_to_config(row, microbatch=mb, recipe_facts=recipe_facts)
        if cfg is None:
            reasons.append(f"mb={mb}: {msg}")
            continue
        note = msg
        res = _evaluate(cfg)
        entries[mb] = {**res, "error_pct": _err(res["predicted_s"], meas)}
    if not entries:
        return {
            **out,
            "kind": "skipped",
            "reason": "no valid micro-batch in range: " + "; ".join(reasons),
        }
    preds = [e["predicted_s"] for e in entries.values()]
    errs = [e["error_pct"] for e in entries.values()]
    mbs = sorted(entries)
    lo, hi = min(preds), max(preds)
    return {
        **out,
        "kind": "range",
        "notes": "; ".join(x for x in (f"mb unknown: {mbs}", note) if x),
        "range": {str(k): v for k, v in entries.items()},
        "predicted_min_s": lo,
        "predicted_max_s": hi,
        "measured_within": lo <= meas <= hi,
        "min_abs_error_pct": min(abs(e) for e in errs),
        "error_at_min_mb_pct": entries[mbs[0]]["error_pct"],
        "error_at_max_mb_pct": entries[mbs[-1]]["error_pct"],
        "fits_any": any(e["fits"] for e in entries.values()),
    }


def summarize(results: list[dict]) -> dict:
    """Per-source statistics of point rows (MAPE, max APE, bias) and range rows."""
    by: dict[str, dict] = {}
    for r in results:
        s = by.setdefault(
            r["source"],
            {
                "rows": 0,
                "skipped": 0,
                "point": 0,
                "errors": [],
                "not_fit": 0,
                "range": 0,
                "range_within": 0,
                "range_min_abs": [],
                "shares": {},
            },
        )
        s["rows"] += 1
        if r["kind"] == "skipped":
            s["skipped"] += 1
        elif r["kind"] == "point":
            s["point"] += 1
            s["errors"].append(r["error_pct"])
            s["not_fit"] += 0 if r["fits"] else 1
            for k, v in r["breakdown_s"].items():
                s["shares"].setdefault(k, []).append(v / r["predicted_s"])
        else:
            s["range"] += 1
            s["range_within"] += int(r["measured_within"])
            s["range_min_abs"].append(r["min_abs_error_pct"])
    out = {}
    for name, s in by.items():
        e = s["errors"]
        out[name] = {
            "rows": s["rows"],
            "skipped": s["skipped"],
            "evaluated": s["point"],
            "mape_pct": sum(abs(x) for x in e) / len(e) if e else None,
            "max_ape_pct": max(abs(x) for x in e) if e else None,
            "mean_signed_error_pct": sum(e) / len(e) if e else None,
            "over_predicted": sum(1 for x in e if x > 0),
            "not_fit": s["not_fit"],
            "range_rows": s["range"],
            "range_within": s["range_within"],
            "range_best_mape_pct": (sum(s["range_min_abs"]) / len(s["range_min_abs"]))
            if s["range_min_abs"]
            else None,
            "mean_breakdown_share": {k: sum(v) / len(v) for k, v in s["shares"].items()},
        }
    return out
