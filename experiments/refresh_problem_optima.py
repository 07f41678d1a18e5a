"""Recompute the sweep optimum that a problem file's comment states, and write it back.

Some files of ``experiments/problems`` state their exhaustive optimum in a comment block
that starts with ``# Sweep optimum``, so that a reader sees the answer without running it.
The calibrated presets move with every calibration, and the answer with them: this script
sweeps each such problem (``codesign.search.distributed_sweep``, the exhaustive method of
``codesign optimize``), and replaces the block with the optimum's objective, its point (every
axis of the file's grid) and a few figures of the exact model's report at that point.
``tests/test_problem_files.py`` (slow tier) checks that each block states the current
optimum: its objective to 0.1 % and a point that reaches it.

The block is machine-written; what a file says about its answer in words belongs in the
comment above it, and is reviewed by hand when the point moves (``--check`` lists them).

Usage::

    python experiments/refresh_problem_optima.py           # rewrite the blocks in place
    python experiments/refresh_problem_optima.py --check   # only report what differs; exit 1
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import codesign as cd  # noqa: E402
from codesign.calibration._presets import DATE  # noqa: E402
from codesign.search import distributed_sweep, load_problem  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "experiments" / "problems"
BLOCK = re.compile(r"^# Sweep optimum.*?(?=^[^#]|\Z)", re.S | re.M)
"""From the ``# Sweep optimum`` line to the first line that is not a comment."""

UNITS = {
    "step_time": (1.0, "s"),
    "time_to_train": (1.0, "days"),
    "cost_to_train": (1e-6, "M$"),
    "usd_per_token": (1e6, "$/M-tokens"),
    "energy_to_train": (1.0, "MWh"),
    "neg_mfu": (-100.0, "%-MFU"),
}
"""The objective's scale and unit in the block (the sweep reports seconds, days, USD, USD per
token, MWh and minus the MFU)."""


def _num(x: float) -> str:
    """Integers exact, other numbers to four significant digits; thousands separated."""
    x = float(x)
    if x != int(x):
        x = float(f"{x:.4g}")
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e15 else f"{x:,}"


def _value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "-".join(str(s) for s in v)
    if isinstance(v, str) or not isinstance(v, (int, float)):
        return str(v)
    return _num(v)


def _key(k: str) -> str:
    for prefix in ("strategy.", "system."):
        if k.startswith(prefix):
            return k[len(prefix) :]
    return k


def block(path: Path) -> str:
    """The comment block that states the problem's current sweep optimum."""
    pb = load_problem(path)
    res = distributed_sweep(pb, progress=False, top_k=1)
    if res.num_feasible == 0:
        raise SystemExit(f"{path.name}: no feasible point")
    scale, unit = UNITS[pb.objective]
    r = cd.evaluate(*res.config(0, pb.cfg).specs())
    cost = {k: float(v) for k, v in r.cost.items()}
    point = ", ".join(f"{_key(k)} = {_value(v)}" for k, v in res.best().items())
    figures = [
        f"{float(r.step_time_s):.4g} s a step",
        f"{cost['time_to_train_days']:.4g} days",
        f"{cost['capex_usd'] * 1e-6:,.1f} M$ capex",
        f"MFU {100 * float(r.mfu):.1f} %",
    ]
    lines = [
        f"# Sweep optimum (presets of {DATE}; {res.num_points:,} points; written by",
        "# experiments/refresh_problem_optima.py):",
        f"#   {pb.objective} = {_num(res.best_values[0] * scale)} {unit}",
        f"#   at {point}",
        f"#   ({', '.join(figures)})",
    ]
    return _wrap(lines) + "\n"


def _wrap(lines: list[str], width: int = 100) -> str:
    """Comment lines wrapped at ``width`` after a comma (continuations indented)."""
    out = []
    for ln in lines:
        while len(ln) > width:
            cut = ln.rfind(", ", 0, width) + 1
            if cut <= 0:
                break
            out.append(ln[:cut])
            ln = "#     " + ln[cut:].lstrip()
        out.append(ln)
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report stale blocks, write nothing")
    args = ap.parse_args(argv)
    stale = []
    for path in sorted(PROBLEMS.glob("*.toml")):
        text = path.read_text()
        m = BLOCK.search(text)
        if m is None:
            continue
        new = block(path)
        if m.group(0) == new:
            print(f"{path.name}: current")
            continue
        stale.append(path.name)
        print(f"{path.name}: {'stale' if args.check else 'rewritten'}\n{new}")
        if not args.check:
            path.write_text(text[: m.start()] + new + text[m.end() :])
    if stale:
        print(
            f"{len(stale)} block(s) {'differ' if args.check else 'rewritten'}: " + ", ".join(stale)
        )
        print("Review the words above each rewritten block: they may describe the old point.")
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
