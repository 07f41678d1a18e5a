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
    num_accelerators = [256, 512, 1024]       # hardware: a grid (the optimizer uses its box)

    [[search.tiers]]
    index = 1
    bandwidth_gbps = [25, 50, 100, 200]       # or {min = 25, max = 200, num = 16} (log-spaced)

Hardware grids may be given as lists or as ranges: ``{min, max, num}`` (log-spaced; add
``scale = "linear"`` for even spacing) or ``{min, max, step}`` (``num_accelerators =
{min = 512, max = 8192, step = 512}``).

**Modes.**  ``codesign`` searches whatever ``[search]`` lists (hardware and strategy).
``strategy`` optimizes the strategy on fixed hardware (no hardware axes allowed).
``hardware`` fixes the whole strategy from ``[strategy]`` (``tp``, ``pp``, ``cp``, ``ep``,
``microbatch``, ``interleave``, ``recompute``, ``zero``; ``dp`` is derived) and optimizes
the hardware axes only, e.g. the bandwidth of every tier under a capex budget (the LIBRA
problem, Won et al. 2023, arXiv:2109.11762); no strategy axes are allowed in ``[search]``.

``dp`` is always derived as ``num_accelerators / (tp pp cp)``.  Omitted strategy axes default
to the powers of two that divide the model and batch (see :func:`default_values`), ``cp = [1]``,
``ep`` and ``interleave`` from ``[strategy]`` (1), every recompute mode and ZeRO stage.  Axes
with one value are fixed in the base configuration.  The grid of
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

from codesign.config import RunConfig, load_run_dict, read_toml
from codesign.rules import derive_dp
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES, SpecError

__all__ = [
    "Problem",
    "load_problem",
    "load_problem_dict",
    "default_values",
    "STRATEGY_AXES",
    "DEGREE_AXES",
    "RELAX_OBJECTIVES",
    "MODES",
]

STRATEGY_AXES = ("tp", "pp", "cp", "ep", "microbatch", "interleave", "recompute", "zero")
DEGREE_AXES = ("tp", "pp", "cp", "ep", "microbatch", "interleave")
"""The numeric (power-of-two-like) strategy axes; recompute and zero are categorical."""
RELAX_OBJECTIVES = ("step_time", "time_to_train", "cost_to_train", "usd_per_token")
MODES = ("codesign", "strategy", "hardware")
_PROBLEM_TABLES = {"objective", "constraints", "search"}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A co-design problem (host-side description, concrete values).

    ``strategy_values`` maps each of :data:`STRATEGY_AXES` to a tuple of allowed values;
    ``hardware_values`` maps leaf paths (``system.num_accelerators``,
    ``system.tiers[i].bandwidth_gbps``) to sorted tuples of grid values (only the searched
    ones).  ``cfg`` holds every fixed value (one-valued axes included).
    """

    name: str
    cfg: RunConfig
    objective: str = "step_time"
    capex_max_usd: float = math.inf
    power_max_kw: float = math.inf
    strategy_values: dict = dataclasses.field(default_factory=dict)
    hardware_values: dict = dataclasses.field(default_factory=dict)
    mode: str = "codesign"
    title: str = ""

    @property
    def free_tiers(self) -> tuple[int, ...]:
        out = []
        for path in self.hardware_values:
            if path.startswith("system.tiers[") and path.endswith("].bandwidth_gbps"):
                out.append(int(path[len("system.tiers[") : path.index("]")]))
        return tuple(sorted(out))

    @property
    def free_n(self) -> bool:
        return "system.num_accelerators" in self.hardware_values

    @property
    def num_tiers(self) -> int:
        return len(self.cfg.system.tiers)

    def exhaustive_axes(self) -> dict:
        """The full discrete grid as ``sweep`` axes: N first, the strategy axes with more than
        one value, then the tier bandwidths last (cheap axes innermost).  ``tp``, ``pp`` and
        ``cp`` always appear (so the grid always names the parallel layout)."""
        axes = {}
        if self.free_n:
            axes["system.num_accelerators"] = list(self.hardware_values["system.num_accelerators"])
        for k in STRATEGY_AXES:
            vals = self.strategy_values[k]
            if len(vals) > 1 or (k in ("tp", "pp", "cp") and self.mode != "hardware"):
                axes[f"strategy.{k}"] = list(vals)
        for i in self.free_tiers:
            p = f"system.tiers[{i}].bandwidth_gbps"
            axes[p] = list(self.hardware_values[p])
        return axes

    def grid_size(self) -> int:
        return int(np.prod([len(v) for v in self.exhaustive_axes().values()]))

    def with_values(self, **changes) -> Problem:
        """A copy with some axes replaced: ``tp=[...]``, ``num_accelerators=[...]``,
        ``bandwidth={tier index: [...]}``, ``capex_max_usd=...``, ``power_max_kw=...``,
        ``objective=...`` (the base configuration is adjusted to the new grid)."""
        sv = dict(self.strategy_values)
        hv = dict(self.hardware_values)
        kw = {}
        for k, v in changes.items():
            if k in STRATEGY_AXES:
                sv[k] = tuple(v)
            elif k == "num_accelerators":
                hv["system.num_accelerators"] = tuple(sorted(float(x) for x in v))
            elif k == "bandwidth":
                for i, vals in v.items():
                    hv[f"system.tiers[{int(i)}].bandwidth_gbps"] = tuple(
                        sorted(float(x) for x in vals)
                    )
            elif k in ("capex_max_usd", "power_max_kw", "objective", "name", "mode", "title"):
                kw[k] = v
            else:
                raise SpecError(
                    f"with_values.{k}",
                    v,
                    f"one of {list(STRATEGY_AXES)}, num_accelerators, bandwidth, capex_max_usd, power_max_kw, objective",
                )
        if "system.num_accelerators" in hv and len(hv["system.num_accelerators"]) == 1:
            n_fixed = hv.pop("system.num_accelerators")[0]
        else:
            n_fixed = None
        cfg = _fix_base(self.cfg, sv, hv, n_fixed)
        return dataclasses.replace(self, cfg=cfg, strategy_values=sv, hardware_values=hv, **kw)


def _pow2_upto(n: float) -> list[float]:
    out, v = [], 1.0
    while v <= n:
        out.append(v)
        v *= 2.0
    return out


def default_values(cfg: RunConfig) -> dict:
    """Default strategy values: powers of two that divide the model's heads, layers, batch."""
    m, tr, st = cfg.model, cfg.training, cfg.strategy
    n_max = float(cfg.system.num_accelerators)
    tp = [v for v in _pow2_upto(min(float(m.heads), 64.0, n_max)) if float(m.heads) % v == 0]
    pp = [v for v in _pow2_upto(min(float(m.layers), n_max)) if float(m.layers) % v == 0]
    mb = [
        v for v in _pow2_upto(min(16.0, float(tr.global_batch))) if float(tr.global_batch) % v == 0
    ]
    return {
        "tp": tp,
        "pp": pp,
        "cp": [1.0],
        "ep": [float(st.ep)],
        "microbatch": mb,
        "interleave": [float(st.interleave)],
        "recompute": list(RECOMPUTE_MODES),
        "zero": list(ZERO_STAGES),
    }


