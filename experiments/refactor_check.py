"""Refactor check: the model's numbers before and after a code change, compared to 1e-9.

Writes (``--write FILE``) or compares against (``--compare FILE``) a snapshot of

* the full report (step time, every breakdown term, memory, cost) of every run file in
  ``experiments/configs/`` and of the base configuration of every problem in
  ``experiments/problems/``;
* the exhaustive sweep (best objective, top-5 indices, valid and feasible counts) of every
  shipped problem whose grid has at most ``--max-grid`` points.

It runs against the current checkout's ``codesign`` whatever its module layout (it tries
the post-refactor import paths first, then the pre-refactor ones), so the same script
produces the snapshot of an old revision (``PYTHONPATH=<old checkout> python
experiments/refactor_check.py --write before.json``) and checks the new one.

``experiments/results/refactor_baseline.json`` is the pre-refactor code (2468f90) run on the
current problem files (copied into its checkout), so the comparison isolates the code.

Usage: python experiments/refactor_check.py --compare experiments/results/refactor_baseline.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parent.parent


def _api():
    import codesign as cd

    try:
        from codesign.search import distributed_sweep, load_problem
    except ImportError:  # before the refactor
        from codesign.optimize import distributed_sweep
        from codesign.problem import load_problem
    try:
        from codesign import report_to_dict
    except ImportError:
        from codesign.report import report_to_dict
    return cd, load_problem, distributed_sweep, report_to_dict


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif isinstance(v, bool):
            out[key] = float(v)
        elif isinstance(v, int | float):
            out[key] = float(v)
    return out


def snapshot(max_grid: int) -> dict:
    cd, load_problem, distributed_sweep, report_to_dict = _api()
    snap = {"reports": {}, "sweeps": {}}
    for f in sorted((ROOT / "experiments" / "configs").glob("*.toml")):
        cfg = cd.load_run(f)
        snap["reports"][f"configs/{f.name}"] = _flat(report_to_dict(cd.evaluate(*cfg.specs()), cfg))
    for f in sorted((ROOT / "experiments" / "problems").glob("*.toml")):
        pb = load_problem(f)
        try:  # a problem's base configuration need not be a valid run
            r = cd.evaluate(*pb.cfg.specs())
            snap["reports"][f"problems/{f.name}"] = _flat(report_to_dict(r, pb.cfg))
        except cd.SpecError:
            pass
        if pb.grid_size() <= max_grid:
            res = distributed_sweep(pb, top_k=5, progress=False)
            snap["sweeps"][f.name] = {
                "best_values": [float(v) for v in res.best_values],
                "best_indices": [int(i) for i in res.best_indices],
                "num_valid": int(res.num_valid),
                "num_feasible": int(res.num_feasible),
                "num_points": int(res.num_points),
            }
        print(f"  {f.name}", file=sys.stderr)
    return snap


def _close(a: float, b: float, rtol: float) -> bool:
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return a == b or (math.isnan(a) and math.isnan(b))
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-300)


def compare(before: dict, after: dict, rtol: float) -> list[str]:
    bad = []
    for name, rep in before["reports"].items():
        new = after["reports"].get(name)
        if new is None:
            bad.append(f"{name}: missing")
            continue
        for k, v in rep.items():
            if k not in new:
                bad.append(f"{name}: {k} missing")
            elif not _close(v, new[k], rtol):
                bad.append(f"{name}: {k} {v!r} -> {new[k]!r}")
    for name, sw in before["sweeps"].items():
        new = after["sweeps"].get(name)
        if new is None:
            bad.append(f"sweep {name}: missing")
            continue
        for k in ("num_valid", "num_feasible", "num_points", "best_indices"):
            if sw[k] != new[k]:
                bad.append(f"sweep {name}: {k} {sw[k]} -> {new[k]}")
        for a, b in zip(sw["best_values"], new["best_values"], strict=False):
            if not _close(a, b, rtol):
                bad.append(f"sweep {name}: best value {a!r} -> {b!r}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, help="write the snapshot here")
    g.add_argument("--compare", type=Path, help="compare with this snapshot")
    ap.add_argument(
        "--max-grid", type=int, default=3_000_000, help="sweep problems up to this grid size"
    )
    ap.add_argument("--rtol", type=float, default=1e-9)
    args = ap.parse_args()
    snap = snapshot(args.max_grid)
    if args.write:
        args.write.write_text(json.dumps(snap, indent=1, sort_keys=True))
        print(f"wrote {args.write}: {len(snap['reports'])} reports, {len(snap['sweeps'])} sweeps")
        return 0
    before = json.loads(args.compare.read_text())
    bad = compare(before, snap, args.rtol)
    n_vals = sum(len(r) for r in before["reports"].values())
    print(
        f"compared {len(before['reports'])} reports ({n_vals} numbers) and {len(before['sweeps'])} sweeps "
        f"at rtol {args.rtol:g}: {len(bad)} differences"
    )
    for line in bad[:50]:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
