"""Pipeline-parallel schedule: stage layout, micro-batches, bubble, in-flight activations, p2p.

**Stage layout** (Megatron-Core, ``TransformerConfig``): the ``L`` layers are split over ``p``
stages of ``v`` model chunks each.  Four ways, in this order of precedence:

1. explicit first/last stage counts (``num_layers_in_first_pipeline_stage`` /
   ``..._last_...``, or the first and last stage of a ``pipeline_model_parallel_layout``,
   which may put any number of layers in each chunk): the other ``L - f - l`` layers are
   split evenly over the remaining stages;
2. ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the
   embedding and the output layer with the loss each count as one layer, ``(L + e + o) / p``
   slots per stage, so the first (last) stage holds one layer fewer;
3. ``L`` divisible by ``p v``: ``L / p`` layers per stage (the classic rule);
4. otherwise (a ``pipeline_model_parallel_layout`` chosen for balance): ``floor(L / p)`` or
   ``ceil(L / p)`` layers per stage, the extra layers on the middle stages first, then on the
   last, then on the first stage.

The step waits for the slowest stage: its per-micro-batch time is ``n_i T_layer`` plus, on the
last stage, the output layer and loss.  Memory peaks on one stage too, not necessarily the same.

**1F1B** (PipeDream-Flush; Narayanan et al. 2021, Sec. 2.2.1): with ``p`` stages and ``m``
micro-batches of per-stage time ``t_f + t_b``, a step takes ``(m + p - 1)(t_f + t_b)``, so the
bubble is ``(p - 1)(t_f + t_b)``.  The interleaved schedule with ``v`` model chunks per stage
(Sec. 2.2.2) shrinks the bubble to ``(p - 1)/v (t_f + t_b)`` at the price of ``v`` times as
many point-to-point transfers.

**In-flight micro-batches** of stage ``r`` (0-based): ``p - r`` under 1F1B; under the
interleaved schedule Megatron-Core warms up ``2 (p - r - 1) + (v - 1) p`` chunk passes before
its first backward, so ``2 (p - r - 1) + (v - 1) p + 1`` chunks of ``n_r / v`` layers are held
(capped by the ``m v`` chunks of the step).  For ``r = 0`` this is ``n p (1 + (p - 1)/(p v))``,
the factor of Korthikanti et al. 2022, Sec. 4.2.3.

**Point-to-point**: each micro-batch sends its activations forward and its gradients backward
across each of the ``v`` chunk boundaries of a rank, ``b s h / (t cp)`` half-precision elements
each (the scatter/gather optimization of Sec. 4.1 splits them over the tensor-parallel
ranks).  The ``p - 1`` transfers of the warm-up and cool-down are on the critical path; of the
steady-state ones, the fraction ``1 - p2p_overlap_eff`` is exposed under the interleaved
schedule (``v > 1``) and all of them at ``v = 1``: Megatron-Core overlaps the steady-state
send/receive with compute only in the interleaved schedule (``overlap_p2p_comm``); without
virtual stages it batches them and waits (``batch_p2p_comm``), the rule Megatron-Bridge's
``training/comm_overlap.py`` and NeMo's comm-overlap callback apply.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from codesign.smoothing import Smoothing

__all__ = [
    "num_microbatches",
    "bubble_time",
    "exposed_p2p_time",
    "stage_layers",
    "layout_valid",
    "in_flight_chunks",
    "bf16_stage_layers",
    "STAGES",
]

STAGES = ("first", "middle", "last")
"""The three stage kinds whose loads the model compares (a middle stage exists for p >= 3)."""


def num_microbatches(global_batch, dp, microbatch, sm: Smoothing):
    """Micro-batches per step per pipeline: ``ceil(B / (dp * b))`` (Narayanan et al., SC21,
    Sec. 2.2: ``m = B / (b * d)``).  The rules require ``dp * b`` to divide ``B``, so the
    relaxed model takes the ratio itself (:meth:`Smoothing.ceil_valid`)."""
    return sm.ceil_valid(global_batch / (dp * microbatch) - 1e-9)


def bubble_time(pp, interleave, per_microbatch_s):
    """Pipeline bubble ``(p - 1) / v * (t_f + t_b)``, seconds."""
    return (pp - 1.0) / interleave * per_microbatch_s


def exposed_p2p_time(pp, interleave, num_mb, p2p_s, p2p_overlap_eff, sm: Smoothing):
    """Exposed send/receive time of one rank over a step (forward and backward); the
    steady-state transfers are hidden up to ``p2p_overlap_eff`` only when ``interleave > 1``
    (Megatron-Core's ``overlap_p2p_comm``; at ``v = 1`` it batches them and waits)."""
    hidden = p2p_overlap_eff * sm.step(interleave - 1.0)
    return 2.0 * p2p_s * ((pp - 1.0) + (1.0 - hidden) * num_mb * interleave)


def _floor(x, sm: Smoothing):
    return -sm.ceil(-x)


def _mode(strategy, xp: Any = jnp) -> tuple:
    """``(explicit, accounted)`` weights of layout rules 1 and 2 (0/1 for concrete inputs)."""
    st = strategy
    explicit = xp.where((st.pp_first_layers > 0) | (st.pp_last_layers > 0), 1.0, 0.0)
    accounted = xp.where((st.pp_embedding_in_split > 0) | (st.pp_loss_in_split > 0), 1.0, 0.0)
    return explicit, (1.0 - explicit) * accounted


def stage_layers(layers, strategy, sm: Smoothing) -> dict:
    """Layers on the ``first``, a ``middle`` and the ``last`` stage (summed over chunks), and
    ``has_middle`` (1 when ``p >= 3``).  With ``p = 1`` all three are the whole model.

    Example (Llama 3 405B, 126 layers, p = 8, embedding and loss counted):
        >>> from codesign.specs import make_strategy
        >>> from codesign.smoothing import EXACT
        >>> st = make_strategy(tp=8, pp=8, dp=1, interleave=8, pp_embedding_in_split=True,
        ...                    pp_loss_in_split=True)
        >>> {k: float(v) for k, v in stage_layers(126.0, st, EXACT).items()}
        {'first': 15.0, 'middle': 16.0, 'last': 15.0, 'has_middle': 1.0}
    """
    st = strategy
    L, p = layers, st.pp
    explicit, accounted = _mode(st)
    # 1. explicit first/last counts
    f_set = jnp.where(st.pp_first_layers > 0, 1.0, 0.0)
    l_set = jnp.where(st.pp_last_layers > 0, 1.0, 0.0)
    rest_stages = jnp.maximum(p - f_set - l_set, 1.0)
    mid_1 = (L - st.pp_first_layers - st.pp_last_layers) / rest_stages
    first_1 = f_set * st.pp_first_layers + (1.0 - f_set) * mid_1
    last_1 = l_set * st.pp_last_layers + (1.0 - l_set) * mid_1
    # 2. embedding / loss counted as layers
    slots = (L + st.pp_embedding_in_split + st.pp_loss_in_split) / p
    first_2, mid_2, last_2 = slots - st.pp_embedding_in_split, slots, slots - st.pp_loss_in_split
    # 3./4. automatic: floor(L/p) or ceil(L/p) layers per stage, the R = L - p floor(L/p)
    # extra layers on middle stages first (the first stage holds the most activations and
    # the last one the output layer), then on the last, then on the first stage.
    q = _floor(L / p + 1e-9, sm)
    extra = jnp.maximum(L - q * p - (p - 2.0), 0.0)
    mid_4 = sm.ceil(L / p - 1e-9)
    last_4 = q + jnp.clip(extra, 0.0, 1.0)
    first_4 = q + jnp.clip(extra - 1.0, 0.0, 1.0)
    auto = 1.0 - explicit - accounted
    first = explicit * first_1 + accounted * first_2 + auto * first_4
    middle = explicit * mid_1 + accounted * mid_2 + auto * mid_4
    last = explicit * last_1 + accounted * last_2 + auto * last_4
    single = 1.0 - sm.step(p - 1.0)
    first = single * L + (1.0 - single) * jnp.maximum(first, 0.0)
    last = single * L + (1.0 - single) * jnp.maximum(last, 0.0)
    middle = single * L + (1.0 - single) * jnp.maximum(middle, 0.0)
    return {"first": first, "middle": middle, "last": last, "has_middle": sm.step(p - 2.0)}


def layout_valid(xp, layers, st):
    """Megatron-Core's checks of a stage layout (host ``xp`` = Python/numpy, or traced)."""
    L, p, v = layers, st.pp, st.interleave

    def div(a, b):  # a divides b (positive integers stored as floats)
        return (xp.mod(b, xp.maximum(a, 1.0)) == 0) & (a >= 1)

    f, last = st.pp_first_layers, st.pp_last_layers
    e, o = st.pp_embedding_in_split, st.pp_loss_in_split
    explicit = (f > 0) | (last > 0)
    n_set = xp.where(f > 0, 1.0, 0.0) + xp.where(last > 0, 1.0, 0.0)
    rest, k = L - f - last, p - n_set
    # Explicit counts may come from a ``pipeline_model_parallel_layout``, which places any
    # number of layers in each chunk: only the per-stage totals must be whole and even.
    ok_1 = (
        (e == 0)
        & (o == 0)
        & (rest >= 0)
        & xp.where(k > 0, div(k, xp.maximum(rest, 1.0)) & (rest >= k), rest == 0)
    )
    slots = L + e + o
    ok_2 = div(p, slots) & div(v, slots / p) & (slots / p > e) & (slots / p > o) & (p > 1)
    ok_auto = L >= p * v
    return xp.where(explicit, ok_1, xp.where((e > 0) | (o > 0), ok_2, ok_auto))


def in_flight_chunks(stage, pp, interleave, num_mb, sm: Smoothing):
    """Model chunks (``n_r / v`` layers each) whose activations stage ``stage`` (0-based) holds
    at its peak: ``p - r`` (1F1B) or ``2 (p - r - 1) + (v - 1) p + 1`` (interleaved), at most
    the ``m v`` chunk passes of the step."""
    il = sm.step(interleave - 1.0)
    one_f_one_b = pp - stage
    interleaved = 2.0 * (pp - stage - 1.0) + (interleave - 1.0) * pp + 1.0
    chunks = il * interleaved + (1.0 - il) * one_f_one_b
    return sm.min(chunks, num_mb * interleave)


def bf16_stage_layers(start, end, stages: list, sm: Smoothing) -> list:
    """16-bit layers on the first, a middle and the last stage (``stages``: the step model's
    ``(index, layers, ...)`` of each, :func:`codesign.step.evaluate_unchecked`).

    Megatron-Core keeps the first ``num_layers_at_start_in_bf16`` and the last
    ``num_layers_at_end_in_bf16`` transformer layers out of FP8/FP4 (``first_last_layers_bf16``;
    ``start`` / ``end``: ``Training.bf16_layers_start`` / ``bf16_layers_end``): they sit on
    the first and the last pipeline stage, up to its layer count, and what does not fit there
    on the stages next to it (the middle stage here, at most its layers).  With one stage it
    holds both.
    """
    (_, n_first, *_), (_, n_mid, *_), (_, n_last, *_) = stages
    ks, ke = start, end
    single = 1.0 - sm.step(stages[2][0])  # the last stage's index is pp - 1
    two = (1.0 - single) * (1.0 - sm.step(n_mid))  # two stages: each takes the other's excess
    spill_s = sm.relu(ks - n_first, scale=1.0)
    spill_e = sm.relu(ke - n_last, scale=1.0)
    first = jnp.minimum(ks + single * ke + two * spill_e, n_first)
    last = jnp.minimum(ke + single * ks + two * spill_s, n_last)
    return [first, jnp.minimum(jnp.maximum(spill_s, spill_e), n_mid), last]
