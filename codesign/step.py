"""One training step: compose workload, compute, collectives, pipeline, memory and cost.

The step time is the critical path of the most loaded pipeline stage (Narayanan et al.
2021; Korthikanti et al. 2022 Sec. 6):

    step = (m + (p - 1)/v) * T_mb + p2p + DP/ZeRO (exposed) + optimizer + overhead

where ``T_mb = t_fwd + t_bwd + t_recompute + t_TP + t_CP + t_EP`` is one micro-batch on one
stage: tensor-, context- and expert-parallel communication sits inside each micro-batch and
so is also stretched by the bubble.  Per layer and micro-batch, tensor parallelism
all-reduces the ``b s h`` activations twice forward and twice backward (reduce-scatter +
all-gather pairs with sequence parallelism; Shoeybi et al. 2019, Korthikanti et al. 2022
Sec. 4.2.2; in FP8/FP4 training the all-gathers carry the quantized GEMM inputs,
:data:`codesign.compute.GATHER_BYTES` per element), plus twice in a full recomputation, plus
(with sequence parallelism) two backward all-gathers of the stored input shards, overlapped
with the input-gradient GEMMs up to ``tp_overlap_eff``; context parallelism all-gathers K and
V forward and all-gathers K, V and reduce-scatters their gradients backward, hidden behind
the pass's attention up to ``cp_overlap_eff`` (ring attention, Liu et al. 2023), and pays
``cp_step_overhead_us`` per ring step; each MoE layer all-to-alls its tokens' ``top_k`` slots
to the experts and back, forward and backward, as long as the busiest rank's share takes
(:func:`codesign.workload.moe_load`; Lepikhin et al. 2020), and dropless with the ``alltoall``
dispatcher waits for the host (:func:`codesign.compute.moe_host_wait`).  Data parallelism all-reduces the
gradients (ZeRO-0), reduce-scatters them and all-gathers the updated weights (ZeRO-1/2,
Megatron's distributed optimizer), or does that for every micro-batch with two gathers
(ZeRO-3/FSDP), at ``dp_comm_eff`` of the tiers' collective bandwidth.
With ``overlap_dp`` on, up to ``dp_overlap_eff`` of one micro-batch's forward and backward
hides it (gradient buckets reduce during the last backward; the distributed optimizer's
parameter all-gather overlaps the next forward; with ``overlap_param_gather`` off that
all-gather is exposed), and for ZeRO-3 all micro-batches (parameter prefetch); a pass counts
with its exposed TP, CP, EP and offload time, since those transfers hide behind parts of the
same compute (a window of compute alone would count them twice, and a faster accelerator
could then slow a step).
A low-precision run's 16-bit layers (``Training.bf16_layers_start`` / ``_end``) add their
extra 16-bit time to the stages that hold them (:func:`codesign.pipeline.bf16_stage_layers`),
the optimizer step moves :func:`codesign.compute.optimizer_step_bytes` per parameter, and the
multi-token-prediction modules (``Model.mtp_layers``: a layer, a projection and the output head
again each; DeepSeek-V3 Sec. 2.2) run with the output layer on the last stage.

Everything is an array: :func:`evaluate` is jit-compiled once per static structure (number
of tiers, precision, exact or relaxed, the model's optional parts: ``Model.parts``) and vmaps
over any leaf.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from codesign import collectives as coll
from codesign import compute, memory, pipeline, workload
from codesign._dispatch import packed_jit
from codesign.cost import cluster_cost, tokens_to_train
from codesign.goodput import checkpoint_size_bytes
from codesign.memory import stage_params
from codesign.rules import check_all, data_parallel_groups, expert_tp, sharded, zero_fractions
from codesign.smoothing import EXACT, Smoothing, safe_div
from codesign.specs import Efficiency, Model, Strategy, System, Training, precision_family

__all__ = [
    "Report",
    "evaluate",
    "evaluate_unchecked",
    "evaluate_specs",
    "parallel_groups",
    "BREAKDOWN_KEYS",
    "MEMORY_KEYS",
]

OUTER_STATE_BYTES = 8.0
"""Bytes per parameter of DiLoCo's outer state: fp32 anchor weights and outer momentum."""

MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "buffers", "total")

BREAKDOWN_KEYS = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_bubble",
    "pp_p2p",
    "dp_comm",
    "optimizer",
    "offload",
    "overhead",
)


@struct.dataclass(kw_only=True)
class Report:
    """Everything the model says about one step (a pytree of arrays).

    Times in seconds, memory in GB per accelerator (binary, 2^30 bytes, as HBM capacities are
    listed: :data:`codesign.memory.GB`), costs in US dollars.
    ``breakdown_s`` sums to ``step_time_s``; ``memory_gb["total"]`` is the sum of the other
    memory terms; ``fits`` is ``memory_gb["total"] <= hbm_gb``.
    """

    step_time_s: Any
    breakdown_s: dict
    memory_gb: dict
    fits: Any
    mfu: Any
    hfu: Any
    tokens_per_s: Any
    model_flops_per_step: Any
    num_microbatches: Any
    params: dict
    cost: dict
    exposed_comm_s: dict
    time_stage: Any
    """Which stage sets the step time: 0 first, 1 a middle stage, 2 last (see
    :data:`codesign.pipeline.STAGES`)."""
    memory_stage: Any
    """Which stage needs the most memory (0 first, 1 middle, 2 last); ``memory_gb`` is its."""
    stage_layers: dict
    """Layers on the ``first``, a ``middle`` and the ``last`` stage (a middle one has 0 when
    p < 3), the multi-token-prediction modules' layers counted on the last."""
    moe_dropped_fraction: Any
    """Share of the routed tokens that token drop discards at uniform routing (0 dropless;
    :func:`codesign.workload.moe_dropped_fraction`)."""


def _strides(strategy: Strategy, sm: Smoothing, degrees: dict) -> dict:
    """Rank stride of each parallel dimension from the placement order.

    The stride of a dimension is the product of the ``degrees`` of the dimensions laid inside
    it (a dimension missing from ``degrees`` has degree 1 there).
    """
    st = strategy
    names = ("tp", "cp", "ep", "dp", "pp")
    rank = dict(zip(names, [st.placement[i] for i in range(5)], strict=True))
    out = {}
    for d in names:
        s = 1.0
        for e, deg in degrees.items():
            if e != d:
                s = s * (1.0 + sm.before(rank[e], rank[d]) * (deg - 1.0))
        out[d] = s
    return out


def parallel_groups(strategy: Strategy, sm: Smoothing = EXACT) -> dict:
    """``(size, stride)`` dimensions of every communication group (see :mod:`collectives`).

    Dense groups: tp, cp, dp and pp in the placement order (expert parallelism has no
    degree of its own there: it is carved out of the tp x cp x dp ranks).  Expert groups, by
    MoE parallel folding, as Megatron-Core's expert rank generator lays them (``RankGenerator
    (tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order)`` in ``parallel_state.initialize_model_
    parallel``): the same order with etp in tp's place, the expert data parallelism in dp's
    and no cp, so the expert groups tile each pipeline stage's tp x cp x dp ranks."""
    st = strategy
    s = _strides(st, sm, {"tp": st.tp, "cp": st.cp, "dp": st.dp, "pp": st.pp})
    _, edp = data_parallel_groups(st)
    etp = expert_tp(st)
    x = _strides(st, sm, {"tp": etp, "ep": st.ep, "dp": edp, "pp": st.pp})
    return {
        "tp": [(st.tp, s["tp"])],
        "cp": [(st.cp, s["cp"])],
        "ep": [(st.ep, x["ep"])],
        "etp": [(etp, x["tp"])],
        "pp": [(st.pp, s["pp"])],
        "dp": [(st.cp, s["cp"]), (st.dp, s["dp"])],
        "edp": [(edp, x["dp"])],
    }


