"""Megatron-Bridge performance-summary rows (NeMo 25.09 / 25.11 containers) as run documents.

The rows (:data:`BRIDGE_DATA_PATH`) give the parallel degrees, batch sizes and throughput of
NVIDIA's published runs; everything else the recipe ran with (recompute, CPU offloading,
FSDP, MoE dispatcher and overlap, pipeline layout, FP8 recipe) comes from the Megatron-Bridge
performance scripts and model recipes of the matching release branch, collected in
:data:`BRIDGE_RECIPES` (:mod:`codesign.calibration._bridge_recipes`) with the file and commit
of every fact.  Settings that could not be
found are Megatron-Core defaults, flagged "ASSUMED" in the source string and in the row's notes.

Sources: github.com/NVIDIA-NeMo/Megatron-Bridge branch r0.1.0 (25.09 page) at 684a686 (and
8d5764f, 2025-09-26, for two configs changed before the page) and branch r0.2.0 (25.11 page,
2025-12-09) at 0465189.  Parallel degrees are always the row's; where a config disagrees with
the page only degree-independent settings are taken from it.
"""

from __future__ import annotations

from codesign.calibration._bridge_recipes import (
    BRIDGE_RECIPES,
    MB,
    deepseek_stage_layers,
    recipe_facts,
)
from codesign.calibration._unexpressible import Unexpressible, bridge_precision, run_document
from codesign.config import data_dir

__all__ = [
    "BRIDGE_ACCELERATORS",
    "BRIDGE_ARCH",
    "BRIDGE_DATA_PATH",
    "BRIDGE_RECIPES",
    "bridge_key",
    "bridge_row_to_doc",
    "deepseek_stage_layers",
    "recipe_differences",
    "recipe_facts",
]

BRIDGE_DATA_PATH = data_dir() / "measured_runs_megatron_bridge_2025.json"
"""The project's copy of the shared Megatron-Bridge rows (package data)."""

BRIDGE_ACCELERATORS = {
    "H100": ("h100-sxm5-80gb", "h100"),
    "B200": ("b200", "b200"),
    "GB200": ("gb200", "gb200"),
    "GB300": ("gb300", "gb300"),
    "B300": ("b300", "b300"),
}
"""Row ``hardware.gpu`` prefix -> (accelerator preset, recipe GPU key)."""

BRIDGE_ARCH = {
    "llama3_8b": {"tied_embeddings": False, "source": "Llama 3 HF config: untied embeddings"},
    "llama3_70b": {"tied_embeddings": False, "source": "Llama 3 HF config: untied embeddings"},
    "llama31_405b": {"tied_embeddings": False, "source": "Llama 3.1 HF config: untied"},
    "deepseek_v3": {
        "ffn_hidden": 18432,
        "moe_ffn_hidden": 2048,
        "moe_experts": 256,
        "moe_top_k": 8,
        "moe_shared_experts": 1,
        "moe_layers": 58,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab": 129280,
        "source": f"{MB} r0.2.0@0465189 src/megatron/bridge/models/deepseek/deepseek_provider.py "
        "DeepSeekV3Provider: num_layers 61, ffn_hidden_size 18432, num_moe_experts 256, "
        "moe_ffn_hidden_size 2048, shared expert 2048 (= 1 expert), moe_layer_freq [0]*3+[1]*58, "
        "topk 8, vocab 129280; MLA ranks (q_lora 1536, kv_lora 512, rope 64, nope 128, v 128) "
        "as in the DeepSeek-V3 HF config.json and the row (not re-read here)",
    },
    "qwen3_30b_a3b": {
        "head_dim": 128,
        "moe_shared_experts": 0,
        "source": "Qwen3-30B-A3B HF config: head_dim 128 (hidden 2048 / 32 heads = 64 is NOT it), "
        "no shared experts, every layer MoE (decoder_sparse_step 1); QK-norm not modelled",
    },
    "qwen3_235b_a22b": {
        "head_dim": 128,
        "moe_shared_experts": 0,
        "source": "Qwen3-235B-A22B HF config: head_dim 128, no shared experts, every layer MoE; "
        "QK-norm not modelled",
    },
    "gpt_oss_120b": {
        "head_dim": 64,
        "ffn_hidden": 2880,
        "moe_ffn_hidden": 2880,
        "moe_shared_experts": 0,
        "vocab": 201088,
        "attention_window": 128,
        "window_layers": 18,
        "source": f"{MB} r0.2.0@0465189 src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py: "
        "num_layers 36, hidden 2880, 64 heads, 8 query groups, kv_channels 64, "
        "ffn/moe_ffn 2880, 128 experts top-4, vocab 201088, window_size (128, 0) on every other "
        "layer (window_attn_skip_freq 2: 18 of 36 layers windowed); attention sinks and biases "
        "NOT modelled",
    },
}
"""Architecture facts the rows lack, per model key."""


