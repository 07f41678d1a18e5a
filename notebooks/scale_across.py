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
# # One training job across buildings and regions
#
# Frontier jobs no longer fit in one building. `codesign` models a job over several
# **sites** joined by a slow, oversubscribed, long-latency link, and answers:
#
# 1. **Which dimension should cross the link?** Data parallelism (the gradient reduction
#    crosses, hierarchically, hidden behind the backward pass) or pipeline parallelism (one
#    pipeline boundary crosses; activations go over the link every micro-batch).
# 2. **Which schedule?** Plain 1F1B stalls when the link's round trip is longer than the
#    work in flight; a cross-site schedule (CrossPipe-style) warms up extra micro-batches
#    before the link. DiLoCo-style training reduces over the link only every H steps.
# 3. **Unlike sites**: an H100 building and a GB200 building: how to split the work so that
#    neither waits, and what the pair loses against a homogeneous cluster.
# 4. **Co-design**: how many buildings, how much link bandwidth to buy, which dimension
#    crosses, by the same optimizer as any co-design problem.
#
# Convergence effects of DiLoCo (extra tokens) are outside the model: you supply them
# (`training.outer_tokens_factor`).

# %%
import os
from pathlib import Path

import jax
import matplotlib.pyplot as plt

import codesign as cd
from codesign import sites
from codesign.search import load_problem, solve

jax.config.update("jax_enable_x64", True)

# CODESIGN_NOTEBOOK_SMALL=1 (set by the test suite) shrinks the grids.
SMALL = os.environ.get("CODESIGN_NOTEBOOK_SMALL", "0") == "1"


def find_repo_root() -> Path:
    """The checkout holding ``experiments/``: walk up from the cwd, else next to the package."""
    here = Path.cwd().resolve()
    for d in [here, *here.parents, Path(cd.__file__).resolve().parent.parent]:
        if (d / "pyproject.toml").exists() and (d / "experiments" / "problems").is_dir():
            return d
    raise FileNotFoundError("no codesign checkout (pyproject.toml + experiments/problems) found")


ROOT = find_repo_root()

H100 = {
    "accelerator": "h100-sxm5-80gb",
    "num_accelerators": 1024,
    "tiers": [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 1024}],
}


def job(bw, latency_us, across="dp", schedule="1f1b", strategy=None, model="llama3-70b"):
    """Two buildings of 1,024 H100 joined by a link of ``bw`` GB/s per GPU."""
    st = strategy or {"tp": 8, "pp": 4, "dp": 32}
    return sites.load_sites_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": 1024, "tokens": 1e12},
            "link": {"preset": "cross-building", "bandwidth_gbps": bw, "latency_us": latency_us},
            "sites": [dict(H100, name="A", strategy=st), dict(H100, name="B", strategy=st)],
            "across": across,
            "schedule": schedule,
        }
    )


# %% [markdown]
# ## 1. Data or pipeline parallelism across a metro link?
#
# Llama 3 70B on two buildings, tp 8 and four pipeline stages per building, 1 ms apart. With
# data parallelism across, each building holds whole replicas (pp 4 inside); with pipeline
# parallelism across, each holds half of an 8-stage pipeline.

# %%
bws = [0.05, 0.2, 1.0, 5.0] if SMALL else [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0]
curves = {"dp across": [], "pp across, 1F1B": [], "pp across, cross-site schedule": []}
for bw in bws:
    curves["dp across"].append(float(sites.evaluate_sites(job(bw, 1000.0)).step_time_s))
    for sched, name in (
        ("1f1b", "pp across, 1F1B"),
        ("crosspipe", "pp across, cross-site schedule"),
    ):
        pp = job(bw, 1000.0, "pp", sched, {"tp": 8, "pp": 4, "dp": 32})
        curves[name].append(float(sites.evaluate_sites(pp).step_time_s))

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, ys in curves.items():
    ax.plot(bws, ys, "-o", ms=3, label=name)
ax.set_xscale("log")
ax.set_xlabel("link bandwidth (GB/s per GPU)")
ax.set_ylabel("step time (s)")
ax.set_title("Llama 3 70B, 2 x 1,024 H100, 1 ms apart", fontsize=9)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The data-parallel reduction crosses well down to a fraction of a GB/s per GPU, because it
# is reduced inside each building first and overlapped with the backward pass. The pipeline
# sends activations every micro-batch: at a slow link 1F1B stalls on the round trip, and the
# cross-site schedule hides it with extra warm-up micro-batches (paid in memory):

# %%
slow = job(0.2, 10_000.0, "pp", "1f1b")
for sched in ("1f1b", "crosspipe"):
    r = sites.evaluate_sites(slow.replace(schedule=sched))
    print(
        f"{sched:10s} step {float(r.step_time_s):7.3f} s  link adds {float(r.link_exposed_s):6.3f} s"
        f"  extra warm-up {float(r.extra_warmup[0]):3.0f}  memory A {float(r.memory_gb[0]):5.1f} GB"
    )

