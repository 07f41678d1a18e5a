"""Hardware axes of co-design problems (issue 12): accelerator knobs, tier latency,
oversubscription and scale-up domain, the platform and placement choices, and the caps
vector of constraints (deadline, network capex, accelerator count, minimum MFU).

* the relaxed model meets the exact one on the grid as the temperature goes to 0;
* its gradients are finite everywhere (soft categoricals included);
* the optimizer's soft platform choice rounds to the sweep's best platform (slow);
* constraints are never violated by a reported design, and bind where they should;
* the sweep and the exact evaluator agree point by point; jit == eager at a non-listed part;
* bad problem files raise a :class:`~codesign.specs.SpecError` naming the field.
"""

from __future__ import annotations

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import codesign as cd
from codesign._compile import jit
from codesign.rules import CONSTRAINTS
from codesign.search import (
    OBJECTIVES,
    ExactEvaluator,
    Settings,
    config_at,
    distributed_sweep,
    exact_objective,
    get_leaf,
    load_problem_dict,
    optimize,
    relax,
    sweep,
)
from codesign.specs import SpecError

H100, B200, GB200 = "h100-sxm5-80gb", "b200", "gb200"
LLAMA = {"model": {"preset": "llama3-8b"}, "training": {"global_batch": 512, "tokens": 1e11}}
PLACEMENTS = [["tp", "cp", "ep", "dp", "pp"], ["tp", "pp", "cp", "ep", "dp"]]
RECOMPUTE = ("none", "selective", "full")
ONE_HOT = 60.0
"""Logit gap of a (nearly) one-hot soft categorical: the other weights are e**-60 ~ 1e-26."""


def _doc(search: dict, objective: str = "step_time", n=None, **training):
    doc = copy.deepcopy(LLAMA)
    doc["training"].update(training)
    doc["system"] = {"accelerator": H100}
    if n is not None:
        doc["system"]["num_accelerators"] = n
    doc["objective"] = {"minimize": objective}
    doc["search"] = copy.deepcopy(search)
    return doc


def _platform_doc(platforms, objective, ns=(16, 32, 64), **training):
    """Llama 3 8B on 16-64 accelerators of a choice of platforms (2,592 points for 3)."""
    search = {
        "num_accelerators": list(ns),
        "tp": [1, 2, 4, 8],
        "pp": [1, 2, 4],
        "microbatch": [1, 2],
        "accelerator": list(platforms),
    }
    return _doc(search, objective, **training)


def _report(cfg) -> cd.Report:
    return cd.evaluate(*cfg.specs())


def _quantities(r) -> dict:
    """The constrained quantities of a report, by constraint name (MFU as itself)."""
    return {
        "capex_max_usd": float(r.cost["capex_usd"]),
        "power_max_kw": float(r.cost["power_kw"]),
        "network_capex_max_usd": float(r.cost["network_capex_usd"]),
        "time_to_train_max_days": float(r.cost["time_to_train_days"]),
        "mfu_min": float(r.mfu),
        "moe_dropped_fraction_max": float(r.moe_dropped_fraction),
    }


def _respects(pb, cfg) -> bool:
    """Whether the run ``cfg`` meets every constraint of ``pb`` (and fits in memory)."""
    r = _report(cfg)
    q = _quantities(r)
    ok = bool(r.fits) and float(cfg.system.num_accelerators) <= pb.num_accelerators_max
    for k in CONSTRAINTS:
        if k == "mfu_min":
            ok &= q[k] >= pb.mfu_min
        elif k != "num_accelerators_max":
            ok &= q[k] <= getattr(pb, k)
    return ok


# --------------------------------------------------------------------------------------
# 1. Relaxed -> exact on the grid, for the new axes
# --------------------------------------------------------------------------------------

