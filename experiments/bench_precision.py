"""Benchmark: sweep speed by training precision, of two revisions side by side in one run.

A low-precision run has terms a 16-bit run does not (quantization casts, FP8 attention, the
16-bit layers of ``Training.bf16_layers_start`` / ``_end``), so its compiled sweep is larger.
This script measures the warm sweep rate (configurations per second) of one strategy x
bandwidth grid (GPT-3 175B on 4,096 H100, ``experiments/configs/gpt3-175b-4096-h100.toml``;
1.6 M points: tp, pp, cp, micro-batch, interleave, recomputation, ZeRO, sequence parallelism
and 40 scale-out bandwidths) for each precision given, with this tree's code and, with
``--before REV``, with that revision's (checked out into a temporary git worktree), alternating
the two ``--repeats`` times so that load on the shared machine falls on both alike; it prints
the median rates side by side.

Each measurement is a child process (``--child``) with ``PYTHONPATH`` set to the tree it
measures; the child uses only ``codesign.load_run_dict`` and ``codesign.search.sweep``, which
every revision since the sweep has, and prints the best of 3 warm sweeps.

Usage::

    python experiments/bench_precision.py                               # this tree only
    python experiments/bench_precision.py --before 8b87b14 --repeats 5  # side by side
    python experiments/bench_precision.py --precisions bf16 fp8-current mxfp8 fp4
    python experiments/bench_precision.py --before HEAD --precisions fp8-current+1

A precision ``NAME+K`` keeps ``K`` transformer layers at each end in 16 bits
(``bf16_layers_start`` = ``bf16_layers_end`` = ``K``, which turns ``first_last_layers_bf16``
on): the sweep with the 16-bit layers' terms compiled in.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "experiments/configs/gpt3-175b-4096-h100.toml"
AXES = {
    "strategy.tp": [1, 2, 4, 8, 16],
    "strategy.pp": [1, 2, 4, 8, 16, 32, 64],
    "strategy.cp": [1, 2, 4, 8],
    "strategy.microbatch": [1, 2],
    "strategy.interleave": [1, 2, 3, 4, 6, 8],
    "strategy.recompute": ["none", "selective", "full"],
    "strategy.zero": [0, 1, 2, 3],
    "strategy.sequence_parallel": [0.0, 1.0],
    "system.tiers[1].bandwidth_gbps": [12.5 + 2.5 * i for i in range(40)],
}
_RATE = re.compile(r"(\S+) (\d+) points warm ([\d.]+) s -> ([\d.]+) M/s")


def child(precision: str) -> None:
    """Print the best of 3 warm sweeps of the grid for ``precision`` (the code on sys.path)."""
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count()}")
    import codesign as cd
    from codesign.search import sweep

    doc = tomllib.loads(CONFIG.read_text())
    name, _, k = precision.partition("+")
    doc["training"]["precision"] = name
    if k:
        doc["training"].update(bf16_layers_start=float(k), bf16_layers_end=float(k))
    cfg = cd.load_run_dict(doc)
    sweep(cfg, AXES, progress=False)  # compile
    wall = min(sweep(cfg, AXES, progress=False).wall_s for _ in range(3))
    n = sweep(cfg, AXES, progress=False).num_points
    print(f"{precision} {n} points warm {wall:.4f} s -> {n / wall / 1e6:.2f} M/s", flush=True)


def measure(tree: Path, precision: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    env.pop("XLA_FLAGS", None)
    args = [sys.executable, str(Path(__file__).resolve()), "--child", precision]
    p = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    m = _RATE.search(p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{tree} {precision} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return float(m.group(4))


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a git revision to measure beside this tree")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs (median)")
    ap.add_argument("--precisions", nargs="+", default=["bf16", "fp8-current"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    head = _git("rev-parse", "--short", "HEAD") + (
        "+dirty" if _git("status", "--porcelain") else ""
    )
    trees = {f"this tree ({head})": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            wt = Path(tmp) / "before"
            _git("worktree", "add", "--detach", "-q", str(wt), args.before)
            trees = {f"before ({args.before})": wt, **trees}
        try:
            rates = {(t, p): [] for t in trees for p in args.precisions}
            for i in range(args.repeats):
                for p in args.precisions:
                    for name, tree in trees.items():
                        rates[name, p].append(measure(tree, p))
                print(f"repeat {i + 1}/{args.repeats} done", file=sys.stderr, flush=True)
        finally:
            if args.before:
                _git("worktree", "remove", "--force", str(wt))
    n = 1
    for v in AXES.values():
        n *= len(v)
    print(f"warm sweep rate, M configs/s (median of {args.repeats}; {n:,} points, {CONFIG.name})")
    names = list(trees)
    w = max(len(nm) for nm in names) + 2
    print(f"{'precision':<14}" + "".join(f"{nm:>{w}}" for nm in names))
    for p in args.precisions:
        cells = "".join(f"{statistics.median(rates[nm, p]):>{w}.2f}" for nm in names)
        print(f"{p:<14}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
