"""``codesign optimize FILE --pareto MIN:MAX:NUM``: the time-cost front over capex budgets."""

from __future__ import annotations

import json
import math
import time

import numpy as np

from codesign.cli._describe import _describe_problem, _design_dict

__all__ = ["run_pareto"]


def _budgets(text: str) -> list[float]:
    from codesign.specs import SpecError

    try:
        lo, hi, num = text.split(":")
        lo_f, hi_f, n = float(lo), float(hi), int(num)
    except ValueError:
        raise SpecError(
            "--pareto", text, "MIN:MAX:NUM capex budgets in USD, e.g. 30e6:240e6:8"
        ) from None
    if not (0 < lo_f <= hi_f and math.isfinite(hi_f) and 1 <= n <= 200):
        raise SpecError("--pareto", text, "0 < MIN <= MAX and 1 <= NUM <= 200")
    return [float(x) for x in np.geomspace(lo_f, hi_f, n)]


def run_pareto(args, pb, settings) -> int:
    """``--pareto MIN:MAX:NUM``: the time-cost front over log-spaced capex budgets."""
    from codesign.search import front, pareto

    if float(pb.cfg.training.tokens) <= 0:
        from codesign.specs import SpecError

        raise SpecError("training.tokens", pb.cfg.training.tokens, "positive for --pareto")
    budgets = _budgets(args.pareto)
    t0 = time.perf_counter()
    pts = pareto(pb, budgets, settings, seed=args.seed, method=args.method)
    wall = time.perf_counter() - t0
    keep = {id(p) for p in front(pts)}
    rows = [
        {
            "capex_max_usd": p.capex_max_usd,
            "time_to_train_days": p.time_to_train_days
            if math.isfinite(p.time_to_train_days)
            else None,
            "cost_to_train_usd": p.cost_to_train_usd
            if math.isfinite(p.cost_to_train_usd)
            else None,
            "capex_usd": p.capex_usd if math.isfinite(p.capex_usd) else None,
            "on_front": id(p) in keep,
            "method": p.result.method,
            "design": _design_dict(p.result.config) if p.result.config is not None else None,
        }
        for p in pts
    ]
    if args.json:
        print(
            json.dumps(
                {"problem": pb.name, "title": pb.title, "pareto": rows, "wall_s": wall}, indent=2
            )
        )
    else:
        print("\n".join(_describe_problem(pb)))
        print()
        print("budget M$  capex M$  days to train  M$ to train  front  design")
        for r in rows:
            if r["design"] is None:
                print(f"{r['capex_max_usd'] / 1e6:9.1f}  infeasible")
                continue
            d = r["design"]
            s = d["strategy"]
            print(
                f"{r['capex_max_usd'] / 1e6:9.1f}  {r['capex_usd'] / 1e6:8.1f}  {r['time_to_train_days']:13.2f}"
                f"  {r['cost_to_train_usd'] / 1e6:11.2f}  {'  *  ' if r['on_front'] else '     '}  "
                f"{d['num_accelerators']} x {d['accelerator']} tp{s['tp']} pp{s['pp']} dp{s['dp']}"
            )
        print(
            f"\n{len(keep)} of {len(rows)} budgets on the front (*: no other design is both faster and cheaper); {wall:.1f} s"
        )
    if args.plot:
        _plot_pareto(pts, keep, args.plot, pb)
        if not args.json:
            print(f"figure: {args.plot}")
    return 0 if keep else 1


def _plot_pareto(pts, keep, path, pb) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [p for p in pts if math.isfinite(p.time_to_train_days)]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(
        [p.cost_to_train_usd / 1e6 for p in ok],
        [p.time_to_train_days for p in ok],
        "o-",
        color="0.6",
    )
    fr = [p for p in ok if id(p) in keep]
    ax.plot(
        [p.cost_to_train_usd / 1e6 for p in fr],
        [p.time_to_train_days for p in fr],
        "o",
        color="C0",
        label="front",
    )
    for p in ok:
        ax.annotate(
            f"{p.capex_max_usd / 1e6:.0f}",
            (p.cost_to_train_usd / 1e6, p.time_to_train_days),
            fontsize=7,
        )
    ax.set_xlabel("cost to train (M$)")
    ax.set_ylabel("time to train (days)")
    ax.set_title(f"{pb.name}: capex budgets (M$)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