def _stages(model: Model, strategy: Strategy, sm: Smoothing) -> list:
    """``(index, layers, embedding, output_params, output_compute)`` of the first, a middle and
    the last stage: whether it holds the input embedding, the output layer's parameters
    (a single stage holds both ends, the output only when untied) and runs the output layer
    and loss (the last stage, which is also the first when ``p = 1``).  ``layers`` counts
    the decoder's layers; the multi-token-prediction modules run with the output layer, and
    Megatron-Core builds the input embedding where they run (``GPTModel``: ``pre_process or
    mtp_process``), so an untied last stage with them holds an embedding copy too."""
    st = strategy
    n = pipeline.stage_layers(model.layers, st, sm)
    single = 1.0 - sm.step(st.pp - 1.0)
    untied = 1.0 - model.tied_embeddings
    out_single = single * untied
    mtp = jnp.where(model.mtp_layers > 0, 1.0, 0.0) if workload.has_part(model, "mtp") else 0.0
    emb_last = single + (1.0 - single) * untied * mtp
    return [
        (0.0, n["first"], 1.0, out_single, single),
        (1.0, n["middle"] * n["has_middle"], 0.0, 0.0, 0.0),
        (st.pp - 1.0, n["last"], emb_last, out_single + (1.0 - single), 1.0),
    ]


