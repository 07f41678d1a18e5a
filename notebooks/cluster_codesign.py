# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Designing a cluster under a budget
#
# We have a capex budget and a model to train. How many accelerators should we buy, how
# much bandwidth should each network tier get (NVLink, the building's scale-out fabric, the
# link between two buildings), and how should the model be parallelized on the result?
# These choices interact: a bigger cluster leaves less money per accelerator for the
# network, the cross-building link is slow and dear, and the best parallel layout depends
# on all of it.
#
# `codesign` answers this in three steps:
#
# 1. a **relaxed optimization**: the step model with smooth max/ceil, degrees in log space
#    (`tp pp dp cp = N` exactly), bandwidths and cluster size in boxes, penalties for memory,
#    budget and power; Adam from many random starts, all in one `jit`;
# 2. **discretization**: round the relaxed designs onto the nearest *valid* grid points
#    (divisibility of heads, layers, batch) and improve them with an exact local search;
# 3. an **exact check** against the exhaustive sweep of the same grid.
#
# Then we sweep the budget to draw the Pareto front of cost against time to train.

# %%
import os
import time
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np

import codesign
from codesign import format_report, report_to_dict
from codesign.search import (
    ExactEvaluator,
    Settings,
    distributed_sweep,
    load_problem,
    optimize,
    random_search,
    valid_points,
)

jax.config.update("jax_enable_x64", True)

# CODESIGN_NOTEBOOK_SMALL=1 (set by the test suite) shrinks the grid and the searches.
SMALL = os.environ.get("CODESIGN_NOTEBOOK_SMALL", "0") == "1"


def find_repo_root() -> Path:
    """The checkout holding ``experiments/``: walk up from the cwd, else next to the package."""
    here = Path.cwd().resolve()
    for d in [here, *here.parents, Path(codesign.__file__).resolve().parent.parent]:
        if (d / "pyproject.toml").exists() and (d / "experiments" / "problems").is_dir():
            return d
    raise FileNotFoundError("no codesign checkout (pyproject.toml + experiments/problems) found")


ROOT = find_repo_root()

# %% [markdown]
# ## The problem
#
# A problem file is a run file (model, batch, accelerator, tiers) plus an objective,
# constraints and the grid of allowed values. This one trains Llama 3 70B on H100s spread
# over two buildings: NVLink inside a node, InfiniBand inside a building of 1024
# accelerators, and a campus link between buildings (the `cross-building` fabric preset).
# We minimize the time to train under a capex budget.

# %%
path = ROOT / "experiments" / "problems" / "llama3-70b-codesign-3tier.toml"
print(path.read_text())

# %%
pb = load_problem(path)
if SMALL:  # a coarser grid, so that the exhaustive check below takes seconds
    pb = pb.with_values(
        num_accelerators=[1024, 2048, 3072, 4096],
        tp=[2, 4, 8],
        pp=[1, 2, 4, 8],
        bandwidth={1: [12.5, 25, 50, 100], 2: [3.125, 6.25, 12.5, 25, 50]},
    )
print(
    f"{pb.title}\nmode {pb.mode}, minimize {pb.objective}, capex <= {pb.capex_max_usd / 1e6:g} M$"
)
for axis, values in pb.exhaustive_axes().items():
    print(
        f"  {axis:34s} {len(values):3d} values: {values if len(values) <= 6 else values[:3] + ['...'] + values[-2:]}"
    )
print(f"grid: {pb.grid_size():,} points")

# %% [markdown]
# ## Relaxed optimization
#
# Every start gets one (recompute, ZeRO) combination and random initial logits; Adam runs
# while the temperature of the smooth max and ceil falls and the penalty weight grows.
# The first call compiles the whole multi-start search (tens of seconds on a laptop CPU);
# later calls with other budgets or grids of the same structure reuse it.

# %%
# The small run skips the bandwidth polish (one compilation less); the full run uses the defaults.
settings = Settings(steps=150, starts=12, polish_steps=0) if SMALL else Settings()
t0 = time.perf_counter()
res = optimize(pb, settings, seed=0)
print(
    f"first call {time.perf_counter() - t0:.1f} s (relaxed {res.relaxed_wall_s:.1f} s, exact {res.exact_wall_s:.1f} s)"
)
t0 = time.perf_counter()
res = optimize(pb, settings, seed=0)
print(f"again (compiled): {time.perf_counter() - t0:.2f} s")
print(
    "relaxed design of the best start:",
    {k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.relaxed_point.items()},
)
print(f"relaxed objective {res.relaxed_objective:.2f} days")

# %%
h, viol = res.objective_history, res.violation_history
steps = np.arange(1, h.shape[1] + 1)
fig, ax = plt.subplots(figsize=(7, 4))
for i in range(h.shape[0]):
    best = i == res.best_start
    ax.semilogy(
        steps,
        h[i],
        color="C0" if best else "0.65",
        lw=1.8 if best else 0.7,
        zorder=3 if best else 1,
    )
ax.plot(
    [steps[-1]],
    [res.rounded_objective],
    "v",
    color="C3",
    ms=9,
    label="rounded onto valid layouts (exact)",
)
ax.plot(
    [steps[-1]], [res.exact_objective], "*", color="C2", ms=13, label="after exact local search"
)
ax.set_ylim(0.7 * res.exact_objective, 4 * res.exact_objective)
ax.set_xlabel("Adam step")
ax.set_ylabel("time to train, days (relaxed model)")
ax.set_title("relaxed search: every start, the best in blue")
ax.legend()
plt.show()

