"""Calibrated presets: the efficiency tables of ``codesign/hardware/efficiency.toml`` from the all-rows fit.

:func:`preset_tables` gives, for every accelerator preset of the catalog, the calibrated
efficiencies of its generation (top level: the generation's default stack; per other stack:
what differs) with provenance; :func:`efficiency_toml` renders them as the TOML file the
loader reads.  Accelerators without measured rows inherit the nearest generation
(:data:`~codesign.calibration._grouping.NEAREST_GENERATION`) and say so.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from codesign._version import __version__
from codesign.calibration._fit import FRACTION_PARAMS, POSITIVE_PARAMS
from codesign.calibration._grouping import (
    DEFAULT_STACK,
    GENERATION,
    NEAREST_GENERATION,
    SAME_SILICON,
    STACK_FALLBACK,
    fallback_chain,
    generation,
)
from codesign.calibration._stats import error_pct, unidentified
from codesign.config import catalog
from codesign.specs import Efficiency

__all__ = [
    "DATE",
    "PRESET_FIELDS",
    "efficiency_toml",
    "held_out_by_setting",
    "preset_tables",
    "unmeasured_generation_error",
]

DATE = "2026-12-07"
"""Date of the presets (the ``date`` of every calibrated table)."""


def _preset_fields() -> tuple:
    """Every calibratable :class:`~codesign.specs.Efficiency` field, in declaration order.

    Derived from :mod:`codesign.calibration._fit`'s parameter sets, so a newly fitted parameter
    can never be silently left out of the presets (the presets must reproduce the ``all`` fit).
    """
    fit = FRACTION_PARAMS | POSITIVE_PARAMS
    return tuple(f.name for f in dataclasses.fields(Efficiency) if f.name in fit)


PRESET_FIELDS = _preset_fields()


def _toml_key(k: str) -> str:
    """A TOML key: bare where it may be, else quoted."""
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{float(format(v, '.4g'))!r}"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def _held_errors(res: dict, sp: dict, key) -> dict:
    """``{key(point): [(row id, signed error %)]}`` of the rows split ``sp`` holds out (excluded
    rows and rows without a prediction left out)."""
    out: dict = {}
    for p, held, after in zip(res["points"], sp["held"], sp["after_s"], strict=True):
        if held and after is not None and p["excluded"] is None:
            out.setdefault(key(p), []).append((p["id"], error_pct(after, p["measured_s"])))
    return out


def held_out_by_setting(res: dict) -> dict:
    """Held-out errors of the random splits per setting a prediction is made in:
    ``{generation: {stack: {"dense" | "moe": stats}}}`` with ``stats`` = ``mape_pct`` (the
    mean over the random splits of each split's mean absolute error on the held-out rows of
    the setting, as the report's MAPEs), ``p90_pct`` (90th percentile of the pooled absolute
    errors), ``bias_pct`` (their mean signed error: positive = predictions too slow),
    ``rows`` (distinct rows held out at least once) and ``splits`` (random splits that held
    one out); where the validation has a by-container split (fit on one software release,
    predict the next), also ``release_mape_pct`` and ``release_rows``, its mean absolute
    error on the next release's rows of the setting.  Excluded rows are left out; the stack
    of a row is its source's (:data:`~codesign.calibration._rows.STACK_OF_SOURCE`).

    These are the numbers :func:`codesign.calibration.efficiency_toml` writes into each preset
    (``calibrated_held_out_error``) and ``codesign evaluate`` prints as the expected error.
    """
    from codesign.calibration._rows import STACK_OF_SOURCE

    def setting(p) -> tuple:
        return (p["generation"], STACK_OF_SOURCE[p["source"]], "moe" if p["moe"] else "dense")

    per_split: dict[tuple, list[list[tuple[str, float]]]] = {}
    release: dict[tuple, list[tuple[str, float]]] = {}
    for sp in res["splits"]:
        if sp["kind"] == "random":
            for key, e in _held_errors(res, sp, setting).items():
                per_split.setdefault(key, []).append(e)
        elif sp["kind"] == "container":
            for key, e in _held_errors(res, sp, setting).items():
                release.setdefault(key, []).extend(e)
    out: dict = {}
    for (gen, stack, kind), splits in sorted(per_split.items()):
        pooled = np.array([err for split in splits for _, err in split])
        stats = {
            "mape_pct": round(float(np.mean([np.mean([abs(x) for _, x in e]) for e in splits])), 1),
            "p90_pct": round(float(np.percentile(np.abs(pooled), 90)), 1),
            "bias_pct": round(float(np.mean(pooled)), 1),
            "rows": len({rid for split in splits for rid, _ in split}),
            "splits": len(splits),
        }
        rel = release.get((gen, stack, kind))
        if rel:
            stats["release_mape_pct"] = round(float(np.mean([abs(x) for _, x in rel])), 1)
            stats["release_rows"] = len(rel)
        out.setdefault(gen, {}).setdefault(stack, {})[kind] = stats
    return out


def unmeasured_generation_error(res: dict) -> dict:
    """``{split name: {"mape_pct", "p90_pct", "rows"}}`` of the validation's hardware splits (one
    generation fitted, another held out whole): how far off a prediction is for an
    accelerator of an architecture with no measured run."""
    out = {}
    for sp in res["splits"]:
        if sp["kind"] != "hardware":
            continue
        e = [abs(x) for _, x in _held_errors(res, sp, lambda p: None).get(None, [])]
        if e:
            out[sp["name"]] = {
                "mape_pct": round(float(np.mean(e)), 1),
                "p90_pct": round(float(np.percentile(e, 90)), 1),
                "rows": len(e),
            }
    return out


def preset_tables(res: dict) -> dict:
    """``{accelerator id: table}`` of calibrated efficiencies from the ``all`` split of ``res``.

    A value that no split moved from its start (:func:`~codesign.calibration._stats.unidentified`:
    no row depends on it, e.g. the pipeline overlap of a stack without interleaved pipelines)
    gets the documented estimate of :class:`codesign.Efficiency` instead of the fit's start."""
    sp = next(s for s in res["splits"] if s["kind"] == "all")
    estimate = Efficiency()
    unmoved = {(n, lab) for n, lab, _ in unidentified(res) if hasattr(estimate, n)}
    vals = {
        name: {
            lab: (float(getattr(estimate, name)) if (name, lab) in unmoved else v)
            for lab, v in tab.items()
        }
        for name, tab in sp["values"].items()
    }
    pts = res["points"]
    train = [p for p, t in zip(pts, sp["train"], strict=True) if t]
    by_source = {}
    for p in train:
        by_source[p["source"]] = by_source.get(p["source"], 0) + 1
    excluded = [p["id"] for p in pts if p["excluded"]]
    fabrics = catalog()["fabrics"]
    data_fabrics: dict[str, set] = {}
    for p in res["_dataset"]["points"]:
        g = p["labels"]["generation"]
        for name in p["config"].names["tier_presets"]:
            if name:
                data_fabrics.setdefault(g, set()).add(name)
    held_out = held_out_by_setting(res)
    unmeasured = unmeasured_generation_error(res)
    tables = {}
    for acc, spec in catalog()["accelerators"].items():
        gen = generation(acc)
        inherited = acc not in GENERATION
        t: dict = {"name": f"Calibrated efficiencies for {spec.get('name', acc)}"}
        used = {}

        def pick(name, label, used=used):
            chain = (label, *fallback_chain(label))
            for lab in chain:
                if lab in vals.get(name, {}):
                    used[f"{name}[{label}]"] = lab
                    return vals[name][lab]
            return None

        def stack_values(stack, pick=pick, gen=gen, spec=spec):
            out = {}
            for f in PRESET_FIELDS:
                if f not in vals:
                    continue
                kind = res["grouping"].get(f, "shared")
                suffix = f"/{stack}" if kind.endswith("+stack") else ""
                base = kind.removesuffix("+stack")
                if base == "shared":
                    v = pick(f, "all" + suffix) if suffix else vals[f].get("all")
                elif base in ("generation", "generation+precision", "generation+attention"):
                    v = pick(f, gen + suffix)
                else:
                    v = None
                if v is not None:
                    out[f] = v
            if (
                "gemm_max" in vals
                and float(spec.get("peak_tflops_fp8", 0.0)) > 0
                and res["grouping"].get("gemm_max", "").startswith("generation+precision")
            ):
                suffix = f"/{stack}" if res["grouping"]["gemm_max"].endswith("+stack") else ""
                v = pick("gemm_max", f"{gen}-fp8{suffix}")
                if v is not None:
                    out["calibrated_gemm_max_fp8"] = v
                mx = pick("gemm_max", f"{gen}-mxfp8{suffix}")
                if mx is not None and mx != v:
                    out["calibrated_gemm_max_mxfp8"] = mx
            if "attention_eff" in vals and res["grouping"].get("attention_eff", "").startswith(
                "generation+attention"
            ):
                suffix = f"/{stack}" if res["grouping"]["attention_eff"].endswith("+stack") else ""
                v = pick("attention_eff", f"{gen}-unfused{suffix}")
                if v is not None:
                    out["calibrated_attention_eff_unfused"] = v
            return out

        default_stack = DEFAULT_STACK.get(gen, "megatron")
        t.update(stack_values(default_stack))
        if any(k.endswith("+stack") for k in res["grouping"].values()):
            t["default_stack"] = default_stack
            stacks = {}
            for st in STACK_FALLBACK:
                if st == "any":
                    continue
                sv = stack_values(st)
                diff = {k: v for k, v in sv.items() if t.get(k) != v}
                if st != default_stack:
                    stacks[st] = diff
            t["stacks"] = stacks
        if "tier_efficiency" in vals:
            names = [
                spec.get("scale_up"),
                spec.get("scale_out"),
                *sorted(data_fabrics.get(gen, ())),
            ]
            te = {}
            for fname in names:
                if not fname or fname in te or fname not in fabrics:
                    continue
                key = (
                    fabrics[fname].get("kind")
                    if res["grouping"].get("tier_efficiency") == "fabric kind"
                    else fname
                )
                if key in vals["tier_efficiency"]:
                    te[fname] = vals["tier_efficiency"][key]
            if te:
                t["calibrated_tier_efficiency"] = te
        t["rows"] = len(train)
        t["split"] = (
            f"all {len(train)} fittable rows of codesign/data/measured_runs.json "
            f"(held out for the reported errors: {res.get('random_splits', 1)} random splits from seed {res['seed']}, by source, by generation; "
            "see experiments/results/validation.md)"
        )
        t["date"] = DATE
        t["calibrated_codesign_version"] = __version__
        t["calibrated_rows_by_source"] = by_source
        t["calibrated_rows_excluded"] = excluded
        t["calibrated_generation"] = gen
        if inherited and acc not in SAME_SILICON:
            if unmeasured:
                t["calibrated_unmeasured_error"] = unmeasured
        elif held_out.get(gen):
            t["calibrated_held_out_error"] = held_out[gen]
        t["calibrated_labels_used"] = (
            ", ".join(f"{k} <- {v}" for k, v in used.items() if k.split("[")[1][:-1] != v) or "own"
        )
        t["calibrated_msle"] = round(sp["msle"], 6)
        src = (
            "codesign.calibration.calibrate (Adam in lax.scan, mean squared log error of step time, sources weighted "
            f"equally) on {len(train)} published runs: "
            + ", ".join(f"{k} {v}" for k, v in by_source.items())
            + f"; parameters {', '.join(res['params'])}"
        )
        t["source"] = src
        if inherited:
            why = NEAREST_GENERATION.get(acc, (gen, "no measured rows"))[1]
            t["note"] = (
                f"No measured rows for {acc}: inherits the {gen.upper()} calibration ({why})."
            )
        else:
            t["note"] = (
                f"Calibrated on measured {gen.upper()} rows (values per generation and software stack; "
                f"top level = stack {DEFAULT_STACK.get(gen, 'megatron')!r}) and shared values."
            )
        tables[acc] = t
    return tables


