"""Calibration: published measured runs mapped onto the model, efficiency fits, reports.

Layers, one way: :mod:`~codesign.calibration._rows` maps each measured row to a run (and
:mod:`~codesign.calibration._firstcut` evaluates it uncalibrated);
:mod:`~codesign.calibration._grouping` says which rows share a fitted value and
:mod:`~codesign.calibration._dataset` builds the data set and its splits;
:mod:`~codesign.calibration._fit` is the Optax fit and :mod:`~codesign.calibration._validate`
runs it on every split.  From the result, :mod:`~codesign.calibration._stats` computes typed
statistics, which :mod:`~codesign.calibration._tables`, :mod:`~codesign.calibration._findings`
and :mod:`~codesign.calibration._report` format; :mod:`~codesign.calibration._presets` writes
the calibrated presets and :mod:`~codesign.calibration._plot` draws the parity plot.  Nothing
here prints or writes files: ``codesign validate`` (:mod:`codesign.cli.validate`) does.

Example:
    >>> from codesign.calibration import load_rows, row_to_config
    >>> row = next(r for r in load_rows() if r["id"] == "korthikanti_175B_full_recompute")
    >>> cfg, notes = row_to_config(row)
    >>> int(cfg.strategy.pp), cfg.names["stack"]
    (8, 'megatron')
"""

from codesign.calibration._dataset import (
    build_dataset,
    contradictions,
    layout_median_gaps,
    same_layout_groups,
    same_layout_systems,
)
from codesign.calibration._findings import Findings, compute_findings, findings
from codesign.calibration._fit import Calibration, calibrate, predict_step_times
from codesign.calibration._plot import parity_figure
from codesign.calibration._presets import efficiency_toml
from codesign.calibration._report import format_text, render_markdown
from codesign.calibration._rows import (
    DATA_PATH,
    Unexpressible,
    data_notes,
    load_all_rows,
    load_rows,
    row_to_config,
    row_to_doc,
)
from codesign.calibration._validate import ablation_summary, run_ablation, run_validation

__all__ = [
    "DATA_PATH",
    "Calibration",
    "Findings",
    "Unexpressible",
    "ablation_summary",
    "build_dataset",
    "calibrate",
    "contradictions",
    "compute_findings",
    "data_notes",
    "efficiency_toml",
    "findings",
    "format_text",
    "layout_median_gaps",
    "load_all_rows",
    "load_rows",
    "parity_figure",
    "predict_step_times",
    "render_markdown",
    "row_to_config",
    "row_to_doc",
    "run_ablation",
    "run_validation",
    "same_layout_groups",
    "same_layout_systems",
]