def evaluate_unchecked(
    model: Model,
    training: Training,
    system: System,
    strategy: Strategy,
    efficiency: Efficiency,
    smoothing: Smoothing = EXACT,
) -> Report:
    """The step model without input checks (for use under jit, vmap and grad)."""
    eff = efficiency
    sm = smoothing
    m, st, sy = model, strategy, system
    precision = training.precision
    n_mb = pipeline.num_microbatches(training.global_batch, st.dp, st.microbatch, sm)
    groups = parallel_groups(st, sm)
    r = st.recompute
    z = st.zero
    w = st.recompute_modules  # core_attn, layernorm, mlp, moe_act, moe, mla_up_proj
    phi = st.recompute_fraction

    # ---- compute of one layer and one micro-batch ----------------------------------------
    def layer_compute(lt):
        """(forward, backward, recomputation) seconds of one layer from its parts.  Selective
        recomputation re-runs the chosen modules' forward; full recomputation re-runs phi of
        the layers' forward, in recompute_factor times its time."""
        fwd = lt["gemm"] + lt["attention"] + lt["elementwise"]
        bwd = eff.backward_factor * lt["gemm"] + lt["attention_bwd"] + 2.0 * lt["elementwise"]
        selective = (
            w[0] * (lt["attention"] + lt["score_elementwise"])
            + w[1] * lt["layernorm"]
            + w[2] * lt["mlp"]
            + w[3] * (1.0 - w[4]) * lt["moe_act"]
            + w[4] * lt["moe"]
            + w[5] * lt["mla_up"]
        )
        return fwd, bwd, r[1] * selective + r[2] * phi * eff.recompute_factor * fwd

    act = memory.layer_activation_bytes(m, st, precision, eff.moe_imbalance)
    lt = compute.layer_times(m, st, sy, eff, precision, act, sm, training.fp8_attention)
    layer_fwd, layer_bwd, layer_rec = layer_compute(lt)
    logit_fwd = lt["logits"] + lt["logits_elementwise"]
    logit_bwd = eff.backward_factor * lt["logits"] + 2.0 * lt["logits_elementwise"]
    # a multi-token-prediction module: besides its layer, its projection and the output head
    mtp_fwd = logit_fwd + lt["mtp_proj"]
    mtp_bwd = logit_bwd + eff.backward_factor * lt["mtp_proj"]
    # The 16-bit layers of a low-precision run (Training.bf16_layers_start / _end): the same
    # layer in 16 bits, whose difference each such layer adds to its stage (static: nothing
    # to add in a 16-bit run or with the switch first_last_layers_bf16 off).
    low = training.first_last_layers_bf16 and precision_family(precision) != "half"
    if low:
        act16 = memory.layer_activation_bytes(m, st, "bf16", eff.moe_imbalance)
        g16 = compute.gemm_max_16bit(eff)
        ratio = safe_div(
            compute.peak_flops(sy, precision) * eff.gemm_max,
            sy.accelerator.peak_tflops * 1e12 * g16,
        )
        lt16 = compute.sixteen_bit_layer(lt, act, act16, ratio)
        d_fwd, d_bwd, d_rec = (
            a - b
            for a, b in zip(layer_compute(lt16), (layer_fwd, layer_bwd, layer_rec), strict=True)
        )
    else:
        act16, d_fwd, d_bwd, d_rec = None, 0.0, 0.0, 0.0

    # ---- communication inside a micro-batch, per layer -----------------------------------
    tokens = st.microbatch * m.seq_len / st.cp
    h = m.hidden
    passes = 4.0 + 2.0 * r[2] * phi  # TP collectives: 2 forward, 2 backward, 2 to recompute
    # With sequence parallelism each all-reduce is an all-gather of a GEMM input and a
    # reduce-scatter of a GEMM output; in FP8/FP4 training Transformer Engine quantizes the
    # input first and gathers the quantized tensor (GATHER_BYTES per element; forward norm
    # output, backward output gradient), while the reduce-scatter stays in bf16.
    tp_lat, tp_per_byte = coll.reduce_scatter_coeffs(groups["tp"], sy, sm)  # AG costs the same
    tp_rs = tp_lat + 2.0 * tokens * h * tp_per_byte

    def tp_time(gather_bytes):
        tp_ag = tp_lat + gather_bytes * tokens * h * tp_per_byte
        tp_ar = st.sequence_parallel * (tp_rs + tp_ag) + (1.0 - st.sequence_parallel) * 2.0 * tp_rs
        # With sequence parallelism only the s/t shard of each GEMM input is stored, so the
        # backward pass all-gathers it again for the weight gradients (twice per layer: QKV
        # and MLP inputs), asynchronously behind the input-gradient GEMM (Megatron-LM's
        # LinearWithGradAccumulationAndAsyncCommunication; Korthikanti et al. 2022 Sec.
        # 4.2.2): exposed (1 - tp_overlap_eff) of it.
        return passes * tp_ar * (1.0 - st.overlap_tp * eff.tp_overlap_eff) + (
            st.sequence_parallel * 2.0 * tp_ag * (1.0 - eff.tp_overlap_eff)
        )

    t_tp = tp_time(compute.GATHER_BYTES[precision])
    d_tp = tp_time(compute.GATHER_BYTES["bf16"]) - t_tp if low else 0.0

    _, kv = workload.attention_dims(m)
    kv_width = 2.0 * kv  # K and V exchanged by ring attention
    if workload.has_part(m, "mla"):
        (qk, v), mla = workload.attention_core_dims(m), workload.is_mla(m)
        kv_width = mla * (qk + v) + (1.0 - mla) * 2.0 * kv
    kv_bytes = 2.0 * st.microbatch * m.seq_len * kv_width / st.tp
    cp_ag = coll.all_gather_time(kv_bytes, groups["cp"], sy, sm)

    # The forward all-gather (and its recomputation) hides behind the forward attention, the
    # backward's two (AG of K/V, RS of their gradients) behind half the backward attention
    # each; every pass also pays cp - 1 ring steps' fixed cost.
    def cp_exposed(window):
        return sm.relu(cp_ag - eff.cp_overlap_eff * window, scale=window + 1e-9)

    cp_fwd = cp_exposed(lt["attention"])
    cp_bwd = cp_exposed(0.5 * lt["attention_bwd"])
    cp_steps = sm.relu(st.cp - 1.0, scale=1.0) * eff.cp_step_overhead_us * 1e-6
    t_cp = (1.0 + r[2] * phi) * cp_fwd + 2.0 * cp_bwd + (3.0 + r[2] * phi) * cp_steps

    # Expert parallelism: all-to-all of the tokens' top_k slots (busiest rank: moe_load) to the
    # experts and back, forward and backward (again when the MoE layer is recomputed); with
    # etp > 1 the expert tensor-parallel ranks all-gather their slots and reduce-scatter them.
    t_ep, has_moe = 0.0, workload.has_part(m, "moe")
    if has_moe:
        moe_frac = safe_div(m.moe_layers, m.layers)
        a2a_tokens = workload.moe_router_tokens(m, st)  # each rank dispatches its router's
        a2a_bytes = 2.0 * a2a_tokens * m.moe_top_k * h * workload.moe_load(m, st, eff.moe_imbalance)
        ep_passes = 4.0 + 2.0 * (r[2] * phi + r[1] * w[4])
        dedup = st.moe_hierarchical_dispatch * m.moe_top_k
        a2a = coll.all_to_all_time(a2a_bytes, groups["ep"], sy, sm, dedup_copies=dedup)
        etp_ag = coll.all_gather_time(a2a_bytes * expert_tp(st), groups["etp"], sy, sm)
        has_etp = sm.step(expert_tp(st) - 1.0)
        ep_one = ep_passes * (a2a + has_etp * etp_ag)
        ep_overlap = eff.ep_overlap_eff * compute.flex_mix(st, eff.ep_overlap_flex_ratio)
        host_wait = compute.moe_host_wait(m, st, eff, layer_fwd, sm)
        t_ep = moe_frac * (ep_one * (1.0 - st.overlap_moe_comm * ep_overlap) + host_wait)

    # Activation offloading: the offloaded bytes go to the host during the forward pass and
    # come back for the backward pass, hidden up to offload_overlap_eff of each pass's time
    # (its compute and its exposed context-parallel all-gathers, which hide behind the same
    # attention: counting the attention as a window twice would let faster compute slow it).
    host = sy.accelerator.host_link_gbps * 1e9
    off_s = safe_div(st.offload_activations * memory.stored_per_layer(act, st), host)
    off_fwd, off_bwd = layer_fwd + cp_fwd, layer_bwd + 2.0 * cp_bwd
    t_off = sm.relu(off_s - eff.offload_overlap_eff * off_fwd, scale=off_fwd) + sm.relu(
        off_s - eff.offload_overlap_eff * off_bwd, scale=off_bwd
    )

    # ---- the slowest stage ---------------------------------------------------------------
    per_layer = layer_fwd + layer_bwd + layer_rec + t_tp + t_cp + t_ep + t_off
    per_logit = logit_fwd + logit_bwd
    stages = _stages(m, st, sm)
    mtp = [sg[4] * m.mtp_layers if workload.has_part(m, "mtp") else 0.0 for sg in stages]
    n_all = [sg[1] + k for sg, k in zip(stages, mtp, strict=True)]  # their layers included
    stage_t = [
        n * per_layer + sg[4] * per_logit + k * (mtp_fwd + mtp_bwd)
        for n, sg, k in zip(n_all, stages, mtp, strict=True)
    ]
    if low:  # each 16-bit layer adds its extra seconds to its stage
        kse = pipeline.bf16_stage_layers(
            training.bf16_layers_start, training.bf16_layers_end, stages, sm, st
        )
        d_layer = d_fwd + d_bwd + d_rec + d_tp
        stage_t = [t + sum(k) * d_layer for t, k in zip(stage_t, kse, strict=True)]
    else:
        kse = [(0.0, 0.0)] * 3
    tw = sm.argmax_weights(*stage_t)
    n_eff = sum(wi * n for wi, n in zip(tw, n_all, strict=True))
    out_eff = sum(wi * sg[4] for wi, sg in zip(tw, stages, strict=True))
    mtp_eff = sum(wi * k for wi, k in zip(tw, mtp, strict=True))
    t_fwd = n_eff * layer_fwd + out_eff * logit_fwd + mtp_eff * mtp_fwd
    t_bwd = n_eff * layer_bwd + out_eff * logit_bwd + mtp_eff * mtp_bwd
    t_rec = n_eff * layer_rec
    t_tp_16 = 0.0  # the 16-bit layers' extra tensor-parallel time
    if low:
        kb_eff = sum(wi * sum(k) for wi, k in zip(tw, kse, strict=True))
        t_fwd, t_bwd = t_fwd + kb_eff * d_fwd, t_bwd + kb_eff * d_bwd
        t_rec, t_tp_16 = t_rec + kb_eff * d_rec, kb_eff * d_tp
    t_mb = t_fwd + t_bwd + t_rec + n_eff * (t_tp + t_cp + t_ep + t_off) + t_tp_16
    bubble = pipeline.bubble_time(st.pp, st.interleave, t_mb)
    p2p_one = coll.p2p_time(2.0 * tokens * h / st.tp, groups["pp"], sy, sm)
    p2p = pipeline.exposed_p2p_time(st.pp, st.interleave, n_mb, p2p_one, eff.p2p_overlap_eff, sm)

    # ---- data parallelism / ZeRO (the stage with the most parameters) --------------------
    sparams = [
        stage_params(m, st, n, sg[2], sg[3], k) for n, sg, k in zip(n_all, stages, mtp, strict=True)
    ]
    pl = {k: sm.max(*[sp[k] for sp in sparams]) for k in ("dense", "expert")}
    gbytes = training.grad_reduce_bytes
    # Reduced-frequency synchronization (DiLoCo): with H > 1 the cross-site tiers leave the
    # every-step reduction and carry one outer all-reduce of the pseudo-gradient every H steps
    # (outer_compression of its bytes), hidden behind up to outer_overlap of the next H
    # steps' compute (streaming DiLoCo).  diloco = 0 at H = 1: synchronous training, exactly.
    diloco = sm.step(st.outer_sync_interval - 1.0)
    site = [t.cross_site for t in sy.tiers]
    inner = [1.0 - diloco * c for c in site]

    def dp_times(n_params, group):
        """(every-step reduction over the inner tiers, the part of it no overlap can hide,
        outer all-reduce over the sites)."""
        lat_t, per_byte_t = coll.reduce_scatter_tier_coeffs(group, sy, sm)  # AR = 2 RS, AG = RS
        per_byte_t = [safe_div(b, eff.dp_comm_eff) for b in per_byte_t]  # DP collectives both
        lat, per_byte = coll.tier_dot(inner, lat_t), coll.tier_dot(inner, per_byte_t)
        rs = lat + gbytes * n_params * per_byte
        ag = lat + 2.0 * n_params * per_byte
        every = z[0] * 2.0 * rs + (z[1] + z[2]) * (rs + ag) + z[3] * n_mb * (rs + 2.0 * ag)
        # the distributed optimizer's parameter all-gather, when it does not overlap
        blocking = (z[1] + z[2]) * (1.0 - st.overlap_param_gather) * ag
        lat_o, per_byte_o = coll.tier_dot(site, lat_t), coll.tier_dot(site, per_byte_t)
        outer = 2.0 * (lat_o + gbytes * st.outer_compression * n_params * per_byte_o)
        return every, blocking, outer

    dense_dp, dense_block, dense_outer = dp_times(pl["dense"], groups["dp"])
    t_dp, t_block, t_outer = dense_dp, dense_block, dense_outer
    if has_moe:  # no empty expert collective for dense models
        has_experts = jnp.where(pl["expert"] > 0, 1.0, 0.0)
        expert_dp, expert_block, expert_outer = dp_times(pl["expert"], groups["edp"])
        t_dp = dense_dp + has_experts * expert_dp
        t_block = dense_block + has_experts * expert_block
        t_outer = dense_outer + has_experts * expert_outer
    t_block = st.overlap_dp * t_block
    # An exposed parameter all-gather leaves the reduce-scatter the backward pass alone.  The
    # window is the passes' time on the critical path: compute and the exposed tensor-,
    # context- and expert-parallel and offload time, shared out over the passes like the
    # compute (the other transfers hide behind parts of the same compute, so a window of
    # compute alone would count those parts twice and let faster compute slow a step).
    fwd_window = 1.0 - (z[1] + z[2]) * (1.0 - st.overlap_param_gather)
    stretch = safe_div(t_mb, t_fwd + t_bwd + t_rec, 1.0)  # t_mb: compute and exposed time
    window = (1.0 - z[3]) * (fwd_window * t_fwd + t_bwd) * stretch + z[3] * n_mb * t_mb
    window = st.overlap_dp * eff.dp_overlap_eff * window

    def charged(t, window):
        """(the part of ``t`` the window cannot hide, the time charged): hidden traffic still
        takes SMs and HBM from the compute it overlaps (``dp_overlap_slowdown``)."""
        beyond = sm.relu(t - window, scale=t_mb)
        return beyond, beyond + eff.dp_overlap_slowdown * (t - beyond)

    dp_beyond, dp_exposed = charged(t_dp - t_block, window)
    dp_beyond, dp_exposed = dp_beyond + t_block, dp_exposed + t_block
    h = jnp.maximum(st.outer_sync_interval, 1.0)
    hidden = st.outer_overlap * h * n_mb * t_mb
    dp_exposed = dp_exposed + diloco * charged(t_outer, hidden)[1] / h

    # ---- optimizer: on the accelerator, and the offloaded part on the host CPU -----------
    opt_params = sharded(pl["dense"], pl["expert"], zero_fractions(z)["optimizer"], st)
    hbm = sy.accelerator.hbm_tbps * 1e12 * eff.hbm_eff
    opt_bytes = compute.optimizer_step_bytes(
        eff.optimizer_bytes_per_param, training.optimizer_state_bytes
    )
    t_opt_dev = (1.0 - st.offload_optimizer) * opt_bytes * opt_params / hbm
    off_params = st.offload_optimizer * opt_params
    t_opt_host = safe_div(off_params * (gbytes + 2.0), host) + safe_div(
        off_params * opt_bytes, eff.cpu_optimizer_gbps * 1e9
    )
    t_opt = sm.max(t_opt_dev, t_opt_host)

    breakdown = {
        "forward": n_mb * t_fwd,
        "backward": n_mb * t_bwd,
        "recompute": n_mb * t_rec,
        "tp_comm": n_mb * n_eff * t_tp + n_mb * t_tp_16,
        "cp_comm": n_mb * n_eff * t_cp,
        "ep_comm": n_mb * n_eff * t_ep,
        "pp_bubble": bubble,
        "pp_p2p": p2p,
        "dp_comm": dp_exposed,
        "optimizer": t_opt,
        "offload": n_mb * n_eff * t_off,
        "overhead": jnp.zeros_like(t_opt) + eff.step_overhead_s,
    }
    step_time = sum(breakdown.values())

    # ---- memory: each stage, the largest reported ----------------------------------------
    mems = [
        memory.stage_memory_bytes(
            m,
            st,
            eff,
            sp,
            n_mb,
            sm,
            training.grad_reduce_bytes,
            sg[0],
            n,
            sg[4] + k_mtp,  # one fp32 logits buffer for the output layer and each MTP module
            precision,
            act,
            weight_copy_bytes=training.weight_copy_bytes,
            optimizer_state_bytes=training.optimizer_state_bytes,
            layers_16bit=sum(k),
            act_16bit=act16,
            in_flight_16bit=pipeline.bf16_in_flight(k, sg[0], st, n_mb, sm) if low else None,
            mtp_layers=k_mtp,
        )
        for sg, n, k_mtp, sp, k in zip(stages, n_all, mtp, sparams, kse, strict=True)
    ]
    # DiLoCo's outer state (the anchor weights and the outer Nesterov momentum, fp32), sharded
    # like the optimizer state: 8 bytes per parameter with H > 1.
    opt_frac = zero_fractions(z)["optimizer"]
    for mm, sp in zip(mems, sparams, strict=True):
        outer_state = diloco * OUTER_STATE_BYTES * sharded(sp["dense"], sp["expert"], opt_frac, st)
        mm["optimizer"] = mm["optimizer"] + outer_state
        mm["total"] = mm["total"] + outer_state
    mw = sm.argmax_weights(*[mm["total"] for mm in mems])
    memory_gb = {
        k: sum(wi * mm[k] for wi, mm in zip(mw, mems, strict=True)) / memory.GB for k in MEMORY_KEYS
    }
    fits = memory_gb["total"] <= sy.accelerator.hbm_gb

    # ---- throughput and cost -------------------------------------------------------------
    tokens_step = training.global_batch * m.seq_len
    flops = workload.model_flops_per_step(m, training.global_batch)
    f = workload.forward_flops_per_token(m)
    rec_flops = (
        tokens_step
        * (m.layers + m.mtp_layers)
        * (r[1] * w[0] * f["attention"] + r[2] * phi * (f["gemm"] + f["attention"]))
    )
    denom = step_time * sy.num_accelerators * compute.peak_flops(sy, precision)
    tokens_total = tokens_to_train(training, st, sm)
    totals = workload.total_params(m)
    ckpt_bytes = checkpoint_size_bytes(totals["total"], training.optimizer_state_bytes)
    cost = cluster_cost(sy, step_time, tokens_step, tokens_total, ckpt_bytes, st.tp * st.pp * st.cp)
    dropped = workload.moe_dropped_fraction(m, st, sm) if workload.has_part(m, "moe") else 0.0
    return Report(
        step_time_s=step_time,
        breakdown_s=breakdown,
        memory_gb=memory_gb,
        fits=fits,
        mfu=safe_div(flops, denom),
        hfu=safe_div(flops + rec_flops, denom),
        tokens_per_s=safe_div(tokens_step, step_time),
        model_flops_per_step=flops,
        num_microbatches=n_mb,
        params={
            "total": totals["total"],
            "active": totals["active"],
            "local_dense": pl["dense"],
            "local_expert": pl["expert"],
        },
        cost=cost,
        exposed_comm_s={
            "dp_total": t_dp,
            "dp_beyond_window": dp_beyond,
            "tp_per_microbatch": n_eff * t_tp,
            "p2p_one": p2p_one,
        },
        time_stage=sum(i * wi for i, wi in enumerate(tw)),
        memory_stage=sum(i * wi for i, wi in enumerate(mw)),
        stage_layers={k: n + 0.0 * step_time for k, n in zip(pipeline.STAGES, n_all, strict=True)},
        moe_dropped_fraction=dropped + 0.0 * step_time,
    )


