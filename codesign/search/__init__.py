"""Search: the exhaustive sweep and the gradient co-design optimizer, over problem files.

Layers, one way: :mod:`~codesign.search.problem` (problem files as pure data) and
:mod:`~codesign.search.grid` (leaf paths, axis tables, objectives) are read by the one exact
evaluator (:mod:`~codesign.search.evaluator`), which :mod:`~codesign.search.sweep` and the
optimizer (:mod:`~codesign.search.relax`, :mod:`~codesign.search.anneal`,
:mod:`~codesign.search.discretize`, :mod:`~codesign.search.local`,
:mod:`~codesign.search.optimize`) share; :mod:`~codesign.search.distributed` runs both over
several hosts and :mod:`~codesign.search.baseline` is the random-search baseline.
"""

from codesign.search.anneal import Settings, categorical_combos, relaxed_search
from codesign.search.baseline import random_search, valid_points
from codesign.search.discretize import Discretizer
from codesign.search.distributed import distributed_sweep, initialize_distributed
from codesign.search.evaluator import ExactEvaluator, exact_point
from codesign.search.grid import OBJECTIVES, axis_table, config_at, get_leaf, set_leaf
from codesign.search.local import local_search, polish_bandwidths
from codesign.search.optimize import OptimizeResult, exact_objective, optimize
from codesign.search.problem import (
    DEGREE_AXES,
    MODES,
    RELAX_OBJECTIVES,
    STRATEGY_AXES,
    Problem,
    default_values,
    load_problem,
    load_problem_dict,
)
from codesign.search.sweep import SweepResult, sweep

__all__ = [
    "DEGREE_AXES",
    "MODES",
    "OBJECTIVES",
    "RELAX_OBJECTIVES",
    "STRATEGY_AXES",
    "Discretizer",
    "ExactEvaluator",
    "OptimizeResult",
    "Problem",
    "Settings",
    "SweepResult",
    "axis_table",
    "categorical_combos",
    "config_at",
    "default_values",
    "distributed_sweep",
    "exact_objective",
    "exact_point",
    "get_leaf",
    "initialize_distributed",
    "load_problem",
    "load_problem_dict",
    "local_search",
    "optimize",
    "polish_bandwidths",
    "random_search",
    "relaxed_search",
    "set_leaf",
    "sweep",
    "valid_points",
]
