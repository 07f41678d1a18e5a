"""Hybrid Mamba-2 (SSD) models: parameters, FLOPs, TP splits, patterns, gradients.

Nemotron-H (NVIDIA 2025, arXiv:2504.03624) interleaves Mamba-2 mixers (Dao & Gu 2024,
arXiv:2405.21060) with a few attention layers and separate MLP blocks.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import pytest

import codesign as cd
from codesign import compute, memory, workload
from codesign.config import _hybrid_counts, model_preset
from codesign.smoothing import Smoothing
from codesign.specs import SpecError

NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def hybrid_run(**strategy):
    doc = {
        "model": {"preset": "nemotron-h-8b"},
        "training": {"global_batch": 128},
        "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 16},
        "strategy": {"tp": 2, "pp": 2, "dp": 4, **strategy},
    }
    return cd.load_run_dict(doc)


def test_nemotron_h_8b_parameters_by_hand():
    # Nemotron-H-8B (arXiv:2504.03624 Sec. 2; Megatron-Bridge NemotronHModelProvider8B):
    # h 4096, 24 Mamba-2 layers (128 heads of 64 -> d_inner 8192, 8 groups of state 128,
    # conv 4), 4 attention layers (32 q / 8 kv heads of 128), 24 squared-ReLU MLPs of 21504,
    # vocab 131072 untied.  Published: 8.1B (the Hugging Face checkpoint holds 8,100,852,736
    # parameters, which includes the final norm's 4096).
    h, di, gn, nh, v = 4096, 8192, 8 * 128, 128, 131072
    mamba = h * (2 * di + 2 * gn + nh) + (di + 2 * gn) * (4 + 1) + 3 * nh + di + di * h + h
    attn = h * (4096 + 2 * 1024) + 4096 * h + h
    mlp = 2 * h * 21504 + h
    by_hand = 24 * mamba + 4 * attn + 24 * mlp + 2 * v * h
    assert by_hand + h == 8_100_852_736
    m = model_preset("nemotron-h-8b")
    total = float(workload.total_params(m)["total"])
    assert total == pytest.approx(by_hand, rel=1e-9)
    assert round(total / 1e9, 1) == 8.1


def test_nemotron_h_56b_parameters():
    m = model_preset("nemotron-h-56b")
    assert round(float(workload.total_params(m)["total"]) / 1e9) == 56


def test_mamba_layer_flops_by_hand():
    # A model of Mamba layers only, without MLPs: per token per layer the two projections
    # (2 n k each), the convolution 2 K (d_inner + 2 G N), one multiply-add per conv bias,
    # A, D, dt bias and norm weight, and the SSD scan 2 Q (G N + d_inner) + 4 N d_inner
    # (Dao & Gu 2024, Sec. 6).
    m = cd.Model(
        layers=4, hidden=1024, heads=8, kv_heads=8, ffn_hidden=4096, vocab=1000, seq_len=4096,
        mamba_layers=4, mamba_state_dim=64, mamba_head_dim=64, mamba_heads=32, mamba_groups=4,
        mamba_conv_kernel=4, mlp_free_layers=4,
    )  # fmt: skip
    di, gn, n_state, q = 2048, 256, 64, workload.SSD_CHUNK
    proj = 2 * (1024 * (2 * di + 2 * gn + 32) + di * 1024)
    proj += 2 * (di + 2 * gn) * (4 + 1) + 2 * (3 * 32 + di)
    ssd = 2 * q * (gn + di) + 4 * n_state * di
    f = workload.forward_flops_per_token(m)
    assert float(f["gemm"]) == pytest.approx(proj + ssd, rel=1e-9)
    assert float(f["ssd"]) == pytest.approx(ssd, rel=1e-9)
    assert float(f["attention"]) == 0.0
    tokens = 8 * 4096
    expect = 3 * tokens * (4 * (proj + ssd) + 2 * 1024 * 1000)
    assert float(workload.model_flops_per_step(m, 8)) == pytest.approx(expect, rel=1e-6)


def test_tp_splits_the_mamba_gemms():
    cfg = hybrid_run(sequence_parallel=True)
    m = dataclasses.replace(cfg.model, mamba_layers=cfg.model.layers, mlp_free_layers=28.0)
    sy, eff, prec = cfg.system, cfg.efficiency, cfg.training.precision
    sm = Smoothing(exact=True)
    for tp in (1.0, 2.0, 4.0):
        st = dataclasses.replace(cfg.strategy, tp=tp)
        act = memory.layer_activation_bytes(m, st, prec)
        lt = compute.layer_times(m, st, sy, eff, prec, act, sm)
        tokens = st.microbatch * m.seq_len / st.cp
        peak = compute.peak_flops(sy, prec)
        di = m.mamba_heads * m.mamba_head_dim
        width = 2 * di + 2 * m.mamba_groups * m.mamba_state_dim + m.mamba_heads
        gemm = compute.gemm_time(tokens, width / tp, m.hidden, peak, eff, sm)
        gemm = gemm + compute.gemm_time(tokens, m.hidden, di / tp, peak, eff, sm)
        ssd_flops = tokens * float(workload.ssd_flops_per_token(m)) / tp
        ssd = ssd_flops / (sy.accelerator.peak_tflops * 1e12 * eff.ssd_eff)
        assert float(lt["gemm"]) == pytest.approx(float(gemm) + ssd, rel=1e-5)
        assert float(lt["attention"]) == 0.0
        assert float(lt["mlp"]) == 0.0
    # Mamba activations are split by TP: the split part halves from tp 1 to tp 2.
    per = memory.activation_bytes_per_token_layer(m, cfg.strategy)
    assert float(per["split"]) > 2 * float(per["replicated"])


def test_tp_must_divide_the_mamba_groups():
    with pytest.raises(SpecError, match="mamba_groups"):
        hybrid_run(tp=16, pp=1, dp=1)


def test_hybrid_pattern_parses_to_counts():
    c = _hybrid_counts(NEMOTRON_H_8B_PATTERN, {})
    assert c == {"layers": 28.0, "mamba_layers": 24.0, "moe_layers": 0.0, "mlp_free_layers": 4.0}
    # More MLP blocks than mixers: a negative MLP-free count (1.5 MLPs per layer on average).
    assert _hybrid_counts("M--*--", {})["mlp_free_layers"] == -2.0
    assert _hybrid_counts("MEM*E", {})["moe_layers"] == 2.0
    with pytest.raises(SpecError):
        _hybrid_counts("M-X", {})
    with pytest.raises(SpecError):
        _hybrid_counts("M-*", {"layers": 3})
    # Through a run document: the pattern overrides the preset's counts and agrees with them.
    cfg = hybrid_run()
    doc_model = {"preset": "nemotron-h-8b", "hybrid_pattern": NEMOTRON_H_8B_PATTERN}
    cfg2 = cd.load_run_dict(
        {
            "model": doc_model,
            "training": {"global_batch": 128},
            "system": {"accelerator": "h100-sxm5-80gb", "num_accelerators": 16},
            "strategy": {"tp": 2, "pp": 2, "dp": 4},
        }
    )
    assert cfg2.model == cfg.model
    # Per-layer averages: 24 of 28 MLPs, so total MLP parameters = 24 MLPs.
    p = workload.layer_params(cfg.model)
    assert float(cfg.model.layers * p["mlp"]) == pytest.approx(24 * 2 * 4096 * 21504)


def test_pure_transformer_unchanged():
    m = cd.Model(
        layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=51200,
        seq_len=2048, dropout=1,
    )  # fmt: skip
    assert round(float(workload.total_params(m)["total"]) / 1e9, 1) == 175.2  # Brown et al.
    f = workload.forward_flops_per_token(m)
    h, s = 12288.0, 2048.0
    assert float(f["ssd"]) == 0.0
    assert float(f["gemm"]) == 24 * h * h
    assert float(f["attention"]) == 4 * s * h
    explicit = dataclasses.replace(m, mamba_layers=0.0, mamba_heads=0.0, mlp_free_layers=0.0)
    assert workload.layer_params(explicit) == workload.layer_params(m)
    # Korthikanti et al. 2022 eq. 1: 34 + 5 a s / h bytes per token per layer, h units.
    st = cd.make_strategy(tp=1, pp=1, dp=1, flash_attention=False)
    per = memory.activation_bytes_per_token_layer(m, st)
    total = float(per["replicated"] + per["split"] + per["scores"])
    assert total == pytest.approx(h * (34 + 5 * 96 * s / h))


def test_hybrid_report_and_relaxed_gradients():
    cfg = hybrid_run(sequence_parallel=True, recompute="selective")
    rep = cd.evaluate(*cfg.specs())
    assert 0.0 < float(rep.mfu) < 1.0
    assert float(rep.memory_gb["activations"]) > 0.0
    sm = Smoothing(exact=False, tau=0.1)

    def loss(hidden, seq_len):
        m = dataclasses.replace(cfg.model, hidden=hidden, seq_len=seq_len)
        r = cd.evaluate_unchecked(m, cfg.training, cfg.system, cfg.strategy, cfg.efficiency, sm)
        return r.step_time_s + r.memory_gb["total"]

    g = jax.grad(loss, argnums=(0, 1))(4096.0, 8192.0)
    assert all(math.isfinite(float(x)) for x in g)
    assert float(g[0]) > 0.0 and float(g[1]) > 0.0
