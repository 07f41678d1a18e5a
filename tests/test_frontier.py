"""Frontier settings (issue 11): stage layouts, MoE folding, partial recomputation, offloading,
MLA, hierarchical dispatch, FP8/FP4 precisions; golden values by hand from the sources cited."""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import pytest
from conftest import small_doc

import codesign as cd
from codesign import collectives, memory, pipeline, rules, workload
from codesign.smoothing import EXACT, Smoothing
from codesign.step import evaluate_specs


def close(a, b, rel=1e-9):
    return math.isclose(float(a), float(b), rel_tol=rel)


def load(doc):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cd.load_run_dict(doc)


def llama405b_doc(**strategy):
    """Llama 3.1 405B (126 layers) on 1,024 H100: NVIDIA's recipe is TP8 PP8 VP8 CP2."""
    st = {"tp": 8, "pp": 8, "dp": 8, "cp": 2, "interleave": 8}
    st.update(strategy)
    return {
        "model": {"preset": "llama3-405b"},
        "training": {"global_batch": 512, "precision": "fp8-current"},
        "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 1024},
        "strategy": st,
    }


# --------------------------------------------------------------------------------------
# Stage layouts (Megatron-Core TransformerConfig: num_layers_in_first/last_pipeline_stage,
# account_for_embedding/loss_in_pipeline_split)
# --------------------------------------------------------------------------------------


def test_accounted_split_of_llama405b():
    """126 layers + embedding + loss = 128 slots = 8 stages x 16: the first and the last
    stage hold 15 layers, the others 16, in 8 chunks of 2 slots."""
    cfg = load(llama405b_doc(pp_embedding_in_split=True, pp_loss_in_split=True))
    r = cd.evaluate(*cfg.specs())
    assert [float(r.stage_layers[k]) for k in pipeline.STAGES] == [15.0, 16.0, 15.0]
    # Slowest stage: a middle one (16 layers vs 15 + the output layer's few GEMMs).
    assert float(r.time_stage) == 1.0


def test_megatron_rejects_an_accounted_split_that_does_not_divide():
    """(126 + 2) / 7 stages is not whole: Megatron-Core refuses, and so does the model."""
    doc = llama405b_doc(pp=7, dp=8, interleave=1, pp_embedding_in_split=True)
    doc["system"]["num_accelerators"] = 8 * 7 * 8 * 2
    with pytest.raises(cd.SpecError, match="strategy.pp"):
        load(doc)


def test_automatic_layout_balances_uneven_depths():
    """No explicit counts, 126 layers over 8 stages: floor 15, 6 extra layers on middle
    stages first -> 15 | 16 ... | 15 (the pipeline_model_parallel_layout a user would write)."""
    st = cd.make_strategy(tp=1, pp=8, dp=1, interleave=8)
    n = pipeline.stage_layers(126.0, st, EXACT)
    assert (float(n["first"]), float(n["middle"]), float(n["last"])) == (15.0, 16.0, 15.0)
    # 61 layers (DeepSeek-V3) over 16 stages: 3 per stage + 13 extra on the 14 middle stages.
    st = cd.make_strategy(tp=1, pp=16, dp=1)
    n = pipeline.stage_layers(61.0, st, EXACT)
    assert (float(n["first"]), float(n["middle"]), float(n["last"])) == (3.0, 4.0, 3.0)


def test_explicit_first_and_last_stage():
    """DeepSeek-V3 on 8 stages with a layout of 7 | 8 x 6 | 6 layers (Megatron-Bridge H100)."""
    st = cd.make_strategy(tp=1, pp=8, dp=1, pp_first_layers=7, pp_last_layers=6)
    n = pipeline.stage_layers(61.0, st, EXACT)
    assert (float(n["first"]), float(n["middle"]), float(n["last"])) == (7.0, 8.0, 6.0)
    bad = cd.make_strategy(tp=1, pp=8, dp=1, pp_first_layers=7, pp_last_layers=5)  # 49 / 6
    assert not bool(pipeline.layout_valid(jnp, 61.0, bad))


