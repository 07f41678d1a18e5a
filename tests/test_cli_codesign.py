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

    # This grid is small: optimize sweeps it itself, and says so.
    au = _run(["optimize", str(problem), "--json"], cache_dir)
    assert au.returncode == 0, au.stderr
    a = _json(au.stdout)
    assert a["method"] == "sweep" and a["command"] == "optimize"
    assert a["objective_value"] == pytest.approx(s["objective_value"], rel=1e-12)

    op = _run(
        ["optimize", str(problem), "--starts", "12", "--steps", "100", "--method", "relaxed"],
        cache_dir,
    )
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

    oj = _run(
        [
            "optimize",
            str(problem),
            "--starts",
            "12",
            "--steps",
            "100",
            "--json",
            "--method",
            "relaxed",
        ],
        cache_dir,
    )
    # A repeat run loads its programs from the on-disk cache and prints nothing else: no
    # "E1201 cpu_aot_loader" line per cached program from XLA's C++ log.
    assert oj.returncode == 0 and oj.stderr.strip() == "", oj.stderr[-2000:]
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


def test_help_and_version_answer_without_importing_jax():
    code = (
        "import sys\n"
        "from codesign.cli import main\n"
        "for args in (['--help'], ['optimize', '--help'], ['--version']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "print('jax imported:', 'jax' in sys.modules)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("jax imported: False")
    from codesign import __version__

    assert f"codesign {__version__}" in p.stdout
    assert "usage: codesign optimize" in p.stdout


NO_FIT = """[model]
preset = "gpt3-175b"
[training]
global_batch = 1536
[system]
accelerator = "a100-sxm4-40gb"
num_accelerators = 64
[constraints]
capex_max_usd = 1e6
[search]
mode = "strategy"
tp = [4, 8]
pp = [4, 8, 16]
microbatch = [1]
"""


def test_empty_sweep_says_which_rule_excluded_the_grid(tmp_path, cache_dir):
    pb = tmp_path / "nofit.toml"
    pb.write_text(NO_FIT)
    p = _run(["sweep", str(pb), "--no-progress"], cache_dir)
    assert p.returncode == 1, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("no feasible design"))
    # 175B on 64 GPUs of 40 GB never fits, and 64 A100s cost more than 1 M$.
    assert "0 fit in memory" in line and "0 are within the capex budget" in line, line
    assert "valid layouts" in line


def test_design_json_counts_are_ints_and_domains_capped_by_the_cluster():
    from codesign.cli.search import _describe_design, _design_dict
    from codesign.config import load_run_dict

    cfg = load_run_dict(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 48},
            "system": {
                "accelerator": "h100-sxm5-80gb",
                "num_accelerators": 24,
                "tiers": [
                    {"preset": "nvlink4", "domain": 8},
                    {"preset": "ib-ndr-400", "domain": 32},
                ],
            },
            "strategy": {"tp": 2, "pp": 1, "dp": 12},
        }
    )
    d = _design_dict(cfg)
    assert d["num_accelerators"] == 24 and isinstance(d["num_accelerators"], int)
    assert all(isinstance(v, int) for k, v in d["strategy"].items() if k != "recompute")
    assert [t["domain"] for t in d["tiers"]] == [8, 24]
    assert "(domain 24)" in _describe_design(cfg)[0]


def test_single_accelerator_problem_loads():
    from codesign.search import load_problem_dict

    pb = load_problem_dict(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 64},
            "system": {"accelerator": "h100-sxm5-80gb"},
            "search": {"num_accelerators": [1]},
        }
    )
    assert float(pb.cfg.system.num_accelerators) == 1.0


def test_runners_up_within_the_expected_error_are_counted():
    """The sweep's runners-up closer to the optimum than its setting's held-out error are a
    tie for the model: the line counts them and gives every gap."""
    from types import SimpleNamespace

    from codesign.cli.search import _within_expected_error

    cfg = SimpleNamespace(names={"held_out": {"rows": 12, "mape_pct": 5.0}})
    line = _within_expected_error(cfg, 10.0, [10.2, 10.5, 10.6, 12.0])
    assert "2 of the 4 runners-up within the expected error (+-5.0 %)" in line
    assert line.endswith("gaps +2.0 %, +5.0 %, +6.0 %, +20.0 %")
    # no measured runs of the setting, no calibrated preset, or nothing found: no line
    assert (
        _within_expected_error(SimpleNamespace(names={"held_out": {"rows": 0}}), 10.0, [11]) == ""
    )
    assert _within_expected_error(SimpleNamespace(names={"held_out": None}), 10.0, [11]) == ""
    assert _within_expected_error(None, float("inf"), []) == ""


@pytest.mark.slow
def test_sweep_json_names_the_capacity_factor(cache_dir):
    """A problem with a capacity-factor axis: the point, the design and the report's ``moe``
    block agree on the chosen routing, and the dropped share keeps the problem's cap."""
    path = ROOT / "experiments" / "problems" / "mixtral-8x7b-token-drop.toml"
    p = _run(["sweep", str(path), "--json", "--no-progress"], cache_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    d = _json(p.stdout)
    c = d["top"][0]["point"]["strategy.moe_capacity_factor"]
    assert d["design"]["strategy"]["moe_capacity_factor"] == c
    assert d["report"]["moe"]["capacity_factor"] == c
    assert d["report"]["moe"]["dropped_fraction"] <= 0.01
    assert d["grid_size"] == 5 * 4 * 4 * 4 * 3 * 3 * 2  # capacity x tp, pp, ep, mb, rec, zero
    t = _run(["sweep", str(path), "--no-progress"], cache_dir)
    line = next(ln for ln in t.stdout.splitlines() if ln.startswith("strategy  "))
    assert line.endswith("dropless" if c == 0 else f"capacity={c:g}")
    assert "moe_capacity_factor" in next(
        ln for ln in t.stdout.splitlines() if ln.startswith("grid")
    )