def _numbers(field: str, values, integer: bool = True) -> tuple:
    if not isinstance(values, list) or not values:
        raise SpecError(field, values, "a non-empty list of numbers")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise SpecError(field, v, "a positive number")
        if integer and v != round(v):
            raise SpecError(field, v, "a positive integer")
        out.append(float(v))
    return tuple(sorted(set(out)))


MAX_AXIS_VALUES = 100_000
"""Most values one axis of a problem grid may have (a range table is expanded on the host)."""


def _grid(field: str, spec, integer: bool) -> tuple:
    """A hardware grid from a list or a range table ``{min, max, num[, scale]}`` / ``{min, max, step}``."""
    if isinstance(spec, list):
        return _numbers(field, spec, integer)
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


def _fix_base(cfg: RunConfig, sv: dict, hv: dict, n_fixed: float | None = None) -> RunConfig:
    """The base configuration holding every one-valued axis (and the largest N of the grid)."""
    sy = cfg.system
    if n_fixed is not None:
        sy = dataclasses.replace(sy, num_accelerators=float(n_fixed))
    elif "system.num_accelerators" in hv:
        sy = dataclasses.replace(sy, num_accelerators=float(max(hv["system.num_accelerators"])))
    n = float(sy.num_accelerators)
    tiers = list(sy.tiers)
    # The outermost tier must reach the largest cluster of the grid.
    if tiers and float(tiers[-1].domain) < n:
        tiers[-1] = dataclasses.replace(tiers[-1], domain=n)
    sy = dataclasses.replace(sy, tiers=tuple(tiers))
    st = cfg.strategy
    kw = {}
    for k in ("tp", "pp", "cp", "ep", "microbatch", "interleave"):
        kw[k] = float(sv[k][0]) if len(sv[k]) == 1 else float(getattr(st, k))
    rec = (
        RECOMPUTE_MODES.index(sv["recompute"][0])
        if len(sv["recompute"]) == 1
        else int(np.argmax(st.recompute))
    )
    zero = ZERO_STAGES.index(sv["zero"][0]) if len(sv["zero"]) == 1 else int(np.argmax(st.zero))
    kw["dp"] = max(1.0, float(derive_dp(n, kw["tp"], kw["pp"], kw["cp"], np)))
    rec_v = np.eye(3)[rec]
    zero_v = np.eye(4)[zero]
    st = dataclasses.replace(st, recompute=rec_v, zero=zero_v, **kw)
    return dataclasses.replace(cfg, system=sy, strategy=st)


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
        if k not in ("capex_max_usd", "power_max_kw"):
            raise SpecError(f"constraints.{k}", cons[k], "capex_max_usd or power_max_kw")
    capex = float(cons.get("capex_max_usd", math.inf))
    power = float(cons.get("power_max_kw", math.inf))
    for k, v in (("capex_max_usd", capex), ("power_max_kw", power)):
        if not v > 0:
            raise SpecError(f"constraints.{k}", v, "a positive number")
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
    for t in search.get("tiers", []) or []:
        if not isinstance(t, dict) or "index" not in t or "bandwidth_gbps" not in t:
            raise SpecError("search.tiers", t, "tables with index and bandwidth_gbps")
        i = int(t["index"])
        bw = _grid(f"search.tiers[{i}].bandwidth_gbps", t["bandwidth_gbps"], integer=False)
        hardware[f"system.tiers[{i}].bandwidth_gbps"] = bw
    fixed_bw = {p: v[0] for p, v in hardware.items() if len(v) == 1}
    hardware = {p: v for p, v in hardware.items() if len(v) > 1}
    if mode == "strategy" and hardware:
        k = sorted(hardware)[0]
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
        if not hardware:
            raise SpecError(
                "search.mode",
                mode,
                "at least one hardware axis (num_accelerators or tiers) with several values",
            )
    n = float(system.get("num_accelerators", 0) or 0)
    st = dict(doc.get("strategy", {}) or {})
    st.setdefault("tp", 1)
    st.setdefault("pp", 1)
    st.pop("dp", None)  # dp is always derived
    tp, pp, cp = (float(st.get(k, 1)) for k in ("tp", "pp", "cp"))
    st["dp"] = max(1.0, float(derive_dp(n, tp, pp, cp, np))) if n > 0 else 1.0
    doc["strategy"] = st
    cfg = load_run_dict(doc, check=False)
    for path in [*hardware, *fixed_bw]:
        if path.startswith("system.tiers"):
            i = int(path[len("system.tiers[") : path.index("]")])
            if not 0 <= i < len(cfg.system.tiers):
                raise SpecError(
                    "search.tiers.index", i, f"a tier index below {len(cfg.system.tiers)}"
                )
    if fixed_bw:
        tiers = list(cfg.system.tiers)
        for path, v in fixed_bw.items():
            i = int(path[len("system.tiers[") : path.index("]")])
            tiers[i] = dataclasses.replace(tiers[i], bandwidth_gbps=float(v))
        cfg = dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, tiers=tuple(tiers)))
    if mode == "hardware":
        if n % (tp * pp * cp) or n < tp * pp * cp:
            raise SpecError(
                "strategy.tp*pp*cp", tp * pp * cp, f"a divisor of num_accelerators = {n:g}"
            )

    values = default_values(cfg)
    if mode == "hardware":
        s = cfg.strategy
        values = {k: [float(getattr(s, k))] for k in DEGREE_AXES}
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
        else:
            values[k] = list(_numbers(f"search.{k}", v))
    unknown = set(search) - set(STRATEGY_AXES) - {"num_accelerators", "tiers"}
    if unknown:
        k = sorted(unknown)[0]
        raise SpecError(
            f"search.{k}",
            search[k],
            f"one of {['mode', *STRATEGY_AXES, 'num_accelerators', 'tiers']}",
        )
    if objective in ("time_to_train", "cost_to_train") and float(cfg.training.tokens) <= 0:
        raise SpecError(
            "training.tokens", cfg.training.tokens, f"positive for objective {objective}"
        )
    if max(values["ep"]) > 1 and float(cfg.model.moe_experts) <= 0:
        raise SpecError("search.ep", values["ep"], "[1] for a dense model")
    sv = {k: tuple(v) for k, v in values.items()}
    cfg = _fix_base(cfg, sv, hardware)
    return Problem(
        name=name,
        cfg=cfg,
        objective=objective,
        capex_max_usd=capex,
        power_max_kw=power,
        strategy_values=sv,
        hardware_values=hardware,
        mode=mode,
        title=title,
    )


def load_problem(path: str | os.PathLike) -> Problem:
    """Parse a problem TOML file."""
    return load_problem_dict(read_toml(path, "problem"), name=Path(path).stem)
