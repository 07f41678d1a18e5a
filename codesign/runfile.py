"""Run files from configurations: the TOML that :func:`codesign.load_run` reads back exactly.

A design found by ``codesign optimize`` or ``codesign sweep`` (or built in Python) is a
:class:`~codesign.config.RunConfig`.  :func:`run_toml` writes it as a self-contained run file:
every model, training, accelerator, tier and efficiency number explicit (no preset is
consulted when it is read back, so a later change of the catalog or of the calibrated presets
does not change what the file describes), the strategy in its readable form.  Loading the
text with :func:`codesign.config.load_run_dict` gives the same specs, and so the same report,
to the last bit (``tests/test_runfile.py``).

Example:
    >>> import tomllib
    >>> import codesign as cd
    >>> cfg = cd.config.load_run_dict({"model": {"preset": "llama3-8b"},
    ...     "training": {"global_batch": 512},
    ...     "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
    ...     "strategy": {"tp": 2, "pp": 2, "dp": 16}})
    >>> again = cd.config.load_run_dict(tomllib.loads(run_toml(cfg)))
    >>> float(cd.evaluate(*again.specs()).step_time_s) == float(cd.evaluate(*cfg.specs()).step_time_s)
    True
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from codesign._strategy_table import STRATEGY_FLAGS, STRATEGY_NUMBERS
from codesign.goodput import Reliability, blast_radius_name
from codesign.pricing import Pricing
from codesign.specs import (
    RECOMPUTE_MODES,
    RECOMPUTE_MODULES,
    ZERO_STAGES,
    Accelerator,
    Efficiency,
    Model,
    System,
    Tier,
    Training,
    placement_order,
)

__all__ = ["run_toml", "strategy_table"]


def _value(v) -> str:
    """A TOML value: floats in their shortest exact repr, integers without a point."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_value(x)}" for k, x in v.items()) + " }"
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"cannot write the non-finite value {f!r} to a run file")
    if f == int(f) and abs(f) < 2**53:
        return str(int(f))
    return repr(f)


def _fields(spec, cls, skip=()) -> dict:
    return {
        f.name: float(np.asarray(getattr(spec, f.name)))
        for f in dataclasses.fields(cls)
        if f.name not in skip and f.metadata.get("pytree_node", True)
    }


def strategy_table(strategy) -> dict:
    """The ``[strategy]`` table of a concrete strategy in its readable form (recompute and ZeRO
    by name, placement as an order, flags as booleans, recomputed modules as a list)."""
    st = strategy
    out = {k: float(np.asarray(getattr(st, k))) for k in STRATEGY_NUMBERS}
    for k in STRATEGY_FLAGS:
        out[k] = bool(float(np.asarray(getattr(st, k))) > 0.5)
    out["recompute"] = RECOMPUTE_MODES[int(np.argmax(np.asarray(st.recompute)))]
    out["zero"] = ZERO_STAGES[int(np.argmax(np.asarray(st.zero)))]
    mods = np.asarray(st.recompute_modules, dtype=float)
    out["recompute_modules"] = [m for m, w in zip(RECOMPUTE_MODULES, mods, strict=True) if w > 0.5]
    out["placement"] = list(placement_order(st.placement))
    return out


def _check_exact(strategy) -> None:
    """A run file holds one discrete configuration: reject relaxed (soft) choices."""
    for name in ("recompute", "zero"):
        v = np.asarray(getattr(strategy, name), dtype=float)
        if not np.all((v == 0) | (v == 1)):
            raise ValueError(f"strategy.{name} = {v.tolist()} is not one-hot: discretize first")


def run_toml(cfg, title: str | None = None) -> str:
    """The run file (TOML text) of a concrete :class:`~codesign.config.RunConfig`."""
    _check_exact(cfg.strategy)
    lines = []
    if title:
        lines.append(f"title = {_value(title)}")
    names = getattr(cfg, "names", {}) or {}
    origin = ", ".join(f"{k} {v}" for k, v in names.items() if isinstance(v, str))
    lines.append(
        "# Written by codesign: every number explicit, no preset consulted when read back"
        + (f" (from {origin})" if origin else "")
        + "."
    )
    lines.append("")
    lines.append("[model]")
    lines += [f"{k} = {_value(v)}" for k, v in _fields(cfg.model, Model).items()]
    lines.append("")
    lines.append("[training]")
    lines += [f"{k} = {_value(v)}" for k, v in _fields(cfg.training, Training).items()]
    lines.append(f"precision = {_value(cfg.training.precision)}")
    lines.append("")
    lines.append("[system]")
    lines += [f"{k} = {_value(v)}" for k, v in _fields(cfg.system.accelerator, Accelerator).items()]
    lines += [
        f"{k} = {_value(v)}"
        for k, v in _fields(
            cfg.system, System, skip=("accelerator", "tiers", "pricing", "reliability")
        ).items()
    ]
    lines.append("")
    lines.append("[system.pricing]")
    lines += [f"{k} = {_value(v)}" for k, v in _fields(cfg.system.pricing, Pricing).items()]
    rel = cfg.system.reliability
    lines.append("")
    lines.append("[system.reliability]")
    if float(rel.enabled) <= 0:  # a run file without the table gets the platform's preset
        lines.append('preset = "none"')
    else:
        lines += [
            f"{k} = {_value(v)}"
            for k, v in _fields(rel, Reliability, skip=("blast_radius",)).items()
        ]
        w = np.asarray(rel.blast_radius, dtype=float)
        blast = blast_radius_name(rel) if np.isin(w, (0.0, 1.0)).all() else w.tolist()
        lines.append(f"blast_radius = {_value(blast)}")
    tier_names = names.get("tiers") or [f"tier{i}" for i in range(len(cfg.system.tiers))]
    for name, tier in zip(tier_names, cfg.system.tiers, strict=True):
        lines.append("")
        lines.append("[[system.tiers]]")
        lines.append(f"name = {_value(str(name))}")
        lines += [f"{k} = {_value(v)}" for k, v in _fields(tier, Tier).items()]
    lines.append("")
    lines.append("[strategy]")
    lines += [f"{k} = {_value(v)}" for k, v in strategy_table(cfg.strategy).items()]
    lines.append("")
    lines.append("[efficiency]")
    lines.append('preset = "uncalibrated"  # every field below is explicit')
    lines += [f"{k} = {_value(v)}" for k, v in _fields(cfg.efficiency, Efficiency).items()]
    held = names.get("held_out")
    if held:  # the measured accuracy of the preset these values came from travels with them
        stats = {
            k: v for k, v in held.items() if k not in ("generation", "stack", "kind", "overridden")
        }
        lines.append(f"calibrated_generation = {_value(str(held['generation']))}")
        lines.append(
            "calibrated_held_out_error = "
            + _value({held["stack"] or "": {held["kind"]: stats}})
            + "  # the preset's held-out errors (codesign evaluate's expected error)"
        )
        if held["stack"]:
            lines.append(f"stack = {_value(held['stack'])}")
    return "\n".join(lines) + "\n"
