"""Multi-token prediction (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2; Megatron-Core
``mtp_num_layers``): parameters, FLOPs, the last stage's time and memory, by hand."""

import json
from importlib import resources

import jax.numpy as jnp
import pytest

import codesign as cd
from codesign import compute, memory, workload
from codesign.smoothing import EXACT
from codesign.specs import SpecError


def _cfg(preset="llama3-8b", pp=1, **strategy):
    return cd.config.load_run_dict(
        {
            "model": {"preset": preset},
            "training": {"global_batch": 64, "precision": "bf16"},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": 8 * pp,
                "tiers": [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 8 * pp}],
            },
            "strategy": {"tp": 8, "pp": pp, "dp": 1, **strategy},
        }
    )


def _eval(cfg, mtp, **model):
    m, tr, sy, st, eff = cfg.specs()
    return cd.evaluate(m.replace(mtp_layers=mtp, **model), tr, sy, st, eff)


def test_deepseek_v3_mtp_parameters_by_hand():
    # One module: an average layer of the 61 ((671.03B - 2 x 129280 x 7168) / 61) plus its
    # projection 2 h^2 = 102,760,448 and three norms 3 h = 21,504 (DeepSeek-V3 eq. 21).
    m = cd.config.model_preset("deepseek-v3")
    base = float(workload.total_params(m)["total"])
    with_mtp = float(workload.total_params(m.replace(mtp_layers=1.0))["total"])
    emb = 2 * 129280 * 7168
    assert with_mtp - base == pytest.approx((base - emb) / 61 + 102_760_448 + 21_504, rel=1e-12)
    assert with_mtp / 1e9 == pytest.approx(682.1, abs=0.05)


def test_mtp_flops_match_nvidia_model_tflops():
    # NVIDIA's Megatron-Bridge performance pages give model TFLOP/s per GPU and tokens/s per
    # GPU: DeepSeek-V3 with MTP (25.11, 256 B200, MXFP8) 557 / 2139, without MTP (25.11, 256
    # GB200, MXFP8) 1003 / 4018: 1.043 times the FLOPs per token with the module.
    data = json.loads(
        resources.files("codesign")
        .joinpath("data/measured_runs_megatron_bridge_2025.json")
        .read_text()
    )
    rows = {r["id"]: r for r in (data["rows"] if isinstance(data, dict) else data)}

    def per_token(rid):
        meas = rows[rid]["measured"]
        return meas["model_tflops_per_gpu"] / meas["tokens_per_s_per_gpu"]

    nvidia = per_token("mbridge_25.11_DGX-B200_DeepSeekV3__w__MTP__256gpu_FP8-MX") / per_token(
        "mbridge_25.11_DGX-GB200_DeepSeekV3__w_o_MTP__256gpu_FP8-MX"
    )
    m = cd.config.model_preset("deepseek-v3")
    ours = float(workload.model_flops_per_step(m.replace(mtp_layers=1.0), 1.0)) / float(
        workload.model_flops_per_step(m, 1.0)
    )
    assert nvidia == pytest.approx(1.043, abs=0.002)
    assert ours == pytest.approx(nvidia, abs=0.01)


def test_mtp_runs_a_layer_the_projection_and_the_head_again():
    # One stage: the module's forward time is one more layer (the same model with a layer
    # more, dense: every layer alike), its 2h -> h projection and the output head.
    cfg = _cfg()
    m = cfg.model
    r0, r1 = _eval(cfg, 0.0), _eval(cfg, 1.0)
    r_deeper = _eval(cfg, 0.0, layers=m.layers + 1.0)
    _, tr, sy, st, eff = cfg.specs()
    act = memory.layer_activation_bytes(m, st, "bf16")
    lt = compute.layer_times(m, st, sy, eff, "bf16", act, EXACT)
    n_mb = float(r0.num_microbatches)
    layer_fwd = float(r_deeper.breakdown_s["forward"] - r0.breakdown_s["forward"]) / n_mb
    head_fwd = float(lt["logits"] + lt["logits_elementwise"] + lt["mtp_proj"])
    expect = n_mb * (layer_fwd + head_fwd)
    assert float(r1.breakdown_s["forward"] - r0.breakdown_s["forward"]) == pytest.approx(
        expect, rel=1e-6
    )
    # the projection: 2 tokens (h / t) 2h FLOPs
    tokens = float(st.microbatch * m.seq_len)
    flops = 2.0 * tokens * float(m.hidden) / 8.0 * 2.0 * float(m.hidden)
    assert float(lt["mtp_proj"]) > flops / (float(sy.accelerator.peak_tflops) * 1e12)


