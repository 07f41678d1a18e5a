"""Specifications: model, training, accelerator, network tiers, system, strategy, efficiency.

Every number is a dynamic float leaf (counts too: 7e10 parameters overflows int32), so
``jax.jit`` compiles once, ``jax.vmap`` sweeps any field and ``jax.grad`` differentiates any
field.  Only what changes the traced program is static (the precision, the pipeline
schedule is implied by ``interleave``).  Units are in the names: ``_gb`` (memory, in the binary
gigabytes HBM is listed in, 2^30 bytes: :data:`codesign.memory.GB`), ``_gbps`` (GB/s, 1e9
bytes per second, per accelerator per direction), ``_tbps`` (TB/s), ``_us``, ``_w``, ``_usd``.

Discrete choices that the relaxed model treats softly (recompute, ZeRO stage, placement) are
stored as dynamic arrays: ``recompute`` and ``zero`` as one-hot weight vectors over their
options and ``placement`` as a rank per parallel dimension.  The constructors
:func:`make_strategy` and friends take the readable forms (``"selective"``, ``1``,
``["tp", "cp", "ep", "dp", "pp"]``) and check them, raising :class:`SpecError` with the
field, the value and what is allowed, before any tracing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

from codesign.checks import (
    MODEL_PARTS,
    PART_FIELDS,
    PLAUSIBLE,
    PRECISIONS,
    SpecError,
    check_efficiency,
    check_model,
    check_system,
    check_training,
    plausibility_warnings,
    positive,
)
from codesign.efficiency import Efficiency
from codesign.goodput import Reliability
from codesign.pricing import Pricing

__all__ = [
    "SpecError", "Model", "Training", "Accelerator", "Tier", "System", "Strategy", "Efficiency",
    "RECOMPUTE_MODES", "ZERO_STAGES", "PARALLEL_DIMS", "PRECISIONS", "RECOMPUTE_MODULES",
    "precision_family", "make_strategy", "check_model", "check_system", "positive",
    "plausibility_warnings", "PLAUSIBLE", "check_efficiency", "check_training", "MODEL_PARTS",
    "PART_FIELDS", "placement_ranks", "placement_order",
]  # fmt: skip

RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
PARALLEL_DIMS = ("tp", "cp", "ep", "dp", "pp")
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "moe", "mla_up_proj")
"""Modules that selective recomputation can re-run (Megatron-Core ``recompute_modules``):
the attention core, the LayerNorms, the dense MLP, the MoE experts' activation function,
the whole MoE layer, and MLA's up-projections."""


def precision_family(precision: str) -> str:
    """``"half"``, ``"fp8"`` or ``"fp4"``: which peak rate the GEMMs of a precision use."""
    if precision in ("bf16", "fp16"):
        return "half"
    return "fp4" if "fp4" in precision else "fp8"


DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")


