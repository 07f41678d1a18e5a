"""Co-design problems: a base run, an objective, constraints and the discrete design space.

:class:`Problem` is pure data (no search code here): the base configuration holding every
fixed value, the objective, the caps of :data:`codesign.rules.CONSTRAINTS`, the discrete
values of every strategy axis, the hardware grids (leaf paths), the platforms and the
placements to choose from.  Problem files are parsed by
:mod:`codesign.search._problem_file` (its docstring documents the schema).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from codesign.config import RunConfig
from codesign.pricing import ACCELERATOR_KNOBS
from codesign.rules import CONSTRAINTS, derive_dp
from codesign.search._grid import PLATFORM, set_leaf, specs_of
from codesign.specs import RECOMPUTE_MODES, ZERO_STAGES, Accelerator, SpecError, placement_ranks

__all__ = [
    "Problem",
    "default_values",
    "STRATEGY_AXES",
    "DEGREE_AXES",
    "RELAX_OBJECTIVES",
    "MODES",
    "ACCELERATOR_KNOBS",
    "TIER_KNOBS",
    "RELIABILITY_KNOBS",
    "LOG_FLOOR",
]

_ACCEL_FIELDS = tuple(
    f.name for f in dataclasses.fields(Accelerator) if not f.name.startswith("ref_")
)

STRATEGY_AXES = ("tp", "pp", "cp", "ep", "etp", "microbatch", "interleave", "recompute", "zero")
DEGREE_AXES = ("tp", "pp", "cp", "ep", "microbatch", "interleave")
"""The numeric (power-of-two-like) strategy axes; recompute and zero are categorical."""
RELAX_OBJECTIVES = (
    "step_time",
    "time_to_train",
    "cost_to_train",
    "usd_per_token",
    "energy_to_train",
)
# ``[search.hardware]`` keys: the accelerator fields with a marginal price, searched as
# continuous axes (codesign.pricing.ACCELERATOR_KNOBS).
RELIABILITY_KNOBS = ("checkpoint_gbps", "spares_per_domain", "checkpoint_interval_s")
"""``[search.reliability]`` fields (:class:`codesign.goodput.Reliability`) searched as
continuous axes: storage bandwidth, hot spares and checkpoint interval, priced by the
reliability spec (storage per GB/s, spares as idle accelerators).  Their grids may hold 0 (no
spares, Daly's interval), which log boxes floor at :data:`LOG_FLOOR`."""
LOG_FLOOR = 1e-3
"""Smallest value of a log2 box (a grid value of 0 is relaxed from here)."""
TIER_KNOBS = ("bandwidth_gbps", "latency_us", "oversubscription")
"""``[[search.tiers]]`` fields searched as continuous axes (``domain`` is a layout axis)."""
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
    network_capex_max_usd: float = math.inf
    time_to_train_max_days: float = math.inf
    num_accelerators_max: float = math.inf
    mfu_min: float = 0.0
    moe_dropped_fraction_max: float = math.inf
    platforms: tuple = ()
    """Catalog accelerator names to choose from (more than one: a ``system.platform`` axis)."""
    placements: tuple = ()
    """Placement orders to choose from (more than one: a ``strategy.placement`` axis)."""
    capacity_factors: tuple = ()
    """MoE capacity factors to choose from (``0``: dropless; more than one: a
    ``strategy.moe_capacity_factor`` axis).  The sweep enumerates them; the optimizer runs
    one search per value (dropless and padded are two modes, not two ends of a range)."""

    @property
    def constraints(self) -> dict:
        """Every constraint by name (:data:`codesign.rules.CONSTRAINTS`)."""
        return {k: getattr(self, k) for k in CONSTRAINTS}

    @property
    def continuous_paths(self) -> tuple[str, ...]:
        """The continuous hardware axes (accelerator knobs, tier fields, then reliability
        knobs), in grid order."""
        acc = [f"system.accelerator.{k}" for k in ACCELERATOR_KNOBS]
        acc = [p for p in acc if p in self.hardware_values]
        tiers = sorted(
            (p for p in self.hardware_values if p.startswith("system.tiers[")),
            key=lambda p: (
                _tier_of(p),
                TIER_KNOBS.index(p.rsplit(".", 1)[1]) if p.rsplit(".", 1)[1] in TIER_KNOBS else -1,
            ),
        )
        rel = [f"system.reliability.{k}" for k in RELIABILITY_KNOBS]
        rel = [p for p in rel if p in self.hardware_values]
        return tuple(acc + [p for p in tiers if not p.endswith(".domain")] + rel)

    @property
    def domain_tiers(self) -> tuple[int, ...]:
        """Tiers whose domain is searched (a layout axis)."""
        return tuple(sorted(_tier_of(p) for p in self.hardware_values if p.endswith("].domain")))

    @property
    def free_tiers(self) -> tuple[int, ...]:
        """Tiers whose bandwidth is searched."""
        return tuple(
            sorted(_tier_of(p) for p in self.hardware_values if p.endswith("].bandwidth_gbps"))
        )

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
        if len(self.platforms) > 1:
            axes["system.platform"] = list(self.platforms)
        for i in self.domain_tiers:
            p = f"system.tiers[{i}].domain"
            axes[p] = list(self.hardware_values[p])
        for k in STRATEGY_AXES:
            vals = self.strategy_values[k]
            if len(vals) > 1 or (k in ("tp", "pp", "cp") and self.mode != "hardware"):
                axes[f"strategy.{k}"] = list(vals)
        if len(self.placements) > 1:
            axes["strategy.placement"] = [list(p) for p in self.placements]
        if len(self.capacity_factors) > 1:
            axes["strategy.moe_capacity_factor"] = list(self.capacity_factors)
        for p in self.continuous_paths:
            axes[p] = list(self.hardware_values[p])
        return axes

    def grid_size(self) -> int:
        return int(np.prod([len(v) for v in self.exhaustive_axes().values()]))

    def with_values(self, **changes) -> Problem:
        """A copy with some axes replaced: ``tp=[...]``, ``num_accelerators=[...]``,
                ``bandwidth={tier index: [...]}``, ``capex_max_usd=...``, ``power_max_kw=...``,
                ``objective=...``, ``hardware={leaf path: [...]}``, ``platforms=[...]`` (names among the
        problem's platforms), ``placements=[...]``, ``capacity_factors=[...]`` and any
        constraint by name (the base configuration is adjusted to the new grid)."""
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
            elif k == "hardware":  # {leaf path: values}
                for path, vals in v.items():
                    hv[path] = tuple(sorted(float(x) for x in vals))
            elif k == "placements":
                kw[k] = tuple(tuple(x) for x in v)
            elif k == "capacity_factors":
                kw[k] = tuple(sorted({float(x) for x in v}))
            elif k == "platforms":  # Platform objects, or names among this problem's platforms
                known = {str(p): p for p in self.platforms}
                bad = [x for x in v if not hasattr(x, "table") and str(x) not in known]
                if bad:
                    raise SpecError("with_values.platforms", bad[0], f"one of {sorted(known)}")
                kw[k] = tuple(x if hasattr(x, "table") else known[str(x)] for x in v)
            elif k in (*CONSTRAINTS, "objective", "name", "mode", "title"):
                kw[k] = v
            else:
                raise SpecError(
                    f"with_values.{k}",
                    v,
                    f"one of {list(STRATEGY_AXES)}, num_accelerators, bandwidth, hardware, platforms, placements, capacity_factors, {', '.join(CONSTRAINTS)}, objective",
                )
        if "system.num_accelerators" in hv and len(hv["system.num_accelerators"]) == 1:
            n_fixed = hv.pop("system.num_accelerators")[0]
        else:
            n_fixed = None
        fixed = {p: v[0] for p, v in hv.items() if len(v) == 1}
        hv = {p: v for p, v in hv.items() if len(v) > 1}
        cfg = _fix_base(self.cfg, sv, hv, n_fixed)
        specs, names = specs_of(cfg), dict(cfg.names)
        for path, v in fixed.items():
            specs = set_leaf(specs, path, float(v))
        plats = kw.get("platforms", self.platforms)
        if len(plats) == 1:
            specs = set_leaf(specs, PLATFORM, plats[0].table)
            names["accelerator"] = plats[0].name
            names["tiers"] = [plats[0].scale_up, *names.get("tiers", [])[1:]]
        pls = kw.get("placements", self.placements)
        if len(pls) == 1:
            specs["strategy"] = dataclasses.replace(
                specs["strategy"], placement=placement_ranks(pls[0])
            )
        cfs = kw.get("capacity_factors", self.capacity_factors)
        if len(cfs) == 1:
            specs["strategy"] = dataclasses.replace(
                specs["strategy"], moe_capacity_factor=float(cfs[0])
            )
        cfg = dataclasses.replace(cfg, **specs, names=names)
        return dataclasses.replace(self, cfg=cfg, strategy_values=sv, hardware_values=hv, **kw)


def _tier_of(path: str) -> int:
    return int(path[len("system.tiers[") : path.index("]")])


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
        "etp": [float(st.etp)],
        "microbatch": mb,
        "interleave": [float(st.interleave)],
        "recompute": list(RECOMPUTE_MODES),
        "zero": list(ZERO_STAGES),
    }


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
    for k in ("tp", "pp", "cp", "ep", "etp", "microbatch", "interleave"):
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
