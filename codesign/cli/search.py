"""``codesign optimize`` and ``codesign sweep``: co-design a problem file, or sweep it exhaustively.

Both print the chosen system and strategy, the exact report, the objective (and, for
``optimize``, the relaxed objective), the number of exact evaluations and the wall time.
``--distributed`` runs them over several hosts (see :mod:`codesign.search._distributed`).
Compiled programs are cached on disk under ``~/.cache/codesign/jax`` (``$CODESIGN_CACHE_DIR``;
``--no-compile-cache`` turns it off), so a repeated run skips the compile.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codesign.cli._args import add_set_argument, positive_int
from codesign.cli._describe import (
    _describe_design,
    _describe_problem,
    _design_dict,
    _fmt_obj,
    _point_json,
)

if TYPE_CHECKING:
    from codesign.search._problem import Problem

__all__ = ["register", "enable_compilation_cache"]


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str:
    """Turn on JAX's persistent compilation cache (default ``~/.cache/codesign/jax``).

    The thresholds are lowered so that every program these commands compile (the relaxed
    search, the exact evaluators, the sweep) is cached: a second run loads them from disk.
    """
    import jax

    d = Path(
        path or os.environ.get("CODESIGN_CACHE_DIR") or Path.home() / ".cache" / "codesign" / "jax"
    ).expanduser()
    d.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(d))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return str(d)


def _why_infeasible(pb: Problem, counts: dict | None, points: int) -> str:
    """Which rule excluded every point of the grid (from the sweep's counts)."""
    if counts is None:
        return (
            "no feasible design found by the optimizer; `codesign sweep` counts which rule excludes "
            "the grid (validity, memory and each constraint)"
        )
    if counts["valid"] == 0:
        return (
            f"no feasible design: none of the {points:,} grid points is a valid layout (each breaks a "
            "divisibility rule of codesign.rules: tp*pp*dp*cp = N, heads, layers, batch, experts)"
        )
    parts = [f"{counts['fits']:,} fit in memory"]
    checks = {
        "capex_max_usd": ("within_capex", "are within the capex budget"),
        "power_max_kw": ("within_power", "within the power cap"),
        "network_capex_max_usd": ("within_network_capex", "within the network budget"),
        "time_to_train_max_days": ("within_deadline", "meet the deadline"),
        "num_accelerators_max": ("within_count", "within the accelerator cap"),
        "mfu_min": ("above_mfu", "reach the minimum MFU"),
        "moe_dropped_fraction_max": ("within_dropped", "drop at most the allowed MoE tokens"),
    }
    for k, v in pb.constraints.items():
        if (k == "mfu_min" and v > 0) or (k != "mfu_min" and math.isfinite(v)):
            c, text = checks[k]
            parts.append(f"{counts[c]:,} {text}")
    return (
        f"no feasible design: of the {counts['valid']:,} valid layouts (of {points:,} grid points), "
        + ", ".join(parts)
        + ", and none satisfies all of these at once"
    )


def _print_result(
    args,
    pb: Problem,
    kind: str,
    cfg,
    report,
    objective: float,
    extra: dict,
    lines: list[str],
    why: str = "",
) -> None:
    if getattr(args, "distributed", False):
        import jax

        if jax.process_index() != 0:  # every process holds the same result; one prints it
            return
    from codesign.report import format_report, report_to_dict

    rep = report_to_dict(report, cfg) if report is not None else None
    if args.json:
        out = {
            "problem": pb.name,
            "title": pb.title,
            "mode": pb.mode,
            "command": kind,
            "objective": pb.objective,
            "objective_value": objective if math.isfinite(objective) else None,
            "grid_size": pb.grid_size(),
            "design": _design_dict(cfg) if cfg is not None else None,
            "report": rep,
            **extra,
        }
        print(json.dumps(out, indent=2))
        return
    print("\n".join(_describe_problem(pb)))
    print()
    if cfg is None:
        print(why or "no feasible design in the search space")
    else:
        print("\n".join(_describe_design(cfg)))
        print()
        print(format_report(rep, cfg))
    print()
    print("\n".join(lines))


def _write_run(args, pb: Problem, cfg, lines: list[str]) -> None:
    """``--write-run OUT.toml``: the chosen design as a run file (``codesign evaluate OUT.toml``
    reproduces its report exactly)."""
    path = getattr(args, "write_run", None)
    if path is None or cfg is None:
        return
    if getattr(args, "distributed", False):
        import jax

        if jax.process_index() != 0:
            return
    from pathlib import Path

    from codesign.runfile import run_toml

    Path(path).write_text(run_toml(cfg, title=f"{pb.title or pb.name}: chosen design"))
    lines.append(f"run file           {path}  (codesign evaluate {path} reproduces this report)")


def _show_progress(args) -> bool:
    if args.no_progress or args.json:
        return False
    if getattr(args, "distributed", False):
        import jax

        return jax.process_index() == 0
    return True


def _setup_jax(args) -> None:
    if getattr(args, "distributed", False):
        from codesign.search import initialize_distributed

        initialize_distributed()
    if not args.no_compile_cache:
        enable_compilation_cache()


def _cmd_optimize(args) -> int:
    _setup_jax(args)
    from codesign.search import Settings, choose_method, load_problem, solve

    pb = load_problem(args.problem, args.set)
    # A command runs its search once: compile it for a fast start (fast_compile), not for
    # the fastest steps.
    settings = Settings(
        steps=args.steps if args.steps is not None else Settings.steps,
        starts=args.starts if args.starts is not None else Settings.starts,
        fast_compile=True,
    )
    if args.pareto is not None:
        from codesign.cli._pareto import run_pareto

        return run_pareto(args, pb, settings)
    how, reason = choose_method(pb, args.method)
    if how == "sweep":
        if args.method == "auto" and not args.json:
            print(f"method: {reason}\n")
        args.top_k = 5
        return _cmd_sweep(args, pb=pb, command="optimize", method_line=reason)
    t0 = time.perf_counter()
    res = solve(
        pb,
        settings,
        seed=args.seed,
        method="relaxed",
        progress=_show_progress(args),
        distributed=args.distributed,
    )
    wall = time.perf_counter() - t0
    extra = {
        "method": "relaxed",
        "relaxed_objective": res.relaxed_objective,
        "gap": res.gap if math.isfinite(res.gap) else None,
        "num_exact_evals": res.num_exact_evals,
        "wall_s": wall,
        "relaxed_wall_s": res.relaxed_wall_s,
        "exact_wall_s": res.exact_wall_s,
        "point": _point_json(res.point),
        "seed": args.seed,
        "starts": settings.starts,
        "steps": settings.steps,
    }
    lines = [
        f"objective          {_fmt_obj(pb.objective, res.exact_objective)}  ({pb.objective}, exact model)",
        f"relaxed objective  {_fmt_obj(pb.objective, res.relaxed_objective)}  (gap {100 * res.gap:+.2f} % of exact)"
        if math.isfinite(res.gap)
        else f"relaxed objective  {_fmt_obj(pb.objective, res.relaxed_objective)}",
        "                   (the smooth model at the best start's continuous optimum, before rounding: "
        "a guide for the search, not a bound; the exact objective above is the answer)",
        f"exact evaluations  {res.num_exact_evals:,}  (of {pb.grid_size():,} grid points)",
        f"wall time          {wall:.2f} s  (relaxed search {res.relaxed_wall_s:.2f} s, exact discretization {res.exact_wall_s:.2f} s; "
        "includes compilation unless cached)",
        f"method             {reason}",
    ]
    why = "" if res.config is not None else _why_infeasible(pb, None, pb.grid_size())
    _write_run(args, pb, res.config, lines)
    _print_result(
        args, pb, "optimize", res.config, res.report, res.exact_objective, extra, lines, why
    )
    return 0 if res.config is not None else 1


def _within_expected_error(cfg, best: float, others: list[float]) -> str:
    """A line saying how many runners-up lie within the optimum's expected error (the held-out
    error of its setting, :func:`codesign.accuracy.held_out_error`): the model cannot rank those
    apart, so a user should weigh them on what the model leaves out.  Empty without one."""
    h = cfg.names.get("held_out") if cfg is not None else None
    if not h or not h.get("rows") or not (math.isfinite(best) and best > 0):
        return ""
    gaps = [100.0 * (v / best - 1.0) for v in others if math.isfinite(v)]
    n = sum(g <= h["mape_pct"] + 1e-9 for g in gaps)
    return (
        f"{'':<19}{n} of the {len(gaps)} runners-up within the expected error "
        f"(+-{h['mape_pct']:.1f} %) of the optimum: gaps " + ", ".join(f"+{g:.1f} %" for g in gaps)
    )


def _cmd_sweep(args, pb=None, command: str = "sweep", method_line: str = "") -> int:
    from codesign.search import distributed_sweep, load_problem
    from codesign.step import evaluate

    if pb is None:
        _setup_jax(args)
        pb = load_problem(args.problem, args.set)
    t0 = time.perf_counter()
    res = distributed_sweep(
        pb, top_k=args.top_k, progress=_show_progress(args), distributed=args.distributed
    )
    wall = time.perf_counter() - t0
    if len(res.best_values):
        cfg = res.config(0, pb.cfg)
        report = evaluate(*cfg.specs())
        best = float(res.best_values[0])
    else:
        cfg, report, best = None, None, math.inf
    top = [
        {
            "objective": float(v),
            "point": _point_json(res.point(i)),
        }
        for i, v in enumerate(res.best_values)
    ]
    extra = {
        "method": "sweep",
        "num_exact_evals": res.num_points,
        "num_valid": res.num_valid,
        "num_feasible": res.num_feasible,
        "counts": res.counts,
        "wall_s": wall,
        "sweep_wall_s": res.wall_s,
        "top": top,
    }
    lines = [
        f"objective          {_fmt_obj(pb.objective, best)}  ({pb.objective}, exact optimum of the grid)",
        f"exact evaluations  {res.num_points:,}  ({res.num_valid:,} valid, {res.num_feasible:,} feasible)",
        f"wall time          {wall:.2f} s  (sweep {res.wall_s:.2f} s; includes compilation unless cached)",
    ]
    if method_line:
        lines.append(f"method             {method_line}")
    if len(res.best_values) > 1:
        lines.append(
            "runners-up         "
            + ", ".join(_fmt_obj(pb.objective, float(v)) for v in res.best_values[1:])
        )
        close = _within_expected_error(cfg, best, [float(v) for v in res.best_values[1:]])
        if close:
            lines.append(close)
    why = ""
    if cfg is None:  # a second, diagnosing pass counts which rule left nothing feasible
        diag = distributed_sweep(
            pb, top_k=1, progress=False, distributed=args.distributed, diagnose=True
        )
        why = _why_infeasible(pb, diag.counts, diag.num_points)
    _write_run(args, pb, cfg, lines)
    _print_result(args, pb, command, cfg, report, best, extra, lines, why)
    return 0 if cfg is not None else 1


def _common_args(p) -> None:
    p.add_argument("problem", help="problem TOML file (see experiments/problems/)")
    p.add_argument(
        "--write-run",
        metavar="OUT.toml",
        default=None,
        help="write the chosen design as a run file that `codesign evaluate` reproduces",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_set_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--distributed",
        action="store_true",
        help="run over several hosts: jax.distributed.initialize() from CODESIGN_COORDINATOR, "
        "CODESIGN_NUM_PROCESSES, CODESIGN_PROCESS_ID (or the cluster's own environment)",
    )
    p.add_argument(
        "--no-compile-cache", action="store_true", help="do not use the on-disk compilation cache"
    )


def register(subparsers) -> None:
    """Add ``optimize`` and ``sweep`` to the ``codesign`` command line."""
    o = subparsers.add_parser(
        "optimize", help="co-design by gradient descent + exact discretization"
    )
    _common_args(o)
    o.add_argument(
        "--seed",
        type=int,
        default=0,
        help="PRNG seed of the multi-start (default 0); the relaxed trajectory can differ between "
        "machines with the same seed (XLA's CPU code differs in float rounding by processor), "
        "the exact answer rarely does",
    )
    o.add_argument(
        "--starts",
        type=positive_int,
        default=None,
        help="random starts (default 24; 12 or more gives every recompute x ZeRO combination a start)",
    )
    o.add_argument(
        "--steps", type=positive_int, default=None, help="Adam steps per start (default 300)"
    )
    o.add_argument(
        "--method",
        choices=["auto", "relaxed", "sweep"],
        default="auto",
        help="auto (default): sweep the grid when that is faster than compiling the relaxed "
        "search, else the relaxed search; relaxed or sweep force one",
    )
    o.add_argument(
        "--pareto",
        metavar="MIN:MAX:NUM",
        default=None,
        help="the time-cost front: minimize time to train under NUM log-spaced capex budgets "
        "from MIN to MAX USD, and mark the designs no other beats on both time and cost",
    )
    o.add_argument("--plot", metavar="OUT.png", default=None, help="with --pareto: a figure")
    o.set_defaults(func=_cmd_optimize)
    s = subparsers.add_parser(
        "sweep", help="exhaustive exact sweep of the problem's grid (the ground truth)"
    )
    _common_args(s)
    s.add_argument(
        "--top-k", type=positive_int, default=5, help="how many best points to keep (default 5)"
    )
    s.set_defaults(func=_cmd_sweep)
