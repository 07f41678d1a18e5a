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


def test_hbm_capacity_is_in_binary_gigabytes():
    """NVIDIA's DGX Cloud Llama 3.1 8B BF16 recipe runs at the same per-GPU speed on 8 H100s
    (12.78 s) as on 16 (12.99 s), so it recomputes nothing extra on 8; its model footprint
    without recomputation lies between 80e9 bytes and the 80 x 2^30 = 85.9e9 of an "80 GB"
    H100 (``nvidia-smi``: 81,559 MiB).  Read in binary GB it fits as published; read in decimal
    GB it would not, and the mapping would assume a recomputation the run never paid."""
    assert cd.memory.GB == 2.0**30
    row = next(r for r in load_all_rows() if r["id"] == "dgxc_llama31_8b_h100_BF16_8_v25.02")
    cfg, notes = row_to_config(row)
    assert "ASSUMED recompute" not in notes, notes
    r = cd.evaluate(*cfg.specs())
    footprint_bytes = float(r.memory_gb["total"]) * cd.memory.GB
    assert 80e9 < footprint_bytes <= 80 * cd.memory.GB
    assert bool(r.fits)
