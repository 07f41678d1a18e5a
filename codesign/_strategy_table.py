"""The ``[strategy]`` table of a run file: its keys, defaults and the derived ``dp``."""

from __future__ import annotations

import dataclasses

import numpy as np

from codesign._catalog import _number
from codesign.rules import derive_dp
from codesign.specs import (
    DEFAULT_PLACEMENT,
    Model,
    SpecError,
    Strategy,
    make_strategy,
    positive,
)

__all__ = ["STRATEGY_FLAGS", "STRATEGY_NUMBERS"]

DEGREES = ("tp", "pp", "cp")
"""The degrees that ``dp`` is derived from (a bad one is named as itself, not as ``dp``)."""

STRATEGY_FLAGS = (  # [strategy] keys that are true/false
    "sequence_parallel",
    "overlap_dp",
    "overlap_param_gather",
    "overlap_tp",
    "flash_attention",
    "pp_embedding_in_split",
    "pp_loss_in_split",
    "overlap_moe_comm",
    "moe_hierarchical_dispatch",
    "offload_whole_layers",
)
STRATEGY_NUMBERS = (  # [strategy] keys that are numbers
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "etp",
    "microbatch",
    "interleave",
    "pp_first_layers",
    "pp_last_layers",
    "recompute_fraction",
    "offload_activations",
    "moe_permute_copies",
    "moe_capacity_factor",
    "offload_optimizer",
    "outer_sync_interval",
    "outer_compression",
    "outer_overlap",
)


def _parse_strategy(
    sec: dict, model: Model | None = None, num_accelerators: float | None = None
) -> Strategy:
    """The ``[strategy]`` table.  ``tp`` and ``pp`` default to 1 and ``dp`` to
    ``num_accelerators / (tp pp cp)``, as Megatron-Core derives its data-parallel size.
    ``recompute_num_layers`` (Megatron's block method: layers recomputed per pipeline chunk) is
    converted to ``recompute_fraction`` with the model's layers per chunk,
    ``layers / (pp * interleave)``."""
    allowed = {f.name for f in dataclasses.fields(Strategy)} | {"recompute_num_layers"}
    for k in sec:
        if k not in allowed:
            raise SpecError(f"strategy.{k}", sec[k], f"a known key: {', '.join(sorted(allowed))}")
    kw = {"tp": 1.0, "pp": 1.0, **sec}
    for k in STRATEGY_NUMBERS:
        if k in kw:
            kw[k] = _number(f"strategy.{k}", kw[k])
    if "dp" not in kw:
        kw["dp"] = _derived_dp(kw, num_accelerators)
    for k in STRATEGY_FLAGS:
        if k in kw and not isinstance(kw[k], bool):
            raise SpecError(f"strategy.{k}", kw[k], "true or false")
    if "recompute_num_layers" in kw:
        n = positive("strategy.recompute_num_layers", kw.pop("recompute_num_layers"), integer=True)
        if "recompute_fraction" in kw:
            raise SpecError(
                "strategy.recompute_num_layers", n, "not together with strategy.recompute_fraction"
            )
        if model is not None:
            chunk = float(model.layers) / (kw["pp"] * kw.get("interleave", 1.0))
            kw["recompute_fraction"] = min(n / chunk, 1.0)
    mods = kw.get("recompute_modules")
    if mods is not None and (
        not isinstance(mods, list) or not all(isinstance(x, str) for x in mods)
    ):
        raise SpecError("strategy.recompute_modules", mods, "a list of module names")
    placement = kw.pop("placement", list(DEFAULT_PLACEMENT))
    if not isinstance(placement, list) or not all(isinstance(p, str) for p in placement):
        raise SpecError("strategy.placement", placement, "a list of the names tp, cp, ep, dp, pp")
    return make_strategy(placement=placement, **kw)


def _derived_dp(kw: dict, num_accelerators: float | None) -> float:
    """``num_accelerators / (tp pp cp)`` for a ``[strategy]`` without ``dp``, or a
    :class:`SpecError` naming the degrees when it is not a positive whole number."""
    if num_accelerators is None:
        raise SpecError("strategy.dp", None, "required (no system.num_accelerators to derive it)")
    tp, pp, cp = (positive(f"strategy.{k}", kw.get(k, 1.0), integer=True) for k in DEGREES)
    dp = float(derive_dp(num_accelerators, tp, pp, cp, np))
    if dp < 1 or tp * pp * dp * cp != num_accelerators:
        raise SpecError(
            "strategy.dp",
            f"{num_accelerators:g} / (tp {tp:g} x pp {pp:g} x cp {cp:g})",
            "a whole number >= 1: give dp, or tp, pp and cp whose product divides "
            "system.num_accelerators",
        )
    return dp