def test_mtp_on_the_last_stage_memory_by_hand():
    # 32 layers on 4 stages of 2 chunks, 2 + 8 + 8 + 14: the last stage holds the most.  The
    # module's layer sits in its last chunk, which holds one micro-batch at the stage's peak
    # (not the stage's average of ((v - 1) p + 1) / v = 2.5); one more fp32 logits buffer;
    # its layer's weights, the projection and norms, and a copy of the input embedding.
    cfg = _cfg(pp=4, interleave=2, pp_first_layers=2, pp_last_layers=14)
    m, tr, sy, st, eff = cfg.specs()
    r0, r1 = _eval(cfg, 0.0), _eval(cfg, 1.0)
    assert float(r0.memory_stage) == float(r1.memory_stage) == 2.0
    assert float(r1.stage_layers["last"]) == 15.0
    per_layer = float(memory.stored_per_layer(memory.layer_activation_bytes(m, st, "bf16"), st))
    gb = memory.GB
    d_act = float(r1.memory_gb["activations"] - r0.memory_gb["activations"]) * gb
    assert d_act == pytest.approx(per_layer, rel=1e-9)
    tokens = float(st.microbatch * m.seq_len)
    d_buf = float(r1.memory_gb["buffers"] - r0.memory_gb["buffers"]) * gb
    assert d_buf == pytest.approx(4.0 * tokens * float(m.vocab) / 8.0, rel=1e-9)
    h, v = float(m.hidden), float(m.vocab)
    layer = (float(workload.total_params(m)["total"]) - 2 * v * h) / float(m.layers)
    params = (layer + 2 * h * h + 3 * h + v * h) / 8.0  # one rank of 8-way TP
    d_w = float(r1.memory_gb["weights"] - r0.memory_gb["weights"]) * gb
    assert d_w == pytest.approx(2.0 * params, rel=1e-6)  # 16-bit weights
    assert float(r1.step_time_s) > float(r0.step_time_s)


def test_mtp_layers_checked():
    cfg = _cfg()
    m, tr, sy, st, eff = cfg.specs()
    with pytest.raises(SpecError, match="model.mtp_layers"):
        cd.evaluate(m.replace(mtp_layers=-1.0), tr, sy, st, eff)
    with pytest.raises(SpecError, match="model.mtp_layers"):
        cd.evaluate(m.replace(mtp_layers=0.5), tr, sy, st, eff)


def test_bridge_deepseek_rows_carry_their_mtp():
    from codesign.calibration._rows import calibrated_row_config, load_all_rows

    seen = 0
    for row in load_all_rows():
        if "DeepSeek" not in row["id"] or not row["id"].startswith("mbridge"):
            continue
        cfg, notes = calibrated_row_config(row)
        want = 0.0 if "w_o_MTP" in row["id"] else 1.0
        assert float(cfg.model.mtp_layers) == want, row["id"]
        assert jnp.isfinite(cd.evaluate(*cfg.specs()).step_time_s)
        seen += 1
    assert seen == 11


@pytest.mark.parametrize("mtp", [0.0, 1.0])
def test_relaxed_gradients_finite_with_mtp(mtp):
    """The MTP terms (its last-chunk count in every program) keep the relaxed step time and
    memory finite, with finite gradients over 8-512 micro-batches and in the module count."""
    import jax

    from codesign.smoothing import Smoothing

    cfg = _cfg(preset="deepseek-v3", pp=4, interleave=2, ep=8, etp=1)
    m, tr, sy, st, eff = cfg.specs()
    sm = Smoothing(exact=False, tau=0.1)

    def f(gbs, k):
        r = cd.evaluate_unchecked(
            m.replace(mtp_layers=k), tr.replace(global_batch=gbs), sy, st, eff, sm
        )
        return r.step_time_s + r.memory_gb["total"]

    gbs = 8.0 * jnp.arange(8.0, 513.0)
    val, (g_b, g_k) = jax.vmap(jax.value_and_grad(f, argnums=(0, 1)), in_axes=(0, None))(
        gbs, jnp.asarray(mtp)
    )
    for x in (val, g_b, g_k):
        assert bool(jnp.all(jnp.isfinite(x)))
    assert bool(jnp.all(g_k > 0))  # a module more always costs time and memory
