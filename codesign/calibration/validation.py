"""Validation against published training runs: row -> run mapping, calibration, reports.

The data set is the project's copy of the shared collection of published runs
(``experiments/data/measured_runs.json``: Narayanan et al. SC21, Korthikanti et al. 2022,
MosaicML llm-foundry, NVIDIA DGX Cloud benchmarking recipes).  This module

* maps every row the model can express to a run document (:func:`row_to_doc`,
  :func:`row_to_config`) and evaluates it (:func:`predict`); rows it cannot express carry the
  reason; rows without a published micro-batch are evaluated over :data:`MICROBATCH_RANGE`
  (moved here from ``experiments/validate.py``, which stays the first-cut script);
* calibrates the efficiency parameters on training splits (:func:`run_validation`, using
  :func:`codesign.calibrate.calibrate`) and reports before/after errors per source on
  training and held-out rows (:func:`render_markdown`, :func:`parity_plot`);
* registers the ``codesign validate`` command (:func:`register_cli`).

Measured step time, in this order of preference (:func:`measured_step_time`):

1. ``measured.iteration_time_s`` (published step time);
2. ``global_batch * seq_len / measured.tokens_per_s_total``;
3. SC21 rows: the published TFLOP/s per GPU inverted through the paper's own eq. (3), which
   counts the recomputed forward pass: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / (tflops * 1e12 * n)``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from codesign.config import catalog, data_dir, load_run_dict
from codesign.step import evaluate
from codesign.specs import SpecError

ROOT = Path(__file__).resolve().parent.parent.parent

DATA_PATH = data_dir() / "measured_runs.json"
"""The project's copy of the shared collection of published runs."""
RESULTS_DIR = ROOT / "experiments" / "results"
MICROBATCH_RANGE = (1, 2, 4, 8)
CALCULON_KORTHIKANTI = {"mape_pct": 3.65, "max_ape_pct": 8.87}

ACCELERATORS = {
    "A100-SXM4-80GB": "a100-sxm4-80gb",
    "A100-SXM4-40GB": "a100-sxm4-40gb",
    "H100-SXM5-80GB": "h100-sxm5-80gb",
}

# Settings of the NVIDIA DGX Cloud benchmarking recipes, read from the recipe files of
# github.com/NVIDIA/dgxc-benchmarking (the commits below; the rows cite 35a9aec for v24.11.1 and
# 0b71cfd for v25.02.01, so for the 25.02 rows these are the nearest recipe files found, not
# necessarily the exact ones).  The rows themselves say "recompute: not stated".
NEMO_RECIPES = {
    "dgxc_gpt3_175b": {
        "recompute": "none",
        "overlap_tp": True,
        "grad_reduce_bytes": 2.0,
        "dropout": True,
        "tied_embeddings": True,
        "source": "dgxc-benchmarking@35a9aec nemo_megatron/gpt3_175b_hydra.yaml: "
        "activations_checkpoint_granularity null, ub_tp_comm_overlap true, distributed_fused_adam "
        "grad_sync_dtype bf16, hidden/attention dropout 0.1 (NeMo GPT default: tied embeddings)",
    },
    "dgxc_nemotron4_15b": {
        "recompute": "none",
        "overlap_tp": True,
        "source": "dgxc-benchmarking@8f5cbb3 nemotron/nemotron4-15b-synth.yaml: "
        "activations_checkpoint_granularity null, ub_tp_comm_overlap True, untied, no dropout",
    },
    "dgxc_nemotron4_340b": {
        "recompute": "selective",
        "overlap_tp": False,
        "grad_reduce_bytes": 2.0,
        "source": "dgxc-benchmarking@8f5cbb3 nemotron/nemotron4-340b-synth.yaml: "
        "activations_checkpoint_granularity selective, ub_tp_comm_overlap False, grad_sync_dtype bf16",
    },
    "dgxc_grok1_314b": {
        "recompute": "none",
        "overlap_tp": False,
        "grad_reduce_bytes": 2.0,
        "source": "dgxc-benchmarking@35a9aec grok1/grok1_314b.yaml: activations_checkpoint_granularity "
        "null, ub_tp_comm_overlap false, grad_sync_dtype bf16, every layer MoE (8 experts, top-2)",
    },
    "dgxc_llama31": {
        "recompute": "none",
        "overlap_tp": "tp>1",  # the script sets a userbuffers TP-overlap config for 70B/405B only
        "grad_reduce_bytes_fp8": 2.0,
        "source": "dgxc-benchmarking@741c886 llama3.1/pretrain_llama31.py: NeMo 2.0 "
        "pretrain_recipe(performance_mode=True), userbuffers TP comm overlap for 70B/405B, "
        "fp8: grad_reduce_in_fp32=False; recompute not set by the script (recipe default "
        "assumed: none, not verified)",
    },
}

ASSUMPTIONS = [
    "Efficiency: codesign.Efficiency() defaults, nothing fitted.",
    "Tiers: scale-up = the accelerator preset's fabric (nvlink3 for A100, nvlink4 for H100) with "
    "domain = hardware.nvlink_domain (8 in every row); scale-out domain = max(num_gpus, 8).",
    "Scale-out: 'InfiniBand HDR' -> ib-hdr-200 (Selene, stated); DGXC 'InfiniBand NDR (assumed: DGX "
    "H100 reference)' -> ib-ndr-400 (the row itself says assumed); MosaicML A100 'RoCE, 1600 Gbps "
    "node-to-node, 200 Gb/s per GPU' -> roce-400 preset with bandwidth_gbps overridden to 25 GB/s; "
    "MosaicML H100 'not stated' -> ASSUMED the H100 preset's default ib-ndr-400 (8 x 400 Gb/s per node).",
    "Precision: 'fp16 mixed' -> fp16, fp8 rows -> fp8 (H100 has an FP8 peak), all else bf16 "
    "(A100 fp16 and bf16 peaks are equal).",
    "Recompute: 'full...' -> full, 'selective...' -> selective, 'none' -> none.  DGXC rows say "
    "'not stated': with recipe facts, the recipe files' setting (none for GPT-3 175B, Nemotron-4 15B, "
    "Grok-1; selective for Nemotron-4 340B; none assumed for the Llama 3.1 NeMo 2.0 recipes); "
    "without, none.",
    "ZeRO: FSDP FULL_SHARD -> 3, SHARD_GRAD_OP -> 2, 'distributed optimizer' (NeMo/Megatron) -> 1, "
    "integers as given.",
    "Interleave: virtual_pp when an integer, else 1 (SC21 Table 1 used the interleaved schedule with an "
    "unstated chunk count: modelled as non-interleaved, flagged 'vpp?').",
    "Sequence parallel: the row's sp, false when absent.",
    "Model: gated MLP when act names a GLU (SwiGLU, GeGLU) and is not 'non-gated'; dropout and tied "
    "embeddings for the Megatron GPT rows (SC21, Korthikanti); MoE: experts/top_k from model.moe, "
    "expert width = ffn_hidden, every layer MoE, no shared experts (Grok-1).",
    "Recipe facts (off with --no-recipe-facts): NeMo settings above plus TP comm overlap "
    "(overlap_tp) and bf16 gradient reduction where the recipe file says so, dropout and tied "
    "embeddings for the DGXC GPT-3 recipe; MPT (MosaicML) ties input and output embeddings; "
    "MosaicML FSDP mixed_precision PURE reduces gradients in bf16 (2 bytes), DEFAULT in fp32; "
    "flash_attention off for SC21/Korthikanti (Megatron 2021-22 materialized the s x s scores; "
    "FlashAttention appeared in 2022).",
    "Other strategy flags: codesign defaults (overlap_dp on, placement tp,cp,ep,dp,pp innermost first).",
    "Micro-batch unknown (SC21 Table 1): evaluated over {1, 2, 4, 8} where global_batch divides "
    "dp * microbatch; reported as a range, excluded from MAPE.",
]


DATA_NOTES = [
    "MosaicML rows: derived.iteration_time_s is global_batch / samples_per_s with samples_per_s rounded to "
    "an integer in the published table (e.g. 1.0), so it is off by up to ~45 % for slow rows (84 of 216 "
    "differ by > 1 %); the step time here comes from tokens_per_s_total, which agrees with the published MFU.",
    "SC21 rows have no published step time: it is the paper's eq. (3) inverted (matches "
    "derived.iteration_time_s_from_eq3 within 1 %).",
    "korthikanti_530B_2240gpu has no global batch (partial row): not expressible.",
]


class Unexpressible(ValueError):
    """A row the model cannot express (missing field, unknown hardware, invalid strategy)."""


def load_rows(path: str | Path = DATA_PATH) -> list[dict]:
    """The measured runs (a list of dicts, one per published run)."""
    return json.loads(Path(path).read_text())


def source_short(row: dict) -> str:
    """Short source name: SC21, Korthikanti, MosaicML or DGXC."""
    paper = row.get("source", {}).get("paper", "")
    if paper.startswith("Narayanan"):
        return "SC21"
    if paper.startswith("Korthikanti"):
        return "Korthikanti"
    if "llm-foundry" in paper or "MosaicML" in paper:
        return "MosaicML"
    if "DGX Cloud" in paper:
        return "DGXC"
    return paper[:20] or "?"


STACK_OF_SOURCE = {
    "SC21": "megatron-2021",
    "Korthikanti": "megatron",
    "DGXC": "nemo",
    "MosaicML": "composer",
}
"""Software stack of each source (:data:`codesign.config.STACKS`).  SC21's runs (Megatron-LM as
of early 2021) and Korthikanti et al.'s (Megatron-LM 2022, with its own kernel and
communication improvements) are different releases: on the same DGX A100 SuperPOD the 2022
code runs a 175B model ~6 % faster per GPU and sequence (Korthikanti full recompute, 64 GPUs:
18.1 s per 64 sequences; SC21 Table 2, 384 GPUs: 76.8 s per 1536)."""


def _is_megatron_gpt(row: dict) -> bool:
    return source_short(row) in ("SC21", "Korthikanti")


def _nemo_recipe(row: dict) -> dict | None:
    for prefix, facts in NEMO_RECIPES.items():
        if row["id"].startswith(prefix):
            return facts
    return None


def measured_step_time(row: dict) -> tuple[float | None, str]:
    """``(seconds, how)``: the measured step time and which published number it came from."""
    meas = row.get("measured", {})
    par = row.get("parallel", {})
    mod = row.get("model", {})
    if meas.get("iteration_time_s"):
        return float(meas["iteration_time_s"]), "iteration_time_s"
    gb = par.get("global_batch")
    if meas.get("tokens_per_s_total") and gb:
        return gb * mod["seq_len"] / float(meas["tokens_per_s_total"]), "tokens_per_s_total"
    if meas.get("tflops_per_gpu") and gb:
        b, s, l, h, v = gb, mod["seq_len"], mod["layers"], mod["hidden"], mod["vocab"]
        flops = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
        n = row["hardware"]["num_gpus"]
        return flops / (float(meas["tflops_per_gpu"]) * 1e12 * n), "tflops_per_gpu via SC21 eq.3"
    return None, "no step time, tokens/s or TFLOP/s with a global batch"


def _recompute(value, row: dict, recipe_facts: bool, notes: list) -> str:
    v = str(value).strip().lower()
    if v.startswith("full"):
        return "full"
    if v.startswith("selective"):
        return "selective"
    if v == "none":
        return "none"
    facts = _nemo_recipe(row) if recipe_facts else None
    if facts and "recompute" in facts:
        notes.append(f"recompute {facts['recompute']} (recipe file; row: {value!r})")
        return facts["recompute"]
    notes.append(f"recompute none (row: {value!r})")
    return "none"


