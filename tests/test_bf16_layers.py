"""16-bit layers of an FP8/FP4 run (``Training.bf16_layers_start`` / ``bf16_layers_end``).

Megatron-Core's ``first_last_layers_bf16`` keeps the first ``num_layers_at_start_in_bf16`` and
the last ``num_layers_at_end_in_bf16`` transformer layers out of FP8 (Megatron-Bridge
``training/mixed_precision.py``, ``bf16_with_fp8_current_scaling_mixed``: 1 and 1): those
layers run as in a 16-bit run, on the first and the last pipeline stage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import small_doc

import codesign as cd
from codesign import compute, memory, pipeline
from codesign.pipeline import bf16_stage_layers
from codesign.search import sweep
from codesign.smoothing import EXACT, Smoothing
from codesign.step import _stages


def _specs(precision="fp8-current", efficiency=None, **strategy):
    doc = small_doc(**strategy)
    doc["training"]["precision"] = precision
    if efficiency:
        doc["efficiency"] = efficiency
    return cd.load_run_dict(doc).specs()


def _mixed(tr, start, end):
    """``tr`` with 16-bit layers (and the static switch that puts them in the program)."""
    return tr.replace(first_last_layers_bf16=True, bf16_layers_start=start, bf16_layers_end=end)


def test_an_fp8_run_with_every_layer_in_16_bits_is_the_16_bit_run():
    """Llama 3 8B on one stage (TP 2, DP 32): with all 32 layers kept in 16 bits, an FP8 run
    takes the BF16 run's time term by term (the output layer is 16-bit in both), at one
    GEMM efficiency given for both, and stores what it stores (no FP8 weight cache left)."""
    eff = {"gemm_max": 0.75}
    m, tr, sy, st, e = _specs("bf16", eff, tp=2, pp=1, dp=32)
    r16 = cd.evaluate(m, tr, sy, st, e)
    m, tr8, sy, st, e8 = _specs("fp8-current", eff, tp=2, pp=1, dp=32)
    r8 = cd.evaluate(m, tr8, sy, st, e8)
    r_all = cd.evaluate(m, _mixed(tr8, 20.0, 12.0), sy, st, e8)
    assert float(r8.step_time_s) < 0.9 * float(r16.step_time_s)
    for k in ("forward", "backward", "recompute", "tp_comm", "pp_bubble"):
        assert float(r_all.breakdown_s[k]) == pytest.approx(float(r16.breakdown_s[k]), rel=1e-12)
    for k in ("activations", "weights", "total"):
        assert float(r_all.memory_gb[k]) == pytest.approx(float(r16.memory_gb[k]), rel=1e-12)
    assert float(r8.memory_gb["weights"]) > float(r16.memory_gb["weights"])


def test_a_calibrated_fp8_run_keeps_the_16_bit_gemm_efficiency_for_its_16_bit_layers():
    """With the calibrated H100 preset an FP8 run takes the FP8 gemm_max; its 16-bit layers
    take the preset's 16-bit one (gemm_max_16bit), the 16-bit run's."""
    _, _, _, _, e16 = _specs("bf16")
    _, _, _, _, e8 = _specs("fp8-current")
    assert float(e8.gemm_max) != float(e16.gemm_max)
    assert float(e8.gemm_max_16bit) == float(e16.gemm_max)
    _, _, _, _, own = _specs("fp8-current", {"gemm_max": 0.7})
    assert float(own.gemm_max_16bit) == 0.0  # a gemm_max of one's own serves both


def test_the_last_stage_pays_for_its_16_bit_layer_by_hand():
    """PP 4, 8 layers a stage: the last stage (8 layers and the output layer) is the slowest;
    one 16-bit layer at the end adds one layer's 16-bit forward less its FP8 forward to each
    micro-batch's forward there, one at the start (on the faster first stage) nothing."""
    m, tr, sy, st, e = _specs(tp=2, pp=4, dp=8)
    r0 = cd.evaluate(m, tr, sy, st, e)
    r_end = cd.evaluate(m, _mixed(tr, 0.0, 1.0), sy, st, e)
    r_start = cd.evaluate(m, _mixed(tr, 1.0, 0.0), sy, st, e)
    act8 = memory.layer_activation_bytes(m, st, tr.precision)
    act16 = memory.layer_activation_bytes(m, st, "bf16")
    fwd8 = compute.layer_times(m, st, sy, e, tr.precision, act8, EXACT)
    fwd16 = compute.layer_times(
        m, st, sy, e.replace(gemm_max=e.gemm_max_16bit), "bf16", act16, EXACT
    )
    d_fwd = sum(float(fwd16[k] - fwd8[k]) for k in ("gemm", "attention", "elementwise"))
    assert d_fwd > 0
    n_mb = 512 / 8  # global batch over dp x micro-batch 1
    assert float(r_end.breakdown_s["forward"] - r0.breakdown_s["forward"]) == pytest.approx(
        n_mb * d_fwd, rel=1e-9
    )
    assert float(r_start.step_time_s) == float(r0.step_time_s)
    # ...but the first stage, which holds the most micro-batches in flight, stores more.
    assert float(r_start.memory_gb["activations"]) > float(r0.memory_gb["activations"])


