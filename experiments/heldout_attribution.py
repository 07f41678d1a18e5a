"""Which fitted value carries each held-out error: a one-at-a-time attribution (issue 11).

``codesign validate`` fits the efficiency parameters on each split and predicts the held-out
rows with the split's values (``experiments/results/validation.json``).  A held-out error has
two parts: what the model gets wrong even with every row fitted (the all-rows fit's error on
the same row, the *in-sample floor*) and what the split's values get wrong because the row was
not in its fit (the *generalization gap*).  This script measures both on every held-out row
of the stored splits, then substitutes the all-rows value of one parameter at a time into the
split's values and records how much of the row's error goes: the parameter whose substitution
removes the most is the one that row *pins* (a value that few other training rows constrain).

Nothing is refitted: the script reads the stored values and re-predicts the rows
(:func:`codesign.calibration._fit.predict_step_times`).  The attribution is one at a time, so
the parts need not add up to the gap (parameters trade off against each other).

Usage::

    python experiments/heldout_attribution.py     # writes results/heldout_attribution.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from codesign.calibration._dataset import build_dataset  # noqa: E402
from codesign.calibration._fit import predict_step_times  # noqa: E402
from codesign.calibration._grouping import groups_for, resolved_groups  # noqa: E402
from codesign.calibration._presets import DATE  # noqa: E402
from codesign.calibration._rows import load_all_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
BLACKWELL = ("B200", "GB200", "GB300")


def _label_text(label) -> str:
    return "/".join(map(str, label)) if isinstance(label, tuple) else str(label)


def attribute(res: dict, points: list[dict], split: dict, rows) -> list[dict]:
    """Per row of ``rows`` (indices held out by ``split``): the error with the split's values,
    with the all-rows values, and the error each parameter's all-rows value removes."""
    params = res["params"]
    allv = next(s for s in res["splits"] if s["kind"] == "all")["values"]
    groups = groups_for(points, params, res["grouping"])
    ix = list(rows)
    sub = [points[i]["config"] for i in ix]
    g = {k: [v[i] for i in ix] for k, v in groups.items()}
    meas = np.array([points[i]["measured_s"] for i in ix])

    def err(values):
        t = predict_step_times(sub, values, resolved_groups(g, values))
        return 100.0 * (np.asarray(t) / meas - 1.0)

    e_split, e_all = err(split["values"]), err(allv)
    gains = {}
    for p in params:
        v = dict(split["values"])
        v[p] = allv[p]
        gains[p] = np.abs(e_split) - np.abs(err(v))
    used = resolved_groups(g, split["values"])
    out = []
    for j, i in enumerate(ix):
        best = max(params, key=lambda p: gains[p][j])
        own = g[best][j] if best in g else "all"  # shared values are stored as {"all": v}
        lab = used[best][j] if best in used else "all"
        lab = own if lab is None else lab  # None: no fitted label in the chain, own value
        vals = (
            ""
            if isinstance(own, tuple)  # tier efficiencies: one label per tier
            else f"{split['values'][best].get(lab, np.nan):.3g} -> {allv[best].get(own, np.nan):.3g}"
        )
        out.append(
            {
                "id": points[i]["id"],
                "source": points[i]["source"],
                "seed": split.get("seed"),
                "err_split": float(e_split[j]),
                "err_all": float(e_all[j]),
                "gains": {p: float(gains[p][j]) for p in params},
                "pin": best,
                "pin_label": _label_text(own) + ("" if lab == own else f" (borrowed {lab})"),
                "pin_values": vals,
            }
        )
    return out


def run(res: dict) -> dict:
    """Every held-out fitted row of the random splits and of the container split."""
    points = build_dataset(load_all_rows())["points"]
    if [p["id"] for p in points] != [p["id"] for p in res["points"]]:
        raise SystemExit("validation.json does not match the data set: rerun `codesign validate`")
    fitted = np.array([p["excluded"] is None for p in points])
    recs = {"random": [], "container": []}
    for sp in res["splits"]:
        if sp["kind"] not in recs:
            continue
        held = np.array(sp["held"]) & fitted
        if sp["kind"] == "container":
            held &= np.array([p["source"] == "Bridge" for p in points])
        recs[sp["kind"]] += attribute(res, points, sp, np.where(held)[0])
    return recs