def _zero(par: dict, notes: list) -> int:
    fsdp = str(par.get("fsdp", ""))
    if "FULL_SHARD" in fsdp:
        return 3
    if "SHARD_GRAD_OP" in fsdp:
        return 2
    z = par.get("zero_stage")
    if isinstance(z, bool):
        raise Unexpressible(f"parallel.zero_stage = {z!r} is not a stage")
    if isinstance(z, int):
        return z
    if isinstance(z, str) and "distributed optimizer" in z.lower():
        return 1
    if z is None:
        notes.append("zero 0 (not stated)")
        return 0
    raise Unexpressible(f"parallel.zero_stage = {z!r} is not understood")


def _precision(par: dict, accel: dict, notes: list) -> str:
    p = str(par.get("precision", "")).lower()
    if "fp8" in p:
        if float(accel.get("peak_tflops_fp8", 0.0)) > 0:
            return "fp8"
        notes.append("fp8 row on an accelerator without FP8 peak: bf16")
        return "bf16"
    if "fp16" in p and "bf16" not in p:
        return "fp16"
    return "bf16"


def _gated(act: str | None) -> bool:
    if not act:
        return False
    a = act.lower()
    if "non-gated" in a:
        return False
    return bool(re.search(r"swiglu|geglu|reglu|silu|swish|\bglu\b", a))


def _scale_out_tier(row: dict, accel_name: str, accel: dict, n: int, notes: list) -> dict:
    inter = row["hardware"].get("inter_node", {}) or {}
    fabric = str(inter.get("fabric", "not stated"))
    per_gpu_gbit = inter.get("per_gpu_gbps")
    f = fabric.lower()
    domain = max(n, int(row["hardware"].get("nvlink_domain", 8)))
    tier = {"domain": domain}
    if "hdr" in f:
        tier["preset"] = "ib-hdr-200"
    elif "ndr" in f:
        tier["preset"] = "ib-ndr-400"
        if "assumed" in f:
            notes.append("scale-out ib-ndr-400 (assumed by the source)")
    elif "roce" in f:
        tier["preset"] = "roce-400"
        if per_gpu_gbit:
            tier["bandwidth_gbps"] = float(per_gpu_gbit) / 8.0
        notes.append(
            f"scale-out RoCE {per_gpu_gbit} Gb/s/GPU (roce-400 preset at {per_gpu_gbit}/8 GB/s)"
        )
    elif "not stated" in f or not fabric.strip():
        tier["preset"] = accel["scale_out"]
        notes.append(f"scale-out ASSUMED {accel['scale_out']} (fabric not stated)")
    else:
        raise Unexpressible(f"hardware.inter_node.fabric = {fabric!r} has no fabric preset")
    preset_bw = float(catalog()["fabrics"][tier["preset"]]["bandwidth_gbps"])
    if (
        per_gpu_gbit
        and "bandwidth_gbps" not in tier
        and abs(float(per_gpu_gbit) / 8.0 - preset_bw) > 1e-6
    ):
        tier["bandwidth_gbps"] = float(per_gpu_gbit) / 8.0
        notes.append(f"scale-out bandwidth {per_gpu_gbit} Gb/s per GPU (preset {preset_bw:g} GB/s)")
    return tier


def row_to_doc(
    row: dict, microbatch: int | None = None, recipe_facts: bool = True
) -> tuple[dict, list]:
    """``(run document, notes)`` for one row; raises :class:`Unexpressible` when it cannot be built.

    The document is the dict form of a run TOML (``codesign.load_run_dict`` checks it).
    """
    notes: list[str] = []
    hw, mod, par = row["hardware"], row["model"], row["parallel"]
    gpu = hw.get("gpu")
    if gpu not in ACCELERATORS:
        raise Unexpressible(f"hardware.gpu = {gpu!r} has no accelerator preset")
    accel_name = ACCELERATORS[gpu]
    accel = catalog()["accelerators"][accel_name]
    n = int(hw["num_gpus"])
    gb = par.get("global_batch")
    if not gb:
        raise Unexpressible("parallel.global_batch not published")
    mb = microbatch if microbatch is not None else par.get("microbatch")
    if mb is None:
        raise Unexpressible("parallel.microbatch not published (evaluate over a range)")
    megatron = _is_megatron_gpt(row)
    facts = _nemo_recipe(row) if recipe_facts else None
    mosaic = source_short(row) == "MosaicML"

    model = {
        "layers": mod["layers"],
        "hidden": mod["hidden"],
        "heads": mod["heads"],
        "kv_heads": mod.get("kv_heads", mod["heads"]),
        "ffn_hidden": mod["ffn_hidden"],
        "seq_len": mod["seq_len"],
        "vocab": mod["vocab"],
        "gated_mlp": _gated(mod.get("act")),
        "dropout": megatron or bool(facts and facts.get("dropout")),
        "tied_embeddings": megatron
        or bool(facts and facts.get("tied_embeddings"))
        or (recipe_facts and mosaic),
    }
    if mod.get("act") is None:
        notes.append("act not stated: plain GeLU MLP")
    moe = mod.get("moe")
    if moe:
        model.update(
            moe_experts=moe["experts"],
            moe_top_k=moe["top_k"],
            moe_ffn_hidden=moe.get("ffn_hidden", mod["ffn_hidden"]),
            moe_shared_experts=moe.get("shared_experts", 0),
            moe_layers=moe.get("layers", mod["layers"]),
        )

    precision = _precision(par, accel, notes)
    training: dict = {"global_batch": gb, "precision": precision}

    vpp = par.get("virtual_pp")
    if isinstance(vpp, int) and not isinstance(vpp, bool):
        interleave = vpp
    else:
        interleave = 1
        if vpp is not None and int(par.get("pp", 1)) > 1:
            notes.append("vpp? (interleaved, chunks unstated: modelled v=1)")

    strategy = {
        "tp": par["tp"],
        "pp": par["pp"],
        "dp": par["dp"],
        "cp": par.get("cp", 1),
        "ep": par.get("ep", 1),
        "sequence_parallel": bool(par.get("sp", False)),
        "microbatch": mb,
        "interleave": interleave,
        "recompute": _recompute(par.get("recompute", "not stated"), row, recipe_facts, notes),
        "zero": _zero(par, notes),
    }
    if recipe_facts:
        if megatron:
            strategy["flash_attention"] = False
        if facts:
            ov = facts.get("overlap_tp")
            if ov == "tp>1":
                ov = int(par["tp"]) > 1
            if ov:
                strategy["overlap_tp"] = True
                if int(par["tp"]) > 1:
                    notes.append("TP comm overlap (recipe)")
            gbytes = facts.get("grad_reduce_bytes")
            if gbytes is None and precision == "fp8":
                gbytes = facts.get("grad_reduce_bytes_fp8")
            if gbytes:
                training["grad_reduce_bytes"] = gbytes
        if mosaic and str(par.get("fsdp", "")).startswith("PURE"):
            training["grad_reduce_bytes"] = 2.0

    doc = {
        "model": model,
        "training": training,
        "system": {
            "accelerator": accel_name,
            "num_accelerators": n,
            "tiers": [
                {
                    "preset": accel["scale_up"],
                    "domain": int(hw.get("nvlink_domain", hw.get("gpus_per_node", 8))),
                },
                _scale_out_tier(row, accel_name, accel, n, notes),
            ],
        },
        "strategy": strategy,
        # The uncalibrated codesign.Efficiency() defaults: the calibrated presets are applied
        # (or not) by the caller, so the mapping itself never depends on a fit.  The stack
        # names the software the run used (a label for stack-grouped calibration).
        "efficiency": {"preset": "uncalibrated", "stack": STACK_OF_SOURCE[source_short(row)]},
    }
    return doc, notes


def row_to_config(row: dict, microbatch: int | None = None, recipe_facts: bool = True):
    """``(RunConfig, notes)`` for a row the model can express, else ``(None, reason)``.

    ``microbatch`` overrides the row's (needed for rows that do not state it).  On success the
    second element is a "; "-joined string of the assumptions made for this row; on failure it
    is why the row is not expressible (a :class:`~codesign.specs.SpecError` message for
    invalid degrees or divisibility).
    """
    try:
        doc, notes = row_to_doc(row, microbatch, recipe_facts)
        cfg = load_run_dict(doc)
    except Unexpressible as e:
        return None, str(e)
    except SpecError as e:
        return None, str(e)
    return cfg, "; ".join(notes)


def _evaluate(cfg) -> dict:
    r = evaluate(*cfg.specs())
    step = float(r.step_time_s)
    return {
        "predicted_s": step,
        "breakdown_s": {k: float(v) for k, v in r.breakdown_s.items()},
        "memory_gb": float(r.memory_gb["total"]),
        "hbm_gb": float(cfg.system.accelerator.hbm_gb),
        "fits": bool(r.fits),
        "mfu": float(r.mfu),
        "hfu": float(r.hfu),
    }


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def predict(row: dict, recipe_facts: bool = True) -> dict:
    """Evaluate one row.  Returns a JSON-ready dict.

    ``kind`` is ``point`` (one prediction, ``error_pct`` = 100 (pred - meas) / meas), ``range``
    (micro-batch unknown: ``range`` holds one entry per plausible micro-batch) or ``skipped``
    (``reason`` says why).
    """
    out = {
        "id": row["id"],
        "source": source_short(row),
        "gpus": int(row["hardware"]["num_gpus"]),
        "verification": row.get("verification", ""),
    }
    par = row["parallel"]
    meas, how = measured_step_time(row)
    out["measured_s"], out["measured_from"] = meas, how
    if not par.get("global_batch"):
        return {**out, "kind": "skipped", "reason": "parallel.global_batch not published"}
    if meas is None:
        return {**out, "kind": "skipped", "reason": how}
    unknown_mb = par.get("microbatch") is None
    if not unknown_mb:
        cfg, note = row_to_config(row, recipe_facts=recipe_facts)
        if cfg is None:
            return {**out, "kind": "skipped", "reason": note}
        res = _evaluate(cfg)
        return {
            **out,
            "kind": "point",
            "notes": note,
            **res,
            "error_pct": _err(res["predicted_s"], meas),
        }
    # Micro-batch unknown: the plausible range.
    dp = int(par["dp"])
    gb = int(par["global_batch"])
    entries, reasons, note = {}, [], ""
    for mb in MICROBATCH_RANGE:
        if gb % (dp * mb):
            continue
        cfg, msg = row_to_config(row, microbatch=mb, recipe_facts=recipe_facts)
        if cfg is None:
            reasons.append(f"mb={mb}: {msg}")
            continue
        note = msg
        res = _evaluate(cfg)
        entries[mb] = {**res, "error_pct": _err(res["predicted_s"], meas)}
    if not entries:
        return {
            **out,
            "kind": "skipped",
            "reason": "no valid micro-batch in range: " + "; ".join(reasons),
        }
    preds = [e["predicted_s"] for e in entries.values()]
    errs = [e["error_pct"] for e in entries.values()]
    mbs = sorted(entries)
    lo, hi = min(preds), max(preds)
    return {
        **out,
        "kind": "range",
        "notes": "; ".join(x for x in (f"mb unknown: {mbs}", note) if x),
        "range": {str(k): v for k, v in entries.items()},
        "predicted_min_s": lo,
        "predicted_max_s": hi,
        "measured_within": lo <= meas <= hi,
        "min_abs_error_pct": min(abs(e) for e in errs),
        "error_at_min_mb_pct": entries[mbs[0]]["error_pct"],
        "error_at_max_mb_pct": entries[mbs[-1]]["error_pct"],
        "fits_any": any(e["fits"] for e in entries.values()),
    }