@struct.dataclass(kw_only=True)
class Model:
    """A decoder-only transformer (GPT, Llama, Mixtral, DeepSeek-style MoE).

    Dense layers follow Vaswani et al. 2017 with pre-LayerNorm; attention may use grouped
    query attention (Ainslie et al. 2023, ``kv_heads < heads``); the MLP may be gated
    (SwiGLU, Shazeer 2020: three ``hidden x ffn_hidden`` matrices instead of two).
    ``moe_layers`` of the ``layers`` replace their MLP by ``moe_experts`` experts of width
    ``moe_ffn_hidden`` with top-``moe_top_k`` routing plus ``moe_shared_experts`` always-on
    experts (Fedus et al. 2021; Dai et al. 2024).
    """

    layers: float
    hidden: float
    heads: float
    kv_heads: float
    ffn_hidden: float
    vocab: float
    seq_len: float
    head_dim: float = 0.0
    """Per-head dimension; 0 means ``hidden / heads``."""
    gated_mlp: float = 0.0
    """1 for a gated MLP (SwiGLU), 0 for a plain two-matrix MLP (GeLU)."""
    tied_embeddings: float = 0.0
    """1 when the output layer shares the input embedding matrix."""
    dropout: float = 0.0
    """1 when dropout masks are stored (Megatron GPT), 0 for dropout-free training (Llama)."""
    moe_experts: float = 0.0
    moe_top_k: float = 0.0
    moe_ffn_hidden: float = 0.0
    moe_shared_experts: float = 0.0
    moe_layers: float = 0.0
    """How many of the layers are MoE layers (0 for a dense model)."""
    q_lora_rank: float = 0.0
    """Multi-head latent attention (MLA, DeepSeek-V2/V3, arXiv:2405.04434): rank of the query
    down-projection (0: queries projected directly from the hidden state)."""
    kv_lora_rank: float = 0.0
    """MLA rank of the compressed key/value latent; 0 for standard (GQA) attention."""
    qk_rope_head_dim: float = 0.0
    """MLA per-head dimension of the decoupled rotary part of queries and keys."""
    qk_nope_head_dim: float = 0.0
    """MLA per-head dimension of the non-rotary part of queries and keys."""
    v_head_dim: float = 0.0
    """MLA per-head value dimension."""
    attention_window: float = 0.0
    """Sliding-window attention (Beltagy et al. 2020, "Longformer", arXiv:2004.05150; Mistral
    7B; GPT-OSS): tokens each query of a windowed layer attends to (0: no window)."""
    window_layers: float = 0.0
    """How many of the attention layers use ``attention_window`` (GPT-OSS 120B: 18 of 36,
    every other layer; Gemma 2: half); the others attend to the whole sequence."""
    mamba_layers: float = 0.0
    """Hybrid models (Nemotron-H, arXiv:2504.03624): how many of the layers have a Mamba-2
    (SSD, Dao & Gu 2024, arXiv:2405.21060) mixer instead of self-attention; 0: none."""
    mamba_state_dim: float = 0.0
    """Mamba-2 state size ``N`` (d_state)."""
    mamba_head_dim: float = 0.0
    """Mamba-2 head dimension ``P``."""
    mamba_heads: float = 0.0
    """Mamba-2 heads; ``d_inner = mamba_heads * mamba_head_dim`` (typically ``2 hidden``)."""
    mamba_groups: float = 0.0
    """Mamba-2 groups ``G`` of the input-dependent ``B`` and ``C`` (n_groups)."""
    mamba_conv_kernel: float = 0.0
    """Width of Mamba-2's depthwise causal convolution (4)."""
    mlp_free_layers: float = 0.0
    """Layers without any MLP (dense or MoE): ``layers - moe_layers - mlp_free_layers`` layers
    have a dense MLP; negative when a hybrid pattern has more MLP blocks than mixers."""
    mtp_layers: float = 0.0
    """Multi-token-prediction modules (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2; Megatron-Core
    ``mtp_num_layers``): each adds a transformer layer, a ``2h -> h`` projection and another
    pass of the output head with its own loss, on the stage that holds the output layer (the
    last; :mod:`codesign.workload`).  0: none."""
    parts: tuple | None = struct.field(pytree_node=False, default=None)
    """Which optional parts of the layer the compiled step contains, a tuple of
    :data:`MODEL_PARTS` (``"moe"``, ``"mla"``, ``"mamba"``, ``"mtp"``), or ``None`` (the
    default): all of them.  Static, as ``Training.precision``: a part left out is not traced,
    which makes a dense model's step about twice as fast to evaluate; the numbers are the same
    (its terms are zero when its fields, :data:`PART_FIELDS`, are).  Set by the evaluators, not
    by hand: :func:`codesign.evaluate`, the sweep, the batch evaluator and the optimizers take
    the parts from the concrete values (:func:`codesign.workload.with_parts`) and add the part
    of any model field that is a sweep axis.  A part left out with a nonzero field is an input
    error (checked before tracing); leave it ``None`` to vmap a model field from zero in your
    own traced code."""


