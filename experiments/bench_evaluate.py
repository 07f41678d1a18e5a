"""Benchmark: exact configurations evaluated per second by the batched evaluator.

Prints, for float32 and (with --x64) float64:
* a co-design grid (strategies x per-tier bandwidth and latency values) of >= 10^7 points,
  with the network axes innermost so the strategy-dependent work is hoisted per block;
* a strategy-only grid where every point needs the whole model (the worst case);
* one-at-a-time ``codesign.evaluate`` calls from Python (what a Python-loop tool does);
* peak memory: XLA's temp buffer size of the compiled sweep and the process's max RSS.

Usage: python experiments/bench_evaluate.py [--x64] [--quick]
"""

from __future__ import annotations

import os
import sys

# Use every core: one JAX CPU device per core, the sweep shards over them.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count()}")

import argparse  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--x64", action="store_true", help="float64 (default float32)")
    ap.add_argument("--quick", action="store_true", help="smaller grids (smoke run)")
    args = ap.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)

    import codesign as cd
    from codesign.search import sweep

    cfg = cd.load_run(ROOT / "experiments/configs/gpt3-175b-a100.toml")
    dtype = "float64" if args.x64 else "float32"
    print(
        f"jax {jax.__version__}, {len(jax.devices())} CPU devices, {os.cpu_count()} cores, {dtype}"
    )
    print(
        f"base: {cfg.names['model']} on {int(cfg.system.num_accelerators)} x {cfg.names['accelerator']}\n"
    )

    grids_ = grids(args.quick)
    codesign_grid = grids_["co-design grid"]
    rows = []
    for name, axes in grids_.items():
        t0 = time.perf_counter()
        res = sweep(cfg, axes, progress=False)
        cold = time.perf_counter() - t0
        res = sweep(cfg, axes, progress=False)  # warm: compiled once per grid structure
        rate = res.num_points / res.wall_s
        rows.append((name, res.num_points, res.num_valid, res.num_feasible, cold, res.wall_s, rate))
        best = res.best()
        print(
            f"{name}: {res.num_points:,} points, {res.num_valid:,} valid, {res.num_feasible:,} feasible"
        )
        print(
            f"  cold {cold:.2f} s (with compile), warm {res.wall_s:.3f} s -> {rate / 1e6:.2f} M configs/s"
        )
        print(f"  best step {res.best_values[0]:.3f} s at {best}\n")

    # Compiled memory of one sweep call (XLA temp buffers) for the co-design grid.
    from codesign.search import _sweep as sw

    mem = _sweep_temp_bytes(sw, cfg, codesign_grid)
    maxrss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(
        f"peak memory: XLA temp buffers of one sweep call {mem / 2**20:.1f} MiB; process max RSS {maxrss_gb:.2f} GB"
    )

    # One configuration at a time from Python (what a pure-Python analytical tool does).
    specs = cfg.specs()
    cd.evaluate(*specs).step_time_s.block_until_ready()
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        cd.evaluate(*specs).step_time_s.block_until_ready()
    loop_rate = n / (time.perf_counter() - t0)
    print(f"one-at-a-time codesign.evaluate (checked, jitted): {loop_rate:,.0f} configs/s")
    print("\nsummary")
    print(
        f"{'grid':<20} {'points':>12} {'valid':>10} {'cold s':>8} {'warm s':>8} {'M configs/s':>12}"
    )
    for name, npts, nv, _nf, cold, warm, rate in rows:
        print(f"{name:<20} {npts:>12,} {nv:>10,} {cold:>8.2f} {warm:>8.3f} {rate / 1e6:>12.2f}")
    print("reference: Calculon (pure-Python analytical model) ~500 configs/s")
    sys.stdout.flush()


def grids(quick: bool = False) -> dict:
    """The two benchmark grids of GPT-3 175B (``--quick``: smaller), by name."""
    import numpy as np

    strategy_axes = {
        "strategy.tp": [1, 2, 4, 8],
        "strategy.pp": [1, 2, 4, 8, 16, 32],
        "strategy.microbatch": [1, 2, 4],
        "strategy.interleave": [1, 2, 3, 4],
        "strategy.recompute": ["none", "selective", "full"],
        "strategy.zero": [0, 1, 2, 3],
    }
    nb = 10 if quick else 100
    network_axes = {
        "system.tiers[0].bandwidth_gbps": list(np.linspace(50, 900, 10)),
        "system.tiers[1].bandwidth_gbps": list(np.linspace(6.25, 100, nb)),
        "system.tiers[1].latency_us": [2.0, 5.0, 10.0],
    }
    codesign_grid = {**strategy_axes, **network_axes}
    big_strategy = {
        "strategy.tp": [1, 2, 4, 8, 16],
        "strategy.pp": [1, 2, 4, 8, 16, 32, 64],
        "strategy.cp": [1, 2, 4, 8],
        "strategy.microbatch": [1, 2, 3, 4, 6, 8, 12, 16],
        "strategy.interleave": [1, 2, 3, 4, 6, 8],
        "strategy.recompute": ["none", "selective", "full"],
        "strategy.zero": [0, 1, 2, 3],
        "strategy.sequence_parallel": [0.0, 1.0],
        "strategy.overlap_dp": [0.0, 1.0],
        "strategy.placement": [["tp", "cp", "ep", "dp", "pp"], ["tp", "cp", "ep", "pp", "dp"]],
    }
    if quick:
        big_strategy["strategy.microbatch"] = [1, 2]
    return {"co-design grid": codesign_grid, "strategy-only grid": big_strategy}


def _sweep_temp_bytes(sw, cfg, axes) -> int:
    """XLA's temp allocation of the compiled sweep call for ``axes``."""
    import jax.numpy as jnp
    import numpy as np

    from codesign.rules import active_constraints, caps_of

    base = jax.tree_util.tree_map(
        jnp.asarray,
        {
            "model": cfg.model,
            "training": cfg.training,
            "system": cfg.system,
            "strategy": cfg.strategy,
            "efficiency": cfg.efficiency,
        },
    )
    paths = list(axes)
    tables = [sw.axis_table(p, axes[p]) for p in paths]
    shape = tuple(len(t) for t in tables)
    split = sw._split_point(shape, 4096)
    inner_shape = shape[split:]
    inner_idx = np.indices(inner_shape).reshape(len(inner_shape), -1)
    itype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    inner_vals = tuple(
        jnp.asarray(tables[split + a][inner_idx[a]]) for a in range(len(inner_shape))
    )
    devices = tuple(jax.devices())
    caps = caps_of({})  # the sweep's caps when a problem sets none
    n_outer = int(np.prod(shape[:split]))
    n_steps = int(min(256, -(-n_outer // len(devices))))
    call = sw._compiled_call(
        jax.tree_util.tree_structure(base),
        tuple(paths),
        shape,
        split,
        True,
        "step_time",
        10,
        n_steps,
        devices,
        2,  # counts of valid and feasible points (no diagnosing pass)
        active_constraints(caps),  # none set: no constraint is computed, as in the sweep
    )
    starts = jnp.arange(len(devices), dtype=itype) * n_steps
    lowered = call.lower(
        base,
        tuple(jnp.asarray(t) for t in tables),
        inner_vals,
        tuple(jnp.asarray(i, dtype=itype) for i in inner_idx),
        jnp.asarray(caps, dtype=jnp.result_type(float)),
        starts,
    )
    return lowered.compile().memory_analysis().temp_size_in_bytes


if __name__ == "__main__":
    main()
