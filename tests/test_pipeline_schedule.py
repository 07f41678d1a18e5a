"""The pipeline formulas against a simulation of Megatron-Core's interleaved 1F1B schedule.

The simulation runs each rank's operations in the fixed order of Megatron-Core's
``forward_backward_pipelining_with_interleaving`` (``megatron/core/pipeline_parallel/
schedules.py``: ``get_schedule_table`` with ``microbatch_group_size_per_vp_stage = p``,
``(p - r - 1) 2 + (v - 1) p`` warm-up forwards on rank ``r``, then one forward and one
backward in turn, then the cool-down backwards); an operation starts when its rank is free and
the chunk it depends on is done (a forward needs the previous stage's, or the last stage's
previous chunk; a backward the next stage's, or the first stage's next chunk).  Forward and
backward of a chunk take ``f`` and ``b`` per layer.  Communication is free.

It checks what :mod:`codesign.pipeline` assumes: the step is ``m (t_f + t_b)`` of the most
loaded stage plus the bubble ``(p - 1)/v (t_f + t_b)`` (Narayanan et al. 2021, Sec. 2.2.2),
exactly with equal chunks and within 3 % where the most loaded stage has equal chunks; and
that the layouts :func:`codesign.pipeline.layout_valid` rejects for unequal chunks on the
busiest stage do stall.
"""

from __future__ import annotations

import pytest

from codesign.pipeline import bubble_time, layout_valid, stage_layers
from codesign.rules import _Floats, _Host
from codesign.smoothing import EXACT
from codesign.specs import make_strategy

F, B = 1.0, 2.0  # forward and backward time per layer (backward twice the forward)


def _table(m: int, v: int, group: int) -> list:
    """Megatron-Core's ``get_schedule_table``: (micro-batch, chunk) of each virtual step."""
    out = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        out += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    return out


def _ops(rank: int, p: int, v: int, m: int) -> list:
    """Rank ``rank``'s operations in Megatron-Core's order: ('F' | 'B', micro-batch, chunk)."""
    total = m * v
    warm = min(p - rank - 1 if v == 1 else 2 * (p - rank - 1) + (v - 1) * p, total)
    table = _table(m, v, p)

    def fwd(k):
        return ("F", table[k][0], table[k][1])

    def bwd(k):
        return ("B", table[k][0], v - 1 - table[k][1])

    ops = [fwd(k) for k in range(warm)]
    for i in range(total - warm):
        ops += [fwd(warm + i), bwd(i)]
    ops += [bwd(k) for k in range(total - warm, total)]
    return ops


def simulate(sizes: list, m: int) -> float:
    """Makespan of a step: ``sizes[r][c]`` layers in chunk ``c`` of stage ``r``."""
    p, v = len(sizes), len(sizes[0])
    seqs = [_ops(r, p, v, m) for r in range(p)]
    done: dict = {}
    pos, free = [0] * p, [0.0] * p
    left = sum(len(s) for s in seqs)
    while left:
        moved = False
        for r in range(p):
            while pos[r] < len(seqs[r]):
                kind, mb, c = seqs[r][pos[r]]
                if kind == "F":
                    dep = ("F", mb, c, r - 1) if r > 0 else ("F", mb, c - 1, p - 1)
                    dep = None if (r == 0 and c == 0) else dep
                elif r < p - 1:
                    dep = ("B", mb, c, r + 1)
                else:
                    dep = ("B", mb, c + 1, 0) if c < v - 1 else ("F", mb, c, r)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                free[r] = start + (F if kind == "F" else B) * sizes[r][c]
                done[(kind, mb, c, r)] = free[r]
                pos[r] += 1
                left -= 1
                moved = True
        assert moved, "the schedule deadlocked"
    return max(free)


