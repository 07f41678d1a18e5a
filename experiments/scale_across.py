"""Scale-across study (issue 14): one job over two sites joined by a slow link.

Two sites of 1,024 H100 each (NVLink 4 in 8-GPU nodes, 400 Gb/s InfiniBand NDR inside a
site), joined by a cross-site tier (``cross_site = 1``) whose bandwidth per accelerator and
latency are varied: campus (30 us), metro (1 ms) and region (10 ms).  For every design point
the strategy (tp, pp, micro-batch, recomputation, ZeRO) is re-optimized exactly by the
exhaustive sweep, under each placement of the parallel dimensions on the tiers:

* **(a) PP across or DP across?**  With pp outermost the pipeline's point-to-point traffic
  crosses the link; with dp outermost the gradient reduction does (hierarchically: reduced
  inside each site first).  Which wins, by model size (Llama 3 8B, 70B, 405B), cross-site
  bandwidth and latency.
* **(b) Optimized placement and strategy against a production-like default**: data
  parallelism outermost across sites with Megatron's usual layout for the model (tp 8, the
  smallest pp that fits, micro-batch 1, selective recomputation, ZeRO-1), set beside the
  speed-ups reported by Li et al. 2026 (ScaleAcross Explorer: up to 64.62 % over production
  configurations, 37.59 % over the state of the art) and CrossPipe (ATC'25: up to 33.6 %).
* **(c) Buying the link, and DiLoCo**: the cost-optimal cross-site bandwidth of one job
  (the link priced per GB/s like the ``cross-building`` fabric preset), and the
  break-even tokens penalty of reduced-frequency synchronization (DiLoCo with H inner steps,
  ``Strategy.outer_sync_interval``): the factor of extra tokens at which its faster steps no
  longer pay.  The convergence penalty itself is outside the model (the DiLoCo scaling laws,
  Charles et al. 2025, arXiv:2503.09799, measure it); the table says what it may be.

* **(d) A heterogeneous pair**: an H100 building and a GB200 building (``codesign.sites``):
  each site's inner strategy and the uneven split of the batch (dp across) or the layers (pp
  across), against the even split and against homogeneous clusters of the same peak FLOP/s;
  and (d2) how to split a budget between the two buildings.
* **(e) A cross-site pipeline schedule** (CrossPipe-style extra warm-up before the link)
  against plain 1F1B.
* **(f) Co-design across sites**: how many buildings, how much link, which dimension crosses,
  by the relaxed optimizer and the exhaustive sweep of
  ``experiments/problems/llama3-405b-multisite-placement.toml``.

Writes ``experiments/results/scale_across.md`` and ``scale_across_pp_vs_dp.png``,
``scale_across_diloco.png``, ``scale_across_heterogeneous.png``.

Usage: python experiments/scale_across.py [--quick]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count()}")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import codesign as cd  # noqa: E402
from codesign import sites  # noqa: E402
from codesign.search import (  # noqa: E402
    distributed_sweep,
    load_problem,
    optimize,
    sweep,  # noqa: E402
)

PP_OUT = ["tp", "cp", "ep", "dp", "pp"]
DP_OUT = ["tp", "cp", "ep", "pp", "dp"]
MODELS = {"llama3-8b": 1024, "llama3-70b": 1024, "llama3-405b": 1024}
LATENCIES_US = {"campus 30 us": 30.0, "metro 1 ms": 1000.0, "region 10 ms": 10000.0}
CROSS_PRICE = 400.0  # USD per GB/s per accelerator: the cross-building preset's estimate


def config(model: str, bw: float, lat_us: float, batch: int, **strategy) -> cd.RunConfig:
    st = {"tp": 8, "pp": 8, "dp": 32, "zero": 1, "placement": DP_OUT}
    st.update(strategy)
    return cd.load_run_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": batch, "tokens": 1e12},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": 2048,
                "tiers": [
                    {"preset": "nvlink4"},
                    {"preset": "ib-ndr-400", "domain": 1024},
                    {
                        "name": "cross-site",
                        "bandwidth_gbps": bw,
                        "latency_us": lat_us,
                        "domain": 0,
                        "price_per_gbps_usd": CROSS_PRICE,
                        "power_w": 2.0 * bw,
                        "cross_site": 1.0,
                    },
                ],
            },
            "strategy": st,
        }
    )


STRATEGY_AXES = {
    "strategy.tp": [1, 2, 4, 8],
    "strategy.pp": [1, 2, 4, 8, 16],
    "strategy.microbatch": [1, 2, 4],
    "strategy.recompute": ["none", "selective", "full"],
    "strategy.zero": [0, 1, 2, 3],
}


def best(cfg, placements, objective="time_to_train", extra=None):
    """Best objective under each placement (the sweep's per-value profile) and its point."""
    axes = dict(STRATEGY_AXES)
    axes.update(extra or {})
    axes["strategy.placement"] = placements
    res = sweep(cfg, axes, objective=objective, progress=False)
    prof = res.profiles["strategy.placement"]
    return [float(v) for v in prof], (res.best() if res.num_feasible else None)


SITE_TIERS = [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 1024}]
PP_GRID = sites.strategy_grid(
    tp=(1, 2, 4, 8),
    pp=(1, 2, 4, 8),
    microbatch=(1, 2, 4),
    recompute=("none", "selective", "full"),
    zero=(0, 1),
)


