"""The validation report's findings are computed from typed results, not parsed from text.

The committed validation result (``experiments/results/validation.json``) with its data set
rebuilt from the package's measured runs is the input: each finding's typed fact is checked
against the same figure computed directly from the result (or from the raw rows), and each
sentence is checked to state the fact's numbers.  Changing the result changes the sentences.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from codesign.calibration import (
    build_dataset,
    compute_findings,
    data_notes,
    findings,
    load_all_rows,
)
from codesign.calibration._findings import Findings
from codesign.calibration._report import render_markdown
from codesign.calibration._source_findings import MEMORY_LIMIT_RUNS
from codesign.calibration._stats import (
    LOOSE_RATIO,
    TARGETS,
    ErrorStats,
    family_stats,
    korthikanti_table,
    random_held_stats,
    zero3_rows,
)

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results"


@pytest.fixture(scope="module")
def rows():
    return load_all_rows()


@pytest.fixture(scope="module")
def res(rows):
    r = json.loads((RESULTS / "validation.json").read_text())
    r["_dataset"] = build_dataset(rows)
    return r


@pytest.fixture(scope="module")
def facts(res) -> Findings:
    return compute_findings(res)


def _split(res, kind, held_source=None):
    return next(
        s
        for s in res["splits"]
        if s["kind"] == kind and (held_source is None or s.get("held_source") == held_source)
    )


def _errors(res, sp, keep):
    return [
        100 * (sp["after_s"][i] - p["measured_s"]) / p["measured_s"]
        for i, p in enumerate(res["points"])
        if keep(p)
    ]


def test_dataset_points_line_up_with_the_stored_result(res):
    assert [p["id"] for p in res["_dataset"]["points"]] == [p["id"] for p in res["points"]]


def test_korthikanti_finding_equals_the_held_out_errors(res, facts):
    k = facts.korthikanti
    held = _errors(
        res, _split(res, "source", "Korthikanti"), lambda p: p["source"] == "Korthikanti"
    )
    assert k.held_errors_pct == pytest.approx(held, rel=1e-12)
    assert k.held_out.mape_pct == pytest.approx(np.mean(np.abs(held)), rel=1e-12)
    assert k.held_out.max_ape_pct == pytest.approx(np.max(np.abs(held)), rel=1e-12)
    assert k.held_out == korthikanti_table(res).stats["source"]
    sc21 = [p for p in res["points"] if p["source"] == "SC21" and p["excluded"] is None]
    assert k.borrowed_rows == len(sc21)
    for src in ("SC21", "Korthikanti"):
        e = _errors(
            res, _split(res, "all"), lambda p, s=src: p["source"] == s and p["excluded"] is None
        )
        assert k.signed_pct[src] == pytest.approx(np.mean(e), rel=1e-12)
    # The largest bubble: the deepest pipeline without interleaving (the 1T rows, 63/512).
    size, n_rows, pp, v, m = k.bubble
    assert (size, n_rows, pp, v, m) == ("1T", 2, 64, 1, 512)
    text = k.sentence()
    assert text == findings(res)[0]
    assert f"MAPE {k.held_out.mape_pct:.2f} %, max {k.held_out.max_ape_pct:.2f} %" in text
    assert f"mean {np.mean(held):+.1f} %" in text
    assert f"SC21's {len(sc21)} rows" in text
    assert f"{pp - 1}/{m} of the ideal time" in text
    t = TARGETS["Korthikanti"]
    assert f"(target {t.mape_pct:g} % / {t.max_ape_pct:g} %;" in text


def test_dgxc_finding_names_the_worst_families(res, facts):
    d = facts.dgxc
    fam = [f for f in family_stats(res) if f.family.startswith("dgxc")]
    worst = sorted(fam, key=lambda f: -f.after_mape_pct)[:4]
    assert d.worst == tuple(worst)
    assert d.random_mape_pct == random_held_stats(res)["DGXC"].after.mape_pct
    text = d.sentence()
    for f in worst:
        assert f"{f.family} {f.after_mean_pct:+.1f} % mean" in text
    # Grok-1 by precision, from the family table.
    by = {f.family: f for f in fam}
    experts, top_k, every, fp8, bf16 = d.grok
    assert (experts, top_k, every) == (8, 2, True)
    assert fp8 == by["dgxc_grok1_314b_h100_FP8"].after_mean_pct
    assert bf16 == by["dgxc_grok1_314b_h100_BF16"].after_mean_pct
    assert f"(mean {fp8:+.1f} %)" in text and f"(mean {bf16:+.1f} %)" in text


def test_mfu_ranges_come_from_the_published_mfu(rows, facts):
    def upper_half(paper_word, precisions):
        v = [
            r["measured"]["mfu"]
            for r in rows
            if paper_word in r["source"]["paper"]
            and r["hardware"]["gpu"].startswith("H100")
            and r["parallel"].get("precision") in precisions
        ]
        return np.median(v), np.max(v)

    d = facts.dgxc
    assert d.mfu_nemo == pytest.approx(upper_half("DGX Cloud", ("bf16",)))
    assert d.mfu_composer == pytest.approx(upper_half("llm-foundry", ("amp_bf16", "bf16")))
    lo, hi = d.mfu_nemo
    assert f"reach {lo:.2f}-{hi:.2f} MFU" in d.sentence()


def test_mosaicml_finding_from_rows_and_result(rows, res, facts):
    m = facts.mosaicml
    a40 = [
        r
        for r in rows
        if "llm-foundry" in r["source"]["paper"] and r["hardware"]["gpu"] == "A100-SXM4-40GB"
    ]
    accum = max(
        r["parallel"]["global_batch"] // (r["parallel"]["dp"] * r["parallel"]["microbatch"])
        for r in a40
    )
    assert m.grad_accum_40gb == accum
    model, seq, gpus = MEMORY_LIMIT_RUNS
    ids = {
        r["id"]
        for r in rows
        if r["model"]["name"] == model
        and r["model"]["seq_len"] == seq
        and r["hardware"]["num_gpus"] == gpus
    }
    assert len(ids) == 2
    e = _errors(res, _split(res, "all"), lambda p: p["id"] in ids)
    assert sorted(m.memory_limit_errors_pct) == pytest.approx(sorted(e), rel=1e-12)
    fam = [f for f in family_stats(res) if f.family.startswith("llmfoundry")]
    assert m.max_spread_pct == max(f.after_max_pct - f.after_min_pct for f in fam)
    text = m.sentence()
    assert f"spread over up to {m.max_spread_pct:.0f} points" in text
    assert f"grad-accumulation up to {accum}" in text
    assert f"{min(-x for x in e):.0f}-{max(-x for x in e):.0f} % slower than the model" in text
    c = m.counterfactual
    fitted = "recompute_factor" in _split(res, "all")["values"]
    assert (c is not None) == fitted  # the counterfactual undoes a fitted recompute_factor
    if fitted:
        assert c.rows > 0 and f"on its {c.rows} full-recompute rows" in text
        assert f"would err by {c.one_pass.mean_signed_pct:+.1f} %" in text
    else:
        assert "recompute_factor is not fitted: a full recomputation costs one forward" in text


def test_zero3_finding_equals_the_zero3_table(res, facts):
    z = facts.zero3
    table = zero3_rows(res)
    assert z.rows == len(table) == 6
    e = [100 * (r.after_s - r.measured_s) / r.measured_s for r in table]
    assert z.after == ErrorStats.of(e)
    flat = [r.flat_error_pct for r in table]
    assert z.flat_errors_pct == pytest.approx(flat, rel=1e-12)
    assert z.scale_up_domain == 8 and z.link_gbps == 25.0
    size, ta, tb, ga, gb = z.doubling
    assert gb == 2 * ga and abs(tb - ta) / ta < 1e-3
    text = z.sentence()
    assert f"stay {z.after.mape_pct:.1f} % off" in text
    assert f"(errors {min(flat):+.0f} % to {max(flat):+.0f} %)" in text
    assert f"{size}: {ta:.1f} s at {ga} and at {gb} GPUs" in text


def test_weakly_identified_values(res, facts):
    w = facts.weak_values
    for name, lab, lo, hi in w.values:
        vs = [sp["values"][name][lab] for sp in res["splits"] if lab in sp["values"].get(name, {})]
        assert (lo, hi) == (min(vs), max(vs)) and hi / lo > LOOSE_RATIO
    assert f"more than {LOOSE_RATIO:g}x" in w.sentence()


def test_findings_follow_the_result(res):
    """Scaling the Korthikanti-held-out predictions by 1.1 moves the headline figures."""
    other = copy.copy(res)
    other["splits"] = copy.deepcopy(res["splits"])
    sp = _split(other, "source", "Korthikanti")
    sp["after_s"] = [1.1 * t for t in sp["after_s"]]
    before = compute_findings(res).korthikanti
    after = compute_findings(other).korthikanti
    assert after.held_errors_pct == pytest.approx(
        [1.1 * e + 10 for e in before.held_errors_pct], rel=1e-9
    )
    assert f"MAPE {after.held_out.mape_pct:.2f} %" in findings(other)[0]
    assert f"MAPE {before.held_out.mape_pct:.2f} %" not in findings(other)[0]


def test_data_notes_are_computed_from_the_rows(rows):
    notes = data_notes(rows)
    missing = [r["id"] for r in rows if not r["parallel"].get("global_batch")]
    assert len(notes) == 2 + len(missing)
    assert all(any(m in n for n in notes) for m in missing)
    partial = copy.deepcopy([r for r in rows if r["id"].startswith("korthikanti")])
    partial[0]["parallel"].pop("global_batch")
    assert any(partial[0]["id"] in n for n in data_notes(partial))


def test_report_states_the_typed_findings(res, rows, facts):
    md = render_markdown(res, findings=facts.sentences(), data_notes=data_notes(rows))
    for sentence in facts.sentences():
        assert f"- {sentence}" in md
    k = korthikanti_table(res).stats["source"]
    assert f"held out by source: MAPE {k.mape_pct:.2f} %, max {k.max_ape_pct:.2f} %**" in md
    assert "`codesign/data/measured_runs.json`" in md


def test_contradicted_rows_are_reported_apart(res, facts):
    from codesign.calibration._dataset import CONTRADICTED

    c = facts.contradicted
    ids = [p["id"] for p in res["points"] if str(p["excluded"] or "").startswith(CONTRADICTED)]
    assert [r[0] for r in c.rows] == ids and len(ids) == 4
    allsp = _split(res, "all")
    for rid, meas, after in c.rows:
        i = next(k for k, p in enumerate(res["points"]) if p["id"] == rid)
        assert (meas, after) == (res["points"][i]["measured_s"], allsp["after_s"][i])
        assert f"measured {meas:.2f} s, model (presets) {after:.2f} s" in c.sentence()
        # Never fitted: every split trains without it.
        assert not any(sp["train"][i] for sp in res["splits"])
    assert {p["group"] for p in res["points"] if p["id"] in ids} == {
        "Bridge contradicted (not fitted)"
    }
    # Each pair's recipe differences come from the collected recipe facts, the older release
    # first: both Qwen3 30B pairs ran token drop in 25.09 and dropless in 25.11.
    assert len(c.pairs) == 2
    for model, gpu, ca, cb, diffs in c.pairs:
        assert (model, ca, cb) == ("qwen3_30b_a3b", "25.09", "25.11")
        assert ("token_drop", True, False) in diffs
        assert f"{model} on {gpu.upper()}: " in c.sentence()
    assert "token_drop True (25.09) / False (25.11)" in c.sentence()


def test_frontier_table_is_the_held_out_error(res):
    from codesign.calibration._tables import frontier_rows

    rows = {r[0]: r for r in frontier_rows(res)}
    sel = [
        (sp, [i for i, p in enumerate(res["points"]) if sp["held"][i] and p["excluded"] is None])
        for sp in res["splits"]
        if sp["kind"] == "random"
    ]
    for name, moe in (("dense, every source", False), ("MoE, every source", True)):
        means = [
            np.mean(
                [
                    abs(sp["after_s"][i] / res["points"][i]["measured_s"] - 1.0) * 100
                    for i in ix
                    if res["points"][i]["moe"] == moe
                ]
            )
            for sp, ix in sel
        ]
        assert rows[name][2] == f"{np.mean(means):.1f}"
    over = rows["fitted rows more than 25 % off (all-rows fit)"]
    allsp = _split(res, "all")
    n = sum(
        abs(allsp["after_s"][i] / p["measured_s"] - 1.0) > 0.25
        for i, p in enumerate(res["points"])
        if p["excluded"] is None
    )
    assert over[2].startswith(f"{n} of ")


def test_container_target_is_split_by_borrowed_values(res, facts):
    """The container split's ``borrowed`` record follows from its fitted labels: a row borrows
    exactly when one of its grouped parameters' own labels (from the mapped data set) is not
    among the split's fitted labels; the two parts partition the target's rows."""
    from codesign.calibration._grouping import TIED, groups_for
    from codesign.calibration._tables import CONTAINER_TARGET_PCT, frontier_rows

    sp = _split(res, "container")
    ds = res["_dataset"]["points"]
    groups = groups_for(ds, res["params"], res["grouping"])  # with the tied gemm_max_16bit
    for i, p in enumerate(ds):
        own = [
            lab
            for name, labs in groups.items()
            for lab in (labs[i] if isinstance(labs[i], tuple) else (labs[i],))
            if lab is not None and lab not in sp["values"][TIED.get(name, name)]
        ]
        assert bool(own) == bool(sp["borrowed"][i]), p["id"]
        assert all(any(f" {lab} <- " in b for b in sp["borrowed"][i]) for lab in own)

    def errs(borrowed):
        return [
            abs(sp["after_s"][i] / p["measured_s"] - 1.0) * 100
            for i, p in enumerate(res["points"])
            if sp["held"][i]
            and p["excluded"] is None
            and p["source"] == "Bridge"
            and p["generation"].startswith("blackwell")
            and borrowed in (None, bool(sp["borrowed"][i]))
        ]

    rows = {r[0]: r for r in frontier_rows(res)}
    whole, own, bor = errs(None), errs(False), errs(True)
    assert len(own) + len(bor) == len(whole) and bor
    assert rows["Megatron-Bridge Blackwell"][2] == f"{np.mean(whole):.1f}"
    own_row = "Megatron-Bridge Blackwell, every value fitted on its own labels"
    # every 25.09 Blackwell row is FP8, so no 25.11 Blackwell row has every label fitted since
    # the FP8 rows' output layer takes the 16-bit gemm_max (the tied gemm_max_16bit)
    assert (rows[own_row][2] == f"{np.mean(own):.1f}") if own else own_row not in rows
    c = facts.container
    assert ((c.own.rows if c.own else 0), c.borrowed.rows, c.all.rows) == (
        len(own),
        len(bor),
        len(whole),
    )
    assert np.isclose(c.borrowed.mape_pct, np.mean(bor)) and c.target_pct == CONTAINER_TARGET_PCT
    assert f"{len(bor)} rows borrow: MAPE {np.mean(bor):.1f} %" in c.sentence()
    assert sum(n for _, n in c.labels) >= len(bor)


def _container_target_rows(rows, res):
    """``(raw row, point index)`` of the container target's rows: the fitted (not excluded)
    25.11 Megatron-Bridge rows on a Blackwell generation, found from the raw rows."""
    idx = {p["id"]: i for i, p in enumerate(res["points"])}
    for r in rows:
        i = idx.get(r["id"])
        if i is None or not r["id"].startswith("mbridge_25.11"):
            continue
        p = res["points"][i]
        if p["excluded"] is None and p["generation"].startswith("blackwell"):
            yield r, i


def test_container_systems_finding_is_recomputed_from_the_raw_rows(rows, res, facts):
    """The systems finding, recomputed from the raw rows and the catalog: the held-out
    Blackwell rows of a system no 25.09 row ran (GB300), what the other rows would need for
    the container target, and each same-layout pair's measured and catalog speed-ups."""
    from codesign._catalog import catalog
    from codesign.calibration import same_layout_systems
    from codesign.calibration._rows import measured_step_time
    from codesign.calibration._tables import CONTAINER_TARGET_PCT

    assert res["same_layout_systems"] == [[list(m) for m in g] for g in same_layout_systems(rows)]
    sp, full = _split(res, "container"), _split(res, "all")
    seen_09 = {r["id"].split("_")[2] for r in rows if r["id"].startswith("mbridge_25.09")}
    new, rest, rest_fit = [], [], []
    for r, i in _container_target_rows(rows, res):
        t = measured_step_time(r)[0]
        err = abs(sp["after_s"][i] / t - 1.0) * 100
        if r["id"].split("_")[2] in seen_09:
            rest.append(err)
            rest_fit.append(abs(full["after_s"][i] / t - 1.0) * 100)
        else:
            assert "DGX-GB300" in r["id"]
            new.append(err)
    f = facts.systems
    ((system, st),) = f.unseen
    assert system == "gb300" and st.rows == len(new) and np.isclose(st.mape_pct, np.mean(new))
    n = len(new) + len(rest)
    assert f.rows == n and f.rest_rows == len(rest)
    assert np.isclose(f.rest_needed_pct, (CONTAINER_TARGET_PCT * n - sum(new)) / len(rest))
    assert np.isclose(f.rest_fitted_pct, np.mean(rest_fit))
    text = f.sentence()
    assert f"gb300: {len(new)} rows, MAPE {np.mean(new):.1f} %" in text
    assert f"would need a mean error of {f.rest_needed_pct:.1f} %" in text
    assert ("cannot be met" in text) == (f.rest_fitted_pct > f.rest_needed_pct)
    by_id = {r["id"]: r for r in rows}
    peak = {n_: catalog()["accelerators"][n_]["peak_tflops_fp8"] for n_ in ("gb200", "gb300")}
    pairs = {(p.system_a, p.system_b, p.release, p.model, round(p.measured, 9)) for p in f.pairs}
    checked = 0
    for g in same_layout_systems(rows):
        for k, (a, sa, _) in enumerate(g):
            for b, sb, _ in g[k + 1 :]:
                ta, tb = measured_step_time(by_id[a])[0], measured_step_time(by_id[b])[0]
                model = by_id[a]["model"]["name"]
                key = (sa, sb, a.split("_")[1], model, round(ta / tb, 9))
                assert key in pairs
                checked += 1
    assert checked == len(f.pairs) > 0
    gb = [p for p in f.pairs if (p.system_a, p.system_b) == ("dgx_gb200", "dgx_gb300")]
    fam = {p.peak for p in gb}
    # GB200 and GB300 print the same dense FP8 peak, so the catalog gives no speed-up
    assert fam == {peak["gb300"] / peak["gb200"]} == {1.0}
    assert all(p.measured > 1.0 for p in gb) and max(p.measured for p in gb) > 1.15


