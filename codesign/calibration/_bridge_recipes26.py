"""Recipe settings of the 2026 Megatron-Bridge performance-page rows, read from the recipe files.

:data:`BRIDGE_RECIPES_26` maps ``(model, gpu, container, "main")`` of the external test set
(``experiments/data/megatron_bridge_2026_external.json``) to the settings the NVIDIA perf recipe
of that container's release ran with, in the format of
:data:`codesign.calibration._bridge_recipes.BRIDGE_RECIPES` (each fact ``{"value", "source"}``).

Sources: github.com/NVIDIA-NeMo/Megatron-Bridge, release tags (commit):
v0.3.0 (21b02e0) = 26.02, v0.3.1 (9c9dd84) = 26.02.01, v0.4.0 (0fbfe7d) = 26.04,
v0.4.2 (c810129) = 26.04.01, v0.5.0 (fcbb603) = 26.06, v0.5.1 (5cb3444) = 26.06.01,
v0.6.0 (51885cf) = 26.08.  Mapping from ``docs/versions1.json`` on branches r0.4.0 / r0.5.0 and
tag v0.6.0 ("0.3.0 · 26.02", "0.3.1 · 26.02.01", "0.4.0 · 26.04", "0.4.2 · 26.04.01",
"0.5.0 · 26.06", "0.5.1 · 26.06.01", "0.6.0 · 26.08"), consistent with the container table
each tag's ``docs/performance-summary.md`` leads with.  Up to v0.5.1 the perf scripts are
``scripts/performance/configs/<family>/*_workload_base_configs.py`` (variant ``v2`` by default,
``argument_parser.py --config_variant``) + ``*_llm_pretrain.py`` + ``utils/overrides.py``; v0.6.0
moved them to ``src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py``.

Where the rows of one key differ by precision (Llama: FP8 = fp8_cs, MXFP8, NVFP4), the facts
are those of the majority config and ``by_precision`` gives ``{precision: {fact: value}}`` for
the others (row id suffix as key).
"""

from __future__ import annotations

from codesign.calibration._recipe_source import MB
from codesign.calibration._recipe_source import fact as _f

__all__ = ["BRIDGE_RECIPES_26", "RELEASES_26"]

RELEASES_26 = {
    "26.02": ("v0.3.0", "21b02e0"),
    "26.02.01": ("v0.3.1", "9c9dd84"),
    "26.04": ("v0.4.0", "0fbfe7d"),
    "26.04.01": ("v0.4.2", "c810129"),
    "26.06": ("v0.5.0", "fcbb603"),
    "26.06.01": ("v0.5.1", "5cb3444"),
    "26.08": ("v0.6.0", "51885cf"),
}
"""Container -> (release tag, short commit) of NVIDIA-NeMo/Megatron-Bridge."""

SP = "scripts/performance/"
OVR = SP + "utils/overrides.py"
PR = "src/megatron/bridge/perf_recipes/"
NEW = "26.08"  # the release whose perf recipes live under perf_recipes/


def _p(c: str, path: str) -> str:
    tag, sha = RELEASES_26[c]
    return f"{MB} {tag}@{sha} {path}"


def _sel(c: str, base: str, name: str, mods: list[str] | None) -> dict:
    """recompute (+ recompute_modules) facts from a config's recompute_modules."""
    if mods:
        how = (
            _p(c, f"{PR}deepseek/common.py _deepseek_v3_common recompute_granularity selective")
            if c == NEW
            else f"{OVR} _set_recompute_overrides -> granularity selective"
        )
        return {
            "recompute": _f("selective", f"{base}: {name} recompute_modules {mods}; {how}"),
            "recompute_modules": _f(mods, f"{base}: {name} recompute_modules {mods}"),
        }
    if mods == []:
        return {
            "recompute": _f(
                "none",
                f"{base}: {name} recompute_modules [] (granularity selective with no modules: "
                "Megatron-Core recomputes nothing for an empty list)",
            ),
        }
    return {"recompute": _f("none", f"{base}: {name} sets no recompute_modules / num_layers")}


def _dropless(src: str, full_iter: bool) -> dict:
    pad = (
        "; full-iteration CUDA graph pads each expert rank to capacity factor 1.5 "
        "(moe_pad_experts_for_cuda_graph_inference + paged stash), padding not modelled"
        if full_iter
        else ""
    )
    return _f(False, f"{src}: moe_router_force_load_balancing True, no token drop{pad}")


