"""Benchmark: gradient co-design (relaxed search + exact discretization) against the exhaustive
sweep and against equal-budget random search, over every shipped problem file.

The suite is every ``experiments/problems/*.toml`` (discovered at run time, sorted) plus a
few capex-budget variants of some of them.  Per problem it reports:

* the grid size and the method :func:`codesign.search.choose_method` picks for
  ``codesign optimize`` (``sweep`` or ``relaxed``);
* the relaxed optimizer's (:func:`codesign.search.optimize`, i.e. ``--method relaxed``) exact
  objective over the exhaustive optimum (**relaxed opt/ex**: the target is <= 1.01 on every
  problem), and the auto result's (1 when it sweeps);
* warm wall times of the relaxed optimizer and of the sweep (and each one's first call in
  this process, which includes compiling what was not compiled yet);
* ``pp`` at the exhaustive optimum (problems whose optimum has ``pp = 1`` are flagged);
* random search with the optimizer's number of exact evaluations (points drawn uniformly
  without replacement from the grid's valid points; seed 0, and the median of seeds 0-9),
  over the exhaustive optimum (``--no-random`` skips it).

Then

* a **cold end-to-end study**: ``codesign optimize FILE --json --no-progress
  --no-compile-cache`` (method auto) and ``codesign sweep FILE ...`` as fresh processes,
  process wall time, on every problem whose grid has >= 1e7 points and, for the record, two
  small ones (with ``--method relaxed`` forced too where auto sweeps); the target is auto <=
  sweep on every problem >= 1e7 points;
* a **scaling study**: one problem's hardware grid refined from ~1e6 to ~1e9 points, warm
  optimizer against warm sweep (target >= 50x at >= 1e9 points);
* the figures ``experiments/results/scaling.png`` (wall time against grid size),
  ``convergence.png`` (relaxed objective against iteration for every start, the rounded
  and final exact points, best exact objective against exact evaluations for the
  optimizer and random search) and ``pareto.png`` (the time-cost front over capex budgets
  by :func:`codesign.search.pareto`, relaxed against exhaustive);

and writes ``experiments/results/codesign_bench.md`` (tables and each target, met or not)
and ``codesign_bench.json``; ``--quick`` writes ``codesign_bench_quick.{md,json}`` and
``*_quick.png`` instead.

Usage: python experiments/bench_codesign.py [--quick] [--max-grid 1.1e9] [--no-random]
       [--no-cold] [--only SUBSTRING ...]
"""

from __future__ import annotations

import os
import sys

# The environment the user's shell gave us, before this script adds XLA_FLAGS: the cold
# study runs the command line in it (what `codesign optimize` sees when a user runs it).
_ENV0 = dict(os.environ)
# One JAX CPU device per core: the in-process exhaustive sweep shards over them.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count()}")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "experiments" / "problems"
RESULTS = ROOT / "experiments" / "results"
sys.path.insert(0, str(ROOT))

from codesign.search import (  # noqa: E402
    ExactEvaluator,
    Settings,
    choose_method,
    distributed_sweep,
    front,
    load_problem,
    optimize,
    pareto,
    random_search,
    valid_points,
)

RANDOM_SEEDS = 10
TARGET_RATIO = 1.01  # the relaxed optimizer within 1 % of the exhaustive optimum
COLD_MIN_GRID = 1e7  # cold target: auto no slower than the sweep on grids this large
SCALING_MIN_GRID = 1e9  # scaling target: >= 50x warm at grids this large
SCALING_TARGET = 50.0
MIN_SUITE = 24
MIN_PP1 = 3  # "several" problems with the optimum at pp = 1
RANDOM_MAX_SUBGRID = 2e7  # random search enumerates the valid non-bandwidth points: skip above
COLD_TIE = (0.10, 2.0)  # auto that runs the same sweep: within 10 % + 2 s of it is a tie

# Budget variants of shipped problems: (file stem, label, constraint changes).
VARIANTS = [
    ("llama3-70b-codesign-3tier", "llama3-70b-codesign-3tier@60M$", {"capex_max_usd": 60e6}),
    ("llama3-70b-codesign-3tier", "llama3-70b-codesign-3tier@240M$", {"capex_max_usd": 240e6}),
    ("gpt3-175b-a100-codesign-cost", "gpt3-175b-a100-codesign@30M$", {"capex_max_usd": 30e6}),
    ("gpt3-175b-libra-hardware", "gpt3-175b-libra-hardware@22M$", {"capex_max_usd": 22e6}),
    ("llama3-405b-budget-200m", "llama3-405b-budget@300M$", {"capex_max_usd": 300e6}),
]
QUICK = [
    "llama3-8b-64xh100-step",
    "gpt3-175b-libra-hardware",
    "mixtral-8x7b-codesign-time",
    "llama3-70b-codesign-3tier",
]

SCALING_PROBLEM = "llama3-70b-codesign-3tier"
# (N values, NVLink values, scale-out values, cross-building values) per level.
SCALING_LEVELS = [
    (7, 2, 8, 8),
    (15, 2, 16, 16),
    (15, 4, 32, 32),
    (15, 4, 64, 64),
    (15, 24, 64, 64),
]

PARETO_PROBLEM = "llama3-70b-codesign-3tier"


def build_suite(quick: bool, only: list[str] | None) -> list[tuple[str, str, dict]]:
    """``[(file stem, label, constraint changes)]``: every problem file (sorted), each
    followed by its budget variants; ``--quick``: the QUICK files that exist, no variants."""
    stems = sorted(p.stem for p in PROBLEMS.glob("*.toml"))
    suite = []
    for s in stems:
        if quick and s not in QUICK:
            continue
        suite.append((s, s, {}))
        if not quick:
            suite += [v for v in VARIANTS if v[0] == s]
    if only:
        suite = [e for e in suite if any(o in e[1] for o in only)]
    return suite


