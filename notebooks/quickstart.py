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
# # codesign quickstart
#
# `codesign` is an analytical model of one LLM training step on a multi-tier cluster:
# given a model, a batch, a system (accelerator + network tiers) and a parallel strategy,
# it returns the step time with its breakdown, memory per accelerator, MFU and cost.
# It is written in JAX, so the same function can be `jit`-ed, `vmap`-ed over a sweep,
# or differentiated.
#
# This notebook: evaluate one run file, plot where the time and memory go, sweep the
# pipeline-parallel degree with `jax.vmap`, search a grid with `codesign.search.sweep`, then
# weigh MoE token drop against dropless routing.

# %%
import dataclasses
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

import codesign
import codesign.search

# Counts such as 1.75e11 parameters and large sweep indices want 64-bit floats and ints.
# Switch it on before creating any JAX array.
jax.config.update("jax_enable_x64", True)

# CODESIGN_NOTEBOOK_SMALL=1 (set by the test suite) shrinks the sweeps.
SMALL = os.environ.get("CODESIGN_NOTEBOOK_SMALL", "0") == "1"


def find_repo_root() -> Path:
    """The checkout holding ``experiments/``: walk up from the cwd, else next to the package."""
    here = Path.cwd().resolve()
    candidates = [here, *here.parents, Path(codesign.__file__).resolve().parent.parent]
    for d in candidates:
        if (d / "pyproject.toml").exists() and (d / "experiments" / "configs").is_dir():
            return d
    raise FileNotFoundError("no codesign checkout (pyproject.toml + experiments/configs) found")


ROOT = find_repo_root()

# %% [markdown]
# ## 1. Evaluate one configuration
#
# A run file names a model preset, the training batch, the system (accelerator and network
# tiers, innermost first) and the parallel strategy. This one is GPT-3 175B on 1024 A100s
# with Megatron's 3D layout (tp 8, pp 8, dp 16). `load_run` checks the file and raises a
# `SpecError` naming the bad field if something is off.

# %%
cfg = codesign.load_run(ROOT / "experiments" / "configs" / "gpt3-175b-a100.toml")
r = codesign.evaluate(*cfg.specs())

print(codesign.format_report(codesign.report_to_dict(r, cfg), cfg))

# %% [markdown]
# `r` is a `codesign.Report`, a pytree of JAX arrays: `r.step_time_s`, `r.breakdown_s`
# (sums to the step time), `r.memory_gb` (per accelerator), `r.fits`, `r.mfu`, `r.cost`, ...
#
# The report's **expected error** is how far the calibrated model was from published
# measured runs of the same setting that it had not been fitted on (generation, software
# stack, dense or MoE): `cfg.names["held_out"]` holds the figures. An accelerator nobody has
# measured (a TPU, say) gets `unknown` and the error of a whole generation held out.

# %%
h = cfg.names["held_out"]
print(f"{h['kind']} {h['stack']} runs on {h['generation']}: +-{h['mape_pct']} % "
      f"(90 % within +-{h['p90_pct']} %, {h['rows']} runs)")  # fmt: skip
tpu = codesign.load_run_dict(
    {
        "model": {"preset": "llama3-70b"},
        "training": {"global_batch": 256},
        "system": {"accelerator": "tpu-v7", "num_accelerators": 256},
        "strategy": {"tp": 4, "pp": 1, "dp": 64},
    }
)
print("tpu-v7:", tpu.names["held_out"]["unmeasured_architecture"])

# %% [markdown]
#
# ## 2. Where the step time goes

# %%
HBM_GB = float(cfg.system.accelerator.hbm_gb)
colors = plt.get_cmap("tab20").colors

fig, ax = plt.subplots(figsize=(9, 1.9))
left = 0.0
for i, k in enumerate(codesign.BREAKDOWN_KEYS):
    v = float(r.breakdown_s[k])
    if v == 0.0:
        continue
    ax.barh(0, v, left=left, color=colors[i % len(colors)], label=f"{k} ({v:.2f} s)")
    left += v
ax.set_yticks([])
ax.set_xlabel("seconds per step")
ax.set_title(f"step time {float(r.step_time_s):.2f} s, MFU {100 * float(r.mfu):.1f} %")
ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45), frameon=False)
plt.show()