@struct.dataclass(kw_only=True)
class Training:
    """What one step trains on, and for how long.

    ``global_batch`` is in sequences per step.  ``tokens`` (0 when not given) is the total
    number of training tokens, used for time and cost to train.
    """

    global_batch: float
    tokens: float = 0.0
    grad_reduce_bytes: float = 4.0
    """Bytes per gradient element, stored and reduced over data parallelism (Megatron: fp32
    main grads, 4; 2 when gradients are accumulated and reduced in bf16)."""
    weight_copy_bytes: float = 2.0
    """Bytes per parameter of the 16-bit working copy of the weights that is kept beside the
    fp32 master weights (Megatron-LM, NeMo, DeepSpeed: 2, Rajbhandari et al. 2020).  0 where
    the fp32 parameters are themselves the master weights and the 16-bit copy exists only
    while a layer runs: PyTorch FSDP with ``MixedPrecision(param_dtype=bf16)`` casts the
    gathered shard per unit and frees it (Zhao et al. 2023, "PyTorch FSDP", arXiv:2304.11277,
    Sec. 3.4), and ``torch.autocast`` casts per operation (MosaicML llm-foundry / Composer)."""
    optimizer_state_bytes: float = 12.0
    """Bytes of optimizer state per parameter, sharded by ZeRO: Adam's fp32 master weights and
    its two moments, 4 + 4 + 4 = 12 (Rajbhandari et al. 2020, Sec. 3.1: ``K = 12``).
    Megatron-Core's precision-aware optimizer (``use_precision_aware_optimizer`` with
    ``exp_avg_dtype = exp_avg_sq_dtype = bfloat16``) keeps the moments in bf16: 4 + 2 + 2 = 8,
    as Megatron-Bridge's DeepSeek-V3 and Moonlight recipes run (``recipes/deepseek/
    deepseek_v3.py``)."""
    bf16_layers_start: float = 0.0
    """Transformer layers at the start of the model that stay in 16 bits in an FP8/FP4 run:
    their GEMMs at the 16-bit peak, no quantization casts, 16-bit stored activations and
    tensor-parallel gathers (Megatron-Core ``first_last_layers_bf16`` with
    ``num_layers_at_start_in_bf16``; Megatron-Bridge's FP8 current-scaling recipe keeps 1, its
    perf scripts 0).  They sit on the first pipeline stage, which then runs slower than the
    others (:func:`codesign.pipeline.bf16_stage_layers`).  No effect in a 16-bit run."""
    bf16_layers_end: float = 0.0
    """Transformer layers at the end of the model that stay in 16 bits (``num_layers_at_end_
    in_bf16``), on the last pipeline stage; otherwise as ``bf16_layers_start``."""
    fp8_attention: float = 0.0
    """Fraction of the fused attention core run in FP8 (Transformer Engine's FP8
    dot-product attention: Megatron-Core ``fp8_dot_product_attention``, cuDNN's FP8 fused
    attention): its ``QK^T`` and ``PV`` matmuls run at the FP8 peak, their Q, K, V inputs are
    cast to 8 bits first, and the softmax exponentials cost what they did
    (:func:`codesign.compute.layer_times`; Shah et al. 2024, FlashAttention-3,
    arXiv:2407.08608, Sec. 3.3).  0 (the default, as Transformer Engine): the attention core
    stays in 16 bits; 1 needs an FP8 or FP4 ``precision`` and an accelerator with an FP8 peak.
    Megatron-Bridge's full-iteration MXFP8 perf recipes turn it on from release 0.5.0
    (container 26.06)."""
    outer_tokens_factor: float = 1.0
    """Tokens to train with reduced-frequency synchronization (``Strategy.outer_sync_interval``
    > 1) over those of synchronous training: the convergence penalty of DiLoCo-style
    training, which the step model does not predict and the user supplies (e.g. from the
    DiLoCo scaling laws of Charles et al. 2025, arXiv:2503.09799).  1: no penalty."""
    precision: str = struct.field(pytree_node=False, default="bf16")
    """GEMM precision: ``bf16``/``fp16`` (half-precision peak) or ``fp8`` (FP8 peak)."""
    first_last_layers_bf16: bool = struct.field(pytree_node=False, default=False)
    """Whether the step model has the 16-bit layers of a low-precision run
    (``bf16_layers_start`` / ``bf16_layers_end``; Megatron-Core's switch of the same name).
    Static, as ``precision``: it adds their terms to the compiled program, which costs an FP8
    sweep about a quarter of its speed, so a run without 16-bit layers leaves it off.
    :func:`codesign.load_run` turns it on when a count is above 0, and so does a sweep or a
    grid with a count on an axis; with it off the counts must be 0 (checked before tracing)."""