def _dpa(on: bool, src: str) -> dict:
    """The ``fp8_attention`` fact: Transformer Engine's FP8 dot-product attention."""
    return {"fp8_attention": _f(on, src)}


_DPA_OVR = "utils/overrides.py copies it to cfg.mixed_precision.fp8_dot_product_attention"


# --- Llama 3 70B / 3.1 405B -----------------------------------------------------------------
def _llama(c: str, size: str, gpu: str, cfgs: str, deg: str, fsdp_off=None, nvfp4=False):
    """``cfgs``: the V2 configs of the majority rows; ``fsdp_off``: layers offloaded by the
    FP8-CS (FSDP) config of the FP8 row; ``nvfp4``: the key has an NVFP4 row."""
    fam, model, fn = {
        "70b": ("llama3", "LLAMA3_70B", "llama3_70b_pretrain_config"),
        "405b": ("llama31", "LLAMA31_405B", "llama31_405b_pretrain_config"),
    }[size]
    base = _p(c, f"{SP}configs/llama/{fam}_workload_base_configs.py")
    pre = _p(c, f"{SP}configs/llama/{fam}_llm_pretrain.py")
    lib = _p(c, "src/megatron/bridge/recipes/llama/llama3.py")
    name = f"{model}_PRETRAIN_CONFIG_{gpu.upper()}_{cfgs}_V2"
    facts = {
        "grad_reduce_bytes": _f(
            2.0, f"{pre}: set_{fam}_common_configs ddp.grad_reduce_in_fp32 = False"
        ),
        "recompute": _f(
            "none",
            f"{base}: {name} set no recompute_num_layers / recompute_modules; "
            f"{lib} {fn} recompute_granularity None",
        ),
        "fsdp": _f(False, f"{base}: {name} no use_megatron_fsdp"),
        "offload_activations": _f(0.0, f"{base}: {name} no cpu_offloading_num_layers"),
        "overlap_tp": _f(
            True, f"{lib} {fn}: CommOverlapConfig(tp_comm_overlap=True); userbuffers cfg in {pre}"
        ),
        "degrees": _f(deg, f"{base}: {name}"),
    }
    if size == "405b":
        facts["split"] = _f(True, f"{lib} {fn}: account_for_embedding/loss_in_pipeline_split True")
    by: dict = {}
    src = []
    if fsdp_off:
        cs = f"{model}_PRETRAIN_CONFIG_{gpu.upper()}_FP8_CS_V2"
        by["FP8"] = {"fsdp": True, "offload_activations": round(fsdp_off / 80, 4)}
        src.append(
            f"{base}: {cs} use_megatron_fsdp, mbs 2, cpu_offloading_num_layers {fsdp_off}/80"
        )
    if nvfp4:
        by["NVFP4"] = {"overlap_tp": False}
        src.append(f"{pre}: tp_comm_overlap = False if precision == 'nvfp4'")
    if by:
        facts["by_precision"] = _f(by, "; ".join(src))
    return facts


def _moe(c: str, base: str, name: str, pre: str, grad: str, disp: str, deg: str, **how) -> dict:
    """The facts DeepSeek-V3 and GPT-OSS configs share; ``how``: mods, backend, a2a, fi."""
    a2a = how["a2a"]
    a2a_src = (
        f"{pre}: overlap_moe_expert_parallel_comm True"
        if c == NEW and a2a
        else f"{base}: {name} moe_a2a_overlap {a2a}"
    )
    return {
        "grad_reduce_bytes": _f(2.0, grad),
        **_sel(c, base, name, how["mods"]),
        "moe_hierarchical_dispatch": _f(how["backend"] in ("hybridep", "deepep"), disp),
        "overlap_moe_comm": _f(a2a, a2a_src),
        "token_drop": _dropless(pre, how["fi"]),
        "degrees": _f(deg, f"{base}: {name}"),
    }


# --- DeepSeek-V3 ------------------------------------------------------------------------------
_DS_DISPATCH = {
    "26.02": "deepseek_llm_pretrain.py passes it to recipes/deepseek/deepseek_v3.py "
    "apply_flex_dispatcher_backend",
    "26.02.01": "recipes/deepseek/deepseek_v3.py apply_flex_dispatcher_backend('hybridep'); "
    "deepseek_llm_pretrain.py copies the base backend",
}


