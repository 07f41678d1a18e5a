"""Co-design problems: a base run, an objective, constraints and the discrete design space.

A problem TOML has the tables of a run file (``[model]``, ``[training]``, ``[system]`` with
optional ``[[system.tiers]]``, optional ``[strategy]`` and ``[efficiency]``; ``[strategy]``
gives the values of whatever is not searched, e.g. ``placement`` or, in hardware mode, the
whole strategy) plus::

    [objective]
    minimize = "step_time"        # step_time | time_to_train | cost_to_train | usd_per_token

    [constraints]                 # optional; memory fit is always required
    capex_max_usd = 5e7
    power_max_kw = 2000
    network_capex_max_usd = 1e7   # the network's share of the capex
    time_to_train_max_days = 90   # a deadline (needs training.tokens)
    num_accelerators_max = 8192
    mfu_min = 0.35
    moe_dropped_fraction_max = 0.01   # MoE token drop: share of routed tokens dropped

    [search]                      # the discrete values; one value fixes a dimension
    mode = "codesign"             # codesign (default) | strategy | hardware
    tp = [1, 2, 4, 8]
    pp = [1, 2, 4, 8, 16, 32]
    cp = [1]
    ep = [1, 2, 4, 8]             # expert parallelism (MoE models); default: [strategy] ep
    microbatch = [1, 2, 4, 8]
    interleave = [1, 2]           # pipeline chunks per stage; default: [strategy] interleave
    recompute = ["none", "selective", "full"]
    zero = [0, 1, 2, 3]
    moe_capacity_factor = [0, 1, 1.25]        # MoE token drop (0: dropless); default [strategy]
    num_accelerators = [256, 512, 1024]       # hardware: a grid (the optimizer uses its box)

    accelerator = ["h100-sxm5-80gb", "b200", "gb300"]   # a choice of platforms (below)
    placement = [["tp", "cp", "ep", "dp", "pp"], ["tp", "pp", "cp", "ep", "dp"]]

    [search.hardware]             # accelerator knobs, priced by codesign.pricing
    hbm_gb = {min = 80, max = 288, num = 8}
    hbm_tbps = {min = 3, max = 8, num = 6}
    peak_tflops = [989, 1979]     # dense BF16
    host_link_gbps = [64, 450]

    [search.reliability]          # goodput knobs (codesign.goodput; reliability on: the default)
    checkpoint_gbps = [0.1, 0.5, 2]       # checkpoint storage GB/s per accelerator, priced
    spares_per_domain = [0, 4, 8]         # hot spares per blast unit (idle accelerators)
    checkpoint_interval_s = [0, 600]      # 0: Daly's optimum

    [[search.tiers]]
    index = 1
    bandwidth_gbps = [25, 50, 100, 200]       # or {min = 25, max = 200, num = 16} (log-spaced)
    latency_us = {min = 2, max = 10, num = 5}
    oversubscription = [1, 2, 4]
    # domain = [8, 16, 32, 72]   # tier 0 only: the scale-up domain size

Hardware grids may be given as lists or as ranges: ``{min, max, num}`` (log-spaced; add
``scale = "linear"`` for even spacing) or ``{min, max, step}`` (``num_accelerators =
{min = 512, max = 8192, step = 512}``).

**Hardware axes.**  ``[search.hardware]`` and the ``[[search.tiers]]`` fields are continuous
in the optimizer (a log2 box around the grid, relaxed like the bandwidths) and enumerated
by the sweep.  A knob moved away from the listed part is priced at the margin
(:mod:`codesign.pricing`).  The scale-up ``domain`` (tier 0) decides which dimensions stay
on the scale-up fabric; it must divide the accelerator count (a layout axis, rounded like
the parallel degrees).  ``accelerator`` lists catalog accelerators: each is a *platform*,
the part with its own scale-up tier (its catalog ``scale_up`` fabric and domain) and its
calibrated efficiency; the sweep enumerates them and the optimizer relaxes the choice to
softmax weights over the platforms' numbers (a soft categorical), then rounds to each.
``placement`` lists orders of the parallel dimensions (innermost first) to choose from,
enumerated and relaxed the same way.  ``moe_capacity_factor`` lists MoE capacity factors
(token drop with padding to ``c`` times the balanced load; ``0`` is dropless): the sweep
enumerates them and the optimizer runs one search per value, keeping the best exact design
(dropless and padded routing are two modes, which no soft mixture describes); pair it with
``moe_dropped_fraction_max`` to weigh speed against the tokens dropped.  ``etp`` lists
expert tensor-parallel degrees (MoE parallel folding, Megatron-Core
``expert_tensor_parallel_size``: ``ep x etp`` divides ``tp x dp x cp``; ``0`` means "the same
as ``tp``", the default): the sweep enumerates them and the optimizer runs one search per
value, as for the capacity factors (a few values, each a different sharding of the experts).

**Modes.**  ``codesign`` searches whatever ``[search]`` lists (hardware and strategy).
``strategy`` optimizes the strategy on fixed hardware (no hardware axes allowed).
``hardware`` fixes the whole strategy from ``[strategy]`` (``tp``, ``pp``, ``cp``, ``ep``,
``etp``, ``microbatch``, ``interleave``, ``recompute``, ``zero``; ``dp`` is derived) and
optimizes the hardware axes only, e.g. the bandwidth of every tier under a capex budget (the LIBRA
problem, Won et al. 2023, arXiv:2109.11762); no strategy axes are allowed in ``[search]``.

``dp`` is always derived as ``num_accelerators / (tp pp cp)``.  Omitted strategy axes default
to the powers of two that divide the model and batch (see :func:`default_values`), ``cp = [1]``,
``ep``, ``etp`` and ``interleave`` from ``[strategy]`` (1, 0 and 1), every recompute mode and
ZeRO stage.  Axes with one value are fixed in the base configuration.  The grid of
:meth:`Problem.exhaustive_axes` is what ``sweep`` enumerates (the ground truth); the
optimizer (:mod:`codesign.search`) works on the continuous box around it.

The ``codesign optimize`` and ``codesign sweep`` commands (:mod:`codesign.cli`) load problem
files with :func:`load_problem`; a problem is pure data (no search code here).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from codesign._overrides import apply_sets
from codesign.config import load_run_dict, read_toml
from codesign.rules import CONSTRAINTS, derive_dp
from codesign.search._grid import platform_of, set_leaf, specs_of
from codesign.search._problem import (
    _ACCEL_FIELDS,
    ACCELERATOR_KNOBS,
    DEGREE_AXES,
    MODES,
    RELAX_OBJECTIVES,
    RELIABILITY_KNOBS,
    STRATEGY_AXES,
    TIER_KNOBS,
    Problem,
    _fix_base,
    default_values,
)
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES, SpecError, placement_ranks

__all__ = ["load_problem", "load_problem_dict", "MAX_AXIS_VALUES"]


def _numbers(field: str, values, integer: bool = True, allow_zero: bool = False) -> tuple:
    if not isinstance(values, list) or not values:
        raise SpecError(field, values, "a non-empty list of numbers")
    out = []
    for v in values:
        bad = isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        if bad or v < 0 or (v == 0 and not allow_zero):
            raise SpecError(field, v, "a number >= 0" if allow_zero else "a positive number")
        if integer and v != round(v):
            raise SpecError(field, v, "a positive integer")
        out.append(float(v))
    return tuple(sorted(set(out)))


MAX_AXIS_VALUES = 100_000
"""Most values one axis of a problem grid may have (a range table is expanded on the host)."""


def _grid(field: str, spec, integer: bool, allow_zero: bool = False) -> tuple:
    """A hardware grid from a list or a range table ``{min, max, num[, scale]}`` / ``{min, max, step}``."""
    if isinstance(spec, list):
        return _numbers(field, spec, integer, allow_zero)
    if not isinstance(spec, dict):
        raise SpecError(
            field, spec, "a list of numbers or a table {min, max, num} or {min, max, step}"
        )
    allowed = {"min", "max", "num", "step", "scale"}
    for k in spec:
        if k not in allowed:
            raise SpecError(f"{field}.{k}", spec[k], f"one of {sorted(allowed)}")
    try:
        lo, hi = float(spec["min"]), float(spec["max"])
    except (KeyError, TypeError, ValueError):
        raise SpecError(field, spec, "a table with numbers min and max") from None
    if not 0 < lo <= hi or not math.isfinite(hi):
        raise SpecError(field, spec, "0 < min <= max")
    if "step" in spec:
        try:
            step = float(spec["step"])
        except (TypeError, ValueError):
            raise SpecError(f"{field}.step", spec["step"], "a positive number") from None
        if not step > 0:
            raise SpecError(f"{field}.step", spec["step"], "a positive number")
        if (hi - lo) / step + 1 > MAX_AXIS_VALUES:
            raise SpecError(
                f"{field}.step", spec["step"], f"a step giving at most {MAX_AXIS_VALUES:,} values"
            )
        vals = list(np.arange(lo, hi + 0.5 * step, step))
    else:
        num = spec.get("num")
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise SpecError(f"{field}.num", num, "a positive integer (or give step)")
        if num > MAX_AXIS_VALUES:
            raise SpecError(f"{field}.num", num, f"at most {MAX_AXIS_VALUES:,} values per axis")
        scale = spec.get("scale", "log")
        if scale not in ("log", "linear"):
            raise SpecError(f"{field}.scale", scale, "log or linear")
        vals = list((np.geomspace if scale == "log" else np.linspace)(lo, hi, num))
    # Integers rounded; others to 12 significant digits (no 20.000000000000004 in reports).
    vals = [float(round(v)) if integer else float(f"{v:.12g}") for v in vals]
    return _numbers(field, vals, integer)


def _platform(doc: dict, name) -> tuple:
    """``(Platform, RunConfig)`` of the problem document on accelerator ``name``: its catalog
    scale-up tier replaces tier 0, and its calibrated efficiency applies (unless
    ``[efficiency]`` names a preset)."""
    from codesign.config import catalog

    acc = catalog()["accelerators"]
    if not isinstance(name, str) or name not in acc:
        raise SpecError(
            "search.accelerator", name, f"one of the accelerator presets: {', '.join(sorted(acc))}"
        )
    d = copy.deepcopy(doc)
    sy = d.setdefault("system", {})
    for k in list(sy):  # the problem's accelerator overrides belong to its own part
        if k in _ACCEL_FIELDS:
            sy.pop(k)
    sy["accelerator"] = name
    a = acc[name]
    if sy.get("tiers"):
        sy["tiers"] = [{"preset": a["scale_up"], "domain": a["scale_up_domain"]}, *sy["tiers"][1:]]
    cfg = load_run_dict(d, check=False)
    return platform_of(cfg, name), cfg


def load_problem_dict(doc: dict, name: str = "problem") -> Problem:
    """Parse a problem document (the dict form of a problem TOML)."""
    doc = copy.deepcopy(doc)
    title = str(doc.pop("title", name))
    obj = doc.pop("objective", {}) or {}
    cons = doc.pop("constraints", {}) or {}
    search = dict(doc.pop("search", {}) or {})
    for k in obj:
        if k != "minimize":
            raise SpecError(f"objective.{k}", obj[k], "only minimize")
    objective = obj.get("minimize", "step_time")
    if objective not in RELAX_OBJECTIVES:
        raise SpecError("objective.minimize", objective, f"one of {list(RELAX_OBJECTIVES)}")
    for k in cons:
        if k not in CONSTRAINTS:
            raise SpecError(f"constraints.{k}", cons[k], f"one of {list(CONSTRAINTS)}")
    cvals = {}
    for k in CONSTRAINTS:
        v = cons.get(k, math.inf if k != "mfu_min" else 0.0)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(f"constraints.{k}", v, "a number")
        v = float(v)
        if k == "mfu_min":
            if not 0.0 <= v < 1.0:
                raise SpecError("constraints.mfu_min", v, "a fraction in [0, 1)")
        elif k == "moe_dropped_fraction_max":
            if not 0.0 < v:
                raise SpecError(f"constraints.{k}", v, "a positive fraction (1: no cap)")
        elif not v > 0:
            raise SpecError(f"constraints.{k}", v, "a positive number")
        cvals[k] = v
    mode = search.pop("mode", "codesign")
    if mode not in MODES:
        raise SpecError("search.mode", mode, f"one of {list(MODES)}")

    hardware: dict = {}
    system = doc.setdefault("system", {})
    if "num_accelerators" in search:
        ns = _grid("search.num_accelerators", search["num_accelerators"], integer=True)
        if len(ns) > 1:
            hardware["system.num_accelerators"] = ns
        # The outermost tier's domain must reach the largest cluster of the grid.
        system["num_accelerators"] = max(ns)
    tier_fields = (*TIER_KNOBS, "domain")
    for t in search.get("tiers", []) or []:
        if not isinstance(t, dict) or "index" not in t or not set(t) & set(tier_fields):
            raise SpecError(
                "search.tiers", t, f"tables with index and any of {', '.join(tier_fields)}"
            )
        i = t["index"]
        if isinstance(i, bool) or not isinstance(i, int):
            raise SpecError("search.tiers.index", i, "a tier index (an integer)")
        for k in t:
            if k not in (*tier_fields, "index"):
                raise SpecError(
                    f"search.tiers[{i}].{k}", t[k], f"one of index, {', '.join(tier_fields)}"
                )
        for k in tier_fields:
            if k in t:
                hardware[f"system.tiers[{i}].{k}"] = _grid(
                    f"search.tiers[{i}].{k}", t[k], integer=(k == "domain")
                )
        if "domain" in t and i != 0:
            raise SpecError(
                f"search.tiers[{i}].domain", t["domain"], "searched on tier 0 (scale-up) only"
            )
        if "oversubscription" in t and min(hardware[f"system.tiers[{i}].oversubscription"]) < 1:
            raise SpecError(f"search.tiers[{i}].oversubscription", t["oversubscription"], ">= 1")
    hw_doc = search.pop("hardware", {}) or {}
    if not isinstance(hw_doc, dict):
        raise SpecError("search.hardware", hw_doc, f"a table of {', '.join(ACCELERATOR_KNOBS)}")
    for k, v in hw_doc.items():
        if k not in ACCELERATOR_KNOBS:
            raise SpecError(f"search.hardware.{k}", v, f"one of {', '.join(ACCELERATOR_KNOBS)}")
        hardware[f"system.accelerator.{k}"] = _grid(f"search.hardware.{k}", v, integer=False)
    rel_doc = search.pop("reliability", {}) or {}
    if not isinstance(rel_doc, dict):
        raise SpecError("search.reliability", rel_doc, f"a table of {', '.join(RELIABILITY_KNOBS)}")
    for k, v in rel_doc.items():
        if k not in RELIABILITY_KNOBS:
            raise SpecError(f"search.reliability.{k}", v, f"one of {', '.join(RELIABILITY_KNOBS)}")
        hardware[f"system.reliability.{k}"] = _grid(
            f"search.reliability.{k}", v, integer=False, allow_zero=k != "checkpoint_gbps"
        )
    platforms = search.pop("accelerator", None)
    if platforms is not None:
        if isinstance(platforms, str):
            platforms = [platforms]
        if not isinstance(platforms, list) or not platforms:
            raise SpecError("search.accelerator", platforms, "a list of accelerator presets")
        platforms = tuple(dict.fromkeys(platforms))
    else:
        platforms = ()
    placements = search.pop("placement", None)
    if placements is not None:
        if not isinstance(placements, list) or not placements:
            raise SpecError("search.placement", placements, "a list of placement orders")
        for i, pl in enumerate(placements):
            if not isinstance(pl, list):
                raise SpecError(
                    "search.placement", placements, "a list of placement orders (lists of names)"
                )
            try:
                placement_ranks(pl)  # checks the order
            except SpecError as e:
                raise SpecError(f"search.placement[{i}]", pl, e.allowed) from None
        placements = tuple(dict.fromkeys(tuple(pl) for pl in placements))
        doc.setdefault("strategy", {})
        doc["strategy"] = {**(doc["strategy"] or {}), "placement": list(placements[0])}
    else:
        placements = ()
    capacity = search.pop("moe_capacity_factor", None)
    if capacity is not None:
        if mode == "hardware":
            raise SpecError(
                "search.moe_capacity_factor",
                capacity,
                "absent in hardware mode: set it in [strategy]",
            )
        capacity = _numbers("search.moe_capacity_factor", capacity, integer=False, allow_zero=True)
        doc.setdefault("strategy", {})
        doc["strategy"] = {**(doc["strategy"] or {}), "moe_capacity_factor": capacity[0]}
    else:
        capacity = ()
    fixed_bw = {p: v[0] for p, v in hardware.items() if len(v) == 1}
    hardware = {p: v for p, v in hardware.items() if len(v) > 1}
    if mode == "strategy" and (hardware or len(platforms) > 1):
        k = sorted(hardware)[0] if hardware else "search.accelerator"
        raise SpecError(
            "search.mode",
            mode,
            f"no hardware axes in strategy mode (found {k} with several values)",
        )
    strategy_keys = [k for k in search if k in STRATEGY_AXES]
    if mode == "hardware":
        if strategy_keys:
            raise SpecError(
                f"search.{strategy_keys[0]}",
                search[strategy_keys[0]],
                "absent in hardware mode: set the strategy in [strategy]",
            )
        if not hardware and len(platforms) < 2:
            raise SpecError(
                "search.mode",
                mode,
                "at least one hardware axis (num_accelerators, tiers, hardware, accelerator) "
                "with several values",
            )
        if len(placements) > 1:
            raise SpecError(
                "search.placement", placements, "absent in hardware mode: set it in [strategy]"
            )
    n = float(system.get("num_accelerators", 0) or 0)
    st = dict(doc.get("strategy", {}) or {})
    st.setdefault("tp", 1)
    st.setdefault("pp", 1)
    st.pop("dp", None)  # dp is always derived
    tp, pp, cp = (float(st.get(k, 1)) for k in ("tp", "pp", "cp"))
    st["dp"] = max(1.0, float(derive_dp(n, tp, pp, cp, np))) if n > 0 else 1.0
    doc["strategy"] = st
    if platforms:
        loaded = [_platform(doc, name) for name in platforms]
        platforms = tuple(p for p, _ in loaded)
        cfg = loaded[0][1]
    else:
        cfg = load_run_dict(doc, check=False)
    for path in [*hardware, *fixed_bw]:
        if path.startswith("system.tiers"):
            i = int(path[len("system.tiers[") : path.index("]")])
            if not 0 <= i < len(cfg.system.tiers):
                raise SpecError(
                    "search.tiers.index", i, f"a tier index below {len(cfg.system.tiers)}"
                )
    if fixed_bw:
        specs = specs_of(cfg)
        for path, v in fixed_bw.items():
            specs = set_leaf(specs, path, float(v))
        cfg = dataclasses.replace(cfg, **specs)
    if mode == "hardware":
        if n % (tp * pp * cp) or n < tp * pp * cp:
            raise SpecError(
                "strategy.tp*pp*cp", tp * pp * cp, f"a divisor of num_accelerators = {n:g}"
            )

    values = default_values(cfg)
    if mode == "hardware":
        s = cfg.strategy
        values = {k: [float(getattr(s, k))] for k in (*DEGREE_AXES, "etp")}
        values["recompute"] = [RECOMPUTE_MODES[int(np.argmax(s.recompute))]]
        values["zero"] = [ZERO_STAGES[int(np.argmax(s.zero))]]
    for k in STRATEGY_AXES:
        if k not in search:
            continue
        v = search[k]
        if k == "recompute":
            if not isinstance(v, list) or not v or any(x not in RECOMPUTE_MODES for x in v):
                raise SpecError("search.recompute", v, f"a list of {list(RECOMPUTE_MODES)}")
            values[k] = [x for x in RECOMPUTE_MODES if x in v]
        elif k == "zero":
            if (
                not isinstance(v, list)
                or not v
                or any(x not in ZERO_STAGES or isinstance(x, bool) for x in v)
            ):
                raise SpecError("search.zero", v, "a list of 0, 1, 2, 3")
            values[k] = [x for x in ZERO_STAGES if x in v]
        elif k == "etp":  # 0: the same as tp (Megatron-Core's default)
            values[k] = list(_numbers("search.etp", v, allow_zero=True))
        else:
            values[k] = list(_numbers(f"search.{k}", v))
    unknown = set(search) - set(STRATEGY_AXES) - {"num_accelerators", "tiers"}
    if unknown:
        k = sorted(unknown)[0]
        raise SpecError(
            f"search.{k}",
            search[k],
            f"one of {['mode', *STRATEGY_AXES, 'moe_capacity_factor', 'num_accelerators', 'tiers', 'hardware', 'accelerator', 'placement']}",
        )
    if (
        objective in ("time_to_train", "cost_to_train", "energy_to_train")
        and float(cfg.training.tokens) <= 0
    ):
        raise SpecError(
            "training.tokens", cfg.training.tokens, f"positive for objective {objective}"
        )
    if math.isfinite(cvals["time_to_train_max_days"]) and float(cfg.training.tokens) <= 0:
        raise SpecError(
            "training.tokens", cfg.training.tokens, "positive for a time_to_train_max_days deadline"
        )
    if max(values["ep"]) > 1 and float(cfg.model.moe_experts) <= 0:
        raise SpecError("search.ep", values["ep"], "[1] for a dense model")
    if len(values["etp"]) > 1 and float(cfg.model.moe_experts) <= 0:
        raise SpecError("search.etp", values["etp"], "one value (or none) for a dense model")
    if len(capacity) > 1 and float(cfg.model.moe_experts) <= 0:
        raise SpecError(
            "search.moe_capacity_factor", list(capacity), "one value (or none) for a dense model"
        )
    sv = {k: tuple(v) for k, v in values.items()}
    cfg = _fix_base(cfg, sv, hardware)
    return Problem(
        name=name,
        cfg=cfg,
        objective=objective,
        strategy_values=sv,
        hardware_values=hardware,
        mode=mode,
        title=title,
        platforms=platforms,
        placements=placements,
        capacity_factors=capacity,
        **cvals,
    )


def load_problem(path: str | os.PathLike, sets=()) -> Problem:
    """Parse a problem TOML file, with the ``KEY=VALUE`` overrides ``sets`` applied first
    (:func:`codesign._overrides.apply_sets`)."""
    return load_problem_dict(apply_sets(read_toml(path, "problem"), sets), name=Path(path).stem)
