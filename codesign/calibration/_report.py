"""The validation report: the plain-text tables and the markdown report of a validation result.

:func:`format_text` is what ``codesign validate`` prints; :func:`render_markdown` is
``validation.md`` (targets, findings, every split, fitted values, Table 5, families, ZeRO-3
rows, micro-batch ranges, ablation, method, data notes and mapping assumptions).  Both only
format: the numbers come from the result through :mod:`codesign.calibration._stats` and
:mod:`codesign.calibration._findings`.
"""

from __future__ import annotations

from pathlib import Path

from codesign._version import __version__
from codesign.calibration._presets import DATE
from codesign.calibration._rows import ASSUMPTIONS, DATA_PATH, MICROBATCH_RANGE, NEMO_RECIPES
from codesign.calibration._stats import (
    CALCULON_KORTHIKANTI,
    TARGETS,
    family_stats,
    korthikanti_table,
    zero3_rows,
)
from codesign.calibration._tables import (
    ABLATION_HEAD,
    FAMILY_HEAD,
    FRONTIER_HEAD,
    K_HEAD,
    RANGE_HEAD,
    SETTING_HEAD,
    SPLIT_HEAD,
    SUMMARY_HEAD,
    ZERO3_HEAD,
    ablation_rows,
    family_rows,
    frontier_rows,
    korthikanti_rows,
    md_table,
    range_rows,
    setting_rows,
    split_rows,
    summary_rows,
    text_table,
    values_rows,
    zero3_table_rows,
)
from codesign.calibration._validate import data_fingerprint

__all__ = ["CALIBRATION_NOTES", "DATA_NAME", "format_text", "render_markdown"]

DATA_NAME = "/".join(DATA_PATH.parts[-3:])
"""How the report names the package's data file (``codesign/data/measured_runs.json``)."""

_KT = TARGETS["Korthikanti"]
_TARGET_TEXT = f"{_KT.mape_pct:g} % / {_KT.max_ape_pct:g} %"
_CALCULON_TEXT = f"{CALCULON_KORTHIKANTI['mape_pct']} % / {CALCULON_KORTHIKANTI['max_ape_pct']} %"

CALIBRATION_NOTES = [
    "Objective: weighted mean squared log error of the step time, each source weighted equally "
    "(every training row of a source gets weight 1/n_source), plus a weak pull (weight `prior`) "
    "of the unconstrained parameters towards their start.",
    "Reparametrization: fractions as sigmoid(u) in (0, 1), positive values as exp(u); no clipping.",
    "Optimizer: Adam with a cosine-decayed learning rate and global-norm gradient clipping inside one "
    "jax.lax.scan under jax.jit (float64); one compiled program serves every split (held-out rows "
    "have weight 0).  Deterministic: the same data and settings give the same values.",
    "Grouping: gemm_max per accelerator generation, GEMM precision (FP8 GEMMs relative to the FP8 "
    "peak get their own value) and software stack; attention_eff per generation, attention kernel "
    "(fused/flash vs the unfused s x s attention of Megatron 2021-22, whose causal mask saves no "
    "FLOPs) and stack; hbm_eff per generation and stack; dp_overlap_slowdown (the "
    "fraction of hidden data-parallel traffic's time that the compute it overlaps loses) and "
    "p2p_overlap_eff per stack; grouped_gemm_eff (the grouped expert GEMMs' efficiency relative to the dense "
    "GEMMs') and grouped_gemm_half_tokens (the tokens per expert at which they reach half of it: "
    "both the framework's grouped-GEMM kernel) per stack; gemm_half_dim, dp_overlap_eff, "
    "tp_overlap_eff, backward_factor and the other MoE values "
    "(moe_permute_factor, ep_overlap_eff, and the flex "
    "dispatcher's ratios to the alltoall dispatcher's moe_permute_factor and ep_overlap_eff, "
    "moe_permute_flex_ratio and ep_overlap_flex_ratio) shared; moe_imbalance (the busiest expert "
    "rank's load over the mean, dropless) not fitted: 1 (the Megatron-Bridge benchmarks force "
    "balanced routing; fitted, it reads the token-drop and dropless recipes' other differences as "
    "imbalance: the ablation below); recompute_factor (the time of a full "
    "recomputation relative to the forward pass) not fitted: 1, one forward pass (the ablation "
    "below: fitting it raises the held-out error); dp_comm_eff (the data-parallel collectives' "
    "share of a tier's bandwidth) not fitted: 1 (the ablation below: fitted per stack it raises "
    "the held-out error); tier_efficiency per fabric kind "
    "(scale-up NVLink, scale-out InfiniBand/RoCE).  Stacks: megatron-2021 (SC21), megatron "
    "(Korthikanti, 2022), nemo (DGXC), composer (MosaicML); the presets' top level is NeMo for H100 "
    "and Megatron (2022) for A100, `[efficiency] stack = ...` selects another.",
    "A held-out label takes the value of the nearest fitted label: first the same generation with "
    "the nearest stack (the other Megatron-LM release, then nemo <-> megatron, then composer), then "
    "the nearest generation "
    "(h100-fp8 -> h100 -> a100, a100 -> h100, unfused attention -> the other generation's unfused "
    "value -> the same generation's fused value).",
    "Rows with an unknown micro-batch (SC21 Table 1) are never fitted: they are evaluated over "
    f"micro-batches {{{', '.join(str(mb) for mb in MICROBATCH_RANGE)}}} before and after "
    "calibration (the presets).",
    "Memory: no row of the data set publishes memory, so the memory target cannot be checked here.",
]