@struct.dataclass(kw_only=True)
class Accelerator:
    """One accelerator: dense peak FLOP/s, HBM, power and price."""

    peak_tflops: float
    """Dense BF16/FP16 tensor-core peak, TFLOP/s."""
    peak_tflops_fp8: float = 0.0
    """Dense FP8 peak, TFLOP/s; 0 (the default) when FP8 is unsupported or not given, which
    only an FP8 run rejects."""
    peak_tflops_fp4: float = 0.0
    """Dense FP4 (NVFP4/MXFP4) peak, TFLOP/s; 0 (the default) when unsupported or not given,
    which only an FP4 run rejects."""
    hbm_gb: float
    """HBM capacity per accelerator as the vendor lists it, in binary GB (2^30 bytes; an
    "80 GB" H100 holds 85.9e9 bytes: :data:`codesign.memory.GB`)."""
    hbm_tbps: float
    power_w: float
    price_usd: float
    host_link_gbps: float = 0.0
    """Bandwidth to host memory, GB/s per accelerator per direction (PCIe Gen5 x16: 64; the
    NVLink-C2C of a Grace superchip: more); 0 (the default): not given, no offloading."""
    exp_tera_per_s: float = 0.0
    """Exponentials per second of the special-function units (``MUFU.EX2``), 10^12/s: the
    softmax of a fused attention kernel runs on them, not on the tensor cores
    (:func:`codesign.compute.attention_core_time`).  0 (the default): not given, attention
    costs its tensor-core time only."""
    ref_hbm_gb: float = 0.0
    """The listed HBM capacity at which ``price_usd`` and ``power_w`` hold (catalog presets
    set every ``ref_*``); a design that moves ``hbm_gb`` pays the marginal price of
    :mod:`codesign.pricing`.  0: as listed (no adjustment)."""
    ref_hbm_tbps: float = 0.0
    """The listed HBM bandwidth (see ``ref_hbm_gb``)."""
    ref_peak_tflops: float = 0.0
    """The listed dense BF16 peak (see ``ref_hbm_gb``)."""
    ref_host_link_gbps: float = 0.0
    """The listed host-link bandwidth (see ``ref_hbm_gb``)."""


@struct.dataclass(kw_only=True)
class Tier:
    """One network tier, innermost first (scale-up, scale-out, scale-across).

    ``domain`` is how many accelerators can reach each other inside one instance of this
    tier (8 for an HGX NVLink domain, 72 for NVL72, the cluster size for a non-blocking
    fat tree).  ``bandwidth_gbps`` is GB/s per accelerator per direction, derated by
    ``oversubscription`` (>= 1, the taper of the fabric) for traffic leaving the inner tier.
    ``price_per_gbps_usd`` is the capital cost of one GB/s of this tier per accelerator
    (NICs, optics, switches and cables, amortized per accelerator).
    """

    domain: float
    bandwidth_gbps: float
    latency_us: float
    oversubscription: float = 1.0
    price_per_gbps_usd: float = 0.0
    power_w: float = 0.0
    """Network power per accelerator for this tier (NIC, optics, switch share), W."""
    efficiency: float = 1.0
    """Fraction of ``bandwidth_gbps`` that collectives achieve on this tier (calibrated)."""
    ref_domain: float = 0.0
    """The listed domain at which ``price_per_gbps_usd`` holds (fabric presets set every
    ``ref_*``); a scale-up tier built larger pays the domain premium of
    :mod:`codesign.pricing`.  0: as listed (no adjustment)."""
    ref_latency_us: float = 0.0
    """The listed latency (see ``ref_domain``)."""
    ref_oversubscription: float = 0.0
    """The listed oversubscription (see ``ref_domain``)."""
    cross_site: float = 0.0
    """1: this tier joins sites (buildings, regions; fabric presets of kind
    ``scale-across``): the tier that reduced-frequency synchronization (DiLoCo, see
    :attr:`Strategy.outer_sync_interval`) crosses only every ``H`` steps."""


