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
# # Which hardware parameter matters, and by how much?
#
# A training step's time, cost and energy depend on dozens of hardware and workload numbers.
# `codesign.sensitivity` answers "which of them matters here, and by how much" with
# derivatives of the same exact model that `codesign evaluate` runs, checked against exact
# re-evaluation:
#
# * **elasticities** `d ln f / d ln p` (1 % more of `p` gives `e` % more of `f`), strategy
#   held fixed, by forward-mode AD, with **kinks** (where the exact model's slope changes,
#   e.g. where exposed communication reaches zero) reported with both one-sided values;
# * the **envelope**: the same with the parallel strategy re-optimized exactly;
# * **what it would take**: how much one parameter alone must improve for 10 % less time;
# * **shadow prices** of the active constraints: what one more dollar of budget, or one
#   more GB of HBM, is worth at the optimum.
#
# We answer two questions: for GPT-3 175B on 4,096 H100, is doubling the scale-out
# bandwidth or growing the NVLink domain worth more? And for Llama 3 405B on 16,384 H100,
# what is 1 GB more HBM per GPU worth in dollars of training cost?

# %%
import os
from pathlib import Path

import jax
import matplotlib.pyplot as plt

import codesign as cd
from codesign.sensitivity import (
    heatmap,
    memory_knobs,
    one_at_a_time,
    plot_curves,
    plot_heatmap,
    plot_tornado,
    sensitivity,
    shadow_prices,
    strategy_label,
)

jax.config.update("jax_enable_x64", True)

# CODESIGN_NOTEBOOK_SMALL=1 (set by the test suite) shrinks the grids.
SMALL = os.environ.get("CODESIGN_NOTEBOOK_SMALL", "0") == "1"


def find_repo_root() -> Path:
    """The checkout holding ``experiments/``: walk up from the cwd, else next to the package."""
    here = Path.cwd().resolve()
    for d in [here, *here.parents, Path(cd.__file__).resolve().parent.parent]:
        if (d / "pyproject.toml").exists() and (d / "experiments" / "configs").is_dir():
            return d
    raise FileNotFoundError("no codesign checkout (pyproject.toml + experiments/configs) found")


ROOT = find_repo_root()

# %% [markdown]
# ## 1. GPT-3 175B on 4,096 H100: the local picture
#
# NVLink 4 in 8-GPU nodes, 50 GB/s of InfiniBand per GPU, tp 8 and pp 16. The elasticities
# of the time to train, ranked:

# %%
gpt3 = cd.load_run(ROOT / "experiments" / "configs" / "gpt3-175b-4096-h100.toml")
# (the small run of the tests analyzes a few parameters: a smaller program to compile)
SMALL_PARAMS = [
    "accelerator.peak_tflops",
    "tiers[0].bandwidth_gbps",
    "tiers[0].domain",
    "tiers[1].bandwidth_gbps",
    "num_accelerators",
]
sens = sensitivity(
    gpt3, groups=("hardware", "economics"), parameters=SMALL_PARAMS if SMALL else None
)
for e in sens.ranked("time_to_train", 8):
    if e.status == "kink":
        print(f"{e.parameter:30s} kink: {e.left:+.3f} below, {e.right:+.3f} above")
    else:
        print(f"{e.parameter:30s} {e.elasticity:+.3f}  ({e.status})")
fig, ax = plt.subplots(figsize=(8, 4.5))
plot_tornado(sens, objective="time_to_train", n=12, ax=ax)
plt.show()

# %% [markdown]
# The accelerator's FLOP/s dominate (compute is most of the step). Among the network
# parameters the NVLink domain stands out, and it is a **kink**: at 8 GPUs the domain is
# exactly the tensor-parallel group, so shrinking it would push tp onto InfiniBand (the left
# value) while growing it helps the data- and pipeline-parallel traffic (the right value).
# A single derivative there would be wrong on one side.
#
# What the step is made of, and what one parameter alone would need for 10 % less time:

# %%
b = sens.bottleneck
print("dominant:", b.dominant_term, {k: round(v, 3) for k, v in b.group_shares.items()})
for r in sens.requirements:
    if r.reachable:
        print(
            f"{r.parameter:30s} x{r.factor:.3g} (first-order estimate x{r.first_order_factor:.3g})"
        )
    elif r.best_reduction > 1e-3:
        print(f"{r.parameter:30s} not alone: at most {100 * r.best_reduction:.1f} %")

# %% [markdown]
# One-at-a-time curves (strategy fixed) show where the slope changes. The NVLink domain's
# curve has its kink at 8, where it stops holding the whole tensor-parallel group; the
# scale-out bandwidth's curve is smooth over this range (its exposed data-parallel
# communication never reaches zero here).

