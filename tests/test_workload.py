"""Golden values for parameter counts and FLOPs, computed by hand from published formulas."""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import small_doc

import codesign as cd
from codesign import workload
from codesign.checks import check_model
from codesign.config import model_preset
from codesign.specs import SpecError


def gpt(l=24, h=2048, a=16, V=51200, s=2048, tied=0.0, dropout=1.0) -> cd.Model:
    """A plain GPT layer stack: ffn = 4h, kv_heads = heads, GeLU MLP (no gate)."""
    return cd.Model(
        layers=float(l),
        hidden=float(h),
        heads=float(a),
        kv_heads=float(a),
        ffn_hidden=4.0 * h,
        vocab=float(V),
        seq_len=float(s),
        tied_embeddings=tied,
        dropout=dropout,
    )


def rel(a, b) -> float:
    return abs(float(a) - float(b)) / abs(float(b))


# --------------------------------------------------------------------------------------
# FLOPs: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
# Using Megatron-LM", SC21 (arXiv:2104.04473), Sec. 5.1 eq. (3).
# Per layer the forward pass costs 24 B s h^2 + 4 B s^2 h FLOPs, the logit layer 2 B s h V;
# backward = 2 x forward; full activation recomputation adds one more forward of the layers
# (not of the logits).  Hence
#   model FLOPs (no recompute)  F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
#   full recompute (eq. 3)      F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "l,h,a,V,s,B",
    [
        (96, 12288, 96, 51200, 2048, 1536),  # GPT-3 175B (Brown et al. 2020, Table 2.1)
        (24, 2048, 16, 51200, 2048, 512),
        (40, 5120, 40, 50257, 4096, 7),
    ],
)
@pytest.mark.parametrize("tied", [0.0, 1.0])
def test_model_flops_narayanan_eq3_no_recompute(l, h, a, V, s, B, tied):
    m = gpt(l, h, a, V, s, tied=tied)
    expected = 72.0 * B * s * l * h**2 * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))
    got = workload.model_flops_per_step(m, float(B))
    assert rel(got, expected) < 1e-12


def _custom_gpt_doc(recompute: str) -> dict:
    doc = small_doc(tp=2, pp=2, dp=16, recompute=recompute)
    doc["model"] = {
        "layers": 24,
        "hidden": 2048,
        "heads": 16,
        "kv_heads": 16,
        "ffn_hidden": 8192,
        "vocab": 51200,
        "seq_len": 2048,
        "tied_embeddings": False,
        "dropout": True,
    }
    return doc


def test_hfu_full_recompute_narayanan_eq3():
    cfg = cd.load_run_dict(_custom_gpt_doc("full"))
    m, tr, sy = cfg.model, cfg.training, cfg.system
    B, s, l, h, V = 512.0, 2048.0, 24.0, 2048.0, 51200.0
    r = cd.evaluate(*cfg.specs())
    hardware_flops = (
        float(r.hfu)
        * float(r.step_time_s)
        * float(sy.num_accelerators)
        * float(sy.accelerator.peak_tflops)
        * 1e12
    )
    expected = 96.0 * B * s * l * h**2 * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))
    assert rel(hardware_flops, expected) < 1e-12
    # MFU counts the model FLOPs only (no recomputation).
    model_flops = (
        float(r.mfu)
        * float(r.step_time_s)
        * float(sy.num_accelerators)
        * float(sy.accelerator.peak_tflops)
        * 1e12
    )
    assert (
        rel(model_flops, 72.0 * B * s * l * h**2 * (1.0 + s / (6.0 * h) + V / (12.0 * l * h)))
        < 1e-12
    )
    assert rel(r.model_flops_per_step, workload.model_flops_per_step(m, tr.global_batch)) < 1e-15


def test_hfu_selective_and_none():
    """Selective recomputation (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 5) re-runs only
    QK^T, softmax and attention-over-V: one more forward of the 4 B s^2 h attention FLOPs per
    layer (Narayanan et al. eq. 3 counting).  Without recomputation HFU == MFU."""
    B, s, l, h, V = 512.0, 2048.0, 24.0, 2048.0, 51200.0
    model = 72.0 * B * s * l * h**2 * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))
    for mode, extra in (("selective", 4.0 * B * s**2 * l * h), ("none", 0.0)):
        cfg = cd.load_run_dict(_custom_gpt_doc(mode))
        sy = cfg.system
        r = cd.evaluate(*cfg.specs())
        denom = (
            float(r.step_time_s)
            * float(sy.num_accelerators)
            * float(sy.accelerator.peak_tflops)
            * 1e12
        )
        assert rel(float(r.hfu) * denom, model + extra) < 1e-12, mode
        assert rel(float(r.mfu) * denom, model) < 1e-12, mode


