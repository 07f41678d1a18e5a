"""Every problem file of experiments/problems loads and has a grid; on the small ones the
exhaustive optimum, re-evaluated by :func:`codesign.evaluate` on its own configuration, is
valid, fits in memory and meets every constraint of the file (capex, power, network capex,
deadline, accelerator cap, minimum MFU).  A few optima the files' comments state are pinned
(ZeRO-3 without pipelining on a 72-GPU NVLink domain; expert parallelism without pipelining
for Mixtral), and every "Sweep optimum" comment states the current optimum's objective."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import codesign as cd
from codesign.search import OBJECTIVES, distributed_sweep, load_problem

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = sorted((ROOT / "experiments" / "problems").glob("*.toml"))
SMALL = 200_000
"""Grids below this size are swept here (the others only load)."""

FAST = {"gpt3-175b-h100-nvl72-zero3", "llama3-70b-cheapest-90-days"}
"""Small problems swept in the fast tier (a strategy problem, and a deadline with a platform
choice); each sweep costs ~10-25 s of compilation here, so the other small ones are slow."""

_SIZES = {p.stem: load_problem(p).grid_size() for p in PROBLEMS}
_SMALL = [p for p in PROBLEMS if _SIZES[p.stem] < SMALL]


def _param(p: Path):
    marks = () if p.stem in FAST else (pytest.mark.slow,)
    return pytest.param(p, id=p.stem, marks=marks)


_cache: dict = {}


def _best(path: Path):
    """The problem, its sweep and the report of its best point (swept once per file)."""
    if path not in _cache:
        pb = load_problem(path)
        res = distributed_sweep(pb, progress=False, top_k=1)
        cfg = res.config(0, pb.cfg)
        _cache[path] = (pb, res, cfg, cd.evaluate(*cfg.specs()))
    return _cache[path]


@pytest.mark.parametrize("path", PROBLEMS, ids=[p.stem for p in PROBLEMS])
def test_problem_file_loads(path):
    pb = load_problem(path)
    assert pb.title and pb.title != path.stem
    assert pb.grid_size() >= 2
    assert all(len(v) >= 1 for v in pb.exhaustive_axes().values())


def test_the_fast_set_is_small():
    assert FAST <= {p.stem for p in _SMALL}


@pytest.mark.parametrize("path", [_param(p) for p in _SMALL])
def test_exhaustive_best_meets_every_constraint(path):
    pb, res, cfg, r = _best(path)
    assert res.num_feasible > 0 and math.isfinite(res.best_values[0]), "no feasible point"
    assert bool(r.fits)
    # The evaluator's objective is the sweep's.
    np.testing.assert_allclose(float(OBJECTIVES[pb.objective](r)), res.best_values[0], rtol=1e-6)
    c = {k: float(v) for k, v in r.cost.items()}
    tol = 1 + 1e-9
    assert c["capex_usd"] <= pb.capex_max_usd * tol
    assert c["power_kw"] <= pb.power_max_kw * tol
    assert c["network_capex_usd"] <= pb.network_capex_max_usd * tol
    if math.isfinite(pb.time_to_train_max_days):
        assert c["time_to_train_days"] <= pb.time_to_train_max_days * tol
    assert float(cfg.system.num_accelerators) <= pb.num_accelerators_max
    assert float(r.mfu) >= pb.mfu_min / tol


def _named(stem: str) -> Path:
    return ROOT / "experiments" / "problems" / f"{stem}.toml"


def test_nvl72_h100_gpt3_optimum_is_zero3_without_pipelining():
    _, res, cfg, _ = _best(_named("gpt3-175b-h100-nvl72-zero3"))
    best = res.best()
    assert best["strategy.pp"] == 1 and best["strategy.zero"] == 3
    assert float(cfg.system.tiers[0].domain) == 72


@pytest.mark.slow
def test_mixtral_optimum_uses_expert_parallelism_without_pipelining():
    _, res, _, _ = _best(_named("mixtral-8x7b-1024xh100-ep"))
    best = res.best()
    assert best["strategy.pp"] == 1 and best["strategy.ep"] > 1


_STATED = [p for p in PROBLEMS if "# Sweep optimum" in p.read_text()]
_UNIT = {"cost_to_train": 1e-6}
"""The comments state costs in M$; every other objective in its own unit."""


def _stated_numbers(text: str) -> list[float]:
    """The numbers of a file's "Sweep optimum" comment (the comment lines from that one on)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# Sweep optimum"))
    block = []
    for ln in lines[start:]:
        if not ln.startswith("#"):
            break
        block.append(ln)
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", "\n".join(block))]


@pytest.mark.slow
@pytest.mark.parametrize("path", _STATED, ids=[p.stem for p in _STATED])
def test_stated_sweep_optimum_is_current(path):
    """A comment that states a problem's sweep optimum states the current one (the presets
    move with every calibration): the exhaustive optimum's objective, in the comment's unit,
    is one of the comment's numbers to its rounding (0.6 %)."""
    pb, res, _, _ = _best(path)
    want = res.best_values[0] * _UNIT.get(pb.objective, 1.0)
    stated = _stated_numbers(path.read_text())
    assert any(abs(n - want) <= 6e-3 * want for n in stated), (pb.objective, want, stated)