RELAX_SEARCH = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4],
    "microbatch": [1, 2, 4],
    "hardware": {
        "hbm_gb": [40, 80, 120, 160],
        "hbm_tbps": [2, 3, 4, 6],
        "peak_tflops": [500, 800, 1500, 2000],
        "host_link_gbps": [32, 64, 128, 256],
    },
    "tiers": [
        {"index": 0, "domain": [4, 8, 16, 32], "latency_us": [0.5, 1, 2, 4]},
        {"index": 1, "latency_us": [2, 5, 10, 20], "oversubscription": [1, 2, 4]},
    ],
    "accelerator": [H100, B200],
    "placement": PLACEMENTS,
}


@pytest.fixture(scope="module")
def relax_problem():
    pb = load_problem_dict(_doc(RELAX_SEARCH, "cost_to_train", n=64))
    return pb, relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)


def _u(value, grid) -> float:
    """The unconstrained parameter whose sigmoid lands on ``value`` in the log2 box of ``grid``."""
    lo, hi = math.log2(min(grid)), math.log2(max(grid))
    f = (math.log2(value) - lo) / (hi - lo)
    assert 0.0 < f < 1.0, "interior grid values only (the box ends are limits of the sigmoid)"
    return math.log(f / (1.0 - f))


def _f(x) -> jnp.ndarray:
    """A float array that is not weakly typed (as ``init_params`` makes them): no recompile."""
    return jnp.asarray(x, dtype=float)


def _one_hot(i: int, n: int) -> jnp.ndarray:
    return _f([0.0 if j == i else -ONE_HOT for j in range(n)])


def _grid_params(pb, space, d: dict):
    """Relaxed parameters of grid point ``d`` and the same point as sweep axis values."""
    n = float(pb.cfg.system.num_accelerators)
    tp, pp = d["tp"], d["pp"]
    dp = n / (tp * pp)
    assert space.softmax_names == ("tp", "pp", "dp")
    hv = pb.hardware_values
    params = {
        # z = log2(N) softmax(deg): logits log(log2 degree) give the degrees exactly.
        "deg": jnp.log(_f([math.log2(tp), math.log2(pp), math.log2(dp)])),
        "mb": _f(_u(d["mb"], pb.strategy_values["microbatch"])),
        "recompute": _one_hot(RECOMPUTE.index(d["recompute"]), 3),
        "zero": _one_hot(d["zero"], 4),
        "hw": _f([_u(d["hw"][p], hv[p]) for p in space.free_hw]),
        "dom": _f(_u(d["domain"], hv["system.tiers[0].domain"])),
        "platform": _one_hot(d["platform"], len(pb.platforms)),
        "placement": _one_hot(d["placement"], len(pb.placements)),
    }
    assert set(params) == set(relax.init_params(jax.random.key(0), space))
    point = {
        "system.platform": pb.platforms[d["platform"]],
        "system.tiers[0].domain": float(d["domain"]),
        "strategy.tp": float(tp),
        "strategy.pp": float(pp),
        "strategy.microbatch": float(d["mb"]),
        "strategy.recompute": d["recompute"],
        "strategy.zero": d["zero"],
        "strategy.placement": list(pb.placements[d["placement"]]),
        **{p: float(v) for p, v in d["hw"].items()},
    }
    return params, point


GRID_POINTS = [
    dict(
        tp=2,
        pp=2,
        mb=2,
        recompute="selective",
        zero=1,
        platform=1,
        placement=1,
        domain=16,
        hw={
            "system.accelerator.hbm_gb": 80,
            "system.accelerator.hbm_tbps": 4,
            "system.accelerator.peak_tflops": 1500,
            "system.accelerator.host_link_gbps": 64,
            "system.tiers[0].latency_us": 1,
            "system.tiers[1].latency_us": 5,
            "system.tiers[1].oversubscription": 2,
        },
    ),
    dict(
        tp=4,
        pp=2,
        mb=2,
        recompute="full",
        zero=3,
        platform=0,
        placement=0,
        domain=8,
        hw={
            "system.accelerator.hbm_gb": 120,
            "system.accelerator.hbm_tbps": 3,
            "system.accelerator.peak_tflops": 800,
            "system.accelerator.host_link_gbps": 128,
            "system.tiers[0].latency_us": 2,
            "system.tiers[1].latency_us": 10,
            "system.tiers[1].oversubscription": 2,
        },
    ),
]
CHECKED_OBJECTIVES = ("step_time", "cost_to_train", "energy_to_train", "time_to_train")