def test_time_follows_the_slowest_stage_and_memory_the_largest():
    """A first stage with twice the layers of the others sets the step time (stage 0); the
    memory peak is on the stage holding the most layers x in-flight micro-batches."""
    even = load(small_doc(tp=2, pp=4, dp=8))
    heavy = load(small_doc(tp=2, pp=4, dp=8, pp_first_layers=11, pp_last_layers=5))
    r0, r1 = cd.evaluate(*even.specs()), cd.evaluate(*heavy.specs())
    assert float(r1.time_stage) == 0.0
    assert float(r1.stage_layers["first"]) == 11.0 and float(r1.stage_layers["middle"]) == 8.0
    # 1F1B: the first stage holds p = 4 micro-batches of 11 layers vs 4 x 8 evenly.
    act0, act1 = float(r0.memory_gb["activations"]), float(r1.memory_gb["activations"])
    assert close(act1 / act0, 11.0 / 8.0, rel=1e-6)
    assert float(r1.step_time_s) > float(r0.step_time_s)


# --------------------------------------------------------------------------------------
# MoE parallel folding (Liu et al. 2025, arXiv:2504.14960; Megatron-Core)
# --------------------------------------------------------------------------------------


def qwen235_doc(**strategy):
    """Qwen3-235B-A22B on 64 GB200 at TP2 EP64 ETP1 (Megatron-Bridge 25.09)."""
    st = {"tp": 2, "pp": 1, "dp": 32, "ep": 64, "etp": 1}
    st.update(strategy)
    return {
        "model": {
            "layers": 94,
            "hidden": 4096,
            "heads": 64,
            "kv_heads": 4,
            "head_dim": 128,
            "ffn_hidden": 12288,
            "vocab": 151936,
            "seq_len": 4096,
            "gated_mlp": True,
            "moe_experts": 128,
            "moe_top_k": 8,
            "moe_ffn_hidden": 1536,
        },
        "training": {"global_batch": 1024, "precision": "bf16"},
        "system": {"accelerator": "gb200", "num_accelerators": 64},
        "strategy": st,
    }


def test_folding_lets_expert_parallelism_span_tensor_parallel_ranks():
    """EP 64 > dp*cp = 32 is expressible because ep*etp = 64 divides tp*dp*cp = 64; with
    etp = tp = 2 (Megatron's default) ep*etp = 128 does not."""
    cfg = load(qwen235_doc())
    r = cd.evaluate(*cfg.specs())
    h, fe = 4096.0, 1536.0
    expert_per_rank = 94 * 128 * 3 * h * fe / (1 * 64)  # E (3 h f_e) per layer / (etp ep)
    assert close(r.params["local_expert"], expert_per_rank)
    with pytest.raises(cd.SpecError, match="ep\\*etp"):
        load(qwen235_doc(etp=0))


def test_expert_data_parallel_group_under_folding():
    cfg = load(qwen235_doc())
    dense, expert = cd.rules.data_parallel_groups(cfg.strategy)
    assert float(dense) == 32.0 and float(expert) == 1.0  # tp dp cp / (ep etp) = 64 / 64


# --------------------------------------------------------------------------------------
# Recomputation and offloading
# --------------------------------------------------------------------------------------


def test_selective_mlp_module_drops_the_mlp_intermediates():
    """Recomputing ``mlp`` drops the gated MLP's FC1 outputs 2 x 2f and activation output 2f
    per token (Llama 3 8B, f = 14336), split by tp."""
    m = load(small_doc()).model
    base = cd.make_strategy(tp=2, pp=2, dp=16, recompute="selective")
    mlp = cd.make_strategy(
        tp=2, pp=2, dp=16, recompute="selective", recompute_modules=["core_attn", "mlp"]
    )
    a0 = memory.layer_activation_bytes(m, base)["selective"]
    a1 = memory.layer_activation_bytes(m, mlp)["selective"]
    tokens = 8192.0
    assert close(a0 - a1, tokens * (2 * 2 * 14336 + 2 * 14336) / 2)


