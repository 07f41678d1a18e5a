"""codesign: an analytical, differentiable model of LLM training steps on multi-tier clusters.

The public API re-exports the specs, :func:`evaluate`, the batched evaluator and the config
loader.  Submodules (``workload``, ``compute``, ``memory``, ``collectives``, ``pipeline``,
``cost``, ``step``, ``sweep``) are importable for finer use.
"""

from codesign import config, smoothing
from codesign.config import RunConfig, load_run, load_run_dict
from codesign.report import format_report, report_to_dict
from codesign.smoothing import EXACT, Smoothing
from codesign.specs import (
    Accelerator,
    Efficiency,
    Model,
    SpecError,
    Strategy,
    System,
    Tier,
    Training,
    make_strategy,
)
from codesign.step import BREAKDOWN_KEYS, MEMORY_KEYS, Report, evaluate, evaluate_unchecked
from codesign.sweep import SweepResult

__version__ = "0.1.0"

__all__ = [
    "Accelerator",
    "BREAKDOWN_KEYS",
    "MEMORY_KEYS",
    "SweepResult",
    "format_report",
    "report_to_dict",
    "EXACT",
    "Efficiency",
    "Model",
    "Report",
    "RunConfig",
    "Smoothing",
    "SpecError",
    "Strategy",
    "System",
    "Tier",
    "Training",
    "config",
    "evaluate",
    "evaluate_unchecked",
    "load_run",
    "load_run_dict",
    "make_strategy",
    "smoothing",
]
