"""External memory check (issue 11): measured peak memory, predicted, never fitted.

None of the fitted data publishes memory, so the model's memory had been checked only one way:
every published run fits under its published settings ("ran means fits").  NVIDIA's
Megatron-Bridge repository has since published, for a few runs, the peak memory PyTorch
allocated beside the recipe that ran (``experiments/data/external_memory.json``: each row's
run as a codesign run document, its measured values, and the file and commit they were read
from).  This script predicts those runs with the shipped presets (stack ``bridge``), as a user
would, and compares:

* memory: the model's total minus its fixed ``memory_overhead_gb`` (CUDA context, workspace and
  fragmentation, which PyTorch's allocated figure leaves out) against the peak allocated,
  converted from the decimal gigabytes Megatron-Bridge's logger writes (bytes / 1e9) to GiB;
* step time, where the source gives a steady one (a release the fit has not seen).

It then asks what the memory error does to the tuned-recipe check (``recipe_regret.py``): the
Megatron-Bridge rows whose regret is above the 15 % target are swept again with the modelled
memory above the fixed overhead scaled by the largest measured / modelled ratio, so layouts the
model lets fit only because it under-counts memory by that much drop out.  Nothing is fitted:
the scale is a what-if, applied neither to the model nor to the presets.

Usage::

    python experiments/external_memory.py     # writes results/external_memory.{md,json}
    python experiments/external_memory.py --no-regret   # the check alone (about 2 s)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import codesign as cd  # noqa: E402
from codesign.calibration._rows import load_all_rows  # noqa: E402
from codesign.config import load_run_dict  # noqa: E402
from codesign.memory import GB  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipe_regret as rr  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "experiments" / "data" / "external_memory.json"
RESULTS = ROOT / "experiments" / "results"


def row_config(ext: dict):
    """The external row's run (``run``: model, system, training and strategy as the recipe ran
    them) with the calibrated preset of its accelerator, stack ``bridge``."""
    return load_run_dict({**ext["run"], "efficiency": {"stack": "bridge"}})


def measured_gib(ext: dict) -> float:
    """The measured peak allocated memory in GiB (2^30 bytes, the model's unit); the sources
    give decimal gigabytes (``units_note``)."""
    return ext["measured"]["peak_allocated_gb"] * 1e9 / GB


def regret_what_if(scale: float) -> list[dict]:
    """The rows of ``recipe_regret.json`` above the target, swept again with the modelled
    memory above the fixed overhead times ``scale``."""
    res = json.loads((RESULTS / "recipe_regret.json").read_text())
    above = [r for r in res["rows"] if r.get("regret", 0.0) > rr.TARGET]
    rows = {r["id"]: r for r in load_all_rows()}
    args = argparse.Namespace(max_tp=64, max_pp=64, max_cp=32, max_etp=64)
    out = []
    for r in above:
        cfg, _ = rr.recipe_config(rows[r["id"]], True)
        rep = cd.evaluate(*cfg.specs())
        fixed = float(cfg.efficiency.memory_overhead_gb)
        rec_mem = rr.scaled_memory_gb(float(rep.memory_gb["total"]), fixed, scale)
        sw = rr.sweep_row(cfg, rr.grid_values(cfg, args), memory_scale=scale)
        t_rec = float(rep.step_time_s)
        t_best = min(sw["t_best"], t_rec)
        best = sw["best"] if sw["t_best"] < t_rec else rr.strategy_dict(cfg.strategy)
        out.append(
            {
                "id": r["id"],
                "hbm_gb": r["hbm_gb"],
                "regret_pct": 100.0 * r["regret"],
                "best_layout": r["best_layout"],
                "best_memory_gb": r["best_memory_gb"],
                "recipe_memory_scaled_gb": rec_mem,
                "regret_scaled_pct": 100.0 * (1.0 - t_best / t_rec),
                "best_layout_scaled": rr.layout_str(best),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(RESULTS), help="output folder")
    ap.add_argument("--no-regret", action="store_true", help="skip the tuned-recipe what-if")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    recs = []
    for ext in json.loads(DATA.read_text()):
        cfg = row_config(ext)
        rep = cd.evaluate(*cfg.specs())
        mem = {k: float(v) for k, v in rep.memory_gb.items()}
        fixed = float(cfg.efficiency.memory_overhead_gb)
        alloc = mem["total"] - fixed
        meas = ext["measured"]
        gib = measured_gib(ext)
        t_meas = meas.get("step_time_s")
        t = float(rep.step_time_s)
        recs.append(
            {
                "id": ext["id"],
                "group": ext["group"],
                "source": ext["source"],
                "layout": rr.layout_str(rr.strategy_dict(cfg.strategy)),
                "precision": cfg.training.precision,
                "memory_gb": mem,
                "fixed_overhead_gb": fixed,
                "model_allocated_gb": alloc,
                "measured_allocated_gb": gib,
                "memory_error_pct": 100.0 * (alloc / gib - 1.0),
                "memory_scale": gib / alloc,
                "fits": bool(rep.fits),
                "step_time_s": t,
                "measured_step_time_s": t_meas,
                "time_error_pct": None if t_meas is None else 100.0 * (t / t_meas - 1.0),
                "breakdown_s": {k: float(v) for k, v in rep.breakdown_s.items()},
            }
        )
    scale = max(r["memory_scale"] for r in recs)
    what_if = [] if args.no_regret else regret_what_if(scale)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "external_memory.json").write_text(
        json.dumps(
            {
                "rows": recs,
                "summary": summary(recs),
                "memory_scale": scale,
                "regret_what_if": what_if,
            },
            indent=1,
        )
    )
    (out / "external_memory.md").write_text(markdown(recs, scale, what_if, seconds))
    for r in recs:
        print(
            f"{r['id']}: memory {r['model_allocated_gb']:.1f} GiB (model, without the fixed "
            f"{r['fixed_overhead_gb']:g}) vs {r['measured_allocated_gb']:.1f} measured "
            f"({r['memory_error_pct']:+.1f} %); step time error {_pct(r['time_error_pct'])} %"
        )
    for w in what_if:
        print(
            f"  regret {w['id']}: {w['regret_pct']:.1f} % -> {w['regret_scaled_pct']:.1f} % "
            f"with memory x{scale:.3f}"
        )
    print(f"wrote {out / 'external_memory.md'} ({seconds:.0f} s)")
    return 0


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1f}"


def summary(recs: list[dict]) -> dict:
    """Memory MAPE and mean signed error over the rows, and per group."""
    out = {}
    groups = {"all": recs}
    for r in recs:
        groups.setdefault(r["group"], []).append(r)
    for name, rs in groups.items():
        errs = [r["memory_error_pct"] for r in rs]
        t = [r["time_error_pct"] for r in rs if r["time_error_pct"] is not None]
        out[name] = {
            "rows": len(rs),
            "memory_mape_pct": sum(abs(e) for e in errs) / len(errs),
            "memory_mean_signed_pct": sum(errs) / len(errs),
            "time_rows": len(t),
            "time_mape_pct": sum(abs(e) for e in t) / len(t) if t else None,
        }
    return out


def markdown(recs: list[dict], scale: float, what_if: list[dict], seconds: float) -> str:
    lines = [
        "# External memory check (issue 11): measured peak memory, predicted, never fitted",
        "",
        f"Generated by `python experiments/external_memory.py` in {seconds:.0f} s from "
        "`experiments/data/external_memory.json` (each row: the run as its recipe ran it, the "
        "measured values, the file and commit they were read from).  Presets: the calibrated "
        "preset of each accelerator, stack `bridge`.  *Model allocated* is the model's memory "
        "on the most loaded stage minus its fixed `memory_overhead_gb` (CUDA context, "
        "workspace, fragmentation), which PyTorch's peak allocated figure does not include.  "
        "Memory in GiB (2^30 bytes); the sources' decimal gigabytes are converted.  Error = "
        "model / measured - 1.",
        "",
        "| group | rows | memory MAPE % | memory mean signed % | step-time rows | step-time "
        "MAPE % |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in summary(recs).items():
        tm = "-" if s["time_mape_pct"] is None else f"{s['time_mape_pct']:.1f}"
        lines.append(
            f"| {name} | {s['rows']} | {s['memory_mape_pct']:.1f} | "
            f"{s['memory_mean_signed_pct']:+.1f} | {s['time_rows']} | {tm} |"
        )
    lines += [
        "",
        "| run | layout | model allocated | measured | error % | model terms (weights / "
        "gradients / optimizer / activations / buffers) | step s model / measured | error % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        m = r["memory_gb"]
        terms = " / ".join(
            f"{m[k]:.1f}" for k in ("weights", "gradients", "optimizer", "activations", "buffers")
        )
        tm = r["measured_step_time_s"]
        lines.append(
            f"| {r['id']} | {r['layout']} ({r['precision']}) | {r['model_allocated_gb']:.1f} | "
            f"{r['measured_allocated_gb']:.1f} | {r['memory_error_pct']:+.1f} | {terms} | "
            f"{r['step_time_s']:.3f} / {'-' if tm is None else f'{tm:.3f}'} | "
            f"{_pct(r['time_error_pct'])} |"
        )
    lines += ["", "Sources (the data file has each row's settings and the recipe it ran):", ""]
    seen = set()
    for r in recs:
        s = r["source"]
        if s["url"] in seen:
            continue
        seen.add(s["url"])
        lines.append(f"* {r['group']}: <{s['url']}>; recipe: {s['recipe']}.")
    if what_if:
        lines += [
            "",
            "## What the memory error does to the tuned-recipe check",
            "",
            f"The rows of `recipe_regret.md` above the 15 % target, swept again with the "
            f"modelled memory above the fixed overhead times {scale:.3f} (the largest "
            "measured / model ratio above): a best layout the model lets fit only because it "
            "under-counts memory by that much drops out.  A what-if, not a fit: the model and "
            "the presets are unchanged.",
            "",
            "| row | HBM GB | regret % | best layout (memory GB) | regret % at memory x"
            f"{scale:.3f} | best layout then | recipe memory then GB |",
            "|---|---|---|---|---|---|---|",
        ]
        for w in what_if:
            lines.append(
                f"| {w['id']} | {w['hbm_gb']:g} | {w['regret_pct']:.1f} | {w['best_layout']} "
                f"({w['best_memory_gb']:.0f}) | {w['regret_scaled_pct']:.1f} | "
                f"{w['best_layout_scaled']} | {w['recipe_memory_scaled_gb']:.0f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