def _loss_and_objectives(params, tau, rho, space, box, base):
    """``relax.loss`` with the relaxed objectives of :data:`CHECKED_OBJECTIVES` as aux."""
    r = relax.loss_terms(params, tau, space, box, base)["report"]
    aux = jnp.stack([OBJECTIVES[o](r) for o in CHECKED_OBJECTIVES])
    return relax.loss(params, tau, rho, space, box, base), aux


# One compiled program for tests 1 and 2 (the space is static; caps and bounds are data).
_value_and_grad = jit(jax.value_and_grad(_loss_and_objectives, has_aux=True), static_argnums=3)


def test_relaxed_meets_exact_on_grid_points_of_new_axes(relax_problem):
    """At a grid point (continuous knobs on grid values, soft categoricals one-hot) the
    relaxed objectives approach the exact ones linearly in the temperature: the hardware
    knobs, latencies, oversubscription, domain, platform and placement are wired the same
    way in both models, and priced the same way at the margin."""
    pb, space, box, base = relax_problem
    assert space.free_hw == pb.continuous_paths and len(space.free_hw) == 7
    assert space.free_domain and space.num_platforms == 2 and space.num_placements == 2
    exacts = []
    for d in GRID_POINTS:
        params, point = _grid_params(pb, space, d)
        # The relaxed design sits on the grid point (to rounding).
        s = relax.to_specs(params, space, box, base)
        for path, v in d["hw"].items():
            assert float(get_leaf(s, path)) == pytest.approx(v, rel=1e-12), path
        sy = s["system"]
        assert float(sy.tiers[0].domain) == pytest.approx(d["domain"], rel=1e-12)
        listed = pb.platforms[d["platform"]].table["accelerator"]
        assert float(sy.accelerator.price_usd) == pytest.approx(float(listed.price_usd))
        assert float(sy.accelerator.ref_hbm_gb) == pytest.approx(float(listed.hbm_gb))
        np.testing.assert_allclose(
            np.asarray(s["strategy"].placement),
            cd.specs.placement_ranks(pb.placements[d["placement"]]),
            atol=1e-12,
        )
        cfg = config_at(pb.cfg, point)
        exact = np.array([exact_objective(cfg, o) for o in CHECKED_OBJECTIVES])
        exacts.append(exact)
        errs = {}
        for tau in (0.1, 1e-2, 1e-3, 1e-4):
            (_, aux), _ = _value_and_grad(params, tau, 1.0, space, box, base)
            relaxed = np.asarray(aux)
            errs[tau] = np.abs(relaxed / exact - 1.0)
            assert np.all(errs[tau] <= tau), (tau, errs[tau])
        # Shrinking with the temperature: three decades buy at least two.
        assert np.all(errs[1e-4] <= 1e-2 * errs[0.1] + 1e-12), errs
        assert np.all(errs[1e-4] <= 1e-3), errs
    # The two points differ in every objective: the axes matter.
    assert np.all(np.abs(exacts[0] / exacts[1] - 1.0) > 0.05)


# --------------------------------------------------------------------------------------
# 2. Finite gradients everywhere
# --------------------------------------------------------------------------------------


