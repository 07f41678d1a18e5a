"""Goodput at scale (codesign.goodput): off means today's numbers exactly, goodput falls with
the failure rate and rises with checkpoint bandwidth, the checkpoint interval is Daly's closed
form, jit/eager/vmap agree, relaxed gradients are finite, and bad input names its field."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import small_doc
from hypothesis import given, settings
from hypothesis import strategies as hs

import codesign as cd
from codesign import goodput as gp
from codesign.goodput import reliability_preset
from codesign.runfile import run_toml
from codesign.search import load_problem_dict

RATES = tuple(f"{c}_per_mh" for c in gp.COMPONENTS)


def _cfg(reliability: dict | None = None, tokens: float = 1e12) -> cd.RunConfig:
    doc = small_doc()
    doc["training"]["tokens"] = tokens
    if reliability is not None:
        doc["system"]["reliability"] = reliability
    return cd.load_run_dict(doc)


def _with(cfg: cd.RunConfig, **changes) -> cd.RunConfig:
    rel = dataclasses.replace(cfg.system.reliability, **changes)
    return dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, reliability=rel))


def _report(cfg: cd.RunConfig, sm=cd.EXACT):
    return cd.evaluate_unchecked(*cfg.specs(), sm)


def _leaves_equal(a, b, skip=()):
    da = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(a)}
    db = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(b)}
    assert da.keys() == db.keys()
    for k in da:
        if not any(s in k for s in skip):
            assert np.array_equal(np.asarray(da[k]), np.asarray(db[k])), k


def test_default_is_on_by_platform_and_none_turns_it_off():
    cfg = _cfg()  # no [system.reliability]: the platform's preset (H100 HGX: Llama 3's rates)
    assert cfg.names["reliability"] == "llama3-h100"
    _leaves_equal(cfg.system.reliability, reliability_preset("llama3-h100"))
    r = _report(cfg)
    assert 0.0 < float(r.cost["goodput"]) < 1.0
    assert float(r.cost["failures_per_day"]) > 0.0
    assert _cfg({"preset": "auto", "restart_s": 300}).names["reliability"] == "llama3-h100"
    assert float(_cfg({"preset": "auto", "restart_s": 300}).system.reliability.restart_s) == 300
    off = _cfg({"preset": "none"})
    assert off.names["reliability"] == "none"
    assert float(_report(off).cost["goodput"]) == 1.0
    assert float(_report(off).cost["failures_per_day"]) == 0.0
    for accel, domain, preset in (
        ("a100-sxm4-80gb", 8, "rsc1-a100"),
        ("gb200", 72, "gb200-nvl72"),
        ("b200", 8, "llama3-h100"),
    ):
        doc = small_doc()
        doc["system"] = {"accelerator": accel, "num_accelerators": 72 if domain == 72 else 64}
        doc["strategy"] = {"tp": 1, "pp": 1, "dp": doc["system"]["num_accelerators"]}
        doc["training"]["global_batch"] = 576
        c = cd.load_run_dict(doc, check=False)
        assert c.names["reliability"] == preset, accel
        assert gp.default_reliability_preset(accel, domain) == preset
    # The Python helper gets the same default, and takes an explicit one.
    _leaves_equal(cd.system_preset("h100-sxm5-80gb", 64).reliability, cfg.system.reliability)
    sy = cd.system_preset("h100-sxm5-80gb", 64, reliability=reliability_preset("none"))
    assert float(sy.reliability.enabled) == 0.0


def test_zero_failure_rates_equal_goodput_off_leaf_by_leaf():
    off = _report(_cfg({"preset": "none"}))
    on = _cfg({"preset": "llama3-h100"})
    zero = _with(
        on, usd_per_checkpoint_gbps=0.0, w_per_checkpoint_gbps=0.0, **dict.fromkeys(RATES, 0.0)
    )
    # Checkpoint write times are reported whatever the rates; everything else is identical.
    _leaves_equal(_report(zero), off, skip=("checkpoint_write_s", "checkpoint_delta_s"))
    # Storage priced: capex and $ change, time to train does not.
    priced = _with(on, **dict.fromkeys(RATES, 0.0))
    r = _report(priced)
    assert float(r.cost["time_to_train_days"]) == float(off.cost["time_to_train_days"])
    assert float(r.cost["capex_usd"]) > float(off.cost["capex_usd"])


def test_switch_turns_everything_off():
    off = _report(_cfg({"preset": "none"}))
    switched = _report(_cfg({"preset": "gb200-nvl72", "enabled": False, "spares_per_domain": 4}))
    _leaves_equal(switched, off, skip=("checkpoint_write_s", "checkpoint_delta_s"))


def test_failures_lengthen_time_and_cost_by_goodput():
    off = _report(_cfg({"preset": "none"}))
    on = _report(_cfg({"preset": "llama3-h100"}))
    g = float(on.cost["goodput"])
    assert 0.0 < g < 1.0
    ratio = float(on.cost["time_to_train_days"]) / float(off.cost["time_to_train_days"])
    assert ratio == pytest.approx(1.0 / g, rel=1e-12)
    parts = sum(
        float(on.cost[k]) for k in ("lost_checkpoint", "lost_work", "lost_restart", "lost_repair")
    )
    assert parts == pytest.approx(1.0 - g, rel=1e-9)


def test_llama3_interruption_rate_at_16k():
    rel = reliability_preset("llama3-h100")
    per_day = float(gp.failure_rate_per_s(rel, 16384.0)) * 86400.0
    assert per_day == pytest.approx(419 / 54, rel=1e-3)


@settings(max_examples=25, deadline=None)
@given(
    scale=hs.floats(0.01, 20.0),
    factor=hs.floats(1.01, 10.0),
    n=hs.sampled_from([512.0, 4096.0, 16384.0, 65536.0]),
)
def test_goodput_falls_with_failure_rate(scale, factor, n):
    rel = reliability_preset("gb200-nvl72", spares_per_domain=2.0)

    def g(s):
        r = dataclasses.replace(rel, **{k: getattr(rel, k) * s for k in RATES})
        return float(gp.goodput(r, n, 5.7e12, 450.0, 72.0, 128.0)["goodput"])

    assert g(scale * factor) < g(scale)


@settings(max_examples=25, deadline=None)
@given(
    bw=hs.floats(0.01, 10.0),
    factor=hs.floats(1.05, 10.0),
    asynchronous=hs.sampled_from([0.0, 0.5]),
    n=hs.sampled_from([1024.0, 16384.0]),
)
def test_goodput_rises_with_checkpoint_bandwidth(bw, factor, asynchronous, n):
    rel = reliability_preset("llama3-h100", async_checkpoint=asynchronous)

    def g(b):
        r = dataclasses.replace(rel, checkpoint_gbps=b)
        return float(gp.goodput(r, n, 5.7e12, 64.0, 8.0, 128.0)["goodput"])

    assert g(bw * factor) > g(bw)


def test_daly_interval_closed_form():
    for delta, m in ((3.0, 11_000.0), (60.0, 3600.0), (300.0, 900.0)):
        young = math.sqrt(2 * delta * m)
        daly = young * (1 + math.sqrt(delta / (2 * m)) / 3 + delta / (2 * m) / 9) - delta
        assert float(gp.young_interval(delta, m)) == pytest.approx(young, rel=1e-12)
        assert float(gp.daly_interval(delta, m)) == pytest.approx(daly, rel=1e-12)
    assert float(gp.daly_interval(500.0, 200.0)) == 200.0  # delta >= 2M: tau = M


def test_optimal_interval_is_near_best():
    rel = reliability_preset("llama3-h100")
    args = (16384.0, 5.7e12, 64.0, 8.0, 128.0)
    best = gp.goodput(rel, *args)
    tau = float(best["checkpoint_interval_s"])
    m = float(best["mtbf_h"]) * 3600
    delta = float(best["checkpoint_delta_s"])
    assert tau == pytest.approx(float(gp.daly_interval(delta, m)), rel=1e-12)
    for f in (0.5, 0.8, 1.25, 2.0):
        other = gp.goodput(dataclasses.replace(rel, checkpoint_interval_s=tau * f), *args)
        assert float(other["goodput"]) <= float(best["goodput"]) + 1e-6


def test_spares_cover_repairs_only_for_wide_units():
    args = (16384.0, 5.7e12, 450.0, 72.0, 128.0)
    rel = reliability_preset("gb200-nvl72")
    bare = gp.goodput(rel, *args)
    spared = gp.goodput(dataclasses.replace(rel, spares_per_domain=4.0), *args)
    assert float(bare["lost_repair"]) > 0 and float(spared["lost_repair"]) == 0.0
    assert float(spared["spare_accelerators"]) == pytest.approx(4.0 * 16384 / 72)
    host = dataclasses.replace(rel, blast_radius=gp.blast_weights("host"))
    assert float(gp.goodput(host, *args)["lost_repair"]) == 0.0


def test_jit_eager_vmap_agree():
    rel = reliability_preset("gb200-nvl72", spares_per_domain=2.0)
    ns = jnp.asarray([1024.0, 8192.0, 65536.0])
    f = lambda n: gp.goodput(rel, n, 5.7e12, 450.0, 72.0, 128.0)  # noqa: E731
    eager = [f(n) for n in ns]
    jitted = [jax.jit(f)(n) for n in ns]
    batched = jax.vmap(f)(ns)
    for i in range(3):
        for k, v in eager[i].items():
            assert float(jitted[i][k]) == pytest.approx(float(v), rel=1e-12), k
            assert float(batched[k][i]) == pytest.approx(float(v), rel=1e-12), k


@pytest.mark.parametrize("preset", ["llama3-h100", "gb200-nvl72", "none"])
def test_relaxed_gradients_finite(preset):
    cfg = _cfg({"preset": preset})
    sm = cd.Smoothing(exact=False, tau=0.05)

    def t(x):
        bw, spares, scale = x
        rel = cfg.system.reliability
        rel = dataclasses.replace(
            rel,
            checkpoint_gbps=bw,
            spares_per_domain=spares,
            **{k: getattr(rel, k) * scale for k in RATES},
        )
        sy = dataclasses.replace(cfg.system, reliability=rel)
        r = cd.evaluate_unchecked(cfg.model, cfg.training, sy, cfg.strategy, cfg.efficiency, sm)
        return jnp.log(r.cost["time_to_train_days"]) + jnp.log(r.cost["cost_to_train_usd"])

    for x in ([0.12, 0.0, 1.0], [1.0, 4.0, 0.0], [0.5, 2.0, 3.0]):
        g = jax.grad(t)(jnp.asarray(x))
        assert np.all(np.isfinite(np.asarray(g))), (preset, x, g)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"preset": "llama3-h100", "checkpoint_gbps": -1.0}, "system.reliability.checkpoint_gbps"),
        ({"preset": "llama3-h100", "checkpoint_gbps": 0.0}, "system.reliability.checkpoint_gbps"),
        ({"preset": "llama3-h100", "async_checkpoint": 2.0}, "system.reliability.async_checkpoint"),
        ({"preset": "llama3-h100", "hbm_per_mh": -3.0}, "system.reliability.hbm_per_mh"),
        (
            {"preset": "llama3-h100", "accelerators_per_host": 2.5},
            "system.reliability.accelerators_per_host",
        ),
        ({"preset": "llama3-h100", "blast_radius": "rack"}, "system.reliability.blast_radius"),
        (
            {"preset": "llama3-h100", "blast_radius": [0.5, 0.2, 0.2]},
            "system.reliability.blast_radius",
        ),
        ({"preset": "no-such"}, "system.reliability.preset"),
        ({"preset": "llama3-h100", "typo_s": 1.0}, "system.reliability.typo_s"),
        ({"restart_s": "ten"}, "system.reliability.restart_s"),
    ],
)
def test_bad_input_names_field(table, field):
    with pytest.raises(cd.SpecError) as e:
        _cfg(table)
    assert e.value.field == field
    assert isinstance(e.value, ValueError)


def test_run_file_round_trip_keeps_reliability(tmp_path):
    cfg = _cfg({"preset": "gb200-nvl72", "spares_per_domain": 4, "async_checkpoint": 1})
    path = tmp_path / "run.toml"
    path.write_text(run_toml(cfg))
    back = cd.load_run(path)
    _leaves_equal(back.system.reliability, cfg.system.reliability)
    assert gp.blast_radius_name(back.system.reliability) == "domain"
    np.testing.assert_array_equal(back.system.reliability.blast_radius, [0.0, 1.0, 0.0])
    a, b = _report(cfg), _report(back)
    assert float(a.cost["time_to_train_days"]) == float(b.cost["time_to_train_days"])


def test_report_shows_goodput():
    cfg = _cfg({"preset": "llama3-h100"})
    d = cd.report_to_dict(cd.evaluate(*cfg.specs()), cfg)
    assert 0 < d["goodput"]["goodput"] < 1
    text = cd.format_report(d, cfg)
    assert "goodput" in text and "failures/day" in text
    off = _cfg({"preset": "none"})
    assert "goodput" not in cd.report_to_dict(cd.evaluate(*off.specs()), off)


def test_problem_searches_reliability_knobs():
    doc = small_doc()
    doc["training"]["tokens"] = 1e12
    doc["system"]["reliability"] = {"preset": "gb200-nvl72"}
    doc["objective"] = {"minimize": "time_to_train"}
    doc["search"] = {
        "tp": [2],
        "pp": [2],
        "reliability": {"checkpoint_gbps": [0.1, 1.0], "spares_per_domain": [0, 4]},
    }
    pb = load_problem_dict(doc)
    assert "system.reliability.spares_per_domain" in pb.continuous_paths
    assert pb.hardware_values["system.reliability.spares_per_domain"] == (0.0, 4.0)
    doc["search"]["reliability"] = {"spares": [1]}
    with pytest.raises(cd.SpecError, match="search.reliability.spares"):
        load_problem_dict(doc)
    doc["search"]["reliability"] = {"checkpoint_gbps": [0, 1]}
    with pytest.raises(cd.SpecError, match="checkpoint_gbps"):
        load_problem_dict(doc)


def test_relaxed_loss_has_finite_gradients_in_reliability_knobs():
    from codesign.search import _relax as relax

    doc = small_doc()
    doc["training"]["tokens"] = 1e12
    doc["system"]["reliability"] = {"preset": "gb200-nvl72", "blast_radius": "replica"}
    doc["objective"] = {"minimize": "cost_to_train"}
    doc["search"] = {
        "tp": [2],
        "pp": [2],
        "reliability": {
            "checkpoint_gbps": [0.1, 2.0],
            "spares_per_domain": [0, 8],
            "checkpoint_interval_s": [0, 900],
        },
    }
    pb = load_problem_dict(doc)
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space.free_hw == pb.continuous_paths
    params = relax.init_params(jax.random.PRNGKey(0), space)
    g = jax.grad(relax.loss)(params, 0.05, 10.0, space, box, base)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(g))
    assert np.any(np.asarray(g["hw"]) != 0)


def test_evaluate_checks_reliability_before_tracing():
    cfg = _cfg({"preset": "llama3-h100"})
    bad = _with(cfg, async_checkpoint=1.5)
    with pytest.raises(cd.SpecError, match=r"system.reliability.async_checkpoint = 1.5 .*\[0, 1\]"):
        cd.evaluate(*bad.specs())


def test_vmap_over_checkpoint_bandwidth_matches_single_evaluations():
    cfg = _cfg({"preset": "gb200-nvl72", "blast_radius": "replica", "spares_per_domain": 2})
    m, tr, sy, st, eff = cfg.specs()

    def days(bw):
        s = dataclasses.replace(
            sy, reliability=dataclasses.replace(sy.reliability, checkpoint_gbps=bw)
        )
        return cd.evaluate_unchecked(m, tr, s, st, eff).cost["time_to_train_days"]

    bws = jnp.asarray([0.05, 0.5, 5.0])
    batched = jax.jit(jax.vmap(days))(bws)
    for i, bw in enumerate(bws):
        assert float(batched[i]) == pytest.approx(float(days(bw)), rel=1e-12)
    assert float(batched[0]) > float(batched[1]) > float(batched[2])


def test_platform_axis_carries_each_platforms_reliability():
    """A search over platforms gives each its own default preset (rates, host size, repair
    wait, blast unit): H100 fails by the host, GB200 NVL72 by the 72-GPU domain, and a point
    on each platform evaluates as the run file on that platform does."""
    from codesign.search._grid import PLATFORM, set_leaf, specs_of

    doc = small_doc()
    doc["system"]["num_accelerators"] = 144
    doc["training"].update(tokens=1e12, global_batch=576)
    doc["strategy"] = {"tp": 2, "pp": 2, "dp": 36}
    doc["objective"] = {"minimize": "time_to_train"}
    doc["search"] = {"tp": [2], "pp": [2], "accelerator": ["h100-sxm5-80gb", "gb200"]}
    pb = load_problem_dict(doc)
    blast = {
        str(p): gp.BLAST_RADII[int(np.argmax(p.table["reliability"]["blast_radius"]))]
        for p in pb.platforms
    }
    assert blast == {"h100-sxm5-80gb": "host", "gb200": "domain"}
    for p in pb.platforms:
        specs = set_leaf(specs_of(pb.cfg), PLATFORM, p.table)
        run = dict(doc, system={"accelerator": str(p), "num_accelerators": 144})
        run.pop("objective"), run.pop("search")
        alone = cd.load_run_dict(run, check=False)
        _leaves_equal(specs["system"].reliability, alone.system.reliability)
        a = cd.evaluate_unchecked(
            *(specs[k] for k in ("model", "training", "system", "strategy", "efficiency"))
        )
        assert float(a.cost["goodput"]) == pytest.approx(
            float(_report(alone).cost["goodput"]), rel=1e-12
        )


def test_checkpoint_carries_the_optimizer_state_the_run_keeps():
    """A checkpoint holds the bf16 weights (2 bytes) and the optimizer state of every
    parameter: 14 bytes with Adam's fp32 state, 10 with bf16 moments
    (``training.optimizer_state_bytes = 8``), so its synchronous write takes 10/14 as long."""
    write = {}
    for b in (12.0, 8.0):
        doc = small_doc()
        doc["training"].update(tokens=1e12, optimizer_state_bytes=b)
        rep = cd.evaluate(*cd.load_run_dict(doc).specs())
        write[b] = float(rep.cost["checkpoint_write_s"])
    assert write[12.0] > 0
    assert write[8.0] == pytest.approx(write[12.0] * 10.0 / 14.0, rel=1e-9)
    assert gp.checkpoint_size_bytes(1e9) == 14e9  # 2 + 12 bytes a parameter by default
