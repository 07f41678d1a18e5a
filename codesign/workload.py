"""Parameter counts and FLOPs of a transformer (what the step has to do, not how fast).

Dense-layer counts follow Narayanan et al., SC21 (arXiv:2104.04473), Sec. 5.1 and eq. (3):
per layer ``12 h^2`` parameters (``4 h^2`` attention, ``8 h^2`` MLP with ``ffn = 4h``) and
``24 b s h^2 + 4 b s^2 h`` forward FLOPs, plus ``2 b s h V`` for the logits; a training
step costs three forward passes (backward = 2 x forward) and four with full activation
recomputation, giving eq. (3) ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``.  We generalize
the same counting to grouped-query attention (Ainslie et al. 2023), gated MLPs (Shazeer
2020) and mixture-of-experts layers (Fedus et al. 2021; top-k experts active per token).
Biases and norms are counted in parameters (``2h`` per layer) but not in FLOPs, as in eq. 3.

Hybrid models (Nemotron-H, NVIDIA 2025, arXiv:2504.03624) replace the self-attention of
``mamba_layers`` of the layers by a Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs",
arXiv:2405.21060; Megatron-Core ``MambaMixer``), and ``mlp_free_layers`` layers have no MLP;
like MoE layers these are averaged over the depth (:func:`fractions`).

Multi-token prediction (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2; Megatron-Core
``MultiTokenPredictionBlock``, ``mtp_num_layers``): each of ``mtp_layers`` sequential modules
normalizes the previous depth's hidden state and the embedding of the next token, projects
their concatenation ``2h -> h`` (``M_k``, ``eh_proj``), runs one transformer layer (the
decoder's layer kind; counted here as an average layer of the decoder: DeepSeek-V3's is an
MoE layer, as 58 of its 61 layers are, and its dense layers have the same active FLOPs) and
the shared output head with its own cross-entropy loss.  The embedding and the output head are
the model's (no new parameters).  The Mamba-2 mixer
(:func:`mamba_gemms`, :func:`mamba_params`, :func:`ssd_flops_per_token`) has ``d_inner = H P``
(``H`` heads of dimension ``P``), ``G`` groups of state size ``N`` and, per token, an input
projection ``h -> 2 d_inner + 2 G N + H`` (z, x, B, C, dt), a depthwise causal convolution of
width ``K`` over the ``d_inner + 2 G N`` channels of x, B and C, the chunked SSD scan, a gated
RMSNorm over ``d_inner`` and an output projection ``d_inner -> h``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri
from jax.scipy.stats import norm

from codesign.checks import nonzero_part_fields
from codesign.rules import expert_tp
from codesign.smoothing import EXACT, Smoothing, safe_div, safe_sqrt
from codesign.specs import MODEL_PARTS, PART_FIELDS, Model

__all__ = [
    "has_part",
    "needed_parts",
    "with_parts",
    "head_dim",
    "attention_dims",
    "is_mla",
    "attention_gemms",
    "attention_core_dims",
    "fractions",
    "local_experts",
    "moe_load",
    "moe_sampling_excess",
    "moe_router_tokens",
    "moe_dropped_fraction",
    "mamba_gemms",
    "mamba_params",
    "ssd_flops_per_token",
    "SSD_CHUNK",
    "layer_params",
    "mtp_extra_params",
    "total_params",
    "forward_flops_per_token",
    "model_flops_per_step",
]


def has_part(m: Model, part: str) -> bool:
    """Whether the compiled step contains ``part`` (one of :data:`~codesign.specs.MODEL_PARTS`)
    of the layer: a static (Python) answer from ``Model.parts``, where ``None`` means every part.
    A part left out contributes exactly what its terms give when its fields are zero: nothing."""
    return m.parts is None or part in m.parts


def needed_parts(m: Model) -> tuple | None:
    """The parts whose fields (:data:`~codesign.specs.PART_FIELDS`) are nonzero anywhere in
    ``m``'s concrete values (arrays count where any element is), in :data:`MODEL_PARTS` order;
    ``None`` when a field is traced (then nothing can be left out).

    >>> from codesign.specs import Model
    >>> dense = Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
    ...               vocab=128256, seq_len=8192)
    >>> needed_parts(dense), needed_parts(dense.replace(moe_layers=[0.0, 32.0], mtp_layers=1))
    ((), ('moe', 'mtp'))
    """
    fields = (f for part_fields in PART_FIELDS.values() for f in part_fields)
    if any(isinstance(getattr(m, f), jax.core.Tracer) for f in fields):
        return None
    return tuple(nonzero_part_fields(m))


def with_parts(m: Model, extra=()) -> Model:
    """``m`` with ``Model.parts`` set to what it needs: the parts it already lists (all, for
    ``None``, when a field is traced), those its concrete values need (:func:`needed_parts`)
    and ``extra`` (a sweep's model axes), in :data:`MODEL_PARTS` order."""
    need = needed_parts(m)
    if need is None and m.parts is None:
        return m
    have = set(m.parts or ()) | set(need or ()) | set(extra)
    return m.replace(parts=tuple(p for p in MODEL_PARTS if p in have))


def head_dim(m: Model):
    """Per-head dimension: ``m.head_dim`` if set, else ``hidden / heads``."""
    return jnp.where(m.head_dim > 0, m.head_dim, m.hidden / m.heads)


def attention_dims(m: Model):
    """``(q_dim, kv_dim)``: total width of the queries and of the keys (= values)."""
    d = head_dim(m)
    return m.heads * d, m.kv_heads * d


def is_mla(m: Model):
    """1.0 for multi-head latent attention (``kv_lora_rank > 0``), else 0.0."""
    if not has_part(m, "mla"):
        return 0.0
    return jnp.where(m.kv_lora_rank > 0, 1.0, 0.0)


def attention_core_dims(m: Model) -> tuple:
    """``(qk_dim, v_dim)``: total width of the queries (= keys after expansion) and of the
    values over all heads.  GQA: ``heads * head_dim`` both; MLA (DeepSeek-AI 2024,
    arXiv:2405.04434, Sec. 2.1): ``heads (d_nope + d_rope)`` and ``heads d_v``."""
    q, _ = attention_dims(m)
    if not has_part(m, "mla"):
        return q, q
    mla = is_mla(m)
    qk = mla * m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) + (1.0 - mla) * q
    v = mla * m.heads * m.v_head_dim + (1.0 - mla) * q
    return qk, v


