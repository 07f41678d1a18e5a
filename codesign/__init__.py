"""codesign: an analytical, differentiable model of LLM training steps on multi-tier clusters.

The public API: the specs (:class:`Model`, :class:`Training`, :class:`System` of
:class:`Tier` s, :class:`Strategy`, :class:`Efficiency`), the step model (:func:`evaluate`,
its :class:`Report`), run files and presets (:func:`load_run`, :func:`efficiency_preset`),
and the subpackages :mod:`codesign.search` (sweep and co-design optimizer) and
:mod:`codesign.calibration` (validation against measured runs).  The model's modules
(``workload``, ``compute``, ``memory``, ``collectives``, ``pipeline``, ``cost``, ``step``,
``rules``, ``smoothing``) are importable for finer use.

Efficiency has one default everywhere: the calibrated preset of the accelerator, which
:func:`load_run` puts in ``cfg.efficiency`` (``codesign.Efficiency()`` holds the uncalibrated
round values the calibration starts from).

Example:
    >>> import codesign as cd
    >>> cfg = cd.load_run_dict({"model": {"preset": "llama3-8b"}, "training": {"global_batch": 512},
    ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
    ...     "strategy": {"tp": 2, "pp": 2, "dp": 16}})
    >>> r = cd.evaluate(*cfg.specs())
    >>> bool(r.fits), bool(r.step_time_s > 0)
    (True, True)
"""

import importlib
from typing import TYPE_CHECKING

from codesign._version import __version__

# Names are loaded on first use (PEP 562), so ``codesign --help`` answers without importing
# JAX; ``from codesign import evaluate`` and ``codesign.evaluate`` work as usual.
_EXPORTS = {
    "BREAKDOWN_KEYS": "codesign.step",
    "MEMORY_KEYS": "codesign.step",
    "Report": "codesign.step",
    "evaluate": "codesign.step",
    "evaluate_unchecked": "codesign.step",
    "EXACT": "codesign.smoothing",
    "Smoothing": "codesign.smoothing",
    "Accelerator": "codesign.specs",
    "Efficiency": "codesign.specs",
    "Model": "codesign.specs",
    "SpecError": "codesign.specs",
    "Strategy": "codesign.specs",
    "System": "codesign.specs",
    "Tier": "codesign.specs",
    "Training": "codesign.specs",
    "make_strategy": "codesign.specs",
    "RunConfig": "codesign.config",
    "efficiency_preset": "codesign.config",
    "load_run": "codesign.config",
    "load_run_dict": "codesign.config",
    "system_preset": "codesign.config",
    "format_report": "codesign.report",
    "report_to_dict": "codesign.report",
    "run_toml": "codesign.runfile",
}
_SUBMODULES = {
    "calibration",
    "collectives",
    "compute",
    "config",
    "cost",
    "memory",
    "pipeline",
    "report",
    "rules",
    "runfile",
    "search",
    "sensitivity",
    "smoothing",
    "specs",
    "step",
    "workload",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"codesign.{name}")
    else:
        raise AttributeError(f"module 'codesign' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)


if TYPE_CHECKING:
    from codesign import config, rules, smoothing
    from codesign.config import RunConfig, efficiency_preset, load_run, load_run_dict, system_preset
    from codesign.report import format_report, report_to_dict
    from codesign.runfile import run_toml
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

__all__ = [
    "BREAKDOWN_KEYS",
    "EXACT",
    "MEMORY_KEYS",
    "Accelerator",
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
    "__version__",
    "config",
    "efficiency_preset",
    "evaluate",
    "evaluate_unchecked",
    "format_report",
    "load_run",
    "load_run_dict",
    "make_strategy",
    "report_to_dict",
    "rules",
    "run_toml",
    "smoothing",
    "system_preset",
]