_MODEL_KEYS = (
    ("LLAMA3.1_405B", "llama31_405b"),
    ("LLAMA3_70B", "llama3_70b"),
    ("LLAMA3_8B", "llama3_8b"),
    ("DeepSeekV3", "deepseek_v3"),
    ("Qwen3_30B", "qwen3_30b_a3b"),
    ("Qwen3_235B", "qwen3_235b_a22b"),
    ("GPT_OSS_120B", "gpt_oss_120b"),
)


def bridge_key(row: dict) -> tuple:
    """``(model, gpu, container, variant)``: the :data:`BRIDGE_RECIPES` key of a row."""
    rid = row["id"]
    container = rid.split("_")[1]
    gpu = rid.split("_")[2].removeprefix("DGX-").lower()
    model = next((k for tag, k in _MODEL_KEYS if tag in rid), None)
    if model is None:
        raise KeyError(f"{rid}: unknown model")
    variant = "alt" if rid.endswith("_alt") else "main"
    return model, gpu, container, variant


def recipe_differences(id_a: str, id_b: str) -> list[tuple[str, object, object]]:
    """``[(setting, value of a, value of b)]``: the recipe facts (:func:`recipe_facts`) in which
    two Megatron-Bridge rows' recipes differ, settings left unset by either recipe skipped.

    >>> recipe_differences(
    ...     "mbridge_25.09_DGX-B200_Qwen3_30B_a3B__tokendrop__8gpu_FP8unspecified",
    ...     "mbridge_25.11_DGX-B200_Qwen3_30B_a3B_8gpu_FP8-MX",
    ... )
    [('token_drop', True, False)]
    """
    fa, _ = recipe_facts(bridge_key({"id": id_a}))
    fb, _ = recipe_facts(bridge_key({"id": id_b}))
    if not fa or not fb:
        return []
    out = []
    for k in sorted(set(fa) & set(fb)):
        va, vb = fa[k]["value"], fb[k]["value"]
        if va is not None and vb is not None and va != vb:
            out.append((k, va, vb))
    return out