def sites_job(model, bw, lat_us, batch, across="pp", schedule="1f1b", site_list=None, check=True):
    """Two sites of 1,024 H100 (or ``site_list``) joined by the priced link."""
    site = {
        "accelerator": "h100-sxm5-80gb",
        "num_accelerators": 1024,
        "tiers": SITE_TIERS,
        "strategy": {"tp": 8, "pp": 4, "dp": 32},
    }
    return sites.load_sites_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": batch, "tokens": 1e12},
            "link": {
                "preset": "cross-building",
                "bandwidth_gbps": bw,
                "latency_us": lat_us,
                "price_per_gbps_usd": CROSS_PRICE,
                "power_w": 2.0 * bw,
            },
            "sites": site_list or [dict(site, name="site A"), dict(site, name="site B")],
            "across": across,
            "schedule": schedule,
        },
        check=check,
    )


@functools.cache
def _pp_best_cost(model, bw, lat_us, batch, schedule):
    """The cost figures of the fastest pipeline-across design (None when nothing fits).  On
    fixed hardware the fastest step is also the cheapest, so (a) and (c) share it."""
    job = sites_job(model, bw, lat_us, batch, "pp", schedule)
    best_job, info = sites.best_strategies(job, PP_GRID)
    if not info["fits"]:
        return None
    cost = sites.evaluate_sites(best_job, homogeneous=False).cost
    return {k: float(v) for k, v in cost.items()}


def pp_sites(model, bw, lat_us, batch, schedule, objective="time_to_train_days"):
    """Best ``objective`` with the pipeline split between the two sites (the sites model:
    one boundary crosses the link), each site with the same inner strategy, the layer split
    balanced; inf when nothing fits."""
    cost = _pp_best_cost(model, bw, lat_us, batch, schedule)
    return math.inf if cost is None else cost[objective]


def across(cfg, model, bw, lat, batch, objective="time_to_train"):
    """``(pp across 1F1B, pp across cross-site schedule, dp across)``: the best objective with
    the pipeline split between the sites (:mod:`codesign.sites`: one pipeline boundary
    crosses the link) and with data parallelism across them (dp outermost; the single-site
    model with the link as its outer tier, which is what the sites model computes for
    identical sites)."""
    key = {"time_to_train": "time_to_train_days", "cost_to_train": "cost_to_train_usd"}[objective]
    t_1f1b = pp_sites(model, bw, lat, batch, "1f1b", key)
    t_cross = pp_sites(model, bw, lat, batch, "crosspipe", key)
    (t_dp,), _ = best(cfg, [DP_OUT], objective)
    return t_1f1b, t_cross, t_dp