@struct.dataclass(kw_only=True)
class System:
    """A cluster: ``num_accelerators`` of one accelerator type on ``tiers``.

    Datacenter economics: capex is amortized linearly over ``amortization_years``; power is
    the accelerators' and network's nameplate power times ``pue`` at ``usd_per_kwh``.
    """

    accelerator: Accelerator
    tiers: tuple[Tier, ...]
    num_accelerators: float
    host_capex_usd_per_accelerator: float = 0.0
    """Host (CPUs, DRAM, chassis) capex per accelerator, USD; 0: not counted unless given."""
    host_power_w_per_accelerator: float = 0.0
    """Host power per accelerator, W; 0: not counted unless given."""
    pue: float = 1.2
    """Power usage effectiveness.  Estimate for a modern AI datacenter (Google's fleet-wide
    trailing PUE was 1.10 in 2023; the Uptime Institute's 2023 survey average was 1.58)."""
    usd_per_kwh: float = 0.08
    """Electricity price, USD/kWh.  Estimate: about the 2023 US average industrial retail
    price (US EIA, Electric Power Monthly, Table 5.6.A)."""
    amortization_years: float = 4.0
    """Straight-line amortization period of the capex, years.  Estimate (accelerators are
    commonly written off over 4-6 years)."""
    pricing: Pricing = dataclasses.field(default_factory=Pricing)
    """Marginal prices of the hardware knobs (:mod:`codesign.pricing`; loaded configurations
    get the catalog fit of ``codesign/hardware/pricing.toml``)."""
    reliability: Reliability = dataclasses.field(default_factory=Reliability)
    """Failures, checkpoints and spares (:mod:`codesign.goodput`); the default is off."""


