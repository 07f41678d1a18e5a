"""The optional parts of a layer as a static switch (``Model.parts``).

A model without MoE, MLA, Mamba or multi-token-prediction layers leaves their terms out of
the compiled step (:func:`codesign.workload.has_part`).  Left out, a part must change no
number: each of its terms is what it is with the part's fields at zero.  These tests compare
the step with every part compiled (``parts=None``) against the step with the parts the model
needs, leaf by leaf of the report, exact and relaxed, on every model preset under several
strategies and on the published runs; and they check the switch's bookkeeping (inference,
sweep axes, input errors).
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from conftest import small_doc

import codesign as cd
from codesign._compile import jit
from codesign.search import sweep
from codesign.search._grid import set_leaf, specs_of
from codesign.specs import MODEL_PARTS, PART_FIELDS
from codesign.step import evaluate_unchecked
from codesign.workload import has_part, needed_parts, with_parts

_jit = jit(evaluate_unchecked)
RELAXED = cd.Smoothing(exact=False, tau=0.05)

STRATEGIES = [
    {"tp": 2, "pp": 4, "cp": 2, "dp": 4},
    {
        "tp": 4,
        "pp": 2,
        "dp": 8,
        "recompute": "selective",
        "recompute_modules": ["core_attn", "mlp", "moe_act", "mla_up_proj"],
        "offload_activations": 0.5,
    },
    {"tp": 1, "pp": 8, "dp": 8, "interleave": 2, "recompute": "full", "zero": 3},
]
"""Layouts on 64 H100 that touch every term: tensor, pipeline (interleaved), context and
data parallelism, selective and full recomputation, offloading, ZeRO-3."""

MODELS = [
    "llama3-8b",
    pytest.param("gpt3-175b", marks=pytest.mark.slow),
    "mixtral-8x7b",
    pytest.param("gpt-oss-120b", marks=pytest.mark.slow),
    "deepseek-v3",
    "nemotron-h-8b",
    pytest.param("nemotron-h-56b", marks=pytest.mark.slow),
]
"""Every kind of model: dense, MoE, MoE with MLA and MTP, hybrid Mamba (the fast tier has one
of each)."""

CASES = [(0, "bf16", cd.EXACT), (0, "bf16", RELAXED), (1, "fp8", cd.EXACT), (2, "bf16", cd.EXACT)]
"""(strategy, precision, smoothing): FP8 with 16-bit first and last layers, the relaxed
model on one strategy (each precision and smoothing is a program of its own to compile)."""


def _config(model: str, strategy: dict, precision: str = "bf16"):
    doc = small_doc(**strategy)
    doc["model"] = {"preset": model}
    doc["training"]["precision"] = precision
    if precision != "bf16":
        doc["training"].update(bf16_layers_start=1, bf16_layers_end=1)
    moe = model in ("mixtral-8x7b", "gpt-oss-120b", "deepseek-v3")
    if moe:
        doc["strategy"]["ep"] = 2
    if "recompute_modules" in strategy:  # the modules the model has (the rules check them)
        drop = {"moe_act"} if not moe else {"mlp"} if model != "deepseek-v3" else set()
        drop |= {"mla_up_proj"} if model != "deepseek-v3" else set()
        doc["strategy"]["recompute_modules"] = [
            x for x in strategy["recompute_modules"] if x not in drop
        ]
    if model == "deepseek-v3":
        doc["model"]["mtp_layers"] = 1
    if model == "gpt-oss-120b" and strategy.get("interleave", 1) > 1:
        # 36 layers on 8 stages: 5 or 4 a stage would split the busiest unevenly in 2 chunks
        # (codesign.pipeline: equal chunks where the load is); 6 + 6 x 4 + 6 does not.
        doc["strategy"].update(pp_first_layers=6, pp_last_layers=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cd.load_run_dict(doc)


def _assert_same(a: cd.Report, b: cd.Report, what) -> None:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), what
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(
            np.asarray(y, float), np.asarray(x, float), rtol=1e-12, err_msg=str(what)
        )


@pytest.mark.parametrize("model", MODELS)
def test_leaving_out_a_part_changes_no_number(model):
    seen = set()
    for i, precision, sm in CASES:
        m, tr, sy, st, eff = _config(model, STRATEGIES[i], precision).specs()
        assert m.parts is None  # a loaded run keeps every part
        trimmed = with_parts(m)
        seen.add(trimmed.parts)
        _assert_same(_jit(m, tr, sy, st, eff, sm), _jit(trimmed, tr, sy, st, eff, sm), (model, i))
    assert len(seen) == 1
    expected = {
        "mixtral-8x7b": ("moe",),
        "gpt-oss-120b": ("moe",),
        "deepseek-v3": ("moe", "mla", "mtp"),
        "nemotron-h-8b": ("mamba",),
        "nemotron-h-56b": ("mamba",),
    }
    assert seen == {expected.get(model, ())}


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
def test_gradients_are_the_same_without_the_parts_left_out(model):
    """The sensitivities (gradients of the relaxed step time with respect to every hardware
    number) of a dense and an MoE model."""
    m, tr, sy, st, eff = _config(model, STRATEGIES[0]).specs()

    def grads(mm):
        return jax.grad(lambda s: evaluate_unchecked(mm, tr, s, st, eff, RELAXED).step_time_s)(sy)

    g_all, g_trim = grads(m), grads(with_parts(m))
    for x, y in zip(jax.tree.leaves(g_all), jax.tree.leaves(g_trim), strict=True):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-10)


@pytest.mark.slow
def test_published_runs_are_the_same_without_the_parts_left_out():
    from codesign.calibration._rows import load_all_rows, row_to_config

    kinds: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = load_all_rows()
        for row in rows:
            cfg, _ = row_to_config(row)
            if cfg is None:
                continue
            m, tr, sy, st, eff = cfg.specs()
            trimmed = with_parts(m)
            kinds[trimmed.parts] = kinds.get(trimmed.parts, 0) + 1
            _assert_same(_jit(m, tr, sy, st, eff, cd.EXACT), cd.evaluate(*cfg.specs()), row["id"])
    assert sum(kinds.values()) >= 380  # every expressible row: 384 of the three files
    assert {(), ("moe",), ("moe", "mla", "mtp")} <= set(kinds)


def test_needed_parts_from_concrete_values():
    m = cd.config.model_preset("llama3-8b")
    assert m.parts is None and has_part(m, "moe")  # None: every part
    assert needed_parts(m) == ()
    assert with_parts(m).parts == () and not has_part(with_parts(m), "moe")
    # arrays count where any element is nonzero; each field of a part is enough
    for part, fields in PART_FIELDS.items():
        for f in fields:
            assert needed_parts(m.replace(**{f: np.array([0.0, 1.0])})) == (part,), f
    # extra parts (a sweep's axes) join, in MODEL_PARTS order; parts already listed stay
    assert with_parts(m, ("mtp", "moe")).parts == ("moe", "mtp")
    assert with_parts(m.replace(parts=("mla",))).parts == ("mla",)
    # traced values: nothing can be left out
    seen = []
    jax.jit(lambda layers: seen.append(needed_parts(m.replace(moe_layers=layers))) or layers)(1.0)
    assert seen == [None]
    assert with_parts(m.replace(moe_layers=jax.numpy.zeros(())), ()).parts == ()


def test_evaluate_leaves_out_what_the_model_does_not_need():
    """:func:`codesign.evaluate` compiles a dense model without the optional parts (the jaxpr
    of the step is smaller) and with them gives the same report."""
    cfg = _config("llama3-8b", STRATEGIES[0])
    m, tr, sy, st, eff = cfg.specs()

    def eqns(model):
        jaxpr = jax.make_jaxpr(lambda s: evaluate_unchecked(model, tr, s, st, eff))(sy)
        return len(jaxpr.eqns)

    assert eqns(with_parts(m)) < 0.8 * eqns(m)
    _assert_same(_jit(m, tr, sy, st, eff, cd.EXACT), cd.evaluate(*cfg.specs()), "evaluate")


def test_a_sweep_axis_on_a_part_field_brings_the_part_in():
    """A dense base model swept over ``mtp_layers`` and ``moe_*`` fields: the axis adds the part
    to the compiled program, and each point equals the model evaluated alone."""
    cfg = _config("llama3-8b", STRATEGIES[0])
    specs = specs_of(cfg)
    assert specs["model"].parts == ()
    assert set_leaf(specs, "model.mtp_layers", 1.0)["model"].parts == ("mtp",)
    assert set_leaf(specs, "model.hidden", 1.0)["model"].parts == ()
    res = sweep(cfg, {"model.mtp_layers": [0, 1, 2]}, top_k=3, progress=False)
    assert res.num_feasible == 3
    times = {}
    for j in range(3):
        k = float(res.point(j)["model.mtp_layers"])
        alone = cd.evaluate(cfg.model.replace(mtp_layers=k), *cfg.specs()[1:])
        np.testing.assert_allclose(res.best_values[j], float(alone.step_time_s), rtol=1e-12)
        times[k] = res.best_values[j]
    assert times[0.0] < times[1.0] < times[2.0]


def test_config_at_keeps_the_parts_as_given():
    from codesign.search._grid import config_at

    cfg = _config("llama3-8b", STRATEGIES[0])
    assert config_at(cfg, {"strategy.tp": 4}).model.parts is None


def test_parts_errors_name_the_field():
    m = cd.config.model_preset("mixtral-8x7b")
    with pytest.raises(cd.SpecError) as err:
        cd.specs.check_model(m.replace(parts=("mla",)))
    assert err.value.field == "model.moe_experts"
    assert "leaves out 'moe'" in str(err.value)
    with pytest.raises(cd.SpecError) as err:
        cd.specs.check_model(m.replace(parts=("moe", "rnn")))
    assert err.value.field == "model.parts"
    for ok in (None, ("moe",), MODEL_PARTS):
        cd.specs.check_model(m.replace(parts=ok))
    # not a run-file key
    doc = small_doc()
    doc["model"]["parts"] = ["moe"]
    with pytest.raises(cd.SpecError) as err:
        cd.load_run_dict(doc)
    assert err.value.field == "model.parts"