def production_default(model: str, bw: float, lat: float, batch: int):
    """Megatron's usual layout, dp outermost: tp 8, the smallest pp that fits, mb 1, selective
    recomputation (full when nothing fits with it), ZeRO-1 (inf when nothing fits)."""
    for rec in ("selective", "full"):
        for pp in (1, 2, 4, 8, 16, 32):
            cfg = config(model, bw, lat, batch, tp=8, pp=pp, dp=2048 // (8 * pp), recompute=rec)
            r = cd.evaluate(*cfg.specs())
            if bool(r.fits):
                return float(r.cost["time_to_train_days"]), pp
    return math.inf, None


def study_a(bws, lines, figs):
    lines += [
        "## (a) Pipeline or data parallelism across the sites?",
        "",
        "Best time to train (days, 1e12 tokens) with the strategy re-optimized under each "
        "placement: **PP** (the pipeline is split between the sites: `codesign.sites` with "
        '`across = "pp"`, each site with the same inner strategy from a 288-point grid, the '
        "layers balanced, the better of plain 1F1B and the cross-site schedule; one pipeline "
        "boundary crosses the link) or **DP** (dp outermost: the gradient reduction crosses, "
        "after reducing inside each site; the exhaustive sweep over the strategy), the faster, "
        "and how much slower the other is. Splitting the pipeline between the sites forces "
        "two stages at least, whose bubble a model that fits on one stage would not pay "
        "otherwise; with dp across, the reduction is hierarchical (each accelerator sends "
        "1/(dp inside a site) of its gradient over the link) and overlapped with the backward "
        "pass, which is why data parallelism crosses well even at 0.1 GB/s per accelerator.",
        "",
    ]
    table = {}
    for model, batch in MODELS.items():
        lines += [f"**{model}** (global batch {batch})", ""]
        lines.append("| cross-site GB/s | " + " | ".join(LATENCIES_US) + " |")
        lines.append("|---|" + "---|" * len(LATENCIES_US))
        for bw in bws:
            cells = []
            for name, lat in LATENCIES_US.items():
                t_1f1b, t_cross, t_dp = across(config(model, bw, lat, batch), model, bw, lat, batch)
                t_pp = min(t_1f1b, t_cross)
                table[(model, bw, name)] = (t_pp, t_dp, t_1f1b, t_cross)
                if not (math.isfinite(t_pp) or math.isfinite(t_dp)):
                    cells.append("nothing fits")
                    continue
                win = "PP" if t_pp < t_dp else "DP"
                gain = 100 * (max(t_pp, t_dp) / min(t_pp, t_dp) - 1)
                cells.append(f"**{win}** {min(t_pp, t_dp):.2f} d (+{gain:.0f} % other)")
            lines.append(f"| {bw:g} | " + " | ".join(cells) + " |")
        lines.append("")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.6))
    for k, model in enumerate(MODELS):
        ax = fig.add_subplot(1, len(MODELS), k + 1)
        for name in LATENCIES_US:
            ratio = [table[(model, bw, name)][0] / table[(model, bw, name)][1] for bw in bws]
            ax.plot(bws, ratio, "-o", ms=3, label=name)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("cross-site bandwidth (GB/s per accelerator)")
        ax.set_title(model, fontsize=9)
        if k == 0:
            ax.set_ylabel("time, PP across / DP across")
            ax.legend(fontsize=7)
    fig.suptitle("(a) < 1: the pipeline should cross the link; > 1: data parallelism", fontsize=9)
    figs["scale_across_pp_vs_dp.png"] = fig
    return table