def attention_keys(m: Model):
    """Keys per query counted for the attention core, averaged over the attention layers.

    A full layer counts the whole sequence ``s`` (full, not causal, as in Narayanan et al.
    eq. 3; a causal kernel skips about half, which the calibrated ``attention_eff``
    absorbs).  A sliding-window layer of ``w`` tokens (``attention_window``) makes a fused
    kernel compute about ``w`` keys per query, so it counts ``min(2 w, s)`` on the same
    scale: ``((A - n_w) s + n_w min(2 w, s)) / A`` over the ``A = layers - mamba_layers``
    attention layers, ``n_w`` of them windowed (``window_layers``).  Without a window this is
    ``s``.
    """
    attn = jnp.maximum(m.layers - m.mamba_layers, 1.0)
    windowed = jnp.minimum(2.0 * m.attention_window, m.seq_len)
    return m.seq_len - m.window_layers / attn * (m.seq_len - windowed)


def attention_gemms(m: Model) -> list:
    """The projection GEMMs of one attention block as ``(n, k, split)`` per token: an
    ``n x k`` weight, split by tensor parallelism along ``n`` (``"n"``, column parallel),
    along ``k`` (``"k"``, row parallel) or not at all (``None``, replicated).

    GQA: fused QKV ``(q + 2 kv) x h`` and the output projection ``h x q``.  MLA (DeepSeek-V3,
    arXiv:2412.19437, Sec. 2.1.1; Megatron-Core ``MLASelfAttention``): query down-projection
    ``r_q x h`` (replicated) and up-projection ``heads (d_nope + d_rope) x r_q`` (or, without
    ``q_lora_rank``, one ``heads (d_nope + d_rope) x h``), the joint key/value down-projection
    ``(r_kv + d_rope) x h`` (replicated), its up-projection ``heads (d_nope + d_v) x r_kv``,
    and the output projection ``h x heads d_v``.  Terms of the other kind are multiplied by
    0, so one list serves both (the shapes are dynamic leaves); without the ``"mla"`` part
    (:func:`has_part`) the list is the two GQA projections alone.
    """
    h = m.hidden
    q, kv = attention_dims(m)
    if not has_part(m, "mla"):
        return [(q + 2.0 * kv, h, "n"), (h, q, "k")]
    mla = is_mla(m)
    gqa = 1.0 - mla
    qk, v = attention_core_dims(m)
    q_low = jnp.where(m.q_lora_rank > 0, 1.0, 0.0) * mla
    return [
        (gqa * (q + 2.0 * kv) + mla * (1.0 - q_low) * qk, h, "n"),  # QKV (GQA) or Q (MLA)
        (q_low * m.q_lora_rank, h, None),  # MLA query down-projection
        (q_low * qk, m.q_lora_rank, "n"),  # MLA query up-projection
        (mla * (m.kv_lora_rank + m.qk_rope_head_dim), h, None),  # MLA KV down-projection
        (mla * m.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, "n"),  # KV up
        (h, gqa * q + mla * v, "k"),  # output projection
    ]