def _ds(c: str, gpu: str, cfg: str, deg: str, mods, backend, a2a: bool, layout: str, fi=False):
    if c == NEW:
        base = _p(c, f"{PR}deepseek/{gpu}/deepseek_v3.py")
        name = f"deepseek_v3_pretrain_256gpu_{gpu}_fp8mx_config"
        pre = _p(c, f"{PR}deepseek/common.py")
        lib = _p(c, "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py")
        disp = f"{pre} _enable_deepseek_full_iteration_mxfp8: hybridep, flex"
        grad = _p(c, f"{PR}_common.py") + ": _benchmark_common ddp.grad_reduce_in_fp32 False"
    else:
        base = _p(c, f"{SP}configs/deepseek/deepseek_workload_base_configs.py")
        name = f"DEEPSEEK_V3_PRETRAIN_CONFIG_{cfg}"
        pre = _p(c, f"{SP}configs/deepseek/deepseek_llm_pretrain.py")
        lib = _p(c, "src/megatron/bridge/recipes/deepseek/deepseek_v3.py")
        how = _DS_DISPATCH.get(c, f"{OVR} set_workload_base_configs apply_flex_dispatcher_backend")
        disp = f"{base}: {name} moe_flex_dispatcher_backend {backend!r} ({how})"
        grad = f"{pre}: set_deepseek_v3_common_configs ddp.grad_reduce_in_fp32 False"
    return {
        **_moe(c, base, name, pre, grad, disp, deg, mods=mods, backend=backend, a2a=a2a, fi=fi),
        "etp": _f(1, f"{base}: expert_tensor_parallel_size 1" if c != NEW else f"{lib}: etp 1"),
        "optimizer_state_bytes": _f(
            8.0,
            f"{pre if c == NEW else lib}: use_precision_aware_optimizer True, exp_avg_dtype = "
            "exp_avg_sq_dtype = bfloat16 (4 + 2 + 2 bytes per parameter)",
        ),
        "overlap_tp": _f(False, f"{lib}: CommOverlapConfig(tp_comm_overlap=False); tp 1"),
        "mtp_layers": _f("row", f"{lib}: mtp_num_layers 1; the page variant is taken from the row"),
        "layout": _f("recipe", f"{base}: {layout}"),
        **(_ds_dpa(c, gpu, base, name, pre) if fi else {}),
    }


def _ds_dpa(c: str, gpu: str, base: str, name: str, pre: str) -> dict:
    """FP8 attention of the full-iteration DeepSeek-V3 MXFP8 configs: GB300 (and B300) on,
    GB200 off."""
    on = gpu != "gb200"
    if c == NEW:
        arg = "fp8_dot_product_attention=True, " if on else ""
        return _dpa(
            on,
            f"{base}: {name} _enable_deepseek_full_iteration_mxfp8(cfg, {arg}fp8_output_proj=True)"
            f" ({pre}: fp8_dot_product_attention defaults to False)",
        )
    v1 = f"DEEPSEEK_V3_PRETRAIN_CONFIG_{gpu.upper()}_FP8_MX_V1"
    if on:
        return _dpa(
            True, f"{base}: {v1} fp8_dot_product_attention=True ({name} replaces it); {_DPA_OVR}"
        )
    return _dpa(False, f"{base}: {v1} sets no fp8_dot_product_attention ({name} replaces it)")


_LAY_STR = 'pp_layout "Et*4|(t*4|)*14tmL" (4 layers per chunk, last chunk 1 + MTP + loss)'
_LAY_MAP = "no pp_layout: recipes/deepseek/deepseek_v3.py layout_map"