# %% [markdown]
# ## 3. Where the memory goes
#
# Memory per accelerator against the HBM capacity (dashed line).

# %%
MEM_ORDER = ("weights", "gradients", "optimizer", "activations", "buffers")
mem_keys = [k for k in MEM_ORDER if k in r.memory_gb]
mem_keys += sorted(set(r.memory_gb) - set(mem_keys) - {"total"})

fig, ax = plt.subplots(figsize=(9, 1.9))
left = 0.0
for i, k in enumerate(mem_keys):
    v = float(r.memory_gb[k])
    ax.barh(0, v, left=left, color=colors[(2 * i) % len(colors)], label=f"{k} ({v:.1f} GB)")
    left += v
ax.axvline(HBM_GB, color="k", ls="--", lw=1.5)
ax.text(HBM_GB, 0, f" HBM\n {HBM_GB:g} GB", va="center")
ax.set_xlim(0, max(HBM_GB, left) * 1.15)
ax.set_yticks([])
ax.set_xlabel("GB per accelerator")
ax.set_title(
    f"memory {float(r.memory_gb['total']):.1f} GB: {'fits' if bool(r.fits) else 'does not fit'}"
)
ax.legend(ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45), frameon=False)
plt.show()

# %% [markdown]
# ## 4. Sweep one knob with `jax.vmap`
#
# Every number in the specs is an array leaf, so a batch of strategies is just a pytree with
# a leading axis. We vary the pipeline degree `pp` at fixed `tp` and 1024 accelerators
# (`dp = N / (tp * pp)`). Each strategy must stay valid: the layers must split into
# `pp * interleave` chunks, so we keep the largest interleave (<= the run's 4) that divides
# the 96 layers. `codesign.specs.check_strategy` checks each point before we batch them
# (`evaluate_unchecked` itself does no checking, so it can run under `vmap`).

# %%
st0 = cfg.strategy
N = float(cfg.system.num_accelerators)
LAYERS = float(cfg.model.layers)
pps = [1, 2, 4, 8, 16, 32]


def interleave_for(pp: int) -> int:
    if pp == 1:
        return 1
    return max(v for v in range(1, int(st0.interleave) + 1) if LAYERS % (pp * v) == 0)


strategies = [
    dataclasses.replace(
        st0, pp=float(pp), dp=N / (st0.tp * pp), interleave=float(interleave_for(pp))
    )
    for pp in pps
]
for s in strategies:
    codesign.rules.check_strategy(s, cfg.model, cfg.training, cfg.system)

batch = jax.tree.map(lambda *x: jnp.stack(x), *strategies)
evaluate_many = jax.vmap(codesign.evaluate_unchecked, in_axes=(None, None, None, 0, None))
rs = evaluate_many(cfg.model, cfg.training, cfg.system, batch, cfg.efficiency)

for pp, s, t, m, ok in zip(
    pps, strategies, rs.step_time_s, rs.memory_gb["total"], rs.fits, strict=True
):
    print(
        f"pp={pp:<3} dp={s.dp:<4g} interleave={s.interleave:g}  step {float(t):6.2f} s"
        f"  memory {float(m):6.1f} GB  {'' if ok else 'DOES NOT FIT'}"
    )

# %% [markdown]
# Step time grouped into compute, communication and pipeline bubble, and memory per
# accelerator. Hatched, faded bars do not fit in HBM.

# %%
GROUPS = {
    "compute": ("forward", "backward", "recompute", "optimizer", "overhead"),
    "communication": ("tp_comm", "cp_comm", "ep_comm", "pp_p2p", "dp_comm", "offload"),
    "pipeline bubble": ("pp_bubble",),
}
assert sorted(sum(GROUPS.values(), ())) == sorted(codesign.BREAKDOWN_KEYS)

x = np.arange(len(pps))
fits = np.asarray(rs.fits)
alpha = np.where(fits, 1.0, 0.35)
hatch = [None if f else "//" for f in fits]


