"""FP8 attention (``Training.fp8_attention``): the attention core's matmuls at the FP8 peak.

Golden values by hand from the fused-attention cost model (:func:`codesign.compute.layer_times`:
``2 tokens keys (qk + v) / tp`` matmul FLOPs at ``attention_eff`` of the peak, plus one
exponential per causal score on the special-function units, FlashAttention-3 Sec. 3.1) and
Transformer Engine's FP8 dot-product attention, which casts Q, K and V to 8 bits and runs both
batched GEMMs in FP8 (``transformer_engine/pytorch/attention/dot_product_attention``).
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO, small_doc

import codesign as cd
from codesign import memory
from codesign._compile import jit
from codesign.compute import QUANT_BYTES, layer_times
from codesign.smoothing import EXACT, Smoothing


def _specs(precision="fp8-delayed", fp8_attention=0.0, **strategy):
    doc = small_doc(**strategy)
    doc["training"].update(precision=precision, fp8_attention=fp8_attention)
    m, tr, sy, st, eff = cd.load_run_dict(doc).specs()
    return m, tr, sy, st, dataclasses.replace(eff, softmax_overlap_eff=0.0)


def test_fp8_attention_halves_the_matmuls_not_the_exponentials_by_hand():
    """Llama 3 8B (32 heads x 128, 8 KV heads, s = 8192) at TP 2, micro-batch 1 on an H100
    SXM5 (989.4 / 1978.9 TFLOP/s BF16 / FP8 dense, 3.9e12 exponentials/s): the forward matmuls are
    2 s s (4096 + 4096) / 2 FLOPs at attention_eff of the peak, the exponentials s (32 / 2)
    s / 2."""
    m, tr, sy, st, eff = _specs()
    a = sy.accelerator
    assert (float(a.peak_tflops), float(a.peak_tflops_fp8), float(a.exp_tera_per_s)) == (
        989.4,
        1978.9,
        3.9,
    )
    s, e = 8192.0, float(eff.attention_eff)
    flops = 2.0 * s * s * (4096.0 + 4096.0) / 2.0
    exp_s = s * 16.0 * s / 2.0 / 3.9e12
    act = memory.layer_activation_bytes(m, st, tr.precision)
    for f, peak in ((0.0, 989.4e12), (1.0, 1978.9e12)):
        lt = layer_times(m, st, sy, eff, tr.precision, act, EXACT, f)
        assert float(lt["attention"]) == pytest.approx(flops / (peak * e) + exp_s, rel=1e-12)
    # Half of the core in FP8: the time is the mean of the two.
    half = layer_times(m, st, sy, eff, tr.precision, act, EXACT, 0.5)
    mm = flops / e * (0.5 / 989.4e12 + 0.5 / 1978.9e12)
    assert float(half["attention"]) == pytest.approx(mm + exp_s, rel=1e-12)


def test_fp8_attention_casts_q_k_v_by_hand():
    """The cast moves QUANT_BYTES of the recipe per element of Q (4096 wide), K and V (8 KV
    heads x 128 = 1024 each), split over TP 2, for the 8192 tokens of the micro-batch."""
    m, tr, sy, st, eff = _specs(precision="fp8-current")
    act = memory.layer_activation_bytes(m, st, tr.precision)
    hbm = float(sy.accelerator.hbm_tbps) * 1e12 * float(eff.hbm_eff)
    off = layer_times(m, st, sy, eff, tr.precision, act, EXACT, 0.0)
    on = layer_times(m, st, sy, eff, tr.precision, act, EXACT, 1.0)
    cast = QUANT_BYTES["fp8-current"] * 8192.0 * (4096.0 + 1024.0 + 1024.0) / 2.0 / hbm
    assert float(on["elementwise"] - off["elementwise"]) == pytest.approx(cast, rel=1e-9)
    assert float(on["gemm"]) == float(off["gemm"])


def test_fp8_attention_speeds_up_the_step_and_leaves_memory():
    m, tr, sy, st, eff = _specs()
    off = cd.evaluate(m, tr, sy, st, eff)
    on = cd.evaluate(m, tr.replace(fp8_attention=1.0), sy, st, eff)
    assert float(on.step_time_s) < float(off.step_time_s)
    assert float(on.breakdown_s["backward"]) < float(off.breakdown_s["backward"])
    assert float(on.memory_gb["total"]) == float(off.memory_gb["total"])


def test_fp8_attention_is_a_dynamic_leaf_with_a_finite_gradient():
    """One compiled program for every fraction; the relaxed step time falls as more of the
    core runs in FP8 (a long sequence, so the matmuls outweigh the cast)."""
    m, tr, sy, st, eff = _specs()
    sm = Smoothing(exact=False, tau=0.1)

    def step(f):
        return cd.evaluate_unchecked(m, tr.replace(fp8_attention=f), sy, st, eff, sm).step_time_s

    fn = jit(step)
    ts = [float(fn(jnp.asarray(f))) for f in (0.0, 0.5, 1.0)]
    assert ts[0] > ts[1] > ts[2]
    g = float(jax.grad(step)(jnp.asarray(0.5)))
    assert jnp.isfinite(g) and g < 0
    assert fn._cache_size() == 1


@pytest.mark.parametrize(
    "precision, fp8_attention, allowed",
    [
        ("bf16", 1.0, "FP8 attention runs inside an FP8 recipe"),
        ("fp8-delayed", -0.5, "a fraction in [0, 1]"),
    ],
)
def test_fp8_attention_bad_input_names_the_field(precision, fp8_attention, allowed):
    doc = small_doc()
    doc["training"].update(precision=precision, fp8_attention=fp8_attention)
    with pytest.raises(cd.SpecError) as e:
        cfg = cd.load_run_dict(doc)
        cd.evaluate(*cfg.specs())
    assert e.value.field == "training.fp8_attention"
    assert allowed in str(e.value)


def test_bridge_recipes_map_fp8_attention_where_the_recipe_sets_it():
    """Megatron-Bridge's full-iteration MXFP8 perf configs (release 0.5.0 = container 26.06
    on) set ``fp8_dot_product_attention`` for Qwen3, GPT-OSS and DeepSeek-V3 on GB300, not
    for DeepSeek-V3 on GB200; no fitted (25.09 / 25.11) recipe sets it."""
    from codesign.calibration._rows import (
        BRIDGE_DATA_PATH,
        calibrated_row_config,
        load_rows,
        row_to_doc,
    )

    rows = json.loads((REPO / "experiments/data/megatron_bridge_2026_external.json").read_text())
    by_id = {r["id"]: r for r in rows}
    want = {
        "mbridge_26.06_DGX-GB300_Qwen3_30B_a3B_8gpu_MXFP8": 1.0,
        "mbridge_26.08_DGX-GB200_Qwen3_235B_a22B_256gpu_MXFP8": 1.0,
        "mbridge_26.06.01_DGX-GB200_GPT_OSS_120B_64gpu_MXFP8": 1.0,
        "mbridge_26.06_DGX-GB300_DeepSeekV3_256gpu_MXFP8": 1.0,
        "mbridge_26.06_DGX-GB200_DeepSeekV3_256gpu_MXFP8": 0.0,
        "mbridge_26.06_DGX-B300_GPT_OSS_120B_64gpu_MXFP8": 0.0,
        "mbridge_26.04.01_DGX-GB300_Qwen3_30B_a3B_8gpu_MXFP8": 0.0,
        "mbridge_26.06_DGX-H100_Qwen3_30B_a3B_16gpu_FP8": 0.0,
    }
    for rid, f in want.items():
        cfg, _ = calibrated_row_config(by_id[rid])
        assert float(cfg.training.fp8_attention) == f, rid
    fitted = load_rows(BRIDGE_DATA_PATH)
    assert len(fitted) == 60
    for row in fitted:
        doc, _ = row_to_doc(row)
        assert doc["training"].get("fp8_attention", 0.0) == 0.0, row["id"]


def test_evaluate_says_the_expected_error_never_saw_fp8_attention(tmp_path, capsys):
    """No fitted run used FP8 attention, so the expected error it prints is marked as not
    validated for it (and only then)."""
    from test_config_cli import good

    from codesign.cli import main

    for extra, marked in (("", False), ("\nfp8_attention = 1", True)):
        p = tmp_path / "run.toml"
        p.write_text(
            good().replace("global_batch = 512", f'global_batch = 512\nprecision = "fp8"{extra}')
        )
        assert main(["evaluate", str(p)]) == 0
        out = capsys.readouterr().out
        assert "expected error" in out
        assert ("used FP8 attention: not validated" in out) == marked