# %%
curves = [
    one_at_a_time(
        gpt3, "tiers[1].bandwidth_gbps", "time_to_train", span=8.0, num=25 if SMALL else 97
    ),
    one_at_a_time(gpt3, "tiers[0].domain", "time_to_train", span=8.0, num=25 if SMALL else 97),
]
for c in curves:
    print(c.parameter, [(round(k.value, 1), k.reason) for k in c.kinks])
fig, ax = plt.subplots(figsize=(8, 4))
plot_curves(curves, ax=ax)
plt.show()

# %% [markdown]
# ## 1b. The whole move: double the scale-out bandwidth, or grow the NVLink domain?
#
# Elasticities are local; 8 -> 64 GPUs per domain is not. The heat map re-optimizes the
# strategy exactly in every cell (every strategy of the default grid, exact model, memory
# fit) and prices every design (a larger domain pays the fitted domain premium). 72 does not
# divide 4,096, so the largest domain is 64: a 72-GPU rack with 64 GPUs in the job.

# %%
f_bw = [1.0, 2.0] if SMALL else [0.5, 1.0, 2.0, 4.0]
f_dom = [1.0, 8.0] if SMALL else [1.0, 2.0, 4.0, 8.0]
hm_t = heatmap(gpt3, "tiers[1].bandwidth_gbps", "tiers[0].domain", f_bw, f_dom, "time_to_train")
hm_c = heatmap(gpt3, "tiers[1].bandwidth_gbps", "tiers[0].domain", f_bw, f_dom, "cost_to_train")
i1, i2, j8, j64 = f_bw.index(1.0), f_bw.index(2.0), f_dom.index(1.0), f_dom.index(8.0)
base_t, base_c = hm_t.best[i1, j8], hm_c.best[i1, j8]
for label, i, j in [("today", i1, j8), ("2x scale-out", i2, j8), ("domain 64", i1, j64)]:
    t, c = hm_t.best[i, j], hm_c.best[i, j]
    s = strategy_label(hm_t.strategies[int(hm_t.strategy_index[i, j])])
    print(
        f"{label:14s} {t:.3f} days ({100 * (t / base_t - 1):+5.1f} %)  "
        f"${c / 1e6:.3f}M ({100 * (c / base_c - 1):+5.1f} %)  {s}"
    )
fig, ax = plt.subplots(figsize=(7, 5))
plot_heatmap(hm_t, ax=ax)
plt.show()

# %% [markdown]
# Growing the NVLink domain is worth more than doubling the scale-out bandwidth: at the
# presets of 2026-12-06 it cuts the time to train by more than a quarter *and* the cost (the
# time saved outweighs the domain premium), while the doubled InfiniBand saves about 11 % of
# the time for about 5 % more cost. The best strategy changes along the way (outlined): with
# 64 GPUs per domain the pipeline goes (pp 1) and ZeRO-2 data parallelism runs over NVLink;
# with the doubled InfiniBand, tp 16 spans two nodes and the pipeline goes too.
#
# ## 2. Llama 3 405B on 16,384 H100: what is 1 GB more HBM worth?
#
# Meta's 8k-context layout (tp 8, pp 16, cp 1, dp 128) needs a fraction of its layers
# recomputed to fit 80 GB in this model. The memory constraint's shadow price is the value
# of capacity: the multiplier of the continuous problem over the recomputed fraction,
# confirmed by re-solving with the cap moved.

# %%
llama = cd.load_run(ROOT / "experiments" / "configs" / "llama3-405b-16k-h100.toml")
prices, sol = shadow_prices(llama, memory_knobs(llama)[:1], objective="cost_to_train")
mem = prices[0]
n = float(llama.system.num_accelerators)
print(f"recomputed fraction at the optimum: {sol['x']['strategy.recompute_fraction']:.3f}")
print(
    f"value of 1 GB more on every GPU: ${mem.price:,.0f} of training cost "
    f"(${mem.price / n:.2f} per GPU); re-solved: ${mem.resolved:,.0f}"
)

# %% [markdown]
# And what that GB costs: the elasticity of the cost to train to `hbm_gb` with the
# strategy fixed is the fitted marginal price of HBM alone (the run's share of it).

# %%
s405 = sensitivity(llama, parameters=["accelerator.hbm_gb"], objectives=("cost_to_train",))
e = s405.elasticity("accelerator.hbm_gb", "cost_to_train").elasticity
price_per_gb = e * s405.values["cost_to_train"] / float(llama.system.accelerator.hbm_gb)
print(
    f"price of 1 GB more on every GPU: ${price_per_gb:,.0f}; net value ${mem.price - price_per_gb:,.0f}"
)

# %% [markdown]
# With Meta's layout, each GB of HBM saves about five times what it costs, until about
# 80 GB, where nothing is recomputed any more. `experiments/sensitivity_study.py` adds the
# envelope (the whole strategy re-optimized) and the cost curve against capacity;
# `codesign sensitivity RUN.toml --reoptimize` prints all of it for any run file.

# %%
plt.close("all")
