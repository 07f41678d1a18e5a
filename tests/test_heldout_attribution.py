"""``experiments/heldout_attribution.py`` re-predicts the stored validation splits: its
held-out and in-sample errors must be the ones ``codesign validate`` stored, or its
attribution describes another model than the presets'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import experiment_module

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_attribution_reproduces_the_stored_held_out_and_in_sample_errors():
    mod = experiment_module("heldout_attribution")
    res = json.loads((ROOT / "experiments" / "results" / "validation.json").read_text())
    from codesign.calibration._dataset import build_dataset
    from codesign.calibration._rows import load_all_rows

    points = build_dataset(load_all_rows())["points"]
    assert [p["id"] for p in points] == [p["id"] for p in res["points"]]
    split = next(s for s in res["splits"] if s["kind"] == "random")
    allsp = next(s for s in res["splits"] if s["kind"] == "all")
    held = [
        i
        for i, p in enumerate(points)
        if split["held"][i] and p["source"] == "Bridge" and p["excluded"] is None
    ][:3]
    recs = mod.attribute(res, points, split, held)
    assert [r["id"] for r in recs] == [points[i]["id"] for i in held]
    for i, r in zip(held, recs, strict=True):
        m = points[i]["measured_s"]
        np.testing.assert_allclose(r["err_split"], 100 * (split["after_s"][i] / m - 1), atol=1e-6)
        np.testing.assert_allclose(r["err_all"], 100 * (allsp["after_s"][i] / m - 1), atol=1e-6)
        assert set(r["gains"]) == set(res["params"])
        assert r["pin"] == max(r["gains"], key=r["gains"].get)
        # one parameter's all-rows value can never remove more than the whole error
        assert max(r["gains"].values()) <= abs(r["err_split"]) + 1e-9
    md = mod.markdown({"random": recs, "container": []}, 1.0, "today")
    assert "| Bridge, 10 random splits | 3 |" in md
