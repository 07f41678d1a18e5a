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
  (fused FlashAttention kernels, Dao et al. 2022), or, for the ``Training.fp8_attention``
  fraction of it, of the FP8 peak (FP8 fused attention; the exponentials do not speed up).
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

MoE layers follow Megatron-Core's parallel folding (Liu et al. 2025, arXiv:2504.14960): the
expert GEMMs are split ``etp`` ways (expert tensor parallelism) instead of ``tp``, and each
rank computes ``tokens top_k etp / tp`` expert-token slots (the ``tp`` ranks of a sequence
shard their tokens, the ``etp`` ranks of an expert gather theirs), i.e. ``top_k`` experts'
FLOPs per token spread over all ranks.  The grouped GEMM of the ``E / ep`` local experts runs
at the efficiency of its per-expert shape (few tokens per expert under-fill the machine) times
``grouped_gemm_eff * t / (t + grouped_gemm_half_tokens)`` for ``t`` tokens per expert (the
grouped kernel's per-expert overheads).  The slots are the busiest expert rank's
(:func:`codesign.workload.moe_load`): ``moe_imbalance`` times the balanced share dropless (the
default), ``c`` times it on every rank with token drop padded to capacity ``c``
(``Strategy.moe_capacity_factor``); the permutation and quantization copies move them all.

Hybrid models (:func:`codesign.workload.fractions`): on the Mamba fraction of the layers the
Mamba-2 projections (``in_proj`` column parallel, ``out_proj`` row parallel, both split ``tp``
ways) replace the attention projections and the chunked SSD scan
(:func:`codesign.workload.ssd_flops_per_token`, split ``tp`` ways by heads) runs at ``ssd_eff``
of the half-precision peak; it is counted with the GEMMs (matmuls, backward at
``backward_factor``, not re-run by ``core_attn`` recomputation).  The convolution and the
gated norm are element-wise work over the stored Mamba activations.  The attention core runs
on the attention fraction only and the MLP parts on the MLP-bearing fraction.  The sequence
mixer of a Mamba layer is assumed not context parallel (its ``s / cp`` tokens are taken as
independent).

Low precisions (:func:`peak_flops`): FP8 and FP4 GEMMs run at the accelerator's FP8/FP4 peak;
the output layer (logits) stays in BF16 (Transformer Engine recipes keep it in high
precision; Megatron-Core builds it outside Transformer Engine's FP8 autocast) and runs at the
16-bit GEMM efficiency (:func:`gemm_max_16bit`), and every quantized GEMM input is cast
first, a memory-bound pass of :data:`QUANT_BYTES` per element (forward inputs once, backward
gradients and transposed copies twice).  A low-precision run's
``Training.bf16_layers_start`` / ``_end`` layers are 16-bit layers (:func:`sixteen_bit_layer`
derives them from the low-precision layer, and the step model charges each such layer's
difference to its pipeline stage: :func:`codesign.pipeline.bf16_stage_layers`).
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign import workload
from codesign.rules import expert_tp
from codesign.smoothing import Smoothing, safe_div
from codesign.specs import Efficiency, Model, Strategy, System, precision_family

__all__ = [
    "GATHER_BYTES",
    "QUANT_BYTES",
    "flex_mix",
    "gemm_efficiency",
    "gemm_max_16bit",
    "gemm_time",
    "layer_times",
    "optimizer_step_bytes",
    "sixteen_bit_layer",
    "peak_flops",
]

QUANT_BYTES = {
    "bf16": 0.0,
    "fp16": 0.0,
    "fp8": 3.0,
    "fp8-delayed": 3.0,
    "fp8-current": 5.0,
    "mxfp8": 4.0,
    "fp4": 4.5,
    "nvfp4": 4.5,
    "mxfp4": 4.0,
}
"""HBM bytes moved per element of a quantized GEMM input (estimates by counting): delayed
scaling reads the 16-bit tensor and writes its 8-bit copy (2 + 1; the amax comes from
history); current scaling reads it once more for the amax (+2); MXFP8 writes row- and
column-wise block-scaled copies (2 + 1 + 1, scales 1/32 byte); NVFP4 adds a per-tensor amax
pass and a random Hadamard transform of the gradients (2 + 2 + 0.5); MXFP4 (2 + 2 x 0.5 +
scales + a Hadamard pass of 1).  0 for 16-bit GEMMs."""

GATHER_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8-delayed": 1.0,
    "fp8-current": 1.0,
    "mxfp8": 1.0 + 1.0 / 32.0,
    "fp4": 0.5 + 1.0 / 16.0,
    "nvfp4": 0.5 + 1.0 / 16.0,
    "mxfp4": 0.5 + 1.0 / 32.0,
}
"""Bytes per element of a sequence-parallel all-gather of a GEMM input.  Transformer Engine
quantizes the input before the tensor-parallel all-gather and gathers the quantized tensor,
with NCCL or Userbuffers alike (``transformer_engine/pytorch/module/layernorm_linear.py`` and
``linear.py``: the ``with_input_all_gather`` path passes the input quantizer to
``gather_along_first_dim`` / ``fill_userbuffers_buffer_for_all_gather``): one byte per FP8
element (per-tensor scale), plus one E8M0 scale per 32 elements for MXFP8, half a byte plus
one scale per 16 (NVFP4) or 32 (MXFP4) elements for FP4; 2 in 16-bit training (the element
sizes of :data:`codesign.memory.WEIGHT_CACHE_BYTES`, which holds two layouts per weight).
The reduce-scatters of GEMM outputs stay in 16 bits."""


def flex_mix(strategy: Strategy, ratio):
    """``1 - d + d * ratio`` for ``d = strategy.moe_hierarchical_dispatch``: the multiplier of
    an ``alltoall``-dispatcher efficiency value that gives the flex dispatcher's (DeepEP or
    HybridEP, ``d`` = 1), linear in between for the relaxation.

    Example:
        >>> from codesign.specs import Strategy
        >>> flex = Strategy(tp=1, pp=1, dp=8, moe_hierarchical_dispatch=1.0)
        >>> float(flex_mix(flex, 0.25))
        0.25
        >>> float(flex_mix(flex.replace(moe_hierarchical_dispatch=0.5), 0.25))
        0.625
        >>> float(flex_mix(flex.replace(moe_hierarchical_dispatch=0.0), 0.25))
        1.0
    """
    d = strategy.moe_hierarchical_dispatch
    return 1.0 - d + d * ratio


def moe_host_wait(model: Model, strategy: Strategy, eff: Efficiency, layer_fwd_s, sm: Smoothing):
    """Seconds one dropless MoE layer's forward waits for the host, per micro-batch, with the
    ``alltoall`` dispatcher: ``relu(moe_host_layer_us + E / ep x moe_host_expert_us -
    layer_fwd_s)`` for ``E / ep`` local experts (:class:`Efficiency`; Megatron-Core's dispatcher
    synchronizes with the host in every MoE layer's forward, ``token_dispatcher.py``
    ``cuda_sync_point``, so the host's launches are no longer hidden behind queued kernels);
    0 padded to capacity (``moe_capacity_factor`` > 0: static shapes) and with the flex
    dispatcher (``moe_hierarchical_dispatch`` = 1; linear in between).

    Example (64 local experts at 100 µs each, a 5 ms layer: 1.4 ms):
        >>> import codesign as cd
        >>> m = cd.Model(layers=2, hidden=1024, heads=8, kv_heads=8, ffn_hidden=4096,
        ...              vocab=32000, seq_len=2048, moe_experts=64, moe_top_k=2,
        ...              moe_ffn_hidden=1024, moe_layers=2)
        >>> st, eff = cd.Strategy(tp=1, pp=1, dp=8), cd.Efficiency(moe_host_expert_us=100.0)
        >>> round(float(moe_host_wait(m, st, eff, 5e-3, cd.Smoothing())), 6)
        0.0014
        >>> float(moe_host_wait(m, st.replace(moe_capacity_factor=1.0), eff, 5e-3, cd.Smoothing()))
        0.0
    """
    st = strategy
    local = workload.local_experts(model, st)
    host = (eff.moe_host_layer_us + local * eff.moe_host_expert_us) * 1e-6
    dropless = jnp.where(st.moe_capacity_factor > 0, 0.0, 1.0)
    wait = sm.relu(host - layer_fwd_s, scale=layer_fwd_s + 1e-9)
    return dropless * flex_mix(st, 0.0) * wait  # the flex dispatcher's wait: 0


def peak_flops(system: System, precision: str):
    """Peak GEMM FLOP/s of one accelerator at the training precision."""
    a = system.accelerator
    family = precision_family(precision)
    peak = {"half": a.peak_tflops, "fp8": a.peak_tflops_fp8, "fp4": a.peak_tflops_fp4}[family]
    return peak * 1e12


def gemm_efficiency(m, n, k, eff: Efficiency, sm: Smoothing):
    """Fraction of peak a GEMM of shape ``(m, n, k)`` achieves: ``gemm_max d / (d + gemm_half_dim)``
    with ``d = 1 / (1/m + 1/n + 1/k)`` its arithmetic intensity (smooth in every dimension, so the
    exact and relaxed models share it as is; ``sm`` is unused)."""
    d = safe_div(1.0, safe_div(1.0, m) + safe_div(1.0, n) + safe_div(1.0, k))
    return eff.gemm_max * safe_div(d, d + eff.gemm_half_dim)


def gemm_max_16bit(eff: Efficiency):
    """``gemm_max`` of a low-precision run's 16-bit GEMMs (the output layer, the 16-bit
    layers): ``eff.gemm_max_16bit``, or ``eff.gemm_max`` where that is 0 (not given)."""
    return jnp.where(eff.gemm_max_16bit > 0, eff.gemm_max_16bit, eff.gemm_max)


def gemm_time(m, n, k, peak, eff: Efficiency, sm: Smoothing):
    """Seconds for a ``(m x k) @ (k x n)`` GEMM: ``2 m n k / (peak * efficiency)`` with the
    efficiency of :func:`gemm_efficiency`, written without dividing by the dimensions (a
    divide is costly in a sweep's compiled loop):

        2 m n k / (peak gemm_max d / (d + d_half)) = 2 m n k (1 + d_half / d) / (peak gemm_max)
                                                  = 2 (m n k + d_half (n k + m k + m n)) / (peak gemm_max)

    since ``1 / d = 1/m + 1/n + 1/k``; 0 for an empty GEMM (a dimension 0), as before.

    >>> import codesign as cd
    >>> eff = cd.Efficiency(gemm_max=0.5, gemm_half_dim=100.0)
    >>> t = gemm_time(1000.0, 2000.0, 4000.0, 1e15, eff, cd.Smoothing())
    >>> d = 1.0 / (1 / 1000 + 1 / 2000 + 1 / 4000)
    >>> bool(abs(t / (2 * 1000 * 2000 * 4000 / (1e15 * 0.5 * d / (d + 100.0))) - 1) < 1e-12)
    True
    """
    work = 2.0 * (m * n * k + eff.gemm_half_dim * (n * k + m * k + m * n))
    return jnp.where(m * n * k > 0, safe_div(work, peak * eff.gemm_max), 0.0)


def _split(n, k, how, tp):
    if how == "n":
        return n / tp, k
    if how == "k":
        return n, k / tp
    return n, k


def attention_core_time(mm_s, exp_s, eff: Efficiency, sm: Smoothing):
    """Seconds of a fused attention core whose tensor-core work takes ``mm_s`` and whose
    softmax exponentials take ``exp_s`` on the special-function units: their sum, less
    ``softmax_overlap_eff`` of the shorter one (hidden behind the other), written
    ``(1 - o) (mm + exp) + o max(mm, exp)`` so that a zero term stays exact when relaxed.

    The exponential is the attention kernel's second bottleneck: an H100 SXM5 has 989 TFLOP/s
    of 16-bit matmul but 3.9 T/s of exponentials, so at head dimension 128 the exponentials
    take half the matmul's cycles (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608,
    Sec. 3.1); on Blackwell (GB200) the second batched GEMM waits for the softmax, and
    Blackwell Ultra doubles the exponential throughput for that reason (NVIDIA technical blog,
    "Making Softmax More Efficient with NVIDIA Blackwell Ultra", 2026).  FlashAttention-3
    overlaps the two by warp-group ping-pong (ibid. Sec. 3.2).

    >>> import codesign as cd
    >>> from codesign.compute import attention_core_time
    >>> eff = cd.Efficiency(softmax_overlap_eff=0.5)
    >>> float(attention_core_time(2.0, 1.0, eff, cd.Smoothing()))
    2.5
    """
    o = eff.softmax_overlap_eff
    return (1.0 - o) * (mm_s + exp_s) + o * sm.max(mm_s, exp_s)


def layer_times(
    model: Model,
    strategy: Strategy,
    system: System,
    eff: Efficiency,
    precision: str,
    act: dict,
    sm: Smoothing,
    fp8_attention=0.0,
) -> dict:
    """Forward seconds of one layer (dense and MoE averaged over depth) for one micro-batch.

    Returns the layer's parts, ``gemm`` (all its GEMMs and the Mamba layers' SSD scan),
    ``attention`` (the fused core),
    ``elementwise`` (memory-bound work, including MoE routing and quantization casts), and the
    parts that selective recomputation can re-run: ``score_elementwise`` (unfused ``s x s``
    softmax and dropout), ``layernorm``, ``mlp`` (dense MLP GEMMs and activation), ``moe_act``
    (the experts' activation function), ``moe`` (the whole MoE layer), ``mla_up`` (MLA
    up-projections); then ``logits`` (forward GEMM of the output layer, once per model, in
    16 bits, at the 16-bit ``gemm_max`` in a low-precision run: :func:`gemm_max_16bit`) and
    ``logits_elementwise`` (softmax cross-entropy over the logits: 16-bit GEMM
    output plus its fp32 copy, ``6 tokens V / t`` bytes times ``elementwise_traffic``), and
    ``mtp_proj`` (forward GEMM of one multi-token-prediction module's ``2h -> h`` projection).
    ``act`` holds the per-layer activation bytes of :func:`codesign.memory.layer_activation_bytes`.

    ``fp8_attention`` (``Training.fp8_attention``, in [0, 1]) is the fraction of the attention
    core's matmuls run at the FP8 peak instead of the 16-bit one, at the same
    ``attention_eff`` (an estimate: no fitted row ran FP8 attention), with a cast of its Q, K
    and V inputs (:data:`QUANT_BYTES` per element of the run's precision); the softmax
    exponentials and the stored activations are unchanged (Transformer Engine keeps its FP8
    attention's saved tensors in 8 bits, which the memory model does not count: it errs on
    the side of more memory).
    """
    m = model
    st = strategy
    peak = peak_flops(system, precision)
    peak_half = system.accelerator.peak_tflops * 1e12
    h = m.hidden
    mats = 2.0 + m.gated_mlp
    tokens = st.microbatch * m.seq_len / st.cp  # tokens of this rank's micro-batch
    hbm = system.accelerator.hbm_tbps * 1e12 * eff.hbm_eff

    def g(mm, nn, kk):
        return gemm_time(mm, nn, kk, peak, eff, sm)

    # The optional parts (MoE, MLA, Mamba, MTP; workload.has_part) are traced only where the
    # model has them: left out, each term below is what it is with the part's fields zero.
    has_moe, has_mla, has_mamba = (workload.has_part(m, p) for p in ("moe", "mla", "mamba"))
    gemms = workload.attention_gemms(m)
    attn_proj = sum(g(tokens, *_split(n, k, how, st.tp)) for n, k, how in gemms)
    mla_up = 0.0
    if has_mla:
        mla_up = g(tokens, *_split(gemms[2][0], gemms[2][1], "n", st.tp)) + g(
            tokens, *_split(gemms[4][0], gemms[4][1], "n", st.tp)
        )
    ff = m.ffn_hidden / st.tp
    dense_mlp = g(tokens, (mats - 1.0) * ff, h) + g(tokens, h, ff)
    fr = workload.fractions(m)
    moe_frac = fr["moe"]
    dense_frac = 1.0 - moe_frac - fr["free"]
    # MoE layer under parallel folding: router, routed experts (E/ep local experts of width
    # f_e/etp, tokens*top_k*etp/tp slots per rank), shared experts (split by tp).
    slots, fe_e, moe_mlp, moe_permute, moe_act = 0.0, 0.0, 0.0, 0.0, 0.0
    if has_moe:
        etp = expert_tp(st)
        fe_e = m.moe_ffn_hidden / etp
        fe = m.moe_ffn_hidden / st.tp
        local_experts = workload.local_experts(m, st)
        slots = tokens * m.moe_top_k * etp / st.tp * workload.moe_load(m, st, eff.moe_imbalance)
        per_expert = safe_div(slots, local_experts)
        grouped = eff.grouped_gemm_eff * safe_div(
            per_expert, per_expert + eff.grouped_gemm_half_tokens, 1.0
        )
        routed = safe_div(
            local_experts * (g(per_expert, (mats - 1.0) * fe_e, h) + g(per_expert, h, fe_e)),
            grouped,
        )
        shared = m.moe_shared_experts * (g(tokens, (mats - 1.0) * fe, h) + g(tokens, h, fe))
        router = g(tokens, jnp.maximum(m.moe_experts, 1.0), h)
        moe_mlp = router + routed + shared
    ssd = 0.0
    gemm = fr["attention"] * attn_proj + dense_frac * dense_mlp + moe_frac * moe_mlp
    if has_mamba:
        gemms_mamba = workload.mamba_gemms(m)
        mamba_proj = sum(g(tokens, *_split(n, k, how, st.tp)) for n, k, how in gemms_mamba)
        ssd = safe_div(tokens * workload.ssd_flops_per_token(m) / st.tp, peak_half * eff.ssd_eff)
        gemm = gemm + fr["mamba"] * (mamba_proj + ssd)

    qk, v = workload.attention_core_dims(m)
    # Widths of the keys and values the kernel reads (GQA: the kv heads; MLA: every head).
    kv_width = workload.attention_dims(m)[1]
    k_width, v_width = kv_width, kv_width
    if has_mla:
        mla = workload.is_mla(m)
        k_width = mla * qk + (1.0 - mla) * kv_width
        v_width = mla * v + (1.0 - mla) * kv_width
    keys = workload.attention_keys(m)
    attn_flops = fr["attention"] * 2.0 * tokens * keys * (qk + v) / st.tp
    # FP8 attention: the fp8_attention fraction of the matmuls at the FP8 peak (time blended,
    # so the relaxation can use a fraction); safe_div is 0 where the FP8 peak is not given,
    # which the rules reject before any tracing when fp8_attention > 0.
    peak_fp8 = system.accelerator.peak_tflops_fp8 * 1e12
    per_flop = safe_div(1.0 - fp8_attention, peak_half) + safe_div(fp8_attention, peak_fp8)
    attn_mm = safe_div(attn_flops * per_flop, eff.attention_eff)
    attn_mm_16 = safe_div(attn_flops, peak_half * eff.attention_eff)  # a 16-bit layer's
    # Softmax exponentials of the fused kernel: one per causal score (half the counted keys),
    # forward and again in the backward (which recomputes P); on the special-function units.
    exps = st.flash_attention * fr["attention"] * tokens * m.heads / st.tp * keys / 2.0
    attn_exp = safe_div(exps, system.accelerator.exp_tera_per_s * 1e12)
    attention = attention_core_time(attn_mm, attn_exp, eff, sm)
    attention_bwd = attention_core_time(eff.backward_factor * attn_mm, attn_exp, eff, sm)
    # MoE routing: dispatch and combine each make ``moe_permute_copies`` copies of the tokens'
    # 16-bit slots in HBM, read and written: 2 with Megatron-Core's alltoall dispatcher (permute,
    # then sort by local expert; the sort is skipped when a rank holds one expert), 1 with the
    # flex dispatcher (DeepEP or HybridEP: one permute kernel beside the communication), times
    # moe_permute_factor (router softmax/top-k, padding, unfused kernels; calibrated), times
    # moe_permute_flex_ratio with the flex dispatcher (calibrated apart).
    if has_moe:
        copies = jnp.minimum(st.moe_permute_copies, 1.0 + sm.step(local_experts - 1.0))
        permute_factor = eff.moe_permute_factor * flex_mix(st, eff.moe_permute_flex_ratio)
        moe_permute = moe_frac * 2.0 * copies * 2.0 * 2.0 * slots * h / hbm * permute_factor
    # Quantization casts of the GEMM inputs (per token: QKV and FC1 inputs h each, the
    # output-projection input v, the FC2 input f, expert slots likewise).
    quant_elems = (h + fr["mlp"] * h) + fr["attention"] * v / st.tp + dense_frac * ff
    if has_moe:
        quant_elems = quant_elems + moe_frac * (slots / jnp.maximum(tokens, 1.0)) * (h + fe_e)
    if has_mamba:
        quant_elems = quant_elems + fr["mamba"] * workload.mamba_dims(m)[0] / st.tp
    quant_elems = quant_elems + fp8_attention * fr["attention"] * (qk + k_width + v_width) / st.tp
    quant = QUANT_BYTES[precision] * tokens * quant_elems / hbm
    elementwise = eff.elementwise_traffic * act["none"] / hbm + moe_permute + quant
    score_elementwise = eff.elementwise_traffic * act["scores"] / hbm
    eff_16 = (
        eff if precision_family(precision) == "half" else eff.replace(gemm_max=gemm_max_16bit(eff))
    )
    logits = gemm_time(tokens, m.vocab / st.tp, h, peak_half, eff_16, sm)
    # a multi-token-prediction module's 2h -> h projection (column parallel, in the layers'
    # precision: a Transformer Engine linear of the MTP layer)
    mtp_proj = (
        gemm_time(tokens, h / st.tp, 2.0 * h, peak, eff, sm) if workload.has_part(m, "mtp") else 0.0
    )
    logits_elementwise = eff.elementwise_traffic * (2.0 + 4.0) * tokens * m.vocab / st.tp / hbm
    # Parts that selective recomputation re-runs (forward time of each).
    traffic = eff.elementwise_traffic / hbm
    act_fn = traffic * tokens * (mats - 1.0) * 2.0 * ff  # read FC1 output(s), write act
    if has_moe:
        moe_act = moe_frac * traffic * (slots * (mats - 1.0) * 2.0 * fe_e)
    return {
        "gemm": gemm,
        "attention": attention,
        "attention_bwd": attention_bwd,
        "elementwise": elementwise,
        "score_elementwise": score_elementwise,
        "layernorm": traffic * tokens * 2.0 * (1.0 + fr["mlp"]) * h,
        "mlp": dense_frac * (dense_mlp + act_fn),
        "moe_act": moe_act,
        "moe": moe_frac * (moe_mlp + moe_permute) + moe_act,
        "mla_up": fr["attention"] * mla_up,
        "logits": logits,
        "logits_elementwise": logits_elementwise,
        "mtp_proj": mtp_proj,
        # for :func:`sixteen_bit_layer`: the parts a 16-bit layer changes
        "gemm_lowp": gemm - fr["mamba"] * ssd,
        "mlp_gemm": dense_frac * dense_mlp,
        "moe_gemm": moe_frac * moe_mlp,
        "quant": quant,
        "attention_16bit": attention_core_time(attn_mm_16, attn_exp, eff, sm),
        "attention_bwd_16bit": attention_core_time(
            eff.backward_factor * attn_mm_16, attn_exp, eff, sm
        ),
        "traffic_per_byte": traffic,
    }


def sixteen_bit_layer(lt: dict, act: dict, act_16bit: dict, gemm_ratio) -> dict:
    """:func:`layer_times` of the same layer in 16 bits, from those of a low-precision layer.

    The GEMMs at the low-precision peak (every GEMM but the Mamba SSD scan) take
    ``gemm_ratio = (peak gemm_max) / (peak_16 gemm_max_16)`` times as long (a GEMM's time is
    ``2 m n k / (peak gemm_max d / (d + gemm_half_dim))``), the quantization casts and FP8
    attention go, and the element-wise work moves the 16-bit stored activations
    (``act_16bit``); equal to :func:`layer_times` evaluated in ``bf16`` at ``gemm_max_16``,
    at a fraction of its cost (a test checks it).
    """
    d = gemm_ratio - 1.0
    per_byte = lt["traffic_per_byte"]
    return {
        **lt,
        "gemm": lt["gemm"] + d * lt["gemm_lowp"],
        "attention": lt["attention_16bit"],
        "attention_bwd": lt["attention_bwd_16bit"],
        "elementwise": lt["elementwise"]
        - lt["quant"]
        + per_byte * (act_16bit["none"] - act["none"]),
        "score_elementwise": lt["score_elementwise"]
        + per_byte * (act_16bit["scores"] - act["scores"]),
        "mlp": lt["mlp"] + d * lt["mlp_gemm"],
        "moe": lt["moe"] + d * lt["moe_gemm"],
        "mla_up": lt["mla_up"] * gemm_ratio,
    }


def optimizer_step_bytes(optimizer_bytes_per_param, optimizer_state_bytes):
    """HBM bytes per local parameter of the optimizer step.

    ``Efficiency.optimizer_bytes_per_param`` counts Adam's step with 12 bytes of state (fp32
    master weights and two fp32 moments, read and written: 24 of its 34); an optimizer state of
    ``optimizer_state_bytes`` reads and writes ``2 (optimizer_state_bytes - 12)`` bytes more:
    26 with bf16 moments (Megatron-Core's precision-aware optimizer, 8 bytes of state).
    Never below 0.

    >>> float(optimizer_step_bytes(34.0, 12.0)), float(optimizer_step_bytes(34.0, 8.0))
    (34.0, 26.0)
    """
    return jnp.maximum(optimizer_bytes_per_param + 2.0 * (optimizer_state_bytes - 12.0), 0.0)