# --- GPT-OSS 120B -----------------------------------------------------------------------------
def _oss(c: str, gpu: str, cfg: str, deg: str, mods, backend, a2a: bool, fi=False):
    if c == NEW:
        base = _p(c, f"{PR}gpt_oss/{gpu}/gpt_oss.py")
        name = f"gpt_oss_120b_pretrain_64gpu_{gpu}_fp8mx_config"
        pre = _p(c, f"{PR}gpt_oss/common.py")
        disp = f"{pre} _apply_gpt_oss_120b_full_iter_fp8mx_configs: hybridep, flex"
        grad = (
            _p(c, f"{PR}_common.py")
            + ": _perf_precision / _benchmark_common grad_reduce fp32 False"
        )
        tpo = f"{pre}: CommOverlapConfig(tp_comm_overlap=False)"
    else:
        base = _p(c, f"{SP}configs/gpt_oss/gpt_oss_workload_base_configs.py")
        name = f"GPT_OSS_120B_PRETRAIN_CONFIG_{cfg}"
        pre = _p(c, f"{SP}configs/gpt_oss/gpt_oss_llm_pretrain.py")
        how = (
            "none in the base configs: GPTOSSProvider / recipe moe_token_dispatcher_type alltoall"
            if c in ("26.02", "26.02.01")
            else f"gpt_oss_llm_pretrain.py + {OVR}: apply_flex_dispatcher_backend if set, "
            "else alltoall"
        )
        disp = f"{base}: {name} moe_flex_dispatcher_backend {backend!r} ({how})"
        grad = f"{pre}: set_gpt_oss_common_configs ddp.grad_reduce_in_fp32 False"
        tpo = f"{pre}: no tp_comm_overlap for tp 1 (comm_overlap None, or tp_comm_overlap=tp > 1)"
    return {
        **_moe(c, base, name, pre, grad, disp, deg, mods=mods, backend=backend, a2a=a2a, fi=fi),
        "etp": _f(1, f"{base}: expert_tensor_parallel_size 1"),
        "overlap_tp": _f(False, tpo),
        **(
            _fi_dpa(c, base, name, f"{pre} _apply_gpt_oss_120b_full_iter_fp8mx_configs")
            if fi
            else {}
        ),
    }


def _fi_dpa(c: str, base: str, name: str, new_fn: str) -> dict:
    """FP8 attention of a full-iteration MXFP8 config (GPT-OSS, Qwen3): on in every release."""
    if c == NEW:
        return _dpa(True, f"{new_fn}: cfg.mixed_precision.fp8_dot_product_attention = True")
    return _dpa(True, f"{base}: {name} fp8_dot_product_attention=True; {_DPA_OVR}")


# --- Qwen3 30B-A3B / 235B-A22B ----------------------------------------------------------------
_QW_DISPATCH = {
    "26.02": "passed to recipes/qwen/qwen3_moe.py apply_flex_dispatcher_backend; "
    "None keeps the provider's alltoall",
    "26.02.01": "qwen3_llm_pretrain.py sets moe_token_dispatcher_type flex (GB300/GB200 235B, "
    "all 30B) or alltoall (235B B300/B200/H100) with the base backend",
}


def _qw(c: str, gpu: str, size: str, cfg: str, deg: str, backend, a2a: bool, fi=False, tpo=True):
    big = size == "235b_a22b"
    if c == NEW:
        n = 256 if big else 8
        base = _p(c, f"{PR}qwen/{gpu}/qwen3_moe.py")
        name = f"qwen3_{size}_pretrain_{n}gpu_{gpu}_fp8mx_config"
        pre = _p(c, f"{PR}qwen/common.py")
        disp = f"{base}: {name} moe_flex_dispatcher_backend hybridep, flex"
        lib = _p(c, "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py")
        rec = f"{base}: {name} recompute_granularity None"
        grad = _p(c, f"{PR}_common.py") + ": _benchmark_common ddp.grad_reduce_in_fp32 False"
        a2a_src = f"{pre}: _enable_hybridep_full_iteration_mxfp8 overlap_moe_expert_parallel_comm"
        tpo_src = f"{pre}: CommOverlapConfig(tp_comm_overlap=True); tp 1"
    else:
        base = _p(c, f"{SP}configs/qwen/qwen3_workload_base_configs.py")
        name = f"QWEN3_{size.upper()}_PRETRAIN_CONFIG_{cfg}"
        pre = _p(c, f"{SP}configs/qwen/qwen3_llm_pretrain.py")
        how = _QW_DISPATCH.get(c, f"{OVR} set_workload_base_configs apply_flex_dispatcher_backend")
        disp = f"{base}: {name} moe_flex_dispatcher_backend {backend!r} ({how})"
        lib = _p(c, "src/megatron/bridge/recipes/qwen/qwen3_moe.py")
        rec = f"{pre}: set_qwen3_common_configs recompute_granularity None"
        grad = f"{pre}: set_qwen3_common_configs ddp.grad_reduce_in_fp32 False"
        a2a_src = f"{base}: {name} moe_a2a_overlap {a2a}"
        tpo_src = f"{pre}: CommOverlapConfig(tp_comm_overlap={tpo})"
    facts = {
        "grad_reduce_bytes": _f(2.0, grad),
        "recompute": _f("none", rec),
        "etp": _f(1, f"{base}: expert_tensor_parallel_size 1"),
        "moe_hierarchical_dispatch": _f(backend in ("hybridep", "deepep"), disp),
        "overlap_moe_comm": _f(a2a, a2a_src),
        "overlap_tp": _f(tpo, tpo_src),
        "token_drop": _dropless(pre, fi),
        "degrees": _f(deg, f"{base}: {name}"),
    }
    if fi:
        facts.update(_fi_dpa(c, base, name, f"{pre} _enable_hybridep_full_iteration_mxfp8"))
    if big:
        facts["split"] = _f(
            True, f"{lib} qwen3_235b_a22b pretrain: account_for_embedding/loss_in_pipeline_split"
        )
    return facts