@struct.dataclass(kw_only=True)
class Strategy:
    """A parallel strategy (Megatron-LM/Megatron-Core semantics).

    ``tp * pp * dp * cp`` equals the accelerator count.  MoE layers are laid out by
    Megatron-Core's MoE parallel folding (Liu et al. 2025, arXiv:2504.14960): the same ranks
    are regrouped as ``etp x ep x edp`` for the experts, so ``ep * etp`` divides
    ``tp * dp * cp`` (``etp`` = 0 means "same as ``tp``", Megatron's default).
    ``recompute`` is a weight vector over ``RECOMPUTE_MODES`` and ``zero`` over
    ``ZERO_STAGES`` (one-hot for the exact model).  ``placement`` gives, for each of
    ``PARALLEL_DIMS`` (tp, cp, ep, dp, pp), its rank in the order of laying dimensions on the
    tiers, innermost first.  Flags are floats in [0, 1].  Build with :func:`make_strategy`.
    """

    tp: float
    pp: float
    dp: float
    cp: float = 1.0
    ep: float = 1.0
    microbatch: float = 1.0
    interleave: float = 1.0
    sequence_parallel: float = 1.0
    recompute: jnp.ndarray = None  # type: ignore[assignment]
    zero: jnp.ndarray = None  # type: ignore[assignment]
    placement: jnp.ndarray = None  # type: ignore[assignment]
    overlap_dp: float = 1.0
    """1 overlaps data-parallel communication with the backward pass."""
    overlap_tp: float = 0.0
    """1 overlaps tensor-parallel communication with GEMMs (userbuffers/TP-comm-overlap)."""
    flash_attention: float = 1.0
    """1: fused attention that never stores the s x s scores (Dao et al. 2022)."""
    etp: float = 0.0
    """Expert tensor-parallel degree; 0: the same as ``tp`` (Megatron-Core's default)."""
    pp_first_layers: float = 0.0
    """Layers on the first pipeline stage (Megatron-Core ``num_layers_in_first_pipeline_stage``);
    0: automatic (see :mod:`codesign.pipeline`)."""
    pp_last_layers: float = 0.0
    """Layers on the last pipeline stage (``num_layers_in_last_pipeline_stage``); 0: automatic."""
    pp_embedding_in_split: float = 0.0
    """1: the input embedding counts as one layer in the pipeline split
    (``account_for_embedding_in_pipeline_split``)."""
    pp_loss_in_split: float = 0.0
    """1: the output layer and loss count as one layer (``account_for_loss_in_pipeline_split``)."""
    recompute_fraction: float = 1.0
    """With ``recompute = "full"``: the fraction of each stage's layers that are fully
    recomputed (Megatron's ``recompute_method = "block"`` with ``recompute_num_layers``); the
    others store all their activations.  1: every layer (the classic full recomputation)."""
    recompute_modules: jnp.ndarray = None  # type: ignore[assignment]
    """With ``recompute = "selective"``: weights (0..1) over :data:`RECOMPUTE_MODULES`;
    Megatron's default is the attention core only."""
    offload_activations: float = 0.0
    """Fraction (0..1) of the stored activations offloaded to host memory over the host link
    during the forward pass and reloaded for the backward pass."""
    offload_optimizer: float = 0.0
    """Fraction (0..1) of the optimizer state kept in host memory and stepped by the CPU
    (Megatron-Core ``optimizer_cpu_offload`` with ``optimizer_offload_fraction``)."""
    offload_whole_layers: float = 0.0
    """1: activations are offloaded a whole layer at a time by Transformer Engine's CPU offload
    (Megatron-Core ``cpu_offloading`` with ``cpu_offloading_num_layers``, the only activation
    offloading up to Megatron-Bridge v0.2 / NeMo container 25.11), which Megatron-Core accepts
    only without pipeline parallelism, without activation recomputation and for fewer than all
    the layers (``TransformerConfig.__post_init__``); :data:`codesign.rules.RULES` enforces it.
    0 (the default): module-level offloading (``fine_grained_activation_offloading`` with
    ``offload_modules``, Megatron-Bridge v0.3.0 / 26.02 on), which works with pipeline
    parallelism, interleaving and selective recomputation.  Same cost model either way."""
    overlap_moe_comm: float = 0.0
    """1: expert-parallel all-to-all overlapped with the compute of another micro-batch
    (Megatron-Core ``overlap_moe_expert_parallel_comm``; DualPipe-style, DeepSeek-AI 2024)."""
    moe_hierarchical_dispatch: float = 0.0
    """1: tokens cross each outer tier once per destination domain and are forwarded inside
    it (DeepEP / HybridEP dispatch): top-k copies to the same domain are deduplicated."""
    moe_permute_copies: float = 2.0
    """Copies of the routed token slots each MoE layer makes in HBM beside its communication
    kernels, on dispatch and again on combine (Megatron-LM ``token_dispatcher.py``): 2 with
    Megatron-Core's ``alltoall`` dispatcher (``permute`` before the all-to-all,
    ``sort_chunks_by_idxs`` by local expert after it, the reverse two on combine; the sort is
    skipped, so 1, when a rank holds a single expert), 1 with the flex dispatcher, DeepEP
    (``fused_dispatch``, then one ``permute``) or HybridEP (``dispatch_with_permute``: its
    dispatch kernel, then its own permute kernel; the same on combine); 0 for a dispatcher that
    permutes inside the communication kernel."""
    moe_capacity_factor: float = 0.0
    """0 (the default): dropless MoE, Megatron-Core's default.  ``c > 0``: token drop with each
    expert's input padded to ``c`` times the balanced load (``moe_expert_capacity_factor`` with
    ``moe_pad_expert_input_to_capacity``; Fedus et al. 2021, arXiv:2101.03961, Sec. 2.2), as
    Megatron-Bridge's token-drop recipes run (``c = 1``): :func:`codesign.workload.moe_load`."""
    outer_sync_interval: float = 1.0
    """``H``: data parallelism reduces across sites (the ``cross_site`` tiers) only every
    ``H`` steps, an outer all-reduce of the pseudo-gradient (DiLoCo, Douillard et al. 2023,
    arXiv:2311.08105); inside a site it reduces every step.  1 (the default): synchronous
    training.  The convergence cost is outside the model: ``Training.outer_tokens_factor``."""
    outer_compression: float = 1.0
    """Bytes of the outer reduction relative to the gradient's (``grad_reduce_bytes`` per
    parameter): < 1 for a quantized or sparsified pseudo-gradient (e.g. 0.25: fp32 -> int8)."""
    outer_overlap: float = 0.0
    """Fraction (0..1) of the next ``H`` steps' compute the outer reduction may hide behind
    (streaming / overlapped DiLoCo, Douillard et al. 2025, arXiv:2501.18512); 0: it blocks."""
    overlap_param_gather: float = 1.0
    """With ``overlap_dp`` on and ZeRO 1/2 (Megatron's distributed optimizer): 1 overlaps the
    parameter all-gather after the optimizer step with the next step's forward pass, as the
    gradient reduce-scatter overlaps the backward pass (Megatron-Core ``overlap_param_gather``,
    which requires ``overlap_grad_reduce``); 0 leaves the all-gather exposed while the
    reduce-scatter stays hidden (Megatron-Bridge 25.11 turns it off for MXFP8 recipes: "keeping
    this enabled causes NaN grad norm").  No effect without ``overlap_dp`` (nothing overlaps)
    or under ZeRO 0/3."""