def summarize(recs: list[dict]) -> dict:
    """MAPE with the split's and the all-rows values, and the mean error each parameter
    removes, over the records."""
    n = len(recs)
    gains = defaultdict(float)
    for r in recs:
        for p, x in r["gains"].items():
            gains[p] += x / n
    return {
        "rows": n,
        "mape_split": float(np.mean([abs(r["err_split"]) for r in recs])),
        "mape_all": float(np.mean([abs(r["err_all"]) for r in recs])),
        "gains": dict(sorted(gains.items(), key=lambda kv: -kv[1])),
    }


def _top(gains: dict, k: int = 4) -> str:
    return ", ".join(f"{p} {x:.2f}" for p, x in list(gains.items())[:k] if x > 0.005) or "-"


def markdown(recs: dict, seconds: float, validation_date: str) -> str:
    rnd, cont = recs["random"], recs["container"]
    sources = list(dict.fromkeys(r["source"] for r in rnd))
    groups = [(f"{s}, 10 random splits", [r for r in rnd if r["source"] == s]) for s in sources]
    groups.append(("every source, 10 random splits", rnd))
    bw = [r for r in cont if any(f"DGX-{g}_" in r["id"] for g in BLACKWELL)]
    groups.append(("Megatron-Bridge Blackwell, 25.09 -> 25.11", bw))
    groups.append(("Megatron-Bridge all, 25.09 -> 25.11", cont))
    lines = [
        "# Held-out error: in-sample floor, generalization gap, and the values that carry it",
        "",
        f"Generated by `python experiments/heldout_attribution.py` ({seconds:.0f} s on this "
        f"machine) from `experiments/results/validation.json` (presets of {validation_date}); "
        "nothing is refitted.",
        "",
        "For every held-out row of a split: its error with the split's fitted values (what the "
        "validation reports), its error with the all-rows values (the *in-sample floor*: what "
        "the model gets wrong even when the row is fitted), and, for each calibrated parameter, "
        "how much of the row's absolute error goes when that one parameter takes its all-rows "
        "value (one at a time, so the parts need not add up to the gap).  MAPE in %, the "
        "parts in percentage points of MAPE.",
        "",
        "| rows held out | count | held-out MAPE | in-sample floor | gap | the parameters that "
        "carry the gap (points of MAPE) |",
        "|---|---|---|---|---|---|",
    ]
    for name, rs in groups:
        if not rs:
            continue
        s = summarize(rs)
        lines.append(
            f"| {name} | {s['rows']} | {s['mape_split']:.2f} | {s['mape_all']:.2f} | "
            f"{s['mape_split'] - s['mape_all']:.2f} | {_top(s['gains'])} |"
        )
    for name, rs in (
        ("Megatron-Bridge, random splits", [r for r in rnd if r["source"] == "Bridge"]),
        ("Megatron-Bridge Blackwell, 25.09 -> 25.11", bw),
    ):
        lines += [
            "",
            f"## {name}: the largest held-out errors",
            "",
            "| row | split | held-out error % | in-sample % | the value it pins | its label | "
            "split -> all-rows value | error removed (points) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(rs, key=lambda r: -abs(r["err_split"]))[:15]:
            seed = "container" if r["seed"] is None else f"seed {r['seed']}"
            lines.append(
                f"| {r['id']} | {seed} | {r['err_split']:+.1f} | {r['err_all']:+.1f} | "
                f"{r['pin']} | {r['pin_label']} | {r['pin_values']} | {r['gains'][r['pin']]:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--validation", default=str(RESULTS / "validation.json"))
    ap.add_argument("--out", default=str(RESULTS), help="results directory")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = json.loads(Path(args.validation).read_text())
    recs = run(res)
    md = markdown(recs, time.perf_counter() - t0, DATE)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "heldout_attribution.md").write_text(md)
    print("\n".join(md.splitlines()[8:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
