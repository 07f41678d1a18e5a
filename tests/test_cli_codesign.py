"""``codesign optimize`` and ``codesign sweep``: output, JSON, compilation cache, bad input.

The commands run in subprocesses (the CLI sets x64 and the compilation cache globally), all
sharing one temporary cache directory.  ``--distributed`` over two processes: see
``test_distributed.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codesign.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
# A small strategy-only problem on one NVLink tier (one tier: the quickest programs to compile).
TINY = """title = "Llama 3 8B on 8 H100, one NVLink tier: strategy only"
[model]
preset = "llama3-8b"
[training]
global_batch = 64
tokens = 1e11
[system]
accelerator = "h100-sxm5-80gb"
num_accelerators = 8
[[system.tiers]]
preset = "nvlink4"
[search]
mode = "strategy"
"""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jax-cache")


@pytest.fixture(scope="module")
def problem(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("problem") / "tiny.toml"
    p.write_text(TINY)
    return p


def _run(args, cache_dir, **env):
    e = {**os.environ, "CODESIGN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT), **env}
    e.pop("XLA_FLAGS", None)
    p = subprocess.run(
        [sys.executable, "-m", "codesign.cli", *args],
        capture_output=True,
        text=True,
        env=e,
        cwd=ROOT,
        timeout=300,
    )
    return p


def _json(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{") :])


def test_parser_knows_the_commands():
    p = build_parser()
    a = p.parse_args(
        [
            "optimize",
            "x.toml",
            "--json",
            "--seed",
            "3",
            "--starts",
            "12",
            "--steps",
            "50",
            "--distributed",
        ]
    )
    assert (a.seed, a.starts, a.steps, a.json, a.distributed) == (3, 12, 50, True, True)
    a = p.parse_args(["sweep", "x.toml", "--top-k", "2", "--no-progress", "--no-compile-cache"])
    assert (a.top_k, a.no_progress, a.no_compile_cache, a.distributed) == (2, True, True, False)


@pytest.mark.slow
def test_sweep_then_optimize_agree(problem, cache_dir):
    sw = _run(["sweep", str(problem), "--json"], cache_dir)
    assert sw.returncode == 0, sw.stderr
    s = _json(sw.stdout)
    assert s["num_exact_evals"] == s["grid_size"] == 4 * 4 * 5 * 3 * 4 and s["num_feasible"] > 0
    assert (
        s["design"]["strategy"]["tp"]
        * s["design"]["strategy"]["pp"]
        * s["design"]["strategy"]["dp"]
        == 8
    )
    assert s["report"]["fits"] and s["objective_value"] == pytest.approx(s["report"]["step_time_s"])

    op = _run(["optimize", str(problem), "--starts", "12", "--steps", "100"], cache_dir)
    assert op.returncode == 0, op.stderr
    out = op.stdout
    for text in (
        "system",
        "strategy",
        "step time",
        "objective",
        "relaxed objective",
        "exact evaluations",
        "wall time",
    ):
        assert text in out
    assert "relaxed search" in op.stderr  # the tqdm progress bar
    # The compiled programs went to the on-disk cache.
    assert any(cache_dir.iterdir())

    oj = _run(["optimize", str(problem), "--starts", "12", "--steps", "100", "--json"], cache_dir)
    o = _json(oj.stdout)
    assert o["objective_value"] == pytest.approx(s["objective_value"], rel=1e-12)
    assert 0 < o["num_exact_evals"] < o["grid_size"] and o["relaxed_objective"] > 0
    assert o["wall_s"] > 0 and o["design"]["num_accelerators"] == 8


def test_bad_problem_exits_2(tmp_path, cache_dir):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nglobal_batch = 8\n[system]\naccelerator = "h100-sxm5-80gb"\nnum_accelerators = 8\n[search]\nmode = "hardware"\n'
    )
    p = _run(["optimize", str(bad)], cache_dir)
    assert p.returncode == 2 and "search.mode" in p.stderr and "Traceback" not in p.stderr