def study_b(bws, table, lines):
    lines += [
        "## (b) Optimized placement and strategy against a production-like default",
        "",
        "Default: dp outermost across the sites, tp 8, the smallest pp that fits, micro-batch 1, "
        "selective recomputation, ZeRO-1. Optimized: the best of both placements and every "
        "strategy of the grid (from (a)). Speed-up = default time / optimized time - 1.",
        "",
        "| model | " + " | ".join(LATENCIES_US) + " |",
        "|---|" + "---|" * len(LATENCIES_US),
    ]
    all_gains = []
    for model, batch in MODELS.items():
        cells = []
        for name, lat in LATENCIES_US.items():
            gains = []
            for bw in bws:
                t_def, _ = production_default(model, bw, lat, batch)
                t_opt = min(table[(model, bw, name)][:2])
                if math.isfinite(t_def) and math.isfinite(t_opt):
                    gains.append(100 * (t_def / t_opt - 1))
            all_gains += gains
            cells.append(f"{min(gains):.0f}-{max(gains):.0f} %" if gains else "-")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Over the {len(all_gains)} design points: median speed-up {np.median(all_gains):.0f} %, "
        f"largest {max(all_gains):.0f} %. Li et al. 2026 report up to 64.62 % over production "
        "configurations (37.59 % over the state of the art) and CrossPipe up to 33.6 % (its "
        "schedule against plain 1F1B across data centers: section (e)).",
        "",
    ]


def study_c(bws, lines, figs, model="llama3-70b", batch=1024):
    lat = LATENCIES_US["metro 1 ms"]
    lines += [
        f"## (c) Buying the link, and when DiLoCo pays ({model}, metro latency)",
        "",
        "Cost to train (amortized capex and energy; the link at US$"
        f"{CROSS_PRICE:g} per GB/s per accelerator) with the best placement and strategy, and "
        "with streaming DiLoCo (outer reduction every H steps, dp outermost, overlapped with "
        "the next H steps' compute): the **break-even tokens "
        "penalty** is sync time / DiLoCo time, the most extra tokens DiLoCo may need before "
        "synchronous training is faster again.",
        "",
        "| cross-site GB/s | time sync (d) | cost sync | H = 4: time, break-even | "
        "H = 16: time, break-even | H = 64: time, break-even |",
        "|---|---|---|---|---|---|",
    ]
    costs, breakeven = [], {4: [], 16: [], 64: []}
    for bw in bws:
        t_sync = min(across(config(model, bw, lat, batch), model, bw, lat, batch))
        c_sync = min(across(config(model, bw, lat, batch), model, bw, lat, batch, "cost_to_train"))
        costs.append(c_sync)
        cells = []
        for h in (4, 16, 64):
            cfg = config(model, bw, lat, batch, outer_sync_interval=h, outer_overlap=1.0)
            (t_h,), _ = best(cfg, [DP_OUT])
            be = t_sync / t_h
            breakeven[h].append(be)
            cells.append(f"{t_h:.2f} d, x{be:.3f}")
        lines.append(
            f"| {bw:g} | {t_sync:.2f} | ${c_sync / 1e6:.2f}M | " + " | ".join(cells) + " |"
        )
    i = int(np.argmin(costs))
    lines += [
        "",
        f"The cost-optimal cross-site bandwidth on this grid is {bws[i]:g} GB/s per accelerator "
        f"(${costs[i] / 1e6:.2f}M). DiLoCo pays only when its tokens penalty stays below the "
        "break-even factor: the slower the link, the more room it has.",
        "",
    ]
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    ax1.plot(bws, np.asarray(costs) / 1e6, "-o", ms=3)
    ax1.axvline(bws[i], color="grey", ls=":")
    ax1.set_xscale("log")
    ax1.set_xlabel("cross-site bandwidth (GB/s per accelerator)")
    ax1.set_ylabel("cost to train (M$)")
    ax1.set_title("(c) the link's cost-optimal bandwidth", fontsize=9)
    for h, be in breakeven.items():
        ax2.plot(bws, be, "-o", ms=3, label=f"H = {h}")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xscale("log")
    ax2.set_xlabel("cross-site bandwidth (GB/s per accelerator)")
    ax2.set_ylabel("break-even tokens penalty")
    ax2.set_title("DiLoCo pays below the line", fontsize=9)
    ax2.legend(fontsize=7)
    figs["scale_across_diloco.png"] = fig