def summarize(results: list[dict]) -> dict:
    """Per-source statistics of point rows (MAPE, max APE, bias) and range rows."""
    by: dict[str, dict] = {}
    for r in results:
        s = by.setdefault(
            r["source"],
            {
                "rows": 0,
                "skipped": 0,
                "point": 0,
                "errors": [],
                "not_fit": 0,
                "range": 0,
                "range_within": 0,
                "range_min_abs": [],
                "shares": {},
            },
        )
        s["rows"] += 1
        if r["kind"] == "skipped":
            s["skipped"] += 1
        elif r["kind"] == "point":
            s["point"] += 1
            s["errors"].append(r["error_pct"])
            s["not_fit"] += 0 if r["fits"] else 1
            for k, v in r["breakdown_s"].items():
                s["shares"].setdefault(k, []).append(v / r["predicted_s"])
        else:
            s["range"] += 1
            s["range_within"] += int(r["measured_within"])
            s["range_min_abs"].append(r["min_abs_error_pct"])
    out = {}
    for name, s in by.items():
        e = s["errors"]
        out[name] = {
            "rows": s["rows"],
            "skipped": s["skipped"],
            "evaluated": s["point"],
            "mape_pct": sum(abs(x) for x in e) / len(e) if e else None,
            "max_ape_pct": max(abs(x) for x in e) if e else None,
            "mean_signed_error_pct": sum(e) / len(e) if e else None,
            "over_predicted": sum(1 for x in e if x > 0),
            "not_fit": s["not_fit"],
            "range_rows": s["range"],
            "range_within": s["range_within"],
            "range_best_mape_pct": (sum(s["range_min_abs"]) / len(s["range_min_abs"]))
            if s["range_min_abs"]
            else None,
            "mean_breakdown_share": {k: sum(v) / len(v) for k, v in s["shares"].items()},
        }
    return out


# ==========================================================================================
# Calibration against the data set: labels, splits, fits, reports
# ==========================================================================================

GENERATION = {
    "a100-sxm4-40gb": "a100",
    "a100-sxm4-80gb": "a100",
    "h100-sxm5-80gb": "h100",
}
"""Accelerator preset -> generation label for the accelerators that have measured rows."""

NEAREST_GENERATION = {
    "h800-sxm5-80gb": ("h100", "same Hopper GH100 die and clocks as H100 SXM5 (NVLink cut)"),
    "h200-sxm-141gb": ("h100", "same Hopper SMs and clocks as H100 SXM5, faster HBM3e"),
    "b200": ("h100", "Blackwell: no measured rows; nearest measured generation is Hopper"),
    "gb200": ("h100", "Blackwell: no measured rows; nearest measured generation is Hopper"),
    "mi300x": (
        "h100",
        "AMD CDNA3: no measured rows; nearest measured generation by peak rate is H100",
    ),
    "tpu-v5p": ("a100", "TPU: no measured rows; nearest measured generation by peak rate is A100"),
}
"""Accelerators without measured rows: the generation whose calibration they inherit, and why."""

LABEL_FALLBACK = {
    "h100-fp8": ("h100", "a100"),
    "h100": ("a100",),
    "a100": ("h100",),
    "a100-unfused": ("h100-unfused", "a100"),
    "h100-unfused": ("a100-unfused", "h100"),
}
"""Where a label has no fitted value (held out), the first fitted label of this chain is used."""

STACK_FALLBACK = {
    "megatron": ("megatron-2021", "nemo", "composer"),
    "megatron-2021": ("megatron", "nemo", "composer"),
    "nemo": ("megatron", "megatron-2021", "composer"),
    "composer": ("megatron", "megatron-2021", "nemo"),
    "any": ("megatron", "megatron-2021", "nemo", "composer"),
}
"""For a stack without fitted values, the stacks to borrow from, nearest first (the other
Megatron-LM release; NeMo is built on Megatron-Core; Composer/FSDP is the furthest from all)."""


DEFAULT_STACK = {"a100": "megatron", "h100": "nemo"}
"""Stack whose calibrated values an accelerator preset's top-level keys hold (the most recent
NVIDIA reference stack with measured rows on that generation); ``[efficiency] stack = ...``
selects another (:data:`codesign.config.STACKS`)."""


def fallback_chain(label) -> tuple:
    """Labels to try, in order, when ``label`` has no fitted value (itself excluded).

    Plain labels follow :data:`LABEL_FALLBACK`; ``"<label>/<stack>"`` labels first try the
    same label with the sibling stacks (:data:`STACK_FALLBACK`), then the fallback labels with
    the own stack and its siblings.
    """
    if not isinstance(label, str) or "/" not in label:
        return tuple(LABEL_FALLBACK.get(label, ()))
    base, stack = label.rsplit("/", 1)
    stacks = (stack, *STACK_FALLBACK.get(stack, ()))
    out = [f"{base}/{st}" for st in stacks[1:]]
    for b in LABEL_FALLBACK.get(base, ()):
        out += [f"{b}/{st}" for st in stacks]
    return tuple(out)


PARAM_GROUPING = {
    "gemm_max": "generation+precision+stack",
    "attention_eff": "generation+attention+stack",
    "hbm_eff": "generation+stack",
    "gemm_half_dim": "shared",
    "dp_overlap_eff": "shared",
    "tp_overlap_eff": "shared",
    "tier_efficiency": "fabric kind",
    "step_overhead_s": "shared",
    "elementwise_traffic": "shared",
    "cp_overlap_eff": "shared",
    "p2p_overlap_eff": "shared",
    "backward_factor": "shared",
    "moe_imbalance": "shared",
    "recompute_factor": "shared+stack",
}
"""How each parameter is shared: one value, one per generation, per generation and GEMM
precision (FP8 GEMMs get their own ``gemm_max``), or one per fabric kind (scale-up, scale-out);
``+stack`` makes one value per software stack as well (:data:`STACK_OF_SOURCE`): the same H100s
reach ~0.40-0.46 MFU under 2023 Composer/FSDP and ~0.50-0.60 under 2024-25 NeMo."""

DEFAULT_PARAMS = (
    "gemm_max",
    "gemm_half_dim",
    "attention_eff",
    "hbm_eff",
    "dp_overlap_eff",
    "tp_overlap_eff",
    "tier_efficiency",
    "backward_factor",
    "moe_imbalance",
    "recompute_factor",
)
"""The calibrated parameter set (chosen by the ablation in ``experiments/results/validation.md``)."""

CALIBRATION_START = {"step_overhead_s": 0.05}
"""Start values that differ from ``codesign.Efficiency()`` (a start of exactly 0 for a
log-parametrized positive would never move)."""

DATE = "2026-11-30"
SOURCES = ("SC21", "Korthikanti", "DGXC", "MosaicML")


def fit_exclusion(row: dict) -> str | None:
    """Why a row the model expresses is still kept out of every fit (None: it is fitted).

    SC21 Table 2's ZeRO-3 rows ran DeepSpeed ZeRO-3 (2021) inside Megatron: their measured
    step time does not fall when the GPU count doubles (66.7 s at 768 and at 1536 GPUs for
    175B), i.e. a per-step cost that the model's ZeRO-3 term (hierarchical, bandwidth-optimal
    collectives per micro-batch, hidden behind compute up to ``dp_overlap_eff``) cannot
    produce with any efficiency values.  Fitting them would drag the shared overlap and
    fabric efficiencies to wrong values for every other row; they are reported separately.
    """
    if row["id"].startswith("sc21_t2_zero3"):
        return "DeepSpeed ZeRO-3 (SC21 Table 2): structure the model cannot express (see report)"
    return None


def generation(accelerator: str) -> str:
    """Generation label of an accelerator preset (``a100``, ``h100``; inherited for others)."""
    if accelerator in GENERATION:
        return GENERATION[accelerator]
    if accelerator in NEAREST_GENERATION:
        return NEAREST_GENERATION[accelerator][0]
    return accelerator


def config_labels(cfg) -> dict:
    """Labels of one run for every grouping: generation, GEMM label, per-tier fabric kind/name."""
    gen = generation(cfg.names["accelerator"])
    fabrics = catalog()["fabrics"]
    tiers = tuple(cfg.names["tiers"])
    stack = cfg.names.get("stack") or "any"
    labels = {
        "generation": gen,
        "generation+precision": gen + ("-fp8" if cfg.training.precision == "fp8" else ""),
        "generation+attention": gen + ("" if float(cfg.strategy.flash_attention) else "-unfused"),
        "shared": "all",
        "fabric kind": tuple(fabrics.get(t, {}).get("kind", t) for t in tiers),
        "fabric": tiers,
    }
    for k in ("generation", "generation+precision", "generation+attention", "shared"):
        labels[k + "+stack"] = f"{labels[k]}/{stack}"
    return labels


def _report_group(source: str, excluded: str | None) -> str:
    return f"{source} ZeRO-3 (not fitted)" if excluded else source


def build_dataset(rows: list[dict], recipe_facts: bool = True) -> dict:
    """Map every row: ``points`` (one prediction), ``ranges`` (micro-batch unknown), ``skipped``."""
    points, ranges, skipped = [], [], []
    for row in rows:
        src = source_short(row)
        meas, how = measured_step_time(row)
        par = row["parallel"]
        base = {"id": row["id"], "source": src, "gpus": int(row["hardware"]["num_gpus"])}
        if not par.get("global_batch"):
            skipped.append({**base, "reason": "parallel.global_batch not published"})
            continue
        if meas is None:
            skipped.append({**base, "reason": how})
            continue
        if par.get("microbatch") is None:
            cfgs = {}
            reasons = []
            for mb in MICROBATCH_RANGE:
                if int(par["global_batch"]) % (int(par["dp"]) * mb):
                    continue
                cfg, msg = row_to_config(row, microbatch=mb, recipe_facts=recipe_facts)
                if cfg is None:
                    reasons.append(f"mb={mb}: {msg}")
                else:
                    cfgs[mb] = cfg
            if not cfgs:
                skipped.append({**base, "reason": "no valid micro-batch: " + "; ".join(reasons)})
            else:
                ranges.append({**base, "measured_s": meas, "configs": cfgs})
            continue
        cfg, note = row_to_config(row, recipe_facts=recipe_facts)
        if cfg is None:
            skipped.append({**base, "reason": note})
            continue
        excl = fit_exclusion(row)
        points.append(
            {
                **base,
                "measured_s": meas,
                "measured_from": how,
                "config": cfg,
                "labels": config_labels(cfg),
                "excluded": excl,
                "group": _report_group(src, excl),
                "notes": note,
            }
        )
    return {"points": points, "ranges": ranges, "skipped": skipped}


