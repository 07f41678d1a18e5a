"""Specifications: model, training, accelerator, network tiers, system, strategy, efficiency.

Every number is a dynamic float leaf (counts too: 7e10 parameters overflows int32), so
``jax.jit`` compiles once, ``jax.vmap`` sweeps any field and ``jax.grad`` differentiates any
field.  Only what changes the traced program is static (the precision, the pipeline
schedule is implied by ``interleave``).  Units are in the names: ``_gb`` (1e9 bytes),
``_gbps`` (GB/s per accelerator per direction), ``_tbps`` (TB/s), ``_us``, ``_w``, ``_usd``.

Discrete choices that the relaxed model treats softly (recompute, ZeRO stage, placement) are
stored as dynamic arrays: ``recompute`` and ``zero`` as one-hot weight vectors over their
options and ``placement`` as a rank per parallel dimension.  The constructors
:func:`make_strategy` and friends take the readable forms (``"selective"``, ``1``,
``["tp", "cp", "ep", "dp", "pp"]``) and check them, raising :class:`SpecError` with the
field, the value and what is allowed, before any tracing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = [
    "SpecError",
    "Model",
    "Training",
    "Accelerator",
    "Tier",
    "System",
    "Strategy",
    "Efficiency",
    "RECOMPUTE_MODES",
    "ZERO_STAGES",
    "PARALLEL_DIMS",
    "PRECISIONS",
    "make_strategy",
    "check_model",
    "check_system",
    "positive",
    "plausibility_warnings",
    "PLAUSIBLE",
    "check_efficiency",
    "check_training",
]

RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
PARALLEL_DIMS = ("tp", "cp", "ep", "dp", "pp")
PRECISIONS = ("bf16", "fp16", "fp8")
DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")


class SpecError(ValueError):
    """Invalid input: names the field, the value and what is allowed."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} = {value!r} is invalid: {allowed}")


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
    precision: str = struct.field(pytree_node=False, default="bf16")
    """GEMM precision: ``bf16``/``fp16`` (half-precision peak) or ``fp8`` (FP8 peak)."""


@struct.dataclass(kw_only=True)
class Accelerator:
    """One accelerator: dense peak FLOP/s, HBM, power and price."""

    peak_tflops: float
    """Dense BF16/FP16 tensor-core peak, TFLOP/s."""
    peak_tflops_fp8: float = 0.0
    """Dense FP8 peak, TFLOP/s; 0 (the default) when FP8 is unsupported or not given, which
    only an FP8 run rejects."""
    hbm_gb: float
    hbm_tbps: float
    power_w: float
    price_usd: float


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


@struct.dataclass(kw_only=True)
class Strategy:
    """A parallel strategy (Megatron-LM/Megatron-Core semantics).

    ``tp * pp * dp * cp`` equals the accelerator count; ``ep`` divides ``dp * cp``
    (expert parallelism is folded into the data- and context-parallel ranks).
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
      and backward) and the busiest expert rank takes ``moe_imbalance`` (>= 1) times the
      balanced expert time (routing is never perfectly balanced; Fedus et al. 2021's
      capacity factor).
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
    global-norm gradient clipping reads the gradients once more (4): 34 (a count)."""
    dp_overlap_eff: float = 0.8
    """Fraction of the overlap window that hides data-parallel communication.  Estimate;
    calibrated."""
    tp_overlap_eff: float = 0.8
    """Fraction of tensor-parallel communication hidden when TP-comm overlap is on.  Estimate."""
    cp_overlap_eff: float = 0.9
    """Fraction of attention time that hides the context-parallel K/V exchange.  Estimate
    (ring attention overlaps the exchange with blockwise attention, Liu et al. 2023)."""
    p2p_overlap_eff: float = 0.0
    """Fraction of steady-state pipeline send/receive hidden behind compute.  0: none, the
    conservative choice (an estimate); calibrated."""
    step_overhead_s: float = 0.0
    """Fixed time per step (launch, synchronization, data loading), s.  0 until calibrated."""
    memory_overhead_gb: float = 2.0
    """Fixed memory per accelerator (CUDA context, workspace, allocator fragmentation), GB.
    Estimate."""
    backward_factor: float = 2.0
    """Backward time of GEMMs and attention over their forward time.  Source: 2 by FLOP
    count (Narayanan et al. 2021, Sec. 3.5); calibrated."""
    moe_imbalance: float = 1.0
    """Busiest expert rank's time over the balanced time (>= 1).  1: perfect balance (by
    construction); calibrated."""
    recompute_factor: float = 1.0
    """Time of a full recomputation over the forward pass.  Source: 1, one extra forward
    (Korthikanti et al. 2022, Sec. 5); calibrated per software stack."""


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
        ("sequence_parallel", sequence_parallel),
        ("overlap_dp", overlap_dp),
        ("overlap_tp", overlap_tp),
        ("flash_attention", flash_attention),
    ):
        if not isinstance(flag, bool | np.bool_) and flag not in (0, 1):
            raise SpecError(f"strategy.{name}", flag, "true or false")
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
    )


