"""The README's snippets run, and print what the README says they print.

Every ```python block that is followed by a line ``prints`` and a plain ``` block is run in a
fresh interpreter from the repository root, and its standard output must equal that block.
The worked example's report (the block after "and prints:") must equal what
``codesign evaluate`` prints for the example run file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

_PY_WITH_OUTPUT = re.compile(r"```python\n(.*?)```\n\nprints\n\n```\n(.*?)```", re.S)
SNIPPETS = _PY_WITH_OUTPUT.findall(README)


def _run(args: list[str]) -> str:
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_readme_has_snippets_with_output():
    assert SNIPPETS, "no ```python block followed by its printed output in the README"


@pytest.mark.parametrize(
    "code,expected", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))]
)
def test_python_snippet_prints_what_the_readme_shows(code: str, expected: str):
    assert _run([sys.executable, "-c", code]) == expected


def test_worked_example_output_matches():
    m = re.search(r"`codesign evaluate (\S+)` and prints:\n\n```\n(.*?)```", README, re.S)
    assert m, "the worked example block is missing"
    out = _run([sys.executable, "-m", "codesign.cli", "evaluate", m.group(1)])
    assert out == m.group(2)


def test_unmeasured_architecture_figures_match_the_presets():
    """The set-up section's figures for an accelerator of an unmeasured architecture (a whole
    generation held out: fitted on A100 predicting H100, and the reverse) are the ones the
    calibrated presets store and ``codesign evaluate`` prints (``calibrated_unmeasured_error``);
    a refit that moves them must move the README too."""
    import tomllib

    m = re.search(r"predicting H100, and the reverse: ([\d.]+) and ([\d.]+) %\)", README)
    assert m, "the unmeasured-architecture sentence is missing"
    presets = tomllib.loads((ROOT / "codesign" / "hardware" / "efficiency.toml").read_text())
    stored = {
        tuple(
            t["calibrated_unmeasured_error"][k]["mape_pct"]
            for k in ("train A100, test H100", "train H100, test A100")
        )
        for t in presets.values()
        if isinstance(t, dict) and "calibrated_unmeasured_error" in t
    }
    assert stored == {(float(m.group(1)), float(m.group(2)))}
