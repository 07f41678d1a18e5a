"""Design grids: leaf paths into the specs, axis value tables, objectives, grid points.

A grid is a dict of axes, each a dotted leaf path of the specs and its values::

    {"strategy.tp": [1, 2, 4, 8], "strategy.recompute": ["none", "selective", "full"],
     "system.tiers[1].bandwidth_gbps": [25, 50, 100]}

:func:`get_leaf` and :func:`set_leaf` read and replace a leaf of the specs dict
``{"model", "training", "system", "strategy", "efficiency"}`` (pure, so they work on traced
values); :func:`axis_table` turns an axis's readable values into the numbers the model takes
(one-hot vectors for ``recompute`` and ``zero``, rank vectors for ``placement``);
:func:`config_at` builds the run configuration of one grid point (``dp`` derived).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from codesign.config import RunConfig
from codesign.goodput import PLATFORM_FIELDS
from codesign.rules import with_derived_dp
from codesign.specs import (
    PART_FIELDS,
    RECOMPUTE_MODES,
    ZERO_STAGES,
    SpecError,
    placement_ranks,
)
from codesign.workload import with_parts

__all__ = [
    "OBJECTIVES",
    "PLATFORM",
    "get_leaf",
    "set_leaf",
    "axis_table",
    "take",
    "specs_of",
    "config_at",
    "Platform",
    "platform_of",
]

OBJECTIVES = {
    "step_time": lambda r: r.step_time_s,
    "time_to_train": lambda r: r.cost["time_to_train_days"],
    "cost_to_train": lambda r: r.cost["cost_to_train_usd"],
    "usd_per_token": lambda r: r.cost["usd_per_step"] / (r.tokens_per_s * r.step_time_s),
    "energy_to_train": lambda r: r.cost["energy_to_train_mwh"],
    "neg_mfu": lambda r: -r.mfu,
}
"""Objectives (minimized) as functions of a :class:`~codesign.step.Report`."""

_PATH_RE = re.compile(r"^([a-z_][a-z0-9_]*)(\[(\d+)\])?$")


def _split(path: str) -> list:
    parts = []
    for p in path.split("."):
        m = _PATH_RE.match(p)
        if not m:
            raise SpecError(
                "sweep axis", path, "a dotted leaf path like system.tiers[1].bandwidth_gbps"
            )
        parts.append(m.group(1))
        if m.group(3) is not None:
            parts.append(int(m.group(3)))
    return parts


PLATFORM = "system.platform"
"""The pseudo-path of a platform choice: it sets ``system.accelerator``, the scale-up tier
``system.tiers[0]`` and ``efficiency`` together (values: catalog accelerator names)."""


def get_leaf(specs: dict, path: str) -> Any:
    """Read a leaf of ``{"model":…, "training":…, "system":…, "strategy":…}`` by dotted path."""
    if path == PLATFORM:
        sy = specs["system"]
        return {
            "accelerator": sy.accelerator,
            "scale_up": sy.tiers[0],
            "efficiency": specs["efficiency"],
        }
    obj: Any = specs
    for p in _split(path):
        obj = obj[p] if isinstance(p, int) or isinstance(obj, dict) else getattr(obj, p)
    return obj


def _set(obj, parts, value):
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(obj, dict):
        return {**obj, head: _set(obj[head], rest, value)}
    if isinstance(obj, tuple):
        lst = list(obj)
        lst[head] = _set(lst[head], rest, value)
        return tuple(lst)
    return dataclasses.replace(obj, **{head: _set(getattr(obj, head), rest, value)})


def set_leaf(specs: dict, path: str, value) -> dict:
    """Return ``specs`` with the leaf at ``path`` replaced (pure; works on traced values)."""
    if path == PLATFORM:
        if value is None:
            return specs
        sy = specs["system"]
        tiers = (value["scale_up"], *sy.tiers[1:])
        rel = dataclasses.replace(sy.reliability, **value.get("reliability", {}))
        sy = dataclasses.replace(sy, accelerator=value["accelerator"], tiers=tiers, reliability=rel)
        return {**specs, "system": sy, "efficiency": value["efficiency"]}
    try:
        get_leaf(specs, path)
    except (AttributeError, KeyError, IndexError, TypeError):
        raise SpecError(
            "sweep axis", path, "a leaf path of model/training/system/strategy/efficiency"
        ) from None
    out = _set(specs, _split(path), value)
    if path in _BF16_LAYER_PATHS:  # the 16-bit layers' terms join the program
        out["training"] = dataclasses.replace(out["training"], first_last_layers_bf16=True)
    part = _PART_OF.get(path)
    if part is not None and out["model"].parts is not None:  # and a model part's terms
        out["model"] = with_parts(out["model"], (part,))
    return out


_BF16_LAYER_PATHS = ("training.bf16_layers_start", "training.bf16_layers_end")
_PART_OF = {f"model.{f}": part for part, fields in PART_FIELDS.items() for f in fields}


@dataclasses.dataclass(frozen=True, eq=False)
class Platform:
    """One value of a ``system.platform`` axis: an accelerator with its own scale-up tier and
    efficiency, as a run file on it would load them (``table``: the numbers it sets)."""

    name: str
    scale_up: str
    table: dict = dataclasses.field(repr=False)

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(self.name)


def platform_of(cfg: RunConfig, name: str) -> Platform:
    """The platform of a loaded run (its accelerator, tier 0, efficiency and the reliability
    fields that belong to the platform, :data:`codesign.goodput.PLATFORM_FIELDS`)."""
    table = {
        "accelerator": cfg.system.accelerator,
        "scale_up": cfg.system.tiers[0],
        "efficiency": cfg.efficiency,
        "reliability": {
            k: jnp.asarray(getattr(cfg.system.reliability, k), dtype=float) for k in PLATFORM_FIELDS
        },
    }
    return Platform(name=name, scale_up=str(cfg.names["tiers"][0]), table=table)


def _stack(trees: list):
    return jax.tree_util.tree_map(
        lambda *xs: np.stack([np.asarray(x, dtype=float) for x in xs]), *trees
    )


def take(table, i):
    """Row(s) ``i`` of an axis table (an array, or a stacked pytree for ``system.platform``)."""
    return jax.tree_util.tree_map(lambda t: t[i], table)


def axis_table(path: str, values) -> np.ndarray:
    """Numeric value table of an axis (vectors for recompute, zero and placement)."""
    values = list(values)
    if not values:
        raise SpecError(f"sweep axis {path}", values, "a non-empty list of values")
    if path == "strategy.recompute":
        bad = [v for v in values if v not in RECOMPUTE_MODES]
        if bad:
            raise SpecError(path, bad[0], f"one of {list(RECOMPUTE_MODES)}")
        return np.eye(3)[[RECOMPUTE_MODES.index(v) for v in values]]
    if path == "strategy.zero":
        bad = [v for v in values if v not in ZERO_STAGES]
        if bad:
            raise SpecError(path, bad[0], "0, 1, 2 or 3")
        return np.eye(4)[[ZERO_STAGES.index(v) for v in values]]
    if path == "strategy.placement":
        return np.stack([placement_ranks(v) for v in values])
    if path == PLATFORM:
        bad = [v for v in values if not isinstance(v, Platform)]
        if bad:
            raise SpecError(path, bad[0], "Platform values (see codesign.search.load_problem)")
        return _stack([v.table for v in values])
    try:
        arr = np.asarray([float(v) for v in values])
    except (TypeError, ValueError):
        raise SpecError(path, values, "a list of numbers") from None
    return arr


def specs_of(cfg: RunConfig) -> dict:
    """The specs of a run configuration as the dict the grid paths index, the model with the
    parts of the layer it needs (:func:`codesign.workload.with_parts`; :func:`set_leaf` adds
    the part of a model field it sets)."""
    return {
        "model": with_parts(cfg.model),
        "training": cfg.training,
        "system": cfg.system,
        "strategy": cfg.strategy,
        "efficiency": cfg.efficiency,
    }


def config_at(cfg: RunConfig, point: dict, derive_dp: bool = True) -> RunConfig:
    """The run configuration ``cfg`` with the axis values of ``point`` (``{path: value}``)
    applied and, unless ``strategy.dp`` is an axis, ``dp`` derived as ``N / (tp pp cp)``."""
    specs = specs_of(cfg)
    names = dict(getattr(cfg, "names", {}) or {})
    for path, value in point.items():
        table = axis_table(path, [value])
        specs = set_leaf(specs, path, jax.tree_util.tree_map(lambda t: jnp.asarray(t[0]), table))
        if path == PLATFORM:
            names["accelerator"] = value.name
            names["tiers"] = [value.scale_up, *list(names.get("tiers", []))[1:]]
    specs = jax.tree_util.tree_map(
        lambda x: np.asarray(x, dtype=float) if np.ndim(x) else float(x), specs
    )
    if derive_dp and "strategy.dp" not in point:
        specs = with_derived_dp(specs, np)
        specs["strategy"] = dataclasses.replace(specs["strategy"], dp=float(specs["strategy"].dp))
    specs["model"] = dataclasses.replace(specs["model"], parts=cfg.model.parts)  # as given
    return dataclasses.replace(cfg, **specs, names=names)