def efficiency_toml(res: dict) -> str:
    """The text of ``codesign/hardware/efficiency.toml``."""
    head = [
        "# Calibrated efficiency presets, one table per accelerator preset of accelerators.toml.",
        "# codesign.config.load_run_dict uses the table named like the run's accelerator as the default",
        '# [efficiency] (keys given in a run\'s [efficiency] table override it; preset = "uncalibrated"',
        "# selects the codesign.Efficiency() class defaults).  Keys are Efficiency fields plus provenance",
        "# (name, source, note, rows, split, date, calibrated_*).  calibrated_gemm_max_fp8 replaces",
        "# gemm_max for FP8 runs (calibrated_gemm_max_mxfp8 for MXFP8 runs where it differs),",
        "# calibrated_attention_eff_unfused replaces attention_eff when flash",
        "# attention is off, calibrated_tier_efficiency sets the efficiency of tiers built from those",
        "# fabric presets, calibrated_held_out_error = {stack = {dense|moe = {...}}} holds the held-out",
        "# errors of the generation's measured runs (codesign evaluate prints them as the expected error;",
        "# an accelerator of an architecture with none has calibrated_unmeasured_error instead: the errors",
        "# of a generation held out whole).",
        "# The top-level values are those of the table's default_stack (the software",
        "# stack they were measured with); [<preset>.stacks.<stack>] holds what differs for another stack",
        '# (select with [efficiency] stack = "megatron" | "megatron-2021" | "nemo" | "composer"; an empty table means',
        "# the stack has no rows of its own on this generation and borrows the nearest stack's values).",
        "# Generated by experiments/calibrate.py --write-presets; do not edit by hand.",
        "",
        "[uncalibrated]",
        'name = "codesign.Efficiency() class defaults (uncalibrated round values)"',
        'note = "Select with [efficiency] preset = \\"uncalibrated\\"; used by the validation as the before-calibration baseline."',
        "",
    ]
    out = head
    for acc, t in preset_tables(res).items():
        out.append(f"[{acc}]")
        for k in ("name", "source", "note"):
            out.append(f"{k} = {_toml_value(t[k])}")
        for k, v in t.items():
            if k in ("name", "source", "note", "stacks"):
                continue
            out.append(f"{k} = {_toml_value(v)}")
        out.append("")
        for st, sv in t.get("stacks", {}).items():
            out.append(f"[{acc}.stacks.{st}]")
            for k, v in sv.items():
                out.append(f"{k} = {_toml_value(v)}")
            out.append("")
    return "\n".join(out)