def positive(field: str, value, integer: bool = False, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecError(field, value, "a number") from None
    if not math.isfinite(v):
        raise SpecError(field, value, "a finite number")
    if allow_zero and v == 0:
        return v
    if v <= 0:
        raise SpecError(field, value, "a positive number" + (" or 0" if allow_zero else ""))
    if integer and v != round(v):
        raise SpecError(field, value, "a positive integer")
    return v


def check_model(m: Model) -> None:
    """Check a concrete :class:`Model`; raise :class:`SpecError` on the first bad field."""
    for f in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len"):
        positive(f"model.{f}", getattr(m, f), integer=True)
    if float(m.heads) % float(m.kv_heads):
        raise SpecError("model.kv_heads", m.kv_heads, f"a divisor of model.heads = {m.heads:g}")
    positive("model.head_dim", m.head_dim, integer=True, allow_zero=True)
    if float(m.head_dim) == 0 and float(m.hidden) % float(m.heads):
        raise SpecError(
            "model.hidden",
            m.hidden,
            f"a multiple of model.heads = {m.heads:g} (or set model.head_dim)",
        )
    for f in ("gated_mlp", "tied_embeddings", "dropout"):
        if float(getattr(m, f)) not in (0.0, 1.0):
            raise SpecError(f"model.{f}", getattr(m, f), "true or false")
    for f in ("moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_layers"):
        positive(f"model.{f}", getattr(m, f), integer=True, allow_zero=True)
    if m.moe_experts > 0:
        if not 1 <= m.moe_top_k <= m.moe_experts:
            raise SpecError(
                "model.moe_top_k", m.moe_top_k, f"between 1 and moe_experts = {m.moe_experts:g}"
            )
        if m.moe_ffn_hidden <= 0:
            raise SpecError("model.moe_ffn_hidden", m.moe_ffn_hidden, "positive for an MoE model")
        if not 0 < m.moe_layers <= m.layers:
            raise SpecError(
                "model.moe_layers", m.moe_layers, f"between 1 and layers = {m.layers:g}"
            )


def check_system(s: System) -> None:
    """Check a concrete :class:`System`; raise :class:`SpecError` on the first bad field."""
    a = s.accelerator
    for f in ("peak_tflops", "hbm_gb", "hbm_tbps"):
        positive(f"system.{f}", getattr(a, f))
    for f in ("peak_tflops_fp8", "power_w", "price_usd"):
        positive(f"system.{f}", getattr(a, f), allow_zero=True)
    n = positive("system.num_accelerators", s.num_accelerators, integer=True)
    if len(s.tiers) == 0:
        raise SpecError("system.tiers", [], "at least one [[system.tiers]] table (innermost first)")
    prev = 1.0
    for i, t in enumerate(s.tiers):
        d = positive(f"system.tiers[{i}].domain", t.domain, integer=True)
        # Domains grow outwards; a domain larger than the cluster counts as the cluster
        # (one 8-GPU node holding a 1-GPU run is fine).
        if min(d, n) < min(prev, n):
            raise SpecError(
                f"system.tiers[{i}].domain",
                t.domain,
                f"at least the inner tier's domain ({prev:g})",
            )
        prev = max(d, prev)
        positive(f"system.tiers[{i}].bandwidth_gbps", t.bandwidth_gbps)
        positive(f"system.tiers[{i}].latency_us", t.latency_us, allow_zero=True)
        if float(t.oversubscription) < 1:
            raise SpecError(
                f"system.tiers[{i}].oversubscription", t.oversubscription, "a ratio >= 1"
            )
        positive(f"system.tiers[{i}].price_per_gbps_usd", t.price_per_gbps_usd, allow_zero=True)
        positive(f"system.tiers[{i}].power_w", t.power_w, allow_zero=True)
        eff = positive(f"system.tiers[{i}].efficiency", t.efficiency)
        if eff > 1:
            raise SpecError(f"system.tiers[{i}].efficiency", t.efficiency, "a fraction in (0, 1]")
    if prev < n:
        raise SpecError(
            "system.tiers",
            f"outermost domain {prev:g}",
            f"the outermost tier must reach all num_accelerators = {n:g} (add a tier)",
        )
    if not positive("system.pue", s.pue) >= 1:
        raise SpecError("system.pue", s.pue, "a ratio >= 1 (facility power over IT power)")
    positive("system.amortization_years", s.amortization_years)
    for f in ("usd_per_kwh", "host_capex_usd_per_accelerator", "host_power_w_per_accelerator"):
        positive(f"system.{f}", getattr(s, f), allow_zero=True)


_FRACTIONS = ("gemm_max", "attention_eff", "hbm_eff")
_OVERLAPS = ("dp_overlap_eff", "tp_overlap_eff", "cp_overlap_eff", "p2p_overlap_eff")


def check_efficiency(eff: Efficiency) -> None:
    """Check concrete efficiency parameters: rates in (0, 1], overlaps in [0, 1], sizes >= 0."""
    for f in _FRACTIONS:
        v = positive(f"efficiency.{f}", getattr(eff, f))
        if v > 1:
            raise SpecError(f"efficiency.{f}", getattr(eff, f), "a fraction of peak in (0, 1]")
    for f in _OVERLAPS:
        v = positive(f"efficiency.{f}", getattr(eff, f), allow_zero=True)
        if v > 1:
            raise SpecError(f"efficiency.{f}", getattr(eff, f), "a fraction in [0, 1]")
    for f in (
        "elementwise_traffic",
        "optimizer_bytes_per_param",
        "backward_factor",
        "recompute_factor",
    ):
        positive(f"efficiency.{f}", getattr(eff, f))
    if float(eff.moe_imbalance) < 1:
        raise SpecError("efficiency.moe_imbalance", eff.moe_imbalance, "a factor >= 1")
    for f in ("gemm_half_dim", "step_overhead_s", "memory_overhead_gb"):
        positive(f"efficiency.{f}", getattr(eff, f), allow_zero=True)


PLAUSIBLE = {
    "system.peak_tflops": (1.0, 1e5, "TFLOP/s per accelerator"),
    "system.hbm_gb": (1.0, 1e4, "GB per accelerator"),
    "system.hbm_tbps": (0.05, 1e3, "TB/s per accelerator"),
    "system.tiers[].bandwidth_gbps": (0.1, 1e5, "GB/s per accelerator per direction"),
    "system.tiers[].latency_us": (0.0, 1e6, "microseconds (1e6 us = 1 s)"),
    "system.tiers[].oversubscription": (1.0, 1e3, "ratio"),
    "system.price_usd": (0.0, 1e7, "USD per accelerator"),
    "system.tiers[].price_per_gbps_usd": (0.0, 1e5, "USD per GB/s per accelerator"),
}
"""Plausible ranges ``(lo, hi, unit)``: a value outside is legal but almost surely a unit
mistake, so it is reported as a warning (:func:`plausibility_warnings`), not an error.
Errors are reserved for values that are impossible or inconsistent (a negative bandwidth,
a PUE below 1, a head count that does not divide the width)."""


def plausibility_warnings(system: System) -> list[str]:
    """One message per value of ``system`` outside :data:`PLAUSIBLE` (empty when all are)."""
    out = []

    def check(key: str, field: str, value) -> None:
        lo, hi, unit = PLAUSIBLE[key]
        v = float(value)
        if not lo <= v <= hi:
            out.append(f"{field} = {v:g} is outside the plausible range [{lo:g}, {hi:g}] {unit}")

    a = system.accelerator
    for f in ("peak_tflops", "hbm_gb", "hbm_tbps", "price_usd"):
        check(f"system.{f}", f"system.{f}", getattr(a, f))
    for i, t in enumerate(system.tiers):
        for f in ("bandwidth_gbps", "latency_us", "oversubscription", "price_per_gbps_usd"):
            check(f"system.tiers[].{f}", f"system.tiers[{i}].{f}", getattr(t, f))
    return out


def check_training(training: Training) -> None:
    """Check concrete training settings."""
    positive("training.global_batch", training.global_batch, integer=True)
    positive("training.tokens", training.tokens, allow_zero=True)
    positive("training.grad_reduce_bytes", training.grad_reduce_bytes)
    if training.precision not in PRECISIONS:
        raise SpecError("training.precision", training.precision, f"one of {list(PRECISIONS)}")