def bridge_row_to_doc(row: dict, catalog: dict, stack: str) -> tuple[dict, list]:
    """``(run document, notes)`` for one Megatron-Bridge row (see :func:`codesign.calibration._rows.row_to_doc`)."""
    notes: list[str] = []
    hw, mod, par = row["hardware"], row["model"], row["parallel"]
    gpu_name = str(hw.get("gpu", ""))
    prefix = next(
        (k for k in ("GB300", "GB200", "B300", "B200", "H100") if gpu_name.startswith(k)), None
    )
    if prefix is None:
        raise Unexpressible(f"hardware.gpu = {gpu_name!r} has no accelerator preset")
    accel_name, _ = BRIDGE_ACCELERATORS[prefix]
    accel = catalog["accelerators"].get(accel_name)
    if accel is None:
        raise Unexpressible(f"accelerator preset {accel_name!r} not in the catalog yet")
    key = bridge_key(row)
    model_key, gpu, container, variant = key
    facts, used = recipe_facts(key)
    if facts is None:
        raise Unexpressible(f"no recipe facts for {key}")
    if used != key:
        notes.append(f"recipe facts of {used} ASSUMED (none collected for {key})")
    val = {k: v["value"] for k, v in facts.items()}
    # A key whose rows ran different configs per precision (the 2026 Llama rows): the facts
    # are the majority config's, ``by_precision`` overrides them for the others.
    own = val.pop("by_precision", {}).get(str(par.get("precision")), {})
    if own:
        val.update(own)
        notes.append(
            f"recipe facts for {par.get('precision')}: "
            + ", ".join(f"{k} {v!r}" for k, v in own.items())
        )
    arch = BRIDGE_ARCH[model_key]
    n = int(hw["num_gpus"])
    layers = int(mod["layers"])

    moe = mod.get("moe") or {}
    model = {
        "layers": layers,
        "hidden": mod["hidden"],
        "heads": mod["heads"],
        "kv_heads": mod.get("kv_heads", mod["heads"]),
        "ffn_hidden": arch.get("ffn_hidden", mod.get("ffn_hidden", moe.get("expert_ffn_hidden"))),
        "seq_len": mod["seq_len"],
        "vocab": arch.get("vocab", mod["vocab"]),
        "gated_mlp": True,
        "dropout": False,
        "tied_embeddings": bool(arch.get("tied_embeddings", False)),
    }
    if "head_dim" in arch:
        model["head_dim"] = arch["head_dim"]
    if moe:
        model.update(
            moe_experts=moe["experts"],
            moe_top_k=moe["top_k"],
            moe_ffn_hidden=moe.get("expert_ffn_hidden", arch.get("moe_ffn_hidden")),
            moe_shared_experts=moe.get("shared_experts", arch.get("moe_shared_experts", 0)),
            moe_layers=layers - int(moe.get("dense_layers", 0)),
        )
    if model_key == "deepseek_v3":
        for k in (
            "q_lora_rank",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
        ):
            model[k] = arch[k]
        mtp = val["mtp_layers"]
        if mtp == "row":
            mtp = 0 if "w_o_MTP" in row["id"] else 1
        model["mtp_layers"] = mtp
        if mtp:
            notes.append(f"{mtp} MTP layer(s) on the last stage")
    if model_key == "gpt_oss_120b":
        model["attention_window"] = arch["attention_window"]
        model["window_layers"] = arch["window_layers"]
        notes.append("GPT-OSS attention sinks and biases NOT modelled")
    if val.get("token_drop"):
        notes.append("MoE token drop: capacity 1.0, padded (moe_capacity_factor = 1)")

    tp, pp, cp = int(par["tp"]), int(par["pp"]), int(par.get("cp", 1))
    vpp = par.get("virtual_pp")
    interleave = vpp if isinstance(vpp, int) and not isinstance(vpp, bool) and vpp > 1 else 1
    fsdp = bool(par.get("fsdp"))
    ep = int(val.get("ep", par.get("ep", 1)))
    if ep != int(par.get("ep", 1)):
        notes.append(f"ep {ep} from the recipe (the page prints {par.get('ep')})")
    fold = tp * int(par["dp"]) * cp
    if moe and fold % ep:
        # The 25.09 GB200 DeepSeek-V3 "alt" column: PP 8 with EP 64 on 256 GPUs (GA 64, so
        # dp = 32).  Megatron-Core requires ep * etp to divide tp * dp * cp (the GPUs of one
        # pipeline stage, 32 here), so that column cannot have run as printed; the page
        # repeats EP 64 from the main column.  Take the largest valid EP and say so.
        valid = max(d for d in range(1, ep + 1) if fold % d == 0 and d <= moe["experts"])
        notes.append(
            f"ASSUMED ep {valid}: the page's EP {ep} does not divide tp*dp*cp = {fold} "
            "(impossible in Megatron-Core; the page repeats the main column's EP)"
        )
        ep = valid
    precision = bridge_precision(row, key, notes)
    # Megatron-Bridge 25.11 turns the distributed optimizer's parameter all-gather overlap off
    # for MXFP8 in some recipes ("keeping this enabled causes NaN grad norm").
    gather_overlap = not (precision == "mxfp8" and val.get("mxfp8_param_gather_off", False))
    if not gather_overlap:
        notes.append("MXFP8: overlap_param_gather off (recipe)")
    strategy = {
        "tp": tp,
        "pp": pp,
        "dp": int(par["dp"]),
        "cp": cp,
        "ep": ep,
        "etp": int(val.get("etp", 0)) if moe else 0,
        "microbatch": int(val.get("microbatch", par["microbatch"])),
        "interleave": interleave,
        "sequence_parallel": tp > 1,
        "recompute": val.get("recompute", "none"),
        "zero": 3 if fsdp else 1,
        "overlap_dp": bool(val.get("overlap_grad_reduce", True)),
        "overlap_param_gather": gather_overlap,
        "overlap_tp": bool(val.get("overlap_tp", False)) and tp > 1,
        "offload_activations": float(val.get("offload_activations", 0.0)),
        "offload_optimizer": 0.0,
        # The recipes offload with Transformer Engine's whole-layer cpu_offloading; before
        # Megatron-Bridge v0.3.0 (container 26.02) it is the only activation offloading there
        # is (fine_grained_activation_offloading first appears in v0.3.0's training config).
        "offload_whole_layers": container.startswith("25.")
        or float(val.get("offload_activations", 0.0)) > 0,
        "overlap_moe_comm": bool(val.get("overlap_moe_comm", False)),
        "moe_hierarchical_dispatch": bool(val.get("moe_hierarchical_dispatch", False)),
        # Copies of the routed slots beside the communication (Megatron-LM
        # token_dispatcher.py): the flex dispatcher (DeepEP fused_dispatch + one permute,
        # HybridEP dispatch_with_permute = dispatch kernel + its own permute kernel) makes 1
        # each way, the alltoall dispatcher 2 (permute, then sort_chunks_by_idxs by expert).
        "moe_permute_copies": 1.0 if val.get("moe_hierarchical_dispatch", False) else 2.0,
        # run_script.py apply_moe_token_drop: moe_expert_capacity_factor 1.0, padded to it.
        "moe_capacity_factor": 1.0 if val.get("token_drop") else 0.0,
        "pp_first_layers": 0,
        "pp_last_layers": 0,
        "pp_embedding_in_split": False,
        "pp_loss_in_split": False,
    }
    if strategy["microbatch"] != int(par["microbatch"]):
        notes.append(
            f"micro-batch {strategy['microbatch']} from the recipe (the page prints "
            f"{par['microbatch']}, inconsistent with its GA and GBS)"
        )
    if "recompute_modules" in val:
        strategy["recompute_modules"] = list(val["recompute_modules"])
    if "recompute_num_layers" in val:
        strategy["recompute_num_layers"] = int(val["recompute_num_layers"])
    if fsdp:
        notes.append("Megatron-FSDP (optim_grads_params): zero 3")
    if strategy["offload_activations"]:
        notes.append(f"CPU activation offload {strategy['offload_activations']:g} of the layers")
    if pp > 1 and val.get("split"):
        strategy["pp_embedding_in_split"] = True
        strategy["pp_loss_in_split"] = True
    if pp > 1 and model_key == "deepseek_v3":
        first, last, how = deepseek_stage_layers(pp, interleave)
        notes.append(f"pipeline first/last stage {first}/{last} layers ({how})")
        strategy["pp_first_layers"], strategy["pp_last_layers"] = first, last
    for k, f in facts.items():
        if f["source"].startswith("not found"):
            notes.append(f"{k} = {f['value']!r} ASSUMED (not found in the recipe)")

    training = {
        "global_batch": int(par["global_batch"]),
        "precision": precision,
        "grad_reduce_bytes": float(val.get("grad_reduce_bytes", 2.0)),
        "optimizer_state_bytes": float(val.get("optimizer_state_bytes", 12.0)),
    }
    if val.get("fp8_attention"):
        training["fp8_attention"] = 1.0
        notes.append("FP8 attention (fp8_dot_product_attention)")
    nvl = int(hw.get("nvlink_domain", 8))
    up = max(d for d in range(1, min(nvl, n) + 1) if n % d == 0)
    if up != nvl:
        notes.append(f"scale-up domain {up} of each NVL{nvl} rack used ({n} GPUs)")
    inter = hw.get("inter_node", {}) or {}
    per_gpu = float(inter.get("per_gpu_gbps", 400))
    out = "ib-xdr-800" if per_gpu >= 800 else "ib-ndr-400"
    if "assumed" in str(inter.get("fabric", "")).lower():
        notes.append(f"scale-out {out} (assumed by the source)")
    system = {
        "accelerator": accel_name,
        "num_accelerators": n,
        "tiers": [
            {"preset": accel["scale_up"], "domain": up},
            {"preset": out, "domain": max(n, nvl)},
        ],
    }
    doc = run_document(model, training, system, strategy, stack)
    return doc, notes
