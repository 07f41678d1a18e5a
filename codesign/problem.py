"""Co-design problems: a base run, an objective, constraints and the discrete design space.

A problem TOML has the tables of a run file (``[model]``, ``[training]``, ``[system]`` with
optional ``[[system.tiers]]``, optional ``[strategy]`` and ``[efficiency]``; ``[strategy]``
gives the values of whatever is not searched, e.g. ``interleave`` or ``placement``) plus::

    [objective]
    minimize = "step_time"        # step_time | time_to_train | cost_to_train | usd_per_token

    [constraints]                 # optional; memory fit is always required
    capex_max_usd = 5e7
    power_max_kw = 2000

    [search]                      # the discrete values; one value fixes a dimension
    tp = [1, 2, 4, 8]
    pp = [1, 2, 4, 8, 16, 32]
    cp = [1]
    microbatch = [1, 2, 4, 8]
    recompute = ["none", "selective", "full"]
    zero = [0, 1, 2, 3]
    num_accelerators = [256, 512, 1024]       # hardware: a grid (the optimizer uses its box)

    [[search.tiers]]
    index = 1
    bandwidth_gbps = [25, 50, 100, 200]

``dp`` is always derived as ``num_accelerators / (tp pp cp)``.  Omitted strategy axes default
to the powers of two that divide the model and batch (see :func:`default_values`), ``cp = [1]``, every recompute mode and ZeRO stage.  The grid of
:meth:`Problem.exhaustive_axes` is what ``sweep`` enumerates (the ground truth); the
optimizer (:mod:`codesign.optimize`) works on the continuous box around it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tomllib
from pathlib import Path

import numpy as np

from codesign.config import RunConfig, load_run_dict
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES, SpecError

__all__ = ["Problem", "load_problem", "load_problem_dict", "default_values", "STRATEGY_AXES", "RELAX_OBJECTIVES"]

STRATEGY_AXES = ("tp", "pp", "cp", "microbatch", "recompute", "zero")
RELAX_OBJECTIVES = ("step_time", "time_to_train", "cost_to_train", "usd_per_token")
_PROBLEM_TABLES = {"objective", "constraints", "search"}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A co-design problem (host-side description, concrete values).

    ``strategy_values`` maps each of :data:`STRATEGY_AXES` to a tuple of allowed values;
    ``hardware_values`` maps leaf paths (``system.num_accelerators``,
    ``system.tiers[i].bandwidth_gbps``) to sorted tuples of grid values.
    """

    name: str
    cfg: RunConfig
    objective: str = "step_time"
    capex_max_usd: float = math.inf
    power_max_kw: float = math.inf
    strategy_values: dict = dataclasses.field(default_factory=dict)
    hardware_values: dict = dataclasses.field(default_factory=dict)

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

    def exhaustive_axes(self) -> dict:
        """The full discrete grid as ``sweep`` axes (N first, strategy, then bandwidths last)."""
        axes = {}
        if self.free_n:
            axes["system.num_accelerators"] = list(self.hardware_values["system.num_accelerators"])
        for k in STRATEGY_AXES:
            axes[f"strategy.{k}"] = list(self.strategy_values[k])
        for i in self.free_tiers:
            p = f"system.tiers[{i}].bandwidth_gbps"
            axes[p] = list(self.hardware_values[p])
        return axes

    def grid_size(self) -> int:
        return int(np.prod([len(v) for v in self.exhaustive_axes().values()]))


def _pow2_upto(n: float) -> list[float]:
    out, v = [], 1.0
    while v <= n:
        out.append(v)
        v *= 2.0
    return out