def study_e(bws, table, lines):
    lines += [
        "## (e) A cross-site pipeline schedule (CrossPipe-style) against plain 1F1B",
        "",
        "With the pipeline split between the sites, 1F1B makes the stage before the link wait "
        "a round trip (its later stages plus twice the link's delay, latency + activations / "
        "bandwidth) for every W micro-batches it has in flight; the cross-site schedule warms "
        "up enough extra micro-batches before the link to hide it, paying their activation "
        "memory there. Speed-up of the best pipeline-across design with the cross-site "
        "schedule over the best with 1F1B (each re-optimized; range over the bandwidths "
        f"{bws[0]:g}-{bws[-1]:g} GB/s per accelerator).",
        "",
        "| model | " + " | ".join(LATENCIES_US) + " |",
        "|---|" + "---|" * len(LATENCIES_US),
    ]
    gains_all = []
    for model in MODELS:
        cells = []
        for name in LATENCIES_US:
            gains = []
            for bw in bws:
                t_1f1b, t_cross = table[(model, bw, name)][2:]
                if math.isfinite(t_1f1b) and math.isfinite(t_cross):
                    gains.append(100 * (t_1f1b / t_cross - 1))
            gains_all += gains
            cells.append(f"{min(gains):.1f}-{max(gains):.1f} %" if gains else "-")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Largest gain {max(gains_all):.1f} % (median {np.median(gains_all):.1f} %); CrossPipe "
        "reports up to 33.6 % over its baselines. The gain is large only where the link's "
        "delay is long against a stage's micro-batch time: slow links and short stages. A "
        "negative gain: the extra warm-up's activations no longer fit with the best 1F1B "
        "layout, and the best layout that fits is slower.",
        "",
    ]


def _describe(cfg) -> tuple:
    place = ["tp", "cp", "ep", "dp", "pp"]
    order = sorted(place, key=lambda d: float(cfg.strategy.placement[place.index(d)]))
    return float(cfg.system.tiers[2].bandwidth_gbps), order[-1]


def study_codesign(lines, problem_path):
    pb = load_problem(problem_path)
    t0 = time.perf_counter()
    res = distributed_sweep(pb, top_k=1, progress=False)
    t_sweep = time.perf_counter() - t0
    t0 = time.perf_counter()
    opt = optimize(pb)
    t_opt = time.perf_counter() - t0
    best = res.config(0, pb.cfg)
    bw, crosses = _describe(best)
    lines += [
        "## (f) Co-design across sites: how many buildings, how much link, which dimension crosses",
        "",
        f"`{Path(problem_path).relative_to(ROOT)}`: the cheapest Llama 3 405B run within 240 "
        "days and a 330 M$ budget, on buildings of 2,048 H100 joined by a 1 ms metro link "
        "priced at US$400 per GB/s per accelerator. The number of buildings is the accelerator "
        "count over the building's size, the link's bandwidth a continuous knob "
        "(0.1-25 GB/s), the placement (dp or pp outermost) a choice, with the strategy. "
        "Without the deadline, the cheapest design for each number of buildings (exhaustive):",
        "",
        "| buildings | cost to train | time to train | link GB/s | crosses | tp | pp |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in pb.exhaustive_axes()["system.num_accelerators"]:
        sub = pb.with_values(num_accelerators=[n], time_to_train_max_days=math.inf)
        r = distributed_sweep(sub, top_k=1, progress=False)
        if not r.num_feasible:
            lines.append(
                f"| {n / 2048:.0f} | no valid layout within the budget (dp = {n:g} / (tp pp) "
                "must divide the batch of 2,048) | | | | | |"
            )
            continue
        cfg = r.config(0, sub.cfg)
        rep = cd.evaluate(*cfg.specs())
        b_, c_ = _describe(cfg)
        link = f"{b_:.3g}" if n > 2048 else "- (one building)"
        c_ = c_ if n > 2048 else "-"
        lines.append(
            f"| {n / 2048:.0f} | ${float(rep.cost['cost_to_train_usd']) / 1e6:.2f}M | "
            f"{float(rep.cost['time_to_train_days']):.0f} d | {link} | {c_} | "
            f"{float(cfg.strategy.tp):g} | {float(cfg.strategy.pp):g} |"
        )
    lines += [
        "",
        f"With the 240-day deadline: {best.system.num_accelerators / 2048:.0f} buildings, "
        f"link {bw:.3g} GB/s per accelerator, {crosses} crosses, tp "
        f"{float(best.strategy.tp):g}, pp {float(best.strategy.pp):g}; "
        f"${res.best_values[0] / 1e6:.2f}M (exhaustive, {t_sweep:.0f} s over "
        f"{res.num_points:,} points). The relaxed optimizer finds "
        f"${opt.exact_objective / 1e6:.2f}M "
        f"({100 * (opt.exact_objective / res.best_values[0] - 1):+.2f} %) in {t_opt:.0f} s "
        "(compilation included). The link the co-design buys is far below what the buildings' "
        "own fabric carries: "
        + (
            "data parallelism crosses, reduced inside each building first."
            if crosses == "dp"
            else "the pipeline crosses, sending only each stage boundary's activations."
        ),
        "",
    ]


HET_SITES = {
    "h100": {
        "accelerator": "h100-sxm5-80gb",
        "num_accelerators": 1024,
        "tiers": [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 1024}],
    },
    "gb200": {
        "accelerator": "gb200",
        "num_accelerators": 1152,  # 16 NVL72 racks
        "tiers": [
            {"preset": "nvlink5-nvl72", "domain": 72},
            {"preset": "ib-xdr-800", "domain": 1152},
        ],
    },
}
HET_GRID = sites.strategy_grid(
    tp=(2, 4, 8), pp=(1, 2, 4, 8), microbatch=(1, 2), recompute=("selective", "full"), zero=(1,)
)