@pytest.mark.parametrize("phi", [0.0, 0.25, 1.0])
def test_recompute_fraction_interpolates_stored_activations(phi):
    """Block method: phi of each stage's layers store only their input, the rest everything."""
    m = load(small_doc()).model
    st = cd.make_strategy(tp=2, pp=2, dp=16, recompute="full", recompute_fraction=phi)
    act = memory.layer_activation_bytes(m, st)
    assert close(memory.stored_per_layer(act, st), phi * act["full"] + (1 - phi) * act["none"])


def test_recompute_num_layers_converts_to_a_fraction():
    """recompute_num_layers = 4 per chunk of 32 / (2 x 2) = 8 layers: half of them."""
    cfg = load(small_doc(recompute="full", recompute_num_layers=4, interleave=2))
    assert float(cfg.strategy.recompute_fraction) == 0.5


def test_activation_offload_needs_a_host_link_and_frees_memory():
    doc = small_doc(offload_activations=0.5)
    doc["system"]["host_link_gbps"] = 0.0
    with pytest.raises(cd.SpecError, match="offload"):
        load(doc)
    base = cd.evaluate(*load(small_doc()).specs())
    off = cd.evaluate(*load(small_doc(offload_activations=0.5)).specs())
    # Full recomputation is off: activations halve exactly.
    assert close(off.memory_gb["activations"], 0.5 * float(base.memory_gb["activations"]))


@pytest.mark.parametrize(
    "change",
    [
        {},  # pp 2: Megatron-Core's cpu_offloading rejects pipeline parallelism
        {"pp": 1, "dp": 32, "recompute": "selective"},  # ... and activation recomputation
        {"pp": 1, "dp": 32, "offload_activations": 1.0},  # ... and offloading every layer
    ],
)
def test_whole_layer_offload_follows_megatron_cores_rules(change):
    """``TransformerConfig.__post_init__`` raises for ``cpu_offloading`` with
    ``pipeline_model_parallel_size > 1``, with ``recompute_granularity`` set, and with
    ``cpu_offloading_num_layers >= num_layers``; module-level offloading has none of these."""
    kw = {"offload_activations": 0.5, "recompute": "none", **change}
    with pytest.raises(cd.SpecError) as e:
        load(small_doc(offload_whole_layers=True, **kw))
    assert e.value.field == "strategy.offload_whole_layers"
    cfg = load(small_doc(offload_whole_layers=False, **kw))  # fine-grained: valid
    bad = dataclasses.replace(cfg.strategy, offload_whole_layers=1.0)
    specs = {"model": cfg.model, "training": cfg.training, "system": cfg.system}
    assert bool(rules.valid_mask({**specs, "strategy": cfg.strategy}))
    assert not bool(rules.valid_mask({**specs, "strategy": bad}))
    ok = load(
        small_doc(offload_whole_layers=True, pp=1, dp=32, offload_activations=0.5, recompute="none")
    )
    assert bool(rules.valid_mask({**specs, "strategy": ok.strategy}))
    # The flag changes validity only, never the cost.
    full = {**specs, "efficiency": cfg.efficiency}
    a = evaluate_specs({**full, "strategy": cfg.strategy})
    b = evaluate_specs({**full, "strategy": bad})
    assert float(a.step_time_s) == float(b.step_time_s)


