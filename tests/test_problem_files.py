"""Every problem file of experiments/problems loads and has a grid; on the small ones the
exhaustive optimum, re-evaluated by :func:`codesign.evaluate` on its own configuration, is
valid, fits in memory and meets every constraint of the file (capex, power, network capex,
deadline, accelerator cap, minimum MFU).  A few optima the files' comments state are pinned
(ZeRO-3 without pipelining on a 72-GPU NVLink domain; expert parallelism without pipelining
for Mixtral), and every "Sweep optimum" block states the current optimum: its objective and
its point."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import experiment_module

import codesign as cd
from codesign.search import OBJECTIVES, distributed_sweep, load_problem

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = sorted((ROOT / "experiments" / "problems").glob("*.toml"))
SMALL = 200_000
"""Grids below this size are swept here (the others only load)."""
_TOP = 16
"""Best points kept per sweep: a stated point may be any of several tied optima."""

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
        res = distributed_sweep(pb, progress=False, top_k=_TOP)
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
_UNITS = experiment_module("refresh_problem_optima").UNITS
"""The scale and unit of each objective in the blocks (the refresher's)."""


def _stated(text: str) -> tuple[str, float, dict]:
    """``(objective, value, point)`` of a file's "Sweep optimum" block (the comment lines from
    that one on, as experiments/refresh_problem_optima.py writes them)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# Sweep optimum"))
    block = []
    for ln in lines[start:]:
        if not ln.startswith("#"):
            break
        block.append(ln.lstrip("#").strip())
    body = " ".join(block)
    m = re.search(r"(\w+) = ([\d,.]+) \S+ at (.*?) \(", body)
    assert m, body
    point = {}
    for item in m.group(3).split(", "):
        key, _, value = item.partition(" = ")
        point[key] = value
    return m.group(1), float(m.group(2).replace(",", "")), point


def _same(stated: dict, point: dict) -> bool:
    """The stated point is the sweep's (numbers to the block's four digits)."""
    point = {k.removeprefix("strategy.").removeprefix("system."): v for k, v in point.items()}
    if set(stated) != set(point):
        return False
    for key, value in point.items():
        text = stated[key]
        if isinstance(value, (list, tuple)):
            value = "-".join(map(str, value))
        if isinstance(value, (int, float, np.number)):
            if not math.isclose(float(text.replace(",", "")), float(value), rel_tol=1e-3):
                return False
        elif text != str(value):
            return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("path", _STATED, ids=[p.stem for p in _STATED])
def test_stated_sweep_optimum_is_current(path):
    """A block that states a problem's sweep optimum states the current one (the presets
    move with every calibration; experiments/refresh_problem_optima.py rewrites it): the
    exhaustive optimum's objective, in the block's unit, to its four digits, and a point of
    the grid that reaches it (one of the tied optima where several do)."""
    pb, res, _, _ = _best(path)
    objective, value, point = _stated(path.read_text())
    best = res.best_values[0]
    assert objective == pb.objective
    assert math.isclose(value, best * _UNITS[pb.objective][0], rel_tol=1e-3), (value, best)
    tied = [
        i for i in range(min(_TOP, len(res.best_values))) if res.best_values[i] <= best * (1 + 1e-6)
    ]
    assert any(_same(point, res.point(i)) for i in tied), (point, [res.point(i) for i in tied])


def test_stated_block_parses_as_written():
    """The parser reads the refresher's layout, continuation lines included."""
    text = (
        "# Sweep optimum (presets of X; 9 points; written by\n# experiments/x.py):\n"
        "#   cost_to_train = 3.628 M$\n#   at num_accelerators = 2,048, tp = 4,\n"
        "#     platform = gb300, placement = tp-cp-ep-pp-dp\n#   (5.0 s a step)\n\n[model]\n"
    )
    objective, value, point = _stated(text)
    assert (objective, value) == ("cost_to_train", 3.628)
    assert point == {
        "num_accelerators": "2,048",
        "tp": "4",
        "platform": "gb300",
        "placement": "tp-cp-ep-pp-dp",
    }
    sweep_point = {
        "system.num_accelerators": 2048.0,
        "strategy.tp": 4.0,
        "system.platform": "gb300",
        "strategy.placement": ["tp", "cp", "ep", "pp", "dp"],
    }
    assert _same(point, sweep_point)
    assert not _same(point, {**sweep_point, "strategy.tp": 2.0})
    assert not _same(point, {**sweep_point, "strategy.pp": 1.0})