SSD_CHUNK = 128.0
"""Chunk length ``Q`` of the SSD algorithm: Megatron-Core ``MambaMixer``'s default
``chunk_size`` (mamba_ssm's ``Mamba2`` uses 256)."""


def fractions(m: Model) -> dict:
    """Depth fractions of the layer kinds: ``mamba`` (Mamba-2 mixer), ``attention`` (self-
    attention mixer, ``1 - mamba``), ``moe`` (MoE MLP), ``free`` (no MLP) and ``dense``
    (dense MLP, ``1 - moe - free``), and ``mlp`` (``1 - free``, MLP blocks per layer)."""
    # layers >= 1 (plain division keeps Python floats); a part left out is 0
    mamba = m.mamba_layers / m.layers if has_part(m, "mamba") else 0.0
    moe = m.moe_layers / m.layers if has_part(m, "moe") else 0.0
    free = m.mlp_free_layers / m.layers
    return {
        "mamba": mamba,
        "attention": 1.0 - mamba,
        "moe": moe,
        "free": free,
        "dense": 1.0 - moe - free,
        "mlp": 1.0 - free,
    }


def moe_load(m: Model, strategy, moe_imbalance=1.0):
    """Routed slots on the busiest expert rank, in units of the balanced ``tokens x top_k``.

    Dropless (``Strategy.moe_capacity_factor`` 0, Megatron-Core's default): ``moe_imbalance x
    (1 + moe_sampling_excess)``, the router's own skew (1: balanced) times the busiest rank's
    excess at uniform random routing (:func:`moe_sampling_excess`); that rank receives,
    permutes, computes and stores that many times its share, and the all-to-all waits for it.
    Token drop padded to capacity ``c`` (Fedus et al. 2021, arXiv:2101.03961, Sec. 2.2;
    Megatron-Core ``moe_expert_capacity_factor`` with ``moe_pad_expert_input_to_capacity``):
    ``c`` on every rank, padding included, whatever the routing.

    Example (one expert rank: no busiest one):
        >>> from codesign.specs import Model, Strategy
        >>> moe = Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
        ...             vocab=32000, seq_len=4096, moe_experts=8, moe_top_k=2,
        ...             moe_ffn_hidden=14336, moe_layers=32)
        >>> float(moe_load(moe, Strategy(tp=1, pp=1, dp=8), 1.2))
        1.2
        >>> round(float(moe_load(moe, Strategy(tp=1, pp=1, dp=8, ep=8), 1.0)), 4)
        1.0137
        >>> float(moe_load(moe, Strategy(tp=1, pp=1, dp=8, moe_capacity_factor=1.25), 1.2))
        1.25
    """
    c = strategy.moe_capacity_factor
    return jnp.where(c > 0, c, moe_imbalance * (1.0 + moe_sampling_excess(m, strategy)))