def stacked_bars(ax, parts: dict) -> np.ndarray:
    """Stacked bars over ``pps``, one segment per ``{label: (color, values)}``; returns tops."""
    bottom = np.zeros(len(pps))
    for color, v in parts.values():
        for j in range(len(pps)):
            ax.bar(x[j], v[j], bottom=bottom[j], color=color, alpha=alpha[j], hatch=hatch[j])
        bottom = bottom + v
    handles = [Patch(color=c, label=name) for name, (c, _) in parts.items()]
    ax.legend(
        handles=handles + ax.get_legend_handles_labels()[0], fontsize=8, ncol=3, loc="upper center"
    )
    for j in np.flatnonzero(~fits):
        ax.text(
            x[j], bottom[j], "does not\nfit", ha="center", va="bottom", fontsize=8, color="tab:red"
        )
    ax.set_ylim(0, bottom.max() * 1.35)
    ax.set_xticks(x, [f"pp={p}\ndp={int(N / (st0.tp * p))}" for p in pps])
    return bottom


fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
time_parts = {
    name: (c, sum(np.asarray(rs.breakdown_s[k]) for k in keys))
    for (name, keys), c in zip(GROUPS.items(), ("tab:blue", "tab:orange", "tab:red"), strict=True)
}
stacked_bars(ax_t, time_parts)
ax_t.set_ylabel("seconds per step")
ax_t.set_title("step time vs pipeline degree")

ax_m.axhline(HBM_GB, color="k", ls="--", lw=1.5, label=f"HBM {HBM_GB:g} GB")
mem_parts = {
    k: (colors[(2 * i) % len(colors)], np.asarray(rs.memory_gb[k])) for i, k in enumerate(mem_keys)
}
stacked_bars(ax_m, mem_parts)
ax_m.set_ylabel("GB per accelerator")
ax_m.set_title("memory vs pipeline degree")
fig.tight_layout()
plt.show()

# %% [markdown]
# Small `pp` replicates too much of the model per accelerator; large `pp` fits easily but
# pays a growing pipeline bubble and more point-to-point traffic.

# %%
t = np.where(fits, np.asarray(rs.step_time_s), np.inf)
print(f"fastest pp that fits: pp={pps[int(np.argmin(t))]} ({t.min():.2f} s per step)")

# %% [markdown]
# ## 5. Search a grid with `codesign.search.sweep`
#
# `codesign.search.sweep` evaluates the Cartesian product of a few axes (any leaf, by dotted
# path; `recompute` by name) around the base run, without materializing it: it masks
# invalid points (divisibility, degrees that do not multiply to N) and infeasible ones
# (memory, optional capex or power caps) and keeps the best `top_k`. `strategy.dp` is
# derived as `N / (tp * pp * cp)` unless it is an axis. Here we vary the strategy and the
# scale-out bandwidth (tier 1, InfiniBand).

# %%
if SMALL:
    axes = {
        "strategy.tp": [4, 8],
        "strategy.pp": [4, 8, 16],
        "strategy.interleave": [1, 2, 4],
        "strategy.microbatch": [1, 2],
        "strategy.recompute": ["selective", "full"],
        "system.tiers[1].bandwidth_gbps": [12.5, 25, 100],
    }
else:
    axes = {
        "strategy.tp": [1, 2, 4, 8],
        "strategy.pp": [1, 2, 4, 8, 16, 32],
        "strategy.interleave": [1, 2, 4],
        "strategy.microbatch": [1, 2, 4, 8],
        "strategy.recompute": ["none", "selective", "full"],
        "system.tiers[1].bandwidth_gbps": [12.5, 25, 50, 100, 200],
    }

res = codesign.search.sweep(cfg, axes, objective="step_time", top_k=10, progress=False)
print(
    f"{res.num_points} points, {res.num_valid} valid, {res.num_feasible} fit in memory"
    f"  ({res.wall_s:.1f} s)"
)
for i in range(min(5, len(res.best_values))):
    p = res.point(i)
    knobs = "  ".join(f"{k.split('.')[-1]}={v}" for k, v in p.items())
    print(f"{i + 1}. {res.best_values[i]:6.2f} s   {knobs}")

