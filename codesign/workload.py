"""Parameter counts and FLOPs of a transformer (what the step has to do, not how fast).

Dense-layer counts follow Narayanan et al., SC21 (arXiv:2104.04473), Sec. 5.1 and eq. (3):
per layer ``12 h^2`` parameters (``4 h^2`` attention, ``8 h^2`` MLP with ``ffn = 4h``) and
``24 b s h^2 + 4 b s^2 h`` forward FLOPs, plus ``2 b s h V`` for the logits; a training
step costs three forward passes (backward = 2 x forward) and four with full activation
recomputation, giving eq. (3) ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``.  We generalize
the same counting to grouped-query attention (Ainslie et al. 2023), gated MLPs (Shazeer
2020) and mixture-of-experts layers (Fedus et al. 2021; top-k experts active per token).
Biases and norms are counted in parameters (``2h`` per layer) but not in FLOPs, as in eq. 3.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.specs import Model

__all__ = [
    "head_dim",
    "attention_dims",
    "layer_params",
    "total_params",
    "forward_flops_per_token",
    "model_flops_per_step",
]


def head_dim(m: Model):
    """Per-head dimension: ``m.head_dim`` if set, else ``hidden / heads``."""
    return jnp.where(m.head_dim > 0, m.head_dim, m.hidden / m.heads)


def attention_dims(m: Model):
    """``(q_dim, kv_dim)``: total width of the queries and of the keys (= values)."""
    d = head_dim(m)
    return m.heads * d, m.kv_heads * d


def layer_params(m: Model) -> dict:
    """Parameters of one layer by part.

    ``attention``: ``h (q + 2 kv) + q h`` (QKV and output projections);
    ``mlp``: ``(2 + gated) h f`` (one dense MLP);
    ``router``: ``h E``; ``experts``: ``E (2 + gated) h f_e`` (all routed experts);
    ``shared``: ``n_s (2 + gated) h f_e``; ``norms``: ``2 h``.
    """
    h = m.hidden
    q, kv = attention_dims(m)
    mats = 2.0 + m.gated_mlp
    return {
        "attention": h * (q + 2.0 * kv) + q * h,
        "mlp": mats * h * m.ffn_hidden,
        "router": h * m.moe_experts,
        "experts": m.moe_experts * mats * h * m.moe_ffn_hidden,
        "shared": m.moe_shared_experts * mats * h * m.moe_ffn_hidden,
        "norms": 2.0 * h,
    }


def total_params(m: Model) -> dict:
    """Whole-model parameter counts: ``total``, ``active`` (per token), ``expert``, ``embedding``.

    Example (GPT-3 175B, Brown et al. 2020):
        >>> from codesign.specs import Model
        >>> m = Model(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152,
        ...           vocab=51200, seq_len=2048)
        >>> round(float(total_params(m)["total"]) / 1e9, 1)
        175.2
    """
    p = layer_params(m)
    dense_layers = m.layers - m.moe_layers
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
    return {
        "total": non_expert + expert,
        "active": non_expert + active_expert,
        "expert": expert,
        "non_expert": non_expert,
        "embedding": embedding,
    }


def forward_flops_per_token(m: Model) -> dict:
    """Forward FLOPs per token by part (2 FLOPs per multiply-accumulate).

    ``gemm`` per layer (dense MLP layers and MoE layers averaged over the depth),
    ``attention`` per layer (``QK^T`` and ``AV``: ``4 s q`` per token, full, not causal,
    as in Narayanan et al. eq. 3), and ``logits`` for the whole model (``2 h V``).
    """
    p = layer_params(m)
    q, _ = attention_dims(m)
    mats = 2.0 + m.gated_mlp
    moe_frac = m.moe_layers / m.layers
    moe_mlp = (
        p["router"] + (m.moe_top_k + m.moe_shared_experts) * mats * m.hidden * m.moe_ffn_hidden
    )
    mlp = (1.0 - moe_frac) * p["mlp"] + moe_frac * moe_mlp
    return {
        "gemm": 2.0 * (p["attention"] + mlp),
        "attention": 4.0 * m.seq_len * q,
        "logits": 2.0 * m.hidden * m.vocab,
    }


def model_flops_per_step(m: Model, global_batch):
    """Model FLOPs of one training step (forward + backward, no recomputation).

    ``3 * B * s * (l * (gemm + attention) + logits)``; for a GPT with ``ffn = 4h`` this is
    ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``, i.e. Narayanan et al. eq. (3) without the
    recomputed forward pass.
    """
    f = forward_flops_per_token(m)
    tokens = global_batch * m.seq_len
    return 3.0 * tokens * (m.layers * (f["gemm"] + f["attention"]) + f["logits"])