def moe_sampling_excess(m: Model, strategy):
    """Relative excess of the busiest expert rank's routed slots over their mean, expected at
    uniform random routing (what benchmarks that force load balancing run:
    ``moe_router_force_load_balancing`` draws random router scores).

    Each of the ``ep etp T`` tokens that reach one expert rank's group (``T`` per router,
    :func:`moe_router_tokens`; its ``etp`` ranks gather theirs) picks ``k`` of the ``E`` experts,
    of which the rank holds ``E / ep``: a hypergeometric count of mean ``k / ep`` and variance
    ``(k / ep)(1 - 1/ep)(E - k)/(E - 1)``.  Summed, the rank's slots have mean ``etp T k`` and
    relative variance ``v = (1 - 1/ep)(E - k) / ((E - 1) etp T k)``; the busiest of ``ep``
    such ranks exceeds the mean by ``sqrt(v) E[max of ep standard normals]``, the latter by
    Blom's approximation ``Phi^-1((ep - 0.375) / (ep + 0.25))`` (Blom 1958; within 5 % of a
    simulation of the routing, tested).  0 with one rank or ``k = E``.
    """
    st = strategy
    t = moe_router_tokens(m, st) * expert_tp(st)
    e, k = m.moe_experts, m.moe_top_k
    var_rel = safe_div((1.0 - safe_div(1.0, st.ep)) * (e - k), (e - 1.0) * t * k)
    return ndtri((st.ep - 0.375) / (st.ep + 0.25)) * safe_sqrt(var_rel)


def local_experts(m: Model, strategy):
    """Routed experts each expert-parallel rank holds, ``E / ep`` (at least 1).

    Example:
        >>> from codesign.specs import Model, Strategy
        >>> moe = Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
        ...             vocab=32000, seq_len=4096, moe_experts=8, moe_top_k=2,
        ...             moe_ffn_hidden=14336, moe_layers=32)
        >>> float(local_experts(moe, Strategy(tp=1, pp=1, dp=8, ep=4)))
        2.0
    """
    return jnp.maximum(safe_div(m.moe_experts, strategy.ep, 1.0), 1.0)


def moe_router_tokens(m: Model, strategy):
    """Tokens one rank's router sees per micro-batch: ``microbatch x seq_len / cp``, divided by
    ``tp`` with sequence parallelism (Megatron-Core routes the sequence-parallel shard; the
    capacity of token drop is computed on these tokens, ``topk_softmax_with_capacity``)."""
    st = strategy
    sp = st.sequence_parallel
    return st.microbatch * m.seq_len / st.cp / (sp * st.tp + (1.0 - sp))


