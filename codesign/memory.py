"""Memory per accelerator, by term.

**Activations** follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), Sec. 4.  For a GPT layer with ``ffn = 4h``, 16-bit
activations and dropout, one micro-batch of ``b`` sequences stores

* no parallelism: ``s b h (34 + 5 a s / h)`` bytes (eq. 1),
* tensor parallel ``t``: ``s b h (10 + 24/t + 5 a s / (h t))`` (eq. 2),
* tensor + sequence parallel: ``s b h / t (34 + 5 a s / h)`` (eq. 4),
* selective recomputation (+SP): ``34 s b h / t`` (Sec. 5),
* full recomputation: ``2 s b h`` per layer (``/t`` with SP), the layer input only.

The constant 34 is the sum of the tensors each block saves, which we count per tensor so
that it generalizes: attention ``2 + 2q/h + 4kv/h + 2 + dropout`` (input to QKV, Q, K, V,
input to the output projection, dropout mask), scores ``5 a s^2 b`` when the attention is
not fused (softmax output 2, dropout mask 1, dropout output 2 per score), MLP
``2 + 2 (1 + gated) f/h + 2 f/h + dropout`` per token (input, the first GEMM's outputs,
the activation output, dropout mask; MoE layers store ``top_k`` slots of expert width, times
the busiest expert rank's load, :func:`codesign.workload.moe_load`),
and two LayerNorm inputs ``4``.  With ``q = kv = h``, ``f = 4h``, no gate and dropout this
gives ``11 + 19 + 4 = 34`` and ``5 a s / h``.  The parts that tensor parallelism does not
split without sequence parallelism are the LayerNorm inputs (4), the inputs of the
QKV and first MLP GEMMs (2 + 2) and the two dropout masks (2): the "10" of eq. 2.
Fused (flash) attention stores no ``s x s`` tensors (Dao et al. 2022).

**Hybrid models** (:func:`codesign.workload.fractions`): a Mamba-2 mixer (Dao & Gu 2024,
arXiv:2405.21060) stores, split by TP, its ``in_proj`` output ``2 (2 d_inner + 2 G N + H)``,
the convolution's output ``2 (d_inner + 2 G N)``, ``dt`` and its cumulative decay in fp32
(``8 H``), the chunk states ``2 d_inner N / Q`` (one ``H P N`` state per chunk of ``Q``
tokens; mamba_ssm's fused path recomputes some of these, so this is an upper bound), the scan
output ``2 d_inner`` and the ``out_proj`` input ``2 d_inner``, in place of the attention's
tensors; its norm input and ``in_proj`` input are the attention's replicated ``2h + 2h``.
MLP-free layers store no MLP tensors and one LayerNorm less.  No KV or SSM cache (training).

**Recomputation as Megatron-Core runs it.**  Selective recomputation re-runs the modules of
``recompute_modules`` and stores none of their internal tensors: ``core_attn`` the ``s x s``
scores, ``layernorm`` the LayerNorm outputs (the QKV and first MLP GEMM inputs, recomputed from
the stored LayerNorm inputs), ``mlp`` the dense MLP's intermediate tensors, ``moe_act`` the
experts' activation outputs, ``moe`` the whole MoE MLP's, ``mla_up_proj`` MLA's up-projected
queries, keys and values (recomputed from the latents).  Full recomputation with
``recompute_fraction`` ``phi`` (the block method) stores only the input of ``phi`` of the layers
and everything for the others, plus one layer's full activations while it recomputes.
Offloading moves ``offload_activations`` of the stored activations to host memory.

**Pipeline stages** hold different layer counts (:func:`codesign.pipeline.stage_layers`) and
in-flight micro-batches (:func:`codesign.pipeline.in_flight_chunks`: the first stage ``L``
layers' worth under 1F1B, times ``1 + (p - 1)/(p v)`` interleaved, Korthikanti et al. Sec.
4.2.3), not spread evenly over the chunks of an interleaved stage: where the embedding and
the loss take a layer slot, the first stage's first chunk, which holds the most micro-batches,
and the last stage's last, which holds the fewest, have a layer fewer
(:func:`codesign.pipeline.slot_chunks_in_flight`), and a low-precision run's 16-bit layers
sit in those chunks (:func:`codesign.pipeline.bf16_in_flight`).  Memory is computed for the
first, a middle (the second) and the last stage, each with its own weights (the input
embedding on the first, the output layer on the last, both on a single stage; with
multi-token prediction the last also holds the modules and an embedding copy) and buffers
(the fp32 logits on the last, one more per multi-token-prediction module), and the report
gives the largest.
Context parallelism splits the sequence.

**Model states** follow Rajbhandari et al. 2020, "ZeRO" (arXiv:1910.02054): 2 bytes per
parameter of 16-bit weights (``Training.weight_copy_bytes``: 0 under PyTorch FSDP mixed
precision, whose fp32 parameters are the master weights) plus, in FP8/FP4 training, the
cached quantized weights (:data:`WEIGHT_CACHE_BYTES`), ``grad_bytes`` of gradients (4:
Megatron's fp32 main grads, the default; 2 when gradients are kept and reduced in bf16, as
ZeRO's paper counts), and ``optimizer_state_bytes`` of optimizer state (12: fp32 master
weights, Adam m and v; 8 with bf16 moments, Megatron-Core's precision-aware optimizer);
ZeRO-1 shards the optimizer state over the data-parallel group, ZeRO-2 also the gradients
and ZeRO-3 also the weights.  Expert parameters shard over the expert-data-parallel group
(``dp cp / ep``).

**Buffers**: the all-gathered sequence-parallel activation (``2 s b h``), the gathered
weights of two layers under ZeRO-3 (prefetch), the logits in fp32 (``4 s b V / t``) and a
fixed ``memory_overhead_gb`` (CUDA context, allocator fragmentation).
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign import pipeline, workload
from codesign.rules import expert_tp, sharded, zero_fractions
from codesign.smoothing import Smoothing, safe_div
from codesign.specs import Efficiency, Model, Strategy, precision_family

__all__ = [
    "GB",
    "activation_bytes_per_token_layer",
    "layer_activation_bytes",
    "stage_memory_bytes",
    "stage_params",
    "local_params",
    "MEMORY_TERMS",
]

MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "buffers")

GB = float(2**30)
"""Bytes in the GB of memory capacities and footprints (``hbm_gb``, ``memory_gb``,
``memory_overhead_gb``): the binary gigabyte (GiB) in which HBM is built and sold.  A stack
holds a power of two of bytes (an HBM3 8-high stack of 16 Gbit dies: 16 x 2^30), so an
"80 GB" H100 has 80 x 2^30 = 85.9e9 bytes, of which ``nvidia-smi`` reports 81,559 MiB
(85.5e9 bytes) as its total; likewise A100 40 GB: 40,536 MiB, H200 141 GB: 143,771 MiB,
B200 180 GB: 183,359 MiB (each 99-99.6 % of the listed figure in GiB; the rest is reserved by
the driver).  Read as 1e9 bytes, every capacity would be 7 % too small.  Bandwidths
(``_gbps``, ``_tbps``) stay decimal (1e9 and 1e12 bytes per second), as vendors give them."""

WEIGHT_CACHE_BYTES = {"half": 0.0, "fp8": 2.0, "fp4": 1.125}
"""Bytes per parameter of the quantized weights that FP8/FP4 training keeps for the step:
Transformer Engine quantizes each weight on a step's first micro-batch and caches it for the
others (``is_first_microbatch``; Megatron-Core ``MegatronModule.set_is_first_microbatch``), in
two layouts, row-wise for the forward GEMM and column-wise (transposed) for the backward one:
2 bytes in FP8, and for NVFP4 2 x (0.5 + 1/16 of E4M3 block scales) = 1.125."""


def activation_bytes_per_token_layer(
    model: Model, strategy: Strategy, precision: str = "bf16", moe_imbalance=1.0
) -> dict:
    """Bytes stored per token per layer without recomputation, by TP behaviour and module.

    ``replicated`` (not split by TP unless sequence parallel) and ``split`` (split by TP) sum
    to everything; ``scores`` (the unfused ``s x s`` attention tensors, split by TP; zero with
    flash attention) comes on top.  The ``drop_*`` entries are what each recomputable module
    of :data:`~codesign.specs.RECOMPUTE_MODULES` does not store when it is recomputed
    (``drop_layernorm`` from the replicated part, the others from the split part).
    """
    m = model
    h = m.hidden
    q, kv = workload.attention_dims(m)
    qk, v = workload.attention_core_dims(m)
    mla = workload.is_mla(m)
    do = m.dropout
    mats = 1.0 + m.gated_mlp
    fr = workload.fractions(m)
    moe_frac = fr["moe"]
    di, mamba = 0.0, 0.0  # the Mamba mixer's, where the model has the part (has_part)
    if workload.has_part(m, "mamba"):
        di, gn, nh = workload.mamba_dims(m)
        n_state = m.mamba_state_dim
        mamba = (
            2.0 * (2.0 * di + 2.0 * gn + nh)  # in_proj output (z, x, B, C, dt)
            + 2.0 * (di + 2.0 * gn)  # convolution output (x, B, C)
            + 8.0 * nh  # dt and its cumulative decay, fp32
            + 2.0 * di * n_state / workload.SSD_CHUNK  # chunk states
            + 2.0 * di  # scan output y
            + 2.0 * di  # gated-norm output = out_proj input
        )
    dense_mlp = 2.0 * mats * m.ffn_hidden + 2.0 * m.ffn_hidden
    per_slot = 2.0 * mats * m.moe_ffn_hidden + 2.0 * m.moe_ffn_hidden
    routed = m.moe_top_k * workload.moe_load(m, strategy, moe_imbalance)  # busiest rank
    slots = routed + m.moe_shared_experts
    moe_mlp = slots * per_slot + 2.0 * routed * h  # + dispatched copies of the tokens
    mlp_split = fr["dense"] * dense_mlp + moe_frac * moe_mlp
    # LayerNorm inputs (2 x 2h), their outputs = QKV and FC1 inputs (2 x 2h), dropout masks
    # (the MLP's three on the MLP-bearing layers only); MLA's latents (query and key/value
    # down-projections, the shared rope key).
    replicated = 4.0 * h + 4.0 * h + 2.0 * do * h - fr["free"] * (4.0 * h + do * h)
    replicated = replicated + mla * fr["attention"] * 2.0 * (
        m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim
    )
    # Q, K, V and the output-projection input (GQA: 2q + 4kv + 2h; MLA: 2qk + 2qk + 2v + 2v);
    # the Mamba mixer's tensors on the Mamba layers.
    attn_split = (
        fr["attention"]
        * ((1.0 - mla) * (2.0 * q + 4.0 * kv + 2.0 * h) + mla * (4.0 * qk + 4.0 * v))
        + fr["mamba"] * mamba
    )
    # An unfused kernel materializes the whole s x s scores, masked, even on windowed layers.
    scores = fr["attention"] * (1.0 - strategy.flash_attention) * 5.0 * m.heads * m.seq_len
    act_part = moe_frac * slots * 2.0 * m.moe_ffn_hidden
    # FP8/FP4 training (Transformer Engine) saves the quantized GEMM inputs for the weight
    # gradients, 1 byte per element instead of 2: the two LayerNorm outputs, the output
    # projection's input, the MLP's second GEMM input (and the experts' and their dispatched
    # tokens).  (FP4 recipes keep FP8 copies for the backward pass.)
    if precision_family(precision) != "half":
        replicated = replicated - 2.0 * h + fr["free"] * h
        attn_split = attn_split - fr["attention"] * ((1.0 - mla) * h + mla * v) - fr["mamba"] * di
        mlp_split = mlp_split - (
            fr["dense"] * m.ffn_hidden + moe_frac * (slots * m.moe_ffn_hidden + routed * h)
        )
        act_part = act_part / 2.0
    return {
        "replicated": replicated,
        "split": attn_split + mlp_split,
        "scores": scores,
        "drop_core_attn": scores,
        "drop_layernorm": 4.0 * h - fr["free"] * 2.0 * h,
        "drop_mlp": fr["dense"] * dense_mlp,
        "drop_moe_act": act_part,
        "drop_moe": moe_frac * moe_mlp,
        "drop_mla_up_proj": mla * fr["attention"] * (4.0 * qk + 2.0 * v),
    }


def layer_activation_bytes(
    model: Model, strategy: Strategy, precision: str = "bf16", moe_imbalance=1.0
) -> dict:
    """Per-layer activation bytes of one micro-batch on one rank: ``none`` (no recomputation),
    ``scores`` (its unfused ``s x s`` part), ``selective`` (the modules of
    ``strategy.recompute_modules`` recomputed) and ``full`` (the layer input only)."""
    st = strategy
    per = activation_bytes_per_token_layer(model, st, precision, moe_imbalance)
    tokens = st.microbatch * model.seq_len / st.cp
    sp = st.sequence_parallel
    rep_div = sp * st.tp + (1.0 - sp)  # replicated part: split by tp only with SP
    none = tokens * (per["replicated"] / rep_div + (per["split"] + per["scores"]) / st.tp)
    w = st.recompute_modules  # core_attn, layernorm, mlp, moe_act, moe, mla_up_proj
    dropped_split = (
        w[0] * per["drop_core_attn"]
        + w[2] * per["drop_mlp"]
        + w[3] * (1.0 - w[4]) * per["drop_moe_act"]
        + w[4] * per["drop_moe"]
        + w[5] * per["drop_mla_up_proj"]
    )
    dropped = tokens * (w[1] * per["drop_layernorm"] / rep_div + dropped_split / st.tp)
    selective = none - dropped
    full = tokens * 2.0 * model.hidden / rep_div
    return {
        "none": none,
        "scores": tokens * per["scores"] / st.tp,
        "selective": selective,
        "full": full,
    }


def stored_per_layer(act: dict, strategy: Strategy):
    """Activation bytes one layer stores per micro-batch under the strategy's recomputation
    (the recompute weights over none, selective and full; ``recompute_fraction`` of the
    layers fully recomputed with full), before offloading."""
    r = strategy.recompute
    phi = strategy.recompute_fraction
    full = phi * act["full"] + (1.0 - phi) * act["none"]
    return r[0] * act["none"] + r[1] * act["selective"] + r[2] * full


def _layer_param_parts(model: Model, strategy: Strategy) -> tuple:
    """``(dense, expert)`` parameters of one layer held by one rank (depth-averaged)."""
    st = strategy
    p = workload.layer_params(model)
    moe_frac = workload.fractions(model)["moe"]
    dense_layer = (
        p["attention"]
        + p["norms"]
        + (1.0 - moe_frac) * p["mlp"]
        + moe_frac * (p["router"] + p["shared"])
    )
    expert_layer = moe_frac * p["experts"]
    return dense_layer / st.tp, expert_layer / (expert_tp(st) * st.ep)


def stage_params(model: Model, strategy: Strategy, layers, first, last, mtp=0.0) -> dict:
    """Dense and expert parameters held by one rank of a stage of ``layers`` layers (before
    ZeRO); ``first``/``last`` (0/1) add the input embedding / the output layer (Megatron
    keeps a copy of a tied embedding on the last stage too); ``layer_dense`` without them.
    ``mtp`` multi-token-prediction modules on the stage add their projection and norms
    (:func:`codesign.workload.mtp_extra_params`; their transformer layers are in ``layers``)."""
    st = strategy
    dense_layer, expert_layer = _layer_param_parts(model, st)
    emb = model.vocab * model.hidden / st.tp
    mtp_extra = mtp * workload.mtp_extra_params(model) / st.tp
    return {
        "dense": layers * dense_layer + emb * (first + last) + mtp_extra,
        "expert": layers * expert_layer,
        "per_layer": dense_layer + expert_layer,
        "layer_dense": layers * dense_layer,
    }


def local_params(model: Model, strategy: Strategy, sm: Smoothing) -> dict:
    """Parameters held by one rank of a stage of ``L / p`` layers with the input embedding
    (plus the output layer when ``p = 1`` and the embeddings are untied): the first stage of
    an even split."""
    st = strategy
    one_stage = 1.0 - sm.step(st.pp - 1.0)
    out = one_stage * (1.0 - model.tied_embeddings)
    return stage_params(model, st, model.layers / st.pp, 1.0, out)


def stage_memory_bytes(
    model: Model,
    strategy: Strategy,
    eff: Efficiency,
    params_local: dict,
    num_microbatches,
    sm: Smoothing,
    grad_bytes=4.0,
    stage=0.0,
    layers=None,
    logits=1.0,
    precision: str = "bf16",
    act: dict | None = None,
    weight_copy_bytes=2.0,
    optimizer_state_bytes=12.0,
    layers_16bit=0.0,
    act_16bit: dict | None = None,
    in_flight_16bit=None,
    mtp_layers=0.0,
) -> dict:
    """Bytes per accelerator by term on one pipeline stage.

    ``params_local`` holds the ``dense`` and ``expert`` parameters this stage's rank stores
    before ZeRO sharding (see :func:`stage_params`) and ``per_layer`` those of
    one layer; ``stage`` is its 0-based index, ``layers`` its layer count (default ``L/p``)
    and ``logits`` 1 when it holds the output layer's fp32 logits buffer (the defaults
    describe the first stage of an even split with the buffer counted: the classic
    single-stage view).  ``act`` is :func:`layer_activation_bytes` when the caller has it.
    ``layers_16bit`` of the stage's layers run in 16 bits in a low-precision run
    (``Training.bf16_layers_start`` / ``_end``): they store ``act_16bit`` (the 16-bit
    :func:`layer_activation_bytes`) instead and keep no quantized copy of their weights (the
    cache counts ``1 - layers_16bit / layers`` of the stage's layer weights, each layer of the
    stage taken as holding an equal share).  ``in_flight_16bit`` is the number of their
    layer-micro-batches held at the stage's peak (:func:`codesign.pipeline.bf16_in_flight`:
    under the interleaved schedule the first and the last chunk hold other counts than the
    stage's average); default ``layers_16bit`` at the average, ``in_flight_chunks / v``.
    ``mtp_layers`` of the ``layers`` are multi-token-prediction modules: they sit in the
    stage's last chunk and store a layer's activations for as many micro-batches as it holds
    (:func:`codesign.pipeline.end_chunks_in_flight`: one on the last stage when interleaved);
    their norm inputs and projection input (``4 h`` 16-bit values per token, a few per cent
    of a layer's) are not counted.
    """
    st = strategy
    frac = zero_fractions(st.zero)  # ZeRO stage weights -> sharded fraction of each state
    pd, pe = params_local["dense"], params_local["expert"]
    shard_w = frac["weights"]
    # The quantized-weight cache covers the layers' GEMM weights, not the embedding and the
    # output layer (kept in BF16).
    # The stage's 16-bit layers keep no quantized copy.
    n = model.layers / st.pp if layers is None else layers
    cache = WEIGHT_CACHE_BYTES[precision_family(precision)] * (1.0 - safe_div(layers_16bit, n))
    layer_dense = params_local.get("layer_dense", pd)
    weights = weight_copy_bytes * sharded(pd, pe, shard_w, st)
    weights = weights + cache * sharded(layer_dense, pe, shard_w, st)
    grads = grad_bytes * sharded(pd, pe, frac["gradients"], st)
    optimizer = (
        optimizer_state_bytes
        * sharded(pd, pe, frac["optimizer"], st)
        * (1.0 - st.offload_optimizer)
    )

    if act is None:
        act = layer_activation_bytes(model, st, precision)
    per_layer = stored_per_layer(act, st)
    chunks = pipeline.in_flight_chunks(stage, st.pp, st.interleave, num_microbatches, sm)
    # The first stage's first chunk and the last stage's last hold a layer fewer where the
    # embedding and the loss take a slot, at their own counts in flight.
    e, o = pipeline.chunk_slots(stage, st)
    f, lc = pipeline.slot_chunks_in_flight(chunks, st.pp, st.interleave, num_microbatches, sm)
    activations = per_layer * ((n + e + o) / st.interleave * chunks - e * f - o * lc)
    _, last_chunk = pipeline.end_chunks_in_flight(stage, st.pp, st.interleave, num_microbatches, sm)
    activations = activations + per_layer * mtp_layers * (last_chunk - chunks / st.interleave)
    if act_16bit is not None:  # the 16-bit layers' extra stored activations
        if in_flight_16bit is None:
            in_flight_16bit = layers_16bit * chunks / st.interleave
        activations = activations + in_flight_16bit * (stored_per_layer(act_16bit, st) - per_layer)
    activations = activations * (1.0 - st.offload_activations)
    # Full recomputation re-materializes one layer at a time.
    activations = activations + st.recompute[2] * act["none"]

    tokens = st.microbatch * model.seq_len / st.cp
    sp_gather = st.sequence_parallel * 2.0 * tokens * model.hidden
    logits_buf = logits * 4.0 * tokens * model.vocab / st.tp
    layer_params = params_local.get("per_layer", (pd + pe) / jnp.maximum(n, 1.0))
    zero3_prefetch = shard_w * 2.0 * 2.0 * layer_params
    buffers = sp_gather + logits_buf + zero3_prefetch + eff.memory_overhead_gb * GB
    total = weights + grads + optimizer + activations + buffers
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "activations": activations,
        "buffers": buffers,
        "total": total,
    }
