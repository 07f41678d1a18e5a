"""Measured runs as run documents: the row -> run mapping and each row's measured step time.

The data set is the project's copy of the shared collection of published runs
(:data:`DATA_PATH`, package data: Narayanan et al. SC21, Korthikanti et al. 2022, MosaicML
llm-foundry, NVIDIA DGX Cloud benchmarking recipes) and the Megatron-Bridge 25.09/25.11
performance summaries (:data:`BRIDGE_DATA_PATH`, mapped by :mod:`codesign.calibration._bridge`).  Every row the model can express is
mapped to a run document (:func:`row_to_doc`, :func:`row_to_config`); a row it cannot express
raises :class:`Unexpressible` with the reason.  The mapping never depends on a fit: documents
carry the uncalibrated efficiency preset and the row's software stack.

Measured step time, in this order of preference (:func:`measured_step_time`):

1. ``measured.iteration_time_s`` (published step time);
2. ``global_batch * seq_len / measured.tokens_per_s_total`` (Megatron-Bridge rows:
   ``global_batch * seq_len / (tokens_per_s_per_gpu * num_gpus)``, first);
3. SC21 rows: the published TFLOP/s per GPU inverted through the paper's own eq. (3), which
   counts the recomputed forward pass: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / (tflops * 1e12 * n)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from codesign.calibration._bridge import BRIDGE_DATA_PATH, bridge_row_to_doc
from codesign.calibration._unexpressible import Unexpressible, bridge_precision, run_document
from codesign.config import catalog, data_dir, load_run_dict
from codesign.specs import SpecError

__all__ = [
    "ACCELERATORS",
    "ASSUMPTIONS",
    "BRIDGE_DATA_PATH",
    "DATA_PATH",
    "MICROBATCH_RANGE",
    "NEMO_RECIPES",
    "STACK_OF_SOURCE",
    "Unexpressible",
    "bridge_precision",
    "bridge_step_time",
    "calibrated_row_config",
    "data_notes",
    "is_bridge_row",
    "load_all_rows",
    "load_rows",
    "measured_step_time",
    "row_to_config",
    "row_to_doc",
    "source_short",
]

DATA_PATH = data_dir() / "measured_runs.json"
"""The project's copy of the shared collection of published runs (package data)."""

MICROBATCH_RANGE = (1, 2, 4, 8)
"""Micro-batch sizes tried for rows that do not publish theirs."""

_MB_SET = "{" + ", ".join(str(mb) for mb in MICROBATCH_RANGE) + "}"

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
    f"Micro-batch unknown (SC21 Table 1): evaluated over {_MB_SET} where global_batch divides "
    "dp * microbatch; reported as a range, excluded from MAPE.",
]


def data_notes(rows: list[dict]) -> list[str]:
    """Notes on the data set: where a published derived number is not used, and why.

    Every figure is computed from ``rows``: how far MosaicML's ``derived.iteration_time_s``
    (global batch over a rounded samples/s) is from the step time used here, how closely the
    inverted SC21 eq. (3) matches the row's own ``derived.iteration_time_s_from_eq3``, and
    which rows have no global batch.
    """
    notes = []
    mosaic = [r for r in rows if source_short(r) == "MosaicML"]
    off = []
    for r in mosaic:
        derived = r.get("derived", {}).get("iteration_time_s")
        t, how = measured_step_time(r)
        if derived and t and how == "tokens_per_s_total":
            off.append(abs(derived - t) / derived)
    sps = [r["measured"]["samples_per_s"] for r in mosaic if r["measured"].get("samples_per_s")]
    if off:
        notes.append(
            "MosaicML rows: derived.iteration_time_s is global_batch / samples_per_s with "
            "samples_per_s rounded to an integer in the published table"
            + (f" (e.g. {min(sps)})" if sps else "")
            + f", so it is off by up to {100 * max(off):.0f} % for slow rows "
            f"({sum(1 for x in off if x > 0.01)} of the {len(off)} rows that state it differ "
            "by > 1 %); the step time here comes from tokens_per_s_total, which agrees with "
            "the published MFU."
        )
    eq3 = []
    for r in rows:
        derived = r.get("derived", {}).get("iteration_time_s_from_eq3")
        t, how = measured_step_time(r)
        if derived and t and how.endswith("eq.3"):
            eq3.append(100 * abs(t - derived) / derived)
    if eq3:
        notes.append(
            "SC21 rows have no published step time: it is the paper's eq. (3) inverted (matches "
            f"derived.iteration_time_s_from_eq3 within {max(1, math.ceil(max(eq3)))} %)."
        )
    for r in rows:
        if not r.get("parallel", {}).get("global_batch"):
            partial = " (partial row)" if r.get("completeness", "complete") != "complete" else ""
            notes.append(f"{r['id']} has no global batch{partial}: not expressible.")
    return notes


def load_rows(path: str | Path = DATA_PATH) -> list[dict]:
    """The measured runs (a list of dicts, one per published run)."""
    return json.loads(Path(path).read_text())


