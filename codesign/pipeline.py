"""Pipeline-parallel schedule: micro-batches, bubble and exposed point-to-point time.

1F1B (PipeDream-Flush; Narayanan et al. 2021, Sec. 2.2.1): with ``p`` stages and ``m``
micro-batches of per-stage time ``t_f + t_b``, a step takes ``(m + p - 1)(t_f + t_b)``, so
the bubble is ``(p - 1)(t_f + t_b)``.  The interleaved schedule with ``v`` model chunks per
stage (Sec. 2.2.2) shrinks the bubble to ``(p - 1)/v (t_f + t_b)`` at the price of ``v``
times as many point-to-point transfers.

Point-to-point: each micro-batch sends its activations forward and its gradients backward
across each of the ``v`` chunk boundaries of a rank, ``b s h / (t cp)`` half-precision
elements each (the scatter/gather optimization of Sec. 4.1 splits them over the tensor-
parallel ranks).  The ``p - 1`` transfers of the warm-up and cool-down are on the critical
path; of the steady-state ones, the fraction ``1 - p2p_overlap_eff`` is exposed.
"""

from __future__ import annotations

from codesign.smoothing import Smoothing

__all__ = ["num_microbatches", "bubble_time", "exposed_p2p_time"]


def num_microbatches(global_batch, dp, microbatch, sm: Smoothing):
    """Micro-batches per step per pipeline: ``ceil(B / (dp * b))``."""
    return sm.ceil(global_batch / (dp * microbatch) - 1e-9)


def bubble_time(pp, interleave, per_microbatch_s):
    """Pipeline bubble ``(p - 1) / v * (t_f + t_b)``, seconds."""
    return (pp - 1.0) / interleave * per_microbatch_s


def exposed_p2p_time(pp, interleave, num_mb, p2p_s, p2p_overlap_eff):
    """Exposed send/receive time of one rank over a step (forward and backward)."""
    return 2.0 * p2p_s * ((pp - 1.0) + (1.0 - p2p_overlap_eff) * num_mb * interleave)