def test_gradients_finite_with_hardware_axes(relax_problem):
    """Random points inside and far beyond the box (saturated sigmoids, one-hot softmaxes),
    several seeds and temperatures, tight caps (every penalty active): finite loss and
    gradients for every parameter, and every parameter gets a gradient somewhere."""
    pb0 = relax_problem[0]
    pb = pb0.with_values(
        capex_max_usd=5e5,
        power_max_kw=20.0,
        network_capex_max_usd=1e5,
        time_to_train_max_days=0.5,
        num_accelerators_max=32,
        mfu_min=0.6,
        moe_dropped_fraction_max=0.01,  # a dense model: 0 dropped, never active
    )
    space, box, base = relax.space_of(pb), relax.box_of(pb), relax.base_of(pb)
    assert space == relax_problem[1]  # caps are data: no new program
    assert np.all(np.isfinite(np.asarray(box.caps)))
    taus = np.geomspace(0.5, 1e-4, 8)
    grads, n = [], 0
    for seed in range(3):
        for scale in (0.5, 4.0, 30.0):
            for j, k in enumerate(jax.random.split(jax.random.key(seed), 4)):
                p = relax.init_params(k, space, scale=scale)
                tau, rho = float(taus[n % len(taus)]), 10.0 ** (j % 4)
                (val, aux), g = _value_and_grad(p, tau, rho, space, box, base)
                n += 1
                assert bool(jnp.isfinite(val)) and bool(jnp.all(jnp.isfinite(aux))), (seed, scale)
                for name, leaf in g.items():
                    assert bool(jnp.all(jnp.isfinite(leaf))), (name, seed, scale, j)
                grads.append(g)
    g = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *grads)
    assert {"hw", "dom", "platform", "placement", "deg", "mb", "recompute", "zero"} == set(g)
    for name, leaf in g.items():
        assert float(jnp.max(jnp.abs(leaf))) > 1e-8, name
    # Each continuous knob moves the loss somewhere.
    assert bool(jnp.all(jnp.max(jnp.abs(g["hw"]), axis=0) > 1e-8))


# --------------------------------------------------------------------------------------
# 3. The soft platform choice rounds to the exact best platform (slow: one compile each)
# --------------------------------------------------------------------------------------

OPT_SETTINGS = Settings(steps=100, starts=12)
"""One settings object for every optimizer test (compiled programs are cached by it)."""