def test_first_stage_memory_by_hand():
    """The first of 4 stages holds 4 micro-batches in flight (1F1B) of its 8 layers; 2 of them
    in 16 bits store the 16-bit layer's activations instead and keep no FP8 weight copy."""
    m, tr, sy, st, e = _specs(tp=2, pp=4, dp=8)
    act8 = memory.stored_per_layer(memory.layer_activation_bytes(m, st, tr.precision), st)
    act16 = memory.stored_per_layer(memory.layer_activation_bytes(m, st, "bf16"), st)
    n_mb = pipeline.num_microbatches(512.0, st.dp, st.microbatch, EXACT)
    assert float(pipeline.in_flight_chunks(0.0, 4.0, 1.0, n_mb, EXACT)) == 4.0
    base = memory.stage_memory_bytes(m, st, e, {"dense": 1e9, "expert": 0.0}, n_mb, EXACT,
                                     layers=8.0, precision=tr.precision)  # fmt: skip
    two = memory.stage_memory_bytes(m, st, e, {"dense": 1e9, "expert": 0.0}, n_mb, EXACT,
                                    layers=8.0, precision=tr.precision, layers_16bit=2.0,
                                    act_16bit=memory.layer_activation_bytes(m, st, "bf16"))  # fmt: skip
    want = 2.0 * (float(act16) - float(act8)) * 4.0
    assert float(two["activations"] - base["activations"]) == pytest.approx(want, rel=1e-12)
    # 2 of its 8 layers keep no FP8 copy (2 bytes per weight, unsharded under ZeRO-1)
    cache = memory.WEIGHT_CACHE_BYTES["fp8"] * 1e9
    assert float(base["weights"] - two["weights"]) == pytest.approx(2.0 / 8.0 * cache, rel=1e-12)