# --------------------------------------------------------------------------------------
# Construction from readable values, and checks of concrete inputs (before any tracing).
# --------------------------------------------------------------------------------------


def one_hot(index: int, n: int) -> np.ndarray:
    v = np.zeros(n)
    v[index] = 1.0
    return v


def placement_ranks(order: Sequence[str]) -> np.ndarray:
    """Ranks of (tp, cp, ep, dp, pp) from an innermost-first order of their names."""
    order = list(order)
    if sorted(order) != sorted(PARALLEL_DIMS):
        raise SpecError(
            "strategy.placement", order, f"a permutation of {list(PARALLEL_DIMS)} (innermost first)"
        )
    return np.array([float(order.index(d)) for d in PARALLEL_DIMS])


def placement_order(ranks) -> tuple[str, ...]:
    """The innermost-first order of (tp, cp, ep, dp, pp) from their ranks (the inverse of
    :func:`placement_ranks`; ties keep the default order).

    Example:
        >>> placement_order(placement_ranks(["tp", "pp", "cp", "ep", "dp"]))
        ('tp', 'pp', 'cp', 'ep', 'dp')
    """
    ranks = np.asarray(ranks, dtype=float)
    return tuple(PARALLEL_DIMS[i] for i in np.argsort(ranks, kind="stable"))


