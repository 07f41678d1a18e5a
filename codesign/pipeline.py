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

**Equal chunks where the load is.**  With ``v > 1`` the most loaded stage (``ceil(L / p)``
layers, or the largest of the explicit first, last and middle counts) must split into ``v``
equal chunks of whole layers; the less loaded stages may hold a smaller chunk (DeepSeek-V3's
``Et|(tt|)*30mL``).  Megatron-Core runs the chunks in a fixed order
(``forward_backward_pipelining_with_interleaving``), so unequal chunks on the busiest ranks
stall them in every round of the steady state, not only in the warm-up: a simulation of that
schedule (``tests/test_pipeline_schedule.py``) puts 9 layers in 8 chunks on 4 stages at
3-8x the ``(p - 1)/v`` bubble over 16-64 micro-batches (its steady state 4 % slower than the
stage's work), while the layouts allowed here stay within 3 % of the step time the formulas
below give.  Megatron-Core's own split without a layout asks more: ``L / p`` layers per
stage, divisible by ``v``.

The step waits for the slowest stage: its per-micro-batch time is ``n_i T_layer`` plus, on the
last stage, the output layer and loss and any multi-token-prediction modules (Megatron-Core
runs them in the last chunk of the last stage, each a layer, a projection and the output
head again: :mod:`codesign.workload`).  Memory peaks on one stage too, not necessarily the same.

**1F1B** (PipeDream-Flush; Narayanan et al. 2021, Sec. 2.2.1): with ``p`` stages and ``m``
micro-batches of per-stage time ``t_f + t_b``, a step takes ``(m + p - 1)(t_f + t_b)``, so the
bubble is ``(p - 1)(t_f + t_b)``.  The interleaved schedule with ``v`` model chunks per stage
(Sec. 2.2.2) shrinks the bubble to ``(p - 1)/v (t_f + t_b)`` at the price of ``v`` times as
many point-to-point transfers.

**In-flight micro-batches** of stage ``r`` (0-based): ``p - r`` under 1F1B; under the
interleaved schedule Megatron-Core warms up ``2 (p - r - 1) + (v - 1) p`` chunk passes before
its first backward, so ``2 (p - r - 1) + (v - 1) p + 1`` chunks of ``n_r / v`` layers are held
(capped by the ``m v`` chunks of the step).  For ``r = 0`` this is ``n p (1 + (p - 1)/(p v))``,
the factor of Korthikanti et al. 2022, Sec. 4.2.3.  They are not spread evenly over the
chunks: at the peak the first chunk holds ``min(2p, T_r)`` of the ``T_r`` and the last one
``min(p, 2 (p - r) - 1)`` (:func:`end_chunks_in_flight`).  That matters where the first
stage's first chunk or the last stage's last differs from the others: a layer fewer where
the embedding or the loss takes a slot (:func:`chunk_slots`, :func:`slot_chunks_in_flight`),
a low-precision run's 16-bit layers (:func:`bf16_stage_layers`, :func:`bf16_in_flight`).

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
    # number of layers in each chunk: only the per-stage totals must be whole and even, and,
    # interleaved, the most loaded stage's chunks equal (the module docstring says why).
    mid = rest / xp.maximum(k, 1.0)
    most = xp.maximum(xp.maximum(xp.where(f > 0, f, mid), xp.where(last > 0, last, mid)), mid)
    ok_1 = (
        (e == 0)
        & (o == 0)
        & (rest >= 0)
        & xp.where(k > 0, div(k, xp.maximum(rest, 1.0)) & (rest >= k), rest == 0)
        & ((v <= 1) | div(v, most))
    )
    slots = L + e + o
    ok_2 = div(p, slots) & div(v, slots / p) & (slots / p > e) & (slots / p > o) & (p > 1)
    p1 = xp.maximum(p, 1.0)
    most_auto = (L - xp.mod(L, p1)) / p1 + xp.where(xp.mod(L, p1) > 0, 1.0, 0.0)  # ceil(L / p)
    ok_auto = (L >= p * v) & ((v <= 1) | div(v, most_auto))
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


def end_chunks_in_flight(stage, pp, interleave, num_mb, sm: Smoothing):
    """Micro-batches that stage ``stage`` (0-based) holds of its first and of its last model
    chunk at its peak (when it holds :func:`in_flight_chunks` chunk passes in all): where a
    stage's 16-bit first or last layers sit.

    At ``v = 1`` both are the stage's ``p - r``.  Under the interleaved schedule Megatron-Core
    runs the forward passes in groups of ``p`` micro-batches per chunk (chunk ``(k mod pv) // p``)
    and the backward passes from the last chunk down, so at the peak the first chunk holds
    ``min(2p, T_r)`` (its first group and the next warm-up group; ``T_r`` the stage's total) and
    the last chunk ``min(p, 2 (p - r) - 1)``: one on the last stage, whose last chunk goes
    backward as soon as it went forward; each at most the ``m`` micro-batches of the step.
    (Checked against a simulation of the schedule in ``tests/test_bf16_layers.py``.)

    Example (8 stages, 4 chunks, 64 micro-batches: the first stage holds 39 chunk passes, the
    last 25):
        >>> from codesign.smoothing import EXACT
        >>> counts = [end_chunks_in_flight(r, 8.0, 4.0, 64.0, EXACT) for r in (0, 7)]
        >>> [tuple(float(c) for c in pair) for pair in counts]
        [(16.0, 8.0), (16.0, 1.0)]
    """
    total = in_flight_chunks(stage, pp, interleave, num_mb, sm)
    il = sm.step(interleave - 1.0)
    first = sm.min(2.0 * pp, total, num_mb)
    last = sm.min(pp, 2.0 * (pp - stage) - 1.0, num_mb)
    return il * first + (1.0 - il) * total, il * last + (1.0 - il) * total


def chunk_slots(stage, strategy):
    """Layer slots that the embedding and the loss take from the first chunk of the first stage
    and from the last chunk of the last stage (``account_for_embedding_in_pipeline_split`` /
    ``account_for_loss_in_pipeline_split``, layout rule 2: the chunks are even in slots, so
    those chunks hold one layer fewer); ``(0, 0)`` on other stages and under the other rules."""
    st = strategy
    _, accounted = _mode(st)
    first = accounted * st.pp_embedding_in_split * jnp.where(stage == 0, 1.0, 0.0)
    last = accounted * st.pp_loss_in_split * jnp.where(stage == st.pp - 1.0, 1.0, 0.0)
    return first, last


def slot_chunks_in_flight(total, pp, interleave, num_mb, sm: Smoothing):
    """Micro-batches of the first stage's first chunk and of the last stage's last chunk at
    the stage's peak, where a chunk with one layer fewer than the others (:func:`chunk_slots`)
    saves the most: the fewest at any peak moment, ``min(2p - 1, m)`` and ``1`` if ``m = p``,
    else ``0`` (the last chunk goes backward as soon as it went forward); the stage's
    ``total`` (its :func:`in_flight_chunks`) at ``v = 1``.  With them a stage's activations
    are exactly the most the schedule holds (checked against a simulation in
    ``tests/test_bf16_layers.py``)."""
    il = sm.step(interleave - 1.0)
    first = sm.min(2.0 * pp - 1.0, num_mb)  # at v >= 2 the first stage holds at least that
    last = sm.step(pp + 1.0 - num_mb)  # 1 at m = p, else 0
    return il * first + (1.0 - il) * total, il * last + (1.0 - il) * total


def bf16_in_flight(layers, stage, strategy, num_mb, sm: Smoothing):
    """Layer-micro-batches of 16-bit layers that stage ``stage`` holds at its peak:
    ``layers`` is its ``(at the start, at the end)`` pair of :func:`bf16_stage_layers`, the
    first in its first chunk, the second in the last chunk of the stage that holds the end's
    spill (the last but one for the middle stage), each at :func:`end_chunks_in_flight`."""
    st = strategy
    end_stage = jnp.where((stage > 0) & (stage < st.pp - 1.0), st.pp - 2.0, stage)
    first, _ = end_chunks_in_flight(stage, st.pp, st.interleave, num_mb, sm)
    _, last = end_chunks_in_flight(end_stage, st.pp, st.interleave, num_mb, sm)
    return layers[0] * first + layers[1] * last


def bf16_stage_layers(start, end, stages: list, sm: Smoothing, strategy) -> list:
    """16-bit layers on the first, a middle and the last stage, as ``(at the start, at the
    end)`` pairs (``stages``: the step model's ``(index, layers, ...)`` of each,
    :func:`codesign.step.evaluate_unchecked`).

    Megatron-Core keeps the first ``num_layers_at_start_in_bf16`` and the last
    ``num_layers_at_end_in_bf16`` transformer layers out of FP8/FP4 (``first_last_layers_bf16``;
    ``start`` / ``end``: ``Training.bf16_layers_start`` / ``bf16_layers_end``).  The model's
    layers run through the first chunk of every stage, then the second chunk of every stage,
    and so on, so the first layers fill the first stage's first chunk (``n / v`` of its ``n``
    layers; all of them at ``v = 1``) and the last layers the last stage's last chunk; what
    does not fit there goes to the next stage's (the middle stage here, which stands for the
    second stage and for the last but one, and takes the larger spill, at most its chunk).
    With two stages each takes the other's excess; with one stage it holds both.  The
    embedding's and the loss's slots (:func:`chunk_slots`) are not layers; ``strategy`` gives
    the chunks and the slots.
    """
    (i_first, n_first, *_), (_, n_mid, *_), (i_last, n_last, *_) = stages
    e, o = chunk_slots(i_first, strategy)[0], chunk_slots(i_last, strategy)[1]
    il = sm.step(strategy.interleave - 1.0)
    v = jnp.maximum(strategy.interleave, 1.0)
    # a chunk of each stage: the first stage's first and the last stage's last, less a slot
    c_first, c_mid, c_last = (n_first + e) / v - e, n_mid / v, (n_last + o) / v - o
    ks, ke = start, end
    single = 1.0 - sm.step(stages[2][0])  # the last stage's index is pp - 1
    two = (1.0 - single) * (1.0 - sm.step(n_mid))  # two stages: each takes the other's excess
    spill_s = sm.relu(ks - c_first, scale=1.0)
    spill_e = sm.relu(ke - c_last, scale=1.0)
    # At v = 1 the first and the last chunk are one chunk: what the one end takes, the other
    # cannot.
    first_s = jnp.minimum(ks, c_first)
    first_e = jnp.minimum(single * ke + two * spill_e, c_first - (1.0 - il) * first_s)
    last_e = (1.0 - single) * jnp.minimum(ke, c_last)
    last_s = (1.0 - single) * jnp.minimum(two * spill_s, c_last - (1.0 - il) * last_e)
    last_s, last_e = last_s + single * first_s, last_e + single * first_e
    mid = jnp.minimum(jnp.maximum(spill_s, spill_e), c_mid)
    mid_s = jnp.where(spill_s >= spill_e, mid, 0.0)
    return [(first_s, first_e), (mid_s, mid - mid_s), (last_s, last_e)]