@pytest.mark.parametrize(
    "pp, v, start, end, want",
    [
        (1, 1, 1.0, 1.0, ((1, 1), (0, 0), (1, 1))),  # one stage holds both ends
        (4, 1, 1.0, 2.0, ((1, 0), (0, 0), (0, 2))),
        (4, 1, 10.0, 0.0, ((8, 0), (2, 0), (0, 0))),  # 2 spill onto the second stage
        (4, 1, 0.0, 11.0, ((0, 0), (0, 3), (0, 8))),  # ... or onto the last but one
        (2, 1, 20.0, 0.0, ((16, 0), (0, 0), (4, 0))),  # two stages: the other takes the excess
        (2, 1, 20.0, 14.0, ((16, 0), (0, 0), (2, 14))),  # ... what its own end leaves it
        # interleaved, 4 layers a chunk: the start fills stage 0's first chunk, then stage 1's
        (4, 2, 6.0, 1.0, ((4, 0), (2, 0), (0, 1))),
        (2, 2, 10.0, 3.0, ((8, 0), (0, 0), (2, 3))),  # two stages, 8 a chunk: other chunks
    ],
)
def test_16_bit_layers_by_stage(pp, v, start, end, want):
    """Llama 3 8B, 32 layers over ``pp`` stages of ``v`` chunks: the first/middle/last stage's
    16-bit layers as (at the start, at the end).  The model's layers run through the first
    chunk of every stage, then the second, so the first ``L / (p v)`` of them sit in stage 0's
    first chunk and the next ones in stage 1's."""
    m, tr, sy, st, e = _specs(tp=2, pp=pp, dp=32 // pp, interleave=v)
    tr = _mixed(tr, start, end)
    got = bf16_stage_layers(
        tr.bf16_layers_start, tr.bf16_layers_end, _stages(m, st, EXACT), EXACT, st
    )
    assert tuple((float(a), float(b)) for a, b in got) == want


def _schedule(p, v, m, r):
    """Reference: the chunk passes stage ``r`` holds of each of its ``v`` chunks after every
    forward and backward pass of Megatron-Core's schedule (1F1B at ``v = 1``, else the
    interleaved one with micro-batch groups of ``p``: the forward pass ``k`` runs chunk
    ``(k mod pv) // p``, the backward pass ``k`` chunk ``v - 1 - (k mod pv) // p``, after
    ``2 (p - r - 1) + (v - 1) p`` warm-up forward passes; ``p - r - 1`` under 1F1B)."""
    total = m * v
    warm = min(p - r - 1 if v == 1 else 2 * (p - r - 1) + (v - 1) * p, total)
    held, snaps = [0] * v, []
    order = [("F", k) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", k + warm), ("B", k)]
    order += [("B", k) for k in range(total - warm, total)]
    for kind, k in order:
        chunk = (k % (p * v)) // p
        if kind == "F":
            held[chunk] += 1
        else:
            held[v - 1 - chunk] -= 1
        snaps.append(tuple(held))
    return snaps


def _schedule_peak(p, v, m, r):
    """Reference: Megatron-Core's pipeline schedule on stage ``r`` (1F1B at ``v = 1``, else the
    interleaved one with micro-batch groups of ``p``: the forward pass ``k`` runs chunk
    ``(k mod pv) // p``, the backward pass ``k`` chunk ``v - 1 - (k mod pv) // p``, after
    ``2 (p - r - 1) + (v - 1) p`` warm-up forward passes; ``p - r - 1`` under 1F1B).  Returns
    the most chunk passes held at once and, at those moments, the most of the first chunk and
    of the last chunk."""
    snaps = _schedule(p, v, m, r)
    peak = max(sum(h) for h in snaps)
    at_peak = [h for h in snaps if sum(h) == peak]
    return peak, max(h[0] for h in at_peak), max(h[-1] for h in at_peak)


@pytest.mark.parametrize("p, v", [(2, 1), (4, 1), (2, 2), (3, 2), (4, 2), (4, 3), (8, 4)])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_chunks_in_flight_follow_the_schedule(p, v, groups):
    """The chunk passes a stage holds at its peak, and how many of them are of its first and of
    its last chunk, are those of a simulation of Megatron-Core's schedule, on every stage."""
    m = groups * p
    for r in range(p):
        peak, first, last = _schedule_peak(p, v, m, r)
        assert float(pipeline.in_flight_chunks(float(r), p, v, m, EXACT)) == peak
        got = pipeline.end_chunks_in_flight(float(r), float(p), float(v), float(m), EXACT)
        assert (float(got[0]), float(got[1])) == (first, last), (p, v, m, r)


@pytest.mark.parametrize("p, v", [(2, 1), (4, 1), (2, 2), (3, 2), (4, 3), (8, 4), (8, 8)])
@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("per_chunk", [1, 2, 3])
def test_the_embedding_and_loss_slots_follow_the_schedule(p, v, groups, per_chunk):
    """Where the embedding and the loss take a layer slot (layout rule 2), the first stage's
    first chunk and the last stage's last hold a layer fewer: the most layer-micro-batches the
    schedule holds at once on those stages is the model's ``(n + 1) / v x T - f`` (and
    ``- l``), with ``f, l`` of :func:`codesign.pipeline.slot_chunks_in_flight`."""
    m = groups * p
    for r, fewer in ((0, 0), (p - 1, v - 1)):
        layers = [per_chunk] * v
        layers[fewer] -= 1
        want = max(
            sum(c * n for c, n in zip(h, layers, strict=True)) for h in _schedule(p, v, m, r)
        )
        total = float(pipeline.in_flight_chunks(float(r), p, v, m, EXACT))
        f, last = pipeline.slot_chunks_in_flight(total, float(p), float(v), float(m), EXACT)
        got = per_chunk * total - float(f if r == 0 else last)
        assert got == want, (p, v, m, r, per_chunk)


def test_llama_405b_stages_with_the_embedding_and_loss_slots_by_hand():
    """Llama 3.1 405B at PP 8 x 8 chunks with the embedding and the loss counted (NVIDIA's
    recipe): 16 slots a stage, 2 a chunk.  With 16 or more micro-batches the first stage holds
    71 chunk passes at its peak, 15 of its first chunk (one layer), so 2 x 71 - 15 = 127
    layer-micro-batches, not 15 / 8 x 71; the last stage 57, none of its last chunk at some
    peak moment, so 2 x 57 = 114, not 15 / 8 x 57."""
    doc = small_doc(tp=8, pp=8, dp=4, interleave=8, pp_embedding_in_split=True,
                    pp_loss_in_split=True)  # fmt: skip
    doc["model"] = {"preset": "llama3-405b"}
    doc["system"]["num_accelerators"] = 256
    m, tr, sy, st, e = cd.load_run_dict(doc).specs()
    n_mb = pipeline.num_microbatches(512.0, st.dp, st.microbatch, EXACT)
    per = float(memory.stored_per_layer(memory.layer_activation_bytes(m, st, tr.precision), st))
    for idx, n, want in ((0.0, 15.0, 127.0), (7.0, 15.0, 114.0)):
        got = memory.stage_memory_bytes(m, st, e, {"dense": 1e9, "expert": 0.0}, n_mb, EXACT,
                                        stage=idx, layers=n, precision=tr.precision)  # fmt: skip
        assert float(got["activations"]) == pytest.approx(want * per, rel=1e-12)


def test_interleaved_first_and_last_stage_memory_by_hand():
    """PP 4 with 2 chunks of 4 layers, 64 micro-batches: the first stage holds 11 chunk passes
    at its peak, 8 of them of its first chunk, where 2 16-bit start layers sit (16 of their
    layer-micro-batches, not the 2 x 11 / 2 of the stage's average); the last stage holds 5,
    one of its last chunk, where a 16-bit end layer sits."""
    m, tr, sy, st, e = _specs(tp=2, pp=4, dp=8, interleave=2)
    base = cd.evaluate(m, tr, sy, st, e)
    act8 = memory.stored_per_layer(memory.layer_activation_bytes(m, st, tr.precision), st)
    act16 = memory.stored_per_layer(memory.layer_activation_bytes(m, st, "bf16"), st)
    d = float(act16) - float(act8)
    assert d > 0
    n_mb = pipeline.num_microbatches(512.0, st.dp, st.microbatch, EXACT)
    stages = _stages(m, st, EXACT)
    mems = {}
    for start, end in ((0.0, 0.0), (2.0, 1.0)):
        trm = _mixed(tr, start, end)
        kse = bf16_stage_layers(start, end, stages, EXACT, st)
        for (idx, n, *_), k in zip(stages, kse, strict=True):
            if idx in (0.0, 3.0):
                mems[(start, idx)] = memory.stage_memory_bytes(
                    m, st, e, {"dense": 1e9, "expert": 0.0}, n_mb, EXACT, layers=n,
                    stage=idx, precision=trm.precision, layers_16bit=sum(k),
                    act_16bit=memory.layer_activation_bytes(m, st, "bf16"),
                    in_flight_16bit=pipeline.bf16_in_flight(k, idx, st, n_mb, EXACT),
                )  # fmt: skip
    first = mems[(2.0, 0.0)]["activations"] - mems[(0.0, 0.0)]["activations"]
    last = mems[(2.0, 3.0)]["activations"] - mems[(0.0, 3.0)]["activations"]
    assert float(first) == pytest.approx(2.0 * 8.0 * d, rel=1e-12)
    assert float(last) == pytest.approx(1.0 * 1.0 * d, rel=1e-12)
    # and the step model reports the first stage's memory with them
    mixed = cd.evaluate(m, _mixed(tr, 2.0, 1.0), sy, st, e)
    gain = float(mixed.memory_gb["activations"] - base.memory_gb["activations"]) * memory.GB
    assert gain == pytest.approx(float(first), rel=1e-9)


@pytest.mark.parametrize("v", [1, 2])
def test_16_bit_layers_are_dynamic_leaves_with_finite_gradients(v):
    m, tr, sy, st, e = _specs(tp=2, pp=4, dp=8, interleave=v)
    sm = Smoothing(exact=False, tau=0.1)

    def step(k):
        return cd.evaluate_unchecked(m, _mixed(tr, k[0], k[1]), sy, st, e, sm).step_time_s

    g = jax.grad(step)(jnp.array([1.0, 1.0]))
    assert bool(jnp.all(jnp.isfinite(g))) and float(g[1]) > 0


@pytest.mark.parametrize(
    "start, end, field",
    [(-1.0, 0.0, "training.bf16_layers_start"), (0.0, -2.0, "training.bf16_layers_end"),
     (20.0, 13.0, "training.bf16_layers_start")],
)  # fmt: skip
def test_bad_16_bit_layer_counts_name_the_field(start, end, field):
    doc = small_doc()
    doc["training"].update(precision="fp8", bf16_layers_start=start, bf16_layers_end=end)
    with pytest.raises(cd.SpecError) as err:
        cd.evaluate(*cd.load_run_dict(doc).specs())
    assert err.value.field == field


@pytest.mark.parametrize("preset", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "nemotron-h-8b"])
@pytest.mark.parametrize("precision, fp8_attention", [("fp8-current", 1.0), ("mxfp8", 0.0)])
def test_sixteen_bit_layer_is_the_layer_evaluated_in_16_bits(preset, precision, fp8_attention):
    """The cheap 16-bit view of a low-precision layer (GEMMs rescaled by the peak x gemm_max
    ratio, casts and FP8 attention dropped, 16-bit stored activations) equals layer_times
    evaluated in bf16 at the 16-bit gemm_max, for GQA, MoE, MLA and Mamba-2 hybrid layers."""
    doc = small_doc(tp=2, pp=1, dp=32)
    doc["model"] = {"preset": preset}
    doc["training"].update(precision=precision)
    doc["system"] = {"accelerator": "gb200", "num_accelerators": 64}
    m, tr, sy, st, e = cd.load_run_dict(doc, check=False).specs()
    e16 = e.replace(gemm_max=0.71)
    act = memory.layer_activation_bytes(m, st, precision)
    act16 = memory.layer_activation_bytes(m, st, "bf16")
    lt = compute.layer_times(m, st, sy, e, precision, act, EXACT, fp8_attention)
    want = compute.layer_times(m, st, sy, e16, "bf16", act16, EXACT)
    ratio = (
        compute.peak_flops(sy, precision) * e.gemm_max / (sy.accelerator.peak_tflops * 1e12 * 0.71)
    )
    got = compute.sixteen_bit_layer(lt, act, act16, ratio)
    for k in ("gemm", "attention", "attention_bwd", "elementwise", "score_elementwise",
              "layernorm", "mlp", "moe_act", "moe", "mla_up"):  # fmt: skip
        assert float(got[k]) == pytest.approx(float(want[k]), rel=1e-12, abs=1e-18), k


def test_the_switch_only_changes_the_program():
    """``first_last_layers_bf16`` on with no 16-bit layer gives the numbers it gives off: the
    switch is static only because the terms it adds cost a sweep time."""
    m, tr, sy, st, e = _specs(tp=2, pp=4, dp=8)
    assert not tr.first_last_layers_bf16
    off = cd.evaluate(m, tr, sy, st, e)
    on = cd.evaluate(m, _mixed(tr, 0.0, 0.0), sy, st, e)
    for a, b in zip(jax.tree_util.tree_leaves(off), jax.tree_util.tree_leaves(on), strict=True):
        np.testing.assert_allclose(np.asarray(b, float), np.asarray(a, float), rtol=1e-12)


def test_load_run_turns_the_switch_on_and_checks_it():
    doc = small_doc(tp=2, pp=4, dp=8)
    doc["training"].update(precision="fp8-current", bf16_layers_end=1)
    assert cd.load_run_dict(doc).training.first_last_layers_bf16
    doc["training"]["first_last_layers_bf16"] = False
    with pytest.raises(cd.SpecError) as err:
        cd.load_run_dict(doc)
    assert err.value.field == "training.bf16_layers_end"
    doc["training"]["first_last_layers_bf16"] = 1
    with pytest.raises(cd.SpecError) as err:
        cd.load_run_dict(doc)
    assert err.value.field == "training.first_last_layers_bf16"


def test_a_sweep_over_16_bit_layers_turns_the_switch_on():
    """A sweep whose axis is a 16-bit layer count, from a run without any, evaluates each point
    as the run loaded with that count (its best point is the run without 16-bit layers, the
    others slower)."""
    doc = small_doc(tp=2, pp=4, dp=8)
    doc["training"]["precision"] = "fp8-current"
    cfg = cd.load_run_dict(doc)
    res = sweep(cfg, {"training.bf16_layers_end": [0.0, 1.0, 2.0]}, progress=False, top_k=3)
    assert [res.point(i)["training.bf16_layers_end"] for i in range(3)] == [0.0, 1.0, 2.0]
    for i in range(3):
        k = res.point(i)["training.bf16_layers_end"]
        doc["training"]["bf16_layers_end"] = k
        want = float(cd.evaluate(*cd.load_run_dict(doc).specs()).step_time_s)
        assert float(res.best_values[i]) == pytest.approx(want, rel=1e-9)
        assert res.config(i, cfg).training.first_last_layers_bf16
    assert res.best_values[0] < res.best_values[1] < res.best_values[2]


def test_the_output_layer_of_an_fp8_run_runs_at_the_16_bit_gemm_max():
    """The output layer stays in BF16 in an FP8 run: its GEMM takes the 16-bit peak and the
    16-bit ``gemm_max`` (``gemm_max_16bit``; ``gemm_max`` where that is 0), as in a BF16 run."""
    m, tr, sy, st, e = _specs("fp8-current", {"gemm_max": 0.6})
    act = memory.layer_activation_bytes(m, st, tr.precision)
    act16 = memory.layer_activation_bytes(m, st, "bf16")
    half = compute.layer_times(m, st, sy, e.replace(gemm_max=0.75), "bf16", act16, EXACT)
    tied = compute.layer_times(m, st, sy, e.replace(gemm_max_16bit=0.75), tr.precision, act, EXACT)
    own = compute.layer_times(m, st, sy, e, tr.precision, act, EXACT)
    assert float(tied["logits"]) == pytest.approx(float(half["logits"]), rel=1e-12)
    assert float(own["logits"]) == pytest.approx(float(half["logits"]) * 0.75 / 0.6, rel=1e-12)
    assert float(tied["gemm"]) == float(own["gemm"])  # the FP8 GEMMs keep gemm_max


@pytest.mark.parametrize("slots", [False, True])
def test_relaxed_gradients_stay_finite_over_the_micro_batch_counts(slots):
    """The chunk counts of the pipeline's memory (first/last chunk, embedding/loss slots) keep
    the relaxed step time and memory differentiable with finite gradients at every global batch
    from 8 to 512 micro-batches a step, with and without the slots, 16-bit layers in."""
    kw = {"pp_embedding_in_split": True, "pp_loss_in_split": True} if slots else {}
    doc = small_doc(tp=2, pp=2, dp=16, interleave=3, **kw)
    doc["model"] = {"preset": "llama3-8b"}
    doc["training"].update(precision="fp8-current", bf16_layers_start=1, bf16_layers_end=1)
    m, tr, sy, st, e = cd.load_run_dict(doc, check=False).specs()
    sm = Smoothing(exact=False, tau=0.1)

    def f(gbs):
        r = cd.evaluate_unchecked(m, tr.replace(global_batch=gbs), sy, st, e, sm)
        return r.step_time_s + r.memory_gb["total"]

    gbs = 16.0 * jnp.arange(8.0, 513.0)
    val, g = jax.vmap(jax.value_and_grad(f))(gbs)
    assert bool(jnp.all(jnp.isfinite(val))) and bool(jnp.all(jnp.isfinite(g)))