def test_llama3_8b_flops_6nd_plus_attention():
    """Kaplan et al. 2020 (arXiv:2001.08361) Sec. 2.1: C = 6 N D for the non-embedding matrices
    plus the output projection, plus the attention scores 6 * 2 l s d_attn per token
    (forward 2 * 2 s q per layer, full not causal as in Narayanan eq. 3)."""
    m = model_preset("llama3-8b")
    l, h, s, V = 32.0, 4096.0, 8192.0, 128256.0
    q, kv, f = 4096.0, 1024.0, 14336.0  # 32 heads x 128, 8 kv heads x 128, SwiGLU width
    matrices = l * (h * (q + 2 * kv) + q * h + 3 * h * f) + V * h  # weights used in GEMMs
    B = 512.0
    D = B * s
    expected = 6.0 * matrices * D + 3.0 * D * l * 4.0 * s * q
    assert rel(workload.model_flops_per_step(m, B), expected) < 1e-12


# --------------------------------------------------------------------------------------
# Parameter counts.
# --------------------------------------------------------------------------------------


def test_gpt3_175b_params():
    """Narayanan et al. SC21 Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)); the model
    counts the layers' 12 h^2 weights plus 2h per layer for norms/biases (a subset of the 13h
    of the paper) and the tied V x h embedding (no learned position embedding)."""
    m = model_preset("gpt3-175b")
    l, h, V = 96.0, 12288.0, 51200.0
    p = workload.total_params(m)
    assert rel(p["total"], 12 * l * h**2 + 2 * l * h + V * h) < 1e-12
    # ~ 12 l h^2 + V h, i.e. 175B (Brown et al. 2020, Table 2.1).
    assert rel(p["total"], 12 * l * h**2 + V * h) < 1e-4
    assert rel(p["total"], 175e9) < 5e-3
    assert float(p["active"]) == float(p["total"])
    assert float(p["expert"]) == 0.0


def test_gpt_untied_embeddings_count_twice():
    m = gpt(tied=0.0)
    mt = dataclasses.replace(m, tied_embeddings=1.0)
    diff = float(workload.total_params(m)["total"]) - float(workload.total_params(mt)["total"])
    assert diff == 51200.0 * 2048.0


def test_llama3_8b_params():
    """Dubey et al. 2024 (arXiv:2407.21783): Llama 3 8B has 8.03e9 parameters
    (8,030,261,248 in the released checkpoint; the model omits the final norm's 4096)."""
    p = workload.total_params(model_preset("llama3-8b"))
    assert rel(p["total"], 8_030_261_248) < 1e-5
    l, h, V, f = 32.0, 4096.0, 128256.0, 14336.0
    per_layer = h * (h + 2 * 1024) + h * h + 3 * h * f + 2 * h
    assert rel(p["total"], l * per_layer + 2 * V * h) < 1e-12


def test_mixtral_params():
    """Jiang et al. 2024 (arXiv:2401.04088): 46.7B total, 12.9B active parameters."""
    p = workload.total_params(model_preset("mixtral-8x7b"))
    assert rel(p["total"], 46.7e9) < 5e-3
    assert rel(p["active"], 12.9e9) < 5e-3


def test_head_dim_and_gqa_dims():
    m = model_preset("llama3-8b")
    q, kv = workload.attention_dims(m)
    assert float(q) == 4096.0 and float(kv) == 1024.0
    m2 = model_preset("deepseek-v3")
    assert float(workload.head_dim(m2)) == 128.0
    assert math.isclose(float(workload.attention_dims(m2)[0]), 128.0 * 128.0)


def test_sliding_window_attention_by_hand():
    """GPT-OSS 120B (OpenAI 2025 model card, arXiv:2508.10925): 128-token windows on 18 of 36
    layers.  At s = 4096 the full layers count s = 4096 keys per query and the windowed
    ones min(2 w, s) = 256 (a fused kernel computes about w of the causal s/2), so the
    average is (18 * 4096 + 18 * 256) / 36 = 2176, and the attention core's forward FLOPs per
    token per layer are 2 * 2176 * (qk + v) with qk = v = 64 heads * 64."""
    m = model_preset("gpt-oss-120b")
    assert float(workload.attention_keys(m)) == 2176.0
    f = workload.forward_flops_per_token(m)
    assert float(f["attention"]) == 2.0 * 2176.0 * (4096.0 + 4096.0)
    full = m.replace(window_layers=0.0)
    assert float(workload.attention_keys(full)) == 4096.0
    # A window at least half the sequence changes nothing; the GEMMs never change.
    wide = m.replace(attention_window=2048.0)
    assert float(workload.attention_keys(wide)) == 4096.0
    assert float(workload.forward_flops_per_token(full)["gemm"]) == float(f["gemm"])


def test_window_layers_checked():
    m = model_preset("gpt-oss-120b")
    with pytest.raises(SpecError, match="model.window_layers"):
        check_model(m.replace(window_layers=37.0))
    with pytest.raises(SpecError, match="model.attention_window"):
        check_model(m.replace(attention_window=0.0))
    check_model(m)


def test_deepseek_v3_preset_has_mla():
    """The preset is the model DeepSeek-AI trained (arXiv:2412.19437): MLA, 671B total and
    37B activated parameters (37.6B: the paper rounds down)."""
    t = workload.total_params(model_preset("deepseek-v3"))
    assert round(float(t["total"]) / 1e9) == 671
    assert round(float(t["active"]) / 1e9) == 38
