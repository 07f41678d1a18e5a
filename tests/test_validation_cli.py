"""``codesign validate``: the command line owns printing and files; the library only computes.

* the command is registered with its defaults (the package's data, ``./validation-report``);
* no module of :mod:`codesign.calibration` prints, writes files or imports the ``codesign``
  package itself; each is under 600 lines and its docstring's first line names its concept;
* end to end on a few rows (slow): the report, plot and JSON are written where ``--out`` says;
* ablation candidates in their own processes (slow, real processes) fit as in-process ones;
  named candidates are checked before any fit and merged into the stored table (slow).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import codesign.calibration as calibration
from codesign.cli import build_parser, main
from codesign.cli import validate as cli_validate

PACKAGE = Path(calibration.__file__).resolve().parent
RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results"


def test_validate_is_registered_with_package_defaults():
    args = build_parser().parse_args(["validate"])
    assert args.func is cli_validate.run
    assert args.data is None and args.out == cli_validate.DEFAULT_OUT == "validation-report"
    assert calibration.DATA_PATH.is_file()
    args = build_parser().parse_args(["validate", "--out", "x", "--steps", "7", "--json"])
    assert (args.out, args.steps, args.json) == ("x", 7, True)


def _modules():
    return sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_calibration_module_is_quiet_small_and_one_way(path):
    src = path.read_text()
    tree = ast.parse(src)
    doc = ast.get_docstring(tree)
    assert doc and doc.splitlines()[0].strip(), "first docstring line states the concept"
    assert len(src.splitlines()) <= 600
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            assert name not in ("print", "open", "write_text", "savefig", "mkdir"), (
                path.name,
                node.lineno,
                name,
            )
        if isinstance(node, ast.Import):
            assert all(a.name != "codesign" for a in node.names), (path.name, node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "codesign":
            pytest.fail(f"{path.name}:{node.lineno} imports from the codesign package itself")


@pytest.mark.slow
def test_validate_end_to_end_on_a_few_rows(tmp_path, capsys):
    rows = calibration.load_rows()
    keep = [r for r in rows if r["id"].startswith(("korthikanti", "sc21_t2"))]
    keep += [r for r in rows if r["id"].startswith("dgxc_llama31_8b")][:4]
    keep += [r for r in rows if r["id"].startswith(("llmfoundry_H100__7b", "llmfoundry_A100__7b"))][
        :8
    ]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(keep))
    out = tmp_path / "report"
    argv = ["validate", "--data", str(data), "--out", str(out), "--steps", "5"]
    assert main([*argv, "--random-splits", "1"]) == 0
    printed = capsys.readouterr()
    assert "Held-out summary" in printed.out and "calibrating: all rows" in printed.err
    res = json.loads((out / "validation.json").read_text())
    assert len(res["points"]) == len(keep) - 1  # korthikanti_530B_2240gpu has no global batch
    assert [s["kind"] for s in res["splits"]][-1] == "all"
    md = (out / "validation.md").read_text()
    assert f"from `{data}`" in md and "## What remains short of the targets" in md
    assert "## Expected error by setting" in md and "| h100 | nemo | dense |" in md
    assert (out / "parity.png").stat().st_size > 0


def test_stored_ablation_is_checked_against_the_report_data():
    """A reused ``ablation.json`` is labelled with the data it was fitted on: the report says
    "same data" only when the fingerprint of its fitted rows (ids, measured times and mapped
    runs) matches, and flags the table as stale otherwise."""
    from codesign.calibration._report import _stored_ablation_note
    from codesign.calibration._validate import data_fingerprint

    res = {
        "points": [
            {"id": "a", "measured_s": 1.0, "excluded": None},
            {"id": "b", "measured_s": 2.0, "excluded": None},
            {"id": "z", "measured_s": 9.0, "excluded": "ZeRO-3"},
        ]
    }
    fp = data_fingerprint(res)
    assert fp.startswith("2 fitted rows, ")
    same = {"set": {"data": fp}}
    assert "on the same data" in _stored_ablation_note(res, same, True)
    assert _stored_ablation_note(res, same, False) == ""
    moved = {"points": [{**res["points"][0], "measured_s": 1.5}, *res["points"][1:]]}
    assert data_fingerprint(moved) != fp
    note = _stored_ablation_note(moved, same, True)
    assert "Stale" in note and fp in note
    assert "not recorded" in _stored_ablation_note(res, {"set": {}}, True)
    # The same rows mapped to another run (a corrected recipe fact) are other data too.
    remapped = {"points": [{**res["points"][0], "mapping": "0123abcd"}, *res["points"][1:]]}
    assert data_fingerprint(remapped) != fp
    assert "Stale" in _stored_ablation_note(remapped, same, True)


def test_mapping_fingerprint_follows_the_mapped_run():
    """The hash of a row's mapped run changes with any leaf of its specs (e.g. the EP a recipe
    fact sets) and not between two mappings of the same run."""
    import dataclasses

    from conftest import small_doc

    from codesign.calibration._validate import mapping_fingerprint
    from codesign.config import load_run_dict

    cfg = load_run_dict(small_doc())
    fp = mapping_fingerprint(cfg)
    assert fp == mapping_fingerprint(load_run_dict(small_doc())) and len(fp) == 12
    moved = dataclasses.replace(cfg, strategy=dataclasses.replace(cfg.strategy, microbatch=2.0))
    assert mapping_fingerprint(moved) != fp


@pytest.mark.slow
def test_stored_ablation_candidates_match_their_definitions():
    """Every candidate stored in ``experiments/results/ablation.json`` was fitted with the
    parameters and grouping its entry in ``ABLATION_SETS`` gives today (overrides merged onto
    ``PARAM_GROUPING``): a change of the shipped grouping must keep the stored candidates'
    groupings in their overrides, or the report's table would describe fits the code no longer
    makes.  The chosen set is the shipped one."""
    from codesign.calibration._grouping import DEFAULT_PARAMS, PARAM_GROUPING
    from codesign.calibration._validate import ABLATION_SETS

    root = Path(__file__).resolve().parent.parent
    stored = json.loads((root / "experiments" / "results" / "ablation.json").read_text())
    assert set(stored) <= set(ABLATION_SETS)
    for name, res in stored.items():
        params, overrides = ABLATION_SETS[name]
        merged = {**PARAM_GROUPING, **overrides}
        assert res["params"] == list(params), name
        assert res["grouping"] == {p: merged.get(p, "shared") for p in params}, name
    chosen = [n for n in ABLATION_SETS if n.endswith("(chosen)")]
    assert len(chosen) == 1 and chosen[0] in stored
    assert ABLATION_SETS[chosen[0]] == (DEFAULT_PARAMS, {})


@pytest.mark.slow
def test_ablation_candidates_run_in_their_own_processes():
    """``run_ablation(processes=True)`` (what ``--ablation`` uses) fits each candidate in a
    fresh spawned interpreter, with real processes: the child's fit equals the in-process
    one, and a child's Python error reaches the caller as itself."""
    from codesign.calibration._validate import run_ablation

    rows = [r for r in calibration.load_rows() if r["id"].startswith("korthikanti")][:4]
    sets = {"gemm_max": (("gemm_max",), {})}
    kw = dict(rows=rows, sets=sets, steps=3, random_splits=0, splits=["all"])
    seen = []
    child = run_ablation(processes=True, progress=seen.append, **kw)
    here = run_ablation(processes=False, **kw)
    assert seen == ["ablation: gemm_max (own process)"]
    a, b = child["gemm_max"]["splits"], here["gemm_max"]["splits"]
    assert [s["kind"] for s in a] == ["all"]
    assert a[0]["values"]["gemm_max"] == pytest.approx(b[0]["values"]["gemm_max"], rel=1e-9)
    assert a[0]["after_s"] == pytest.approx(b[0]["after_s"], rel=1e-9)
    assert child["gemm_max"]["points"] == here["gemm_max"]["points"]
    with pytest.raises(AttributeError, match="no_such_param"):  # raised in the child
        run_ablation(processes=True, **{**kw, "sets": {"bad": (("no_such_param",), {})}})