PLATFORM_CASES = [
    # (platforms, objective): the sweep decides which platform is best
    ([H100, B200, GB200], "cost_to_train"),  # gb200 beats b200 by 2 %
    ([H100, B200, GB200], "energy_to_train"),  # b200 beats gb200 by 10 %
    (["a100-sxm4-80gb", H100, "mi300x"], "cost_to_train"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("platforms", "objective"),
    PLATFORM_CASES,
    ids=[f"{'-'.join(p)}-{o}" for p, o in PLATFORM_CASES],
)
def test_soft_platform_choice_rounds_to_exact_best(platforms, objective):
    pb = load_problem_dict(_platform_doc(platforms, objective))
    assert pb.exhaustive_axes()["system.platform"] == platforms
    sw = distributed_sweep(pb, progress=False)
    best = sw.best()
    # Not a trivial choice: every platform has feasible points, and they differ by > 1 %.
    prof = sw.profiles["system.platform"]
    assert np.all(np.isfinite(prof)) and np.sort(prof)[1] > 1.01 * np.sort(prof)[0]
    res = optimize(pb, OPT_SETTINGS, seed=0)
    assert res.point["system.platform"].name == best["system.platform"].name
    assert res.exact_objective == pytest.approx(float(sw.best_values[0]), rel=1e-9)
    assert res.config.names["accelerator"] == best["system.platform"].name
    assert exact_objective(res.config, objective) == pytest.approx(res.exact_objective, rel=1e-12)
    w = res.relaxed_point["platform_weights"]
    assert len(w) == len(platforms) and sum(w) == pytest.approx(1.0)


# --------------------------------------------------------------------------------------
# 4. Deadlines
# --------------------------------------------------------------------------------------


def _deadline_problem():
    """Cost to train 1e12 tokens of Llama 3 8B on 16-64 of three platforms: the cheapest
    design is the smallest cluster, a deadline asks for a larger one."""
    return load_problem_dict(_platform_doc([H100, B200, GB200], "cost_to_train", tokens=1e12))


def _days(cfg) -> float:
    return float(_report(cfg).cost["time_to_train_days"])


@pytest.fixture(scope="module")
def deadline_sweeps():
    pb = _deadline_problem()
    sw0 = distributed_sweep(pb, progress=False)
    t0 = _days(sw0.config(0, pb.cfg))
    tight = pb.with_values(time_to_train_max_days=0.6 * t0)
    never = pb.with_values(time_to_train_max_days=0.01 * t0)
    return {
        "free": (pb, sw0, t0),
        "tight": (tight, distributed_sweep(tight, progress=False)),
        "never": (never, distributed_sweep(never, progress=False)),
    }


def test_sweep_never_reports_a_design_past_the_deadline(deadline_sweeps):
    pb, sw0, t0 = deadline_sweeps["free"]
    tight, sw = deadline_sweeps["tight"]
    deadline = tight.time_to_train_max_days
    assert deadline == pytest.approx(0.6 * t0) and t0 > deadline
    # The deadline binds: it excludes feasible points (the unconstrained best among them)
    # and the answer costs more.
    assert 0 < sw.num_feasible < sw0.num_feasible
    assert float(sw.best_values[0]) > float(sw0.best_values[0]) * (1 + 1e-9)
    for i in range(len(sw.best_values)):
        cfg = sw.config(i, tight.cfg)
        assert _days(cfg) <= deadline, i
        assert _respects(tight, cfg)
        assert exact_objective(cfg, "cost_to_train") == pytest.approx(
            float(sw.best_values[i]), rel=1e-12
        )
    assert float(sw.best()["system.num_accelerators"]) > float(
        sw0.best()["system.num_accelerators"]
    )


def test_unmeetable_deadline_is_an_empty_sweep(deadline_sweeps):
    never, sw = deadline_sweeps["never"]
    assert sw.num_valid > 0 and sw.num_feasible == 0
    assert len(sw.best_values) == 0 and len(sw.best_indices) == 0
    assert np.all(np.isinf(sw.profiles["system.platform"]))


@pytest.mark.slow
def test_optimizer_never_reports_a_design_past_the_deadline(deadline_sweeps):
    tight, sw = deadline_sweeps["tight"]
    res = optimize(tight, OPT_SETTINGS, seed=0)
    assert res.config is not None and math.isfinite(res.exact_objective)
    assert _days(res.config) <= tight.time_to_train_max_days
    assert _respects(tight, res.config)
    assert res.exact_objective == pytest.approx(float(sw.best_values[0]), rel=1e-9)
    never, _ = deadline_sweeps["never"]
    res = optimize(never, OPT_SETTINGS, seed=0)
    assert math.isinf(res.exact_objective) and res.config is None and res.point == {}
    # The diagnosis names the deadline as what excluded the grid.
    diag = distributed_sweep(never, progress=False, diagnose=True)
    assert diag.counts["fits"] > 0 and diag.counts["within_deadline"] == 0
    assert diag.counts["within_capex"] == diag.counts["valid"]


# --------------------------------------------------------------------------------------
# 5. Network capex, accelerator count, minimum MFU
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def step_problem():
    """Step time of Llama 3 8B on 16-64 of three platforms: the best is the largest
    cluster of the newest part, with the most expensive network."""
    pb = load_problem_dict(_platform_doc([H100, B200, GB200], "step_time"))
    sw0 = distributed_sweep(pb, progress=False)
    return pb, sw0, _report(sw0.config(0, pb.cfg))


@pytest.mark.parametrize("name", ["network_capex_max_usd", "num_accelerators_max", "mfu_min"])
def test_sweep_respects_each_constraint(step_problem, name):
    pb, sw0, r0 = step_problem
    n0 = float(sw0.best()["system.num_accelerators"])
    cap = {
        "network_capex_max_usd": 0.75 * float(r0.cost["network_capex_usd"]),
        "num_accelerators_max": n0 / 2,
        "mfu_min": float(r0.mfu) + 0.02,
    }[name]
    pbc = pb.with_values(**{name: cap})
    assert pbc.constraints[name] == cap
    # The unconstrained best breaks the cap.
    assert not _respects(pbc, sw0.config(0, pb.cfg))
    sw = distributed_sweep(pbc, progress=False)
    assert 0 < sw.num_feasible < sw0.num_feasible
    for i in range(len(sw.best_values)):
        cfg = sw.config(i, pbc.cfg)
        assert _respects(pbc, cfg), i
        r = _report(cfg)
        if name == "mfu_min":
            assert float(r.mfu) >= cap
        elif name == "num_accelerators_max":
            assert float(cfg.system.num_accelerators) <= cap
        else:
            assert float(r.cost["network_capex_usd"]) <= cap
    # The answer changes (the cap binds).
    assert float(sw.best_values[0]) > float(sw0.best_values[0]) * (1 + 1e-9)


# --------------------------------------------------------------------------------------
# 6. Sweep == exact evaluator; jit == eager at a non-listed part
# --------------------------------------------------------------------------------------

EQ_SEARCH = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2],
    "microbatch": [1, 2],
    "recompute": ["none", "full"],
    "zero": [1, 3],
    "hardware": {"hbm_gb": [40, 80, 120]},
    "tiers": [{"index": 0, "domain": [4, 8, 16]}],
    "accelerator": [H100, B200],
    "placement": PLACEMENTS,
}