def test_offload_time_exposed_only_when_the_host_link_is_slow():
    """Offloading every stored activation of Llama 3 8B (tp 2, ~0.5 GB per layer and
    micro-batch) hides behind the layer's compute over a 1 TB/s link, not over 1 GB/s."""
    fast_doc = small_doc(offload_activations=1.0)
    fast_doc["system"]["host_link_gbps"] = 1000.0
    fast = load(fast_doc)
    slow_doc = small_doc(offload_activations=1.0)
    slow_doc["system"]["host_link_gbps"] = 1.0
    slow = load(slow_doc)
    assert float(cd.evaluate(*fast.specs()).breakdown_s["offload"]) == 0.0
    assert float(cd.evaluate(*slow.specs()).breakdown_s["offload"]) > 1.0


def test_optimizer_offload_moves_the_optimizer_state_off_the_device():
    r0 = cd.evaluate(*load(small_doc()).specs())
    r1 = cd.evaluate(*load(small_doc(offload_optimizer=0.75)).specs())
    assert close(r1.memory_gb["optimizer"], 0.25 * float(r0.memory_gb["optimizer"]))


# --------------------------------------------------------------------------------------
# MLA and hierarchical dispatch
# --------------------------------------------------------------------------------------

DEEPSEEK_V3 = dict(
    layers=61,
    hidden=7168,
    heads=128,
    kv_heads=128,
    ffn_hidden=18432,
    vocab=129280,
    seq_len=4096,
    gated_mlp=1.0,
    moe_experts=256,
    moe_top_k=8,
    moe_ffn_hidden=2048,
    moe_shared_experts=1,
    moe_layers=58,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
)


def test_deepseek_v3_parameter_counts():
    """DeepSeek-V3 (arXiv:2412.19437): 671B total, 37B activated per token.  By hand: MLA per
    layer 7168 x 1536 + 1536 x 128 x 192 + 7168 x 576 + 512 x 128 x 256 + 128 x 128 x 7168."""
    m = cd.Model(**DEEPSEEK_V3)
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert close(workload.layer_params(m)["attention"], attn)
    t = workload.total_params(m)
    assert round(float(t["total"]) / 1e9) == 671
    assert round(float(t["active"]) / 1e9) == 38  # 37.6: the paper rounds to 37B
    # Attention core FLOPs: QK^T over d_nope + d_rope = 192, AV over d_v = 128 per head.
    f = workload.forward_flops_per_token(m)
    assert close(f["attention"], 2 * 4096 * 128 * (192 + 128))


def test_hierarchical_dispatch_deduplicates_outer_tier_traffic():
    """64 ranks, 8 per NVLink domain, top-8 routing: over the scale-out tier each token goes
    once per distinct destination domain, n (1 - (1 - 1/n)^k) of the k copies (n = 8)."""
    cfg = load(small_doc())
    sy = cfg.system
    group = [(64.0, 1.0)]
    plain = collectives.all_to_all_time(1e9, group, sy, EXACT)
    dedup = collectives.all_to_all_time(1e9, group, sy, EXACT, dedup_copies=8.0)
    (bw0, bw1) = collectives.tier_bandwidth_bytes_per_s(sy)
    lat = sum(t.latency_us * 1e-6 for t in sy.tiers)
    inner = 1e9 * 7 / 64 / bw0
    outer = 1e9 * 56 / 64 / bw1
    factor = 8 * (1 - (1 - 1 / 8) ** 8) / 8
    assert close(plain, lat + inner + outer)
    assert close(dedup, lat + inner + outer * factor)
    one = collectives.all_to_all_time(1e9, group, sy, EXACT, dedup_copies=1.0)
    assert close(one, plain)  # one copy per token: nothing to deduplicate


# --------------------------------------------------------------------------------------
# Precisions
# --------------------------------------------------------------------------------------


def test_fp4_needs_an_fp4_peak_and_uses_it():
    doc = small_doc()
    doc["training"]["precision"] = "nvfp4"
    with pytest.raises(cd.SpecError, match="training.precision"):
        load(doc)  # H100 has no FP4 tensor cores
    doc["system"]["accelerator"] = "b200"
    cfg = load(doc)
    assert close(
        cd.compute.peak_flops(cfg.system, "nvfp4"), cfg.system.accelerator.peak_tflops_fp4 * 1e12
    )