# %% [markdown]
# Starts that end infeasible (over budget or out of memory) still show their relaxed
# objective; the penalty pushes them back as its weight grows. The relaxed objective is an
# approximation: its degrees are not integers and its maxima are smooth.
#
# ## Discretization
#
# The relaxed design is rounded onto the nearest *valid* layouts (accelerator count,
# tp, pp, microbatch such that heads, layers and the batch divide), with the bracketing
# grid bandwidths, and evaluated with the exact model; an exact local search over nearby
# layouts, options and bandwidths, and a gradient polish of the bandwidths of the final
# layout, finish the job. The trace shows the best exact objective against the number of
# exact evaluations.

# %%
for n, v in res.exact_trace:
    print(f"{n:6d} exact evaluations: best {v:.3f} days")
print()
print(format_report(report_to_dict(res.report, res.config), res.config))

# %% [markdown]
# ## Exact check: the exhaustive sweep
#
# The sweep enumerates every point of the grid with the batched exact model (sharded over
# all JAX devices) and keeps the best feasible one. It is the ground truth; the optimizer
# should find the same design with a small fraction of the evaluations.

# %%
t0 = time.perf_counter()
ex = distributed_sweep(pb, top_k=3, progress=False)
print(
    f"exhaustive: {ex.num_points:,} points ({ex.num_valid:,} valid, {ex.num_feasible:,} feasible) in {time.perf_counter() - t0:.1f} s"
)
print(f"exhaustive optimum {ex.best_values[0]:.4f} days at {ex.best()}")
print(
    f"optimizer          {res.exact_objective:.4f} days with {res.num_exact_evals:,} exact evaluations "
    f"(ratio {res.exact_objective / ex.best_values[0]:.4f})"
)

ev = ExactEvaluator(pb)
vp = valid_points(pb, ev)
rnd = [random_search(pb, res.num_exact_evals, seed=s, ev=ev, valid=vp)[0] for s in range(5)]
print(
    f"random search with the same budget (5 seeds): {np.round(np.asarray(rnd) / ex.best_values[0], 4)} of the optimum"
)

# %% [markdown]
# ## The Pareto front: cost against time to train
#
# Raising the budget buys a bigger, better-connected cluster and shortens training; it also
# changes what the run costs (amortized capex plus energy over the training time). Each
# budget is a new problem with the same structure, so the compiled programs are reused.

# %%
import codesign as cd  # noqa: E402

budgets = [40e6, 80e6, 160e6] if SMALL else list(np.geomspace(30e6, 240e6, 7))
front = []
for b in budgets:
    pb_b = pb.with_values(capex_max_usd=b)
    r = optimize(pb_b, settings, seed=0)
    if r.config is None:
        print(f"{b / 1e6:6.0f} M$: nothing feasible")
        continue
    rep = cd.evaluate(*r.config.specs())
    e = distributed_sweep(pb_b, top_k=1, progress=False)
    front.append(
        (
            b,
            float(rep.cost["time_to_train_days"]),
            float(rep.cost["cost_to_train_usd"]),
            r.exact_objective / e.best_values[0],
        )
    )
    print(
        f"{b / 1e6:6.0f} M$: {int(r.config.system.num_accelerators)} accelerators, "
        f"{front[-1][1]:.1f} days, {front[-1][2] / 1e6:.2f} M$ to train (optimizer/exhaustive {front[-1][3]:.4f})"
    )

# %%
fig, ax = plt.subplots(figsize=(6, 4))
b, t, c, _ = map(np.asarray, zip(*front, strict=True))
ax.plot(t, c / 1e6, "o-")
for bi, ti, ci in zip(b, t, c, strict=True):
    ax.annotate(
        f"{bi / 1e6:.0f} M$", (ti, ci / 1e6), textcoords="offset points", xytext=(5, 4), fontsize=8
    )
ax.set_xlabel("time to train (days)")
ax.set_ylabel("cost to train (M$)")
ax.set_title("fastest design per capex budget")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## MoE choices: expert tensor parallelism
#
# A mixture-of-experts model adds choices to the strategy: how many ranks hold the experts
# (`ep`), whether each expert is itself split by tensor parallelism (`etp`: `0` as `tp`,
# Megatron-Core's default, or `1`, whole experts folded over the tensor-parallel ranks too),
# and whether tokens beyond an expert's capacity are dropped (`moe_capacity_factor`, `0`:
# dropless). The sweep enumerates `etp` and the capacity factor like any axis; the optimizer
# runs one search per value (they are modes, not points on a line). DeepSeek-V3 on 1,024
# H100s with the MoE settings of NVIDIA's recipe, which measured 25.26 s a step at tp 2,
# pp 8, ep 64, etp 1:

# %%
moe = load_problem(ROOT / "experiments" / "problems" / "deepseek-v3-1024xh100-etp.toml")
for etp in moe.strategy_values["etp"]:
    res = distributed_sweep(moe.with_values(etp=[etp]), progress=False)
    at = ", ".join(
        f"{k.split('.')[-1]} {v:g}" for k, v in res.best().items() if k != "strategy.recompute"
    )
    name = "as tp" if etp == 0 else f"{etp:g}"
    print(f"etp {name}: {float(res.best_values[0]):.2f} s a step at {at}")

# %% [markdown]
# From the command line the same runs are
#
# ```
# codesign optimize experiments/problems/llama3-70b-codesign-3tier.toml
# codesign sweep experiments/problems/llama3-70b-codesign-3tier.toml
# ```
#
# (`--json` for machines; `--distributed` to spread the sweep and the starts over several
# hosts, see `codesign.search.distributed_sweep`). `experiments/bench_codesign.py` runs the whole
# comparison on every problem file of `experiments/problems/` and the scaling study up to 10^9
# grid points.