@pytest.fixture(scope="module")
def eq_problem():
    pb = load_problem_dict(_doc(EQ_SEARCH, "cost_to_train", n=32))
    return pb, distributed_sweep(pb, top_k=pb.grid_size(), progress=False)


def test_sweep_matches_exact_evaluator_on_platform_hbm_domain_placement(eq_problem):
    pb, sw = eq_problem
    axes = pb.exhaustive_axes()
    for p in (
        "system.platform",
        "system.tiers[0].domain",
        "strategy.placement",
        "system.accelerator.hbm_gb",
    ):
        assert p in axes
    shape = tuple(len(v) for v in axes.values())
    assert pb.grid_size() == int(np.prod(shape)) == 2304
    # Every point, in a random order, through the exact evaluator.
    rng = np.random.default_rng(0)
    flat = rng.permutation(pb.grid_size())
    pts = [tuple(int(i) for i in t) for t in np.stack(np.unravel_index(flat, shape), axis=1)]
    ev = ExactEvaluator(pb)
    vals = np.empty(pb.grid_size())
    vals[flat] = ev(pts)
    feasible = np.isfinite(vals)
    assert sw.num_feasible == int(feasible.sum()) and 0 < sw.num_feasible < sw.num_valid
    # The sweep kept every feasible point (top_k = grid size): the same points, same values.
    assert set(int(i) for i in sw.best_indices) == set(np.nonzero(feasible)[0].tolist())
    np.testing.assert_allclose(sw.best_values, vals[sw.best_indices], rtol=1e-12)
    assert float(sw.best_values[0]) == float(np.min(vals))
    # Index tuples of the sweep's best points, evaluated again through the evaluator's memo
    # and through config_at + the checked model.
    best_pts = [
        tuple(int(i) for i in t)
        for t in np.stack(np.unravel_index(sw.best_indices[:5], shape), axis=1)
    ]
    np.testing.assert_array_equal(ev(best_pts), sw.best_values[:5])
    for i, p in enumerate(best_pts):
        assert ev.point(p) == sw.point(i)
        cfg = config_at(pb.cfg, sw.point(i))
        assert exact_objective(cfg, pb.objective) == pytest.approx(
            float(sw.best_values[i]), rel=1e-12
        )
    # Every searched axis changes the objective somewhere on the grid.
    v = vals.reshape(shape)
    for a, p in enumerate(axes):
        if len(axes[p]) == 1:  # cp = [1] is always listed
            continue
        moved = np.moveaxis(v, a, 0)
        both = np.isfinite(moved[0]) & np.isfinite(moved[-1])
        assert np.any(both & (moved[0] != moved[-1])), p