# %% [markdown]
# With step time as the objective the fastest network wins. Minimizing the cost to
# train (`objective="cost_to_train"`, which needs `training.tokens` in the run file) weighs
# the network's capex and power against the time it saves. `res.profiles[axis]` holds the
# best objective at each value of an axis, over all the other axes.

# %%
res_cost = codesign.search.sweep(cfg, axes, objective="cost_to_train", top_k=10, progress=False)
best = res_cost.point(0)
print(
    "cheapest to train:",
    {k.split(".")[-1]: v for k, v in best.items()},
    f"{res_cost.best_values[0] / 1e6:.3f} M$",
)

bw_axis = "system.tiers[1].bandwidth_gbps"
bws = axes[bw_axis]
fig, ax1 = plt.subplots(figsize=(6, 3.5))
ax1.plot(bws, res.profiles[bw_axis], "o-", color="tab:blue")
ax1.set_xscale("log")
ax1.set_xticks(bws, [f"{b:g}" for b in bws])
ax1.minorticks_off()
ax1.set_xlabel("scale-out bandwidth, GB/s per accelerator")
ax1.set_ylabel("best step time, s", color="tab:blue")
ax2 = ax1.twinx()
ax2.plot(bws, np.asarray(res_cost.profiles[bw_axis]) / 1e6, "s--", color="tab:green")
ax2.set_ylabel("best cost to train, M$", color="tab:green")
ax1.set_title("best over the grid, per scale-out bandwidth")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 6. MoE: token drop against dropless
#
# A mixture-of-experts layer either computes every routed token (dropless, Megatron-Core's
# default: the busiest expert rank sets the pace, `moe_imbalance` times its balanced share)
# or caps each expert at `moe_capacity_factor` times its share and drops the overflow
# (padded to that capacity, every rank computes exactly that much). Here Mixtral 8x7B on
# 64 H100s, with a router that leaves its busiest rank 20 % over the mean (an assumption for
# the example: the shipped presets keep 1, the balanced routing the benchmarks forced), is
# swept over the capacity factor in one `vmap`; `codesign.workload.moe_dropped_fraction`
# gives the share of routed tokens dropped at uniform routing (binomial sampling noise
# alone: a trained router's own skew drops more).

# %%
moe = codesign.load_run_dict(
    {
        "model": {"preset": "mixtral-8x7b"},
        "training": {"global_batch": 256, "precision": "bf16"},
        "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 64},
        "strategy": {"tp": 2, "pp": 2, "dp": 16, "ep": 8, "sequence_parallel": True},
    }
)
factors = [0.0, 1.0, 1.1, 1.25, 1.5]  # 0: dropless
moe_batch = jax.tree.map(
    lambda *x: jnp.stack(x), *[moe.strategy.replace(moe_capacity_factor=c) for c in factors]
)
moe_eff = moe.efficiency.replace(moe_imbalance=1.2)
moe_rs = evaluate_many(moe.model, moe.training, moe.system, moe_batch, moe_eff)
dropped = jax.vmap(codesign.workload.moe_dropped_fraction, in_axes=(None, 0))(moe.model, moe_batch)
for c, t, a2a, d in zip(
    factors, moe_rs.step_time_s, moe_rs.breakdown_s["ep_comm"], dropped, strict=True
):
    mode = "dropless       " if c == 0 else f"capacity {c:<6g}"
    print(
        f"{mode} step {float(t):6.3f} s  all-to-all {float(a2a):5.3f} s  dropped {100 * float(d):6.3f} %"
    )

# %% [markdown]
# At capacity 1 the step is faster than dropless by what the imbalance cost, for about
# 1.5 % of the routed tokens (2048 tokens per router here: smaller shards, through more
# `tp` or `cp`, drop more). At 1.1 almost nothing is dropped at uniform routing and the step
# is still faster; past the router's imbalance (1.25 against 1.2) the padding costs more
# than dropless routing does.

# %% [markdown]
# Next steps: copy `experiments/configs/gpt3-175b-a100.toml` and change the model, system or
# strategy (`codesign presets` lists the catalog's models, accelerators and fabrics);
# `codesign evaluate RUN.toml` prints the report above from the shell; and `jax.grad` of
# `evaluate_unchecked` differentiates the step time with respect to any spec field.
