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
the activation output, dropout mask; MoE layers store ``top_k`` slots of expert width),
and two LayerNorm inputs ``4``.  With ``q = kv = h``, ``f = 4h``, no gate and dropout this
gives ``11 + 19 + 4 = 34`` and ``5 a s / h``.  The parts that tensor parallelism does not
split without sequence parallelism are the LayerNorm inputs (4), the inputs of the
QKV and first MLP GEMMs (2 + 2) and the two dropout masks (2): the "10" of eq. 2.
Fused (flash) attention stores no ``s x s`` tensors (Dao et al. 2022).

Pipeline stages hold the activations of up to ``pp`` in-flight micro-batches under 1F1B, so
the first stage stores ``L`` layers' worth; the interleaved schedule (``v > 1``) multiplies
that by ``1 + (p - 1)/(p v)`` (Korthikanti et al. Sec. 4.2.3).  Full recomputation also needs one
layer's full activations while it recomputes.  Context parallelism splits the sequence.

**Model states** follow Rajbhandari et al. 2020, "ZeRO" (arXiv:1910.02054): 2 bytes per
parameter of 16-bit weights, ``grad_bytes`` of gradients (4: Megatron's fp32 main grads,
the default; 2 when gradients are kept and reduced in bf16, as ZeRO's paper counts), and 12 of optimizer state (fp32 master weights, Adam m and v); ZeRO-1 shards
the optimizer state over the data-parallel group, ZeRO-2 also the gradients and ZeRO-3
also the weights.  Expert parameters shard over the expert-data-parallel group
(``dp cp / ep``).

**Buffers**: the all-gathered sequence-parallel activation (``2 s b h``), the gathered
weights of two layers under ZeRO-3 (prefetch), the logits in fp32 (``4 s b V / t``) and a
fixed ``memory_overhead_gb`` (CUDA context, allocator fragmentation).
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign import workload
from codesign.rules import sharded, zero_fractions
from codesign.smoothing import Smoothing
from codesign.specs import Efficiency, Model, Strategy

__all__ = ["activation_bytes_per_token_layer", "layer_activation_bytes", "memory_bytes"]


def activation_bytes_per_token_layer(model: Model, strategy: Strategy) -> dict:
    """Bytes stored per token per layer without recomputation, split by TP behaviour.

    Returns ``replicated`` (not split by TP unless sequence parallel), ``split`` (split by
    TP), ``scores`` (the unfused ``s x s`` attention tensors per token, split by TP; zero with
    flash attention) and ``attention_core`` (what selective recomputation discards).
    """
    m = model
    h = m.hidden
    q, kv = workload.attention_dims(m)
    do = m.dropout
    mats = 1.0 + m.gated_mlp
    moe_frac = m.moe_layers / m.layers
    dense_mlp = 2.0 * mats * m.ffn_hidden / h + 2.0 * m.ffn_hidden / h
    moe_mlp = (m.moe_top_k + m.moe_shared_experts) * (
        2.0 * mats * m.moe_ffn_hidden / h + 2.0 * m.moe_ffn_hidden / h
    ) + 2.0 * m.moe_top_k  # + dispatched copies of the tokens (top_k slots of width h)
    mlp_split = (1.0 - moe_frac) * dense_mlp + moe_frac * moe_mlp
    # Per-token bytes (in units of h bytes) of each group, see the module docstring.
    replicated = 4.0 + 2.0 + 2.0 + 2.0 * do
    attn_split = 2.0 * q / h + 4.0 * kv / h + 2.0
    scores = (1.0 - strategy.flash_attention) * 5.0 * m.heads * m.seq_len / h
    return {
        "replicated": replicated * h,
        "split": (attn_split + mlp_split) * h,
        "scores": scores * h,
        # Selective recomputation re-runs QK^T, softmax and AV: it drops the scores and,
        # with fused attention, nothing else of substance.
        "attention_core": scores * h,
    }


def layer_activation_bytes(model: Model, strategy: Strategy) -> dict:
    """Per-layer activation bytes of one micro-batch on one rank, for each recompute mode."""
    st = strategy
    per = activation_bytes_per_token_layer(model, st)
    tokens = st.microbatch * model.seq_len / st.cp
    sp = st.sequence_parallel
    rep_div = sp * st.tp + (1.0 - sp)  # replicated part: split by tp only with SP
    none = tokens * (per["replicated"] / rep_div + (per["split"] + per["scores"]) / st.tp)
    selective = none - tokens * per["attention_core"] / st.tp
    full = tokens * 2.0 * model.hidden / rep_div
    return {"none": none, "selective": selective, "full": full}


def memory_bytes(
    model: Model,
    strategy: Strategy,
    eff: Efficiency,
    params_local: dict,
    num_microbatches,
    sm: Smoothing,
    grad_bytes=4.0,
) -> dict:
    """Bytes per accelerator by term (the most loaded pipeline stage).

    ``params_local`` holds ``dense`` and ``expert`` parameters stored on one rank before ZeRO
    sharding (see :mod:`codesign.step`).
    """
    st = strategy
    frac = zero_fractions(st.zero)  # ZeRO stage weights -> sharded fraction of each state
    pd, pe = params_local["dense"], params_local["expert"]
    shard_w = frac["weights"]
    weights = 2.0 * sharded(pd, pe, shard_w, st)
    grads = grad_bytes * sharded(pd, pe, frac["gradients"], st)
    optimizer = 12.0 * sharded(pd, pe, frac["optimizer"], st)

    act = layer_activation_bytes(model, st)
    r = st.recompute  # weights over none, selective, full
    per_layer = r[0] * act["none"] + r[1] * act["selective"] + r[2] * act["full"]
    layers_per_stage = model.layers / st.pp
    in_flight = sm.min(st.pp, num_microbatches)
    # Interleaving (v > 1) stores (1 + (p-1)/(p v)) times as much (Korthikanti Sec. 4.2.3).
    interleave_factor = 1.0 + sm.step(st.interleave - 1.0) * (st.pp - 1.0) / (st.pp * st.interleave)
    activations = per_layer * layers_per_stage * in_flight * interleave_factor
    # Full recomputation re-materializes one layer at a time.
    activations = activations + r[2] * act["none"]

    tokens = st.microbatch * model.seq_len / st.cp
    sp_gather = st.sequence_parallel * 2.0 * tokens * model.hidden
    logits = 4.0 * tokens * model.vocab / st.tp
    layer_params = params_local.get("per_layer", (pd + pe) / jnp.maximum(layers_per_stage, 1.0))
    zero3_prefetch = shard_w * 2.0 * 2.0 * layer_params
    buffers = sp_gather + logits + zero3_prefetch + eff.memory_overhead_gb * 1e9
    total = weights + grads + optimizer + activations + buffers
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "activations": activations,
        "buffers": buffers,
        "total": total,
    }