def moe_dropped_fraction(m: Model, strategy, sm: Smoothing = EXACT):
    """Expected fraction of routed token slots that token drop discards, at uniform routing.

    Megatron-Core (``moe_expert_capacity_factor`` ``c``; Fedus et al. 2021, arXiv:2101.03961,
    Sec. 2.2) lets each expert take at most ``C = ceil(c T k / E)`` of the ``T`` tokens a rank's
    router sees (:func:`moe_router_tokens`), ``k`` of ``E`` experts each, and drops the rest.
    With routing spread uniformly at random, as the benchmarks that force load balancing run
    (``moe_router_force_load_balancing``: random router scores), an expert's count is
    ``X ~ Binomial(T, p = k/E)`` and the dropped fraction is ``E[(X - C)+] / (T p)``, here
    by the normal approximation ``sigma (phi(z) - z Q(z))`` with ``z = (C - T p) / sigma``,
    ``sigma^2 = T p (1 - p)`` (within 0.1 percentage point of the binomial sum from 32 expected
    tokens per expert up, 0.5 from 8; tested).  A trained router's own skew drops more;
    dropless (``c = 0``): 0.  It is a quality cost the step time does not see: padded to
    capacity every expert computes ``C`` slots (:func:`moe_load`).  ``sm`` smooths the ceil
    (relaxed mode: straight-through, the exact value with a gradient in ``c``).

    Example (Qwen3-235B-A22B: 128 experts, top 8; 4096 tokens per router, capacity 1):
        >>> from codesign.specs import Model, Strategy
        >>> qwen = Model(layers=94, hidden=4096, heads=64, kv_heads=4, ffn_hidden=12288,
        ...              vocab=151936, seq_len=4096, moe_experts=128, moe_top_k=8,
        ...              moe_ffn_hidden=1536, moe_layers=94)
        >>> st = Strategy(tp=1, pp=1, dp=8, ep=8, moe_capacity_factor=1.0)
        >>> round(100 * float(moe_dropped_fraction(qwen, st)), 2)
        2.41
        >>> float(moe_dropped_fraction(qwen, Strategy(tp=1, pp=1, dp=8, ep=8)))
        0.0
    """
    c = strategy.moe_capacity_factor
    tokens = moe_router_tokens(m, strategy)
    p = safe_div(m.moe_top_k, m.moe_experts)
    mean = tokens * p
    capacity = sm.ceil(c * mean)
    var = mean * (1.0 - p)
    sigma = safe_sqrt(var, 1.0)  # 1 where there is no spread (the where below)
    z = (capacity - mean) / sigma
    spread = sigma * (norm.pdf(z) - z * ndtr(-z))
    excess = jnp.where(var > 0, spread, jnp.maximum(mean - capacity, 0.0))
    return jnp.where(c > 0, safe_div(excess, mean), 0.0)


def mamba_dims(m: Model) -> tuple:
    """``(d_inner, G N, H)``: inner width, total width of B (= of C), heads of the mixer."""
    return m.mamba_heads * m.mamba_head_dim, m.mamba_groups * m.mamba_state_dim, m.mamba_heads


def mamba_gemms(m: Model) -> list:
    """The projection GEMMs of one Mamba-2 mixer as ``(n, k, split)`` per token (see
    :func:`attention_gemms`): ``in_proj`` ``(2 d_inner + 2 G N + H) x h`` column parallel (z, x,
    B, C and dt all split by tensor parallelism, the groups ``G`` too) and ``out_proj``
    ``h x d_inner`` row parallel (Megatron-Core ``MambaMixer``)."""
    di, gn, nh = mamba_dims(m)
    return [(2.0 * di + 2.0 * gn + nh, m.hidden, "n"), (m.hidden, di, "k")]


def mamba_params(m: Model):
    """Parameters of one Mamba-2 mixer: the two projections, the convolution's weights and
    biases ``(d_inner + 2 G N)(K + 1)``, ``A``, ``D`` and the dt bias (``3 H``) and the gated
    RMSNorm's ``d_inner`` (Megatron-Core ``MambaMixer``; the block's pre-norm is in ``norms``)."""
    di, gn, nh = mamba_dims(m)
    proj = sum(n * k for n, k, _ in mamba_gemms(m))
    return proj + (di + 2.0 * gn) * (m.mamba_conv_kernel + 1.0) + 3.0 * nh + di


