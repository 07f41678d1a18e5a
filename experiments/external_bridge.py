"""External test set (issue 11): later Megatron-Bridge releases, predicted, never fitted.

The calibration fits NVIDIA's Megatron-Bridge performance pages of the 25.09 and 25.11 NeMo
containers (``codesign/data/measured_runs_megatron_bridge_2025.json``).  The same page
(``docs/performance-summary-archive.md`` of NVIDIA-NeMo/Megatron-Bridge) has since published
the 26.02 to 26.06.01 containers, and ``docs/performance-summary.md`` the 26.08 one.  Those rows are an external test set: this script predicts
each with the shipped presets (stack ``bridge``), exactly as a user would predict a run of a
release the model has never seen, and reports the errors by container, system, model and
precision.  Nothing here is fitted; the presets come from ``codesign validate`` on the project's
own data.

Each row is mapped like a fitted Megatron-Bridge row (:func:`codesign.calibration._bridge.bridge_row_to_doc`):
the page gives the parallel degrees, batch, precision and throughput; the recipe settings
(recomputation, offload, FSDP, MoE dispatcher and A2A overlap, TP overlap, pipeline layout)
come from each release's own recipe files (``codesign/calibration/_bridge_recipes26.py``:
releases v0.3.0 to v0.6.0 of Megatron-Bridge, each fact with its file and commit), per
precision where the rows of one system ran different configs.  Models outside the fitted set
(Nemotron 3, Kimi K2) and SFT/LoRA tables are left out.

Usage::

    python experiments/external_bridge.py                    # evaluate, write results/external_bridge.{md,json}
    python experiments/external_bridge.py --parse SUMMARY.md ARCHIVE.md   # rebuild the data file
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from itertools import combinations
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import codesign as cd  # noqa: E402
from codesign.calibration import (  # noqa: E402
    layout_median_gaps,
    same_layout_groups,
    same_layout_systems,
)
from codesign.calibration._bridge import bridge_key  # noqa: E402
from codesign.calibration._rows import (  # noqa: E402
    BRIDGE_DATA_PATH,
    calibrated_row_config,
    load_rows,
    measured_step_time,
)
from codesign.compute import peak_flops  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "experiments" / "data" / "megatron_bridge_2026_external.json"
RESULTS = ROOT / "experiments" / "results"
COMMIT = "5796c06a1cf3a4cd9bfa848a419ae5e33fe32f7d"
URL = f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{COMMIT}/docs/"
"""The pages (``performance-summary.md``: the newest release, 26.08;
``performance-summary-archive.md``: the earlier ones) at the commit they were read."""
FITTED_CONTAINERS = ("25.09", "25.11")
MODELS = {
    "LLAMA3_8B": "LLAMA3_8B",
    "LLAMA3_70B": "LLAMA3_70B",
    "LLAMA3.1_405B": "LLAMA3.1_405B",
    "DeepSeekV3": "DeepSeekV3",
    "GPT OSS 120B": "GPT_OSS_120B",
    "Qwen3_30B_a3B": "Qwen3_30B_a3B",
    "Qwen3_235B_a22B": "Qwen3_235B_a22B",
}
"""Page model name -> id tag (the tags :func:`bridge_key` knows)."""
SYSTEMS = {
    "DGX-GB300": ("GB300 (Blackwell Ultra in GB300 NVL72, 288 GB HBM3e)", 72, 800),
    "DGX-GB200": ("GB200 (Blackwell in GB200 NVL72, 186 GB HBM3e)", 72, 400),
    "DGX-B300": ("B300 (Blackwell Ultra, DGX B300, 288 GB HBM3e)", 8, 800),
    "DGX-B200": ("B200 (Blackwell, DGX B200, 180 GB HBM3e)", 8, 400),
    "DGX-H100": ("H100 SXM5 80GB (DGX H100)", 8, 400),
}
"""Page system -> (gpu, NVLink domain, scale-out Gb/s per GPU), as the fitted rows give them
(GB300/B300: ConnectX-8 800G; the others 400G NDR)."""


def _num(cell: str):
    cell = re.sub(r"\[\^[^\]]*\]", "", cell).strip()
    if cell.lower() in ("n/a", "", "-"):
        return None
    cell = cell.split("(")[0].strip()  # a parenthesised second figure is another variant
    return float(cell) if "." in cell else int(cell)


def parse_archive(text: str, page: str = "performance-summary-archive.md") -> list[dict]:
    """Pre-training rows of the containers after 25.11, for the fitted models."""
    models = {}
    for r in load_rows(BRIDGE_DATA_PATH):
        models.setdefault(bridge_key(r)[0], r["model"])
    rows, container, section, model_name, system, header = [], None, None, None, None, None
    for line in text.splitlines():
        if m := re.match(r"^## (\S+) NeMo Container", line):
            container, section = m.group(1), None
        elif line.startswith("### "):
            section = line[4:].strip()
        elif m := re.match(r"^#### Model: (.+)$", line):
            model_name, system, header = m.group(1).strip(), None, None
        elif m := re.match(r"^#### System: (.+)$", line):
            system, model_name, header = m.group(1).strip(), None, None
        elif line.startswith("|") and container and section == "Pre-Training Performance":
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in ("System", "Model"):
                header = cells
                continue
            if header is None or set(cells[0]) <= {"-"}:
                continue
            if container in FITTED_CONTAINERS:
                continue
            rec = dict(zip(header, cells, strict=True))
            mname = rec.get("Model", model_name)
            sysname = rec.get("System", system)
            mname = re.sub(r"\s*\(.*\)$", "", mname or "").strip()
            if mname not in MODELS or sysname not in SYSTEMS:
                continue
            tag = MODELS[mname]
            gpu, domain, nic = SYSTEMS[sysname]
            n = _num(rec["#-GPUs"])
            tp, pp, cp = _num(rec["TP"]) or 1, _num(rec["PP"]) or 1, _num(rec["CP"]) or 1
            prec = rec.get("Precision", "FP8").strip()
            model = dict(models[bridge_key({"id": f"mbridge_25.11_DGX-H100_{tag}"})[0]])
            model["seq_len"] = _num(rec["Sequence Length"])
            rid = f"mbridge_{container}_{sysname}_{tag}_{n}gpu_{prec}"
            k = 2
            while any(r["id"] == rid for r in rows):
                rid = f"mbridge_{container}_{sysname}_{tag}_{n}gpu_{prec}_{k}"
                k += 1
            rows.append(
                {
                    "id": rid,
                    "source": {
                        "paper": f"NVIDIA Megatron-Bridge {page} "
                        "(external test set: predicted, never fitted)",
                        "url": URL + page,
                        "table": f"{container} NeMo Container / Pre-Training / "
                        + (f"Model: {mname}" if model_name else f"System: {sysname}"),
                    },
                    "hardware": {
                        "gpu": gpu,
                        "num_gpus": n,
                        "nvlink_domain": domain,
                        "inter_node": {"per_gpu_gbps": nic},
                    },
                    "model": model,
                    "parallel": {
                        "tp": tp,
                        "pp": pp,
                        "cp": cp,
                        "dp": n // (tp * pp * cp),
                        "ep": _num(rec["EP"]) or 1,
                        "virtual_pp": _num(rec["VP"]) or 1,
                        "microbatch": _num(rec["MBS"]),
                        "global_batch": _num(rec["GBS"]),
                        "fsdp": _num(rec.get("FSDP", "0")) or 0,
                        "precision": prec,
                    },
                    "measured": {
                        "tokens_per_s_per_gpu": _num(rec["Tokens / sec / GPU"]),
                        "model_tflops_per_gpu": _num(rec["Model TFLOP / sec / GPU"]),
                    },
                    "notes": "Model architecture as in the fitted rows of the same model; "
                    "dp = GPUs / (TP PP CP).",
                }
            )
    return rows


def evaluate_rows(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        t_meas, _ = measured_step_time(row)
        cfg, notes = calibrated_row_config(row)
        rec = {
            "id": row["id"],
            "container": row["id"].split("_")[1],
            "system": row["id"].split("_")[2].removeprefix("DGX-"),
            "model": row["model"]["name"],
            "moe": bool(row["model"].get("moe")),
            "precision": row["parallel"]["precision"],
            "measured_s": t_meas,
        }
        if cfg is None:
            rec["skip"] = notes
            out.append(rec)
            continue
        r = cd.evaluate(*cfg.specs())
        pred = float(r.step_time_s)
        rec.update(
            predicted_s=pred,
            peak_tflops=float(peak_flops(cfg.system, cfg.training.precision)) / 1e12,
            error_pct=100.0 * (pred - t_meas) / t_meas,
            fits=bool(r.fits),
            notes=notes,
            held_out=cfg.names.get("held_out"),
        )
        out.append(rec)
    return out


def _stats(recs: list[dict]) -> str:
    e = [abs(r["error_pct"]) for r in recs]
    s = [r["error_pct"] for r in recs]
    return (
        f"{len(e)} | {statistics.mean(e):.1f} | {max(e):.1f} | {statistics.mean(s):+.1f} | "
        f"{sum(1 for x in e if x > 25)}"
    )


def release_floor(rows: list[dict], recs: list[dict]) -> dict:
    """The same layout measured in several releases, and what no release-blind model can fix.

    ``rows``: every Megatron-Bridge row (fitted and external); ``recs``: the external rows'
    predictions (:func:`evaluate_rows`).  Groups by :func:`codesign.calibration.same_layout_groups`
    with the exact number format (FP8 current scaling apart from MXFP8);
    ``floor_mape_pct`` is the mean of :func:`codesign.calibration.layout_median_gaps` (one
    prediction per layout at its median: about the least error of a model that knows the
    hardware, model and layout but not the release), ``floor_external_pct`` the same over the
    external rows only, beside ``model_mape_pct``, the shipped model's MAPE on those rows.
    """
    groups = same_layout_groups(rows, exact_precision=True)
    pred = {r["id"]: r["error_pct"] for r in recs if "error_pct" in r}
    gaps = layout_median_gaps(groups)
    floor = list(gaps.values())
    floor_ext = [g for i, g in gaps.items() if i in pred]
    model = [abs(pred[i]) for i in gaps if i in pred]
    table = []
    for members in groups:
        times = [t for _, _, t in members]
        errs = [pred[i] for i, _, _ in members if i in pred]
        table.append((max(times) / min(times) - 1.0, members, errs))
    table.sort(key=lambda g: -g[0])

    def pct(xs):
        return 100.0 * statistics.mean(xs) if xs else float("nan")

    return {
        "groups": table,
        "rows": len(floor),
        "floor_mape_pct": pct(floor),
        "floor_max_pct": 100.0 * max(floor) if floor else float("nan"),
        "external_rows": len(model),
        "floor_external_pct": pct(floor_ext),
        "model_mape_pct": statistics.mean(model) if model else float("nan"),
        "median_spread_pct": 100.0 * statistics.median(g[0] for g in table) if table else 0.0,
    }


def system_speedups(rows: list[dict], recs: list[dict]) -> list[dict]:
    """One layout in one release on several systems: measured speed-ups against the model's.

    ``rows``: the external rows; ``recs``: their predictions (:func:`evaluate_rows`).  Groups by
    :func:`codesign.calibration.same_layout_systems`; per pair of systems (``a`` before ``b`` in
    the system's name order) the step time of ``a`` over that of ``b`` as measured, as
    predicted with the shipped presets, and the ratio of the two accelerators' peak FLOP/s at
    the run's number format (the catalog's, via the mapped run).  Returns one dict per pair
    of systems: ``a``, ``b``, ``layouts`` (count), ``measured``, ``model`` and ``peak`` (the
    per-layout ratios)."""
    rec = {r["id"]: r for r in recs if "predicted_s" in r}
    out: dict[tuple[str, str], dict] = {}
    for members in same_layout_systems(rows):
        ok = sorted((rec[i]["system"], rec[i]) for i, _, _ in members if i in rec)
        for (sa, ra), (sb, rb) in combinations(ok, 2):
            d = out.setdefault(
                (sa, sb), {"a": sa, "b": sb, "measured": [], "model": [], "peak": []}
            )
            d["measured"].append(ra["measured_s"] / rb["measured_s"])
            d["model"].append(ra["predicted_s"] / rb["predicted_s"])
            d["peak"].append(rb["peak_tflops"] / ra["peak_tflops"])
    for d in out.values():
        d["layouts"] = len(d["measured"])
    return sorted(out.values(), key=lambda d: (d["a"], d["b"]))


def _speedup_lines(pairs: list[dict]) -> list[str]:
    if not pairs:
        return []

    def span(xs) -> str:
        lo, hi = f"{min(xs):.2f}", f"{max(xs):.2f}"
        return lo if lo == hi else f"{lo}-{hi} (median {statistics.median(xs):.2f})"

    lines = [
        "",
        "## One layout in one release on two systems: measured speed-ups",
        "",
        "Rows of one release that ran the same layout (GPU count, model, sequence length, "
        "number format, batch and parallel degrees; `codesign.calibration.same_layout_systems`) "
        "on two systems.  Speed-up of the second system over the first: the step time of the "
        "first over that of the second, as measured, as predicted with the shipped presets "
        "(fitted on 25.09 and 25.11, GB300 rows included), and as the ratio of the two "
        "accelerators' catalog peak FLOP/s at the run's number format.  Equal peaks with a "
        "measured speed-up are what the fit without 25.11 could not predict for GB300 (no GB300 "
        "row ran in 25.09; `experiments/results/validation.md`).",
        "",
        "| systems | layouts | measured | model (presets) | catalog peaks |",
        "|---|---|---|---|---|",
    ]
    for d in pairs:
        lines.append(
            f"| {d['b']} over {d['a']} | {d['layouts']} | {span(d['measured'])} | "
            f"{span(d['model'])} | {span(d['peak'])} |"
        )
    return lines


def _floor_lines(fl: dict) -> list[str]:
    if not fl["groups"]:
        return []
    lines = [
        "",
        "## One layout in several releases: the floor for a model that does not know the release",
        "",
        f"{len(fl['groups'])} layouts ran in more than one release ({fl['rows']} rows, fitted "
        "and external: same system, GPU count, model, sequence length, number format, batch "
        "and parallel degrees; `codesign.calibration.same_layout_groups`).  A model of the "
        "hardware and the layout gives every row of such a group one prediction, so the spread "
        "inside a group is error that no such model can remove: one prediction per layout at "
        "the group's median step time (about the least error a single value can have: the "
        "optimum is a weighted median) is still "
        f"**{fl['floor_mape_pct']:.1f} %** off "
        f"on average (max {fl['floor_max_pct']:.1f} %); on the {fl['external_rows']} external "
        f"rows of these groups {fl['floor_external_pct']:.1f} %, where the model (which "
        f"knows neither these releases nor their rows) is {fl['model_mape_pct']:.1f} % off.  "
        f"Median spread (slowest / fastest - 1): {fl['median_spread_pct']:.1f} %; "
        f"{sum(1 for g in fl['groups'] if g[0] > 1 / 3)} layouts changed speed by more than "
        "a third from one release to another.  The model predicts the releases of a layout "
        "alike (its presets fit the 25.09 and 25.11 software) except where a recipe setting it "
        "models changed (dispatcher, overlap, recomputation, FP8 attention), so where a release "
        "changed the speed otherwise, its error follows the release (table below, widest "
        "spread first).",
        "",
        "| spread % | layout | step time s by release | model error % (external rows) |",
        "|---|---|---|---|",
    ]
    for spread, members, errs in fl["groups"]:
        name = members[0][0].split("_", 2)[2]
        by_rel = ", ".join(f"{rel} {t:.2f}" for _, rel, t in members)
        err = ", ".join(f"{e:+.1f}" for e in errs) or "-"
        lines.append(f"| {100.0 * spread:.1f} | {name} | {by_rel} | {err} |")
    return lines


def _coverage_lines(ok: list[dict]) -> list[str]:
    """How the expected error that ``codesign evaluate`` prints for each row (the held-out
    errors of its setting in the fitted releases) compares with its error on the later
    releases: a check of the error bars themselves."""
    rows = [r for r in ok if (r.get("held_out") or {}).get("rows")]
    if not rows:
        return []
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        h = r["held_out"]
        by.setdefault((h["generation"], h["stack"], h["kind"]), []).append(r)

    def inside(rs) -> int:  # rows within their setting's 90th percentile
        return sum(1 for r in rs if abs(r["error_pct"]) <= r["held_out"]["p90_pct"])

    def line(name, rs):
        h = rs[0]["held_out"]
        e = [abs(r["error_pct"]) for r in rs]
        rel = f"{h['release_mape_pct']:.1f}" if h.get("release_rows") else "-"
        return (
            f"| {name} | {len(rs)} | {statistics.mean(e):.1f} | {h['mape_pct']:.1f} | {rel} | "
            f"{h['p90_pct']:.1f} | {inside(rs)} ({100.0 * inside(rs) / len(rs):.0f} %) |"
        )

    def within(kind):
        rs = [r for r in rows if r["held_out"]["kind"] == kind]
        return (
            f"{inside(rs)} of {len(rs)} {kind} rows ({100.0 * inside(rs) / max(len(rs), 1):.0f} %)"
        )

    e_all = [abs(r["error_pct"]) for r in rows]
    out = [
        "",
        "## The expected error against the later releases",
        "",
        "`codesign evaluate` prints with every prediction the held-out error of its setting "
        "(generation, software stack, dense or MoE) measured on the fitted releases: the mean "
        "over random splits, its 90th percentile, and the error of a fit on 25.09 predicting "
        "25.11.  On these later releases the model's error is "
        f"{statistics.mean(e_all):.1f} % on average, and {inside(rows)} of {len(rows)} rows "
        f"({100.0 * inside(rows) / len(rows):.0f} %) fall within their setting's 90th percentile "
        f"({within('dense')}, {within('moe')}).  From one release to the next, MoE "
        "layouts changed speed more than dense ones (the widest spreads in the table of the "
        "next section are MoE), so the MoE error bars, set on the fitted releases, are too "
        "narrow for later ones; for Blackwell MoE the next-release figure is the closer "
        "guide.",
        "",
        "| setting | rows | MAPE % here | expected: held out % | next release % | 90th pct. % | "
        "rows within it |",
        "|---|---|---|---|---|---|---|",
    ]
    for (gen, stack, kind), rs in sorted(by.items()):
        out.append(line(f"{gen} {stack} {kind}", rs))
    return out


def markdown(
    recs: list[dict], seconds: float, floor: dict | None = None, speedups: list | None = None
) -> str:
    ok = [r for r in recs if "error_pct" in r]
    skipped = [r for r in recs if "skip" in r]
    lines = [
        "# External test set: Megatron-Bridge releases after the fitted ones (issue 11)",
        "",
        f"Generated by `python experiments/external_bridge.py` in {seconds:.0f} s from "
        f"`experiments/data/{DATA.name}` ({len(recs)} pre-training rows of the 26.02 to "
        f"26.08 NeMo containers, parsed from the Megatron-Bridge performance pages at {COMMIT[:9]}: "
        f"[current]({URL}performance-summary.md), [archive]({URL}performance-summary-archive.md)). "
        "**Never fitted**: every prediction uses the shipped presets (stack `bridge`, fitted on "
        "the 25.09 and 25.11 rows only).  Each row's recipe settings are read from its own "
        "release's recipe files (`codesign/calibration/_bridge_recipes26.py`, v0.3.0 to "
        "v0.6.0), so this measures how well the model predicts a *later software release* "
        "from its layout and recipe; what those releases made faster without a setting the "
        "model has (fused grouped MLPs, full-iteration CUDA graphs) is not known to it.  FP8 "
        "attention is (`training.fp8_attention`, set where the recipe sets "
        "`fp8_dot_product_attention`: the full-iteration MXFP8 recipes from 26.06, all but "
        "DeepSeek-V3 on GB200).",
        "",
        "Error = (predicted - measured) / measured of the step time; negative = the model is "
        "too fast.",
        "",
        "| group | rows | MAPE % | max APE % | mean signed % | rows > 25 % |",
        "|---|---|---|---|---|---|",
        f"| all | {_stats(ok)} |",
    ]
    no_oss = [r for r in ok if "GPT-OSS" not in r["model"]]
    lines.append(f"| all but GPT-OSS (the page's known regression, below) | {_stats(no_oss)} |")
    for key, name in (
        ("container", "container"),
        ("system", "system"),
        ("model", "model"),
        ("precision", "precision"),
        ("moe", "MoE"),
    ):
        for v in sorted({r[key] for r in ok}, key=str):
            sub = [r for r in ok if r[key] == v]
            label = ("MoE models" if v else "dense models") if key == "moe" else f"{name} {v}"
            lines.append(f"| {label} | {_stats(sub)} |")
    lines += [
        "",
        "GPT-OSS 120B: the page itself says (26.06.01 footnote) that its pre-training has a "
        "known performance regression (cuDNN frontend issue 256, the attention-sink kernel), "
        "to be fixed in a later container.",
        "",
        "| row | model | measured s | predicted s | error % | fits | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(ok, key=lambda r: r["error_pct"]):
        lines.append(
            f"| {r['id']} | {r['model']} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | "
            f"{r['error_pct']:+.1f} | {'yes' if r['fits'] else 'no'} | {r['notes']} |"
        )
    lines += _coverage_lines(ok)
    if floor:
        lines += _floor_lines(floor)
    lines += _speedup_lines(speedups or [])
    if skipped:
        lines += ["", "Not expressible:", ""]
        lines += [f"- {r['id']}: {r['skip']}" for r in skipped]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--parse",
        nargs="+",
        metavar="PAGE_MD",
        help="rebuild the data file from the pages (performance-summary.md and -archive.md)",
    )
    ap.add_argument("--out", default=str(RESULTS), help="results directory")
    args = ap.parse_args(argv)
    if args.parse:
        rows = [r for f in args.parse for r in parse_archive(Path(f).read_text(), Path(f).name)]
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"{len(rows)} rows -> {DATA}")
        return 0
    t0 = time.perf_counter()
    external = load_rows(DATA)
    recs = evaluate_rows(external)
    floor = release_floor(load_rows(BRIDGE_DATA_PATH) + external, recs)
    speedups = system_speedups(external, recs)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(recs, seconds, floor, speedups)
    (out / "external_bridge.md").write_text(md)
    (out / "external_bridge.json").write_text(json.dumps(recs, indent=1) + "\n")
    print("\n".join(md.splitlines()[8:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