def _data_name(data) -> str:
    if data is None:
        return DATA_NAME
    try:
        if Path(data).resolve() == DATA_PATH.resolve():
            return DATA_NAME
    except OSError:
        pass
    return str(data)


def format_text(res: dict) -> str:
    """The per-source tables (before/after, training/held-out) as plain text."""
    other = TARGETS["other"]
    parts = [
        "Calibrated parameters: " + ", ".join(f"{p} [{res['grouping'][p]}]" for p in res["params"]),
        f"Weighting: {res['weighting']}; Adam {res['steps']} steps (cosine from "
        f"{res['learning_rate']:g}); prior {res['prior']:g}",
        "Error = (predicted - measured) / measured; MAPE = mean |error|; before = "
        "codesign.Efficiency() defaults.",
        "",
        f"Held-out summary (after calibration; targets: Korthikanti MAPE <= {_KT.mape_pct:g} %, "
        f"max <= {_KT.max_ape_pct:g} %; others MAPE <= {other.mape_pct:g} %)",
        text_table(SUMMARY_HEAD, summary_rows(res)),
        "",
    ]
    for sp in res["splits"]:
        parts += [
            f"Split: {sp['name']}  (training MSLE {sp['msle']:.5f})",
            text_table(SPLIT_HEAD, split_rows(sp)),
            "",
        ]
    kt = korthikanti_table(res)
    if kt.rows:
        s = kt.stats.get("source")
        parts += [
            "Korthikanti et al. 2022 Table 5"
            + (
                f": held out by source MAPE {s.mape_pct:.2f} %, max {s.max_ape_pct:.2f} %"
                if s
                else ""
            )
            + f" (target {_TARGET_TEXT}; Calculon {_CALCULON_TEXT})",
            text_table(K_HEAD, korthikanti_rows(kt)),
            "",
        ]
    if res["ranges"]:
        parts += [
            "Rows with unknown micro-batch (evaluated over the range, not fitted)",
            text_table(RANGE_HEAD, range_rows(res)),
            "",
        ]
    return "\n".join(parts)


