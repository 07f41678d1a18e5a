"""Scale-across: reduced-frequency synchronization over cross-site tiers (DiLoCo) and the
monotonicity of the step in the cross-site link's latency and oversubscription."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import codesign as cd
from codesign.runfile import run_toml
from codesign.specs import SpecError


def _doc(cross="cross-building", **strategy):
    st = {"tp": 8, "pp": 4, "dp": 64, "zero": 1}
    st.update(strategy)
    return {
        "model": {"preset": "llama3-70b"},
        "training": {"global_batch": 1024, "tokens": 1e12},
        "system": {
            "accelerator": "h100-sxm5-80gb",
            "num_accelerators": 2048,
            "tiers": [
                {"preset": "nvlink4"},
                {"preset": "ib-ndr-400", "domain": 1024},
                {"preset": cross, "domain": 0},
            ],
        },
        "strategy": st,
    }


def _cfg(training=None, cross="cross-building", **strategy):
    doc = _doc(cross, **strategy)
    doc["training"].update(training or {})
    return cd.load_run_dict(doc)


DP_OUT = ["tp", "cp", "ep", "pp", "dp"]  # dp outermost: it crosses the sites


def _leaves(report):
    return jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.asarray, report))


def test_cross_site_flag_comes_from_the_fabric_kind():
    cfg = _cfg()
    assert [float(t.cross_site) for t in cfg.system.tiers] == [0.0, 0.0, 1.0]


def test_diloco_with_h_1_is_synchronous_training():
    """H = 1 with every other DiLoCo knob set (compression, overlap, a tokens penalty) gives
    exactly the synchronous report, leaf by leaf."""
    sync = cd.evaluate(*_cfg(placement=DP_OUT).specs())
    h1 = cd.evaluate(
        *_cfg(
            training={"outer_tokens_factor": 1.3},
            placement=DP_OUT,
            outer_sync_interval=1,
            outer_compression=0.25,
            outer_overlap=0.7,
        ).specs()
    )
    for a, b in zip(_leaves(sync), _leaves(h1), strict=True):
        np.testing.assert_array_equal(a, b)


def test_outer_reduction_every_h_steps_shortens_the_step():
    """Data parallelism across two regions (dp outermost, 1 GB/s and 10 ms between them):
    reducing across sites every H steps cuts the exposed DP time and the step, the more the
    larger H, and the model's other terms do not move."""
    t = {}
    for h in (1, 2, 4, 16):
        cfg = _cfg(cross="cross-region", outer_sync_interval=h, placement=DP_OUT)
        r = cd.evaluate(*cfg.specs())
        t[h] = (float(r.step_time_s), float(r.breakdown_s["dp_comm"]), r)
    assert t[2][1] < t[1][1] and t[4][1] < t[2][1] and t[16][1] < t[4][1]
    assert t[2][0] < t[1][0] and t[4][0] < t[2][0] and t[16][0] < t[4][0]
    for k in ("forward", "backward", "tp_comm", "pp_bubble"):
        assert float(t[16][2].breakdown_s[k]) == pytest.approx(float(t[1][2].breakdown_s[k]))
    # The outer state costs memory (anchor weights and outer momentum, 8 bytes per parameter).
    assert float(t[4][2].memory_gb["optimizer"]) > float(t[1][2].memory_gb["optimizer"])


def test_outer_reduction_runs_at_the_data_parallel_efficiency():
    """The outer (DiLoCo) all-reduce is a data-parallel collective like the every-step one:
    its bandwidth term, isolated as the exposed DP time that compression removes (no outer
    overlap, so it is exposed whole), doubles when ``dp_comm_eff`` halves."""
    kw = {"cross": "cross-region", "placement": DP_OUT, "outer_sync_interval": 4}

    def removed_by_compression(dp_comm_eff):
        t = []
        for c in (1.0, 0.5):
            cfg = _cfg(outer_compression=c, **kw)
            eff = dataclasses.replace(cfg.efficiency, dp_comm_eff=dp_comm_eff)
            r = cd.evaluate(cfg.model, cfg.training, cfg.system, cfg.strategy, eff)
            t.append(float(r.breakdown_s["dp_comm"]))
        return t[0] - t[1]

    full, half = removed_by_compression(1.0), removed_by_compression(0.5)
    assert full > 0
    assert half == pytest.approx(2 * full, rel=1e-9)


