"""Readable and JSON descriptions of problems and designs for ``codesign optimize/sweep``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from codesign.config import RunConfig
    from codesign.search._problem import Problem


def _describe_problem(pb: Problem) -> list[str]:
    cons = _constraint_texts(pb)
    cons.append("memory fit")
    axes = pb.exhaustive_axes()
    free = [
        k.split(".")[-1]
        if not k.startswith("system.tiers")
        else f"{k.rsplit('.', 1)[1].replace('_gbps', '').replace('bandwidth', 'bw')}[{k[13 : k.index(']')]}]"
        for k, v in axes.items()
        if len(v) > 1
    ]
    return [
        f"problem   {pb.title or pb.name}",
        f"mode      {pb.mode}; minimize {pb.objective}; subject to {', '.join(cons)}",
        f"grid      {pb.grid_size():,} points over {', '.join(free) or 'nothing'}",
    ]


_CONSTRAINT_TEXT = {
    "capex_max_usd": lambda v: f"capex <= {v / 1e6:g} M$",
    "power_max_kw": lambda v: f"power <= {v:g} kW",
    "network_capex_max_usd": lambda v: f"network capex <= {v / 1e6:g} M$",
    "time_to_train_max_days": lambda v: f"time to train <= {v:g} days",
    "num_accelerators_max": lambda v: f"accelerators <= {v:g}",
    "mfu_min": lambda v: f"MFU >= {v:g}",
    "moe_dropped_fraction_max": lambda v: f"MoE tokens dropped <= {100 * v:g} %",
}


def _constraint_texts(pb: Problem) -> list[str]:
    out = []
    for k, v in pb.constraints.items():
        if (k == "mfu_min" and v > 0) or (k != "mfu_min" and math.isfinite(v)):
            out.append(_CONSTRAINT_TEXT[k](v))
    return out


def _describe_design(cfg: RunConfig) -> list[str]:
    from codesign.specs import RECOMPUTE_MODES

    sy, st = cfg.system, cfg.strategy
    n = float(sy.num_accelerators)
    # A tier's domain is capped by the cluster (a grid's base reaches its largest cluster).
    tiers = ", ".join(
        f"{name} {float(t.bandwidth_gbps):g} GB/s (domain {min(float(t.domain), n):g})"
        for name, t in zip(cfg.names["tiers"], sy.tiers, strict=True)
    )

    rec = RECOMPUTE_MODES[int(st.recompute.argmax())]
    a = sy.accelerator
    lat = ", ".join(
        f"{float(t.latency_us):g} us"
        + (f" 1:{float(t.oversubscription):g}" if float(t.oversubscription) != 1 else "")
        for t in sy.tiers
    )
    from codesign.specs import placement_order

    order = placement_order(st.placement)
    from codesign.goodput import blast_radius_name

    rel = sy.reliability
    spares = (
        [
            f"goodput   spares {float(rel.spares_per_domain):g} per {blast_radius_name(rel)}, checkpoint "
            f"{float(rel.checkpoint_gbps):g} GB/s per accelerator, interval "
            + (
                f"{float(rel.checkpoint_interval_s):g} s"
                if float(rel.checkpoint_interval_s) > 0
                else "Daly-optimal"
            )
        ]
        if float(rel.enabled) > 0
        else []
    )
    return [
        f"system    {int(sy.num_accelerators)} x {cfg.names['accelerator']} ({float(a.peak_tflops):g} TFLOP/s, "
        f"{float(a.hbm_gb):g} GB at {float(a.hbm_tbps):g} TB/s); tiers: {tiers}; latency {lat}",
        *spares,
        f"placement {' < '.join(order)} (innermost first)",
        f"strategy  tp={st.tp:g} pp={st.pp:g} dp={st.dp:g} cp={st.cp:g} ep={st.ep:g} microbatch={st.microbatch:g} "
        f"interleave={st.interleave:g} recompute={rec} zero={int(st.zero.argmax())}"
        + _moe_text(cfg),
    ]


def _moe_routing(cfg: RunConfig) -> dict:
    """An MoE model's expert tensor parallelism and capacity factor (empty for a dense one)."""
    from codesign.rules import expert_tp

    if float(cfg.model.moe_experts) <= 0:
        return {}
    st = cfg.strategy
    return {
        "etp": int(float(expert_tp(st, np))),
        "moe_capacity_factor": float(st.moe_capacity_factor),
    }


def _moe_text(cfg: RunConfig) -> str:
    d = _moe_routing(cfg)
    if not d:
        return ""
    c = d["moe_capacity_factor"]
    return f" etp={d['etp']} " + ("dropless" if c <= 0 else f"capacity={c:g}")


_UNITS = {
    "step_time": "s",
    "time_to_train": "days",
    "cost_to_train": "USD",
    "usd_per_token": "USD/token",
    "energy_to_train": "MWh",
}


def _point_json(point: dict) -> dict:
    """A grid point's values as JSON (platform by name, placement as a list)."""
    out = {}
    for k, v in point.items():
        if isinstance(v, str | int | float):
            out[k] = v if isinstance(v, str) else float(v)
        elif isinstance(v, list | tuple):
            out[k] = [str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def _fmt_obj(objective: str, v: float) -> str:
    if not math.isfinite(v):
        return "infeasible"
    return f"{v:.6g} {_UNITS.get(objective, '')}"


def _design_dict(cfg: RunConfig) -> dict:
    from codesign.specs import RECOMPUTE_MODES

    sy, st = cfg.system, cfg.strategy
    n = float(sy.num_accelerators)
    return {
        "num_accelerators": int(n),
        "accelerator": cfg.names["accelerator"],
        "hbm_gb": float(sy.accelerator.hbm_gb),
        "hbm_tbps": float(sy.accelerator.hbm_tbps),
        "peak_tflops": float(sy.accelerator.peak_tflops),
        "tiers": [
            {
                "name": name,
                "bandwidth_gbps": float(t.bandwidth_gbps),
                "domain": int(min(float(t.domain), n)),
                "latency_us": float(t.latency_us),
                "oversubscription": float(t.oversubscription),
            }
            for name, t in zip(cfg.names["tiers"], sy.tiers, strict=True)
        ],
        "strategy": {
            **{
                k: int(getattr(st, k))
                for k in ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave")
            },
            "recompute": RECOMPUTE_MODES[int(st.recompute.argmax())],
            "zero": int(st.zero.argmax()),
            **_moe_routing(cfg),
        },
        **(
            {
                "reliability": {
                    k: float(getattr(sy.reliability, k))
                    for k in ("spares_per_domain", "checkpoint_gbps", "checkpoint_interval_s")
                }
            }
            if float(sy.reliability.enabled) > 0
            else {}
        ),
    }