_L70, _L405, _DS, _OSS = "llama3_70b", "llama31_405b", "deepseek_v3", "gpt_oss_120b"
_Q30, _Q235 = "qwen3_30b_a3b", "qwen3_235b_a22b"
_C4 = ("26.02", "26.02.01", "26.04", "26.04.01")  # v0.3.0 .. v0.4.2
_C56 = ("26.06", "26.06.01")  # v0.5.0, v0.5.1
_ALL = (*_C4, *_C56, NEW)

BRIDGE_RECIPES_26: dict[tuple, dict] = {}
"""Recipe facts per ``(model, gpu, container, "main")``: setting -> ``{"value", "source"}``."""
_R = BRIDGE_RECIPES_26

# Llama 3 70B (26.02 .. 26.04.01: llama3_workload_base_configs.py unchanged for pretrain V2)
for _c in _C4:
    _R[(_L70, "gb300", _c, "main")] = _llama(
        _c, "70b", "gb300", "FP8_MX", "tp1 pp4 vp5 mbs1 gbs256 (MXFP8 = NVFP4)", 20, True
    )
    _R[(_L70, "gb200", _c, "main")] = _llama(
        _c, "70b", "gb200", "FP8_MX", "tp2 pp4 vp5 mbs1 gbs256 (MXFP8 = NVFP4)", 40, True
    )
    _R[(_L70, "h100", _c, "main")] = _llama(_c, "70b", "h100", "FP8_CS", "tp4 pp8 vp5 gbs256")

# Llama 3.1 405B (V2 configs unchanged 26.02 .. 26.06; 26.04.01+: GB200 NVFP4 also turns off
# param-gather overlap, not modelled)
for _c in (*_C4, "26.06"):
    _R[(_L405, "gb300", _c, "main")] = _llama(
        _c,
        "405b",
        "gb300",
        "FP8_CS",
        "FP8 tp4 pp8 vp4; MXFP8 tp2 pp8 cp2 vp4; NVFP4 tp4 pp8 vp4",
        nvfp4=True,
    )
    _R[(_L405, "gb200", _c, "main")] = _llama(
        _c, "405b", "gb200", "FP8_MX", "FP8 tp4 pp16 vp4; MXFP8 = NVFP4 tp4 pp16 vp8", nvfp4=True
    )
for _c in ("26.02", "26.04.01", "26.06"):
    _R[(_L405, "h100", _c, "main")] = _llama(_c, "405b", "h100", "FP8_CS", "tp8 pp8 cp2 vp8")

# DeepSeek-V3 (MXFP8 rows: FP8_MX_V2 configs)
_MLA = ["mla_up_proj"]
for _c in ("26.02", "26.02.01", "26.04"):
    for _g in ("b200", "b300"):
        _R[(_DS, _g, _c, "main")] = _ds(
            _c,
            _g,
            f"{_g.upper()}_FP8_MX_V2",
            "pp16 ep8 mbs1 gbs4096",
            _MLA,
            "hybridep",
            False,
            f"{_LAY_MAP} (16, 1)",
        )
_R[(_DS, "b200", "26.04.01", "main")] = _ds(
    "26.04.01",
    "b200",
    "B200_FP8_MX_V2",
    "pp8 vp2 ep32 mbs1 gbs4096",
    ["mla_up_proj", "mlp"],
    "deepep",
    True,
    _LAY_STR,
)
for _c in ("26.04.01", "26.06"):
    _R[(_DS, "b300", _c, "main")] = _ds(
        _c,
        "b300",
        "B300_FP8_MX_V2 (= B300_V2)",
        "pp8 ep8 mbs2 gbs4096",
        _MLA,
        "hybridep",
        False,
        f"{_LAY_MAP} (8, 1)",
    )