def make_strategy(
    *,
    tp: float,
    pp: float,
    dp: float,
    cp: float = 1,
    ep: float = 1,
    microbatch: float = 1,
    interleave: float = 1,
    sequence_parallel: bool = True,
    recompute: str = "selective",
    zero: int = 1,
    placement: Sequence[str] = DEFAULT_PLACEMENT,
    overlap_dp: bool = True,
    overlap_tp: bool = False,
    flash_attention: bool = True,
    etp: float = 0,
    pp_first_layers: float = 0,
    pp_last_layers: float = 0,
    pp_embedding_in_split: bool = False,
    pp_loss_in_split: bool = False,
    recompute_fraction: float = 1.0,
    recompute_modules: Sequence[str] = ("core_attn",),
    offload_activations: float = 0.0,
    offload_optimizer: float = 0.0,
    offload_whole_layers: bool = False,
    overlap_moe_comm: bool = False,
    moe_hierarchical_dispatch: bool = False,
    moe_permute_copies: float = 2.0,
    moe_capacity_factor: float = 0.0,
    outer_sync_interval: float = 1.0,
    outer_compression: float = 1.0,
    outer_overlap: float = 0.0,
    overlap_param_gather: bool = True,
) -> Strategy:
    """Build a :class:`Strategy` from readable values (checked).

    Example:
        >>> from codesign.specs import make_strategy
        >>> s = make_strategy(tp=8, pp=16, dp=24, recompute="selective", zero=1)
        >>> s.recompute.tolist(), s.zero.tolist()
        ([0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0])
    """
    if recompute not in RECOMPUTE_MODES:
        raise SpecError("strategy.recompute", recompute, f"one of {list(RECOMPUTE_MODES)}")
    if zero not in ZERO_STAGES or isinstance(zero, bool):
        raise SpecError("strategy.zero", zero, "an integer 0, 1, 2 or 3")
    for name, flag in (
        ("sequence_parallel", sequence_parallel), ("overlap_dp", overlap_dp),
        ("overlap_param_gather", overlap_param_gather), ("overlap_tp", overlap_tp),
        ("flash_attention", flash_attention), ("pp_embedding_in_split", pp_embedding_in_split),
        ("pp_loss_in_split", pp_loss_in_split), ("overlap_moe_comm", overlap_moe_comm),
        ("moe_hierarchical_dispatch", moe_hierarchical_dispatch),
        ("offload_whole_layers", offload_whole_layers),
    ):  # fmt: skip
        if not isinstance(flag, bool | np.bool_) and flag not in (0, 1):
            raise SpecError(f"strategy.{name}", flag, "true or false")
    if isinstance(recompute_modules, str):
        recompute_modules = [recompute_modules]
    for mod in recompute_modules:
        if mod not in RECOMPUTE_MODULES:
            raise SpecError(
                "strategy.recompute_modules",
                list(recompute_modules),
                f"a list of {list(RECOMPUTE_MODULES)}",
            )
    for name, frac in (
        ("recompute_fraction", recompute_fraction),
        ("offload_activations", offload_activations),
        ("offload_optimizer", offload_optimizer),
    ):
        v = positive(f"strategy.{name}", frac, allow_zero=True)
        if v > 1:
            raise SpecError(f"strategy.{name}", frac, "a fraction in [0, 1]")
    positive("strategy.moe_permute_copies", moe_permute_copies, allow_zero=True)
    positive("strategy.moe_capacity_factor", moe_capacity_factor, allow_zero=True)
    if positive("strategy.outer_sync_interval", outer_sync_interval, integer=True) < 1:
        raise SpecError("strategy.outer_sync_interval", outer_sync_interval, "an integer >= 1")
    if positive("strategy.outer_compression", outer_compression) > 1:
        raise SpecError("strategy.outer_compression", outer_compression, "a fraction in (0, 1]")
    if positive("strategy.outer_overlap", outer_overlap, allow_zero=True) > 1:
        raise SpecError("strategy.outer_overlap", outer_overlap, "a fraction in [0, 1]")
    return Strategy(
        tp=float(tp),
        pp=float(pp),
        dp=float(dp),
        cp=float(cp),
        ep=float(ep),
        microbatch=float(microbatch),
        interleave=float(interleave),
        sequence_parallel=float(bool(sequence_parallel)),
        recompute=one_hot(RECOMPUTE_MODES.index(recompute), 3),
        zero=one_hot(ZERO_STAGES.index(zero), 4),
        placement=placement_ranks(placement),
        overlap_dp=float(bool(overlap_dp)),
        overlap_tp=float(bool(overlap_tp)),
        flash_attention=float(bool(flash_attention)),
        etp=float(etp),
        pp_first_layers=float(pp_first_layers),
        pp_last_layers=float(pp_last_layers),
        pp_embedding_in_split=float(bool(pp_embedding_in_split)),
        pp_loss_in_split=float(bool(pp_loss_in_split)),
        recompute_fraction=float(recompute_fraction),
        recompute_modules=np.array([float(m in recompute_modules) for m in RECOMPUTE_MODULES]),
        offload_activations=float(offload_activations),
        offload_optimizer=float(offload_optimizer),
        offload_whole_layers=float(bool(offload_whole_layers)),
        overlap_moe_comm=float(bool(overlap_moe_comm)),
        moe_hierarchical_dispatch=float(bool(moe_hierarchical_dispatch)),
        moe_permute_copies=float(moe_permute_copies),
        moe_capacity_factor=float(moe_capacity_factor),
        outer_sync_interval=float(outer_sync_interval),
        outer_compression=float(outer_compression),
        outer_overlap=float(outer_overlap),
        overlap_param_gather=float(bool(overlap_param_gather)),
    )