def make_splits(
    points: list[dict], seed: int = 0, held_fraction: float = 0.25, random_splits: int = 1
) -> list[dict]:
    """Training/held-out masks over ``points``: random, by source, by generation, all rows.

    Rows excluded from fitting (:func:`fit_exclusion`) are never trained on.  Each of the
    ``random_splits`` random splits (seeds ``seed``, ``seed + 1``, ...) holds out
    ``held_fraction`` of each source's fittable rows (at least one), drawn with
    ``numpy.random.default_rng(seed)``: with only 8 Korthikanti rows, one random split holds
    out 2 of them, so a single seed says little; the report averages over the seeds.
    """
    import numpy as np

    n = len(points)
    fittable = np.array([p["excluded"] is None for p in points])
    src = np.array([p["source"] for p in points])
    gen = np.array([p["labels"]["generation"] for p in points])
    splits = []
    for sd in range(seed, seed + max(int(random_splits), 1)):
        rng = np.random.default_rng(sd)
        held = np.zeros(n, dtype=bool)
        for s in SOURCES:
            ix = np.flatnonzero(fittable & (src == s))
            if ix.size:
                k = max(1, int(round(held_fraction * ix.size)))
                held[rng.permutation(ix)[:k]] = True
        splits.append(
            {
                "name": f"random (seed {sd}, {int(100 * held_fraction)} % of each source held out)",
                "kind": "random",
                "seed": sd,
                "train": fittable & ~held,
            }
        )
    for s in SOURCES:
        if np.any(src == s):
            splits.append(
                {
                    "name": f"hold out {s}",
                    "kind": "source",
                    "held_source": s,
                    "train": fittable & (src != s),
                }
            )
    for g, other in (("a100", "h100"), ("h100", "a100")):
        if np.any(gen == g) and np.any(gen == other):
            splits.append(
                {
                    "name": f"train {g.upper()}, test {other.upper()}",
                    "kind": "hardware",
                    "train": fittable & (gen == g),
                }
            )
    splits.append({"name": "all rows (the presets)", "kind": "all", "train": fittable.copy()})
    for sp in splits:
        sp["held"] = ~sp["train"]
    return splits


def source_weights(points: list[dict], train, weighting: str = "source"):
    """Per-row weights: ``source`` gives every source the same total weight, ``row`` 1 each."""
    import numpy as np

    w = np.zeros(len(points))
    train = np.asarray(train, dtype=bool)
    if weighting == "row":
        w[train] = 1.0
        return w
    src = np.array([p["source"] for p in points])
    for s in set(src[train]):
        m = train & (src == s)
        w[m] = 1.0 / m.sum()
    return w


def _groups_for(points: list[dict], params, grouping: dict | None = None) -> dict:
    grouping = {**PARAM_GROUPING, **(grouping or {})}
    out = {}
    for p_name in params:
        kind = grouping.get(p_name, "shared")
        if kind == "shared":
            continue
        out[p_name] = [pt["labels"][kind] for pt in points]
    return out


def _resolve(label, fitted: dict):
    for lab in (label, *fallback_chain(label)):
        if lab in fitted:
            return lab
    return None


def resolved_groups(groups: dict, values: dict) -> dict:
    """Row labels mapped to fitted labels through :data:`LABEL_FALLBACK` (None: keep own)."""
    out = {}
    for name, labs in groups.items():
        fitted = values[name]
        if name == "tier_efficiency":
            out[name] = [tuple(_resolve(x, fitted) for x in t) for t in labs]
        else:
            out[name] = [_resolve(x, fitted) for x in labs]
    return out


def _stats(err_pct, mask) -> dict:
    import numpy as np

    e = np.asarray(err_pct)[mask]
    if e.size == 0:
        return {"rows": 0, "mape_pct": None, "max_ape_pct": None, "mean_signed_pct": None}
    return {
        "rows": int(e.size),
        "mape_pct": float(np.mean(np.abs(e))),
        "max_ape_pct": float(np.max(np.abs(e))),
        "mean_signed_pct": float(np.mean(e)),
    }


def _per_group_stats(points, before, after, split) -> dict:
    import numpy as np

    meas = np.array([p["measured_s"] for p in points])
    eb = 100.0 * (before - meas) / meas
    ea = 100.0 * (after - meas) / meas
    groups = []
    for p in points:
        if p["group"] not in groups:
            groups.append(p["group"])
    grp = np.array([p["group"] for p in points])
    out = {}
    for g in groups:
        gm = grp == g
        out[g] = {
            part: {
                "before": _stats(eb, gm & split[part]),
                "after": _stats(ea, gm & split[part]),
            }
            for part in ("train", "held")
        }
    return out


def run_validation(
    rows: list[dict] | None = None,
    params=DEFAULT_PARAMS,
    *,
    steps: int = 1500,
    learning_rate: float = 0.05,
    seed: int = 0,
    random_splits: int = 10,
    weighting: str = "source",
    recipe_facts: bool = True,
    splits: list[str] | None = None,
    dataset: dict | None = None,
    grouping: dict | None = None,
    prior: float = 1e-4,
    progress=None,
) -> dict:
    """Evaluate every row before calibration, calibrate on each split, evaluate after.

    Returns a JSON-ready dict (plus the dataset under ``"_dataset"``): per point row the
    measured and predicted step times, per split the fitted values, the training/held-out
    masks, the predictions after calibration and per-source statistics, and the
    micro-batch-range rows with the final calibration.
    """
    import numpy as np

    from codesign.calibration.fit import calibrate, predict_step_times
    from codesign.specs import Efficiency

    say = progress or (lambda *_: None)
    if dataset is None:
        dataset = build_dataset(rows if rows is not None else load_rows(), recipe_facts)
    points = dataset["points"]
    params = tuple(params)
    cfgs = [p["config"] for p in points]
    meas = np.array([p["measured_s"] for p in points])
    groups = _groups_for(points, params, grouping)
    grouping = {**PARAM_GROUPING, **(grouping or {})}
    before = predict_step_times(cfgs, {})
    init = {**{k: v for k, v in CALIBRATION_START.items()}}
    base = Efficiency()
    for p_name in params:
        init.setdefault(p_name, getattr(base, p_name) if p_name != "tier_efficiency" else 0.9)
    all_splits = make_splits(points, seed=seed, random_splits=random_splits)
    if splits is not None:
        all_splits = [s for s in all_splits if s["kind"] in splits or s["name"] in splits]
    results = []
    for sp in all_splits:
        say(f"calibrating: {sp['name']} ({int(sp['train'].sum())} training rows)")
        w = source_weights(points, sp["train"], weighting)
        fit = calibrate(
            cfgs,
            meas,
            init,
            params,
            groups,
            steps=steps,
            learning_rate=learning_rate,
            weights=w,
            prior=prior,
        )
        rg = resolved_groups(groups, fit.values)
        after = predict_step_times(cfgs, fit.values, rg)
        results.append(
            {
                "name": sp["name"],
                "kind": sp["kind"],
                "held_source": sp.get("held_source"),
                "seed": sp.get("seed"),
                "train": sp["train"].tolist(),
                "held": sp["held"].tolist(),
                "values": fit.values,
                "start": fit.start,
                "msle": fit.msle,
                "loss": fit.loss,
                "loss_first": float(fit.loss_history[0]) if fit.loss_history.size else None,
                "after_s": after.tolist(),
                "per_group": _per_group_stats(points, before, after, sp),
            }
        )
    final = next((r for r in results if r["kind"] == "all"), results[-1] if results else None)
    range_rows = []
    if final is not None:
        for rr in dataset["ranges"]:
            mbs = sorted(rr["configs"])
            rc = [rr["configs"][mb] for mb in mbs]
            labs = [config_labels(c) for c in rc]
            g = {}
            for p_name in params:
                kind = grouping.get(p_name, "shared")
                if kind != "shared":
                    g[p_name] = [lab[kind] for lab in labs]
            b = predict_step_times(rc, {})
            a = predict_step_times(rc, final["values"], resolved_groups(g, final["values"]))
            m = rr["measured_s"]
            range_rows.append(
                {
                    "id": rr["id"],
                    "source": rr["source"],
                    "gpus": rr["gpus"],
                    "measured_s": m,
                    "microbatches": mbs,
                    "before_s": b.tolist(),
                    "after_s": a.tolist(),
                    "before_inside": bool(b.min() <= m <= b.max()),
                    "after_inside": bool(a.min() <= m <= a.max()),
                    "before_best_ape_pct": float(np.min(np.abs(b - m)) / m * 100),
                    "after_best_ape_pct": float(np.min(np.abs(a - m)) / m * 100),
                }
            )
    return {
        "params": list(params),
        "grouping": {p_name: grouping.get(p_name, "shared") for p_name in params},
        "prior": prior,
        "weighting": weighting,
        "steps": steps,
        "learning_rate": learning_rate,
        "seed": seed,
        "random_splits": random_splits,
        "recipe_facts": recipe_facts,
        "points": [
            {
                "id": p["id"],
                "source": p["source"],
                "group": p["group"],
                "gpus": p["gpus"],
                "generation": p["labels"]["generation"],
                "precision": p["config"].training.precision,
                "measured_s": p["measured_s"],
                "before_s": float(before[i]),
                "excluded": p["excluded"],
            }
            for i, p in enumerate(points)
        ],
        "splits": results,
        "ranges": range_rows,
        "skipped": dataset["skipped"],
        "_dataset": dataset,
    }


# ------------------------------------------------------------------------------------------
# Reports: tables, markdown, parity plot, presets
# ------------------------------------------------------------------------------------------

TARGETS = {
    "Korthikanti": {"mape_pct": 3.0, "max_ape_pct": 8.0},
    "other": {"mape_pct": 5.0},
}
"""Issue targets on held-out rows: Korthikanti Table 5 MAPE <= 3 % and max <= 8 %, every other
source MAPE <= 5 %."""


