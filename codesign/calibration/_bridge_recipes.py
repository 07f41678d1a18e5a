"""The settings each Megatron-Bridge recipe ran with, read from the recipe files.

:data:`BRIDGE_RECIPES` maps ``(model, gpu, container, variant)`` to the recipe's settings
(recompute, offload, FSDP, MoE dispatcher and overlap, pipeline layout, FP8 recipe), each
``{"value", "source"}`` with the file and commit it was read from; settings not found are
Megatron-Core defaults flagged "ASSUMED".  :func:`recipe_facts` gives a row of a later,
uncollected release the newest collected recipe of the same model and system.

Sources: github.com/NVIDIA-NeMo/Megatron-Bridge branch r0.1.0 (25.09 page) at 684a686 (and
8d5764f, 2025-09-26, for two configs changed before the page) and branch r0.2.0 (25.11 page,
2025-12-09) at 0465189.  The 2026 releases (the external test set, never fitted) are in
:mod:`codesign.calibration._bridge_recipes26`.
"""

from __future__ import annotations

from codesign.calibration._bridge_recipes26 import BRIDGE_RECIPES_26
from codesign.calibration._recipe_source import MB
from codesign.calibration._recipe_source import assumed as _assumed
from codesign.calibration._recipe_source import fact as _f

__all__ = [
    "BRIDGE_RECIPES",
    "BRIDGE_RECIPES_26",
    "MB",
    "SIMILAR_GPU",
    "deepseek_stage_layers",
    "recipe_facts",
]

R09 = f"{MB} r0.1.0@684a686"
R09E = f"{MB} r0.1.0@8d5764f"
R11 = f"{MB} r0.2.0@0465189"
RUN09 = f"{R09} scripts/performance/run_script.py"
HELP09 = f"{R09} scripts/performance/utils/helpers.py"
HELP11 = f"{R11} scripts/performance/utils/helpers.py + utils/utils.py"
DSV3_RECIPE11 = f"{R11} src/megatron/bridge/recipes/deepseek/deepseek_v3.py"
DSV3_RECIPE09 = f"{R09} src/megatron/bridge/recipes/deepseek/deepseek_v3.py"


def _yaml09(model: str) -> str:
    return f"{R09} scripts/performance/configs/{model}_llm_pretrain.yaml"


def _base11(model: str) -> str:
    return f"{R11} scripts/performance/configs/{model}/workload_base_configs.py"


def _pre11(model: str) -> str:
    return f"{R11} scripts/performance/configs/{model}/{model}_llm_pretrain.py"


# --- per-model common facts -------------------------------------------------------------
_LLAMA_COMMON09 = {
    "grad_reduce_bytes": _f(
        2.0, "yaml mixed_precision.grad_reduce_in_fp32: false (all r0.1.0 yamls)"
    ),
    "recompute": _f(
        "none",
        "r0.1.0 llama recipes set no recompute; helpers.set_recompute_overrides "
        "only with recompute_num_layers (absent for these rows)",
    ),
}
_LLAMA_COMMON11 = {
    "grad_reduce_bytes": _f(
        2.0, f"{R11} configs/llama3|llama31/*_llm_pretrain.py: ddp.grad_reduce_in_fp32 = False"
    ),
    "recompute": _f(
        "none",
        f"{HELP11} set_recompute_overrides: none without "
        "recompute_num_layers / recompute_modules in the base config",
    ),
}
_TP_OVERLAP_LLAMA = "recipes/llama/llama3_70b.py, llama31_405b.py: CommOverlapConfig(tp_comm_overlap=True) + userbuffers cfg"


def _llama(container: str, **extra) -> dict:
    base = dict(_LLAMA_COMMON09 if container == "25.09" else _LLAMA_COMMON11)
    base.update(extra)
    return base


def _offload(layers: int, of: int, src: str) -> dict:
    return _f(
        round(layers / of, 4),
        f"{src}: cpu_offloading_num_layers {layers} of {of} "
        "(activations; cpu_offloading_weights False)",
    )


_405_SPLIT = "recipes/llama/llama31_405b.py: account_for_embedding/loss_in_pipeline_split True"
_235_SPLIT = "recipes/qwen/qwen3_235b_a22b.py: account_for_embedding/loss_in_pipeline_split True"