def test_container_twins_are_the_rows_with_a_25_09_run_of_their_layout(rows, res, facts):
    """The container finding's twin figures, recomputed from the raw rows: the held-out
    Blackwell rows whose layout (same system, model, number format, batch and degrees) also
    ran in 25.09, the model's error on them and the error of a prediction at the median of
    their layout's step times."""
    from codesign.calibration import same_layout_groups
    from codesign.calibration._rows import measured_step_time

    assert res["same_layout"] == [
        [list(m) for m in g] for g in same_layout_groups(rows, exact_precision=True)
    ]
    sp = _split(res, "container")
    by_id = {r["id"]: r for r in rows}
    errs, floor = [], []
    for r, i in _container_target_rows(rows, res):
        twins = [
            q
            for q in rows
            if q["id"].startswith("mbridge_25.09")
            and same_layout_groups([r, q], exact_precision=True)
        ]
        if not twins:
            continue
        times = [measured_step_time(q)[0] for q in [r, *twins]]
        t = measured_step_time(by_id[r["id"]])[0]
        errs.append((sp["after_s"][i] / t - 1.0) * 100)
        floor.append(abs(float(np.median(times)) / t - 1.0) * 100)
    c = facts.container
    assert errs and c.twins.rows == len(errs)
    assert np.isclose(c.twins.mape_pct, np.mean(np.abs(errs)))
    assert np.isclose(c.twin_floor_pct, np.mean(floor))
    assert f"{len(errs)} of the rows ran the same layout in 25.09" in c.sentence()