_evaluate_jit = packed_jit(evaluate_unchecked)  # one host-to-device transfer per call


def evaluate_specs(specs: dict, smoothing: Smoothing = EXACT) -> Report:
    """:func:`evaluate_unchecked` of a specs dict (``model``, ``training``, ``system``,
    ``strategy``, ``efficiency``), the form the grids and batch evaluators hold."""
    return evaluate_unchecked(
        specs["model"],
        specs["training"],
        specs["system"],
        specs["strategy"],
        specs["efficiency"],
        smoothing,
    )


def _checkable(leaves) -> bool:
    """Whether the leaves are one concrete configuration: no tracer, each a scalar or one of
    the strategy's short vectors (shapes as attributes: ``jnp.ndim`` costs too much)."""
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return False
        shape = getattr(leaf, "shape", ())
        if shape and (len(shape) > 1 or shape[0] not in (3, 4, 5, 6)):
            return False
    return True


def evaluate(
    model: Model,
    training: Training,
    system: System,
    strategy: Strategy,
    efficiency: Efficiency,
    smoothing: Smoothing = EXACT,
) -> Report:
    """Evaluate one training step: time with its breakdown, memory, throughput and cost.

    ``efficiency`` is required: there is one default, the calibrated preset of the
    accelerator (``codesign/hardware/efficiency.toml``), which :func:`codesign.load_run` puts in
    ``cfg.efficiency`` and :func:`codesign.efficiency_preset` returns by name;
    ``codesign.Efficiency()`` holds the uncalibrated round values (the calibration's start).

    Concrete scalar inputs are checked first (:class:`~codesign.specs.SpecError` names the
    bad field); traced or batched inputs are not (use the parametrization instead).  The
    computation is jit-compiled; wrap in ``jax.vmap`` to sweep any leaf.

    Example:
        >>> import codesign as cd
        >>> cfg = cd.config.load_run_dict({"model": {"preset": "gpt3-175b"},
        ...     "training": {"global_batch": 1536},
        ...     "system": {"accelerator": "a100-sxm4-80gb", "num_accelerators": 1024,
        ...                "tiers": [{"preset": "nvlink3"}, {"preset": "ib-hdr-200", "domain": 1024}]},
        ...     "strategy": {"tp": 8, "pp": 16, "dp": 8}})
        >>> r = cd.evaluate(*cfg.specs())
        >>> bool(r.step_time_s > 0)
        True
    """
    eff = efficiency
    if _checkable(jax.tree_util.tree_leaves((model, training, system, strategy, eff))):
        check_all(model, training, system, strategy, eff)
    model = workload.with_parts(model)  # the parts it needs (all for traced values)
    return _evaluate_jit(model, training, system, strategy, eff, smoothing)
