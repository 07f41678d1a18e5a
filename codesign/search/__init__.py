"""Search: the exhaustive sweep and the gradient co-design optimizer, over problem files.

Layers, one way: :mod:`~codesign.search._problem` (problem files as pure data) and
:mod:`~codesign.search._grid` (leaf paths, axis tables, objectives) are read by the one exact
evaluator (:mod:`~codesign.search._evaluator`), which :mod:`~codesign.search._sweep` and the
optimizer (:mod:`~codesign.search._relax`, :mod:`~codesign.search._anneal`,
:mod:`~codesign.search._discretize`, :mod:`~codesign.search._local`,
:mod:`~codesign.search._optimize`) share; :mod:`~codesign.search._distributed` runs both over
several hosts and :mod:`~codesign.search._baseline` is the random-search baseline.
"""

from codesign.search import _relax as relax
from codesign.search._anneal import Settings, categorical_combos, relaxed_search
from codesign.search._auto import METHODS, choose_method, front, pareto, solve
from codesign.search._baseline import random_search, valid_points
from codesign.search._discretize import Discretizer
from codesign.search._distributed import distributed_sweep, initialize_distributed
from codesign.search._evaluator import ExactEvaluator, exact_point
from codesign.search._grid import OBJECTIVES, axis_table, config_at, get_leaf, set_leaf
from codesign.search._local import local_search, polish_bandwidths
from codesign.search._optimize import OptimizeResult, exact_objective, optimize
from codesign.search._problem import (
    ACCELERATOR_KNOBS,
    DEGREE_AXES,
    MODES,
    RELAX_OBJECTIVES,
    STRATEGY_AXES,
    TIER_KNOBS,
    Problem,
    default_values,
)
from codesign.search._problem_file import load_problem, load_problem_dict
from codesign.search._sweep import SweepResult, sweep

__all__ = [
    "METHODS",
    "choose_method",
    "front",
    "pareto",
    "solve",
    "ACCELERATOR_KNOBS",
    "TIER_KNOBS",
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
    "relax",
    "relaxed_search",
    "set_leaf",
    "sweep",
    "valid_points",
]