def default_values(cfg: RunConfig) -> dict:
    """Default strategy values: powers of two that divide the model's heads, layers, batch."""
    m, tr = cfg.model, cfg.training
    n_max = float(cfg.system.num_accelerators)
    tp = [v for v in _pow2_upto(min(float(m.heads), 64.0, n_max)) if float(m.heads) % v == 0]
    pp = [v for v in _pow2_upto(min(float(m.layers), n_max)) if float(m.layers) % v == 0]
    mb = [v for v in _pow2_upto(min(16.0, float(tr.global_batch))) if float(tr.global_batch) % v == 0]
    return {
        "tp": tp,
        "pp": pp,
        "cp": [1.0],
        "microbatch": mb,
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


def load_problem_dict(doc: dict, name: str = "problem") -> Problem:
    """Parse a problem document (the dict form of a problem TOML)."""
    doc = copy.deepcopy(doc)
    name = str(doc.pop("title", name))
    obj = doc.pop("objective", {}) or {}
    cons = doc.pop("constraints", {}) or {}
    search = doc.pop("search", {}) or {}
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

    hardware: dict = {}
    system = doc.setdefault("system", {})
    if "num_accelerators" in search:
        ns = _numbers("search.num_accelerators", search["num_accelerators"])
        if len(ns) > 1:
            hardware["system.num_accelerators"] = ns
        # The outermost tier's domain must reach the largest cluster of the grid.
        system["num_accelerators"] = max(ns)
    for t in search.get("tiers", []) or []:
        if not isinstance(t, dict) or "index" not in t or "bandwidth_gbps" not in t:
            raise SpecError("search.tiers", t, "tables with index and bandwidth_gbps")
        i = int(t["index"])
        bw = _numbers(f"search.tiers[{i}].bandwidth_gbps", t["bandwidth_gbps"], integer=False)
        hardware[f"system.tiers[{i}].bandwidth_gbps"] = bw
    n = float(system.get("num_accelerators", 0) or 0)
    st = dict(doc.get("strategy", {}) or {})
    st.setdefault("tp", 1)
    st.setdefault("pp", 1)
    st.setdefault("dp", n if n > 0 else 1)
    doc["strategy"] = st
    cfg = load_run_dict(doc, check=False)
    for i in (int(p[len("system.tiers[") : p.index("]")]) for p in hardware if p.startswith("system.tiers")):
        if not 0 <= i < len(cfg.system.tiers):
            raise SpecError("search.tiers.index", i, f"a tier index below {len(cfg.system.tiers)}")

    values = default_values(cfg)
    for k in STRATEGY_AXES:
        if k not in search:
            continue
        v = search[k]
        if k == "recompute":
            if not isinstance(v, list) or not v or any(x not in RECOMPUTE_MODES for x in v):
                raise SpecError("search.recompute", v, f"a list of {list(RECOMPUTE_MODES)}")
            values[k] = [x for x in RECOMPUTE_MODES if x in v]
        elif k == "zero":
            if not isinstance(v, list) or not v or any(x not in ZERO_STAGES or isinstance(x, bool) for x in v):
                raise SpecError("search.zero", v, "a list of 0, 1, 2, 3")
            values[k] = [x for x in ZERO_STAGES if x in v]
        else:
            values[k] = list(_numbers(f"search.{k}", v))
    unknown = set(search) - set(STRATEGY_AXES) - {"num_accelerators", "tiers"}
    if unknown:
        k = sorted(unknown)[0]
        raise SpecError(f"search.{k}", search[k], f"one of {list(STRATEGY_AXES) + ['num_accelerators', 'tiers']}")
    if objective in ("time_to_train", "cost_to_train") and float(cfg.training.tokens) <= 0:
        raise SpecError("training.tokens", cfg.training.tokens, f"positive for objective {objective}")
    return Problem(
        name=name,
        cfg=cfg,
        objective=objective,
        capex_max_usd=capex,
        power_max_kw=power,
        strategy_values={k: tuple(v) for k, v in values.items()},
        hardware_values=hardware,
    )


def load_problem(path: str | os.PathLike) -> Problem:
    """Parse a problem TOML file."""
    p = Path(path)
    if not p.exists():
        raise SpecError("problem", str(p), "an existing TOML file")
    try:
        doc = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SpecError("problem", str(p), f"valid TOML ({e})") from None
    return load_problem_dict(doc, name=p.stem)