def chunks(n: int, v: int, where: str) -> list:
    """``n`` layers in ``v`` whole chunks, the extra layers at the front, back or middle."""
    q, extra = divmod(n, v)
    start = {"front": 0, "back": v - extra, "middle": (v - extra) // 2}[where]
    return [q + (start <= c < start + extra) for c in range(v)]


def model_step(layers: int, st, m: int) -> float:
    """What codesign.pipeline gives: the most loaded stage's micro-batches and the bubble."""
    n = stage_layers(float(layers), st, EXACT)
    t_mb = (F + B) * max(float(n["first"]), float(n["middle"]), float(n["last"]))
    return m * t_mb + float(bubble_time(float(st.pp), float(st.interleave), t_mb))


def _sizes(layers: int, st, where: str) -> list:
    """Per-stage chunk sizes of the layout codesign.pipeline describes."""
    n = stage_layers(float(layers), st, EXACT)
    p, v = int(st.pp), int(st.interleave)
    per = [n["first"]] + [n["middle"]] * (p - 2) + [n["last"]] if p > 1 else [n["first"]]
    return [chunks(round(float(k)), v, where) for k in per]


def _valid(layers, st) -> bool:
    return bool(layout_valid(_Host, float(layers), _Floats(st)))


@pytest.mark.parametrize(
    ("p", "v", "n", "m"),
    [(4, 1, 4, 16), (4, 2, 6, 16), (8, 4, 12, 64), (2, 8, 16, 32), (4, 3, 9, 20)],
)
def test_equal_chunks_give_the_bubble_formula_exactly(p, v, n, m):
    """Equal chunks: the simulated step is ``m (t_f + t_b) + (p - 1)/v (t_f + t_b)`` exactly
    (Narayanan et al. 2021, Sec. 2.2.2), with ``t_f + t_b = 3 n`` per stage and micro-batch."""
    st = make_strategy(tp=1, pp=p, dp=1, interleave=v)
    assert _valid(n * p, st)
    assert simulate([[n // v] * v] * p, m) == pytest.approx(model_step(n * p, st, m), abs=1e-9)


CASES = [
    # (name, layers, strategy keywords, micro-batches)
    (
        "Qwen3 235B, 94 layers on 8 stages, 4 chunks (12 or 11 layers)",
        94,
        dict(pp=8, interleave=4),
        64,
    ),
    ("94 layers on 8 stages, 2 chunks", 94, dict(pp=8, interleave=2), 16),
    ("Llama 3 405B, 126 layers on 16 stages, 2 chunks", 126, dict(pp=16, interleave=2), 32),
    (
        "DeepSeek-V3 Et|(tt|)*30mL-like: first 7, last 6 on 8 stages, 4 chunks",
        61,
        dict(pp=8, interleave=4, pp_first_layers=7, pp_last_layers=6),
        64,
    ),
    (
        "DeepSeek-V3 first 16, last 13 on 4 stages, 4 chunks",
        61,
        dict(pp=4, interleave=4, pp_first_layers=16, pp_last_layers=13),
        32,
    ),
    (
        "DeepSeek-V3 first 32, last 29 on 2 stages, 4 chunks",
        61,
        dict(pp=2, interleave=4, pp_first_layers=32, pp_last_layers=29),
        32,
    ),
    ("80 layers on 6 stages, 2 chunks (14 or 13 layers)", 80, dict(pp=6, interleave=2), 48),
]


@pytest.mark.parametrize("where", ["front", "back", "middle"])
@pytest.mark.parametrize(("name", "layers", "kw", "m"), CASES, ids=[c[0][:40] for c in CASES])
def test_accepted_layouts_stay_within_3_percent(name, layers, kw, m, where):
    """Layouts whose most loaded stage splits into equal chunks, the others' smaller chunks
    anywhere: the simulated step is at most the model's and at least 97 % of it."""
    st = make_strategy(tp=1, dp=1, **kw)
    assert _valid(layers, st), name
    sim, model = simulate(_sizes(layers, st, where), m), model_step(layers, st, m)
    assert 0.97 * model <= sim <= model + 1e-9, (name, where, sim, model)


@pytest.mark.parametrize(
    ("layers", "p", "v"),
    [(36, 4, 8), (94, 8, 8), (96, 8, 5)],
    ids=["GPT-OSS 9 layers in 8 chunks", "12 layers in 8 chunks", "12 layers in 5 chunks"],
)
def test_unequal_chunks_on_the_busiest_stage_stall_and_are_rejected(layers, p, v):
    """9 (12) layers per stage in 8 (5) chunks: the ranks wait on each other in every round,
    so the steady state runs over 2 % slower than the busiest stage's work and the bubble
    exceeds the formula's by half again; layout_valid rejects these layouts (the model could
    not price them)."""
    st = make_strategy(tp=1, pp=p, dp=1, interleave=v)
    assert not _valid(layers, st)
    per_mb = (F + B) * -(-layers // p)  # the busiest stage's work per micro-batch
    formula = float(bubble_time(float(p), float(v), per_mb))
    ms = (4 * p, 8 * p)
    extra = [simulate(_sizes(layers, st, "front"), m) - m * per_mb for m in ms]
    assert extra[0] > 1.5 * formula
    assert (extra[1] - extra[0]) / ((ms[1] - ms[0]) * per_mb) > 0.02


def test_automatic_split_needs_equal_chunks_only_where_the_load_is():
    """The rule as layout_valid states it, by hand: ceil(L / p) divisible by v."""
    ok = {
        (94, 8, 4): True,
        (94, 8, 2): True,
        (94, 8, 8): False,
        (36, 4, 3): True,
        (36, 4, 9): True,
        (36, 4, 8): False,
        (36, 4, 2): False,
        (61, 4, 4): True,
        (61, 4, 3): False,
        (61, 8, 1): True,
    }
    for (layers, p, v), want in ok.items():
        st = make_strategy(tp=1, pp=p, dp=1, interleave=v)
        assert _valid(layers, st) is want, (layers, p, v)