def test_fp8_variants_cost_more_casts_and_store_fp8_activations():
    """Current scaling reads each quantized tensor once more than delayed scaling; FP8 stores
    the GEMM inputs saved for backward in 1 byte (less activation memory than BF16)."""
    times, acts = {}, {}
    for p in ("bf16", "fp8-delayed", "fp8-current"):
        doc = small_doc()
        doc["training"]["precision"] = p
        r = cd.evaluate(*load(doc).specs())
        times[p], acts[p] = float(r.breakdown_s["forward"]), float(r.memory_gb["activations"])
    assert times["fp8-current"] > times["fp8-delayed"]
    assert acts["fp8-delayed"] < acts["bf16"] and acts["fp8-current"] == acts["fp8-delayed"]


# --------------------------------------------------------------------------------------
# The relaxed model stays smooth with the new knobs
# --------------------------------------------------------------------------------------


def test_gradients_finite_in_the_new_continuous_knobs():
    cfg = load(small_doc(recompute="full", recompute_fraction=0.5, offload_activations=0.3))
    m, tr, sy, st, eff = cfg.specs()
    sm = Smoothing(exact=False, tau=0.1)

    def f(x):
        s = dataclasses.replace(st, recompute_fraction=x[0], offload_activations=x[1])
        r = cd.evaluate_unchecked(m, tr, sy, s, eff, sm)
        return r.step_time_s + r.memory_gb["total"]

    g = jax.grad(f)(jnp.array([0.5, 0.3]))
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).min()) > 0


def test_grouped_gemm_pays_for_few_tokens_per_expert():
    """The routed experts' time grows by (t + t_half) / t for t tokens per expert: Qwen3-235B at
    EP 64, microbatch 1 of 4096 tokens, TP 2 with SP and ETP 1: 4096 x 8 x 1/2 slots over 2
    local experts, t = 8192."""
    cfg = load(qwen235_doc())
    m, tr, sy, st, eff = cfg.specs()
    eff = dataclasses.replace(eff, grouped_gemm_half_tokens=0.0)
    act = memory.layer_activation_bytes(m, st)
    base = cd.compute.layer_times(m, st, sy, eff, "bf16", act, EXACT)
    slow = cd.compute.layer_times(
        m, st, sy, dataclasses.replace(eff, grouped_gemm_half_tokens=2048.0), "bf16", act, EXACT
    )
    t = 4096 * 8 * 1 / 2 / 2
    assert t == 8192
    # The extra time is the routed experts' (not the router or shared experts') x 2048 / t.
    extra = float(slow["gemm"] - base["gemm"])
    routed = extra / (2048.0 / t)
    assert routed > 0 and extra < float(base["gemm"])
    slower = cd.compute.layer_times(
        m, st, sy, dataclasses.replace(eff, grouped_gemm_half_tokens=4096.0), "bf16", act, EXACT
    )
    assert close(float(slower["gemm"] - base["gemm"]), routed * 4096.0 / t, rel=1e-9)


def test_mxfp8_runs_use_their_own_calibrated_gemm_efficiency():
    """Where the fit has MXFP8 rows of its own (Blackwell), an mxfp8 run takes
    calibrated_gemm_max_mxfp8 and an fp8-current run calibrated_gemm_max_fp8."""
    table = cd.config.catalog()["efficiency"]["gb200"]
    assert "calibrated_gemm_max_mxfp8" in table
    got = {}
    for p in ("mxfp8", "fp8-current"):
        doc = small_doc()
        doc["system"] = {"accelerator": "gb200", "num_accelerators": 64}
        doc["training"]["precision"] = p
        got[p] = float(load(doc).efficiency.gemm_max)
    assert got["mxfp8"] == table["calibrated_gemm_max_mxfp8"]
    assert got["fp8-current"] == table["calibrated_gemm_max_fp8"]
