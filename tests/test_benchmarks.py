"""The speed benchmark scripts run (their figures are wall-clock times, which no test checks;
what a test checks is that the script still runs against the library's current internals)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_evaluate_quick_runs():
    """``experiments/bench_evaluate.py --quick`` (``make bench`` without ``--quick``) in a
    fresh interpreter: every section prints, including the compiled sweep call's memory,
    which reaches into ``codesign.search._sweep`` and broke once when that call's signature
    grew; both grids report a best step."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "bench_evaluate.py"), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for needle in (
        "co-design grid:",
        "strategy-only grid:",
        "peak memory:",
        "one-at-a-time",
        "summary",
    ):
        assert needle in text, needle
    mib = float(re.search(r"temp buffers of one sweep call ([0-9.]+) MiB", text).group(1))
    assert mib >= 0
    steps = [float(s) for s in re.findall(r"best step ([0-9.]+) s", text)]
    assert len(steps) == 2 and all(s > 0 for s in steps)


@pytest.mark.slow
def test_bench_compile_quick_runs_both_settings_and_finds_the_same_values():
    """``experiments/bench_compile.py --quick --repeats 1``: both settings run in their own
    processes, every measure prints, and the values agree bit for bit (the compiler options
    change compile time only)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [sys.executable, str(ROOT / "experiments" / "bench_compile.py"), "--quick"]
    out = subprocess.run(
        [*cmd, "--repeats", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for needle in ("first evaluate, deepseek-v3", "co-design grid: warm", "max RSS (GB)"):
        assert needle in out.stdout, needle
    assert "same values, bit for bit, in every run: True" in out.stdout