def is_bridge_row(row: dict) -> bool:
    """Whether ``row`` comes from the Megatron-Bridge performance summaries."""
    return "Megatron-Bridge" in row.get("source", {}).get("paper", "") or row.get(
        "id", ""
    ).startswith("mbridge_")


def bridge_step_time(row: dict) -> float | None:
    """``global_batch * seq_len / (tokens_per_s_per_gpu * num_gpus)`` in seconds."""
    tps = row.get("measured", {}).get("tokens_per_s_per_gpu")
    gb = row.get("parallel", {}).get("global_batch")
    if not tps or not gb:
        return None
    return gb * row["model"]["seq_len"] / (float(tps) * int(row["hardware"]["num_gpus"]))


def load_all_rows() -> list[dict]:
    """The rows of :data:`DATA_PATH` followed by the Megatron-Bridge rows (:data:`BRIDGE_DATA_PATH`)."""
    return load_rows(DATA_PATH) + load_rows(BRIDGE_DATA_PATH)


def source_short(row: dict) -> str:
    """Short source name: SC21, Korthikanti, MosaicML, DGXC or Bridge."""
    if is_bridge_row(row):
        return "Bridge"
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
    "Bridge": "bridge",
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
    if is_bridge_row(row):
        t = bridge_step_time(row)
        if t is not None:
            return t, "tokens_per_s_per_gpu"
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
    if is_bridge_row(row):
        if microbatch is not None and microbatch != row["parallel"].get("microbatch"):
            raise Unexpressible("Megatron-Bridge rows publish their micro-batch")
        return bridge_row_to_doc(row, catalog(), STACK_OF_SOURCE["Bridge"])
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
        if mosaic and strategy["zero"] == 3:
            # FSDP FULL_SHARD with MixedPrecision: the sharded fp32 parameters are the master
            # weights; the bf16 copy is gathered per unit and freed (the prefetch buffer).
            training["weight_copy_bytes"] = 0.0
            notes.append("FSDP FULL_SHARD: no persistent 16-bit weight copy")

    system = {
        "accelerator": accel_name,
        "num_accelerators": n,
        "tiers": [
            {
                "preset": accel["scale_up"],
                "domain": int(hw.get("nvlink_domain", hw.get("gpus_per_node", 8))),
            },
            _scale_out_tier(row, accel_name, accel, n, notes),
        ],
    }
    doc = run_document(model, training, system, strategy, STACK_OF_SOURCE[source_short(row)])
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
        if recipe_facts and not _recompute_stated(row) and not _fits(cfg):
            cfg = _ran_means_fits(doc, cfg, notes)
    except Unexpressible as e:
        return None, str(e)
    except SpecError as e:
        return None, str(e)
    return cfg, "; ".join(notes)


def calibrated_row_config(row: dict):
    """``(RunConfig, notes)`` of a row as :func:`row_to_config` maps it (with its ran-means-fits
    recomputation, if assumed), but with the calibrated efficiency preset of its accelerator and
    software stack instead of the mapping's uncalibrated defaults: a prediction as a user would
    make it; ``(None, reason)`` when the row is not expressible."""
    mapped, notes = row_to_config(row)
    if mapped is None:
        return None, notes
    try:
        doc, _ = row_to_doc(row)
        eff = {k: v for k, v in doc["efficiency"].items() if k != "preset"}
        cfg = load_run_dict({**doc, "efficiency": eff})
    except (Unexpressible, SpecError) as e:
        return None, str(e)
    return dataclasses.replace(cfg, strategy=mapped.strategy), notes


RAN_MEANS_FITS = (
    ("selective", ["core_attn"]),
    ("selective", ["core_attn", "layernorm", "moe_act"]),
    ("selective", ["core_attn", "layernorm", "mlp", "moe_act"]),
    ("full", None),
)
"""Recomputation settings tried, lightest first, for a row whose source leaves recomputation
unstated and that does not fit as mapped: the run happened, so it fit ("ran means fits")."""


def _recompute_stated(row: dict) -> bool:
    v = str(row.get("parallel", {}).get("recompute", "")).strip().lower()
    return v.startswith(("full", "selective", "none"))


def _fits(cfg) -> bool:
    from codesign.step import evaluate

    return bool(evaluate(*cfg.specs()).fits)


def _ran_means_fits(doc: dict, cfg, notes: list):
    """The lightest recomputation of :data:`RAN_MEANS_FITS` under which the run fits (noted);
    the mapped configuration unchanged when none does."""
    for mode, modules in RAN_MEANS_FITS:
        trial = {**doc, "strategy": {**doc["strategy"], "recompute": mode}}
        if modules is not None:
            trial["strategy"]["recompute_modules"] = modules
        cand = load_run_dict(trial)
        if _fits(cand):
            what = mode + (f" ({', '.join(modules)})" if modules else "")
            notes.append(f"ASSUMED recompute {what}: unstated, and the run fit (ran means fits)")
            return cand
    notes.append("does not fit under any recomputation (memory model over-estimates this run)")
    return cfg