HET_GRID_PP_GB200 = sites.strategy_grid(
    tp=(2, 4, 8), pp=(9, 18), microbatch=(1, 2), recompute=("selective", "full"), zero=(1,)
)
"""With the pipeline across, every replica spans both sites, so dp must match: 1,152 GB200
take 9 x 2^k stages where 1,024 H100 take 2^k."""


def _het_job(model, bw, across, batch):
    st = {"h100": {"tp": 8, "pp": 4, "dp": 32}, "gb200": {"tp": 8, "pp": 4, "dp": 36}}
    if across == "pp":
        st["gb200"] = {"tp": 4, "pp": 9, "dp": 32}
    sl = [dict(v, name=k, strategy=st[k]) for k, v in HET_SITES.items()]
    return sites_job(model, bw, 1000.0, batch, across, "crosspipe", site_list=sl)


def study_d(
    lines, figs, bws=(0.1, 1.0, 10.0), models=(("llama3-70b", 1024), ("llama3-405b", 1152))
):
    lines += [
        "## (d) A heterogeneous pair: an H100 building and a GB200 building",
        "",
        "1,024 H100 (NVLink 4 x 8, InfiniBand NDR) and 1,152 GB200 (16 NVL72 racks, InfiniBand "
        "XDR) joined by a 1 ms metro link. Each site's inner strategy is chosen from a "
        "48-point grid per site (tp, pp, micro-batch, recomputation; every pair of them, "
        "`codesign.sites.best_strategies`), the work split exactly over every valid split "
        "(`codesign.sites.balance`): **even** gives each site shares in proportion to its "
        "replicas (dp across) or stages (pp across), as a layout blind to the sites' speeds "
        "would; **balanced** is the best split. *vs homogeneous* (`SitesReport.vs_homogeneous`): "
        "time against a single-site cluster of one type with the pair's total peak BF16 "
        "FLOP/s, that site's inner strategy and fractional data parallelism (an idealized "
        "reference of the same compute).",
        "",
        "| model | link GB/s | across | time even (d) | time balanced (d) | gain | split "
        "(H100 / GB200) | idle H100 / GB200 | vs all-H100 | vs all-GB200 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    fig_rows = []
    for model, batch in models:
        for bw in bws:
            for across_ in ("dp", "pp"):
                job = _het_job(model, bw, across_, batch)
                try:
                    grid_b = HET_GRID if across_ == "dp" else HET_GRID_PP_GB200
                    best_job, info = sites.best_strategies(job, [HET_GRID, grid_b], tied=False)
                except cd.SpecError as e:
                    lines.append(f"| {model} | {bw:g} | {across_} | - | - | - | {e} | | | |")
                    continue
                r = sites.evaluate_sites(best_job)
                steps = 1e12 / (batch * float(best_job.model.seq_len))
                t_bal = float(r.cost["time_to_train_days"])
                # The goodput (failures over both sites) does not depend on the split.
                t_even = info["even_step_s"] * steps / 86400 / float(r.cost["goodput"])
                idle = "/".join(f"{100 * max(0.0, float(x)):.0f}%" for x in r.idle_fraction)
                unit = "seq" if across_ == "dp" else "layers"
                split = " / ".join(f"{float(x):g}" for x in r.shares) + f" {unit}"
                vs = [float(x) for x in r.vs_homogeneous]
                fig_rows.append((model, bw, across_, t_even, t_bal, t_bal / vs[0], t_bal / vs[1]))
                lines.append(
                    f"| {model} | {bw:g} | {across_} | {t_even:.2f} | {t_bal:.2f} | "
                    f"{max(0.0, 100 * (t_even / t_bal - 1)):.1f} % | {split} | {idle} | "
                    f"{vs[0]:.3f} | "
                    f"{vs[1]:.3f} |"
                )
    lines += [
        "",
        "The uneven split is never slower than the even one (a test checks it on random "
        "pairs). *vs all-...* above 1: the pair is slower than a homogeneous cluster of that "
        "type with the same peak FLOP/s (and that site's inner strategy, not re-optimized for "
        "the larger cluster, so below 1 can happen).",
        "",
    ]
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    for k, (model, _) in enumerate(models):
        ax = fig.add_subplot(1, len(models), k + 1)
        rows = [r for r in fig_rows if r[0] == model]
        labels = [f"{r[2]} {r[1]:g}" for r in rows]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r[3] for r in rows], 0.4, label="even split")
        ax.bar(x + 0.2, [r[4] for r in rows], 0.4, label="balanced split")
        ax.plot(x, [r[5] for r in rows], "v", color="C3", label="all-H100, same FLOP/s")
        ax.plot(x, [r[6] for r in rows], "^", color="C2", label="all-GB200, same FLOP/s")
        ax.set_xticks(x, labels, fontsize=7, rotation=30)
        ax.set_ylabel("time to train 1e12 tokens (days)")
        ax.set_title(f"(d) {model}: H100 + GB200 buildings", fontsize=9)
        if k == 0:
            ax.legend(fontsize=7)
    figs["scale_across_heterogeneous.png"] = fig


