"""Benchmarks of two revisions side by side, in one run (this machine is shared and noisy).

Checks out ``--before`` (a git revision) into a temporary worktree and runs each revision's
own benchmark scripts with its own code (``PYTHONPATH`` set to its tree), alternating
before/after ``--repeats`` times so that load on the machine falls on both alike, then
prints the figures side by side (median over the repeats):

* ``evaluate``: ``experiments/bench_evaluate.py`` (configurations per second of the sweep on
  a co-design grid of 1e7 points and a strategy-only grid, warm and cold with compilation, one
  call at a time, XLA temp memory; ``--quick`` uses the scripts' small grids, whose warm
  sweeps take a few hundredths of a second and so are noisy);
* ``codesign``: ``experiments/bench_codesign.py --quick`` (the optimizer against the
  exhaustive optimum on the quick suite: ratio, wall times, exact evaluations); with
  ``--codesign-only SUBSTRING ...``, the full suite's entries whose label contains one,
  without the random, cold and scaling studies (``--repeats`` alternating runs, medians of
  the wall times), written to a temporary directory so the stored results stay as they are;
* ``tests``: the wall time of fast-tier test files (``--test-files``, default the four largest
  by compile time) under ``pytest -n 2 --dist loadfile -m "not slow"``, each revision running
  its own copy of the files, and how many tests passed.

Usage:
    python experiments/compare_revisions.py --before 2468f90 [--bench evaluate codesign] [--repeats 3]
        [--codesign-only llama3-70b-accelerator-design ...] [--codesign-max-grid 1.1e9]
        [--test-files tests/test_model_parts.py ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_EVAL_PATTERNS = {
    "codesign_cold_s": r"co-design grid:.*?\n\s+cold ([\d.]+) s",
    "codesign_mcfg_s": r"co-design grid:.*?\n.*?-> ([\d.]+) M configs/s",
    "strategy_cold_s": r"strategy-only grid:.*?\n\s+cold ([\d.]+) s",
    "strategy_mcfg_s": r"strategy-only grid:.*?\n.*?-> ([\d.]+) M configs/s",
    "one_at_a_time_cfg_s": r"one-at-a-time codesign.evaluate \(checked, jitted\): ([\d,]+) configs/s",
    "sweep_temp_mib": r"XLA temp buffers of one sweep call ([\d.]+) MiB",
}
_HIGHER_IS_BETTER = {"codesign_mcfg_s", "strategy_mcfg_s", "one_at_a_time_cfg_s"}
TEST_FILES = [
    "tests/test_model_parts.py",
    "tests/test_step.py",
    "tests/test_relax.py",
    "tests/test_hardware_axes.py",
]
"""Default files of ``--bench tests``: fast-tier files whose time is mostly compilation."""


def _run(tree: Path, args: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    env.pop("XLA_FLAGS", None)
    p = subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
    )
    if p.returncode != 0:
        raise RuntimeError(f"{args} in {tree} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p.stdout


def parse_evaluate(out: str) -> dict:
    """The figures of one ``bench_evaluate.py`` run."""
    vals = {}
    for k, pat in _EVAL_PATTERNS.items():
        m = re.search(pat, out, re.S)
        vals[k] = float(m.group(1).replace(",", "")) if m else float("nan")
    return vals


def _worktree(rev: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix="codesign-before-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(d), rev],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return d


def compare_evaluate(before: Path, repeats: int, quick: bool) -> list[str]:
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    cmd = ["experiments/bench_evaluate.py", *(["--quick"] if quick else [])]
    for i in range(repeats):
        for name, tree in (("before", before), ("after", ROOT)):
            runs[name].append(parse_evaluate(_run(tree, cmd, 900)))
            print(
                f"  evaluate run {i + 1}/{repeats} {name}: {runs[name][-1]}",
                file=sys.stderr,
                flush=True,
            )
    lines = [
        f"bench_evaluate.py{' --quick' if quick else ''}, median of {repeats} alternating runs",
        "",
        "| figure | before | after | after/before |",
        "|---|---|---|---|",
    ]
    for k in _EVAL_PATTERNS:
        b = statistics.median(r[k] for r in runs["before"])
        a = statistics.median(r[k] for r in runs["after"])
        better = "higher is better" if k in _HIGHER_IS_BETTER else "lower is better"
        lines.append(f"| {k} ({better}) | {b:.4g} | {a:.4g} | {a / b:.3f} |")
    return lines


def compare_tests(before: Path, repeats: int, files: list[str]) -> list[str]:
    """Wall time of the fast tier's ``files`` in each revision, alternating, and the count of
    passed tests (a revision's run that fails raises)."""
    cmd = ["-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-m", "not slow", *files]
    runs: dict[str, list[tuple[float, str]]] = {"before": [], "after": []}
    for i in range(repeats):
        for name, tree in (("before", before), ("after", ROOT)):
            t0 = time.perf_counter()
            out = _run(tree, cmd, 3600)
            passed = re.findall(r"(\d+) passed", out)
            runs[name].append((time.perf_counter() - t0, passed[-1] if passed else "?"))
            print(f"  tests run {i + 1}/{repeats} {name}: {runs[name][-1]}", file=sys.stderr)
    b = statistics.median(t for t, _ in runs["before"])
    a = statistics.median(t for t, _ in runs["after"])
    return [
        f"fast-tier files ({', '.join(files)}), wall time in s, median of {repeats} alternating "
        "runs",
        "",
        "| figure | before | after | after/before |",
        "|---|---|---|---|",
        f"| wall time (lower is better) | {b:.1f} | {a:.1f} | {a / b:.3f} |",
        f"| tests passed | {runs['before'][-1][1]} | {runs['after'][-1][1]} | - |",
    ]


def _codesign_run(tree: Path, only: list[str] | None, max_grid: float = 1e6) -> dict:
    """One ``bench_codesign.py`` run of ``tree``: ``--quick``, or the ``only`` entries (and
    the scaling study up to ``max_grid`` points)."""
    if not only:
        _run(tree, ["experiments/bench_codesign.py", "--quick"], 3600)
        return json.loads(
            (tree / "experiments" / "results" / "codesign_bench_quick.json").read_text()
        )
    with tempfile.TemporaryDirectory(prefix="codesign-bench-") as out:
        args = ["--only", *only, "--no-random", "--no-cold", "--max-grid", f"{max_grid:g}"]
        _run(tree, ["experiments/bench_codesign.py", *args, "--out", out], 3600)
        return json.loads((Path(out) / "codesign_bench.json").read_text())


def _r(row: dict, key: str) -> str:
    x = row.get(key)
    return "-" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _exact(row: dict, key: str) -> bool:
    x = row.get(key)
    return x is not None and math.isfinite(x) and x <= 1.0 + 1e-9


def _geo(xs) -> float:
    xs = [float(x) for x in xs]
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _geo_off(rows: list[dict]) -> float:
    """``exp(mean |log(relaxed / exhaustive)|)`` over the rows that have a relaxed ratio."""
    xs = [x for r in rows if (x := r.get("relaxed_ratio")) and 0 < x < math.inf]
    return math.exp(sum(abs(math.log(x)) for x in xs) / len(xs)) if xs else float("nan")


def compare_codesign(
    before: Path, repeats: int = 1, only: list[str] | None = None, max_grid: float = 1e6
) -> list[str]:
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(repeats):
        for name, tree in (("before", before), ("after", ROOT)):
            runs[name].append(_codesign_run(tree, only, max_grid))
            print(f"  codesign run {i + 1}/{repeats} {name}: done", file=sys.stderr, flush=True)
    res = {name: dict(rs[0]) for name, rs in runs.items()}
    for name, rs in runs.items():  # median wall times over the repeats
        medians = {
            "suite": ("opt_warm_s", "opt_cold_s"),
            "scaling": ("opt_warm_s", "ex_warm_est_s"),
        }
        for part, keys in medians.items():
            res[name][part] = [
                {**row, **{k: statistics.median(r[part][j][k] for r in rs) for k in keys}}
                for j, row in enumerate(res[name].get(part, []))
            ]
        res[name]["total_s"] = statistics.median(r["total_s"] for r in rs)
        for row in res[name]["scaling"]:
            row["speedup_warm"] = row["ex_warm_est_s"] / row["opt_warm_s"]
    what = f"--only {' '.join(only)}" if only else "--quick"
    lines = [
        f"bench_codesign.py {what} (optimizer / exhaustive optimum; wall times in s, median of "
        f"{repeats} alternating run(s))",
        "",
        "| problem | ratio before | ratio after | rounded before | rounded after | relaxed before | relaxed after | opt warm before | opt warm after | opt first before | opt first after | evals before | evals after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    after_rows = {r["problem"]: r for r in res["after"]["suite"]}
    for rb in res["before"]["suite"]:
        ra = after_rows.get(rb["problem"], {})
        lines.append(
            f"| {rb['problem']} | {rb['ratio']:.4f} | {ra.get('ratio', float('nan')):.4f} | "
            f"{_r(rb, 'rounded_ratio')} | {_r(ra, 'rounded_ratio')} | "
            f"{_r(rb, 'relaxed_ratio')} | {_r(ra, 'relaxed_ratio')} | "
            f"{rb['opt_warm_s']:.2f} | {ra.get('opt_warm_s', float('nan')):.2f} | "
            f"{rb['opt_cold_s']:.2f} | {ra.get('opt_cold_s', float('nan')):.2f} | "
            f"{rb['opt_evals']:,} | {ra.get('opt_evals', 0):,} |"
        )
    scal_b, scal_a = res["before"].get("scaling", []), res["after"].get("scaling", [])
    if only and scal_b and len(scal_b) == len(scal_a):
        lines += [
            "",
            "Scaling study (warm optimizer against the warm exhaustive sweep, same grids)",
            "",
            "| grid points | ratio before | ratio after | evals before | evals after | opt warm before | opt warm after | sweep warm before | sweep warm after | speedup before | speedup after |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for rb, ra in zip(scal_b, scal_a, strict=True):
            lines.append(
                f"| {rb['grid']:.3g} | {rb['ratio']:.4f} | {ra['ratio']:.4f} | "
                f"{rb['opt_evals']:,} | {ra['opt_evals']:,} | {rb['opt_warm_s']:.2f} | "
                f"{ra['opt_warm_s']:.2f} | {rb['ex_warm_est_s']:.1f} | {ra['ex_warm_est_s']:.1f} | "
                f"{rb['speedup_warm']:.1f}x | {ra['speedup_warm']:.1f}x |"
            )
    for name in ("before", "after"):
        s, rows = res[name]["summary"], res[name]["suite"]
        lines.append(
            f"\n{name}: within 1 % {int(s['within_1pct'])}/{s['n']}, worst {s['worst_ratio']:.4f}, "
            f"not worse than random {int(s['not_worse_than_random'])}/{s['n']}; "
            f"rounded point exact on {sum(_exact(r, 'rounded_ratio') for r in rows)}/{len(rows)}; "
            f"relaxed objective off the exhaustive optimum by a geometric mean factor "
            f"{_geo_off(rows):.3f}; exact evaluations {sum(r['opt_evals'] for r in rows):,} in "
            f"all (geometric mean {_geo(r['opt_evals'] for r in rows):,.0f}); "
            f"total {res[name]['total_s']:.0f} s"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--before", required=True, help="git revision to compare with (the working tree is 'after')"
    )
    ap.add_argument(
        "--bench",
        nargs="+",
        default=["evaluate", "codesign"],
        choices=["evaluate", "codesign", "tests"],
    )
    ap.add_argument(
        "--test-files",
        nargs="+",
        default=TEST_FILES,
        help="with --bench tests, the test files to time (default: %(default)s)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="alternating runs of bench_evaluate, and of bench_codesign with --codesign-only "
        "(default 3)",
    )
    ap.add_argument(
        "--codesign-only",
        nargs="+",
        metavar="SUBSTRING",
        help="bench_codesign on these full-suite entries instead of --quick (an empty "
        "string: every entry)",
    )
    ap.add_argument(
        "--codesign-max-grid",
        type=float,
        default=1e6,
        help="with --codesign-only, the scaling study's largest grid (default 1e6; 1.1e9: the "
        "full study)",
    )
    ap.add_argument("--quick", action="store_true", help="bench_evaluate.py's small grids")
    ap.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    args = ap.parse_args()
    before = _worktree(args.before)
    try:
        lines = [f"# Before ({args.before}) and after (working tree), side by side", ""]
        if "evaluate" in args.bench:
            lines += compare_evaluate(before, args.repeats, args.quick) + [""]
        if "codesign" in args.bench:
            repeats = args.repeats if args.codesign_only else 1
            lines += compare_codesign(
                before, repeats, args.codesign_only, args.codesign_max_grid
            ) + [""]
        if "tests" in args.bench:
            lines += compare_tests(before, args.repeats, args.test_files) + [""]
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
