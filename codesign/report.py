"""Readable and JSON forms of a :class:`~codesign.step.Report`."""

from __future__ import annotations

__all__ = ["report_to_dict", "format_report", "GOODPUT_KEYS"]


def _f(x) -> float:
    return float(x)


def report_to_dict(report, cfg=None) -> dict:
    """A JSON-ready dict of a scalar :class:`~codesign.step.Report`."""
    from codesign.cost import CLUSTER_COST_KEYS
    from codesign.pipeline import STAGES
    from codesign.step import BREAKDOWN_KEYS, MEMORY_KEYS

    cost = {k: _f(v) for k, v in report.cost.items()}
    out = {
        "step_time_s": _f(report.step_time_s),
        "breakdown_s": {k: _f(report.breakdown_s[k]) for k in BREAKDOWN_KEYS},
        "memory_gb": {k: _f(report.memory_gb[k]) for k in MEMORY_KEYS},
        "fits": bool(report.fits),
        "mfu": _f(report.mfu),
        "hfu": _f(report.hfu),
        "tokens_per_s": _f(report.tokens_per_s),
        "model_flops_per_step": _f(report.model_flops_per_step),
        "num_microbatches": int(round(_f(report.num_microbatches))),
        "stages": {
            "layers": {k: _f(v) for k, v in report.stage_layers.items()},
            "time_stage": STAGES[int(round(_f(report.time_stage)))],
            "memory_stage": STAGES[int(round(_f(report.memory_stage)))],
        },
        "params": {k: _f(v) for k, v in report.params.items()},
        "cost": {k: cost[k] for k in CLUSTER_COST_KEYS},
    }
    if cfg is not None:
        out["config"] = cfg.names
        if float(cfg.model.moe_experts) > 0:
            from codesign import workload

            out["moe"] = {
                "capacity_factor": _f(cfg.strategy.moe_capacity_factor),
                "router_tokens": _f(workload.moe_router_tokens(cfg.model, cfg.strategy)),
                "dropped_fraction": _f(report.moe_dropped_fraction),
            }
        if float(cfg.system.reliability.enabled) > 0:
            out["goodput"] = {k: cost[k] for k in GOODPUT_KEYS}
        if float(cfg.training.tokens) > 0:
            out["time_to_train_days"] = cost["time_to_train_days"]
            out["cost_to_train_usd"] = cost["cost_to_train_usd"]
            out["energy_to_train_mwh"] = cost["energy_to_train_mwh"]
    return out


GOODPUT_KEYS = (
    "goodput",
    "failures_per_day",
    "mtbf_h",
    "checkpoint_interval_s",
    "checkpoint_write_s",
    "checkpoint_delta_s",
    "downtime_s",
    "lost_checkpoint",
    "lost_work",
    "lost_restart",
    "lost_repair",
    "spare_accelerators",
    "storage_capex_usd",
    "spare_capex_usd",
)
"""The goodput figures of the cost dict (:mod:`codesign.goodput`), in ``--json`` under
``goodput`` when ``system.reliability`` is on."""


def _goodput_lines(g: dict, preset: str | None = None) -> list[str]:
    lines = [
        f"goodput            {100 * g['goodput']:11.1f} %   ("
        + (f"reliability preset {preset}: " if preset else "")
        + f"{g['failures_per_day']:.2f} failures/day,"
        f" MTBF {g['mtbf_h']:.2f} h)",
        f"  checkpoint       {g['checkpoint_write_s']:12.1f} s write, every {g['checkpoint_interval_s']:.0f} s"
        f" (blocks {g['checkpoint_delta_s']:.1f} s)",
        f"  downtime         {g['downtime_s']:12.0f} s per failure",
    ]
    for k in ("lost_checkpoint", "lost_work", "lost_restart", "lost_repair"):
        lines.append(f"  {k:<16} {100 * g[k]:11.2f} %")
    if g["spare_accelerators"] > 0:
        lines.append(
            f"  hot spares       {g['spare_accelerators']:12.0f} accelerators"
            f"  ({g['spare_capex_usd'] / 1e6:.2f} M$ of the capex)"
        )
    lines.append(f"  storage          {g['storage_capex_usd'] / 1e6:12.2f} M$ of the capex")
    return lines


def _held_out_lines(h: dict | None) -> list[str]:
    """The expected error of the step time: the calibration's held-out error on measured runs
    of the same generation, software stack and kind of model (:func:`codesign.accuracy.held_out_error`)."""
    if not h:
        return []
    gen = str(h.get("generation") or "?").upper()
    what = f"{h['kind']} {h.get('stack') or 'default-stack'} runs on {gen}"
    unmeasured = h.get("unmeasured_architecture")
    if unmeasured:
        held = ", ".join(f"{v['mape_pct']:.1f} % ({k})" for k, v in unmeasured.items())
        return [
            f"expected error     {'unknown':>12}    no measured run of this architecture "
            f"(efficiencies of {gen});",
            f"{' ' * 35}a generation held out whole was off by {held}",
        ] + _untested_lines(h, " " * 35)
    if not h.get("rows"):
        return [f"expected error     {'unknown':>12}    no measured {what} to hold out"]
    pad = " " * 35
    lines = [
        f"expected error     {'+-' + format(h['mape_pct'], '.1f'):>12} %  held-out error on {h['rows']} "
        f"measured {what}",
        f"{pad}(mean of {h['splits']} random splits; 90 % within +-{h['p90_pct']:.1f} %)",
    ]
    if h.get("release_rows"):
        lines.append(
            f"{pad}fitted on one release of the stack, predicting the next: "
            f"+-{h['release_mape_pct']:.1f} % ({h['release_rows']} runs)"
        )
    if h.get("overridden"):
        lines.append(
            f"{pad}(figures of the calibrated preset; this run's [efficiency] overrides it)"
        )
    return lines + _untested_lines(h, pad)


