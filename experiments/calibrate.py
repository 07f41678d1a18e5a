"""Calibrate the efficiency parameters against the measured runs and report (issue 3).

The same as ``codesign validate`` (see :mod:`codesign.cli.validate`), with ``--out``
defaulting to ``experiments/results``: evaluates every expressible row of
``codesign/data/measured_runs.json`` with the ``codesign.Efficiency()`` defaults, calibrates
the named efficiency parameters with Optax on random splits, on each source held out, on each
accelerator generation held out and on all rows (the presets), prints the per-source table
(before/after, training/held-out rows) and writes ``experiments/results/validation.md``,
``experiments/results/parity.png`` and ``experiments/results/validation.json``.

Usage::

    python experiments/calibrate.py                    # tables + report + parity plot
    python experiments/calibrate.py --ablation         # also compare candidate parameter sets
    python experiments/calibrate.py --ablation "gemm_max"   # refit one set, merge into ablation.json
    python experiments/calibrate.py --write-presets    # also rewrite codesign/hardware/efficiency.toml
    python experiments/calibrate.py --data PATH --out DIR --steps 1500 --seed 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

RESULTS_DIR = HERE / "results"


def main(argv=None) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    from codesign.cli.validate import add_arguments, run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.set_defaults(out=str(RESULTS_DIR))
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
