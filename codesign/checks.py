"""Checks of concrete inputs, before any tracing: a :class:`SpecError` names the field.

Errors are for values that are impossible or inconsistent (a negative bandwidth, a PUE below
1, a head count that does not divide the width); values that are legal but almost surely a
unit mistake are warnings (:data:`PLAUSIBLE`, :func:`plausibility_warnings`).  The specs are
read by attribute only, so this module sits below :mod:`codesign.specs`.
"""

from __future__ import annotations

import math

import numpy as np

from codesign.efficiency import FLEX_RATIOS

__all__ = [
    "SpecError",
    "MAX_COUNT",
    "PRECISIONS",
    "positive",
    "check_model",
    "check_system",
    "check_training",
    "check_efficiency",
    "check_reliability",
    "PLAUSIBLE",
    "plausibility_warnings",
]


class SpecError(ValueError):
    """Invalid input: names the field, the value and what is allowed."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} = {value!r} is invalid: {allowed}")


MAX_COUNT = 2.0**53
"""The largest integer count accepted (9.0e15): float64, in which every count is stored, holds
every integer only up to 2**53; beyond it ``x == round(x)`` and the divisibility rules say
nothing (IEEE 754 binary64, 53-bit significand)."""


PRECISIONS = ("bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "fp4", "nvfp4", "mxfp4")  # fmt: skip
"""GEMM precisions.  ``fp8`` is an FP8 recipe left unspecified (modelled as ``fp8-delayed``,
per-tensor delayed scaling, Micikevicius et al. 2022, arXiv:2209.05433); ``fp8-current``
is per-tensor current scaling (an extra amax pass over each quantized tensor); ``mxfp8``
block-scales 32 elements by one E8M0 byte (OCP Microscaling spec v1.0, 2023); ``fp4`` is
``nvfp4`` (16-element blocks, FP8 E4M3 scales plus a per-tensor scale; NVIDIA Blackwell)
and ``mxfp4`` 32-element blocks with E8M0 scales (OCP MX)."""


def positive(field: str, value, integer: bool = False, allow_zero: bool = False) -> float:
    """``float(value)``, checked: finite, positive (or 0 where ``allow_zero``) and, where
    ``integer``, an integer no larger than :data:`MAX_COUNT`; else a :class:`SpecError`
    naming ``field``."""
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
    if integer and v > MAX_COUNT:
        raise SpecError(
            field, value, f"an integer up to 2**53 = {MAX_COUNT:.4g} (exact in float64)"
        )
    return v


PART_FIELDS = {
    "moe": ("moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_layers"),
    "mla": ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"),
    "mamba": (
        "mamba_layers", "mamba_state_dim", "mamba_head_dim", "mamba_heads", "mamba_groups",
        "mamba_conv_kernel",
    ),
    "mtp": ("mtp_layers",),
}  # fmt: skip
"""The :class:`Model` fields of each optional part of the layer (``Model.parts``): a part is
needed when any of its fields is nonzero."""

MODEL_PARTS = tuple(PART_FIELDS)
"""The optional parts of a layer: mixture of experts, multi-head latent attention, Mamba-2
mixers, multi-token prediction."""


def check_model(m) -> None:
    """Check a concrete :class:`Model`; raise :class:`SpecError` on the first bad field."""
    _check_parts(m)
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
    for f in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        positive(f"model.{f}", getattr(m, f), integer=True, allow_zero=True)
    if m.kv_lora_rank > 0 and (m.qk_nope_head_dim + m.qk_rope_head_dim <= 0 or m.v_head_dim <= 0):
        raise SpecError(
            "model.v_head_dim",
            m.v_head_dim,
            "positive, with qk_nope_head_dim + qk_rope_head_dim > 0, for MLA (kv_lora_rank > 0)",
        )
    _check_hybrid(m)
    positive("model.attention_window", m.attention_window, integer=True, allow_zero=True)
    positive("model.window_layers", m.window_layers, integer=True, allow_zero=True)
    positive("model.mtp_layers", m.mtp_layers, integer=True, allow_zero=True)
    attn_layers = float(m.layers) - float(m.mamba_layers)
    if float(m.window_layers) > attn_layers:
        raise SpecError(
            "model.window_layers",
            m.window_layers,
            f"at most the attention layers, layers - mamba_layers = {attn_layers:g}",
        )
    if m.window_layers > 0 and m.attention_window <= 0:
        raise SpecError(
            "model.attention_window", m.attention_window, "positive with window_layers > 0"
        )
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


def _check_parts(m) -> None:
    """``Model.parts``: ``None`` or a tuple of known parts, listing every part with a nonzero
    field (a part left out is not in the compiled step)."""
    if m.parts is None:
        return
    if not isinstance(m.parts, tuple) or any(p not in MODEL_PARTS for p in m.parts):
        raise SpecError("model.parts", m.parts, f"None or a tuple of {list(MODEL_PARTS)}")
    for part, f in nonzero_part_fields(m).items():
        if part not in m.parts:
            raise SpecError(
                f"model.{f}",
                getattr(m, f),
                f"0 while model.parts = {m.parts} leaves out {part!r} (add it, or set "
                "parts=None: codesign.workload.with_parts)",
            )


def nonzero_part_fields(m) -> dict:
    """``{part: its first nonzero field}`` of a model's concrete values (an array counts where
    any element is nonzero), in :data:`MODEL_PARTS` order: the parts the model needs."""
    out = {}
    for part, fields in PART_FIELDS.items():
        for f in fields:
            v = getattr(m, f)
            if v != 0 if isinstance(v, float) else np.any(np.asarray(v) != 0):
                out[part] = f
                break
    return out


_MAMBA = ("mamba_state_dim", "mamba_head_dim", "mamba_heads", "mamba_groups")


def _check_hybrid(m) -> None:
    """Mamba-2 hybrid fields: counts >= 0, the Mamba dimensions positive when there are Mamba
    layers, groups dividing the heads, and MLP-free layers leaving a valid MLP count."""
    for f in ("mamba_layers", *_MAMBA, "mamba_conv_kernel"):
        positive(f"model.{f}", getattr(m, f), integer=True, allow_zero=True)
    if not float(m.mamba_layers) <= float(m.layers):
        raise SpecError("model.mamba_layers", m.mamba_layers, f"at most layers = {m.layers:g}")
    if m.mamba_layers > 0:
        for f in _MAMBA:
            if getattr(m, f) <= 0:
                raise SpecError(f"model.{f}", getattr(m, f), "positive with mamba_layers > 0")
        if float(m.mamba_heads) % float(m.mamba_groups):
            raise SpecError(
                "model.mamba_groups",
                m.mamba_groups,
                f"a divisor of mamba_heads = {m.mamba_heads:g}",
            )
    # negative when a hybrid pattern has more MLP blocks than mixers ("M--*--": -2)
    try:
        free = float(m.mlp_free_layers)
    except (TypeError, ValueError):
        free = math.nan
    if not math.isfinite(free) or free != int(free):
        raise SpecError("model.mlp_free_layers", m.mlp_free_layers, "an integer")
    room = float(m.layers) - float(m.moe_layers)
    if free > room or (room == 0 and free != 0):
        raise SpecError(
            "model.mlp_free_layers",
            free,
            f"at most layers - moe_layers = {room:g} (0 when every layer is MoE)",
        )


def check_training(training) -> None:
    """Check concrete training settings (a :class:`codesign.specs.Training`)."""
    positive("training.global_batch", training.global_batch, integer=True)
    positive("training.tokens", training.tokens, allow_zero=True)
    positive("training.grad_reduce_bytes", training.grad_reduce_bytes)
    positive("training.weight_copy_bytes", training.weight_copy_bytes, allow_zero=True)
    positive("training.optimizer_state_bytes", training.optimizer_state_bytes, allow_zero=True)
    positive("training.outer_tokens_factor", training.outer_tokens_factor)
    positive("training.bf16_layers_start", training.bf16_layers_start, allow_zero=True)
    positive("training.bf16_layers_end", training.bf16_layers_end, allow_zero=True)
    if not training.first_last_layers_bf16:
        for f in ("bf16_layers_start", "bf16_layers_end"):
            if float(getattr(training, f)) > 0:
                raise SpecError(
                    f"training.{f}",
                    getattr(training, f),
                    "0 unless training.first_last_layers_bf16 is true (the static switch that "
                    "puts the 16-bit layers into the step model; load_run sets it)",
                )
    if not 0.0 <= float(training.fp8_attention) <= 1.0:
        raise SpecError(
            "training.fp8_attention",
            training.fp8_attention,
            "a fraction in [0, 1] (1: FP8 attention)",
        )
    if training.precision not in PRECISIONS:
        raise SpecError("training.precision", training.precision, f"one of {list(PRECISIONS)}")


def check_system(s) -> None:
    """Check a concrete :class:`System`; raise :class:`SpecError` on the first bad field."""
    a = s.accelerator
    for f in ("peak_tflops", "hbm_gb", "hbm_tbps"):
        positive(f"system.{f}", getattr(a, f))
    for f in (
        "peak_tflops_fp8",
        "peak_tflops_fp4",
        "power_w",
        "price_usd",
        "host_link_gbps",
        "exp_tera_per_s",
    ):
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
    rel = getattr(s, "reliability", None)
    if rel is not None:
        check_reliability(rel)


_FRACTIONS = (
    "gemm_max",
    "attention_eff",
    "hbm_eff",
    "grouped_gemm_eff",
    "ssd_eff",
    "dp_comm_eff",
)
_OVERLAPS = (
    "dp_overlap_eff",
    "dp_overlap_slowdown",
    "tp_overlap_eff",
    "cp_overlap_eff",
    "p2p_overlap_eff",
    "ep_overlap_eff",
    "offload_overlap_eff",
    "softmax_overlap_eff",
)


def check_efficiency(eff) -> None:
    """Check concrete efficiency parameters: rates in (0, 1], overlaps in [0, 1], sizes >= 0."""
    flex = "a ratio in (0, 1] (the flex dispatcher's value over the alltoall dispatcher's)"
    bounded = [(f, "a fraction of peak in (0, 1]") for f in _FRACTIONS]
    for f, allowed in bounded + [(f, flex) for f in FLEX_RATIOS]:
        v = positive(f"efficiency.{f}", getattr(eff, f))
        if v > 1:
            raise SpecError(f"efficiency.{f}", getattr(eff, f), allowed)
    for f in (*_OVERLAPS, "gemm_max_16bit"):
        v = positive(f"efficiency.{f}", getattr(eff, f), allow_zero=True)
        if v > 1:
            raise SpecError(f"efficiency.{f}", getattr(eff, f), "a fraction in [0, 1]")
    for f in (
        "elementwise_traffic",
        "optimizer_bytes_per_param",
        "backward_factor",
        "recompute_factor",
        "moe_permute_factor",
        "cpu_optimizer_gbps",
    ):
        positive(f"efficiency.{f}", getattr(eff, f))
    if float(eff.moe_imbalance) < 1:
        raise SpecError("efficiency.moe_imbalance", eff.moe_imbalance, "a factor >= 1")
    for f in (
        "gemm_half_dim",
        "step_overhead_s",
        "memory_overhead_gb",
        "grouped_gemm_half_tokens",
        "cp_step_overhead_us",
        "moe_host_expert_us",
        "moe_host_layer_us",
    ):
        positive(f"efficiency.{f}", getattr(eff, f), allow_zero=True)


PLAUSIBLE = {
    "system.peak_tflops": (1.0, 1e5, "TFLOP/s per accelerator"),
    "system.hbm_gb": (1.0, 1e4, "GB per accelerator"),
    "system.hbm_tbps": (0.05, 1e3, "TB/s per accelerator"),
    "system.tiers[].bandwidth_gbps": (0.1, 1e5, "GB/s per accelerator per direction"),
    "cross-site system.tiers[].bandwidth_gbps": (
        1e-3,
        1e5,
        "GB/s per accelerator per direction (a cross-site tier)",
    ),
    "system.tiers[].latency_us": (0.0, 1e6, "microseconds (1e6 us = 1 s)"),
    "system.tiers[].oversubscription": (1.0, 1e3, "ratio"),
    "system.price_usd": (0.0, 1e7, "USD per accelerator"),
    "system.tiers[].price_per_gbps_usd": (0.0, 1e5, "USD per GB/s per accelerator"),
}
"""Plausible ranges ``(lo, hi, unit)``: a value outside is legal but almost surely a unit
mistake, so it is reported as a warning (:func:`plausibility_warnings`), not an error.
Errors are reserved for values that are impossible or inconsistent (a negative bandwidth,
a PUE below 1, a head count that does not divide the width)."""


def plausibility_warnings(system) -> list[str]:
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
            # A link between buildings or regions may carry a few MB/s per accelerator.
            site = "cross-site " if f == "bandwidth_gbps" and float(t.cross_site) > 0 else ""
            check(f"{site}system.tiers[].{f}", f"system.tiers[{i}].{f}", getattr(t, f))
    return out


BLAST_RADII = ("host", "domain", "replica")
"""What one failure takes out of the job's layout: the host, the scale-up domain (tier 0),
or the model replica (``tp pp cp`` accelerators)."""


def blast_weights(blast) -> np.ndarray:
    """Weights over :data:`BLAST_RADII` of a radius name (one-hot) or of a weight vector
    (non-negative, summing to 1); anything else is a :class:`SpecError`."""
    if isinstance(blast, str):
        if blast not in BLAST_RADII:
            raise SpecError("system.reliability.blast_radius", blast, f"one of {list(BLAST_RADII)}")
        return np.eye(len(BLAST_RADII))[BLAST_RADII.index(blast)]
    try:
        w = np.asarray(blast, dtype=float)
    except (TypeError, ValueError):
        w = np.zeros(0)
    if w.shape != (len(BLAST_RADII),) or (w < 0).any() or abs(float(w.sum()) - 1.0) > 1e-6:
        raise SpecError(
            "system.reliability.blast_radius",
            blast,
            f"one of {list(BLAST_RADII)} (or weights over them summing to 1)",
        )
    return w


def check_reliability(r) -> None:
    """Check a concrete :class:`~codesign.goodput.Reliability` (rates and times >= 0,
    fractions in [0, 1], a positive checkpoint bandwidth and host size)."""
    for f in ("enabled", "async_checkpoint"):
        v = positive(f"system.reliability.{f}", getattr(r, f), allow_zero=True)
        if v > 1:
            raise SpecError(f"system.reliability.{f}", getattr(r, f), "a fraction in [0, 1]")
    for c in ("accelerator", "hbm", "host", "network", "switch", "software"):
        positive(f"system.reliability.{c}_per_mh", getattr(r, f"{c}_per_mh"), allow_zero=True)
    positive("system.reliability.accelerators_per_host", r.accelerators_per_host, integer=True)
    positive("system.reliability.checkpoint_gbps", r.checkpoint_gbps)
    for f in (
        "checkpoint_interval_s",
        "restart_s",
        "rewarm_s",
        "repair_s",
        "spares_per_domain",
        "usd_per_checkpoint_gbps",
        "w_per_checkpoint_gbps",
    ):
        positive(f"system.reliability.{f}", getattr(r, f), allow_zero=True)
    blast_weights(r.blast_radius)
