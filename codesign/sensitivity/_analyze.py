"""One sensitivity analysis of a design point: the typed result and the function that builds it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from codesign.config import RunConfig
from codesign.rules import check_all
from codesign.sensitivity._elasticity import OBJECTIVES, Elasticity, Model, elasticities
from codesign.sensitivity._params import GROUPS, Parameter, parameters_of
from codesign.sensitivity._reoptimize import envelope
from codesign.sensitivity._shadow import Knob, memory_knobs, shadow_prices
from codesign.sensitivity._takes import Bottleneck, bottleneck, what_it_would_take
from codesign.specs import SpecError

__all__ = [
    "Sensitivity",
    "sensitivity",
    "sensitivity_of_problem",
    "problem_knobs",
    "default_objective",
]


@dataclasses.dataclass(frozen=True)
class Sensitivity:
    """Everything :func:`sensitivity` says about one design point.

    ``values``: each objective at the point (:data:`OBJECTIVES`, natural units);
    ``elasticities``: one :class:`Elasticity` per (parameter, objective), strategy fixed;
    ``envelope``: with ``reoptimize``, one :class:`Envelope` per parameter;
    ``requirements``: one :class:`Requirement` per hardware/economics parameter;
    ``bottleneck``: the step time's composition; ``shadow_prices``: filled for co-design
    problems (:func:`codesign.sensitivity.shadow_prices`).
    """

    config: RunConfig
    parameters: tuple[Parameter, ...]
    objectives: tuple[str, ...]
    values: dict
    fits: bool
    elasticities: list
    bottleneck: Bottleneck
    requirements: list
    target_objective: str
    reduction: float
    envelope: list = dataclasses.field(default_factory=list)
    envelope_objective: str = ""
    best_strategy: dict = dataclasses.field(default_factory=dict)
    best_value: float | None = None
    shadow_prices: list = dataclasses.field(default_factory=list)
    continuous_optimum: dict = dataclasses.field(default_factory=dict)
    """Where the shadow prices hold: the continuous optimum (``x``: the knobs' values,
    ``value``: the objective) with the discrete choices fixed at the design."""
    notes: list = dataclasses.field(default_factory=list)

    def elasticity(self, parameter: str, objective: str) -> Elasticity:
        """The :class:`Elasticity` of ``objective`` to ``parameter``."""
        for e in self.elasticities:
            if e.parameter == parameter and e.objective == objective:
                return e
        raise SpecError(
            "elasticity", (parameter, objective), "a (parameter, objective) of this analysis"
        )

    def matrix(self, objective: str) -> dict:
        """``{parameter: elasticity or None}`` for one objective, in parameter order."""
        return {e.parameter: e.elasticity for e in self.elasticities if e.objective == objective}

    def ranked(self, objective: str, n: int | None = None) -> list:
        """The elasticities of ``objective`` by decreasing magnitude (a kink ranks by its
        larger one-sided value)."""

        def size(e):
            vals = [v for v in (e.elasticity, e.left, e.right) if v is not None]
            return max((abs(v) for v in vals), default=0.0)

        rows = [e for e in self.elasticities if e.objective == objective]
        return sorted(rows, key=size, reverse=True)[:n]

    def to_dict(self) -> dict:
        """A JSON-ready dict (None for undefined numbers)."""

        def clean(x):
            if isinstance(x, float):
                return x if math.isfinite(x) else None
            if isinstance(x, dict):
                return {str(k): clean(v) for k, v in x.items()}
            if isinstance(x, list | tuple):
                return [clean(v) for v in x]
            if dataclasses.is_dataclass(x):
                return clean(dataclasses.asdict(x))
            if isinstance(x, np.generic):
                return clean(x.item())
            return x

        return clean(
            {
                "values": self.values,
                "units": {o: OBJECTIVES[o][0] for o in self.objectives},
                "fits": self.fits,
                "parameters": [dataclasses.asdict(p) for p in self.parameters],
                "elasticities": self.elasticities,
                "bottleneck": self.bottleneck,
                "what_it_would_take": {
                    "objective": self.target_objective,
                    "reduction": self.reduction,
                    "parameters": self.requirements,
                },
                "envelope": {
                    "objective": self.envelope_objective,
                    "best_strategy_at_point": self.best_strategy,
                    "best_value_at_point": self.best_value,
                    "parameters": self.envelope,
                }
                if self.envelope
                else None,
                "shadow_prices": self.shadow_prices,
                "continuous_optimum": self.continuous_optimum,
                "notes": self.notes,
            }
        )


def sensitivity(
    cfg: RunConfig,
    *,
    objectives=tuple(OBJECTIVES),
    parameters=None,
    groups=GROUPS,
    reduction: float = 0.10,
    target_objective: str | None = None,
    reoptimize: bool = False,
    envelope_objective: str | None = None,
    envelope_factor: float = 2.0,
    strategy_values: dict | None = None,
    constraints: dict | None = None,
) -> Sensitivity:
    """Sensitivity of one design point (a run configuration), strategy held fixed, and with
    ``reoptimize`` also re-optimized.

    Args:
        cfg: the design point (:func:`codesign.load_run`, or an optimizer's ``config``).
        objectives: names of :data:`OBJECTIVES` to differentiate.
        parameters: parameter names to keep (default: every parameter of ``groups`` with a
            non-zero value, :func:`codesign.sensitivity.parameters_of`).
        groups: parameter groups (``hardware``, ``economics``, ``workload``).
        reduction: the target reduction of "what it would take" (a fraction).
        target_objective: the objective of "what it would take" (default: time to train
            when the run has a token count, else step time; the first objective when that
            one is not analyzed).
        reoptimize: also compute the envelope (strategy re-optimized over ``strategy_values``
            or :func:`codesign.search.default_values`, under ``constraints``).
        envelope_objective: the objective re-optimized (default: time to train when the
            run has a token count, else step time).
        envelope_factor: the envelope's arcs run from ``p / factor`` to ``p * factor``.

    Example:
        >>> import codesign as cd
        >>> from codesign.sensitivity import sensitivity
        >>> cfg = cd.load_run_dict({"model": {"preset": "llama3-8b"},
        ...     "training": {"global_batch": 512, "tokens": 1e12},
        ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        ...     "strategy": {"tp": 2, "pp": 1, "dp": 32}})
        >>> s = sensitivity(cfg, parameters=["accelerator.peak_tflops", "tiers[0].bandwidth_gbps"])
        >>> e = s.elasticity("accelerator.peak_tflops", "step_time")
        >>> e.status, -1.0 < e.elasticity < 0.0
        ('smooth', True)
    """
    for o in objectives:
        if o not in OBJECTIVES:
            raise SpecError("sensitivity objective", o, f"one of {list(OBJECTIVES)}")
    if target_objective is None:
        target_objective = default_objective(cfg)
        if target_objective not in objectives:
            target_objective = objectives[0]
    if target_objective not in objectives:
        raise SpecError("target objective", target_objective, f"one of {list(objectives)}")
    if not 0.0 < float(reduction) < 1.0:
        raise SpecError("reduction", reduction, "a fraction in (0, 1)")
    if not float(envelope_factor) > 1.0:
        raise SpecError("envelope factor", envelope_factor, "a number > 1")
    params = parameters_of(cfg, groups=groups, names=parameters)
    if not params:
        raise SpecError("sensitivity parameters", parameters, "at least one parameter")
    check_all(*cfg.specs())  # bad input: a clear error before any tracing
    model = Model(cfg, params, tuple(objectives))
    f0, fits, rows = elasticities(model)
    notes = []
    if not fits:
        notes.append(
            "the design point does not fit in memory under its strategy; the elasticities are "
            "those of the model's numbers at an infeasible point"
        )
    if float(cfg.training.tokens) <= 0:
        notes.append("no training.tokens: time, cost and energy to train are 0 and undefined")
    by_name = {e.parameter: e for e in rows if e.objective == target_objective}
    reqs = what_it_would_take(
        model,
        target_objective,
        by_name,
        reduction=reduction,
    )
    reqs = [r for r, p in zip(reqs, params, strict=True) if p.group != "workload"]
    out = Sensitivity(
        config=cfg,
        parameters=params,
        objectives=tuple(objectives),
        values={o: float(v) for o, v in zip(objectives, f0, strict=True)},
        fits=fits,
        elasticities=rows,
        bottleneck=bottleneck(model.breakdown_s),
        requirements=reqs,
        target_objective=target_objective,
        reduction=float(reduction),
        notes=notes,
    )
    if reoptimize:
        eo = envelope_objective or (
            "time_to_train" if float(cfg.training.tokens) > 0 else "step_time"
        )
        if eo not in objectives or eo == "memory":
            raise SpecError(
                "envelope objective", eo, "one of the analysis's objectives other than memory"
            )
        ls = math.log(envelope_factor)
        rows_s = np.zeros((2 * len(params), len(params)))
        for i in range(len(params)):
            rows_s[2 * i, i], rows_s[2 * i + 1, i] = -ls, ls
        vals, fit = model.values(rows_s)
        fixed = np.where(fit, vals[:, model.objectives.index(eo)], np.inf).reshape(-1, 2)
        env, best, bval = envelope(
            cfg,
            params,
            fixed,
            objective=eo,
            factor=envelope_factor,
            strategy_values=strategy_values,
            constraints=constraints,
        )
        out = dataclasses.replace(
            out,
            envelope=env,
            envelope_objective=eo,
            best_strategy=best,
            best_value=bval if math.isfinite(bval) else None,
        )
    return out


def default_objective(cfg, problem=None) -> str:
    """The objective an analysis centres on: the problem's (when it is one of
    :data:`OBJECTIVES`), else time to train when the run has a token count, else step time."""
    if problem is not None and problem.objective in OBJECTIVES:
        return problem.objective
    return "time_to_train" if float(cfg.training.tokens) > 0 else "step_time"


def problem_knobs(problem, cfg) -> tuple[Knob, ...]:
    """The continuous variables of a problem at its design ``cfg``: its continuous hardware
    axes (each over its grid's range, in log space) and the strategy's memory knobs
    (:func:`codesign.sensitivity.memory_knobs`)."""
    knobs = []
    for p in problem.continuous_paths:
        vals = [float(v) for v in problem.hardware_values[p]]
        if min(vals) < max(vals):
            knobs.append(Knob(p, max(min(vals), 1e-3), max(vals), log=True))
    return tuple(knobs) + memory_knobs(cfg)


def problem_strategy_values(problem) -> dict:
    """A problem's strategy grid for the envelope: its ``strategy_values`` with its
    placements and MoE capacity factors (:data:`~codesign.sensitivity.CHOICE_AXES`), so the
    re-optimized strategy may change them as the optimizer may."""
    vals = dict(problem.strategy_values)
    if problem.placements:
        vals["placement"] = [tuple(p) for p in problem.placements]
    if problem.capacity_factors:
        vals["moe_capacity_factor"] = list(problem.capacity_factors)
    return vals


def sensitivity_of_problem(
    problem,
    *,
    settings=None,
    method: str = "auto",
    reoptimize: bool = False,
    confirm: bool = True,
    objective: str | None = None,
    **kwargs,
) -> Sensitivity:
    """Co-design ``problem`` (:func:`codesign.search.solve`), then analyze its design: the
    elasticities and bottleneck of :func:`sensitivity` (re-optimizing over the problem's
    strategy values under its constraints), and the shadow price of every constraint at the
    continuous optimum over the problem's continuous axes and memory knobs
    (:func:`codesign.sensitivity.shadow_prices`, confirmed by re-solving unless
    ``confirm`` is False)."""
    from codesign.search import Settings, solve

    res = solve(problem, settings or Settings(fast_compile=True), method=method)
    if res.config is None:
        raise SpecError(
            "problem",
            problem.name,
            "a problem with a feasible design (`codesign sweep` says why not)",
        )
    cfg = res.config
    obj = objective or default_objective(cfg, problem)
    kwargs.setdefault("target_objective", "step_time" if obj == "memory" else obj)
    sens = sensitivity(
        cfg,
        reoptimize=reoptimize,
        envelope_objective=obj,
        strategy_values=problem_strategy_values(problem),
        constraints=problem.constraints,
        **kwargs,
    )
    knobs = problem_knobs(problem, cfg)
    notes = list(sens.notes)
    notes.append(
        f"design point: the {res.method} optimum of {problem.name} ({problem.objective} "
        f"{res.exact_objective:.6g})"
    )
    if not knobs:
        notes.append("no continuous variable in this problem: no shadow prices")
        return dataclasses.replace(sens, notes=notes)
    prices, sol = shadow_prices(
        cfg, knobs, objective=obj, constraints=problem.constraints, confirm=confirm
    )
    if not sol["feasible"]:
        notes.append("the continuous problem at this design is infeasible: shadow prices undefined")
    return dataclasses.replace(
        sens,
        shadow_prices=prices,
        continuous_optimum={"x": sol["x"], "value": sol["value"], "objective": obj},
        notes=notes,
    )