# --- DeepSeek-V3 pipeline layouts (deepseek_v3.py map_pp_vp_to_layout) -----------------
_DS_LAYOUT_CHUNKS = {
    (4, 1): [16, 16, 16, 13],
    (8, 1): [8] * 7 + [5],
    (4, 2): [8] * 7 + [5],
    (16, 1): [4] * 15 + [1],
    (8, 2): [4] * 15 + [1],
    (4, 4): [4] * 15 + [1],
    (8, 4): [1] + [2] * 30 + [0],  # the H100 string "Et|(tt|)*30mL"
    (2, 8): [4] * 15 + [1],  # the 26.x GB300 string "Et*4|(t*4|)*14tmL" (_bridge_recipes26)
}
"""Decoder layers per virtual chunk (chunk c on stage c % pp); embedding in chunk 0, MTP and
loss in the last chunk."""


def deepseek_stage_layers(pp: int, vp: int) -> tuple[int, int, str]:
    """``(first, last, how)``: decoder layers on the first and last pipeline stage of DeepSeek-V3."""
    chunks = _DS_LAYOUT_CHUNKS.get((pp, vp))
    how = f"layout map ({pp}, {vp}) of deepseek_v3.py"
    if (pp, vp) == (8, 4):
        how = 'layout "Et|(tt|)*30mL" (H100 perf config; for other GPUs ASSUMED, not in the map)'
    if chunks is None:
        n = pp * vp
        per = -(-61 // n)
        chunks = [per] * (n - 1) + [61 - per * (n - 1)]
        how = f"({pp}, {vp}) not in the recipe's layout map: ASSUMED {per} layers per chunk, last {chunks[-1]}"
    first = sum(chunks[0::pp])
    last = sum(chunks[pp - 1 :: pp]) if pp > 1 else first
    return first, last, how


def _dsv3_optimizer(recipe: str) -> dict:
    """Megatron-Bridge's DeepSeek-V3 recipe keeps Adam's moments in bf16 (both releases)."""
    return _f(
        8.0,
        f"{recipe}: use_precision_aware_optimizer True, main_params_dtype float32, "
        "exp_avg_dtype = exp_avg_sq_dtype = bfloat16 (4 + 2 + 2 bytes per parameter)",
    )


def _ds09(gpu: str) -> dict:
    h100 = gpu == "h100"
    mods = ["mla_up_proj", "mlp"] if h100 else ["mla_up_proj"]
    return {
        "optimizer_state_bytes": _dsv3_optimizer(DSV3_RECIPE09),
        "grad_reduce_bytes": _f(
            2.0, f"{_yaml09('deepseek/deepseek_v3')}: grad_reduce_in_fp32 false"
        ),
        "recompute": _f(
            "selective", f"{_yaml09('deepseek/deepseek_v3')}: recompute_granularity selective"
        ),
        "recompute_modules": _f(
            mods, f"{RUN09}: recompute_modules {mods} for {gpu}" + ("" if h100 else " (tokendrop)")
        ),
        "etp": _f(1, f"{_yaml09('deepseek/deepseek_v3')}: etp 1"),
        "moe_hierarchical_dispatch": _f(
            h100,
            f"{RUN09}: enable_deepep (flex dispatcher) on h100 only; "
            "b200/gb200 use_tokendrop -> alltoall",
        ),
        "overlap_moe_comm": _f(
            h100,
            f"{RUN09}: A2A_1F1B (overlap_moe_expert_parallel_comm, "
            "delay_wgrad_compute) on h100 only",
        ),
        "overlap_tp": _assumed(False, "tp_comm_overlap not set by the DeepSeek recipe/run_script"),
        "token_drop": _f(
            not h100, f"{RUN09}: apply_moe_token_drop (capacity 1.0, padded) on b200/gb200"
        ),
        "mtp_layers": _f(1, f"{DSV3_RECIPE09}: mtp_num_layers default 1 (not overridden)"),
        "layout": _f(
            "recipe", f'{DSV3_RECIPE09} map_pp_vp_to_layout; {RUN09} h100 layout "Et|(tt|)*30mL"'
        ),
        "overlap_grad_reduce": _f(
            not h100, f"{RUN09}: comm_overlap.overlap_grad_reduce True on gb200/b200, False on h100"
        ),
    }


def _ds11(gpu: str) -> dict:
    mods = {
        "gb300": ["moe_act"],
        "gb200": ["mla_up_proj"],
        "b200": ["mla_up_proj"],
        "h100": ["mla_up_proj", "mlp"],
    }[gpu]
    backend = {"gb300": "hybridep", "gb200": "hybridep", "b200": None, "h100": "deepep"}[gpu]
    src = _base11("deepseek")
    return {
        "optimizer_state_bytes": _dsv3_optimizer(DSV3_RECIPE11),
        "grad_reduce_bytes": _f(2.0, f"{_pre11('deepseek')}: ddp.grad_reduce_in_fp32 False"),
        "recompute": _f("selective", f"{_pre11('deepseek')}: recompute_granularity selective"),
        "recompute_modules": _f(
            mods, f"{src}: DEEPSEEK_V3_{gpu.upper()}_BASE_CONFIG recompute_modules"
        ),
        "etp": _f(1, f"{src}: expert_tensor_parallel_size 1"),
        "moe_hierarchical_dispatch": _f(
            backend is not None,
            f"{src}: moe_flex_dispatcher_backend {backend!r} (flex when set; else alltoall)",
        ),
        "overlap_moe_comm": _f(gpu == "h100", f"{src}: moe_a2a_overlap {gpu == 'h100'}"),
        "overlap_tp": _assumed(False, "tp_comm_overlap not set for DeepSeek-V3"),
        "token_drop": _f(
            False, f"{_pre11('deepseek')}: dropless, moe_router_force_load_balancing True"
        ),
        "mtp_layers": _f(
            "row",
            f"{DSV3_RECIPE11}: mtp_num_layers default 1; the page's variant "
            "(w/ or w/o MTP) is taken from the row",
        ),
        "layout": _f("recipe", f"{DSV3_RECIPE11} layout_map (pp, vp)"),
        "overlap_grad_reduce": _f(
            gpu != "h100",
            f"{_pre11('deepseek')}: comm_overlap.overlap_grad_reduce "
            + ("False on h100 ('to avoid functional errors')" if gpu == "h100" else "True"),
        ),
        "mxfp8_param_gather_off": _f(
            gpu in ("gb300", "gb200"),
            f"{_pre11('deepseek')}: deepseek_v3_{gpu}_config "
            + {
                "gb300": "sets overlap_param_gather False for fp8_mx",
                "gb200": "sets overlap_param_gather False for fp8_mx",
                "b200": "keeps overlap_param_gather for fp8_mx",
                "h100": "has no fp8_mx config",
            }[gpu],
        ),
    }


def _qwen(container: str, gpu: str, size: str, **extra) -> dict:
    if container == "25.09":
        src = _yaml09(f"qwen3/qwen3_{size}")
        facts = {
            "grad_reduce_bytes": _f(2.0, f"{src}: grad_reduce_in_fp32 false"),
            "recompute": _f(
                "none",
                f"{src}: recompute_granularity null (overrides the 30B recipe's full/uniform/1)",
            ),
            "etp": _f(1, f"{src}: etp 1"),
            "moe_hierarchical_dispatch": _f(
                False, f"{RUN09}: apply_moe_token_drop requires alltoall"
            ),
            "overlap_moe_comm": _assumed(False, "overlap_moe_expert_parallel_comm not set"),
            "overlap_tp": _f(True, f"{RUN09}: CommOverlapConfig(tp_comm_overlap=True)"),
            "token_drop": _f(True, f"{RUN09}: apply_moe_token_drop (capacity 1.0, padded)"),
        }
    else:
        src = _base11("qwen3")
        name = f"QWEN3_{size.upper()}_{gpu.upper()}_*_BASE_CONFIG"
        hybrid = gpu in ("gb200", "gb300")
        a2a = gpu == "h100" or (gpu == "b200" and size == "235b_a22b")
        facts = {
            "grad_reduce_bytes": _f(2.0, f"{_pre11('qwen3')}: ddp.grad_reduce_in_fp32 False"),
            "recompute": _f("none", f"{_pre11('qwen3')}: recompute_granularity None"),
            "etp": _f(1, f"{src}: expert_tensor_parallel_size 1"),
            "moe_hierarchical_dispatch": _f(
                hybrid,
                f"{src}: {name} moe_flex_dispatcher_backend "
                f"{'hybridep' if hybrid else 'unset (alltoall)'}",
            ),
            "overlap_moe_comm": _f(a2a, f"{src}: {name} moe_a2a_overlap {a2a}"),
            "overlap_tp": _f(
                gpu != "h100" or size != "235b_a22b",
                f"{_pre11('qwen3')}: CommOverlapConfig(tp_comm_overlap=...) per GPU",
            ),
            "token_drop": _f(False, f"{_pre11('qwen3')}: dropless, force load balancing"),
            "mxfp8_param_gather_off": _f(
                gpu == "b200" and size == "235b_a22b",
                f"{_pre11('qwen3')}: overlap_param_gather False for fp8_mx in "
                "qwen3_235b_a22b_b200_config only",
            ),
        }
    facts.update(extra)
    return facts


def _gptoss(gpu: str) -> dict:
    src = _base11("gpt_oss")
    mods = None if gpu == "gb300" else ["layernorm", "moe_act"]
    facts = {
        "grad_reduce_bytes": _f(2.0, f"{_pre11('gpt_oss')}: ddp.grad_reduce_in_fp32 False"),
        "etp": _f(1, f"{src}: expert_tensor_parallel_size 1"),
        "moe_hierarchical_dispatch": _f(False, f"{src}: no moe_flex_dispatcher_backend (alltoall)"),
        "overlap_moe_comm": _f(False, f"{src}: moe_a2a_overlap default False"),
        "overlap_tp": _assumed(False, "tp = 1 in every GPT-OSS row"),
        "token_drop": _f(False, f"{_pre11('gpt_oss')}: force load balancing, dropless"),
    }
    if gpu == "h100":
        facts["microbatch"] = _f(
            1,
            f"{src}: GPT_OSS_120B_H100_BF16_BASE_CONFIG keeps the base micro_batch_size 1 "
            "(the page's MBS 4 and GA 2 are the B200 line's: at dp 16 they give GBS 128, "
            "not 512)",
        )
    if gpu == "b200":
        facts["ep"] = _f(
            64,
            f"{src}: GPT_OSS_120B_B200_BF16_BASE_CONFIG expert_model_parallel_size=64 at every "
            "r0.2.0 commit from cb30a7fd5 (2025-11-20, which also set the page's MBS 4; before "
            "it the B200 line ran the base EP 8 at MBS 8). The page's EP 8 is the base "
            "config's; its 8,213 tokens/s/GPU is the EP-64 speed of the later pages "
            "(26.02: 8,047), not the EP-8 one (26.02.01: 13,722)",
        )
    if mods:
        facts["recompute"] = _f(
            "selective",
            f"{src}: GPT_OSS_120B_{gpu.upper()}_BF16_BASE_CONFIG "
            "recompute_modules -> granularity selective",
        )
        facts["recompute_modules"] = _f(mods, f"{src}: recompute_modules {mods}")
    else:
        facts["recompute"] = _assumed("none", "GB300 base config sets no recompute")
    return facts


_L70 = "llama3_70b"
_L405 = "llama31_405b"
_Y70 = _yaml09("llama3/llama3_70b")
_Y405 = _yaml09("llama31/llama31_405b")
_Y8 = _yaml09("llama3/llama3_8b")

_TPO9 = _f(True, f"{R09} {_TP_OVERLAP_LLAMA}")
_S405_9 = _f(True, f"{R09} {_405_SPLIT}")
_S235_9 = _f(True, f"{R09} {_235_SPLIT}")
BRIDGE_RECIPES: dict[tuple, dict] = {
    # 25.09 (r0.1.0); "alt" = the page's parenthesised numbers (other FP8 granularity)
    ("llama3_8b", "h100", "25.09", "main"): _llama(
        "25.09", fsdp=_f(True, f"{_Y8}: h100 fp8_cs use_megatron_fsdp true")
    ),
    (_L70, "gb200", "25.09", "main"): _llama(
        "25.09",
        fsdp=_f(True, f"{_Y70}: gb200 fp8_cs use_megatron_fsdp true, mbs 2"),
        offload_activations=_offload(40, 80, f"{_Y70} gb200 fp8_cs"),
    ),
    (_L70, "gb200", "25.09", "alt"): _llama(
        "25.09",
        overlap_tp=_TPO9,
        microbatch=_f(
            1,
            f"{_Y70}: gb200 fp8_mx mbs 1 (tp 2, pp 4, vp 5); the page's GA 16 at dp 8 and "
            "GBS 128 also gives 1 (its MBS column repeats the main column's 2)",
        ),
    ),
    (_L70, "h100", "25.09", "main"): _llama("25.09", overlap_tp=_TPO9),
    (_L405, "gb200", "25.09", "main"): _llama(
        "25.09",
        fsdp=_f(True, f"{_Y405}: gb200 fp8_cs tp 2, use_megatron_fsdp true"),
        offload_activations=_offload(95, 126, f"{_Y405} gb200 fp8_cs"),
        overlap_tp=_TPO9,
        split=_S405_9,
    ),
    ("qwen3_30b_a3b", "h100", "25.09", "main"): _qwen(
        "25.09",
        "h100",
        "30b_a3b",
        vp=_f(24, f"{R09E} configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml: h100 vp 24 (page: 24)"),
    ),
    ("qwen3_235b_a22b", "gb200", "25.09", "main"): _qwen(
        "25.09",
        "gb200",
        "235b_a22b",
        degrees=_f("tp2 pp1 ep64", f"{R09E} configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml"),
    ),
}
"""Recipe facts per ``(model, gpu, container, variant)``: setting -> ``{"value", "source"}``."""

for _gpu, _var in (("gb200", "main"), ("gb200", "alt"), ("b200", "main"), ("b200", "alt")):
    BRIDGE_RECIPES[("llama3_8b", _gpu, "25.09", _var)] = _llama("25.09")
for _gpu, _var in (("gb200", "alt"), ("b200", "main"), ("b200", "alt"), ("h100", "main")):
    BRIDGE_RECIPES[(_L405, _gpu, "25.09", _var)] = _llama("25.09", overlap_tp=_TPO9, split=_S405_9)
for _gpu in ("gb200", "b200", "h100"):
    for _var in ("main", "alt"):
        BRIDGE_RECIPES[("deepseek_v3", _gpu, "25.09", _var)] = _ds09(_gpu)
for _gpu, _var in (("gb200", "main"), ("gb200", "alt"), ("b200", "main")):
    BRIDGE_RECIPES[("qwen3_30b_a3b", _gpu, "25.09", _var)] = _qwen("25.09", _gpu, "30b_a3b")
BRIDGE_RECIPES[("qwen3_235b_a22b", "gb200", "25.09", "alt")] = _qwen("25.09", "gb200", "235b_a22b")
for _gpu, _var in (("b200", "main"), ("b200", "alt"), ("h100", "main")):
    BRIDGE_RECIPES[("qwen3_235b_a22b", _gpu, "25.09", _var)] = _qwen(
        "25.09", _gpu, "235b_a22b", split=_S235_9
    )

_B11L3 = _base11("llama3")
_B11L31 = _base11("llama31")
for _gpu in ("gb300", "gb200", "b200"):
    BRIDGE_RECIPES[("llama3_8b", _gpu, "25.11", "main")] = _llama("25.11")
    BRIDGE_RECIPES[("llama3_8b", _gpu, "25.11", "alt")] = _llama("25.11")
BRIDGE_RECIPES[("llama3_8b", "h100", "25.11", "main")] = _llama(
    "25.11",
    recompute=_f(
        "full",
        f"{_B11L3}: LLAMA3_8B_H100_FP8_CS recompute_num_layers 5 "
        "(helpers: granularity full, method block)",
    ),
    recompute_num_layers=_f(5, f"{_B11L3}: LLAMA3_8B_H100_FP8_CS_BASE_CONFIG"),
)
_MX_GATHER = {
    m: _f(
        True,
        f"{R11} configs/{d}/{d}_llm_pretrain.py: {m}_<gb300|gb200|b200>_config sets "
        "overlap_param_gather False for fp8_mx ('keeping this enabled causes NaN grad norm')",
    )
    for m, d in ((_L70, "llama3"), (_L405, "llama31"))
}
BRIDGE_RECIPES[(_L70, "gb300", "25.11", "main")] = _llama(
    "25.11",
    mxfp8_param_gather_off=_MX_GATHER[_L70],
    fsdp=_f(True, f"{_B11L3}: LLAMA3_70B_GB300_FP8_CS use_megatron_fsdp, mbs 2"),
    offload_activations=_offload(20, 80, f"{_B11L3} LLAMA3_70B_GB300_FP8_CS"),
)
BRIDGE_RECIPES[(_L70, "gb200", "25.11", "main")] = _llama(
    "25.11",
    mxfp8_param_gather_off=_MX_GATHER[_L70],
    fsdp=_f(True, f"{_B11L3}: LLAMA3_70B_GB200_FP8_CS use_megatron_fsdp, mbs 2"),
    offload_activations=_offload(40, 80, f"{_B11L3} LLAMA3_70B_GB200_FP8_CS"),
)
BRIDGE_RECIPES[(_L70, "h100", "25.11", "main")] = _llama(
    "25.11",
    overlap_tp=_f(
        True, f"{R11} configs/llama3/llama3_llm_pretrain.py: userbuffers tp_comm_overlap"
    ),
)
for _gpu in ("gb300", "gb200", "b200", "h100"):
    for _var in ("main", "alt"):
        BRIDGE_RECIPES[(_L405, _gpu, "25.11", _var)] = _llama(
            "25.11",
            overlap_tp=_f(
                True, f"{R11} configs/llama31/llama31_llm_pretrain.py: userbuffers tp_comm_overlap"
            ),
            split=_f(True, f"{R11} {_405_SPLIT}"),
            mxfp8_param_gather_off=_MX_GATHER[_L405]
            if _gpu != "h100"
            else _f(False, f"{R11} configs/llama31/llama31_llm_pretrain.py: no fp8_mx on h100"),
            offload_activations=_assumed(
                0.0,
                f"{_B11L31} has no config with the page's degrees for "
                "GB300/GB200 (FSDP configs offload, PP configs do not): none",
            ),
        )
for _gpu in ("gb300", "gb200", "b200", "h100"):
    BRIDGE_RECIPES[("deepseek_v3", _gpu, "25.11", "main")] = _ds11(_gpu)
    BRIDGE_RECIPES[("gpt_oss_120b", _gpu, "25.11", "main")] = _gptoss(_gpu)
    BRIDGE_RECIPES[("qwen3_30b_a3b", _gpu, "25.11", "main")] = _qwen("25.11", _gpu, "30b_a3b")
    BRIDGE_RECIPES[("qwen3_235b_a22b", _gpu, "25.11", "main")] = _qwen(
        "25.11", _gpu, "235b_a22b", split=_f(True, f"{R11} {_235_SPLIT}")
    )

SIMILAR_GPU = {"b300": "b200", "gb300": "gb200", "gb200": "gb300", "b200": "b300"}
"""The system whose recipe a row borrows when its own has no collected facts (same
generation, other form factor or Blackwell / Blackwell Ultra)."""


PAGE_FIXES = ("microbatch", "ep")
"""Facts that correct a value the page prints for one row (the recipe ran another)."""


def recipe_facts(key: tuple) -> tuple[dict | None, tuple]:
    """``(facts, key used)``: the recipe facts of ``key`` (:data:`BRIDGE_RECIPES` for the
    fitted 25.09 and 25.11 rows, :data:`BRIDGE_RECIPES_26` for the 2026 releases of the
    external test set) or, for a row whose release's recipes were not collected, those of the
    newest collected fitted release of the same model on the same or the most similar system
    (:data:`SIMILAR_GPU`), main variant.  A borrowed recipe leaves out its :data:`PAGE_FIXES`
    (``microbatch``, ``ep``): those facts correct one page row, and a later page prints its
    own."""
    for table in (BRIDGE_RECIPES, BRIDGE_RECIPES_26):
        if key in table:
            return table[key], key
    model, gpu, _, _ = key
    for g in (gpu, SIMILAR_GPU.get(gpu)):
        for c in ("25.11", "25.09"):
            k = (model, g, c, "main")
            if k in BRIDGE_RECIPES:
                return {n: f for n, f in BRIDGE_RECIPES[k].items() if n not in PAGE_FIXES}, k
    return None, key
