"""Sensitivity analysis: elasticities, the envelope, shadow prices and what it would take.

Every answer is a derivative or an exact evaluation of the one step model:

* :func:`sensitivity` at a design point (a run configuration): the elasticity
  ``d ln f / d ln p`` of step time, time, cost and energy to train and memory to every
  hardware, economics and workload parameter (:func:`parameters_of`), by forward-mode
  automatic differentiation with the strategy fixed, checked against one-sided finite
  differences (kinks reported with both one-sided values); with ``reoptimize``, the
  envelope (the strategy re-optimized, :mod:`~codesign.sensitivity._reoptimize`); the
  bottleneck and what each parameter alone must become for a target reduction
  (:mod:`~codesign.sensitivity._takes`);
* :func:`shadow_prices` at a co-designed optimum: the value of relaxing each active
  constraint, from the multipliers of the continuous problem, confirmed by re-solving;
* figures (:mod:`~codesign.sensitivity._figures`, :mod:`~codesign.sensitivity._heatmap`).
"""

from codesign.sensitivity._analyze import (
    Sensitivity,
    default_objective,
    problem_knobs,
    problem_strategy_values,
    sensitivity,
    sensitivity_of_problem,
)
from codesign.sensitivity._elasticity import OBJECTIVES, Elasticity, Model, elasticities
from codesign.sensitivity._figures import Curve, Kink, one_at_a_time, plot_curves
from codesign.sensitivity._heatmap import (
    HeatMap,
    heatmap,
    plot_heatmap,
    strategy_boundaries,
    strategy_label,
)
from codesign.sensitivity._params import GROUPS, Parameter, apply_scales, parameters_of
from codesign.sensitivity._reoptimize import CHOICE_AXES, Envelope, envelope, strategy_grid
from codesign.sensitivity._shadow import (
    Knob,
    ShadowPrice,
    memory_knobs,
    shadow_prices,
    solve_continuous,
)
from codesign.sensitivity._takes import (
    TERM_GROUPS,
    Bottleneck,
    Requirement,
    bottleneck,
    what_it_would_take,
)
from codesign.sensitivity._tornado import plot_tornado, tornado_rows

__all__ = [
    "Curve",
    "HeatMap",
    "Kink",
    "heatmap",
    "one_at_a_time",
    "plot_curves",
    "plot_heatmap",
    "plot_tornado",
    "strategy_boundaries",
    "strategy_label",
    "tornado_rows",
    "CHOICE_AXES",
    "GROUPS",
    "OBJECTIVES",
    "TERM_GROUPS",
    "Bottleneck",
    "Elasticity",
    "Envelope",
    "Knob",
    "ShadowPrice",
    "Model",
    "Parameter",
    "Requirement",
    "Sensitivity",
    "apply_scales",
    "bottleneck",
    "elasticities",
    "envelope",
    "parameters_of",
    "sensitivity",
    "sensitivity_of_problem",
    "default_objective",
    "problem_knobs",
    "problem_strategy_values",
    "memory_knobs",
    "shadow_prices",
    "solve_continuous",
    "strategy_grid",
    "what_it_would_take",
]