def test_ablation_names_are_checked_before_any_fit(tmp_path, capsys):
    """``--ablation`` alone means every candidate set; names select some; an unknown name is
    one line naming the option, the name and the sets allowed, before any row is fitted."""
    parse = build_parser().parse_args
    assert parse(["validate"]).ablation is None
    assert parse(["validate", "--ablation"]).ablation == []
    assert parse(["validate", "--ablation", "gemm_max"]).ablation == ["gemm_max"]
    out = tmp_path / "report"
    assert main(["validate", "--ablation", "no such set", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "validate.ablation = 'no such set' is invalid" in err and "+ attention_eff" in err
    assert "calibrating" not in err and not out.exists()


@pytest.mark.slow
def test_named_ablation_candidates_merge_into_the_stored_table(tmp_path, capsys):
    """``--ablation NAME`` fits that candidate and merges it into ``--out``'s stored
    ``ablation.json``: a candidate fitted earlier stays as it was, the table keeps the order
    of ``ABLATION_SETS``, and the report reads the merged table as fitted on its data."""
    rows = [r for r in calibration.load_rows() if r["id"].startswith("korthikanti")]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    out = tmp_path / "report"
    argv = ["validate", "--data", str(data), "--out", str(out), "--steps", "3"]
    argv += ["--random-splits", "1"]
    assert main([*argv, "--ablation", "+ attention_eff"]) == 0
    first = json.loads((out / "ablation.json").read_text())
    assert list(first) == ["+ attention_eff"]
    assert main([*argv, "--ablation", "gemm_max"]) == 0
    assert "ablation: 1 fitted, 1 read from" in capsys.readouterr().err
    merged = json.loads((out / "ablation.json").read_text())
    assert list(merged) == ["gemm_max", "+ attention_eff"]
    assert merged["+ attention_eff"] == first["+ attention_eff"]
    assert merged["gemm_max"]["params"] == ["gemm_max"]
    assert merged["gemm_max"]["data"] == first["+ attention_eff"]["data"]
    md = (out / "validation.md").read_text()
    assert "| gemm_max |" in md and "| + attention_eff |" in md
    assert "runs on the same data" in md  # the merged table's data checked, as a stored one's


def test_stored_report_lists_the_expected_error_of_every_setting():
    """The shipped validation.md shows, per setting, the figures the presets store."""
    from codesign.calibration._presets import held_out_by_setting

    res = json.loads((RESULTS / "validation.json").read_text())
    md = (RESULTS / "validation.md").read_text()
    for gen, stacks in held_out_by_setting(res).items():
        for stack, kinds in stacks.items():
            for kind, h in kinds.items():
                row = f"| {gen} | {stack} | {kind} | {h['rows']} | {h['mape_pct']:.1f} | "
                assert row in md, row


@pytest.mark.slow
def test_a_split_with_nothing_to_fit_is_skipped_and_said():
    """A small data file can leave a split nothing to train on (here every row is from 25.11,
    so fitting without 25.11 has no rows): the split is skipped and the progress says so, and
    the others run (it used to stop in the fit with "weights must be [N] ... not all zero")."""
    from codesign.calibration._bridge import BRIDGE_DATA_PATH
    from codesign.calibration._validate import run_validation

    rows = [
        r for r in calibration.load_rows(BRIDGE_DATA_PATH) if "25.11_DGX-B200_LLAMA3_8B" in r["id"]
    ]
    assert rows and all("25.11" in r["id"] for r in rows)
    said = []
    out = run_validation(
        rows, steps=2, random_splits=0, splits=["container", "all"], progress=said.append
    )
    assert [s["kind"] for s in out["splits"]] == ["all"]
    assert any(m.startswith("skipped: container") and "no training rows" in m for m in said)