@pytest.mark.slow
def test_sweep_blocks_split_between_platform_and_hbm(eq_problem):
    """Small inner blocks (the platform and domain outer, HBM and placement inner): the
    same feasible points and values as the one-block sweep."""
    pb, sw = eq_problem
    small = sweep(
        pb.cfg,
        pb.exhaustive_axes(),
        objective=pb.objective,
        constraints=pb.constraints,
        top_k=pb.grid_size(),
        block_size=16,
        progress=False,
    )
    assert small.num_feasible == sw.num_feasible and small.num_valid == sw.num_valid
    a, b = np.argsort(sw.best_indices), np.argsort(small.best_indices)
    np.testing.assert_array_equal(sw.best_indices[a], small.best_indices[b])
    np.testing.assert_allclose(sw.best_values[a], small.best_values[b], rtol=1e-12)


@pytest.mark.slow
def test_optimizer_reaches_sweep_optimum_on_platform_hbm_domain_placement(eq_problem):
    """Rounding and local search over platform, HBM, domain and placement axes."""
    pb, sw = eq_problem
    res = optimize(pb, OPT_SETTINGS, seed=0)
    assert res.exact_objective == pytest.approx(float(sw.best_values[0]), rel=1e-9)
    assert res.num_exact_evals < sw.num_valid
    assert _respects(pb, res.config)
    for k, v in res.point.items():
        assert v in pb.exhaustive_axes()[k], k
    assert {"platform_weights", "placement_weights"} <= set(res.relaxed_point)


def test_jit_equals_eager_at_a_non_listed_hbm(eq_problem):
    pb, _ = eq_problem
    point = {
        "system.platform": pb.platforms[0],  # h100: 80 GB listed
        "system.tiers[0].domain": 16.0,
        "strategy.tp": 2.0,
        "strategy.pp": 2.0,
        "strategy.microbatch": 1.0,
        "strategy.recompute": "full",
        "strategy.zero": 1,
        "strategy.placement": PLACEMENTS[1],
        "system.accelerator.hbm_gb": 120.0,
    }
    cfg = config_at(pb.cfg, point)
    acc = cfg.system.accelerator
    assert float(acc.hbm_gb) == 120.0 and float(acc.ref_hbm_gb) == 80.0
    assert cfg.names["accelerator"] == H100
    r_jit = _report(cfg)  # codesign.evaluate: checked, then jit-compiled
    with jax.disable_jit():
        r_eager = cd.evaluate_unchecked(*cfg.specs())

    def numbers(r):
        q = _quantities(r)
        return np.array(
            [
                float(r.step_time_s),
                float(r.memory_gb["total"]),
                float(r.cost["cost_to_train_usd"]),
                float(r.cost["energy_to_train_mwh"]),
                *q.values(),
            ]
        )

    np.testing.assert_allclose(numbers(r_eager), numbers(r_jit), rtol=1e-12)
    # Priced at the margin: 40 GB more than the listed part, on every accelerator.
    listed = _report(config_at(pb.cfg, {**point, "system.accelerator.hbm_gb": 80.0}))
    n, pr, sy = float(cfg.system.num_accelerators), cfg.system.pricing, cfg.system
    assert float(pr.usd_per_hbm_gb) > 0 and float(pr.w_per_hbm_gb) > 0
    assert float(r_jit.cost["capex_usd"]) - float(listed.cost["capex_usd"]) == pytest.approx(
        n * float(pr.usd_per_hbm_gb) * 40.0, rel=1e-9
    )
    assert float(r_jit.cost["power_kw"]) - float(listed.cost["power_kw"]) == pytest.approx(
        n * float(pr.w_per_hbm_gb) * 40.0 * float(sy.pue) / 1e3, rel=1e-9
    )
    assert float(r_jit.cost["network_capex_usd"]) == float(listed.cost["network_capex_usd"])