def render_markdown(
    res: dict,
    ablation: dict | None = None,
    findings: list[str] | None = None,
    plot: str | None = None,
    ablation_stored: bool = False,
    *,
    data_notes=(),
    data=None,
) -> str:
    """The markdown report (``validation.md``) of a validation result.

    ``findings``: the sentences of :func:`~codesign.calibration._findings.findings`;
    ``plot``: the parity plot's file name, relative to the report; ``ablation``: the
    candidates' results (``ablation_stored``: read from an earlier run's ``ablation.json``);
    ``data_notes``: :func:`~codesign.calibration._rows.data_notes` of the rows; ``data``: the
    data file (None or :data:`~codesign.calibration._rows.DATA_PATH`: named
    :data:`DATA_NAME`).
    """
    kt = korthikanti_table(res)
    data = _data_name(data)
    n_points = len(res["points"])
    parts = [
        "# Validation and calibration against measured training runs (issue 3)",
        "",
        f"Generated by `codesign validate` / `experiments/calibrate.py` (codesign {__version__}) from "
        f"`{data}`: {n_points} rows with one prediction, "
        f"{len(res['ranges'])} rows with an unknown micro-batch (evaluated over a range), "
        f"{len(res['skipped'])} not expressible.  Date of the presets: {DATE}.",
        "",
        "Error = (predicted - measured) / measured; MAPE = mean absolute percentage error; max = maximum "
        "absolute percentage error.  *Before* = `codesign.Efficiency()` defaults (the first cut); "
        "*after* = the calibration of that split.  Held-out rows were not used by the fit that predicts them.",
        "",
        "Calibrated parameters: "
        + ", ".join(f"`{p}` ({res['grouping'][p]})" for p in res["params"])
        + f"; Adam {res['steps']} steps, learning rate {res['learning_rate']:g} (cosine), prior {res['prior']:g}, "
        f"weighting: {res['weighting']}; {res.get('random_splits', 1)} random splits (seeds {res['seed']} to "
        f"{res['seed'] + res.get('random_splits', 1) - 1}; the random-split figures are means over them).",
        "",
    ]
    if plot:
        parts += [f"![parity plot]({plot})", ""]
    parts += [
        "## Held-out errors against the targets",
        "",
        md_table(SUMMARY_HEAD, summary_rows(res)),
        "",
    ]
    frontier = frontier_rows(res)
    if frontier:
        parts += [
            "Issue 11's targets: fitted rows by model kind (random splits) and the "
            "Megatron-Bridge rows held out by container version (fit without 25.11, predict "
            "25.11); rows kept out of every fit (ZeRO-3, contradicted) are not counted here.",
            "",
            md_table(FRONTIER_HEAD, frontier),
            "",
        ]
    settings = setting_rows(res)
    if settings:
        parts += [
            "## Expected error by setting (what `codesign evaluate` prints)",
            "",
            "The held-out errors of the random splits per setting a prediction is made in "
            "(generation, software stack, dense or MoE model; a bias above zero: predictions "
            "too slow), and where the data hold two releases of the stack the error of the fit "
            "without the later one on its rows.  Each calibrated preset stores its generation's "
            "(`calibrated_held_out_error`); `codesign evaluate` prints the run's setting's as "
            "its expected error.",
            "",
            md_table(SETTING_HEAD, settings),
            "",
        ]
    if kt.stats.get("source"):
        s, b, a = kt.stats["source"], kt.stats["before"], kt.stats["all"]
        parts += [
            f"**Korthikanti et al. 2022 Table 5, held out by source: MAPE {s.mape_pct:.2f} %, max "
            f"{s.max_ape_pct:.2f} %** (target {_TARGET_TEXT}; Calculon {_CALCULON_TEXT}; before "
            f"calibration {b.mape_pct:.2f} % / {b.max_ape_pct:.2f} %; with Korthikanti in the fit "
            f"(all rows) {a.mape_pct:.2f} % / {a.max_ape_pct:.2f} %).",
            "",
        ]
    if findings:
        parts += [
            "## What remains short of the targets, and why",
            "",
            *[f"- {x}" for x in findings],
            "",
        ]
    parts += ["## Per split: every source, training and held-out rows", ""]
    for sp in res["splits"]:
        parts += [
            f"### {sp['name']}",
            "",
            f"Training MSLE {sp['msle']:.5f} (objective "
            f"{sp['loss_first'] or float('nan'):.4f} -> {sp['loss']:.5f}).",
            "",
            md_table(SPLIT_HEAD, split_rows(sp)),
            "",
        ]
    parts += [
        "## Fitted values per split",
        "",
        "The last column is what `codesign/hardware/efficiency.toml` stores.",
        "",
        md_table(
            ["parameter", "label", "start"] + [sp["name"] for sp in res["splits"]],
            values_rows(res),
        ),
        "",
    ]
    if kt.rows:
        parts += [
            "## Korthikanti et al. 2022, Table 5",
            "",
            md_table(K_HEAD, korthikanti_rows(kt)),
            "",
        ]
    parts += [
        "## Remaining error by model family (presets, i.e. all rows fitted)",
        "",
        md_table(FAMILY_HEAD, family_rows(family_stats(res))),
        "",
        "## SC21 Table 2 ZeRO-3 rows (kept out of every fit)",
        "",
        md_table(ZERO3_HEAD, zero3_table_rows(zero3_rows(res))),
        "",
    ]
    if res["ranges"]:
        parts += [
            "## SC21 Table 1: micro-batch not published (evaluated over a range, never fitted)",
            "",
            md_table(RANGE_HEAD, range_rows(res)),
            "",
        ]
    if ablation:
        parts += [
            "## Choice of the parameter set (ablation)",
            "",
            "Each candidate set is fitted on every split exactly as above.  The set is chosen on the "
            "random split's held-out error (in-distribution cross-validation) and on being "
            "interpretable: a set with more values replaces a simpler one only when most of the "
            "ten seeds agree (a lower mean that only 6 of them share is inside their spread); the "
            "source- and generation-held-out columns are shown for information "
            "(they were seen when comparing sets, so they are not blind test figures)."
            + _stored_ablation_note(res, ablation, ablation_stored),
            "",
            md_table(ABLATION_HEAD, ablation_rows(ablation)),
            "",
        ]
    parts += [
        "## Calibration method",
        "",
        *[f"- {x}" for x in CALIBRATION_NOTES],
        "",
        "## Rows not expressible",
        "",
        md_table(
            ["run", "source", "reason"],
            [[s["id"], s["source"], s["reason"]] for s in res["skipped"]],
        )
        if res["skipped"]
        else "None.",
        "",
        "## Data notes",
        "",
        *[f"- {a}" for a in data_notes],
        "",
        "## Mapping assumptions (row -> run)",
        "",
        *[f"- {a}" for a in ASSUMPTIONS[1:]],
        "",
        "NeMo recipe files used for the DGXC rows:",
        "",
        *[f"- `{k}`: {v['source']}" for k, v in NEMO_RECIPES.items()],
        "",
    ]
    return "\n".join(parts)


def _stored_ablation_note(res: dict, ablation: dict, stored: bool) -> str:
    """Where a reused ``ablation.json`` came from: the same data as this report (its data
    fingerprint matches) or other data (then the table is flagged as stale)."""
    if not stored:
        return ""
    now = data_fingerprint(res)
    then = {c.get("data") for c in ablation.values() if isinstance(c, dict)}
    if then == {now}:
        return (
            f"  (Read from `ablation.json` of earlier `--ablation` runs on the same data: {now}.)"
        )
    was = ", ".join(sorted(str(t) for t in then if t)) or "not recorded"
    return (
        "  **Stale:** read from `ablation.json` of earlier `--ablation` runs on other data "
        f"(then: {was}; now: {now}); rerun `codesign validate --ablation` to refresh it."
    )