def test_compression_and_overlap_only_help():
    kw = {"cross": "cross-region", "placement": DP_OUT, "outer_sync_interval": 4}
    base = cd.evaluate(*_cfg(**kw).specs())
    comp = cd.evaluate(*_cfg(outer_compression=0.25, **kw).specs())
    hid = cd.evaluate(*_cfg(outer_overlap=1.0, **kw).specs())
    assert float(comp.step_time_s) < float(base.step_time_s)
    assert float(hid.step_time_s) < float(base.step_time_s)


def test_tokens_penalty_applies_only_with_reduced_frequency():
    """The convergence penalty is the user's: it scales the tokens to train (so time and cost
    to train) when H > 1, and nothing when H = 1."""
    plain = cd.evaluate(*_cfg(outer_sync_interval=4).specs())
    pen = cd.evaluate(*_cfg({"outer_tokens_factor": 1.2}, outer_sync_interval=4).specs())
    assert float(pen.step_time_s) == float(plain.step_time_s)
    assert float(pen.cost["time_to_train_days"]) == pytest.approx(
        1.2 * float(plain.cost["time_to_train_days"])
    )


@settings(max_examples=15, deadline=None)
@given(
    lat=hs.floats(1.0, 20000.0),
    over=hs.floats(1.0, 8.0),
    k=hs.floats(1.01, 10.0),
    h=hs.sampled_from([1, 4]),
)
def test_step_never_improves_with_cross_site_latency_or_oversubscription(lat, over, k, h):
    cfg = _cfg(outer_sync_interval=h, placement=DP_OUT)

    def step(latency, oversub):
        tiers = list(cfg.system.tiers)
        tiers[2] = dataclasses.replace(tiers[2], latency_us=latency, oversubscription=oversub)
        sy = dataclasses.replace(cfg.system, tiers=tuple(tiers))
        return float(
            cd.evaluate_unchecked(
                cfg.model, cfg.training, sy, cfg.strategy, cfg.efficiency
            ).step_time_s
        )

    t0 = step(lat, over)
    assert step(lat * k, over) >= t0 * (1 - 1e-12)
    assert step(lat, over * k) >= t0 * (1 - 1e-12)


def test_run_file_round_trip_and_bad_input(tmp_path):
    cfg = _cfg({"outer_tokens_factor": 1.1}, outer_sync_interval=8, outer_compression=0.5)
    path = tmp_path / "run.toml"
    path.write_text(run_toml(cfg))
    back = cd.load_run(path)
    assert float(back.strategy.outer_sync_interval) == 8.0
    assert float(back.training.outer_tokens_factor) == 1.1
    assert float(back.system.tiers[2].cross_site) == 1.0
    assert float(cd.evaluate(*back.specs()).step_time_s) == float(
        cd.evaluate(*cfg.specs()).step_time_s
    )
    with pytest.raises(SpecError, match="outer_sync_interval"):
        _cfg(outer_sync_interval=0.5)
    with pytest.raises(SpecError, match="outer_compression"):
        _cfg(outer_compression=2.0)
    with pytest.raises(SpecError, match="outer_overlap"):
        _cfg(outer_overlap=-0.1)


def test_hidden_outer_reduction_is_charged_the_slowdown_too():
    """The streaming outer all-reduce hidden behind the next H steps' compute shares the GPU
    with that compute like the every-step reduction: ``dp_overlap_slowdown`` charges k of its
    time (per step, over H), on top of k of the hidden every-step traffic.  The outer time
    itself comes from the same run with its overlap off, where all of it is charged."""
    kw = {"cross": "cross-building", "placement": DP_OUT, "outer_sync_interval": 4}

    def dp(overlap, k):
        cfg = _cfg(outer_overlap=overlap, **kw)
        eff = dataclasses.replace(cfg.efficiency, dp_overlap_slowdown=k)
        return cd.evaluate(cfg.model, cfg.training, cfg.system, cfg.strategy, eff)

    off, on, on_k = dp(0.0, 0.0), dp(1.0, 0.0), dp(1.0, 0.4)
    outer_per_step = float(off.breakdown_s["dp_comm"]) - float(on.breakdown_s["dp_comm"])
    assert outer_per_step > 0  # hidden whole at overlap 1
    inner_hidden = float(on.exposed_comm_s["dp_total"]) - float(
        on.exposed_comm_s["dp_beyond_window"]
    )
    expected = float(on.breakdown_s["dp_comm"]) + 0.4 * (inner_hidden + outer_per_step)
    assert float(on_k.breakdown_s["dp_comm"]) == pytest.approx(expected, rel=1e-12)