# %% [markdown]
# ## 2. DiLoCo: reduce over the link every H steps
#
# The single-site model has the cross-site tier as its outer tier (`cross_site = 1`) and
# `strategy.outer_sync_interval = H`: the outer reduction of the pseudo-gradient crosses every
# H steps, overlapped with the next H steps' compute (streaming DiLoCo). The tokens penalty
# is yours to give; here we ask what it may be before synchronous training wins again.


# %%
def flat(bw, **strategy):
    return cd.load_run_dict(
        {
            "model": {"preset": "llama3-70b"},
            "training": {"global_batch": 1024, "tokens": 1e12},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": 2048,
                "tiers": [
                    {"preset": "nvlink4"},
                    {"preset": "ib-ndr-400", "domain": 1024},
                    {"preset": "cross-building", "bandwidth_gbps": bw, "latency_us": 1000},
                ],
            },
            "strategy": dict(
                {"tp": 8, "pp": 4, "dp": 64, "placement": ["tp", "cp", "ep", "pp", "dp"]},
                **strategy,
            ),
        }
    )


for bw in (0.05, 0.5):
    sync = cd.evaluate(*flat(bw).specs())
    dil = cd.evaluate(*flat(bw, outer_sync_interval=16, outer_overlap=1.0).specs())
    print(
        f"{bw:5.2f} GB/s: sync {float(sync.step_time_s):6.2f} s, DiLoCo H=16 "
        f"{float(dil.step_time_s):6.2f} s -> pays while it needs < "
        f"x{float(sync.step_time_s / dil.step_time_s):.2f} the tokens"
    )

# %% [markdown]
# ## 3. Unlike sites: an H100 building and a GB200 building
#
# Each site gets its own inner strategy; the batch (data parallelism across) is split so
# that neither waits. `best_strategies` tries every pair of per-site strategies of a grid
# at the even split in one vmapped batch, then `balance` splits the best few exactly.

# %%
GB200 = {
    "accelerator": "gb200",
    "num_accelerators": 1152,
    "tiers": [{"preset": "nvlink5-nvl72", "domain": 72}, {"preset": "ib-xdr-800", "domain": 1152}],
}
pair = sites.load_sites_dict(
    {
        "model": {"preset": "llama3-70b"},
        "training": {"global_batch": 1024, "tokens": 1e12},
        "link": {"preset": "cross-building", "bandwidth_gbps": 1.0, "latency_us": 1000},
        "sites": [
            dict(H100, name="h100", strategy={"tp": 8, "pp": 4, "dp": 32}),
            dict(GB200, name="gb200", strategy={"tp": 8, "pp": 4, "dp": 36}),
        ],
    }
)
grid = sites.strategy_grid(
    tp=(4, 8),
    pp=(2, 4) if SMALL else (1, 2, 4, 8),
    microbatch=(1,) if SMALL else (1, 2),
    recompute=("selective", "full"),
    zero=(1,),
)
best, info = sites.best_strategies(pair, [grid, grid], tied=False)
print(f"{info['valid']} valid strategy pairs, best {info['strategies']}")
print(sites.format_sites(best, sites.evaluate_sites(best)))
print(f"even split {info['even_step_s']:.3f} s -> balanced {info['best_step_s']:.3f} s")

# %% [markdown]
# *vs homog.* compares with a homogeneous cluster of each type with the pair's total peak
# FLOP/s and the site's inner strategy: above 1 the pair is slower.
#
# ## 4. Co-design: how many buildings, how much link, which dimension crosses
#
# `experiments/problems/llama3-405b-multisite-placement.toml`: the cheapest Llama 3 405B
# run within 240 days and a 330 M$ budget, on buildings of 2,048 H100 (the accelerator count
# sets the number of buildings), the link's bandwidth a continuous knob, dp or pp
# outermost. The same problem goes to `codesign optimize` on the command line.

# %%
pb = load_problem(ROOT / "experiments" / "problems" / "llama3-405b-multisite-placement.toml")
res = solve(pb, method="sweep" if SMALL else "relaxed")
c = res.config
order = sorted(
    ["tp", "cp", "ep", "dp", "pp"],
    key=lambda d: float(c.strategy.placement[["tp", "cp", "ep", "dp", "pp"].index(d)]),
)
print(
    f"{float(c.system.num_accelerators) / 2048:.0f} buildings, link "
    f"{float(c.system.tiers[2].bandwidth_gbps):.3g} GB/s per GPU, {order[-1]} crosses, "
    f"tp {float(c.strategy.tp):g} pp {float(c.strategy.pp):g}: "
    f"{float(res.report.cost['time_to_train_days']):.0f} days, "
    f"${res.exact_objective / 1e6:.1f}M ({res.method})"
)
