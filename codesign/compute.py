"""Achieved compute time of one micro-batch on one accelerator.

Peak FLOP/s is not achieved.  Three kinds of work, each with a named efficiency
(:class:`~codesign.specs.Efficiency`):

* **GEMMs** run at ``peak * gemm_max * d / (d + gemm_half_dim)`` where
  ``d = m n k / (m k + k n + m n) = 1 / (1/m + 1/n + 1/k)`` is the GEMM's arithmetic intensity
  (its ``2 m n k`` FLOPs over the ``2 (m k + k n + m n)`` bytes of 16-bit operands it must move,
  after sharding), the quantity the roofline model (Williams, Waterman & Patterson 2009)
  compares with the machine balance.  This saturating curve is the shape of measured cuBLAS
  efficiency against matrix size (small or skinny GEMMs cannot fill the tensor cores and
  become bandwidth bound; NVIDIA's "Matrix Multiplication Background" guide).  ``d`` lies
  between a third of the smallest dimension and the smallest dimension, and unlike the
  smallest dimension alone it rewards the larger ``n`` and ``k`` of wider models at the same
  token count (Korthikanti et al. 2022's 1T model against their 175B one).
* **Attention** (``QK^T``, softmax, ``AV``) runs at ``attention_eff`` of the half-precision peak
  (fused FlashAttention kernels, Dao et al. 2022; FP8 attention is not assumed).
* **Element-wise** work (norms, activations, dropout, residuals, the unfused softmax when
  flash attention is off) is memory bound: it moves ``elementwise_traffic`` times the bytes of
  the activations a layer stores (Korthikanti et al. 2022 Sec. 4, which counts exactly those
  tensors) at ``hbm_eff`` of HBM bandwidth.

Backward costs twice the forward FLOPs (Narayanan et al. 2021 Sec. 3.5) and twice the
element-wise traffic; its time is ``backward_factor`` (2 by default, calibrated) times the
forward GEMM and attention time (see :mod:`codesign.step`).  Tensor parallelism splits the GEMMs and attention heads ``tp`` ways
(Shoeybi et al. 2019); context parallelism splits the sequence ``cp`` ways (each rank
attends its ``s/cp`` queries to all ``s`` keys); expert parallelism spreads the experts of
an MoE layer over ``ep`` ranks, each rank processing ``top_k`` expert slots per local token.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign import workload
from codesign.smoothing import Smoothing, safe_div
from codesign.specs import Efficiency, Model, Strategy, System

__all__ = ["gemm_efficiency", "gemm_time", "layer_times", "peak_flops"]


def peak_flops(system: System, precision: str):
    """Peak GEMM FLOP/s of one accelerator at the training precision."""
    a = system.accelerator
    return (a.peak_tflops_fp8 if precision == "fp8" else a.peak_tflops) * 1e12


def gemm_efficiency(m, n, k, eff: Efficiency, sm: Smoothing):
    """Fraction of peak a GEMM of shape ``(m, n, k)`` achieves: ``gemm_max d / (d + gemm_half_dim)``
    with ``d = 1 / (1/m + 1/n + 1/k)`` its arithmetic intensity (smooth in every dimension, so the
    exact and relaxed models share it as is; ``sm`` is unused)."""
    d = safe_div(1.0, safe_div(1.0, m) + safe_div(1.0, n) + safe_div(1.0, k))
    return eff.gemm_max * safe_div(d, d + eff.gemm_half_dim)


def gemm_time(m, n, k, peak, eff: Efficiency, sm: Smoothing):
    """Seconds for a ``(m x k) @ (k x n)`` GEMM: ``2 m n k / (peak * efficiency)``."""
    return safe_div(2.0 * m * n * k, peak * gemm_efficiency(m, n, k, eff, sm))


def layer_times(
    model: Model,
    strategy: Strategy,
    system: System,
    eff: Efficiency,
    precision: str,
    act_bytes_layer,
    sm: Smoothing,
    score_bytes_layer=0.0,
) -> dict:
    """Forward seconds of one layer (dense and MoE averaged over depth) for one micro-batch.

    Returns ``gemm``, ``attention``, ``elementwise`` (forward, one layer), ``score_elementwise``
    (the part of ``elementwise`` spent on unfused ``s x s`` softmax and dropout tensors, which
    selective recomputation re-runs), ``logits`` (forward GEMM of the output layer, once per
    model) and ``logits_elementwise`` (forward softmax cross-entropy over the logits: 16-bit
    GEMM output plus its fp32 copy, ``6 tokens V / t`` bytes times ``elementwise_traffic``).
    ``act_bytes_layer`` is the per-layer activation footprint without recomputation and
    ``score_bytes_layer`` its ``s x s`` part (from :mod:`codesign.memory`).
    """
    m = model
    st = strategy
    peak = peak_flops(system, precision)
    peak_half = system.accelerator.peak_tflops * 1e12
    h = m.hidden
    q, kv = workload.attention_dims(m)
    mats = 2.0 + m.gated_mlp
    tokens = st.microbatch * m.seq_len / st.cp  # tokens of this rank's micro-batch

    def g(mm, nn, kk):
        return gemm_time(mm, nn, kk, peak, eff, sm)

    attn_proj = g(tokens, (q + 2.0 * kv) / st.tp, h) + g(tokens, h, q / st.tp)
    ff = m.ffn_hidden / st.tp
    dense_mlp = g(tokens, (mats - 1.0) * ff, h) + g(tokens, h, ff)
    # MoE layer: router, routed experts (E/ep local experts, top_k slots per token), shared.
    fe = m.moe_ffn_hidden / st.tp
    local_experts = jnp.maximum(safe_div(m.moe_experts, st.ep, 1.0), 1.0)
    slots = tokens * m.moe_top_k  # expert-token pairs this rank computes (balanced routing)
    per_expert = safe_div(slots, local_experts)
    routed = (
        local_experts
        * (g(per_expert, (mats - 1.0) * fe, h) + g(per_expert, h, fe))
        * eff.moe_imbalance
    )
    shared = m.moe_shared_experts * (g(tokens, (mats - 1.0) * fe, h) + g(tokens, h, fe))
    router = g(tokens, jnp.maximum(m.moe_experts, 1.0), h)
    moe_mlp = router + routed + shared
    moe_frac = safe_div(m.moe_layers, m.layers)
    gemm = attn_proj + (1.0 - moe_frac) * dense_mlp + moe_frac * moe_mlp

    attn_flops = 4.0 * tokens * m.seq_len * q / st.tp
    attention = safe_div(attn_flops, peak_half * eff.attention_eff)
    hbm = system.accelerator.hbm_tbps * 1e12 * eff.hbm_eff
    # MoE token permutation: dispatch and combine each read and write top_k copies of the
    # tokens (16-bit) in HBM.
    moe_permute = moe_frac * 2.0 * 2.0 * 2.0 * slots * h / hbm
    elementwise = eff.elementwise_traffic * act_bytes_layer / hbm + moe_permute
    score_elementwise = eff.elementwise_traffic * score_bytes_layer / hbm
    logits = g(tokens, m.vocab / st.tp, h)
    # Output layer's softmax cross-entropy: memory bound over the tokens x V/tp logits, the
    # 16-bit GEMM output and its fp32 copy (Megatron's vocab-parallel cross entropy upcasts;
    # Korthikanti et al. 2022 Sec. 4.3 store 4 s b V / t bytes for it).
    logits_elementwise = eff.elementwise_traffic * (2.0 + 4.0) * tokens * m.vocab / st.tp / hbm
    return {
        "gemm": gemm,
        "attention": attention,
        "elementwise": elementwise,
        "score_elementwise": score_elementwise,
        "logits": logits,
        "logits_elementwise": logits_elementwise,
    }
