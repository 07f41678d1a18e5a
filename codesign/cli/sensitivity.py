"""``codesign sensitivity``: the sensitivity analysis of a run's or a problem's design.

Elasticities, bottleneck, what it would take, envelope and shadow prices of a run file's
design, or of a problem file's co-designed optimum.

Printed: the objectives at the point, a table of elasticities (``d ln f / d ln p``, strategy
fixed; ``kink l|r`` where the exact model has a kink, with its one-sided values; ``~``
marks the arc elasticity of a discrete parameter), the bottleneck, what each parameter alone
must become for the target reduction, with ``--reoptimize`` the envelope (strategy
re-optimized over ``p/2 .. 2p``), and for a problem file the shadow price of every
constraint confirmed by re-solving.  ``--json`` prints all of it for machines; ``--plot``
writes a tornado chart of the elasticities.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

from codesign.cli._args import add_set_argument

__all__ = ["register"]

_SHORT = {
    "step_time": "step time",
    "time_to_train": "time",
    "cost_to_train": "cost",
    "energy_to_train": "energy",
    "memory": "memory",
}


def _is_problem(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return "search" in doc or "objective" in doc


def _fmt_value(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-2:
        return f"{v:.3g}"
    return f"{v:,.4g}"


def _fmt_e(e) -> str:
    if e.status == "kink":
        left = "-" if e.left is None else f"{e.left:+.3f}"
        right = "-" if e.right is None else f"{e.right:+.3f}"
        return f"kink {left}|{right}"
    if e.elasticity is None:
        return "-"
    mark = "~" if e.status == "discrete" else ""
    return f"{mark}{e.elasticity:+.3f}"


def _obj_line(s) -> str:
    from codesign.sensitivity import OBJECTIVES

    parts = []
    for o, v in s.values.items():
        unit = OBJECTIVES[o][0]
        parts.append(f"{_SHORT[o]} {_fmt_value(v)} {unit}")
    fit = "fits" if s.fits else "DOES NOT FIT"
    return ", ".join(parts) + f" ({fit})"


def _text(s, title: str) -> str:
    lines = [f"sensitivity of {title}", "", "at the point: " + _obj_line(s), ""]
    lines.append(
        "elasticities d ln f / d ln p, strategy fixed (+0.5: 1 % more of the parameter, 0.5 % more "
        "of the objective; ~: arc to the neighbouring valid values of a discrete parameter; "
        "kink left|right: the exact model has a kink here, its one-sided values)"
    )
    head = f"{'parameter':34s} {'value':>11s} " + " ".join(
        f"{_SHORT[o]:>19s}" for o in s.objectives
    )
    lines.append(head)
    by = {(e.parameter, e.objective): e for e in s.elasticities}
    group = None
    for p in s.parameters:
        if p.group != group:
            group = p.group
            lines.append(f"  [{group}]")
        cells = " ".join(f"{_fmt_e(by[(p.name, o)]):>19s}" for o in s.objectives)
        lines.append(f"{p.name:34s} {_fmt_value(p.value):>11s} {cells}")
    b = s.bottleneck
    terms = ", ".join(f"{k} {100 * v:.1f} %" for k, v in b.shares.items() if v > 0.005)
    groups = ", ".join(f"{k} {100 * v:.1f} %" for k, v in b.group_shares.items() if v > 0.005)
    lines += [
        "",
        f"bottleneck: {b.dominant_term} dominates the step time ({terms})",
        f"            by resource: {groups}",
        "",
        f"what it would take: {100 * s.reduction:.0f} % less {_SHORT[s.target_objective]}, "
        "one parameter alone, strategy fixed (exact model; first-order: from the elasticity)",
    ]
    for r in s.requirements:
        if r.reachable:
            fo = f"x{r.first_order_factor:.3g}" if r.first_order_factor else "-"
            lines.append(
                f"  {r.parameter:34s} {_fmt_value(r.value):>11s} -> {_fmt_value(r.required_value):>11s}"
                f"  (x{r.factor:.3g}; first-order {fo})"
            )
    unreached = [r for r in s.requirements if not r.reachable and r.best_reduction >= 5e-4]
    for r in unreached:
        why = "at its physical bound" if r.limit == "bound" else "within x1000"
        lines.append(
            f"  {r.parameter:34s} not reachable alone: at most {100 * r.best_reduction:.1f} % "
            f"(at x{r.best_factor:.3g}, {why})"
        )
    none = [r.parameter for r in s.requirements if not r.reachable and r.best_reduction < 5e-4]
    if none:
        lines.append(
            f"  (almost) no effect on {_SHORT[s.target_objective]} (< 0.05 %): {', '.join(none)}"
        )
    if s.envelope:
        lines += [
            "",
            f"envelope: {_SHORT[s.envelope_objective]} with the strategy re-optimized "
            f"(arc elasticities over p/{s.envelope[0].factor:g} .. p*{s.envelope[0].factor:g}; "
            "absorbed: share of the fixed-strategy effect the best strategy takes up)",
        ]
        if s.best_value is not None:
            cur = s.values.get(s.envelope_objective)
            gain = f" ({100 * (1 - s.best_value / cur):.1f} % better than the run's)" if cur else ""
            lines.append(
                f"  best strategy at the point: {_strategy(s.best_strategy)}, "
                f"{_fmt_value(s.best_value)}{gain}"
            )
        for e in s.envelope:
            if e.fixed is None and e.reoptimized is None:
                continue
            if (e.fixed or 0) == 0 and (e.reoptimized or 0) == 0:
                continue
            fx = "-" if e.fixed is None else f"{e.fixed:+.3f}"
            ro = "-" if e.reoptimized is None else f"{e.reoptimized:+.3f}"
            ab = "" if e.absorbed is None else f"  absorbed {100 * e.absorbed:+.0f} %"
            ch = []
            if e.best_low:
                ch.append(f"at p/{e.factor:g}: {_strategy(e.best_low)}")
            if e.best_high:
                ch.append(f"at p*{e.factor:g}: {_strategy(e.best_high)}")
            lines.append(
                f"  {e.parameter:34s} fixed {fx:>7s}  re-optimized {ro:>7s}{ab}"
                + (f"  ({'; '.join(ch)})" if ch else "")
            )
    if s.shadow_prices:
        co = s.continuous_optimum
        lines += [
            "",
            f"shadow prices at the continuous optimum ({_SHORT[co['objective']]} "
            f"{_fmt_value(co['value'])}; "
            + ", ".join(f"{k.removeprefix('system.')} {_fmt_value(v)}" for k, v in co["x"].items())
            + "): decrease of the objective per unit of relaxed cap, confirmed by re-solving",
        ]
        from codesign.sensitivity import OBJECTIVES

        unit = OBJECTIVES[co["objective"]][0]
        for p in s.shadow_prices:
            state = "active" if p.active else "slack"
            head = f"  {p.constraint:24s} cap {_fmt_value(p.cap):>11s} {p.cap_unit:20s} {state:6s} "
            if p.status == "kink":
                lines.append(
                    head + f"kink: {p.resolved_left:.4g} tightening, {p.resolved_right:.4g} "
                    f"relaxing, {unit} per {p.cap_unit} (the multiplier gives {p.price:.4g})"
                )
                continue
            res = "-" if p.resolved is None else f"{p.resolved:.4g}"
            agr = "" if p.agreement is None else f" ({100 * p.agreement:.2f} % apart)"
            lines.append(head + f"{p.price:.4g} {unit} per {p.cap_unit}; re-solved {res}{agr}")
    for n in s.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _strategy(d: dict) -> str:
    if not d:
        return "unchanged"
    if d.get("infeasible"):
        return "nothing feasible"
    out = []
    for k, v in d.items():
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, tuple | list):  # a placement, innermost first
            v = "-".join(map(str, v))
        if k == "etp" and d.get("ep") == 1:  # no expert parallelism: nothing to shard
            continue
        if k == "etp" and v == 0:  # Megatron-Core's default
            v = "tp"
        if k == "moe_capacity_factor":  # as the design line names the routing
            out.append("dropless" if v == 0 else f"capacity={v:g}")
            continue
        out.append(f"{k}={v}")
    return " ".join(out)


def _cmd_sensitivity(args) -> int:
    from codesign.cli.search import enable_compilation_cache

    if not args.no_compile_cache:
        enable_compilation_cache()
    from codesign.sensitivity import default_objective, sensitivity, sensitivity_of_problem
    from codesign.specs import SpecError

    names = [x.strip() for x in args.parameters.split(",")] if args.parameters else None
    kw = {"reduction": args.reduction, "parameters": names}
    if not Path(args.file).is_file():
        raise SpecError("file", args.file, "an existing run or problem file")
    if _is_problem(args.file):
        from codesign.search import load_problem

        pb = load_problem(args.file, args.set)
        if args.objective:
            kw["target_objective"] = args.objective
        s = sensitivity_of_problem(pb, reoptimize=args.reoptimize, objective=args.objective, **kw)
        title = pb.title or pb.name
    else:
        from codesign.config import load_run

        cfg = load_run(args.file, args.set)
        obj = args.objective or default_objective(cfg)
        s = sensitivity(
            cfg,
            reoptimize=args.reoptimize,
            target_objective=obj,
            envelope_objective=None if obj == "memory" else obj,
            **kw,
        )
        with open(args.file, "rb") as f:
            title = str(tomllib.load(f).get("title") or Path(args.file).stem)
    if args.plot:
        from codesign.sensitivity import plot_tornado

        fig = plot_tornado(s, objective=s.target_objective)
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    if args.json:
        print(json.dumps(s.to_dict(), indent=1, allow_nan=False))
    else:
        print(_text(s, title))
        if args.plot:
            print(f"\nwrote {args.plot}")
    return 0


def _fraction(text: str) -> float:
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: a fraction in (0, 1)") from None
    if not 0.0 < v < 1.0 or math.isnan(v):
        raise argparse.ArgumentTypeError(f"{v} is invalid: a fraction in (0, 1)")
    return v


def register(subparsers) -> None:
    """Add ``sensitivity`` to the ``codesign`` command line."""
    p = subparsers.add_parser(
        "sensitivity",
        help="elasticities, bottleneck, what it would take, envelope and shadow prices",
    )
    p.add_argument("file", help="a run file (its design point) or a problem file (its optimum)")
    add_set_argument(p)
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.add_argument("--plot", metavar="OUT.png", default=None, help="a tornado chart")
    p.add_argument(
        "--reoptimize",
        action="store_true",
        help="also re-optimize the strategy at p/2 and 2p of every parameter (the envelope)",
    )
    p.add_argument(
        "--objective",
        choices=list(_SHORT),
        default=None,
        help="the objective of 'what it would take', the envelope and the shadow prices "
        "(default: the problem's, else time_to_train when the run has tokens, else step_time)",
    )
    p.add_argument(
        "--reduction",
        type=_fraction,
        default=0.10,
        help="target reduction of 'what it would take' (default 0.10)",
    )
    p.add_argument(
        "--parameters",
        default=None,
        help="comma-separated parameter names to analyze (default: all; e.g. "
        "accelerator.hbm_gb,tiers[1].bandwidth_gbps)",
    )
    p.add_argument(
        "--no-compile-cache", action="store_true", help="do not use the on-disk compilation cache"
    )
    p.set_defaults(func=_cmd_sensitivity)
