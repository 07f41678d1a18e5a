"""Benchmark: XLA:CPU's default emitters against codesign's compiler options, side by side.

``codesign._compile.jit`` compiles the model's programs with
``xla_cpu_use_fusion_emitters=False`` on CPU.  This script runs the same work in fresh
processes under both settings, alternating (the shared machine is noisy), and prints:

* the first ``codesign.evaluate`` of a dense and of an MoE configuration (trace + compile + run:
  what a user waits for): GPT-3 175B on 1024 A100 and DeepSeek-V3 on 256 H100;
* the warm one-at-a-time ``codesign.evaluate`` rate;
* the two sweeps of ``bench_evaluate.py`` (GPT-3 175B; cold with compile, warm throughput as the
  best of three calls), float32, sharded over one CPU device per core;
* the process's max RSS;
* whether every printed value is the same, bit for bit, under both settings;
* with ``--tests``, the wall time of a subset of the fast test tier under both settings.

"default" sets ``--xla_cpu_use_fusion_emitters=true`` in ``XLA_FLAGS`` (the user's setting
wins over codesign's, so this is XLA's own default); "codesign" leaves it to the library.

Usage: python experiments/bench_compile.py [--repeats N] [--tests] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {
    "default": "--xla_cpu_use_fusion_emitters=true",
    "codesign": "",
}
TEST_SUBSET = [
    "tests/test_step.py",
    "tests/test_relax.py",
    "tests/test_memory.py",
    "tests/test_pipeline_schedule.py",
]


def child(quick: bool) -> None:
    """One process's measurements, printed as one JSON line."""
    import resource

    import jax

    jax.config.update("jax_num_cpu_devices", os.cpu_count())  # as bench_evaluate.py: float32
    import codesign as cd
    from codesign.search import sweep

    out: dict = {"values": {}}
    cfgs = {
        "gpt3-175b / 1024 a100": cd.load_run(ROOT / "experiments/configs/gpt3-175b-a100.toml"),
        "deepseek-v3 / 256 h100": cd.load_run_dict(
            {
                "model": {"preset": "deepseek-v3"},
                "training": {"global_batch": 1024},
                "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 256},
                "strategy": {"tp": 2, "pp": 8, "ep": 16, "dp": 16, "recompute": "full"},
            }
        ),
    }
    for name, cfg in cfgs.items():
        t0 = time.perf_counter()
        r = cd.evaluate(*cfg.specs())
        t = float(r.step_time_s)
        out[f"first evaluate, {name} (s)"] = time.perf_counter() - t0
        out["values"][name] = [t.hex(), float(r.memory_gb["total"]).hex()]

    specs = cfgs["gpt3-175b / 1024 a100"].specs()
    n, t0 = 200, time.perf_counter()
    for _ in range(n):
        cd.evaluate(*specs).step_time_s.block_until_ready()
    out["warm evaluate (configs/s)"] = n / (time.perf_counter() - t0)

    from bench_evaluate import grids  # this script's folder is on sys.path

    base = cfgs["gpt3-175b / 1024 a100"]
    for name, axes in grids(quick).items():
        t0 = time.perf_counter()
        sweep(base, axes, progress=False)
        out[f"{name}: cold (s)"] = time.perf_counter() - t0
        res = [sweep(base, axes, progress=False) for _ in range(3)]
        out[f"{name}: warm (M configs/s)"] = max(r.num_points / r.wall_s for r in res) / 1e6
        res = res[0]
        out["values"][name] = [float(res.best_values[0]).hex(), int(res.num_feasible)]
    out["max RSS (GB)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(json.dumps(out))


def _env(mode: str) -> dict:
    env = dict(os.environ)
    flags = re.sub(r"--xla_cpu_use_fusion_emitters=\S*", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{flags} {MODES[mode]}".strip()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def run_child(mode: str, quick: bool) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *(["--quick"] if quick else [])],
        env=_env(mode),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_tests(mode: str) -> float:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-q", "-m"]
    subprocess.run(
        [*cmd, "not slow", "-p", "no:cacheprovider", *TEST_SUBSET],
        env=_env(mode),
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=2, help="runs per setting, alternating")
    ap.add_argument("--tests", action="store_true", help="also time a subset of the fast tests")
    ap.add_argument("--quick", action="store_true", help="the smaller grids (smoke run)")
    args = ap.parse_args()
    if args.child:
        child(args.quick)
        return
    runs: dict = {m: [] for m in MODES}
    tests: dict = {m: [] for m in MODES}
    for i in range(args.repeats):
        for mode in MODES:
            print(f"run {i + 1}/{args.repeats}: {mode} ...", flush=True)
            runs[mode].append(run_child(mode, args.quick))
            if args.tests:
                tests[mode].append(run_tests(mode))
    keys = [k for k in runs["default"][0] if k != "values"]
    print(f"\nmedian of {args.repeats} fresh processes per setting (alternating)")
    print(f"{'measure':<46} {'default':>10} {'codesign':>10} {'ratio':>7}")
    for k in keys:
        a = statistics.median(r[k] for r in runs["default"])
        b = statistics.median(r[k] for r in runs["codesign"])
        print(f"{k:<46} {a:>10.3f} {b:>10.3f} {b / a:>7.2f}")
    if args.tests:
        a, b = statistics.median(tests["default"]), statistics.median(tests["codesign"])
        label = f"fast tests, {len(TEST_SUBSET)} files (s)"
        print(f"{label:<46} {a:>10.1f} {b:>10.1f} {b / a:>7.2f}")
    same = all(r["values"] == runs["default"][0]["values"] for m in MODES for r in runs[m])
    print(f"\nsame values, bit for bit, in every run: {same}")


if __name__ == "__main__":
    main()