def _fmt_s(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _fmt_r(x, nd: int = 4) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def _clear_compiled() -> None:
    """Forget every compiled program (JAX's caches and codesign's cached builders)."""
    from codesign.search import _anneal, _evaluator, _sweep

    for f in (
        _anneal._compiled_init,
        _anneal._compiled_segment,
        _evaluator._compiled_points,
        _sweep._compiled_call,
    ):
        f.cache_clear()
    jax.clear_caches()


def load(stem: str, changes: dict):
    pb = load_problem(PROBLEMS / f"{stem}.toml")
    return pb.with_values(**changes) if changes else pb


def timed(fn):
    """``(result, seconds)`` of one call."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def exhaustive(pb, block_size: int = 4096):
    return distributed_sweep(pb, top_k=1, progress=False, block_size=block_size)


def _ratio(value: float, best: float) -> float:
    """``value / best``; 1 when both are infinite (nothing feasible, and none claimed)."""
    if not math.isfinite(best):
        return 1.0 if not math.isfinite(value) else math.nan
    return value / best


def _subgrid_size(ev) -> int:
    """Points of the grid's non-bandwidth axes (what :func:`valid_points` enumerates)."""
    return int(
        np.prod([ev.shape[a] for a, p in enumerate(ev.paths) if not p.startswith("system.tiers[")])
    )


def run_problem(label: str, pb, settings: Settings, seen_spaces: set, args) -> dict:
    from codesign.search import relax

    method, reason = choose_method(pb)
    space = relax.space_of(pb)
    new_space = (space, pb.num_tiers) not in seen_spaces
    seen_spaces.add((space, pb.num_tiers))
    grid = pb.grid_size()
    opt, opt_cold = timed(lambda: optimize(pb, settings, seed=0))
    opt, opt_warm = timed(lambda: optimize(pb, settings, seed=0))
    ex, ex_cold = timed(lambda: exhaustive(pb))
    if grid <= args.warm_sweep_max:
        ex, ex_warm = timed(lambda: exhaustive(pb))
    else:
        ex_warm = math.nan
    feasible = len(ex.best_values) > 0 and math.isfinite(float(ex.best_values[0]))
    best = float(ex.best_values[0]) if feasible else math.inf
    ex_cfg = ex.config(0, pb.cfg) if feasible else None
    ratio = _ratio(opt.exact_objective, best)

    row = {
        "problem": label,
        "mode": pb.mode,
        "objective": pb.objective,
        "tiers": pb.num_tiers,
        "grid": grid,
        "auto_method": method,
        "auto_reason": reason,
        "valid": ex.num_valid,
        "feasible": ex.num_feasible,
        "exhaustive_opt": best,
        "opt": opt.exact_objective,
        "ratio": ratio,
        "auto_ratio": 1.0 if method == "sweep" else ratio,
        "rounded_ratio": _ratio(opt.rounded_objective, best),
        "relaxed_ratio": _ratio(opt.relaxed_objective, best),
        "pp_ex": float(ex_cfg.strategy.pp) if ex_cfg is not None else None,
        "pp_opt": float(opt.config.strategy.pp) if opt.config is not None else None,
        "opt_evals": opt.num_exact_evals,
        "opt_warm_s": opt_warm,
        "opt_cold_s": opt_cold,
        "opt_cold_compiled_relaxed": new_space,
        "opt_relaxed_s": opt.relaxed_wall_s,
        "opt_exact_s": opt.exact_wall_s,
        "local_iters": opt.local_iters,
        "ex_evals": ex.num_points,
        "ex_warm_s": ex_warm,
        "ex_cold_s": ex_cold,
        "random": None,
        "point": {
            k: (float(v) if isinstance(v, int | float) else str(v)) for k, v in opt.point.items()
        },
    }

    rnd_text = "random skipped"
    if not args.no_random and feasible:
        ev = ExactEvaluator(pb)
        sub = _subgrid_size(ev)
        if sub <= RANDOM_MAX_SUBGRID:
            vp = valid_points(pb, ev)
            rnd = [
                random_search(pb, opt.num_exact_evals, seed=s, ev=ev, valid=vp)[0]
                for s in range(RANDOM_SEEDS)
            ]
            row["random"] = {
                "seed0": rnd[0] / best,
                "median": float(np.median(rnd)) / best,
                "best_of_seeds": min(rnd) / best,
                "hits": int(sum(r <= best * (1 + 1e-12) for r in rnd)),
            }
            r = row["random"]
            rnd_text = (
                f"random seed0 {r['seed0']:.4f}, median {r['median']:.4f}, "
                f"hits {r['hits']}/{RANDOM_SEEDS}"
            )
        else:
            rnd_text = f"random skipped ({sub:.2g} non-bandwidth points)"
    pp = row["pp_ex"]
    print(
        f"{label:36s} {grid:>13,} pts auto={method:7s} opt/ex {_fmt_r(ratio)}  pp*={pp if pp is None else int(pp)}  "
        f"opt {_fmt_s(opt_warm)} s warm ({_fmt_s(opt_cold)} s first{' +compile' if new_space else ''}), "
        f"{opt.num_exact_evals:,} evals | ex {_fmt_s(ex_warm)} s warm ({_fmt_s(ex_cold)} s first) | {rnd_text}",
        flush=True,
    )
    return row


# ---------------------------------------------------------------------------------------------
# Cold end-to-end: the command line as fresh processes, no on-disk compilation cache.


def cli_command() -> list[str]:
    """The ``codesign`` console script next to this interpreter (or the same entry point)."""
    exe = Path(sys.executable).parent / "codesign"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from codesign.cli import main; raise SystemExit(main())"]


def cold_env(kind: str) -> dict:
    """``plain``: the environment this script was started in (JAX sees one CPU device unless
    the user set XLA_FLAGS), ``bench``: this process's (one CPU device per core).  No JAX
    compilation cache either way."""
    env = dict(_ENV0 if kind == "plain" else os.environ)
    for k in list(env):
        if k.startswith("JAX_COMPILATION_CACHE") or k.startswith("JAX_PERSISTENT_CACHE"):
            env.pop(k)
    env.pop("CODESIGN_CACHE_DIR", None)
    return env


def set_constraints(text: str, changes: dict) -> str:
    """The problem file ``text`` with ``[constraints]`` values replaced or added."""
    lines = text.splitlines()
    for key, val in changes.items():
        entry = f"{key} = {float(val)!r}"
        head = next((i for i, ln in enumerate(lines) if ln.strip() == "[constraints]"), None)
        if head is None:
            lines += ["", "[constraints]", entry]
            continue
        end = next(
            (j for j in range(head + 1, len(lines)) if lines[j].lstrip().startswith("[")),
            len(lines),
        )
        pat = re.compile(rf"^\s*{re.escape(key)}\s*=")
        hit = next((j for j in range(head + 1, end) if pat.match(lines[j])), None)
        if hit is None:
            lines.insert(head + 1, entry)
        else:
            lines[hit] = entry
    return "\n".join(lines) + "\n"


def problem_file(stem: str, changes: dict, tmp: Path, pb) -> Path:
    """The problem's file; for a variant, a temporary copy with the changed constraints
    (checked to load as the same problem as ``pb``)."""
    src = PROBLEMS / f"{stem}.toml"
    if not changes:
        return src
    path = tmp / (stem + "".join(f"-{k}-{v:g}" for k, v in changes.items()) + ".toml")
    path.write_text(set_constraints(src.read_text(), changes))
    back = load_problem(path)
    if back.constraints != pb.constraints or back.grid_size() != pb.grid_size():
        raise RuntimeError(f"{path}: the temporary problem file does not reproduce the variant")
    return path


def run_cli(args: list[str], env: dict, timeout: float) -> dict:
    """Run ``codesign ARGS`` as a fresh process: its wall time and what its JSON says."""
    t = time.perf_counter()
    try:
        p = subprocess.run(
            cli_command() + args,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"wall_s": time.perf_counter() - t, "rc": None, "error": "timeout"}
    wall = time.perf_counter() - t
    out = {"wall_s": wall, "rc": p.returncode}
    try:
        doc = json.loads(p.stdout)
        out.update(
            method=doc.get("method"),
            objective_value=doc.get("objective_value"),
            inner_wall_s=doc.get("wall_s"),
        )
    except json.JSONDecodeError:
        out["error"] = (p.stderr.strip().splitlines() or ["no JSON output"])[-1][:300]
    return out


def cold_study(suite: list, rows: list[dict], args) -> dict:
    env = cold_env(args.cold_env)
    # Page in Python, JAX and codesign once, so that no timed run pays the first disk reads.
    subprocess.run(
        [sys.executable, "-c", "import jax, codesign.search"], env=env, cwd=ROOT, check=True
    )
    devices = subprocess.run(
        [sys.executable, "-c", "import jax; print(len(jax.devices()))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    by_label = {r["problem"]: r for r in rows}
    big = [e for e in suite if by_label[e[1]]["grid"] >= args.cold_min_grid]
    small = sorted(
        (e for e in suite if not e[2] and by_label[e[1]]["grid"] < args.cold_min_grid),
        key=lambda e: by_label[e[1]]["grid"],
    )
    # For the record: the smallest and the largest smaller grid (--quick: the smallest).
    picks = big + (small[:1] if args.quick or len(small) < 2 else [small[0], small[-1]])
    flags = ["--json", "--no-progress", "--no-compile-cache"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for stem, label, changes in picks:
            r = by_label[label]
            path = str(problem_file(stem, changes, Path(tmp), load(stem, changes)))
            sw = run_cli(["sweep", path, *flags], env, args.cold_timeout)
            auto = run_cli(["optimize", path, *flags], env, args.cold_timeout)
            relaxed = None
            if auto.get("method") != "relaxed":
                relaxed = run_cli(
                    ["optimize", path, "--method", "relaxed", *flags], env, args.cold_timeout
                )
            best = r["exhaustive_opt"]

            def rat(res, best=best):
                if res is None:
                    return None
                v = res.get("objective_value")
                return _ratio(v if v is not None else math.inf, best)

            same = auto.get("method") == "sweep"
            tol_rel, tol_abs = COLD_TIE
            met = auto["wall_s"] <= sw["wall_s"] or (
                same and auto["wall_s"] <= sw["wall_s"] * (1 + tol_rel) + tol_abs
            )
            row = {
                "problem": label,
                "grid": r["grid"],
                "big": r["grid"] >= args.cold_min_grid,
                "auto": auto,
                "sweep": sw,
                "relaxed": relaxed,
                "auto_ratio": rat(auto),
                "sweep_ratio": rat(sw),
                "relaxed_ratio": rat(relaxed),
                "auto_over_sweep": auto["wall_s"] / sw["wall_s"],
                "met": bool(met and auto.get("rc") in (0, 1) and sw.get("rc") in (0, 1)),
            }
            out.append(row)
            print(
                f"cold {label:36s} {r['grid']:>13,} pts: optimize (auto -> {auto.get('method')}) "
                f"{_fmt_s(auto['wall_s'])} s, sweep {_fmt_s(sw['wall_s'])} s"
                + (f", optimize --method relaxed {_fmt_s(relaxed['wall_s'])} s" if relaxed else "")
                + f"; auto/sweep {row['auto_over_sweep']:.2f}, auto opt/ex {_fmt_r(row['auto_ratio'])}"
                + ("" if all(x.get("error") is None for x in (auto, sw)) else " (errors!)"),
                flush=True,
            )
    return {"env": args.cold_env, "devices": devices, "min_grid": args.cold_min_grid, "rows": out}


# ---------------------------------------------------------------------------------------------
# Scaling, Pareto, convergence.


def scaling_study(settings: Settings, levels, max_grid: float, warm_sweep_max: float) -> list:
    base = load(SCALING_PROBLEM, {})
    rows = []
    n_all = list(range(512, 4097, 256))
    n_orig = list(base.hardware_values["system.num_accelerators"])
    for n_n, n0, n1, n2 in levels:
        pb = base.with_values(
            num_accelerators=n_orig if n_n == len(n_orig) else n_all,
            bandwidth={
                0: np.geomspace(225, 900, n0),
                1: np.geomspace(12.5, 100, n1),
                2: np.geomspace(1.5625, 50, n2),
            },
        )
        g = pb.grid_size()
        if g > max_grid * 1.01:
            print(f"scaling: skipping {g:.3g} points (> --max-grid {max_grid:.3g})")
            continue
        block = int(max(4096, min(1 << 14, n1 * n2)))
        ex, ex_first = timed(lambda: exhaustive(pb, block_size=block))  # noqa: B023
        if g <= warm_sweep_max:
            ex, ex_warm = timed(lambda: exhaustive(pb, block_size=block))  # noqa: B023
        else:
            ex_warm = math.nan
        opt, opt_first = timed(lambda: optimize(pb, settings, seed=0))  # noqa: B023
        opt, opt_warm = timed(lambda: optimize(pb, settings, seed=0))  # noqa: B023
        best = float(ex.best_values[0])
        row = {
            "grid": g,
            "levels": [n_n, n0, n1, n2],
            "block": block,
            "ex_first_s": ex_first,
            "ex_warm_s": ex_warm,
            "opt_first_s": opt_first,
            "opt_warm_s": opt_warm,
            "opt_evals": opt.num_exact_evals,
            "ratio": opt.exact_objective / best,
            "exhaustive_opt": best,
        }
        rows.append(row)
        print(
            f"scaling {g:>14,} points: exhaustive {_fmt_s(ex_first)} s first / {_fmt_s(ex_warm)} s warm; "
            f"optimizer {_fmt_s(opt_warm)} s warm ({_fmt_s(opt_first)} s first), "
            f"{opt.num_exact_evals:,} evals, opt/ex {row['ratio']:.4f}",
            flush=True,
        )
    # Warm sweep time where only the first call ran: minus the compile of the largest level
    # with the same block size whose warm time was measured (first - warm there).
    for r in rows:
        if math.isfinite(r["ex_warm_s"]):
            r["ex_warm_est_s"], r["ex_warm_how"] = r["ex_warm_s"], "measured"
            continue
        ref = [q for q in rows if q["block"] == r["block"] and math.isfinite(q["ex_warm_s"])] or [
            q for q in rows if math.isfinite(q["ex_warm_s"])
        ]
        if ref:
            comp = max(ref[-1]["ex_first_s"] - ref[-1]["ex_warm_s"], 0.0)
            r["ex_warm_est_s"] = max(r["ex_first_s"] - comp, 1e-9)
            r["ex_warm_how"] = (
                f"first call - {comp:.1f} s compile (from {ref[-1]['grid']:.3g} points)"
            )
        else:
            r["ex_warm_est_s"], r["ex_warm_how"] = r["ex_first_s"], "first call (with compile)"
    for r in rows:
        r["ex_rate_mpts"] = r["grid"] / r["ex_warm_est_s"] / 1e6
        r["speedup_warm"] = r["ex_warm_est_s"] / r["opt_warm_s"]
    return rows


def _pareto_row(p) -> dict | None:
    if not math.isfinite(p.time_to_train_days):
        return None
    cfg = p.result.config
    return {
        "time_to_train_days": p.time_to_train_days,
        "cost_to_train_usd": p.cost_to_train_usd,
        "capex_usd": p.capex_usd,
        "num_accelerators": float(cfg.system.num_accelerators),
        "pp": float(cfg.strategy.pp),
        "objective": p.result.exact_objective,
    }


def pareto_study(settings: Settings, budgets) -> dict:
    base = load(PARETO_PROBLEM, {})
    out = {}
    for method in ("relaxed", "sweep"):
        pts, wall = timed(
            lambda: pareto(base, budgets, settings, seed=0, method=method)  # noqa: B023
        )
        on = {id(p) for p in front(pts)}
        out[method] = {"wall_s": wall, "points": pts, "on_front": on}
    rows = []
    for i, b in enumerate(budgets):
        row = {"budget_usd": float(b)}
        for method, key in (("relaxed", "opt"), ("sweep", "ex")):
            p = out[method]["points"][i]
            row[key] = _pareto_row(p)
            if row[key] is not None:
                row[key]["on_front"] = id(p) in out[method]["on_front"]
        o, e = row["opt"], row["ex"]
        row["ratio"] = o["time_to_train_days"] / e["time_to_train_days"] if o and e else None
        rows.append(row)
        print(
            f"pareto budget {b / 1e6:7.1f} M$: relaxed "
            + (
                f"{o['time_to_train_days']:.2f} days {o['cost_to_train_usd'] / 1e6:.2f} M$"
                if o
                else "infeasible"
            )
            + " | exhaustive "
            + (
                f"{e['time_to_train_days']:.2f} days {e['cost_to_train_usd'] / 1e6:.2f} M$"
                if e
                else "infeasible"
            ),
            flush=True,
        )
    return {
        "rows": rows,
        "relaxed_wall_s": out["relaxed"]["wall_s"],
        "sweep_wall_s": out["sweep"]["wall_s"],
    }


def convergence_data(settings: Settings, stem: str) -> dict:
    pb = load(stem, {})
    opt = optimize(pb, settings, seed=0)
    ex = exhaustive(pb)
    ev = ExactEvaluator(pb)
    vp = valid_points(pb, ev)
    # Random search's best-so-far curves (seeds 0-4) with the optimizer's budget.
    curves = []
    for seed in range(5):
        _, _, run = random_search(pb, opt.num_exact_evals, seed=seed, ev=ev, valid=vp, trace=True)
        curves.append([float(f"{x:.6g}") for x in run])
    return {
        "problem": pb.name,
        "title": pb.title,
        "objective": pb.objective,
        "objective_history": [[float(f"{x:.5g}") for x in row] for row in opt.objective_history],
        "violation_history": [[float(f"{x:.3g}") for x in row] for row in opt.violation_history],
        "best_start": opt.best_start,
        "rounded": opt.rounded_objective,
        "exact": opt.exact_objective,
        "trace": opt.exact_trace,
        "exhaustive_opt": float(ex.best_values[0]),
        "random_curves": curves,
        "start_combos": [list(map(str, c)) for c in opt.start_combos],
    }


# ---------------------------------------------------------------------------------------------
# Targets, figures, markdown.


def summarize(result: dict) -> dict:
    rows = result["suite"]
    n = len(rows)
    bad = [r for r in rows if not (r["ratio"] <= TARGET_RATIO)]  # NaN counts as a failure
    bad_auto = [r for r in rows if not (r["auto_ratio"] <= TARGET_RATIO)]
    pp1 = [r["problem"] for r in rows if r["pp_ex"] == 1.0]
    rnd = [r for r in rows if r["random"]]
    s = {
        "n": n,
        "suite_ok": n >= MIN_SUITE,
        "within_1pct": n - len(bad),
        "failing": [(r["problem"], r["ratio"]) for r in bad],
        "worst_ratio": max((r["ratio"] for r in rows), default=math.nan),
        "worst_problem": max(rows, key=lambda r: r["ratio"])["problem"] if rows else None,
        "auto_within_1pct": n - len(bad_auto),
        "auto_failing": [(r["problem"], r["auto_ratio"]) for r in bad_auto],
        "auto_sweeps": sum(r["auto_method"] == "sweep" for r in rows),
        "pp1": pp1,
        "pp1_ok": len(pp1) >= MIN_PP1,
        "n_random": len(rnd),
        "not_worse_than_random": sum(r["ratio"] <= r["random"]["seed0"] * (1 + 1e-12) for r in rnd),
        "better_than_random": sum(r["ratio"] < r["random"]["seed0"] * (1 - 1e-12) for r in rnd),
        "better_than_random_median": sum(
            r["ratio"] < r["random"]["median"] * (1 - 1e-12) for r in rnd
        ),
    }
    cold = (result.get("cold") or {}).get("rows") or []
    big = [r for r in cold if r["big"]]
    s["cold_n"] = len(big)
    s["cold_met"] = sum(r["met"] for r in big)
    s["cold_failing"] = [(r["problem"], r["auto_over_sweep"]) for r in big if not r["met"]]
    s["cold_worst"] = max((r["auto_over_sweep"] for r in big), default=math.nan)
    s["cold_ok"] = bool(big) and s["cold_met"] == len(big)
    sc = [r for r in result.get("scaling") or [] if r["grid"] >= SCALING_MIN_GRID]
    s["scaling_n"] = len(sc)
    s["scaling_min_speedup"] = min((r["speedup_warm"] for r in sc), default=math.nan)
    s["scaling_ok"] = bool(sc) and s["scaling_min_speedup"] >= SCALING_TARGET
    allsc = result.get("scaling") or []
    s["scaling_levels"] = len(allsc)
    s["scaling_failing"] = [
        (f"{r['grid']:,} points", r["ratio"]) for r in allsc if not (r["ratio"] <= TARGET_RATIO)
    ]
    pa = [r for r in (result.get("pareto") or {}).get("rows", []) if r["ex"]]
    s["pareto_n"] = len(pa)
    s["pareto_failing"] = [
        (f"{r['budget_usd'] / 1e6:.0f} M$", r["ratio"])
        for r in pa
        if r["ratio"] is None or not (r["ratio"] <= TARGET_RATIO)
    ]
    return s


def _fig_suffix(result: dict) -> str:
    """``--quick`` writes its own figures (``*_quick.png``), not the full run's."""
    return "_quick" if result.get("quick") else ""


def plot_all(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    sfx = _fig_suffix(result)
    sc = result.get("scaling") or []
    if sc:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        g = np.array([r["grid"] for r in sc], float)
        exw = np.array([r["ex_warm_est_s"] for r in sc])
        ax.loglog(g, exw, "o-", label="exhaustive sweep (warm)")
        ax.loglog(g, [r["opt_warm_s"] for r in sc], "s-", label="optimizer (warm)")
        ax.loglog(
            g,
            [r["opt_first_s"] for r in sc],
            "s:",
            alpha=0.6,
            label="optimizer (first call, with compile)",
        )
        ax.loglog(g, exw[0] * g / g[0], "k--", lw=0.8, alpha=0.5, label="linear in grid size")
        ax.set_xlabel("grid points")
        ax.set_ylabel("wall time (s)")
        ax.set_title(f"{SCALING_PROBLEM}: grid refined (N, 3 tier bandwidths)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / f"scaling{sfx}.png", dpi=130)
        plt.close(fig)

    cv = result.get("convergence")
    if cv:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.4))
        h = np.asarray(cv["objective_history"])
        viol = np.asarray(cv["violation_history"])
        steps = np.arange(1, h.shape[1] + 1)
        for i in range(h.shape[0]):
            best = i == cv["best_start"]
            ls = "-" if viol[i, -1] <= 1e-2 else "--"  # dashed: ends > 1 % over a constraint
            a1.semilogy(
                steps,
                h[i],
                ls,
                color="C0" if best else "0.6",
                lw=1.8 if best else 0.6,
                alpha=1 if best else 0.7,
                zorder=3 if best else 1,
            )
        a1.axhline(
            cv["exhaustive_opt"], color="k", ls="--", lw=1, label="exhaustive optimum (exact)"
        )
        a1.plot(
            [steps[-1]],
            [cv["rounded"]],
            "v",
            color="C3",
            ms=8,
            label="rounded onto valid layouts (exact)",
        )
        a1.plot(
            [steps[-1]], [cv["exact"]], "*", color="C2", ms=12, label="after exact local search"
        )
        a1.set_xlabel("Adam step (temperature and penalty annealed)")
        a1.set_ylabel(f"{cv['objective']} (relaxed model)")
        lo = min(cv["exhaustive_opt"], float(np.nanmin(h[:, -1]))) * 0.8
        a1.set_ylim(lo, float(np.nanpercentile(h[:, 0], 90)) * 1.5)
        a1.set_title(
            "relaxed search: every start (best in blue; dashed: ends > 1 % over a constraint)",
            fontsize=9,
        )
        a1.legend(fontsize=8)
        for i, rc in enumerate(cv["random_curves"]):
            rc = np.asarray(rc, float)
            a2.plot(
                np.arange(1, len(rc) + 1),
                rc,
                color="C1",
                lw=1,
                alpha=0.7,
                label="random search, seeds 0-4" if i == 0 else None,
            )
        tr = np.asarray(cv["trace"], float)
        a2.plot(
            tr[:, 0],
            tr[:, 1],
            "o-",
            color="C2",
            ms=5,
            drawstyle="steps-post",
            label="optimizer: rounding, then local search",
        )
        a2.axhline(cv["exhaustive_opt"], color="k", ls="--", lw=1, label="exhaustive optimum")
        a2.set_xscale("log")
        a2.set_yscale("log")
        a2.set_xlabel("exact evaluations")
        a2.set_ylabel(f"best exact {cv['objective']}")
        a2.set_title("exact phase vs random search, same budget", fontsize=9)
        a2.legend(fontsize=8)
        fig.suptitle(cv["title"], fontsize=9)
        fig.tight_layout()
        fig.savefig(RESULTS / f"convergence{sfx}.png", dpi=130)
        plt.close(fig)

    pa = (result.get("pareto") or {}).get("rows")
    if pa:
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        for key, mk, lab in (
            ("ex", "o", "exhaustive sweep per budget"),
            ("opt", "x", "relaxed optimizer per budget"),
        ):
            pts = [
                (
                    r[key]["time_to_train_days"],
                    r[key]["cost_to_train_usd"] / 1e6,
                    r["budget_usd"],
                    r[key]["on_front"],
                )
                for r in pa
                if r.get(key)
            ]
            if not pts:
                continue
            t, c, b, _ = zip(*pts, strict=True)
            ax.plot(
                t, c, mk, ms=8 if mk == "o" else 9, mfc="none" if mk == "o" else None, label=lab
            )
            if key == "ex":
                # codesign.search.front: designs no other budget's design beats on both.
                fr = sorted((ti, ci) for ti, ci, _, on in pts if on)
                if fr:
                    ft, fc = zip(*fr, strict=True)
                    ax.plot(
                        ft,
                        fc,
                        "-",
                        color="C0",
                        lw=1.2,
                        alpha=0.6,
                        zorder=0,
                        label="Pareto front (exhaustive; cost vs time)",
                    )
                order = np.argsort(t)
                ax.plot(
                    np.asarray(t)[order],
                    np.asarray(c)[order],
                    ":",
                    color="0.6",
                    lw=1,
                    zorder=0,
                    label="budget sweep (dominated points off the front)",
                )
                for ti, ci, bi, _ in pts:
                    ax.annotate(
                        f"{bi / 1e6:.0f} M$",
                        (ti, ci),
                        textcoords="offset points",
                        xytext=(5, 4),
                        fontsize=7,
                    )
        ax.set_xlabel("time to train (days)")
        ax.set_ylabel("cost to train (M$)")
        ax.set_title(f"{PARETO_PROBLEM}: minimum time to train per capex budget", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / f"pareto{sfx}.png", dpi=130)
        plt.close(fig)


def _yes(ok: bool) -> str:
    return "**met**" if ok else "**NOT met**"


def _names(pairs, fmt="{:.4f}") -> str:
    return ", ".join(
        f"{p} ({fmt.format(v) if v is not None and math.isfinite(v) else v})" for p, v in pairs
    )


def write_markdown(result: dict, path: Path) -> None:
    rows = result["suite"]
    s = result["summary"]
    cold = result.get("cold") or {}
    cold_min = cold.get("min_grid", COLD_MIN_GRID)
    sc = result.get("scaling") or []
    quick = result["quick"]
    sfx = _fig_suffix(result)
    lines = [
        "# Co-design benchmark: optimizer vs exhaustive sweep vs random search",
        "",
        f"Generated by `experiments/bench_codesign.py{' --quick' if quick else ''}` on {result['machine']} "
        f"({result['devices']} JAX CPU devices in process, float64); total {result['total_s'] / 60:.1f} min. "
        f"Optimizer settings: {result['settings']}."
        + (" **Quick run: a subset of the suite and of the scaling study.**" if quick else ""),
        "",
        "## Targets",
        "",
        f"* Suite: {s['n']} problems ({result['n_files']} problem files + {s['n'] - result['n_files']} budget variants); "
        f"at least {MIN_SUITE}: {_yes(s['suite_ok'])}.",
        f"* Relaxed optimizer (`--method relaxed`) within 1 % of the exhaustive optimum on every problem: "
        f"{s['within_1pct']}/{s['n']}, worst opt/ex {_fmt_r(s['worst_ratio'])} ({s['worst_problem']}): "
        f"{_yes(s['within_1pct'] == s['n'] and s['n'] > 0)}"
        + (f". Failing: {_names(s['failing'])}." if s["failing"] else "."),
        f"* `codesign optimize` (method auto; sweeps {s['auto_sweeps']}/{s['n']} problems here) within 1 %: "
        f"{s['auto_within_1pct']}/{s['n']}: {_yes(s['auto_within_1pct'] == s['n'] and s['n'] > 0)}"
        + (f". Failing: {_names(s['auto_failing'])}." if s["auto_failing"] else "."),
        f"* Problems whose exhaustive optimum has pp = 1: {len(s['pp1'])} "
        f"({', '.join(s['pp1']) or 'none'}); several (>= {MIN_PP1}): {_yes(s['pp1_ok'])}.",
    ]
    if cold:
        if s["cold_n"]:
            lines.append(
                f"* Cold end to end (fresh processes, no compilation cache), `codesign optimize` no slower "
                f"than `codesign sweep` on every problem of >= {cold_min:.0e} points: "
                f"{s['cold_met']}/{s['cold_n']}, worst optimize/sweep {s['cold_worst']:.2f}: {_yes(s['cold_ok'])}"
                + (
                    f". Failing: {_names(s['cold_failing'], '{:.2f}x')}."
                    if s["cold_failing"]
                    else "."
                )
            )
        else:
            lines.append(
                f"* Cold end to end on problems of >= {cold_min:.0e} points: none in this suite, "
                f"so not measured: {_yes(False)}."
            )
    else:
        lines.append("* Cold end to end: not run (`--no-cold`).")
    if s["scaling_n"]:
        lines.append(
            f"* Scaling: warm optimizer >= {SCALING_TARGET:.0f}x faster than the warm sweep at >= "
            f"{SCALING_MIN_GRID:.0e} points: smallest speed-up {s['scaling_min_speedup']:.0f}x over "
            f"{s['scaling_n']} grid(s): {_yes(s['scaling_ok'])}."
        )
    else:
        lines.append(
            f"* Scaling at >= {SCALING_MIN_GRID:.0e} points: no grid that large in this run "
            f"(largest {max((r['grid'] for r in sc), default=0):.3g}), so not measured: {_yes(False)}."
        )
    if s["scaling_levels"]:
        lines.append(
            f"* (Not an acceptance target.) Relaxed optimizer within 1 % on the scaling study's grids: "
            f"{s['scaling_levels'] - len(s['scaling_failing'])}/{s['scaling_levels']}"
            + (f"; outside: {_names(s['scaling_failing'])}." if s["scaling_failing"] else ".")
        )
    if s["pareto_n"]:
        lines.append(
            f"* (Not an acceptance target.) Pareto study: relaxed time to train within 1 % of the exhaustive "
            f"one under {s['pareto_n'] - len(s['pareto_failing'])}/{s['pareto_n']} budgets"
            + (f"; outside: {_names(s['pareto_failing'])}." if s["pareto_failing"] else ".")
        )
    if s["n_random"]:
        lines.append(
            f"* Random search with the optimizer's budget (seed 0), on {s['n_random']} problems: the optimizer "
            f"is not worse on {s['not_worse_than_random']}, strictly better on {s['better_than_random']} "
            "(ties: both found the optimum), strictly better than the median seed on "
            f"{s['better_than_random_median']}."
        )
    lines += [
        "",
        "## Suite",
        "",
        "* **auto**: the method `codesign.search.choose_method` picks in this process (what `codesign optimize` "
        f"runs with {result['devices']} CPU devices; the cold study below shows what the command chose in its own environment).",
        "* **relaxed opt/ex**: the relaxed optimizer's (`codesign.search.optimize`, seed 0) exact objective over the "
        "exhaustive optimum of the same grid (1 = found it; the target is <= 1.01). **auto opt/ex**: the same for "
        "the auto result (1 when it sweeps).",
        "* **pp\\***: pp at the exhaustive optimum (bold: pp = 1).",
        "* **wall s**: warm (second call, compiled); in brackets the first call in this process, which includes "
        "compiling what was not compiled yet (`+c`: the relaxed search compiled for this problem structure; the "
        "exhaustive sweep compiles once per grid shape). `-`: grid too large to sweep twice.",
        "* **evals**: exact evaluations (optimizer: distinct valid points; exhaustive: every grid point).",
        f"* **random**: best of uniformly drawn valid points, as many as the optimizer's evaluations, over the "
        f"exhaustive optimum: seed 0, and the median of seeds 0-{RANDOM_SEEDS - 1}; **hits**: seeds whose random "
        "search also found the optimum (`-`: skipped).",
        "",
        "| problem | mode | tiers | objective | grid | auto | relaxed opt/ex | auto opt/ex | pp* | rounded/ex | relaxed model/ex | opt wall s | ex wall s | opt evals | random seed 0 | random median | hits |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rd = r["random"]
        pp = r["pp_ex"]
        pp_txt = "-" if pp is None else (f"**{pp:g}**" if pp == 1 else f"{pp:g}")
        ratio_txt = _fmt_r(r["ratio"])
        if not (r["ratio"] <= TARGET_RATIO):
            ratio_txt = f"**{ratio_txt}**"
        lines.append(
            f"| {r['problem']} | {r['mode']} | {r['tiers']} | {r['objective']} | {r['grid']:,} | {r['auto_method']} | "
            f"{ratio_txt} | {_fmt_r(r['auto_ratio'])} | {pp_txt} | {_fmt_r(r['rounded_ratio'])} | "
            f"{_fmt_r(r['relaxed_ratio'], 3)} | {_fmt_s(r['opt_warm_s'])} ({_fmt_s(r['opt_cold_s'])}{' +c' if r['opt_cold_compiled_relaxed'] else ''}) | "
            f"{_fmt_s(r['ex_warm_s'])} ({_fmt_s(r['ex_cold_s'])}) | {r['opt_evals']:,} | "
            + (
                f"{rd['seed0']:.4f} | {rd['median']:.4f} | {rd['hits']}/{RANDOM_SEEDS} |"
                if rd
                else "- | - | - |"
            )
        )
    if cold:
        crow = cold["rows"]
        lines += [
            "",
            "## Cold end to end: the command line as fresh processes",
            "",
            "`codesign optimize FILE --json --no-progress --no-compile-cache` (method auto) and `codesign sweep FILE "
            "--json --no-progress --no-compile-cache`, each a fresh process, timed from start to exit (Python and JAX "
            "start-up, loading the problem, compiling, searching, printing). Environment: "
            + (
                f"the one this benchmark was started in (the command sees {cold['devices']} JAX CPU device(s), as "
                "a user's shell gives it)"
                if cold["env"] == "plain"
                else f"this benchmark's ({cold['devices']} JAX CPU devices)"
            )
            + f". Every problem of >= {cold_min:.0e} points, and for the record the smallest and the largest "
            "smaller grid (--quick: the smallest); where auto sweeps, `--method relaxed` is timed too. A problem meets the target when optimize "
            f"takes no longer than sweep (when auto runs the same sweep, within {COLD_TIE[0]:.0%} + {COLD_TIE[1]:.0f} s "
            "of it, run-to-run noise). Budget variants run from a temporary copy of the file with the changed "
            "constraint. **opt/ex**: the command's objective over the in-process exhaustive optimum.",
            "",
            f"| problem | grid | >= {cold_min:.0e} | auto chose | optimize s | sweep s | optimize --method relaxed s | optimize/sweep | optimize opt/ex | sweep opt/ex | met |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in crow:
            a, w, x = r["auto"], r["sweep"], r["relaxed"]
            err = [
                f"{k}: {v['error']}" for k, v in (("optimize", a), ("sweep", w)) if v.get("error")
            ]
            lines.append(
                f"| {r['problem']} | {r['grid']:,} | {'yes' if r['big'] else 'no'} | {a.get('method') or '?'} | "
                f"{_fmt_s(a['wall_s'])} | {_fmt_s(w['wall_s'])} | {_fmt_s(x['wall_s']) if x else '-'} | "
                f"{r['auto_over_sweep']:.2f} | {_fmt_r(r['auto_ratio'])} | {_fmt_r(r['sweep_ratio'])} | "
                f"{('yes' if r['met'] else '**no**') if r['big'] else '(record)'}"
                + (f" ({'; '.join(err)})" if err else "")
                + " |"
            )
    if sc:
        lines += [
            "",
            f"## Scaling: {SCALING_PROBLEM}, hardware grid refined",
            "",
            "Levels refine the accelerator counts (7 values, then every 256 from 512 to 4096) and the bandwidths of the "
            "three tiers (NVLink, scale-out, cross-building; log-spaced). Exhaustive: `codesign.search.distributed_sweep` "
            "with the bandwidth axes innermost, block size max(4096, min(16384, scale-out x cross-building values)), "
            f"sharded over the {result['devices']} CPU devices. Grids above {result['warm_sweep_max']:.0e} points are "
            "swept once; their warm time is that first call less the compile measured at the largest smaller level "
            "with the same block size (first - warm there), marked *est.* The optimizer's first call at the first "
            "level includes compiling its programs for this grid structure (later levels reuse them).",
            "",
            "| grid points | N, NVLink, scale-out, cross-building values | exhaustive s (first / warm) | M points/s | optimizer s (warm / first) | optimizer evals | opt/ex | speed-up (warm) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in sc:
            est = r["ex_warm_how"] != "measured"
            sp = r["speedup_warm"]
            lines.append(
                f"| {r['grid']:,} | {', '.join(map(str, r['levels']))} | {_fmt_s(r['ex_first_s'])} / "
                f"{_fmt_s(r['ex_warm_est_s'])}{' est.' if est else ''} | {r['ex_rate_mpts']:.1f} | "
                f"{_fmt_s(r['opt_warm_s'])} / {_fmt_s(r['opt_first_s'])} | {r['opt_evals']:,} | {r['ratio']:.4f} | "
                f"{sp:.{0 if sp >= 10 else 1}f}x |"
            )
        big, first = sc[-1], sc[0]
        cold_total = first["opt_first_s"] + big["opt_warm_s"]
        lines += [
            "",
            f"At {big['grid']:.3g} points the exhaustive sweep takes {big['ex_warm_est_s']:.1f} s warm "
            f"({big['ex_warm_how']}) and the warm optimizer {big['opt_warm_s']:.2f} s ({big['speedup_warm']:.0f}x). "
            f"Counting the optimizer's first call at the first level ({first['opt_first_s']:.0f} s, with compile) it "
            f"is {big['ex_warm_est_s'] / cold_total:.1f}x.",
            "",
            f"![scaling](scaling{sfx}.png)",
            "",
        ]
    if result.get("convergence"):
        cv = result["convergence"]
        lines += [
            f"## Convergence: {cv['problem']}",
            "",
            "Left: the relaxed objective of every start against the Adam step, the exact objective of the best rounded "
            "point and of the final point, and the exhaustive optimum. Right: the best exact objective against exact "
            "evaluations, for the optimizer's exact phase (rounding, local search, bandwidth polish) and for random search "
            "over the grid's valid points (5 seeds).",
            "",
            f"![convergence](convergence{sfx}.png)",
            "",
        ]
    pa = result.get("pareto")
    if pa:
        worst = max((r["ratio"] for r in pa["rows"] if r["ratio"] is not None), default=math.nan)
        lines += [
            f"## Pareto front: {PARETO_PROBLEM}, capex budgets",
            "",
            "`codesign.search.pareto(problem, budgets, method=...)`: the least time to train under each capex "
            "budget, by the relaxed optimizer and by the exhaustive sweep; `*`: on the time-cost front "
            f"(`codesign.search.front`). Relaxed {pa['relaxed_wall_s']:.1f} s, sweep {pa['sweep_wall_s']:.1f} s for "
            f"all budgets (warm where the suite compiled the structure); worst relaxed/exhaustive time to train "
            f"{_fmt_r(worst)}.",
            "",
            "| budget M$ | relaxed: days, M$ to train | exhaustive: days, M$ to train | relaxed / exhaustive days |",
            "|---|---|---|---|",
        ]

        def cell(p):
            if p is None:
                return "infeasible"
            return f"{p['time_to_train_days']:.2f}, {p['cost_to_train_usd'] / 1e6:.2f}" + (
                " *" if p["on_front"] else ""
            )

        for r in pa["rows"]:
            lines.append(
                f"| {r['budget_usd'] / 1e6:.0f} | {cell(r['opt'])} | {cell(r['ex'])} | {_fmt_r(r['ratio'])} |"
            )
        lines += ["", f"![pareto](pareto{sfx}.png)", ""]
    lines += [
        "## Notes",
        "",
        "* The optimizer's time does not grow with the grid (it evaluates a few thousand exact points); the "
        "sweep's grows linearly. Where the sweep is cheaper than compiling the relaxed search, "
        "`codesign optimize` sweeps (the auto column), which also returns the exact optimum.",
        "* relaxed model/ex is the relaxed model's objective at the best start over the exact optimum: the "
        "relaxation is a guide (non-integer degrees and sizes, smooth maxima), not an estimate; rounded/ex "
        "shows what rounding onto the nearest valid layouts gives before the exact local search.",
        "* Random search draws uniformly from the grid's valid points (divisibility satisfied), not from the feasible "
        f"ones; on small grids it can hit the optimum too (the hits column). It is skipped where the grid has more "
        f"than {RANDOM_MAX_SUBGRID:.0e} non-bandwidth points (it enumerates the valid ones).",
        "* Timings are wall times on a shared machine; other processes running at the same time inflate them.",
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="4 problems, no variants, small scaling grids, 3 budgets, 2 cold problems (smoke run)",
    )
    ap.add_argument(
        "--max-grid", type=float, default=1.1e9, help="largest scaling grid (default 1.1e9)"
    )
    ap.add_argument(
        "--warm-sweep-max",
        type=float,
        default=2e8,
        help="sweep grids up to this size twice for a warm time (default 2e8)",
    )
    ap.add_argument("--no-random", action="store_true", help="skip the random-search baseline")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold end-to-end study")
    ap.add_argument(
        "--cold-min-grid",
        type=float,
        default=COLD_MIN_GRID,
        help=f"cold study on every problem at least this large (default {COLD_MIN_GRID:.0e})",
    )
    ap.add_argument(
        "--cold-env",
        choices=["plain", "bench"],
        default="plain",
        help="cold runs in the environment this script was started in (plain, default: JAX sees "
        "one CPU device unless XLA_FLAGS says otherwise) or with one CPU device per core (bench)",
    )
    ap.add_argument(
        "--cold-timeout", type=float, default=3600, help="seconds per cold command (default 3600)"
    )
    ap.add_argument(
        "--only", nargs="+", metavar="SUBSTRING", help="only suite entries whose label contains one"
    )
    ap.add_argument(
        "--out", default=str(ROOT / "experiments" / "results"), help="results directory"
    )
    ap.add_argument(
        "--from-json",
        help="only redraw the figures and the markdown from a saved codesign_bench.json",
    )
    args = ap.parse_args()
    RESULTS = Path(args.out)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        result["summary"] = summarize(result)
        plot_all(result)
        name = "codesign_bench_quick" if result["quick"] else "codesign_bench"
        write_markdown(result, RESULTS / f"{name}.md")
        return
    t_all = time.perf_counter()
    settings = Settings()
    print(
        f"jax {jax.__version__}, {len(jax.devices())} CPU devices, {os.cpu_count()} cores, x64; settings {settings}\n",
        flush=True,
    )

    suite = build_suite(args.quick, args.only)
    n_files = sum(1 for e in suite if not e[2])
    print(f"suite: {len(suite)} problems ({n_files} files + {len(suite) - n_files} variants)\n")
    seen: set = set()
    rows = []
    for i, (stem, label, changes) in enumerate(suite):
        if i and not changes:
            # A new problem file: drop the compiled programs of the previous ones (a budget
            # variant reuses its file's).  One process that keeps ~25 problem structures
            # compiled ran out of LLVM's JIT section memory on a 23 GB machine.
            _clear_compiled()
            seen.clear()
        rows.append(run_problem(label, load(stem, changes), settings, seen, args))
    t_suite = time.perf_counter() - t_all
    print(f"\nsuite done in {t_suite / 60:.1f} min\n", flush=True)

    cold = None
    if not args.no_cold:
        t = time.perf_counter()
        cold = cold_study(suite, rows, args)
        print(f"cold study done in {(time.perf_counter() - t) / 60:.1f} min\n", flush=True)

    levels = SCALING_LEVELS[:3] if args.quick else SCALING_LEVELS
    scaling = scaling_study(
        settings, levels, 2e7 if args.quick else args.max_grid, args.warm_sweep_max
    )
    budgets = (
        [40e6, 80e6, 160e6] if args.quick else [float(b) for b in np.geomspace(30e6, 240e6, 7)]
    )
    pareto_rows = pareto_study(settings, budgets)
    conv = convergence_data(
        settings, "mixtral-8x7b-codesign-time" if args.quick else "llama3-405b-codesign-3tier"
    )

    result = {
        "quick": args.quick,
        "machine": f"{platform.machine()} {platform.processor() or ''} ({os.cpu_count()} cores)".replace(
            "  ", " "
        ),
        "devices": len(jax.devices()),
        "settings": f"{settings.starts} starts x {settings.steps} Adam steps, top {settings.top_starts} starts rounded onto "
        f"{settings.nearest_layouts} nearest valid layouts, local search from {settings.local_starts} layouts"
        f"{' (fast compile)' if settings.fast_compile else ''} (`codesign optimize` compiles with fast_compile)",
        "n_files": n_files,
        "warm_sweep_max": args.warm_sweep_max,
        "suite": rows,
        "suite_s": t_suite,
        "cold": cold,
        "scaling": scaling,
        "pareto": pareto_rows,
        "convergence": conv,
    }
    result["summary"] = s = summarize(result)
    plot_all(result)
    result["total_s"] = time.perf_counter() - t_all
    name = "codesign_bench_quick" if args.quick else "codesign_bench"
    write_markdown(result, RESULTS / f"{name}.md")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, default=float))
    n = s["n"]
    print(
        f"\nrelaxed within 1 %: {s['within_1pct']}/{n} (worst {s['worst_ratio']:.4f}, {s['worst_problem']}); "
        f"auto within 1 %: {s['auto_within_1pct']}/{n}; pp=1 optima: {len(s['pp1'])}; "
        f"cold >= {args.cold_min_grid:.0e}: {s['cold_met']}/{s['cold_n']}; "
        f"scaling >= {SCALING_MIN_GRID:.0e}: "
        + (f"min {s['scaling_min_speedup']:.0f}x" if s["scaling_n"] else "not measured"),
        flush=True,
    )
    print(
        f"total {result['total_s'] / 60:.1f} min; wrote {RESULTS / (name + '.md')} and the figures",
        flush=True,
    )


if __name__ == "__main__":
    main()
