"""Efficiency parameters: achieved fractions of peak rates, overlaps and fixed costs.

These are what the calibration fits; :mod:`codesign.specs` and the package re-export
:class:`Efficiency`.
"""

from __future__ import annotations

from flax import struct

__all__ = ["FLEX_RATIOS", "Efficiency"]

FLEX_RATIOS = ("moe_permute_flex_ratio", "ep_overlap_flex_ratio")
"""The :class:`Efficiency` fields that scale an ``alltoall``-dispatcher value for the flex
dispatcher (:func:`codesign.compute.flex_mix`): ratios in (0, 1], 1 by default."""


@struct.dataclass(kw_only=True)
class Efficiency:
    """Named efficiency parameters: achieved rates are not peak rates.

    These are the parameters the calibration fits (issue: calibration).  Defaults are
    round values typical of Megatron-LM on NVIDIA GPUs.

    * GEMMs run at ``gemm_max * d / (d + gemm_half_dim)`` of peak, where
      ``d = 1 / (1/m + 1/n + 1/k)`` is the GEMM's arithmetic intensity after sharding (FLOP per
      byte of 16-bit operands moved; a saturating roofline-style curve: small or skinny GEMMs under-fill
      the machine and are bandwidth bound).
    * Fused attention runs at ``attention_eff`` of peak.
    * Memory-bound element-wise work moves ``elementwise_traffic`` times the bytes of the
      activations it produces at ``hbm_eff`` of HBM bandwidth; the optimizer moves
      ``optimizer_bytes_per_param`` bytes per local parameter (Adam with fp32 master
      weights: read param, grad, m, v; write param, m, v, half copy).
    * Overlap efficiencies give the fraction of overlappable compute that actually hides
      communication.
    * The backward pass of the GEMMs and attention takes ``backward_factor`` times their
      forward time: 2 by FLOP count (Narayanan et al. 2021 Sec. 3.5), more in practice
      because weight- and data-gradient GEMMs and the attention backward run less
      efficiently than the forward kernels.
    * MoE layers move their dispatched tokens through HBM (permute and un-permute, forward
      and backward); dropless, the busiest expert rank holds ``moe_imbalance`` (>= 1) times
      the balanced routed slots, times its excess at uniform random routing
      (:func:`codesign.workload.moe_sampling_excess`), and sets the pace;
      token drop pads every expert to its capacity instead (Fedus et al. 2021's capacity
      factor, ``Strategy.moe_capacity_factor``; :func:`codesign.workload.moe_load`).
    * Dropless with the ``alltoall`` dispatcher, each MoE layer's forward waits for the host
      where its launches (``moe_host_layer_us``, plus ``moe_host_expert_us`` per local expert)
      outlast the layer (:func:`codesign.compute.moe_host_wait`).
    * A full recomputation re-runs each layer's forward pass in ``recompute_factor`` times its
      forward time: 1 by construction (Korthikanti et al. 2022 Sec. 5 count it as one extra
      forward), calibrated per software stack because frameworks differ in what their
      checkpointing re-runs and how well it overlaps (PyTorch FSDP activation checkpointing
      in MosaicML's llm-foundry measures well below one forward pass).
    """

    gemm_max: float = 0.80
    """Fraction of dense peak that large GEMMs reach.  Estimate: large BF16 cuBLAS GEMMs reach
    roughly 70-85 % of dense peak on A100/H100 (NVIDIA, "Matrix Multiplication Background"
    user guide); calibrated per accelerator and stack in ``codesign/hardware/efficiency.toml``."""
    gemm_max_16bit: float = 0.0
    """``gemm_max`` of the 16-bit GEMMs of an FP8/FP4 run: its output layer and its 16-bit
    layers (``Training.bf16_layers_start`` / ``_end``); 0 (the default): ``gemm_max``.  A
    calibrated preset sets it to its 16-bit value when the run's precision takes the
    low-precision one, and the calibration ties it to the fitted 16-bit ``gemm_max`` of the
    row's generation and stack (``codesign.calibration._grouping.TIED``)."""
    gemm_half_dim: float = 96.0
    """Arithmetic intensity (FLOP/byte) at which a GEMM reaches half of ``gemm_max``.
    Estimate (the curve's knee, near the A100/H100 machine balance); calibrated."""
    attention_eff: float = 0.55
    """Fraction of half-precision peak of fused attention.  Source: FlashAttention-2 reaches
    50-73 % of peak on A100 (Dao 2023, arXiv:2307.08691, Sec. 4.1); calibrated."""
    hbm_eff: float = 0.80
    """Fraction of HBM bandwidth that memory-bound kernels achieve.  Estimate (STREAM-like
    copies reach 80-90 % of HBM peak on A100/H100); calibrated."""
    elementwise_traffic: float = 2.0
    """Bytes moved per byte of stored activation by element-wise work: one read and one
    write (by construction)."""
    optimizer_bytes_per_param: float = 34.0
    """HBM bytes per local parameter of the optimizer step: Adam with fp32 master weights reads
    param, grad, m and v (16), writes param, m and v (12) and the 16-bit copy (2), and the
    global-norm gradient clipping reads the gradients once more (4): 34 (a count).  Another
    optimizer state size (``Training.optimizer_state_bytes``) moves twice its difference from
    12 more or less (:func:`codesign.compute.optimizer_step_bytes`: 26 with bf16 moments)."""
    dp_comm_eff: float = 1.0
    """Fraction of each tier's achieved collective bandwidth (``Tier.efficiency``) that the
    data-parallel and ZeRO reduce-scatters, all-gathers and all-reduces reach.  1: the same as
    any other collective.  Not calibrated: fitted per software stack, the mean held-out error
    was 3.55 %, against 3.50 % without it (better on 8 of 10 random splits; the ablation in
    ``experiments/results/validation.md``); the Megatron-Bridge value ranged 0.42-0.84 over the
    splits, set by a few rows whose data-parallel time ``dp_overlap_slowdown`` (the compute
    slowed by hidden DP traffic) prices as well.  A field for a user who measured their DP
    collectives under load (they share links, SMs and HBM with the backward kernels, pipeline
    sends and expert all-to-alls, which a bandwidth measured alone by ``nccl-tests`` does not
    see)."""
    dp_overlap_eff: float = 0.8
    """Fraction of the overlap window that hides data-parallel communication.  Estimate;
    calibrated (one value for every stack, near 0.93; what hiding costs the compute is
    ``dp_overlap_slowdown``)."""
    dp_overlap_slowdown: float = 0.0
    """Fraction of the hidden data-parallel communication's time that the compute it hides
    behind loses: NCCL's reduce-scatter and all-gather kernels run on the same SMs and HBM
    as the GEMMs they overlap, so hidden traffic is not free (Rashidi et al. 2021,
    'Enabling Compute-Communication Overlap in Distributed Deep Learning Training
    Platforms', ISCA: overlapped collectives slow the compute kernels they share the GPU
    with).  The step charges ``exposed + dp_overlap_slowdown * (t_dp - exposed)``, for the
    every-step reduction and for DiLoCo's outer all-reduce hidden behind the next H steps
    alike.  0 (the class default): hidden traffic costs nothing; calibrated per software stack
    (Composer's PyTorch FSDP near 0.56, Megatron-Bridge near 0.26, NeMo near 0.04)."""
    tp_overlap_eff: float = 0.8
    """Fraction of tensor-parallel communication hidden when TP-comm overlap is on.  Estimate."""
    cp_overlap_eff: float = 0.9
    """Fraction of attention time that hides the context-parallel K/V exchange.  Estimate
    (ring attention overlaps the exchange with blockwise attention, Liu et al. 2023)."""
    cp_step_overhead_us: float = 0.0
    """Fixed time of one ring-attention step of context parallelism, not hidden, µs: each of
    the ``cp - 1`` steps of a pass launches its own attention kernel on a ``s/cp`` block and
    synchronizes its send/receive (Transformer Engine's ring, Liu et al. 2023), which at
    small blocks costs far more than the block's FLOPs (a 256 x 256 block of 8 heads is
    ~0.3 GFLOP, under a microsecond of tensor-core time).  0 (the class default): none;
    calibrated."""
    p2p_overlap_eff: float = 0.0
    """Fraction of the steady-state pipeline send/receive hidden behind compute under the
    interleaved schedule (``interleave > 1``, Megatron-Core's ``overlap_p2p_comm``); at
    ``interleave = 1`` none is hidden whatever this value.  0: none, the conservative choice
    (an estimate); calibrated."""
    step_overhead_s: float = 0.0
    """Fixed time per step (launch, synchronization, data loading), s.  0 until calibrated."""
    memory_overhead_gb: float = 2.0
    """Fixed memory per accelerator (CUDA context, workspace, allocator fragmentation), GB
    (2^30 bytes, :data:`codesign.memory.GB`).  Estimate."""
    backward_factor: float = 2.0
    """Backward time of GEMMs and attention over their forward time.  Source: 2 by FLOP
    count (Narayanan et al. 2021, Sec. 3.5); calibrated."""
    moe_imbalance: float = 1.0
    """The router's skew: routed slots of the busiest expert rank over the balanced share (>= 1)
    in dropless MoE (``Strategy.moe_capacity_factor`` 0; padded to capacity the shapes are
    static and it does not apply), on top of the sampling excess of uniform random routing
    that the model always adds (:func:`codesign.workload.moe_sampling_excess`): that rank's
    expert GEMMs, all-to-all, permutation copies and stored activations
    (:func:`codesign.workload.moe_load`).  1: a router as balanced as uniform random routing.
    Not calibrated: the Megatron-Bridge benchmark runs force balanced routing, and fitted on
    them it read the token-drop and dropless recipes' other differences as imbalance (1.13,
    with a higher held-out error; ``experiments/results/validation.md``, ablation).  Set it
    from the routing statistics of the run to model."""
    recompute_factor: float = 1.0
    """Time of a full recomputation over the forward pass.  Source: 1, one extra forward
    (Korthikanti et al. 2022, Sec. 5); calibrated per software stack."""
    ep_overlap_eff: float = 0.5
    """Fraction of the expert-parallel all-to-all hidden behind another micro-batch's compute
    when ``overlap_moe_comm`` is on, with Megatron-Core's ``alltoall`` dispatcher (NCCL
    all-to-all).  Estimate; calibrated."""
    ep_overlap_flex_ratio: float = 1.0
    """The flex dispatcher's ``ep_overlap_eff`` over the ``alltoall`` dispatcher's, in (0, 1]
    (``Strategy.moe_hierarchical_dispatch`` = 1: DeepEP or HybridEP).  Its dispatch and
    combine kernels run on the GPU's SMs (DeepEP ``buffer.py``: ``Buffer.num_sms = 20``;
    Megatron-Core's ``moe_deepep_num_sms`` 20 and ``moe_hybridep_num_sms`` 24), so they take
    compute from the micro-batch they overlap.  A
    fractional ``moe_hierarchical_dispatch`` mixes the two values linearly.  1 (no
    difference) until calibrated."""
    softmax_overlap_eff: float = 0.0
    """Fraction of the shorter of a fused attention core's tensor-core time and its softmax
    exponential time hidden behind the other (:func:`codesign.compute.attention_core_time`).
    0: none, the GB200 kernel trace of NVIDIA's Blackwell Ultra softmax blog (the second
    GEMM waits for the softmax); FlashAttention-3 overlaps them (Shah et al. 2024,
    arXiv:2407.08608, Sec. 3.2); calibrated."""
    offload_overlap_eff: float = 0.8
    """Fraction of the activation offload/reload traffic hidden behind compute.  Estimate."""
    grouped_gemm_eff: float = 1.0
    """Efficiency of the experts' grouped GEMMs relative to a dense GEMM of the same shape.
    1 (by construction); calibrated per software stack, since the grouped kernel is the
    framework's (Transformer Engine's ``GroupedLinear`` runs the local experts' GEMMs through
    ``general_grouped_gemm`` on several cuBLAS streams, and later releases add a CUTLASS grouped
    kernel; ``codesign.calibration._grouping.PARAM_GROUPING``)."""
    grouped_gemm_half_tokens: float = 0.0
    """Tokens per expert at which a grouped GEMM runs at half the efficiency of a dense GEMM of
    its shape: the grouped kernel's per-expert tiles and launch are amortized over fewer rows
    (the multiplier is ``t / (t + grouped_gemm_half_tokens)``).  0: no penalty beyond the
    shape; calibrated per software stack, as ``grouped_gemm_eff`` (the kernel is the
    framework's)."""
    moe_host_layer_us: float = 0.0
    """Host time of a dropless MoE layer's forward with the ``alltoall`` dispatcher, besides
    its per-expert part (router, permutation and dispatch launches), µs; see
    :attr:`moe_host_expert_us`.  0 (the class default): none."""
    moe_host_expert_us: float = 0.0
    """Host time per local expert that a dropless MoE layer's forward waits for with the
    ``alltoall`` dispatcher, µs: Megatron-Core's ``MoEAlltoAllTokenDispatcher`` copies the
    tokens per expert to the host and synchronizes in every MoE layer's forward
    (``token_dispatcher.py``, ``cuda_sync_point``), so the GPU then waits for the host to
    launch the layer's per-expert work (Transformer Engine's ``GroupedLinear`` quantizes and
    runs each local expert's GEMMs on its own), which the kernels ahead of it no longer hide:
    ``relu(moe_host_layer_us + local experts x moe_host_expert_us - layer forward)``
    (:func:`codesign.compute.moe_host_wait`).  Padded to capacity (static shapes) or with
    the flex dispatcher the layer does not wait.  0 (the class default): none."""
    cpu_optimizer_gbps: float = 40.0
    """Host-memory bandwidth per accelerator available to a CPU-offloaded optimizer step, GB/s
    (it moves ``optimizer_bytes_per_param`` per parameter).  Estimate: a dual-socket host's
    ~300-400 GB/s of DRAM bandwidth shared by 8 accelerators, derated for Adam's access."""
    moe_permute_factor: float = 1.0
    """HBM traffic of MoE routing (router, permutation and un-permutation of the dispatched
    tokens) over its minimal count, with Megatron-Core's ``alltoall`` dispatcher.  1 (by
    construction); calibrated."""
    moe_permute_flex_ratio: float = 1.0
    """The flex dispatcher's ``moe_permute_factor`` over the ``alltoall`` dispatcher's, in
    (0, 1] (``Strategy.moe_hierarchical_dispatch`` = 1: DeepEP ``fused_dispatch`` or HybridEP
    ``dispatch_with_permute``, Megatron-LM ``token_dispatcher.py``, which handle the routing
    map and probabilities inside their dispatch kernels).  A fractional
    ``moe_hierarchical_dispatch`` mixes the two values linearly.  1 (no difference) until
    calibrated."""
    ssd_eff: float = 0.25
    """Fraction of half-precision peak of the chunked Mamba-2 SSD scan.  Estimate: the SSD
    kernels are batched small matmuls (chunk x state, chunk x head dim, each <= 256) plus
    memory-bound chunk-state passes; Dao & Gu 2024 (arXiv:2405.21060, Sec. 9.3) report SSD
    2-8x faster than Mamba-1's scan and only matching FlashAttention-2 near 2K tokens, well
    below fused attention's efficiency; calibrated."""