def _f(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def _ba(st: dict, key: str) -> str:
    b, a = st["before"][key], st["after"][key]
    return "-" if a is None else f"{_f(b)} -> {_f(a)}"


SPLIT_HEAD = [
    "source",
    "train rows",
    "train MAPE % (before -> after)",
    "train max APE %",
    "held-out rows",
    "held-out MAPE % (before -> after)",
    "held-out max APE %",
]


def split_rows(split: dict) -> list[list[str]]:
    """Per-source rows of one split's table (before -> after, training and held-out)."""
    out = []
    for g, st in split["per_group"].items():
        tr, he = st["train"], st["held"]
        out.append(
            [
                g,
                str(tr["after"]["rows"]),
                _ba(tr, "mape_pct"),
                _ba(tr, "max_ape_pct"),
                str(he["after"]["rows"]),
                _ba(he, "mape_pct"),
                _ba(he, "max_ape_pct"),
            ]
        )
    return out


def held_out_summary(res: dict) -> list[dict]:
    """Per source: held-out MAPE/max after calibration in each split that holds it out."""
    out = []
    groups = []
    for p in res["points"]:
        if p["group"] not in groups:
            groups.append(p["group"])
    for g in groups:
        row = {"group": g}
        for sp in res["splits"]:
            st = sp["per_group"].get(g, {}).get("held")
            if not st or st["after"]["rows"] == 0 or sp["kind"] == "all":
                continue
            key = {"random": "random", "source": "source", "hardware": "hardware"}[sp["kind"]]
            if key == "source" and sp["held_source"] != g:
                continue
            row.setdefault(key, []).append(
                {
                    "split": sp["name"],
                    "rows": st["after"]["rows"],
                    "before": st["before"],
                    "after": st["after"],
                }
            )
        out.append(row)
    return out


def pool_entries(entries: list[dict]) -> dict:
    """Several splits' held-out statistics of one group as one: the mean of their MAPEs (each
    split weighs the same), the largest of their maxima, the mean of their signed means; rows
    are per split (the largest).  One entry is returned unchanged."""
    if len(entries) == 1:
        return entries[0]

    def agg(key):
        st = [e[key] for e in entries if e[key]["mape_pct"] is not None]
        if not st:
            return {"rows": 0, "mape_pct": None, "max_ape_pct": None, "mean_signed_pct": None}
        return {
            "rows": max(x["rows"] for x in st),
            "mape_pct": sum(x["mape_pct"] for x in st) / len(st),
            "max_ape_pct": max(x["max_ape_pct"] for x in st),
            "mean_signed_pct": sum(x["mean_signed_pct"] for x in st) / len(st),
        }

    return {
        "split": f"{len(entries)} splits",
        "rows": max(e["rows"] for e in entries),
        "before": agg("before"),
        "after": agg("after"),
    }


def random_held_stats(res: dict) -> dict:
    """``{group: pooled held-out statistics}`` over all random splits (see :func:`pool_entries`)."""
    out = {}
    for r in held_out_summary(res):
        if r.get("random"):
            out[r["group"]] = pool_entries(r["random"])
    return out


def _target_for(group: str) -> dict | None:
    if "not fitted" in group:
        return None
    return TARGETS["Korthikanti"] if group == "Korthikanti" else TARGETS["other"]


def _meets(stats: dict, target: dict | None) -> str:
    if target is None or stats["mape_pct"] is None:
        return "-"
    ok = stats["mape_pct"] <= target["mape_pct"]
    if "max_ape_pct" in target:
        ok = ok and stats["max_ape_pct"] <= target["max_ape_pct"]
    return "yes" if ok else "no"


SUMMARY_HEAD = [
    "source",
    "target (held-out)",
    "random splits: rows, MAPE / max % before -> after (mean / max over seeds)",
    "met",
    "source held out: rows, MAPE / max % before -> after",
    "met",
    "other generation held out: MAPE / max % before -> after",
]


def summary_rows(res: dict) -> list[list[str]]:
    rows = []
    for r in held_out_summary(res):
        g = r["group"]
        t = _target_for(g)
        tgt = (
            "-"
            if t is None
            else (
                f"MAPE <= {t['mape_pct']:g}"
                + (f", max <= {t['max_ape_pct']:g}" if "max_ape_pct" in t else "")
            )
        )

        def cell(entries, t=t):
            if not entries:
                return "-", "-"
            e = pool_entries(entries)
            b, a = e["before"], e["after"]
            n = f"{len(entries)} x " if len(entries) > 1 else ""
            txt = f"{n}{e['rows']}: {_f(b['mape_pct'])} / {_f(b['max_ape_pct'])} -> {_f(a['mape_pct'])} / {_f(a['max_ape_pct'])}"
            if len(entries) > 1:
                txt += " (per seed " + ", ".join(_f(x["after"]["mape_pct"]) for x in entries) + ")"
            return txt, _meets(a, t)

        rc, rm = cell(r.get("random"))
        sc, sm = cell(r.get("source"))
        hw = (
            "; ".join(
                f"{e['split']}: {_f(e['before']['mape_pct'])} / {_f(e['before']['max_ape_pct'])} -> "
                f"{_f(e['after']['mape_pct'])} / {_f(e['after']['max_ape_pct'])}"
                for e in r.get("hardware", [])
            )
            or "-"
        )
        rows.append([g, tgt, rc, rm, sc, sm, hw])
    return rows


def _text_table(head, rows, last_width: int | None = None) -> str:
    """Aligned plain-text table; ``last_width`` caps the padding of the last column."""
    w = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    if last_width is not None:
        w[-1] = min(w[-1], last_width)
    lines = ["  ".join(str(c).ljust(x) for c, x in zip(head, w, strict=True))]
    lines.append("  ".join("-" * x for x in w))
    lines += ["  ".join(str(c).ljust(x) for c, x in zip(r, w, strict=True)) for r in rows]
    return "\n".join(lines)


def _md_table(head, rows) -> str:
    esc = [[str(c).replace("|", "/") for c in r] for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def _values_rows(res: dict) -> list[list[str]]:
    """One row per parameter and label, one column per split: the fitted values."""
    keys = []
    for sp in res["splits"]:
        for name, tab in sp["values"].items():
            for lab in tab:
                if (name, lab) not in keys:
                    keys.append((name, lab))
    rows = []
    for name, lab in keys:
        start = next(
            (sp["start"][name][lab] for sp in res["splits"] if lab in sp["start"].get(name, {})),
            None,
        )
        cells = [name, str(lab), _f(start, ".3g")]
        for sp in res["splits"]:
            v = sp["values"].get(name, {}).get(lab)
            cells.append(_f(v, ".3g"))
        rows.append(cells)
    return rows


def korthikanti_rows(res: dict) -> tuple[list[list[str]], dict]:
    """Per-row Korthikanti Table 5 errors: before, source held out, random splits, all rows.

    The random-split column gives each row's mean error over the random splits that held it
    out (and in how many of them it was held out).
    """
    pts = res["points"]
    by_kind: dict = {"random": []}
    for sp in res["splits"]:
        if sp["kind"] == "source" and sp["held_source"] == "Korthikanti":
            by_kind["source"] = sp
        elif sp["kind"] == "random":
            by_kind["random"].append(sp)
        elif sp["kind"] == "all":
            by_kind["all"] = sp
    n_rand = len(by_kind["random"])
    rows, errs = [], {"before": [], "source": [], "random": [], "all": []}
    for i, p in enumerate(pts):
        if p["source"] != "Korthikanti":
            continue
        m = p["measured_s"]
        cells = [p["id"].removeprefix("korthikanti_"), str(p["gpus"]), f"{m:.2f}"]
        e = 100 * (p["before_s"] - m) / m
        errs["before"].append(e)
        cells.append(f"{e:+.1f}")
        for k in ("source", "random", "all"):
            if k == "random":
                held = [
                    100 * (sp["after_s"][i] - m) / m for sp in by_kind["random"] if sp["held"][i]
                ]
                errs["random"] += held
                cells.append(
                    f"{sum(held) / len(held):+.1f} (held out in {len(held)} of {n_rand})"
                    if held
                    else f"- (held out in 0 of {n_rand})"
                )
                continue
            sp = by_kind.get(k)
            if sp is None:
                cells.append("-")
                continue
            e = 100 * (sp["after_s"][i] - m) / m
            errs[k].append(e)
            cells.append(f"{sp['after_s'][i]:.2f} ({e:+.1f})")
        rows.append(cells)
    import numpy as np

    stats = {
        k: {"mape_pct": float(np.mean(np.abs(v))), "max_ape_pct": float(np.max(np.abs(v)))}
        if v
        else None
        for k, v in errs.items()
    }
    return rows, stats


K_HEAD = [
    "run",
    "gpus",
    "measured s",
    "before: error %",
    "Korthikanti held out: predicted s (error %)",
    "random splits: mean error % where held out",
    "all rows (presets): predicted s (error %)",
]


def range_rows_table(res: dict) -> list[list[str]]:
    out = []
    for r in res["ranges"]:
        out.append(
            [
                r["id"],
                str(r["gpus"]),
                f"{r['measured_s']:.2f}",
                ",".join(str(x) for x in r["microbatches"]),
                f"{min(r['before_s']):.2f}-{max(r['before_s']):.2f}",
                "inside"
                if r["before_inside"]
                else f"outside (best {r['before_best_ape_pct']:.1f} %)",
                f"{min(r['after_s']):.2f}-{max(r['after_s']):.2f}",
                "inside"
                if r["after_inside"]
                else f"outside (best {r['after_best_ape_pct']:.1f} %)",
            ]
        )
    return out


RANGE_HEAD = [
    "run",
    "gpus",
    "measured s",
    "micro-batches",
    "before: predicted s",
    "before",
    "after (presets): predicted s",
    "after",
]


def format_text(res: dict) -> str:
    """The per-source tables (before/after, training/held-out) as plain text."""
    parts = [
        "Calibrated parameters: " + ", ".join(f"{p} [{res['grouping'][p]}]" for p in res["params"]),
        f"Weighting: {res['weighting']}; Adam {res['steps']} steps (cosine from {res['learning_rate']:g}); prior {res['prior']:g}",
        "Error = (predicted - measured) / measured; MAPE = mean |error|; before = codesign.Efficiency() defaults.",
        "",
        "Held-out summary (after calibration; targets: Korthikanti MAPE <= 3 %, max <= 8 %; others MAPE <= 5 %)",
        _text_table(SUMMARY_HEAD, summary_rows(res)),
        "",
    ]
    for sp in res["splits"]:
        parts += [
            f"Split: {sp['name']}  (training MSLE {sp['msle']:.5f})",
            _text_table(SPLIT_HEAD, split_rows(sp)),
            "",
        ]
    krows, kst = korthikanti_rows(res)
    if krows:
        s = kst.get("source")
        parts += [
            "Korthikanti et al. 2022 Table 5"
            + (
                f": held out by source MAPE {s['mape_pct']:.2f} %, max {s['max_ape_pct']:.2f} %"
                if s
                else ""
            )
            + f" (target 3 % / 8 %; Calculon {CALCULON_KORTHIKANTI['mape_pct']} % / {CALCULON_KORTHIKANTI['max_ape_pct']} %)",
            _text_table(K_HEAD, krows),
            "",
        ]
    if res["ranges"]:
        parts += [
            "Rows with unknown micro-batch (evaluated over the range, not fitted)",
            _text_table(RANGE_HEAD, range_rows_table(res)),
            "",
        ]
    return "\n".join(parts)


def parity_plot(res: dict, path) -> None:
    """Predicted against measured step time, log-log, one colour per source.

    Three panels: before calibration; after, random split (filled: training, open:
    held out); after, each source predicted by the fit that did not see it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pts = res["points"]
    meas = np.array([p["measured_s"] for p in pts])
    groups = []
    for p in pts:
        if p["group"] not in groups:
            groups.append(p["group"])
    grp = np.array([p["group"] for p in pts])
    colors = dict(zip(groups, plt.cm.tab10.colors, strict=False))
    rand = next((s for s in res["splits"] if s["kind"] == "random"), None)
    loso = np.full(len(pts), np.nan)
    for sp in res["splits"]:
        if sp["kind"] == "source":
            m = np.array([p["source"] == sp["held_source"] for p in pts])
            loso[m] = np.array(sp["after_s"])[m]
    panels = [
        ("before calibration (Efficiency() defaults)", np.array([p["before_s"] for p in pts]), None)
    ]
    if rand is not None:
        panels.append((f"after, {rand['name']}", np.array(rand["after_s"]), np.array(rand["held"])))
    if np.isfinite(loso).any():
        panels.append(
            ("after, each source held out (fit on the others)", loso, np.ones(len(pts), bool))
        )
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 5.0), squeeze=False)
    lo, hi = meas.min() / 2, meas.max() * 2
    for ax, (title, pred, held) in zip(axes[0], panels, strict=True):
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.5, ls="--")
        for g in groups:
            m = (grp == g) & np.isfinite(pred)
            if not m.any():
                continue
            if held is None:
                ax.scatter(meas[m], pred[m], s=14, color=colors[g], label=g)
            else:
                mt, mh = m & ~held, m & held
                if mt.any():
                    ax.scatter(meas[mt], pred[mt], s=14, color=colors[g], label=f"{g} (train)")
                if mh.any():
                    ax.scatter(
                        meas[mh],
                        pred[mh],
                        s=22,
                        facecolors="none",
                        edgecolors=colors[g],
                        label=f"{g} (held out)",
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted step time (s)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("codesign step-time model vs published runs (dashed: +/-10 %)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def family(point: dict) -> str:
    """A model-family key for the residual table (DGXC recipe x precision, MosaicML size)."""
    pid = point["id"]
    if point["source"] == "DGXC":
        return re.sub(r"_\d+(_v[\d.]+)?$", "", pid)
    if point["source"] == "MosaicML":
        m = re.match(r"llmfoundry_(A100|H100)_(FP8)?_(\w+?)_", pid)
        if m:
            return f"llmfoundry {m.group(1)}{' FP8' if m.group(2) else ''} {m.group(3)}"
    return point["group"]


def family_rows(res: dict, split_kind: str = "all") -> list[list[str]]:
    """Mean signed and absolute error per model family after the ``split_kind`` calibration."""
    import numpy as np

    sp = next((s for s in res["splits"] if s["kind"] == split_kind), None)
    if sp is None:
        return []
    fam: dict[str, list] = {}
    for i, p in enumerate(res["points"]):
        m = p["measured_s"]
        fam.setdefault(family(p), []).append(
            (100 * (p["before_s"] - m) / m, 100 * (sp["after_s"][i] - m) / m)
        )
    rows = []
    for k, v in fam.items():
        a = np.array(v)
        rows.append(
            [
                k,
                str(len(v)),
                f"{a[:, 0].mean():+.1f}",
                f"{a[:, 1].mean():+.1f}",
                f"{np.abs(a[:, 1]).mean():.1f}",
                f"{a[:, 1].min():+.1f} .. {a[:, 1].max():+.1f}",
            ]
        )
    return rows


FAMILY_HEAD = [
    "family",
    "rows",
    "before: mean error %",
    "after: mean error %",
    "after: MAPE %",
    "after: range %",
]


def ablation_rows(ablation: dict) -> list[list[str]]:
    """One row per candidate parameter set: number of fitted values and errors per split kind."""
    import numpy as np

    rows = []
    for name, res in ablation.items():
        allsp = next(s for s in res["splits"] if s["kind"] == "all")
        n_vals = sum(len(t) for t in allsp["values"].values())

        def held(kind, only_own=False, res=res):
            out = []
            for sp in res["splits"]:
                if sp["kind"] != kind:
                    continue
                for g, st in sp["per_group"].items():
                    if "not fitted" in g or st["held"]["after"]["rows"] == 0:
                        continue
                    if only_own and g != sp.get("held_source"):
                        continue
                    out.append((g, st["held"]["after"]["mape_pct"]))
            return out

        rnd_all: dict = {}
        for g, v in held("random"):
            rnd_all.setdefault(g, []).append(v)
        rnd = [(g, float(np.mean(v))) for g, v in rnd_all.items()]  # mean over the seeds
        src = held("source", only_own=True)
        hw = held("hardware")
        tr = [
            (g, st["train"]["after"]["mape_pct"])
            for g, st in allsp["per_group"].items()
            if st["train"]["after"]["rows"]
        ]
        k = dict(src).get("Korthikanti")
        rows.append(
            [
                name,
                str(n_vals),
                " ".join(f"{g[:4]} {v:.1f}" for g, v in tr),
                f"{np.mean([v for _, v in rnd]):.2f}" if rnd else "-",
                " ".join(f"{g[:4]} {v:.1f}" for g, v in rnd),
                " ".join(f"{g[:4]} {v:.1f}" for g, v in src),
                _f(k, ".2f"),
                f"{np.mean([v for _, v in hw]):.1f}" if hw else "-",
            ]
        )
    return rows


ABLATION_HEAD = [
    "parameter set",
    "fitted values",
    "all rows: training MAPE % per source",
    "random splits: mean held-out MAPE % (over sources and seeds)",
    "random splits: held-out MAPE % per source (mean over seeds)",
    "source held out: MAPE % of that source",
    "Korthikanti held out MAPE %",
    "generation held out: mean MAPE %",
]


ZERO3_BYTES_PER_PARAM = 6.0
"""DeepSpeed ZeRO-3 in fp16 moves, per micro-batch, the fp16 weights twice (all-gather for the
forward and for the backward) and the fp16 gradients once (reduce-scatter): 2 + 2 + 2 bytes."""


def zero3_evidence(res: dict) -> list[list[str]]:
    """SC21 ZeRO-3 rows: measured, model before/after, and a flat-ring, non-overlapped estimate.

    The estimate adds to the calibrated model's step time the ZeRO-3 traffic of every
    micro-batch (:data:`ZERO3_BYTES_PER_PARAM` bytes per parameter) sent through each GPU's
    own scale-out link (25 GB/s HDR) with no hierarchy and no overlap.
    """
    from codesign import workload

    sp = next((s for s in res["splits"] if s["kind"] == "all"), None)
    cfgs = {p["id"]: p["config"] for p in res.get("_dataset", {}).get("points", [])}
    rows = []
    for i, p in enumerate(res["points"]):
        if not p["excluded"]:
            continue
        m = p["measured_s"]
        a = sp["after_s"][i] if sp else float("nan")
        flat = "-"
        cfg = cfgs.get(p["id"])
        if cfg is not None:
            st = cfg.strategy
            n_mb = float(cfg.training.global_batch) / (float(st.dp) * float(st.microbatch))
            params = float(workload.total_params(cfg.model)["total"])
            bw = float(cfg.system.tiers[-1].bandwidth_gbps) * 1e9
            t_flat = n_mb * ZERO3_BYTES_PER_PARAM * params / bw
            flat = f"{a + t_flat:.1f} ({100 * (a + t_flat - m) / m:+.0f} %)"
        rows.append(
            [
                p["id"],
                str(p["gpus"]),
                f"{m:.1f}",
                f"{p['before_s']:.1f}",
                f"{a:.1f}",
                f"{m - a:+.1f}",
                flat,
            ]
        )
    return rows


ZERO3_HEAD = [
    "run",
    "gpus",
    "measured s",
    "model before s",
    "model after (presets) s",
    "measured - model s",
    "model + flat-ring ZeRO-3 traffic, no overlap s (error)",
]


def _recompute_counterfactual(res: dict) -> str:
    """The all-rows fit's error on MosaicML's full-recompute rows, as fitted and with Composer's
    recompute_factor set back to 1 (one forward pass), everything else unchanged."""
    import numpy as np

    from codesign.calibration.fit import predict_step_times

    allsp = next((s for s in res["splits"] if s["kind"] == "all"), None)
    ds = res.get("_dataset")
    if allsp is None or ds is None or "recompute_factor" not in allsp["values"]:
        return ""
    ix = [
        i
        for i, p in enumerate(ds["points"])
        if p["source"] == "MosaicML" and float(p["config"].strategy.recompute[2]) == 1.0
    ]
    if not ix:
        return ""
    pts = [ds["points"][i] for i in ix]
    vals = {k: dict(v) for k, v in allsp["values"].items()}
    vals["recompute_factor"] = {k: 1.0 for k in vals["recompute_factor"]}
    groups = _groups_for(pts, list(vals), res["grouping"])
    t1 = predict_step_times([p["config"] for p in pts], vals, resolved_groups(groups, vals))
    meas = np.array([p["measured_s"] for p in pts])
    fitted = np.array([allsp["after_s"][i] for i in ix])
    e_fit = 100 * (fitted - meas) / meas
    e_one = 100 * (t1 - meas) / meas
    return (
        f"; on its {len(ix)} full-recompute rows the all-rows fit errs by {e_fit.mean():+.1f} % on "
        f"average (MAPE {np.abs(e_fit).mean():.1f} %), and would err by {e_one.mean():+.1f} % "
        f"(MAPE {np.abs(e_one).mean():.1f} %) if that recomputation cost one forward pass"
    )


def findings(res: dict) -> list[str]:
    """Data-driven statements on what remains short of the targets (for the report)."""
    import numpy as np

    out = []
    pts = res["points"]
    by = {sp["kind"] + (sp.get("held_source") or sp["name"]): sp for sp in res["splits"]}
    allsp = next((s for s in res["splits"] if s["kind"] == "all"), None)
    krows, kst = korthikanti_rows(res)
    if kst.get("source") and allsp is not None:
        pairs = []
        for i, p in enumerate(pts):
            if p["source"] == "Korthikanti" and p["id"].endswith("_full_recompute"):
                j = next(
                    (
                        k
                        for k, q in enumerate(pts)
                        if q["id"]
                        == p["id"].replace("_full_recompute", "_selective_recompute_plus_sp")
                    ),
                    None,
                )
                if j is not None:
                    mr = p["measured_s"] / pts[j]["measured_s"]
                    pr = allsp["after_s"][i] / allsp["after_s"][j]
                    pairs.append((p["id"].split("_")[1], mr, pr))
        ratio = "; ".join(f"{n}: measured {a:.2f}, model {b:.2f}" for n, a, b in pairs)
        hk_split = by.get("sourceKorthikanti")
        held_err = []
        if hk_split is not None:
            held_err = [
                100 * (hk_split["after_s"][i] - p["measured_s"]) / p["measured_s"]
                for i, p in enumerate(pts)
                if p["source"] == "Korthikanti" and p["excluded"] is None
            ]
        signed = {
            src: float(
                np.mean(
                    [
                        100 * (allsp["after_s"][i] - p["measured_s"]) / p["measured_s"]
                        for i, p in enumerate(pts)
                        if p["source"] == src and p["excluded"] is None
                    ]
                )
            )
            for src in ("SC21", "Korthikanti")
            if any(p["source"] == src for p in pts)
        }
        s = kst["source"]
        kr = random_held_stats(res).get("Korthikanti")
        rtxt = ""
        if kr is not None:
            ka = kr["after"]
            n_r = sum(1 for sp in res["splits"] if sp["kind"] == "random")
            rtxt = (
                f", random splits ({kr['rows']} of its rows held out in each of {n_r}) MAPE "
                f"{_f(ka['mape_pct'], '.2f')} %, max {_f(ka['max_ape_pct'], '.2f')} % "
                f"({'met' if _meets(ka, TARGETS['Korthikanti']) == 'yes' else 'not met'})"
            )
        out.append(
            f"Korthikanti Table 5 held out by source: MAPE {s['mape_pct']:.2f} %, max {s['max_ape_pct']:.2f} % "
            f"(target 3 % / 8 %; Calculon 3.65 % / 8.87 %); before calibration {kst['before']['mape_pct']:.2f} % / "
            f"{kst['before']['max_ape_pct']:.2f} %, fitted on all rows {kst['all']['mape_pct']:.2f} % / "
            f"{kst['all']['max_ape_pct']:.2f} %{rtxt}.  Held out, Korthikanti's stack (Megatron-LM "
            "2022) has no rows of its own and borrows the values fitted to SC21's 6 rows (Megatron-LM "
            "2021, the same machine), and the Korthikanti rows are then mostly over-predicted "
            + (
                f"(errors {min(held_err):+.1f} % to {max(held_err):+.1f} %, mean {np.mean(held_err):+.1f} %)"
                if held_err
                else ""
            )
            + ": the 2022 code ran the same kind of configuration faster than the 2021 code.  Fitted "
            "with one Megatron stack for both, the two sources pull in opposite directions; with one "
            "stack per release (the chosen grouping) their mean signed errors are "
            + ", ".join(f"{k} {v:+.1f} %" for k, v in signed.items())
            + ".  Six rows of two model sizes, all full-recompute, cannot separate GEMM, attention, "
            "HBM and recompute efficiency (see the weakly identified values below).  Step-time ratio "
            f"full / selective recompute, measured vs model (all rows fitted): {ratio}; the model "
            "charges full recomputation recompute_factor forward passes (fitted per stack: "
            + ", ".join(
                f"{k.split('/')[-1]} {v:.2f}"
                for k, v in allsp.get("values", {}).get("recompute_factor", {}).items()
            )
            + ") with two extra TP all-reduces per layer, as Korthikanti Table 4 measures per layer.  "
            "The 1T rows (pipeline depth 64, no interleaving stated) have the largest bubble of the "
            "table, 63/512 of the ideal time."
        )
    grp_held = {g: st["after"] for g, st in random_held_stats(res).items()}
    fam = {r[0]: r for r in family_rows(res)}
    worst = sorted(
        (r for r in fam.values() if r[0].startswith("dgxc")), key=lambda r: -float(r[4])
    )[:4]
    if worst:
        d = grp_held.get("DGXC", {})
        hs = (
            by.get("sourceDGXC", {})
            .get("per_group", {})
            .get("DGXC", {})
            .get("held", {})
            .get("after", {})
        )
        av = (allsp or {}).get("values", {})

        def val(name, lab):
            v = av.get(name, {}).get(lab)
            return _f(v, ".2f")

        out.append(
            f"DGXC (NeMo recipes on H100): random-split held-out MAPE {_f(d.get('mape_pct'))} %, held out "
            f"by source {_f(hs.get('mape_pct'))} % (target 5 %).  The remaining error (all rows fitted) "
            "sits in a few model families: "
            + "; ".join(f"{r[0]} {r[3]} % mean" for r in worst)
            + ".  The software stack matters as much as the accelerator: on the same H100s the 2024-25 "
            "NeMo recipes reach 0.50-0.60 MFU, MosaicML's 2023 Composer/FSDP runs 0.40-0.46, and the "
            "calibration per stack finds gemm_max "
            f"{val('gemm_max', 'h100/nemo')} (NeMo) vs {val('gemm_max', 'h100/composer')} (Composer) and "
            f"attention_eff {val('attention_eff', 'h100/nemo')} vs {val('attention_eff', 'h100/composer')} "
            "(of the BF16 peak, on the non-causal attention FLOP count; fused causal kernels skip half).  "
            "Held out as a source, NeMo has no rows of its own and borrows the Megatron (A100) and "
            "Composer (H100) values, which describe slower software: hence the large source-held-out "
            "error, which no per-accelerator value can remove.  Grok-1 (MoE, 8 experts top-2 in every "
            "layer) stays the least well described DGXC family: FP8 is under-predicted and BF16 "
            "over-predicted with one moe_imbalance for both."
        )
    m = grp_held.get("MosaicML", {})
    av_all = (allsp or {}).get("values", {})
    hs = (
        by.get("sourceMosaicML", {})
        .get("per_group", {})
        .get("MosaicML", {})
        .get("held", {})
        .get("after", {})
    )
    mos = [r for r in fam.values() if r[0].startswith("llmfoundry")]
    spread = sorted(mos, key=lambda r: -float(r[4]))[:3]
    max_spread = max(
        (float(r[5].split(" .. ")[1]) - float(r[5].split(" .. ")[0]) for r in mos), default=0.0
    )
    if mos:
        out.append(
            f"MosaicML llm-foundry: random-split held-out MAPE {_f(m.get('mape_pct'))} %, held out by source "
            f"{_f(hs.get('mape_pct'))} % (target 5 %).  Within one model size on the same hardware the errors "
            f"spread over up to {max_spread:.0f} points (worst families: "
            + "; ".join(f"{r[0]} MAPE {r[4]} %, range {r[5]}" for r in spread)
            + "): rows differ in sequence length, micro-batch and ZeRO-3 exposure at small batches, the "
            "A100 40GB rows (a separate table, grad-accumulation up to 21) run at lower MFU than the same "
            "models on A100 80GB, a few runs sit at the memory limit (MPT-30b at 8k tokens on 8 GPUs, "
            "20-24 % slower than the model on both A100 and H100), and the benchmarks ran only 12 steps.  "
            "Composer's full activation checkpointing is cheaper than one forward pass: the fitted "
            "recompute_factor is "
            + _f(av_all.get("recompute_factor", {}).get("all/composer"), ".2f")
            + " (Megatron-LM 2022: "
            + _f(av_all.get("recompute_factor", {}).get("all/megatron"), ".2f")
            + ")"
            + _recompute_counterfactual(res)
            + ".  "
            "Held out as a source, Composer has no rows of its own and borrows the Megatron/NeMo "
            "values, which describe faster software."
        )
    hw = [s for s in res["splits"] if s["kind"] == "hardware"]
    if hw:
        txt = []
        for s in hw:
            e = [
                st["held"]["after"]["mape_pct"]
                for g, st in s["per_group"].items()
                if st["held"]["after"]["rows"] and "not fitted" not in g
            ]
            txt.append(f"{s['name']}: mean held-out MAPE {np.mean(e):.1f} %")
        out.append(
            "Held out by hardware generation ("
            + "; ".join(txt)
            + "): the fitted values do not transfer between A100 and H100 (e.g. gemm_max "
            + ", ".join(
                f"{k} {v:.2f}"
                for k, v in (allsp or {}).get("values", {}).get("gemm_max", {}).items()
            )
            + "), which is why the presets are per accelerator generation; an accelerator without "
            "measured rows inherits the nearest generation and its preset says so."
        )
    if any(p["excluded"] for p in pts):
        ex = [p for p in pts if p["excluded"]]
        flat = [
            float(re.search(r"\(([-+]\d+) %\)", r[-1]).group(1))
            for r in zero3_evidence(res)
            if "%" in r[-1]
        ]
        flat_range = f"errors {min(flat):+.0f} % to {max(flat):+.0f} %" if flat else ""
        e = (
            [
                100 * (allsp["after_s"][i] - p["measured_s"]) / p["measured_s"]
                for i, p in enumerate(pts)
                if p["excluded"]
            ]
            if allsp
            else []
        )
        out.append(
            f"SC21 Table 2 ZeRO-3 rows ({len(ex)}, DeepSpeed ZeRO-3 inside Megatron) stay {_f(float(np.mean(np.abs(e))) if e else None)} % "
            "off and are kept out of every fit: their measured step time does not fall when the GPU count "
            "doubles at a fixed global batch (174.6B: 66.7 s at 768 and at 1536 GPUs), so a cost "
            "independent of the data-parallel degree dominates.  The model's ZeRO-3 term uses "
            "hierarchical (NVLink, then IB at 1/8 of the volume), bandwidth-optimal collectives hidden "
            "behind compute up to dp_overlap_eff; sending ~6 bytes per parameter per micro-batch through "
            "each GPU's own 25 GB/s link with no overlap reproduces the rows far better"
            + (f" ({flat_range})" if flat_range else "")
            + " (table below).  "
            "Suggested formula change (codesign/step.py, ZeRO-3 branch): a separate ZeRO-3 collective "
            "efficiency / flat-ring option and a ZeRO-3 overlap efficiency."
        )
    loose = []
    for name, lab, *_ in _values_rows(res):
        vs = [sp["values"].get(name, {}).get(lab) for sp in res["splits"]]
        vs = [v for v in vs if v is not None]
        if len(vs) > 1 and max(vs) / min(vs) > 1.5:
            loose.append(f"{name}[{lab}] {min(vs):.3g}-{max(vs):.3g}")
    if loose:
        out.append(
            "Weakly identified values (the fitted value varies by more than 1.5x across the splits): "
            + "; ".join(loose)
            + ".  They trade off against each other (attention against GEMM and HBM time, overlap "
            "against fabric efficiency) where few rows separate them; the presets are the all-rows "
            "values, and their individual numbers should not be read as measurements of one kernel."
        )
    out.append(
        "Memory: no row of the data set publishes memory use, so the 5 % memory target cannot be checked; "
        "the model says a few rows that ran do not fit (see validation_first_cut.md), a hint that memory is "
        "over-estimated for them."
    )
    return out


CALIBRATION_NOTES = [
    "Objective: weighted mean squared log error of the step time, each source weighted equally "
    "(every training row of a source gets weight 1/n_source), plus a weak pull (weight `prior`) "
    "of the unconstrained parameters towards their start.",
    "Reparametrization: fractions as sigmoid(u) in (0, 1), positive values as exp(u); no clipping.",
    "Optimizer: Adam with a cosine-decayed learning rate and global-norm gradient clipping inside one "
    "jax.lax.scan under jax.jit (float64); one compiled program serves every split (held-out rows "
    "have weight 0).  Deterministic: the same data and settings give the same values.",
    "Grouping: gemm_max per accelerator generation, GEMM precision (FP8 GEMMs relative to the FP8 "
    "peak get their own value) and software stack; attention_eff per generation, attention kernel "
    "(fused/flash vs the unfused s x s attention of Megatron 2021-22, whose causal mask saves no "
    "FLOPs) and stack; hbm_eff per generation and stack; gemm_half_dim, dp_overlap_eff, "
    "tp_overlap_eff, backward_factor, moe_imbalance shared; recompute_factor (the time of a full "
    "recomputation relative to the forward pass) per stack; tier_efficiency per fabric kind "
    "(scale-up NVLink, scale-out InfiniBand/RoCE).  Stacks: megatron-2021 (SC21), megatron "
    "(Korthikanti, 2022), nemo (DGXC), composer (MosaicML); the presets' top level is NeMo for H100 "
    "and Megatron (2022) for A100, `[efficiency] stack = ...` selects another.",
    "A held-out label takes the value of the nearest fitted label: first the same generation with "
    "the nearest stack (the other Megatron-LM release, then nemo <-> megatron, then composer), then "
    "the nearest generation "
    "(h100-fp8 -> h100 -> a100, a100 -> h100, unfused attention -> the other generation's unfused "
    "value -> the same generation's fused value).",
    "Rows with an unknown micro-batch (SC21 Table 1) are never fitted: they are evaluated over "
    "micro-batches {1, 2, 4, 8} before and after calibration (the presets).",
    "Memory: no row of the data set publishes memory, so the memory target cannot be checked here.",
]


def render_markdown(
    res: dict,
    ablation: dict | None = None,
    findings: list[str] | None = None,
    plot: str | None = None,
    ablation_stored: bool = False,
) -> str:
    """``experiments/results/validation.md``."""
    from codesign._version import __version__

    krows, kst = korthikanti_rows(res)
    n_points = len(res["points"])
    parts = [
        "# Validation and calibration against measured training runs (issue 3)",
        "",
        f"Generated by `codesign validate` / `experiments/calibrate.py` (codesign {__version__}) from "
        f"`experiments/data/measured_runs.json`: {n_points} rows with one prediction, "
        f"{len(res['ranges'])} rows with an unknown micro-batch (evaluated over a range), "
        f"{len(res['skipped'])} not expressible.  Date of the presets: {DATE}.",
        "",
        "Error = (predicted - measured) / measured; MAPE = mean absolute percentage error; max = maximum "
        "absolute percentage error.  *Before* = `codesign.Efficiency()` defaults (the first cut); "
        "*after* = the calibration of that split.  Held-out rows were not used by the fit that predicts them.",
        "",
        "Calibrated parameters: "
        + ", ".join(f"`{p}` ({res['grouping'][p]})" for p in res["params"])
        + f"; Adam {res['steps']} steps, learning rate {res['learning_rate']:g} (cosine), prior {res['prior']:g}, "
        f"weighting: {res['weighting']}; {res.get('random_splits', 1)} random splits (seeds {res['seed']} to "
        f"{res['seed'] + res.get('random_splits', 1) - 1}; the random-split figures are means over them).",
        "",
    ]
    if plot:
        parts += [f"![parity plot]({plot})", ""]
    parts += [
        "## Held-out errors against the targets",
        "",
        _md_table(SUMMARY_HEAD, summary_rows(res)),
        "",
    ]
    if kst.get("source"):
        s = kst["source"]
        parts += [
            f"**Korthikanti et al. 2022 Table 5, held out by source: MAPE {s['mape_pct']:.2f} %, max "
            f"{s['max_ape_pct']:.2f} %** (target 3 % / 8 %; Calculon {CALCULON_KORTHIKANTI['mape_pct']} % / "
            f"{CALCULON_KORTHIKANTI['max_ape_pct']} %; before calibration {kst['before']['mape_pct']:.2f} % / "
            f"{kst['before']['max_ape_pct']:.2f} %; with Korthikanti in the fit (all rows) "
            f"{kst['all']['mape_pct']:.2f} % / {kst['all']['max_ape_pct']:.2f} %).",
            "",
        ]
    if findings:
        parts += [
            "## What remains short of the targets, and why",
            "",
            *[f"- {x}" for x in findings],
            "",
        ]
    parts += ["## Per split: every source, training and held-out rows", ""]
    for sp in res["splits"]:
        parts += [
            f"### {sp['name']}",
            "",
            f"Training MSLE {sp['msle']:.5f} (objective {sp['loss_first'] or float('nan'):.4f} -> {sp['loss']:.5f}).",
            "",
            _md_table(SPLIT_HEAD, split_rows(sp)),
            "",
        ]
    parts += [
        "## Fitted values per split",
        "",
        "The last column is what `hardware/efficiency.toml` stores.",
        "",
        _md_table(
            ["parameter", "label", "start"] + [sp["name"] for sp in res["splits"]],
            _values_rows(res),
        ),
        "",
    ]
    if krows:
        parts += [
            "## Korthikanti et al. 2022, Table 5",
            "",
            _md_table(K_HEAD, krows),
            "",
        ]
    parts += [
        "## Remaining error by model family (presets, i.e. all rows fitted)",
        "",
        _md_table(FAMILY_HEAD, family_rows(res)),
        "",
        "## SC21 Table 2 ZeRO-3 rows (kept out of every fit)",
        "",
        _md_table(ZERO3_HEAD, zero3_evidence(res)),
        "",
    ]
    if res["ranges"]:
        parts += [
            "## SC21 Table 1: micro-batch not published (evaluated over a range, never fitted)",
            "",
            _md_table(RANGE_HEAD, range_rows_table(res)),
            "",
        ]
    if ablation:
        parts += [
            "## Choice of the parameter set (ablation)",
            "",
            "Each candidate set is fitted on every split exactly as above.  The set is chosen on the "
            "random split's held-out error (in-distribution cross-validation) and on being "
            "interpretable; the source- and generation-held-out columns are shown for information "
            "(they were seen when comparing sets, so they are not blind test figures)."
            + (
                "  (Read from `ablation.json` of an earlier `--ablation` run with the same data.)"
                if ablation_stored
                else ""
            ),
            "",
            _md_table(ABLATION_HEAD, ablation_rows(ablation)),
            "",
        ]
    parts += [
        "## Calibration method",
        "",
        *[f"- {x}" for x in CALIBRATION_NOTES],
        "",
        "## Rows not expressible",
        "",
        _md_table(
            ["run", "source", "reason"],
            [[s["id"], s["source"], s["reason"]] for s in res["skipped"]],
        )
        if res["skipped"]
        else "None.",
        "",
        "## Data notes",
        "",
        *[f"- {a}" for a in DATA_NOTES],
        "",
        "## Mapping assumptions (row -> run)",
        "",
        *[f"- {a}" for a in ASSUMPTIONS[1:]],
        "",
        "NeMo recipe files used for the DGXC rows:",
        "",
        *[f"- `{k}`: {v['source']}" for k, v in NEMO_RECIPES.items()],
        "",
    ]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------
# Presets: hardware/efficiency.toml
# ------------------------------------------------------------------------------------------

def _preset_fields() -> tuple:
    """Every calibratable :class:`~codesign.specs.Efficiency` field, in declaration order.

    Derived from :mod:`codesign.calibrate`'s parameter sets, so a newly fitted parameter can
    never be silently left out of the presets (the presets must reproduce the ``all`` fit).
    """
    import dataclasses

    from codesign.calibration.fit import FRACTION_PARAMS, POSITIVE_PARAMS
    from codesign.specs import Efficiency

    fit = FRACTION_PARAMS | POSITIVE_PARAMS
    return tuple(f.name for f in dataclasses.fields(Efficiency) if f.name in fit)


PRESET_FIELDS = _preset_fields()


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
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def preset_tables(res: dict) -> dict:
    """``{accelerator id: table}`` of calibrated efficiencies from the ``all`` split of ``res``."""
    from codesign._version import __version__

    sp = next(s for s in res["splits"] if s["kind"] == "all")
    vals = sp["values"]
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
            f"all {len(train)} fittable rows of experiments/data/measured_runs.json "
            f"(held out for the reported errors: {res.get('random_splits', 1)} random splits from seed {res['seed']}, by source, by generation; "
            "see experiments/results/validation.md)"
        )
        t["date"] = DATE
        t["calibrated_codesign_version"] = __version__
        t["calibrated_rows_by_source"] = by_source
        t["calibrated_rows_excluded"] = excluded
        t["calibrated_generation"] = gen
        t["calibrated_labels_used"] = (
            ", ".join(f"{k} <- {v}" for k, v in used.items() if k.split("[")[1][:-1] != v) or "own"
        )
        t["calibrated_msle"] = round(sp["msle"], 6)
        src = (
            "codesign.calibrate (Adam in lax.scan, mean squared log error of step time, sources weighted "
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
    """The text of ``hardware/efficiency.toml``."""
    head = [
        "# Calibrated efficiency presets, one table per accelerator preset of accelerators.toml.",
        "# codesign.config.load_run_dict uses the table named like the run's accelerator as the default",
        '# [efficiency] (keys given in a run\'s [efficiency] table override it; preset = "uncalibrated"',
        "# selects the codesign.Efficiency() class defaults).  Keys are Efficiency fields plus provenance",
        "# (name, source, note, rows, split, date, calibrated_*).  calibrated_gemm_max_fp8 replaces",
        "# gemm_max for FP8 runs, calibrated_attention_eff_unfused replaces attention_eff when flash",
        "# attention is off, calibrated_tier_efficiency sets the efficiency of tiers built from those",
        "# fabric presets.  The top-level values are those of the table's default_stack (the software",
        "# stack they were measured with); [<preset>.stacks.<stack>] holds what differs for another stack",
        "# (select with [efficiency] stack = \"megatron\" | \"megatron-2021\" | \"nemo\" | \"composer\"; an empty table means",
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


# ------------------------------------------------------------------------------------------
# Command line: codesign validate
# ------------------------------------------------------------------------------------------

_WITHOUT_RECOMPUTE = tuple(p for p in DEFAULT_PARAMS if p != "recompute_factor")

ABLATION_SETS = {
    "gemm_max": (("gemm_max",), {}),
    "+ attention_eff": (("gemm_max", "attention_eff"), {}),
    "+ attention_eff (per generation only)": (
        ("gemm_max", "attention_eff"),
        {"attention_eff": "generation"},
    ),
    "+ hbm_eff, gemm_half_dim": (("gemm_max", "attention_eff", "hbm_eff", "gemm_half_dim"), {}),
    "+ dp/tp overlap, tier efficiency, per generation": (
        _WITHOUT_RECOMPUTE,
        {
            "gemm_max": "generation+precision",
            "attention_eff": "generation+attention",
            "hbm_eff": "generation",
        },
    ),
    "+ per software stack": (_WITHOUT_RECOMPUTE, {}),
    "+ recompute_factor per stack (chosen)": (DEFAULT_PARAMS, {}),
    "chosen, tier efficiency per fabric": (DEFAULT_PARAMS, {"tier_efficiency": "fabric"}),
    "chosen, backward_factor per stack": (DEFAULT_PARAMS, {"backward_factor": "shared+stack"}),
    "chosen + elementwise_traffic, optimizer_bytes_per_param per stack": (
        DEFAULT_PARAMS + ("elementwise_traffic", "optimizer_bytes_per_param"),
        {"elementwise_traffic": "shared+stack", "optimizer_bytes_per_param": "shared+stack"},
    ),
}
"""Candidate parameter sets compared by ``--ablation``: (parameters, grouping overrides)."""


def add_arguments(p) -> None:
    p.add_argument(
        "--data", default=str(DATA_PATH), help="measured runs JSON (default: the project's copy)"
    )
    p.add_argument(
        "--out", default=str(RESULTS_DIR), help="directory for validation.md and parity.png"
    )
    p.add_argument(
        "--no-report", action="store_true", help="print only; do not write the report or plot"
    )
    p.add_argument("--steps", type=int, default=1500, help="Adam steps per fit (default 1500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first random split (default 0)")
    p.add_argument(
        "--random-splits",
        type=int,
        default=10,
        help="number of random splits, seeds --seed, --seed + 1, ... (default 10)",
    )
    p.add_argument(
        "--prior", type=float, default=1e-4, help="pull towards the start values (default 1e-4)"
    )
    p.add_argument(
        "--json", action="store_true", help="print the results as JSON instead of tables"
    )
    p.add_argument(
        "--ablation", action="store_true", help="also compare candidate parameter sets (slow)"
    )
    p.add_argument(
        "--write-presets",
        nargs="?",
        const="default",
        help="write the calibrated presets (default path: hardware/efficiency.toml in the catalog)",
    )


def run_cli(args) -> int:
    import sys
    import time

    from codesign.config import catalog_dir

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    rows = load_rows(args.data)
    ds = build_dataset(rows)
    say(
        f"{len(ds['points'])} rows with one prediction, {len(ds['ranges'])} micro-batch ranges, {len(ds['skipped'])} not expressible"
    )
    res = run_validation(
        dataset=ds,
        steps=args.steps,
        seed=args.seed,
        random_splits=args.random_splits,
        prior=args.prior,
        progress=say,
    )
    ablation = None
    if args.ablation:
        ablation = {}
        for name, (params, grouping) in ABLATION_SETS.items():
            say(f"ablation: {name}")
            r = run_validation(
                dataset=ds,
                params=params,
                grouping=grouping,
                steps=args.steps,
                seed=args.seed,
                random_splits=args.random_splits,
                prior=args.prior,
            )
            r.pop("_dataset")
            ablation[name] = r
    stored_ablation = False
    abl_path = Path(args.out) / "ablation.json"
    if ablation is None and not args.no_report and abl_path.exists():
        try:
            ablation = json.loads(abl_path.read_text())
            stored_ablation = True
            say(f"ablation: reusing {abl_path} (run with --ablation to recompute)")
        except (OSError, ValueError):
            ablation = None
    if args.json:
        out = {k: v for k, v in res.items() if k != "_dataset"}
        if ablation:
            out["ablation"] = ablation
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_text(res))
        if ablation and not stored_ablation:
            print("Ablation of the parameter set")
            print(_text_table(ABLATION_HEAD, ablation_rows(ablation)))
    if not args.no_report:
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        parity_plot(res, out_dir / "parity.png")
        md = render_markdown(
            res,
            ablation=ablation,
            findings=findings(res),
            plot="parity.png",
            ablation_stored=stored_ablation,
        )
        (out_dir / "validation.md").write_text(md)
        (out_dir / "validation.json").write_text(
            json.dumps({k: v for k, v in res.items() if k != "_dataset"}, indent=1, default=str)
        )
        if ablation and not stored_ablation:
            (out_dir / "ablation.json").write_text(
                json.dumps(_ablation_summary(ablation), indent=1, default=str)
            )
        say(
            f"wrote {out_dir / 'validation.md'}, {out_dir / 'parity.png'}, {out_dir / 'validation.json'}"
        )
    if args.write_presets:
        path = (
            Path(catalog_dir()) / "efficiency.toml"
            if args.write_presets == "default"
            else Path(args.write_presets)
        )
        path.write_text(efficiency_toml(res))
        say(f"wrote {path}")
    say(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


def _ablation_summary(ablation: dict) -> dict:
    """What :func:`ablation_rows` needs of each candidate's results (no per-row arrays)."""
    keep = ("name", "kind", "held_source", "values", "start", "msle", "loss", "per_group")
    return {
        name: {
            **{
                k: v
                for k, v in res.items()
                if k not in ("points", "splits", "ranges", "skipped", "_dataset")
            },
            "splits": [{k: sp[k] for k in keep if k in sp} for sp in res["splits"]],
        }
        for name, res in ablation.items()
    }