def _capex_per_accelerator(job, i) -> float:
    """Capex of one accelerator of site ``i`` with its inner tiers and link port."""
    from codesign.cost import cluster_cost

    s = job.sites[i]
    system = s.system.replace(tiers=(*s.system.tiers, job.link), num_accelerators=1.0)
    return float(cluster_cost(system, 1.0, 1.0, 0.0)["capex_usd"])


def study_split(lines, model="llama3-405b", batch=1152, bw=1.0):
    """How to split a fixed budget between an H100 and a GB200 building."""
    base = _het_job(model, bw, "dp", batch)
    price = [_capex_per_accelerator(base, i) for i in range(2)]
    budget = sum(
        p * float(s.system.num_accelerators) for p, s in zip(price, base.sites, strict=True)
    )
    lines += [
        f"### (d2) How to split a budget between the two buildings ({model}, {bw:g} GB/s)",
        "",
        f"The pair's capex (${budget / 1e6:.1f}M: accelerators, inner tiers and link ports) "
        "spent on GB200 racks of 72 and the rest on H100 (in blocks of 128, a count whose "
        "data parallelism can divide the batch), data parallelism across, each site's "
        "strategy and the batch split chosen as in (d).",
        "",
        "| GB200 | H100 | capex | time to train (d) | split (H100 / GB200 seq) |",
        "|---|---|---|---|---|",
    ]
    rows = []
    smooth = [1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 27, 32, 36, 48, 54, 64]  # 3-smooth
    for racks in [0, 1, 2, 4, 8, 12, 16, 18, 24, 27]:
        n_gb = 72 * racks
        room = (budget - n_gb * price[1]) / price[0] / 128
        if room < 0:
            break
        n_h = 128 * max([k for k in smooth if k <= room], default=0)
        site_list = []
        if n_h:
            h = dict(HET_SITES["h100"], name="h100", num_accelerators=n_h)
            h["tiers"] = [h["tiers"][0], dict(h["tiers"][1], domain=n_h)]
            site_list.append(dict(h, strategy={"tp": 8, "pp": 1, "dp": n_h // 8}))
        if n_gb:
            g = dict(HET_SITES["gb200"], name="gb200", num_accelerators=n_gb)
            g["tiers"] = [g["tiers"][0], dict(g["tiers"][1], domain=n_gb)]
            site_list.append(dict(g, strategy={"tp": 8, "pp": 1, "dp": n_gb // 8}))
        try:
            job = sites_job(model, bw, 1000.0, batch, "dp", site_list=site_list, check=False)
        except cd.SpecError:
            job = None
        best_job, info = (None, None)
        if job is not None:
            try:
                best_job, info = sites.best_strategies(job, [HET_GRID] * len(site_list), tied=False)
            except cd.SpecError:
                pass
        if best_job is None or not info["fits"]:
            lines.append(f"| {n_gb:,} | {n_h:,} | | no valid layout that fits | |")
            continue
        r = sites.evaluate_sites(best_job, homogeneous=False)
        days = float(r.cost["time_to_train_days"])
        capex = n_h * price[0] + n_gb * price[1]
        rows.append((days, n_gb, n_h))
        split = " / ".join(f"{float(x):g}" for x in r.shares)
        lines.append(f"| {n_gb:,} | {n_h:,} | ${capex / 1e6:.1f}M | {days:.2f} | {split} |")
    best = min(rows)
    lines += [
        "",
        f"Fastest for this budget: {best[1]:,} GB200 with {best[2]:,} H100 ({best[0]:.2f} days).",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three bandwidths only")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = ap.parse_args()
    bws = (
        [0.1, 1.0, 10.0] if args.quick else [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 12.5, 25.0, 50.0]
    )
    t0 = time.perf_counter()
    lines = [
        "# Scale-across study: one job over two sites",
        "",
        "Generated by `experiments/scale_across.py`" + (" --quick" if args.quick else "") + ". "
        "Two sites of 1,024 H100 (NVLink 4 x 8, InfiniBand NDR 400G inside a site) joined by a "
        "cross-site tier; every figure is the exact model's, the strategy re-optimized by the "
        "exhaustive sweep at every point.",
        "",
    ]
    figs = {}
    table = study_a(bws, lines, figs)
    study_b(bws, table, lines)
    study_c(bws, lines, figs)
    study_d(lines, figs, bws=(0.1, 1.0) if args.quick else (0.1, 1.0, 10.0))
    study_split(lines)
    study_e(bws, table, lines)
    study_codesign(
        lines, ROOT / "experiments" / "problems" / "llama3-405b-multisite-placement.toml"
    )
    lines.append(f"Total {time.perf_counter() - t0:.0f} s.")
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    (args.out / f"scale_across{suffix}.md").write_text("\n".join(lines) + "\n")
    for name, fig in figs.items():
        fig.savefig(args.out / name.replace(".png", f"{suffix}.png"), dpi=120, bbox_inches="tight")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