def _untested_lines(h: dict, pad: str) -> list[str]:
    """Settings of the run that no measured run behind the expected error used."""
    if not h.get("untested"):
        return []
    return [f"{pad}(no measured run behind it used {', '.join(h['untested'])}: not validated)"]


def format_report(d: dict, cfg=None) -> str:
    """A readable breakdown of :func:`report_to_dict`'s output (with ``cfg``, of
    ``report_to_dict(report, cfg)`` for the same ``cfg``).

    With ``cfg``, capex and power say "hosts not counted" when the system sets no host capex
    or power per accelerator (both default to 0: accelerators and network only).
    """
    lines = []
    sy = cfg.system if cfg is not None else None
    no_host_capex = sy is not None and float(sy.host_capex_usd_per_accelerator) == 0.0
    no_host_power = sy is not None and float(sy.host_power_w_per_accelerator) == 0.0
    if cfg is not None:
        st = cfg.strategy
        rec = ("none", "selective", "full")[int(st.recompute.argmax())]
        lines.append(
            f"model {cfg.names['model']} on {int(cfg.system.num_accelerators)} x {cfg.names['accelerator']}"
            f" (tiers: {', '.join(cfg.names['tiers'])})"
        )
        lines.append(
            f"strategy tp={st.tp:g} pp={st.pp:g} dp={st.dp:g} cp={st.cp:g} ep={st.ep:g} "
            f"microbatch={st.microbatch:g} interleave={st.interleave:g} sp={bool(st.sequence_parallel)} "
            f"recompute={rec} zero={int(st.zero.argmax())}"
        )
        if float(cfg.model.moe_experts) > 0:
            import numpy as np

            from codesign.rules import expert_tp

            c = float(st.moe_capacity_factor)
            moe = d["moe"]  # report_to_dict(report, cfg) of the same cfg
            disp = "flex (DeepEP/HybridEP)" if float(st.moe_hierarchical_dispatch) else "alltoall"
            lines.append(
                f"moe etp={float(expert_tp(st, np)):g} dispatcher={disp} "
                + (
                    f"capacity={c:g} (token drop, padded; {100 * moe['dropped_fraction']:.2f} % "
                    f"of routed tokens dropped at uniform routing, "
                    f"{moe['router_tokens']:g} tokens per router)"
                    if c > 0
                    else "dropless"
                )
                + (" overlap_moe_comm=True" if float(st.overlap_moe_comm) else "")
            )
        h = float(st.outer_sync_interval)
        if h > 1:
            sites = [
                n
                for n, t in zip(cfg.names["tiers"], cfg.system.tiers, strict=True)
                if float(t.cross_site) > 0
            ]
            lines.append(
                f"outer sync every {h:g} steps across {', '.join(sites) or 'no cross-site tier'} "
                f"(DiLoCo; bytes x{float(st.outer_compression):g}, overlap "
                f"{float(st.outer_overlap):g}); convergence is outside the model: tokens x"
                f"{float(cfg.training.outer_tokens_factor):g} as given (training.outer_tokens_factor)"
            )
        lines.append("")
    step = d["step_time_s"]
    lines.append(f"step time          {step:12.4f} s")
    for k, v in d["breakdown_s"].items():
        if v != 0.0:
            lines.append(f"  {k:<16} {v:12.4f} s  {100 * v / step:5.1f} %")
    lines.append(f"tokens/s           {d['tokens_per_s']:12.1f}")
    lines.append(f"MFU                {100 * d['mfu']:11.1f} %   (HFU {100 * d['hfu']:.1f} %)")
    lines.append(f"micro-batches      {d['num_microbatches']:12.0f}")
    stg = d.get("stages")
    if (
        stg is not None
        and stg["layers"]["first"] != stg["layers"]["last"]
        or (stg is not None and stg["layers"]["middle"] not in (0.0, stg["layers"]["first"]))
    ):
        n = stg["layers"]
        lines.append(
            f"stage layers       first {n['first']:g}, middle {n['middle']:g}, last {n['last']:g}"
            f"  (slowest: {stg['time_stage']})"
        )
    lines += _held_out_lines((d.get("config") or {}).get("held_out"))
    lines.append("")
    mem = d["memory_gb"]
    where = f" ({stg['memory_stage']} stage)" if stg is not None else ""
    lines.append(
        f"memory/accelerator {mem['total']:12.2f} GB  {'fits' if d['fits'] else 'DOES NOT FIT'}"
        + where
    )
    for k in ("weights", "gradients", "optimizer", "activations", "buffers"):
        lines.append(f"  {k:<16} {mem[k]:12.2f} GB")
    lines.append("")
    c = d["cost"]
    lines.append(
        f"capex              {c['capex_usd'] / 1e6:12.2f} M$  (network {c['network_capex_usd'] / 1e6:.2f} M$"
        + (", hosts not counted" if no_host_capex else "")
        + ")"
    )
    lines.append(
        f"power              {c['power_kw']:12.1f} kW"
        + ("  (hosts not counted)" if no_host_power else "")
    )
    lines.append(
        f"cost               {c['usd_per_hour']:12.2f} $/h   {c['usd_per_step']:.4f} $/step"
    )
    lines.append(f"energy             {c['energy_kwh_per_step']:12.4f} kWh/step")
    if "goodput" in d:
        lines += _goodput_lines(d["goodput"], (d.get("config") or {}).get("reliability"))
    if "time_to_train_days" in d:
        lines.append(
            f"to train           {d['time_to_train_days']:12.2f} days  {d['cost_to_train_usd'] / 1e6:.3f} M$"
            f"  {d['energy_to_train_mwh']:.1f} MWh"
        )
    return "\n".join(lines)
