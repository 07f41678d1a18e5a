"""The rules: the host check and the traced mask agree, and each rule is what it says.

:func:`codesign.rules.check_strategy` (concrete values, raises a SpecError naming the field)
and :func:`codesign.rules.valid_mask` (traced, batched) are built from the same predicates;
this property test draws random configurations, many of them invalid, and checks that the
host check passes exactly where the mask is true, point by point and in one vmapped batch.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import small_config
from hypothesis import given, settings
from hypothesis import strategies as hs

import codesign as cd
from codesign import rules
from codesign._compile import jit

DEGREES = [1, 2, 3, 4, 6, 8, 16, 32]


def _config(tp, pp, dp, cp, ep, mb, v, n, domain, moe):
    base = small_config()
    m = base.model
    if moe:
        m = dataclasses.replace(
            m, moe_experts=8.0, moe_top_k=2.0, moe_ffn_hidden=1024.0, moe_layers=m.layers
        )
    tiers = (dataclasses.replace(base.system.tiers[0], domain=float(domain)), base.system.tiers[1])
    tiers = (tiers[0], dataclasses.replace(tiers[1], domain=float(max(n, domain))))
    sy = dataclasses.replace(base.system, num_accelerators=float(n), tiers=tiers)
    st = dataclasses.replace(
        base.strategy,
        tp=float(tp),
        pp=float(pp),
        dp=float(dp),
        cp=float(cp),
        ep=float(ep),
        microbatch=float(mb),
        interleave=float(v),
    )
    return m, base.training, sy, st


configs = hs.tuples(
    *(hs.sampled_from(DEGREES) for _ in range(7)),
    hs.sampled_from([16, 32, 64, 96, 128, 256]),
    hs.sampled_from([4, 8, 12, 72]),
    hs.booleans(),
)


def _host_ok(m, tr, sy, st) -> bool:
    try:
        rules.check_strategy(st, m, tr, sy)
    except cd.SpecError:
        return False
    return True


def _mask(m, tr, sy, st) -> bool:
    return bool(rules.valid_mask({"model": m, "training": tr, "system": sy, "strategy": st}))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(configs)
def test_host_check_and_traced_mask_agree(c):
    m, tr, sy, st = _config(*c)
    assert _host_ok(m, tr, sy, st) == _mask(m, tr, sy, st)


def test_agreement_in_one_vmapped_batch():
    rng = np.random.default_rng(0)
    pts = []
    for _ in range(200):
        tp, pp, cp, ep, mb, v = (int(x) for x in rng.choice(DEGREES, 6))
        n = int(rng.choice([32, 64, 128]))
        dp = max(n // (tp * pp * cp), 1)  # often the derived degree, so many points are valid
        pts.append((tp, pp, dp, cp, ep, mb, v, n, 8, bool(rng.integers(2))))
    cfgs = [_config(*p) for p in pts]
    host = np.array([_host_ok(*c) for c in cfgs])
    batch = jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *cfgs)
    mask = jit(
        jax.vmap(
            lambda m, tr, sy, st: rules.valid_mask(
                {"model": m, "training": tr, "system": sy, "strategy": st}
            )
        )
    )(*batch)
    assert host.any() and not host.all(), "the sample should hold valid and invalid points"
    np.testing.assert_array_equal(host, np.asarray(mask))


@pytest.mark.parametrize(
    "change,field",
    [
        ({"tp": 64, "pp": 1, "dp": 1}, "strategy.tp"),  # 64 does not divide the 32 heads
        ({"pp": 3, "dp": 8, "tp": 2}, "strategy.tp*pp*dp*cp"),  # 2*3*8 = 48 != 64
        ({"interleave": 2, "pp": 1, "dp": 32}, "strategy.interleave"),
        ({"microbatch": 3}, "training.global_batch"),  # 512 is no multiple of 16*3
        ({"ep": 2}, "strategy.ep"),  # a dense model
    ],
)
def test_each_rule_names_its_field(change, field):
    cfg = small_config()
    st = dataclasses.replace(cfg.strategy, **{k: float(v) for k, v in change.items()})
    with pytest.raises(cd.SpecError) as e:
        rules.check_strategy(st, cfg.model, cfg.training, cfg.system)
    assert e.value.field == field
    assert not _mask(cfg.model, cfg.training, cfg.system, st)


def test_scale_up_domain_must_tile_the_cluster():
    m, tr, sy, st = _config(2, 2, 16, 1, 1, 1, 1, 64, 12, False)
    with pytest.raises(cd.SpecError) as e:
        rules.check_strategy(st, m, tr, sy)
    assert e.value.field == "system.tiers[0].domain"
    m, tr, sy, st = _config(2, 2, 16, 1, 1, 1, 1, 64, 72, False)  # one partly used NVL72 domain
    assert _host_ok(m, tr, sy, st)


def test_derive_dp_and_sharding_fractions():
    assert float(rules.derive_dp(1024, 8, 16, 1, np)) == 8.0
    z = rules.zero_fractions(np.eye(4)[2])  # ZeRO-2: optimizer state and gradients sharded
    assert (z["optimizer"], z["gradients"], z["weights"]) == (1.0, 1.0, 0.0)
    st = dataclasses.replace(small_config().strategy, dp=8.0, cp=2.0, ep=4.0)
    dense, expert = rules.data_parallel_groups(st)
    assert (float(dense), float(expert)) == (16.0, 4.0)
    # 1000 dense and 400 expert parameters, fully sharded: 1000/16 + 400/4 per rank.
    assert float(rules.sharded(1000.0, 400.0, 1.0, st)) == pytest.approx(1000 / 16 + 400 / 4)


def test_interleaving_needs_at_least_pp_microbatches():
    """Megatron-Core's interleaved schedule runs micro-batches in groups of ``pp`` to
    ``num_microbatches`` (``microbatch_group_size_per_vp_stage``), so it needs at least ``pp``
    of them a step; the plain 1F1B schedule runs any number."""
    cfg = small_config()
    assert cfg.training.global_batch == 512

    def st(v, mb):  # 64 accelerators: tp 1, pp 4, dp 16
        return dataclasses.replace(
            cfg.strategy, tp=1.0, pp=4.0, dp=16.0, cp=1.0, interleave=float(v), microbatch=float(mb)
        )

    args = (cfg.model, cfg.training, cfg.system)
    assert _host_ok(*args, st(2, 8)) and _mask(*args, st(2, 8))  # 512 / (16 * 8) = 4 = pp
    assert _host_ok(*args, st(1, 32)) and _mask(*args, st(1, 32))  # 1 micro-batch, no interleave
    with pytest.raises(cd.SpecError) as e:
        rules.check_strategy(st(2, 16), *args)  # 2 micro-batches < pp = 4
    assert e.value.field == "strategy.interleave"
    assert "fewer micro-batches than pp = 4" in str(e.value)
    assert not _mask(*args, st(2, 16))


def test_traced_integer_test_stops_where_float64_integers_stop():
    """The mask's integer test has the host check's bound (codesign.checks.MAX_COUNT), so the
    two agree beyond it too."""
    from codesign.checks import MAX_COUNT

    x = jnp.array([1.0, MAX_COUNT, MAX_COUNT + 2, 1e300, 1.5, 0.0])
    np.testing.assert_array_equal(
        np.asarray(rules._integer(jnp, x)), [True, True, False, False, False, False]
    )
    for v in (MAX_COUNT, MAX_COUNT + 2):
        host = True
        try:
            cd.checks.positive("x", v, integer=True)
        except cd.SpecError:
            host = False
        assert host == bool(rules._integer(jnp, jnp.asarray(v)))
