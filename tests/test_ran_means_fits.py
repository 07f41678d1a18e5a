"""Ran means fits: every published run fits in the model's memory under its published settings.

Over the three data files (the shared collection of published runs and the Megatron-Bridge
runs).  Where a source leaves recomputation unstated, the row mapping assumes the lightest
recomputation under which the run fits and says so in the row's notes
(``codesign.calibration._rows.RAN_MEANS_FITS``); rows that state their settings are evaluated
exactly as published.  The few rows the memory model still over-estimates are listed with
their overshoot, so that a new one fails this test.
"""

from __future__ import annotations

import warnings

import codesign as cd
from codesign.calibration._rows import MICROBATCH_RANGE, load_all_rows, row_to_config

KNOWN_OVERSHOOT = {
    # SC21 Table 2's ZeRO-3 comparison runs (excluded from the fit: the paper's own ZeRO-3
    # baseline, whose memory settings it does not give).
    "sc21_t2_zero3_529.6B_640gpu": 1.15,
}
"""Rows still reported as not fitting, with an upper bound of memory / HBM."""


def _memory_ratio(row) -> float | None:
    mbs = [None] if row["parallel"].get("microbatch") is not None else MICROBATCH_RANGE
    best = None
    for mb in mbs:
        cfg, _ = row_to_config(row, microbatch=mb)
        if cfg is None:
            continue
        r = cd.evaluate(*cfg.specs())
        ratio = float(r.memory_gb["total"]) / float(cfg.system.accelerator.hbm_gb)
        best = ratio if best is None else min(best, ratio)
    return best


def test_published_runs_fit_in_memory():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ratios = {row["id"]: _memory_ratio(row) for row in load_all_rows()}
    evaluated = {k: v for k, v in ratios.items() if v is not None}
    assert len(evaluated) >= 390
    over = {k: v for k, v in evaluated.items() if v > 1.0}
    assert set(over) <= set(KNOWN_OVERSHOOT), sorted(set(over) - set(KNOWN_OVERSHOOT))
    for k, v in over.items():
        assert v <= KNOWN_OVERSHOOT[k], (k, v)
