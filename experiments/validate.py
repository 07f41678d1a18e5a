"""Validation, first cut: the step-time model against published training runs.

Reads ``codesign/data/measured_runs.json`` (a verbatim copy of the shared collection of 335
published runs: Narayanan et al. SC21, Korthikanti et al. 2022, MosaicML llm-foundry, NVIDIA DGX
Cloud benchmarking recipes), maps every row the model can express to a run document, loads it
with :func:`codesign.load_run_dict`, evaluates it with :func:`codesign.evaluate` and the default
:class:`codesign.Efficiency` (nothing is tuned here; calibration is a later issue) and compares the
predicted step time with the measured one.

Measured step time, in this order of preference:

1. ``measured.iteration_time_s`` (published step time);
2. ``global_batch * seq_len / measured.tokens_per_s_total``;
3. SC21 rows: the published TFLOP/s per GPU inverted through the paper's own eq. (3), which counts
   the recomputed forward pass: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / (tflops * 1e12 * n)``.

Rows that do not state the micro-batch size (``complete_except_microbatch``) are evaluated for every
micro-batch in ``1, 2, 4, 8`` that divides ``global_batch / dp``; the range of predictions is
reported (whether the measurement lies inside it, the smallest error over the range and the errors
at both ends).  No single value is invented for them, and they are kept out of the MAPE.

The row -> run mapping (:func:`row_to_config`, :func:`predict`, ...) lives in
:mod:`codesign.calibration._rows` (``codesign validate`` uses it to calibrate); this script re-exports it
and writes the first-cut report (defaults, nothing fitted).  Calibration: ``codesign validate`` or
``python experiments/calibrate.py``.

Usage::

    python experiments/validate.py                 # table + summary, writes the markdown report
    python experiments/validate.py --json          # machine-readable results on stdout
    python experiments/validate.py --source dgxc   # only rows whose id/source matches
    python experiments/validate.py --no-recipe-facts   # only the mapping of the issue (see below)

Assumptions are listed in :data:`ASSUMPTIONS` and printed with the report.  "Recipe facts" are
settings read from the training recipes/papers beyond the fields of the rows (NeMo recompute and
TP-overlap settings, gradient-reduction dtypes, MPT's tied embeddings, no FlashAttention in the
2021-22 Megatron runs); ``--no-recipe-facts`` turns them all off to show their effect.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

__all__ = [
    "DATA_PATH",
    "ASSUMPTIONS",
    "data_notes",
    "MICROBATCH_RANGE",
    "load_rows",
    "source_short",
    "measured_step_time",
    "row_to_doc",
    "row_to_config",
    "predict",
    "summarize",
    "Unexpressible",
    "ACCELERATORS",
    "CALCULON_KORTHIKANTI",
    "NEMO_RECIPES",
]

from codesign.calibration._firstcut import predict, summarize  # noqa: E402
from codesign.calibration._rows import (  # noqa: E402  (the mapping lives in the library)
    ACCELERATORS,
    ASSUMPTIONS,
    DATA_PATH,
    MICROBATCH_RANGE,
    NEMO_RECIPES,
    Unexpressible,
    data_notes,
    load_rows,
    measured_step_time,
    row_to_config,
    row_to_doc,
    source_short,
)
from codesign.calibration._stats import CALCULON_KORTHIKANTI  # noqa: E402
from codesign.calibration._tables import md_table as _md_table  # noqa: E402
from codesign.calibration._tables import text_table  # noqa: E402

DATA_NAME = "/".join(DATA_PATH.parts[-3:])
RESULTS_MD = HERE / "results" / "validation_first_cut.md"

# ------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------


def _fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def _row_cells(r: dict) -> list[str]:
    meas = _fmt(r.get("measured_s"), ".3f")
    if r["kind"] == "skipped":
        return [
            r["id"],
            r["source"],
            str(r["gpus"]),
            meas,
            "-",
            "-",
            "-",
            "not expressible: " + r["reason"],
        ]
    if r["kind"] == "point":
        return [
            r["id"],
            r["source"],
            str(r["gpus"]),
            meas,
            f"{r['predicted_s']:.3f}",
            f"{r['error_pct']:+.1f}",
            "yes" if r["fits"] else f"NO ({r['memory_gb']:.0f}/{r['hbm_gb']:.0f} GB)",
            r["notes"],
        ]
    fits = ",".join(f"{mb}:{'y' if e['fits'] else 'n'}" for mb, e in r["range"].items())
    inside = "inside" if r["measured_within"] else "outside"
    return [
        r["id"],
        r["source"],
        str(r["gpus"]),
        meas,
        f"{r['predicted_min_s']:.3f}-{r['predicted_max_s']:.3f}",
        f"min {r['min_abs_error_pct']:.1f} ({r['error_at_min_mb_pct']:+.1f}/{r['error_at_max_mb_pct']:+.1f})",
        fits,
        f"range, measured {inside}; {r['notes']}",
    ]


ROW_HEAD = ["id", "source", "gpus", "measured s", "predicted s", "error %", "fits", "notes"]
SUM_HEAD = [
    "source",
    "rows",
    "evaluated",
    "skipped",
    "MAPE %",
    "max APE %",
    "mean signed %",
    "over/evaluated",
    "not fit",
    "mb-range rows (measured inside)",
    "range best-case MAPE %",
]


def _sum_cells(name: str, s: dict) -> list[str]:
    return [
        name,
        str(s["rows"]),
        str(s["evaluated"]),
        str(s["skipped"]),
        _fmt(s["mape_pct"], ".1f"),
        _fmt(s["max_ape_pct"], ".1f"),
        _fmt(s["mean_signed_error_pct"], "+.1f"),
        f"{s['over_predicted']}/{s['evaluated']}",
        str(s["not_fit"]),
        f"{s['range_rows']} ({s['range_within']})" if s["range_rows"] else "-",
        _fmt(s["range_best_mape_pct"], ".1f"),
    ]


def _text_table(head, rows) -> str:
    return text_table(head, rows, last_width=200)


def _korthikanti(results: list[dict]) -> tuple[list[dict], dict]:
    ks = [r for r in results if r["id"].startswith("korthikanti_") and r["kind"] == "point"]
    e = [r["error_pct"] for r in ks]
    stats = {
        "rows": len(ks),
        "mape_pct": sum(abs(x) for x in e) / len(e) if e else None,
        "max_ape_pct": max(abs(x) for x in e) if e else None,
        "mean_signed_error_pct": sum(e) / len(e) if e else None,
    }
    return ks, stats


from codesign.step import BREAKDOWN_KEYS  # noqa: E402

SHARE_KEYS = tuple(k for k in BREAKDOWN_KEYS if k != "overhead")


def _share_rows(summary: dict) -> list[list[str]]:
    rows = []
    for name, s in summary.items():
        sh = s["mean_breakdown_share"]
        if sh:
            rows.append([name] + [f"{100 * sh.get(k, 0.0):.1f}" for k in SHARE_KEYS])
    return rows


def _korthikanti_rows(ks: list[dict]) -> list[list[str]]:
    out = []
    for r in ks:
        b = r["breakdown_s"]
        out.append(
            [
                r["id"].removeprefix("korthikanti_"),
                str(r["gpus"]),
                f"{r['measured_s']:.2f}",
                f"{r['predicted_s']:.2f}",
                f"{r['error_pct']:+.1f}",
                f"{100 * r['mfu']:.1f}",
                "yes" if r["fits"] else "NO",
                f"{b['forward'] + b['backward']:.2f}",
                f"{b['recompute']:.2f}",
                f"{b['tp_comm']:.2f}",
                f"{b['pp_bubble']:.2f}",
                f"{b['pp_p2p']:.2f}",
                f"{b['optimizer']:.2f}",
            ]
        )
    return out


K_HEAD = [
    "run",
    "gpus",
    "measured s",
    "predicted s",
    "error %",
    "pred. MFU %",
    "fits",
    "fwd+bwd s",
    "recompute s",
    "tp_comm s",
    "bubble s",
    "p2p s",
    "optimizer s",
]


def render_markdown(
    results,
    summary,
    recipe_facts: bool,
    elapsed: float,
    other: list | None = None,
    notes=(),
    data: str = DATA_NAME,
) -> str:
    """The markdown report; ``other`` are the results with recipe facts toggled (a sensitivity),
    ``notes`` the data notes (:func:`data_notes` of the rows), ``data`` the data file's name."""
    ks, kstats = _korthikanti(results)
    sens = []
    if other is not None:
        osum = summarize(other)
        _, ok = _korthikanti(other)
        sens = [
            f"## Sensitivity: recipe facts {'off' if recipe_facts else 'on'}",
            "",
            "The same rows with the recipe facts (see Assumptions) "
            f"{'turned off, i.e. only the field mapping of the issue' if recipe_facts else 'turned on'}. "
            f"Korthikanti Table 5: MAPE {_fmt(ok['mape_pct'], '.2f')} %, max APE {_fmt(ok['max_ape_pct'], '.2f')} %.",
            "",
            _md_table(SUM_HEAD, [_sum_cells(k, v) for k, v in osum.items()]),
            "",
        ]
    parts = [
        "# Validation, first cut (issue 2)",
        "",
        f"Generated by `experiments/validate.py` from `{data}` with the default "
        f"`codesign.Efficiency()` (nothing fitted). Recipe facts: {'on' if recipe_facts else 'off'}. "
        f"{len(results)} rows in {elapsed:.1f} s.",
        "",
        "Error = (predicted - measured) / measured. MAPE and max APE are over rows with one prediction; "
        "rows without a published micro-batch are evaluated over a range and kept apart.",
        "",
        "## Per-source summary",
        "",
        _md_table(SUM_HEAD, [_sum_cells(k, v) for k, v in summary.items()]),
        "",
        "## Korthikanti et al. 2022, Table 5 (headline)",
        "",
        f"{kstats['rows']} rows: MAPE {_fmt(kstats['mape_pct'], '.2f')} %, max APE {_fmt(kstats['max_ape_pct'], '.2f')} %, "
        f"mean signed error {_fmt(kstats['mean_signed_error_pct'], '+.2f')} % "
        f"(Calculon: MAPE {CALCULON_KORTHIKANTI['mape_pct']} %, max {CALCULON_KORTHIKANTI['max_ape_pct']} %).",
        "",
        _md_table(K_HEAD, _korthikanti_rows(ks)),
        "",
        "## Mean share of the predicted step time by term (evaluated rows)",
        "",
        _md_table(["source"] + [k + " %" for k in SHARE_KEYS], _share_rows(summary)),
        "",
        *sens,
        "## Data notes",
        "",
        *[f"- {a}" for a in notes],
        "",
        "## Assumptions",
        "",
        *[f"- {a}" for a in ASSUMPTIONS],
        "",
        "NeMo recipe files used for the DGXC rows:",
        "",
        *[f"- `{k}`: {v['source']}" for k, v in NEMO_RECIPES.items()],
        "",
        "## Per-row results",
        "",
        _md_table(ROW_HEAD, [_row_cells(r) for r in results]),
        "",
    ]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Validate the step-time model against published runs.")
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    ap.add_argument(
        "--source", help="only rows whose id or source name contains SUBSTR (case-insensitive)"
    )
    ap.add_argument("--no-recipe-facts", action="store_true", help="only the issue's field mapping")
    ap.add_argument("--data", default=None, help="measured runs JSON (default: the package's copy)")
    ap.add_argument(
        "--md",
        help=f"markdown report path (default {RESULTS_MD.relative_to(ROOT)} when no --source)",
    )
    ap.add_argument("--no-md", action="store_true", help="do not write the markdown report")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    rows = load_rows(args.data or DATA_PATH)
    notes = data_notes(rows)
    if args.source:
        sub = args.source.lower()
        rows = [
            r
            for r in rows
            if sub in r["id"].lower()
            or sub in source_short(r).lower()
            or sub in r["source"].get("paper", "").lower()
        ]
    recipe_facts = not args.no_recipe_facts
    t0 = time.perf_counter()
    results = [predict(r, recipe_facts=recipe_facts) for r in rows]
    elapsed = time.perf_counter() - t0
    summary = summarize(results)
    ks, kstats = _korthikanti(results)

    md_path = (
        None
        if args.no_md
        else (Path(args.md) if args.md else (None if args.source else RESULTS_MD))
    )
    if md_path is not None:
        other = [predict(r, recipe_facts=not recipe_facts) for r in rows]
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(
            render_markdown(
                results,
                summary,
                recipe_facts,
                elapsed,
                other,
                notes=notes,
                data=args.data or DATA_NAME,
            )
        )

    if args.json:
        json.dump(
            {
                "recipe_facts": recipe_facts,
                "summary": summary,
                "korthikanti_table5": kstats,
                "rows": results,
                "assumptions": ASSUMPTIONS,
            },
            sys.stdout,
            indent=1,
            default=str,
        )
        print()
        return 0
    print(_text_table(ROW_HEAD, [_row_cells(r) for r in results]))
    print()
    print("Per-source summary (error = (predicted - measured) / measured)")
    print(_text_table(SUM_HEAD, [_sum_cells(k, v) for k, v in summary.items()]))
    print()
    if ks:
        print(
            f"Korthikanti et al. 2022 Table 5: {kstats['rows']} rows, MAPE {kstats['mape_pct']:.2f} %, max APE "
            f"{kstats['max_ape_pct']:.2f} %, mean signed {kstats['mean_signed_error_pct']:+.2f} % "
            f"(Calculon: {CALCULON_KORTHIKANTI['mape_pct']} % / {CALCULON_KORTHIKANTI['max_ape_pct']} %)"
        )
        print(_text_table(K_HEAD, _korthikanti_rows(ks)))
        print()
    print("Mean share of predicted step time by term (%)")
    print(_text_table(["source"] + list(SHARE_KEYS), _share_rows(summary)))
    print()
    print("Assumptions:")
    for a in ASSUMPTIONS:
        print(f"- {a}")
    print(
        f"\n{len(results)} rows evaluated in {elapsed:.1f} s"
        + (f"; report written to {md_path}" if md_path else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
