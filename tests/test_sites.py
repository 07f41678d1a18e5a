"""Jobs over several sites (codesign.sites): the single-site limit, the uneven split, the
cross-site pipeline schedule, monotonicity in the link, gradients and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import codesign as cd
from codesign import sites
from codesign._compile import jit
from codesign.smoothing import Smoothing
from codesign.specs import SpecError

H100 = [{"preset": "nvlink4"}, {"preset": "ib-ndr-400", "domain": 64}]
GB200 = [{"preset": "nvlink5-nvl72", "domain": 72}, {"preset": "ib-xdr-800", "domain": 144}]
DP_OUT = ["tp", "cp", "ep", "pp", "dp"]
PP_OUT = ["tp", "cp", "ep", "dp", "pp"]


def _site(acc="h100-sxm5-80gb", n=64, tiers=H100, name=None, **st):
    d = {"accelerator": acc, "num_accelerators": n, "tiers": tiers, "strategy": st}
    if name:
        d["name"] = name
    return d


def _job(sites_, link=None, model="llama3-8b", batch=512, across="dp", check=True, **kw):
    doc = {
        "model": {"preset": model},
        "training": {"global_batch": batch, "tokens": 1e11},
        "link": link or {"preset": "cross-building", "latency_us": 1000},
        "sites": sites_,
        "across": across,
    }
    doc.update(kw)
    return sites.load_sites_dict(doc, check=check)


def _flat(ib, n=128, model="llama3-8b", batch=512, **st):
    return cd.load_run_dict(
        {
            "model": {"preset": model},
            "training": {"global_batch": batch, "tokens": 1e11},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": n,
                "tiers": [{"preset": "nvlink4"}, dict(ib, domain=n)],
            },
            "strategy": st,
        }
    )


@pytest.mark.parametrize("latency_us", [0.0, None])
def test_dp_across_a_link_as_fast_as_scale_out_is_the_single_site_model(latency_us):
    """Two sites of 64 H100 joined by a link with the scale-out tier's numbers give the
    single-site cluster of 128 (scale-out spanning both): the same step, memory and (with
    the link's ports free, as they are one fabric) cost.  Exactly at zero latency; with
    latency the hierarchical reduction (a ring inside each site, then one over the sites)
    takes fewer latency hops than one flat ring, a difference below 1e-4 of the step."""
    ib = {"preset": "ib-ndr-400"}
    if latency_us is not None:
        ib["latency_us"] = latency_us
    st = {"tp": 2, "pp": 2, "zero": 1, "overlap_dp": False}
    site = _site(tiers=[{"preset": "nvlink4"}, dict(ib, domain=64)], dp=16, **st)
    job = _job([site, site], link=dict(ib, price_per_gbps_usd=0.0, power_w=0.0))
    r = sites.evaluate_sites(job)
    rf = cd.evaluate(*_flat(ib, dp=32, placement=DP_OUT, **st).specs())
    tol = 1e-12 if latency_us == 0.0 else 1e-4
    np.testing.assert_allclose(float(r.step_time_s), float(rf.step_time_s), rtol=tol)
    np.testing.assert_allclose(float(r.memory_gb[0]), float(rf.memory_gb["total"]), rtol=1e-12)
    for k in ("capex_usd", "power_kw", "cost_to_train_usd"):
        np.testing.assert_allclose(float(r.cost[k]), float(rf.cost[k]), rtol=tol)
    assert float(r.balance_loss) == pytest.approx(0.0, abs=1e-12)


def test_identical_sites_equal_the_flat_cluster_with_the_link_leaf_by_leaf():
    """Data parallelism across identical sites is the single-site model of the whole
    cluster with the link as its outermost tier (site view = whole job)."""
    site = _site(tp=8, pp=1, dp=8)
    job = _job([site, site])
    r = sites.evaluate_sites(job)
    flat = cd.load_run_dict(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 512, "tokens": 1e11},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": 128,
                "tiers": [*H100, {"preset": "cross-building", "latency_us": 1000, "domain": 128}],
            },
            "strategy": {"tp": 8, "pp": 1, "dp": 16, "placement": DP_OUT},
        }
    )
    rf = cd.evaluate(*flat.specs())
    assert float(r.step_time_s) == float(rf.step_time_s)
    assert float(r.memory_gb[1]) == float(rf.memory_gb["total"])
    for k in rf.cost:
        if not k.startswith("checkpoint_"):  # goodput over sites is not modelled (it is off)
            np.testing.assert_allclose(float(r.cost[k]), float(rf.cost[k]), rtol=1e-12)


def test_pp_across_a_fast_link_is_close_to_the_single_site_pipeline():
    """Pipeline across two sites of 64 H100 (pp 4 each) with the scale-out tier's numbers
    as the link: within 2 % of the single-site pipeline of pp 8 (the stage-time sums differ:
    the single-site model charges every slot of the pipeline the slowest stage's time)."""
    ib = {"preset": "ib-ndr-400"}
    st = {"tp": 8, "pp": 4, "dp": 2}
    site = _site(tiers=[{"preset": "nvlink4"}, dict(ib, domain=64)], **st)
    job = _job([site, site], link=ib, model="llama3-70b", batch=256, across="pp")
    r = sites.evaluate_sites(job)
    rf = cd.evaluate(
        *_flat(ib, model="llama3-70b", batch=256, tp=8, pp=8, dp=2, placement=PP_OUT).specs()
    )
    assert float(r.step_time_s) == pytest.approx(float(rf.step_time_s), rel=0.02)
    assert float(r.memory_gb[0]) == pytest.approx(float(rf.memory_gb["total"]), rel=0.02)


def _pair(n_h100, n_gb200, across="dp", **link):
    if across == "dp":
        a = _site(
            n=n_h100,
            tiers=[H100[0], dict(H100[1], domain=n_h100)],
            name="h100",
            tp=8,
            pp=1,
            dp=n_h100 // 8,
        )
        b = _site(
            "gb200",
            n_gb200,
            [GB200[0], dict(GB200[1], domain=n_gb200)],
            "gb200",
            tp=4,
            pp=1,
            dp=n_gb200 // 4,
        )
        return _job([a, b], link={"preset": "cross-building", **link}, batch=576)
    a = _site(
        n=n_h100,
        tiers=[H100[0], dict(H100[1], domain=n_h100)],
        name="h100",
        tp=8,
        pp=n_h100 // 16,
        dp=2,
    )
    b = _site(
        "gb200",
        n_gb200,
        [GB200[0], dict(GB200[1], domain=n_gb200)],
        "gb200",
        tp=8,
        pp=n_gb200 // 16,
        dp=2,
    )
    return _job(
        [a, b],
        link={"preset": "cross-building", **link},
        model="llama3-70b",
        batch=256,
        across="pp",
    )


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(
    n_h100=hs.sampled_from([32, 64, 128]),
    n_gb200=hs.sampled_from([72, 144]),
    bw=hs.sampled_from([0.5, 5.0, 50.0]),
)
def test_uneven_split_is_never_worse_than_the_even_split_dp(n_h100, n_gb200, bw):
    job = _pair(n_h100, n_gb200, bandwidth_gbps=bw)
    best, info = sites.balance(job)
    assert info["best_step_s"] <= info["even_step_s"] * (1 + 1e-12)
    # The returned job evaluates to what balance reports (the same formulas).
    r = sites.evaluate_sites(best)
    assert float(r.step_time_s) == pytest.approx(info["best_step_s"], rel=1e-9)
    even = sites.evaluate_sites(sites._spec._with_shares(job, info["even_shares"]))
    assert float(even.step_time_s) == pytest.approx(info["even_step_s"], rel=1e-9)
    assert float(r.balance_loss) <= float(even.balance_loss) + 1e-9 or not info["even_fits"]


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(n_h100=hs.sampled_from([32, 64]), latency_ms=hs.sampled_from([0.03, 1.0, 10.0]))
def test_uneven_split_is_never_worse_than_the_even_split_pp(n_h100, latency_ms):
    job = _pair(n_h100, 144, across="pp", latency_us=latency_ms * 1e3)
    best, info = sites.balance(job)
    assert info["splits"] > 1
    assert info["best_step_s"] <= info["even_step_s"] * (1 + 1e-12)
    # The faster GB200 site takes more layers per stage than the H100 site.
    sh = info["best_shares"]
    assert sh[1] / 9 >= sh[0] / (n_h100 // 16)


def test_balancing_identical_sites_keeps_the_even_split():
    site = _site(tp=8, pp=1, dp=8)
    best, info = sites.balance(_job([site, site]))
    assert info["best_shares"] == info["even_shares"] == [256.0, 256.0]


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(
    across=hs.sampled_from(["dp", "pp"]),
    schedule=hs.sampled_from(["1f1b", "crosspipe"]),
    lat=hs.floats(0.0, 2e4),
    dlat=hs.floats(0.0, 2e4),
    over=hs.floats(1.0, 8.0),
    dover=hs.floats(0.0, 8.0),
)
def test_step_never_improves_as_the_link_gets_worse(across, schedule, lat, dlat, over, dover):
    job = _pair(64, 144, across=across, bandwidth_gbps=2.0)
    job = job.replace(schedule=schedule)

    def step(latency, oversub):
        link = job.link.replace(latency_us=latency, oversubscription=oversub)
        return float(sites.evaluate_sites(job.replace(link=link), homogeneous=False).step_time_s)

    base = step(lat, over)
    assert step(lat + dlat, over) >= base * (1 - 1e-12)
    assert step(lat, over + dover) >= base * (1 - 1e-12)


def test_crosspipe_hides_a_long_link_that_stalls_1f1b():
    """A 10 ms link at 0.5 GB/s per accelerator between balanced halves of a pipeline stalls
    plain 1F1B; the cross-site schedule's extra warm-up micro-batches hide the round trip,
    at the price of memory on the stages before the link."""
    site = _site(tp=8, pp=4, dp=2)
    link = {"preset": "cross-building", "latency_us": 1e4, "bandwidth_gbps": 0.5}
    job = _job([site, site], link=link, model="llama3-70b", batch=256, across="pp")
    plain = sites.evaluate_sites(job)
    cross = sites.evaluate_sites(job.replace(schedule="crosspipe"))
    assert float(plain.link_exposed_s) > 0.05 * float(plain.step_time_s)
    assert float(cross.step_time_s) < float(plain.step_time_s)
    assert float(cross.extra_warmup[0]) >= 1
    assert float(cross.memory_gb[0]) > float(plain.memory_gb[0])
    assert float(cross.memory_gb[1]) == float(plain.memory_gb[1])
    # With a short link nothing stalls and both schedules agree.
    short = job.replace(link=job.link.replace(latency_us=30.0, bandwidth_gbps=50.0))
    a = sites.evaluate_sites(short)
    b = sites.evaluate_sites(short.replace(schedule="crosspipe"))
    assert float(a.step_time_s) == pytest.approx(float(b.step_time_s), rel=1e-12)


def test_jit_equals_eager_and_relaxed_gradients_are_finite():
    job = _pair(64, 144, across="pp", latency_us=1e4).replace(schedule="crosspipe")
    exact = sites.evaluate_sites_unchecked(job, homogeneous=False)
    jitted = sites.evaluate_sites(job, homogeneous=False)
    np.testing.assert_allclose(float(exact.step_time_s), float(jitted.step_time_s), rtol=1e-12)
    soft = Smoothing(exact=False, tau=0.05)

    def f(bw, lat, share0):
        link = job.link.replace(bandwidth_gbps=bw, latency_us=lat)
        st = [s.replace(share=x) for s, x in zip(job.sites, (share0, 80.0 - share0), strict=True)]
        r = sites.evaluate_sites_unchecked(
            job.replace(link=link, sites=tuple(st)), soft, homogeneous=False
        )
        return jnp.log(r.step_time_s)

    g = jax.grad(f, argnums=(0, 1, 2))(2.0, 1e4, 24.0)
    assert all(np.isfinite(float(x)) for x in g)
    assert float(g[0]) < 0 < float(g[1])  # more bandwidth helps, more latency hurts


def test_bad_input_names_the_field():
    site = _site(tp=8, pp=1, dp=8)
    with pytest.raises(SpecError, match="across"):
        _job([site, site], across="tp")
    with pytest.raises(SpecError, match="schedule"):
        _job([site, site], schedule="gpipe")
    with pytest.raises(SpecError, match=r"sites\[\]\.share"):
        _job([dict(site, share=100), dict(site, share=100)])
    with pytest.raises(SpecError, match=r"sites\[2\]\.training\.global_batch"):
        _job([dict(site, share=496), dict(site, share=16), dict(site, share=0)], batch=512)
    with pytest.raises(SpecError, match=r"sites\[1\]\.strategy\.dp"):
        _job(
            [_site(tp=8, pp=4, dp=2), _site(tp=4, pp=4, dp=4)],
            model="llama3-70b",
            batch=256,
            across="pp",
        )
    with pytest.raises(SpecError, match="link.bandwidth_gbps"):
        _job([site, site], link={"bandwidth_gbps": 0, "latency_us": 10})
    with pytest.raises(SpecError, match=r"sites\[0\]\.system\.accelerator"):
        _job([_site(acc="h999", tp=8, pp=1, dp=8), site])


def test_goodput_is_the_whole_jobs_over_every_site():
    """A failure at any site stops the synchronous job: the job's failure rate is the sum of
    the sites' (each with its platform's default preset), the repair waits of a rack-scale
    site count, time to train divides by the job's goodput, and the switch is the job's."""
    from codesign.goodput import failure_rate_per_s

    h = _site(n=1024, tiers=[H100[0], dict(H100[1], domain=1024)], tp=8, pp=2, dp=64)
    g = _site("gb200", 1152, [GB200[0], dict(GB200[1], domain=1152)], tp=8, pp=1, dp=144)
    job = _job([dict(h, share=448), dict(g, share=576)], model="llama3-70b", batch=1024)
    rels = [s.system.reliability for s in job.sites]
    assert [float(x.enabled) for x in rels] == [1.0, 1.0]
    r = sites.evaluate_sites(job)
    per_day = sum(
        float(failure_rate_per_s(x, s.system.num_accelerators)) * 86400.0
        for x, s in zip(rels, job.sites, strict=True)
    )
    np.testing.assert_allclose(float(r.cost["failures_per_day"]), per_day, rtol=1e-12)
    gp = float(r.cost["goodput"])
    assert 0.0 < gp < 1.0 and float(r.cost["lost_repair"]) > 0.0  # the NVL72 site's repairs
    off = [
        dict(x, reliability={"preset": "none"}) for x in (dict(h, share=448), dict(g, share=576))
    ]
    r_off = sites.evaluate_sites(_job(off, model="llama3-70b", batch=1024))
    assert float(r_off.cost["goodput"]) == 1.0
    np.testing.assert_allclose(
        float(r.cost["time_to_train_days"]) * gp,
        float(r_off.cost["time_to_train_days"]),
        rtol=1e-12,
    )
    with pytest.raises(SpecError, match=r"sites\[1\]\.system\.reliability\.enabled"):
        _job([off[0], dict(g, share=576)], model="llama3-70b", batch=1024)


def test_cli_sites_prints_the_table_and_json(capsys):
    """``codesign sites FILE --balance``: the balanced split is the library's, the JSON the
    same numbers."""
    from codesign.cli import main

    path = str(
        Path(__file__).resolve().parent.parent
        / "experiments"
        / "configs"
        / "llama3-70b-h100-gb200-sites.toml"
    )
    assert main(["sites", path, "--balance", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    job, info = sites.balance(sites.load_sites(path))
    assert d["balance"]["best_shares"] == info["best_shares"]
    assert d["step_time_s"] == pytest.approx(info["best_step_s"], rel=1e-12)
    assert [s["name"] for s in d["sites"]] == ["h100", "gb200"]
    assert main(["sites", path]) == 0
    out = capsys.readouterr().out
    assert "balance loss" in out and "gb200" in out
    assert main(["sites", path.replace("sites.toml", "nope.toml")]) == 2


def test_load_without_checks_keeps_proportional_shares_when_no_split_is_valid():
    """Strategies that admit no whole-micro-batch split (128 and 144 replicas for a batch of
    1,024) are an error at a checked load, and load unchecked with proportional shares, for a
    search such as best_strategies to replace them."""
    a = _site(n=1024, tiers=[H100[0], dict(H100[1], domain=1024)], tp=8, pp=1, dp=128)
    b = _site("gb200", 1152, [GB200[0], dict(GB200[1], domain=1152)], tp=8, pp=1, dp=144)
    with pytest.raises(SpecError, match="sites.share"):
        _job([a, b], batch=1024)
    job = _job([a, b], batch=1024, check=False)
    np.testing.assert_allclose(
        [float(s.share) for s in job.sites], [1024 * 128 / 272, 1024 * 144 / 272]
    )


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
def test_checked_sites_compile_only_the_parts_the_model_needs(model):
    """``evaluate_sites`` trims ``Model.parts`` to what the job's model needs (as
    ``codesign.evaluate`` does): every report leaf equals the untrimmed program's, and a
    dense model's program has no MoE terms."""
    from codesign import workload

    tiers = [H100[0], dict(H100[1], domain=64)]
    job = _job(
        [
            _site(n=64, tiers=tiers, name="a", tp=8, pp=1, dp=8),
            _site(n=64, tiers=tiers, name="b", tp=8, pp=1, dp=8),
        ],
        model=model,
    )
    trimmed = workload.with_parts(job.model)
    assert trimmed.parts is not None and ("moe" in trimmed.parts) == (model == "mixtral-8x7b")
    assert job.model.parts is None
    a = sites.evaluate_sites(job)
    b = jit(sites.evaluate_sites_unchecked)(job)  # parts=None: every part
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "model, search",
    [
        ("llama3-8b", False),
        pytest.param("llama3-8b", True, marks=pytest.mark.slow),
        pytest.param("mixtral-8x7b", True, marks=pytest.mark.slow),
    ],
)
def test_balance_and_search_compile_only_the_parts_the_model_needs(model, search):
    """``balance`` and ``best_strategies`` evaluate with ``Model.parts`` trimmed to what the
    job's model needs: their answers equal those of the same job listing every part (nothing
    to trim), and the job they return keeps its own ``parts``."""
    from codesign import workload

    tiers = [H100[0], dict(H100[1], domain=64)]
    job = _job(
        [
            _site(n=64, tiers=tiers, name="a", tp=8, pp=1, dp=8),
            _site("gb200", 64, [GB200[0], dict(GB200[1], domain=64)], name="b", tp=8, pp=1, dp=8),
        ],
        model=model,
    )
    every = sites._spec._replace(job, model=job.model.replace(parts=workload.MODEL_PARTS))
    grid = sites.strategy_grid(
        tp=(4, 8), pp=(1, 2), microbatch=(1,), recompute=("none",), zero=(1,)
    )
    runs = (sites.balance, lambda j: sites.best_strategies(j, grid)) if search else (sites.balance,)
    for run in runs:
        (ja, a), (jb, b) = run(job), run(every)
        assert ja.model.parts is None and jb.model.parts == workload.MODEL_PARTS
        assert a.keys() == b.keys()
        assert a.get("strategies") == b.get("strategies")  # best_strategies' winning tables
        for k in a.keys() - {"strategies"}:
            np.testing.assert_allclose(
                np.asarray(a[k], dtype=float), np.asarray(b[k], dtype=float), rtol=1e-12
            )