# --------------------------------------------------------------------------------------
# 7. Bad input names the field
# --------------------------------------------------------------------------------------

_BAD = {
    "unknown hardware key": (
        {"search": {"hardware": {"hbm_size": [80, 160]}}},
        "search.hardware.hbm_size",
    ),
    "hardware not a table": ({"search": {"hardware": [80, 160]}}, "search.hardware"),
    "domain off tier 0": (
        {"search": {"tiers": [{"index": 1, "domain": [8, 16]}]}},
        "search.tiers[1].domain",
    ),
    "oversubscription below 1": (
        {"search": {"tiers": [{"index": 1, "oversubscription": [0.5, 1, 2]}]}},
        "search.tiers[1].oversubscription",
    ),
    "unknown tier field": (
        {"search": {"tiers": [{"index": 1, "latency_us": [1, 2], "latency": [3]}]}},
        "search.tiers[1].latency",
    ),
    "zero latency": (
        {"search": {"tiers": [{"index": 1, "latency_us": [0, 2]}]}},
        "search.tiers[1].latency_us",
    ),
    "fractional domain": (
        {"search": {"tiers": [{"index": 0, "domain": [4.5, 8]}]}},
        "search.tiers[0].domain",
    ),
    "unknown accelerator": ({"search": {"accelerator": [H100, "h900"]}}, "search.accelerator"),
    "accelerator not a name": ({"search": {"accelerator": [H100, 3]}}, "search.accelerator"),
    "no accelerators": ({"search": {"accelerator": []}}, "search.accelerator"),
    "placement not a list": ({"search": {"placement": "tp"}}, "search.placement"),
    "unknown constraint": ({"constraints": {"latency_max_us": 3}}, "constraints.latency_max_us"),
    "mfu_min = 1": ({"constraints": {"mfu_min": 1.0}}, "constraints.mfu_min"),
    "mfu_min above 1": ({"constraints": {"mfu_min": 1.5}}, "constraints.mfu_min"),
    "mfu_min negative": ({"constraints": {"mfu_min": -0.1}}, "constraints.mfu_min"),
    "dropped fraction zero": (
        {"constraints": {"moe_dropped_fraction_max": 0}},
        "constraints.moe_dropped_fraction_max",
    ),
    "deadline not a number": (
        {"constraints": {"time_to_train_max_days": "10"}},
        "constraints.time_to_train_max_days",
    ),
    "hardware in strategy mode": (
        {"search": {"mode": "strategy", "accelerator": [H100, B200]}},
        "search.mode",
    ),
}


def _bad_doc(change: dict) -> dict:
    doc = _doc({"tp": [1, 2]}, n=32)
    for table, v in change.items():
        doc.setdefault(table, {}).update(copy.deepcopy(v))
    return doc


@pytest.mark.parametrize("case", list(_BAD))
def test_bad_problem_names_the_field(case):
    change, field = _BAD[case]
    with pytest.raises(SpecError) as e:
        load_problem_dict(_bad_doc(change))
    assert e.value.field == field
    assert field in str(e.value)


@pytest.mark.parametrize(
    "placement",
    [
        [["tp", "cp", "ep", "dp", "pp"], ["tp", "dp", "pp"]],  # a dimension missing
        [["tp", "tp", "ep", "dp", "pp"]],  # a dimension twice
        ["tp", "cp", "ep", "dp", "pp"],  # one order, not a list of orders
    ],
)
def test_bad_placement_order_is_a_spec_error(placement):
    with pytest.raises(SpecError, match="permutation of|list of placement orders") as e:
        load_problem_dict(_bad_doc({"search": {"placement": placement}}))
    assert e.value.field.startswith("search.placement")


def test_bad_placement_order_names_the_search_field():
    with pytest.raises(SpecError) as e:
        load_problem_dict(_bad_doc({"search": {"placement": [["tp", "dp", "pp"]]}}))
    assert e.value.field.startswith("search.placement")