def ssd_flops_per_token(m: Model):
    """Forward FLOPs per token of the chunked SSD scan (Dao & Gu 2024, arXiv:2405.21060, Sec. 6,
    with chunk ``Q`` = :data:`SSD_CHUNK`): the diagonal blocks ``C B^T`` per group and chunk
    (``2 Q G N``) and their product with x per head (``2 Q d_inner``), the chunk states ``B^T x``
    (``2 N d_inner``) and the outputs from the states ``C h`` (``2 N d_inner``):
    ``2 Q (G N + d_inner) + 4 N d_inner``.  The state passing between chunks (``O(N d_inner /
    Q)``) is left out; the convolution's ``2 K (d_inner + 2 G N)`` is in the layer's ``2 x
    parameters`` of :func:`forward_flops_per_token`."""
    di, gn, _ = mamba_dims(m)
    return 2.0 * SSD_CHUNK * (gn + di) + 4.0 * m.mamba_state_dim * di


def layer_params(m: Model) -> dict:
    """Parameters of one layer by part.

    ``attention``: the sequence mixer averaged over depth, the projections of
    :func:`attention_gemms` (GQA: ``h (q + 2 kv) + q h``) on the attention layers and
    :func:`mamba_params` (also given alone as ``mamba``) on the Mamba layers;
    ``mlp``: ``(2 + gated) h f`` (one dense MLP) times ``1 - mlp_free_layers / (layers -
    moe_layers)`` (1 without MLP-free layers), so that ``layers - moe_layers`` times it counts
    the dense MLPs; ``router``: ``h E``; ``experts``: ``E (2 + gated) h f_e`` (all routed
    experts); ``shared``: ``n_s (2 + gated) h f_e``; ``norms``: ``2 h`` (one ``h`` less on an
    MLP-free layer; plus MLA's latent norms).
    """
    h = m.hidden
    mats = 2.0 + m.gated_mlp
    fr = fractions(m)
    attn = sum(n * k for n, k, _ in attention_gemms(m))
    mamba = mamba_params(m) if has_part(m, "mamba") else 0.0
    moe = has_part(m, "moe")
    one_mlp = mats * h * m.ffn_hidden
    non_moe = m.layers - m.moe_layers
    non_moe = non_moe + (non_moe <= 0)  # no MLP-free layers then (checks.check_model)
    return {
        "attention": fr["attention"] * attn + fr["mamba"] * mamba,
        "mlp": one_mlp - one_mlp * m.mlp_free_layers / non_moe,
        "router": h * m.moe_experts if moe else 0.0,
        "experts": m.moe_experts * mats * h * m.moe_ffn_hidden if moe else 0.0,
        "shared": m.moe_shared_experts * mats * h * m.moe_ffn_hidden if moe else 0.0,
        "norms": 2.0 * h + is_mla(m) * (m.q_lora_rank + m.kv_lora_rank) - fr["free"] * h,
        "mamba": mamba,
    }


def mtp_extra_params(m: Model):
    """Parameters of one multi-token-prediction module beside its transformer layer: the
    projection ``M_k`` of ``h x 2h`` and three RMSNorms (``enorm``, ``hnorm`` and the final
    norm), ``2 h^2 + 3 h`` (DeepSeek-V3, arXiv:2412.19437, eq. 21; Megatron-Core
    ``MultiTokenPredictionLayer``)."""
    return 2.0 * m.hidden * m.hidden + 3.0 * m.hidden