for _c in _ALL:
    _gb200_mods = ["mlp"] if _c in ("26.04", "26.04.01") else _MLA
    _new = _c in (*_C56, NEW)
    _R[(_DS, "gb200", _c, "main")] = _ds(
        _c,
        "gb200",
        "GB200_FP8_MX_V2",
        "pp4 vp4 ep64 mbs1 gbs4096",
        _gb200_mods,
        "hybridep",
        _new,
        f"{_LAY_MAP} (4, 4)",
        fi=_new,
    )
    _R[(_DS, "gb300", _c, "main")] = _ds(
        _c,
        "gb300",
        "GB300_FP8_MX_V2",
        f"pp2 vp8 ep32 mbs{1 if _new else 2} gbs4096",
        [] if _new else _MLA,
        "hybridep",
        _new,
        _LAY_STR,
        fi=_new,
    )

# GPT-OSS 120B (26.02 .. 26.04.01: BF16_V2; 26.06+: FP8_MX_V2)
_LNA = ["layernorm", "moe_act"]
_OSS_C4 = {  # gpu -> {container: (config, degrees, recompute_modules, backend, a2a)}
    "gb300": {c: ("GB300_BF16_V2", "ep64 mbs4", None, None, False) for c in _C4},
    "h100": {c: ("H100_BF16_V2", "pp4 ep8 mbs1", _LNA, None, False) for c in _C4},
    "gb200": {
        "26.02": ("GB200_BF16_V2", "ep64 mbs4", _LNA, None, False),
        "26.02.01": ("GB200_BF16_V2", "ep64 mbs4", _LNA, None, False),
        "26.04": ("GB200_BF16_V2", "ep64 mbs4", _LNA, "hybridep", True),
        "26.04.01": ("GB200_BF16_V2", "ep64 mbs4", _LNA, None, True),
    },
    "b300": {
        "26.02": ("B300_BF16_V2", "ep64 mbs4", None, None, False),
        "26.02.01": ("B300_BF16_V2", "ep64 mbs4", None, None, False),
        "26.04": ("B300_BF16_V2", "ep8 mbs4", None, "hybridep", False),
        "26.04.01": ("B300_BF16_V2", "ep8 mbs4", None, "hybridep", False),
    },
    "b200": {
        "26.02": ("B200_BF16_V2", "ep64 mbs4", _LNA, None, False),
        "26.02.01": ("B200_BF16_V2", "ep64 mbs4", _LNA, None, False),
        "26.04": ("B200_BF16_V2", "ep8 mbs4", _LNA, "hybridep", False),
        "26.04.01": ("B200_BF16_V2", "ep8 mbs4", _LNA, None, False),
    },
}
for _g, _by_c in _OSS_C4.items():
    for _c, (_cfg, _d, _m, _b, _a) in _by_c.items():
        _R[(_OSS, _g, _c, "main")] = _oss(_c, _g, _cfg, _d + " gbs1280", _m, _b, _a)
_R[(_OSS, "b300", "26.06", "main")] = _oss(
    "26.06", "b300", "B300_FP8_MX_V2 (= B300_BF16_V2)", "ep8 mbs4 gbs1280", None, "hybridep", False
)
for _c in (*_C56, NEW):
    _R[(_OSS, "gb300", _c, "main")] = _oss(
        _c, "gb300", "GB300_FP8_MX_V2", "ep16 mbs4 gbs1280", None, "hybridep", True, fi=True
    )
    _R[(_OSS, "gb200", _c, "main")] = _oss(
        _c, "gb200", "GB200_FP8_MX_V2", "ep64 mbs4 gbs1280", [], "hybridep", True, fi=True
    )

