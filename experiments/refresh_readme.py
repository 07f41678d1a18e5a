"""Rerun the README's printed examples and write what they print back into it.

The README shows, after every ```python block followed by a line ``prints``, the block's
standard output, and after "`codesign evaluate FILE` and prints:" the command's report;
``tests/test_readme.py`` checks both, byte for byte.  When the calibrated presets change,
those outputs change with them: this script runs each snippet in a fresh interpreter from
the repository root (as the test does) and replaces the shown output with the new one, so
no figure is ever edited by hand.  Prose that quotes a number (the validation summary, the
sensitivity excerpt) is not touched: ``--check`` lists the blocks that differ and exits 1.

Usage::

    python experiments/refresh_readme.py           # rewrite README.md in place
    python experiments/refresh_readme.py --check   # only report what differs
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNIPPET = re.compile(r"(```python\n(.*?)```\n\nprints\n\n```\n)(.*?)(```)", re.S)
WORKED = re.compile(r"(`codesign evaluate (\S+)` and prints:\n\n```\n)(.*?)(```)", re.S)


def _run(args: list[str]) -> str:
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{p.stderr[-3000:]}")
    return p.stdout


def refresh(text: str, say=print) -> tuple[str, int]:
    """``(new README text, number of blocks whose output changed)``."""
    changed = 0

    def snippet(m: re.Match) -> str:
        nonlocal changed
        out = _run([sys.executable, "-c", m.group(2)])
        if out != m.group(3):
            changed += 1
            say(f"snippet starting {m.group(2).splitlines()[0][:60]!r}: output changed")
        return m.group(1) + out + m.group(4)

    def worked(m: re.Match) -> str:
        nonlocal changed
        out = _run([sys.executable, "-m", "codesign.cli", "evaluate", m.group(2)])
        if out != m.group(3):
            changed += 1
            say(f"worked example ({m.group(2)}): output changed")
        return m.group(1) + out + m.group(4)

    text = SNIPPET.sub(snippet, text)
    text = WORKED.sub(worked, text)
    return text, changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report, do not write")
    args = ap.parse_args(argv)
    path = ROOT / "README.md"
    new, changed = refresh(path.read_text())
    if args.check:
        print(f"{changed} block(s) differ")
        return 1 if changed else 0
    if changed:
        path.write_text(new)
    print(f"{changed} block(s) rewritten in {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