def total_params(m: Model) -> dict:
    """Whole-model parameter counts: ``total``, ``active`` (per token), ``expert``, ``embedding``.

    ``mtp_layers`` multi-token-prediction modules add an average layer each and
    :func:`mtp_extra_params` (DeepSeek-V3: 671B without, 682B with its one module; the
    report's 685B also counts the module's copies of the embedding and the output head).

    Example (GPT-3 175B, Brown et al. 2020):
        >>> from codesign.specs import Model
        >>> m = Model(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152,
        ...           vocab=51200, seq_len=2048)
        >>> round(float(total_params(m)["total"]) / 1e9, 1)
        175.2
    """
    p = layer_params(m)
    dense_layers = m.layers - m.moe_layers  # p["mlp"] carries the MLP-free layers
    per_layer_common = p["attention"] + p["norms"]
    expert = m.moe_layers * p["experts"]
    embedding = m.vocab * m.hidden * (2.0 - m.tied_embeddings)
    non_expert = (
        m.layers * per_layer_common
        + dense_layers * p["mlp"]
        + m.moe_layers * (p["router"] + p["shared"])
        + embedding
    )
    active_expert = m.moe_layers * m.moe_top_k * (2.0 + m.gated_mlp) * m.hidden * m.moe_ffn_hidden
    # multi-token prediction: an average layer per module, plus its projection and norms
    mtp = m.mtp_layers / m.layers if has_part(m, "mtp") else 0.0
    expert, active_expert = (1.0 + mtp) * expert, (1.0 + mtp) * active_expert
    non_expert = non_expert + mtp * (non_expert - embedding) + m.mtp_layers * mtp_extra_params(m)
    return {
        "total": non_expert + expert,
        "active": non_expert + active_expert,
        "expert": expert,
        "non_expert": non_expert,
        "embedding": embedding,
    }


def forward_flops_per_token(m: Model) -> dict:
    """Forward FLOPs per token by part (2 FLOPs per multiply-accumulate).

    ``gemm`` per layer (dense MLP, MoE and MLP-free layers, attention and Mamba mixers
    averaged over the depth, 2 FLOPs per parameter: for a Mamba mixer its projections, its
    convolution and, one multiply-add each, its per-channel biases, norm and A, D, dt; the
    Mamba layers' SSD scan, matmuls on the tensor cores, is included and also given alone
    as ``ssd``), ``attention`` per layer (``QK^T`` and ``AV``:
    ``2 s (qk + v)`` per token, ``4 s q`` for standard attention, full, not causal, as in
    Narayanan et al. eq. 3, on the attention layers, ``s`` replaced by
    :func:`attention_keys` with sliding-window layers), ``logits`` for the whole model
    (``2 h V``), and ``mtp`` for the multi-token-prediction modules (each a layer, its
    ``2h -> h`` projection and the output head again: ``gemm + attention + 4 h^2 + 2 h V``).
    """
    p = layer_params(m)
    qk, v = attention_core_dims(m)
    mats = 2.0 + m.gated_mlp
    fr = fractions(m)
    moe_frac = fr["moe"]
    moe_mlp = (
        p["router"] + (m.moe_top_k + m.moe_shared_experts) * mats * m.hidden * m.moe_ffn_hidden
        if has_part(m, "moe")
        else 0.0
    )
    mlp = (1.0 - moe_frac) * p["mlp"] + moe_frac * moe_mlp
    ssd = fr["mamba"] * ssd_flops_per_token(m) if has_part(m, "mamba") else 0.0
    gemm = 2.0 * (p["attention"] + mlp) + ssd
    attention = fr["attention"] * 2.0 * attention_keys(m) * (qk + v)
    logits = 2.0 * m.hidden * m.vocab
    return {
        "gemm": gemm,
        "attention": attention,
        "logits": logits,
        "ssd": ssd,
        "mtp": (
            m.mtp_layers * (gemm + attention + 4.0 * m.hidden * m.hidden + logits)
            if has_part(m, "mtp")
            else 0.0
        ),
    }


def model_flops_per_step(m: Model, global_batch):
    """Model FLOPs of one training step (forward + backward, no recomputation).

    ``3 * B * s * (l * (gemm + attention) + logits + mtp)``; for a GPT with ``ffn = 4h`` this
    is ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``, i.e. Narayanan et al. eq. (3) without the
    recomputed forward pass (Megatron-LM's ``num_floating_point_operations`` counts the
    multi-token-prediction modules likewise).
    """
    f = forward_flops_per_token(m)
    tokens = global_batch * m.seq_len
    return 3.0 * tokens * (m.layers * (f["gemm"] + f["attention"]) + f["logits"] + f["mtp"])