# Qwen3 30B-A3B (MXFP8 rows: *_FP8_MX_V1; H100 FP8: H100_FP8_CS_V1)
for _c in _C4:
    for _g, _mbs in (("gb300", 8), ("gb200", 4), ("b300", 8)):
        _R[(_Q30, _g, _c, "main")] = _qw(
            _c, _g, "30b_a3b", f"{_g.upper()}_FP8_MX_V1", f"ep8 mbs{_mbs} gbs512", "hybridep", False
        )
    _b200 = ("ep8 mbs1 gbs512", None) if _c == "26.02" else ("ep8 mbs4 gbs512", "hybridep")
    _R[(_Q30, "b200", _c, "main")] = _qw(_c, "b200", "30b_a3b", "B200_FP8_MX_V1", *_b200, False)
    if _c == "26.02":
        _R[(_Q30, "h100", _c, "main")] = _qw(
            _c, "h100", "30b_a3b", "H100_FP8_CS_V1", "pp2 vp12 ep8 gbs1024", "deepep", True
        )
    else:
        _R[(_Q30, "h100", _c, "main")] = _qw(
            _c, "h100", "30b_a3b", "H100_FP8_CS_V1", "ep16 gbs1024", "hybridep", False
        )
_R[(_Q30, "h100", "26.06", "main")] = _qw(
    "26.06", "h100", "30b_a3b", "H100_FP8_CS_V1", "ep16 gbs1024", "hybridep", False
)
for _c in (*_C56, NEW):
    for _g, _mbs in (("gb300", 8), ("gb200", 4)):
        _R[(_Q30, _g, _c, "main")] = _qw(
            _c,
            _g,
            "30b_a3b",
            f"{_g.upper()}_FP8_MX_V1",
            f"ep8 mbs{_mbs} gbs512",
            "hybridep",
            True,
            fi=True,
        )
_R[(_Q30, "b300", "26.06", "main")] = _qw(
    "26.06", "b300", "30b_a3b", "B300_FP8_MX_V1", "ep8 mbs8 gbs512", "hybridep", True, fi=True
)

# Qwen3 235B-A22B (MXFP8 rows: *_FP8_MX_V2; H100 FP8: H100_FP8_CS_V2)
for _c in _C4:
    _vp = {"26.04": (" vp12", " vp3"), "26.04.01": (" vp12", " vp3")}.get(_c, ("", ""))
    _R[(_Q235, "gb300", _c, "main")] = _qw(
        _c,
        "gb300",
        "235b_a22b",
        "GB300_FP8_MX_V2",
        f"pp4{_vp[0]} ep32 mbs2 gbs8192",
        "hybridep",
        False,
    )
    _R[(_Q235, "gb200", _c, "main")] = _qw(
        _c,
        "gb200",
        "235b_a22b",
        "GB200_FP8_MX_V2",
        f"pp8{_vp[1]} ep32 mbs1 gbs8192",
        "hybridep",
        False,
    )
    _R[(_Q235, "h100", _c, "main")] = _qw(
        _c,
        "h100",
        "235b_a22b",
        "H100_FP8_CS_V2",
        "tp2 pp8 vp4 ep32 mbs1 gbs8192",
        None,
        True,
        tpo=False,
    )
_Q235_B3 = {
    "26.02": ("pp8 vp4 ep8 mbs1", None, True),
    "26.02.01": ("pp8 ep8 mbs1", None, False),
    "26.04": ("pp8 ep8 mbs2", None, False),
    "26.04.01": ("pp8 ep8 mbs2", "hybridep", False),
}
for _c, (_d, _b, _a) in _Q235_B3.items():
    _R[(_Q235, "b300", _c, "main")] = _qw(
        _c, "b300", "235b_a22b", "B300_FP8_MX_V2 (= B300_FP8_CS_V2)", _d + " gbs8192", _b, _a
    )
for _c in ("26.02", "26.04.01"):
    _R[(_Q235, "b200", _c, "main")] = _qw(
        _c,
        "b200",
        "235b_a22b",
        "B200_FP8_MX_V2 (= B200_FP8_CS_V2)",
        "pp8 ep8 mbs1 gbs8192",
        None,
        False,
    )
for _c in (*_C56, NEW):
    _R[(_Q235, "gb300", _c, "main")] = _qw(
        _c,
        "gb300",
        "235b_a22b",
        "GB300_FP8_MX_V2",
        "pp4 vp12 ep32 mbs2 gbs8192",
        "hybridep",
        True,
        fi=True,
    )
    _R[(_Q235, "gb200", _c, "main")] = _qw(
        _c,
        "gb200",
        "235b_a22b",
        "GB200_FP8_MX_V2",
        "pp8 vp3 ep32 mbs1 gbs8192",
        "hybridep",
        True,
        fi=True,
    )
