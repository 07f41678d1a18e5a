"""``codesign validate``: validate and calibrate the model against published measured runs.

Evaluates every expressible row of the measured-runs data set before calibration, calibrates
the efficiency parameters on random, by-source and by-generation splits and on all rows
(:func:`codesign.calibration.run_validation`), prints the per-source tables and writes, under
``--out``, ``validation.md`` (the report), ``parity.png`` and ``validation.json``; with
``--ablation`` also ``ablation.json``, and with ``--write-presets`` the calibrated presets.
A stored ``ablation.json`` in ``--out`` is reused for the report's ablation table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from codesign.cli._args import positive_int

__all__ = ["DEFAULT_OUT", "add_arguments", "register", "run"]

DEFAULT_OUT = "validation-report"
"""Default ``--out``: a directory of that name in the current directory."""


def register(sub) -> None:
    """Add ``validate`` to the ``codesign`` command line."""
    p = sub.add_parser(
        "validate",
        help="validate and calibrate the model against measured runs (per-source tables, report, plot)",
        description="Evaluate every expressible row of the measured-runs data set before calibration, "
        "calibrate the efficiency parameters on random, by-source and by-generation splits, and "
        "report per-source errors on training and held-out rows.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``codesign validate`` (also used by ``experiments/calibrate.py``)."""
    p.add_argument("--data", default=None, help="measured runs JSON (default: the package's copy)")
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help="directory for validation.md, parity.png and validation.json (default: %(default)s)",
    )
    p.add_argument(
        "--no-report", action="store_true", help="print only; do not write the report or plot"
    )
    p.add_argument(
        "--steps", type=positive_int, default=1500, help="Adam steps per fit (default 1500)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the first random split (default 0)")
    p.add_argument(
        "--random-splits",
        type=positive_int,
        default=10,
        help="number of random splits, seeds --seed, --seed + 1, ... (default 10)",
    )
    p.add_argument(
        "--prior", type=float, default=1e-5, help="pull towards the start values (default 1e-5)"
    )
    p.add_argument(
        "--json", action="store_true", help="print the results as JSON instead of tables"
    )
    p.add_argument(
        "--ablation", action="store_true", help="also compare candidate parameter sets (slow)"
    )
    p.add_argument(
        "--write-presets",
        nargs="?",
        const="default",
        help="write the calibrated presets (default path: the catalog's efficiency.toml, codesign/hardware/ in the package)",
    )


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _read_ablation(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run(args) -> int:
    """Run ``codesign validate`` with parsed ``args``; returns the exit status."""
    from codesign import calibration
    from codesign.calibration._tables import ABLATION_HEAD, ablation_rows, text_table
    from codesign.config import catalog_dir

    t0 = time.perf_counter()
    data = Path(args.data) if args.data else calibration.DATA_PATH
    rows = calibration.load_rows(data) if args.data else calibration.load_all_rows()
    ds = calibration.build_dataset(rows)
    _say(
        f"{len(ds['points'])} rows with one prediction, {len(ds['ranges'])} micro-batch ranges, "
        f"{len(ds['skipped'])} not expressible"
    )
    settings = dict(
        steps=args.steps, seed=args.seed, random_splits=args.random_splits, prior=args.prior
    )
    res = calibration.run_validation(dataset=ds, progress=_say, **settings)
    ablation = None
    if args.ablation:  # each candidate in its own process (see run_ablation)
        ablation = calibration.run_ablation(rows=rows, processes=True, progress=_say, **settings)
    out_dir = Path(args.out)
    stored_ablation = False
    abl_path = out_dir / "ablation.json"
    if ablation is None and not args.no_report and abl_path.exists():
        ablation = _read_ablation(abl_path)
        if ablation is not None:
            stored_ablation = True
            _say(f"ablation: reusing {abl_path} (run with --ablation to recompute)")
    if args.json:
        out = {k: v for k, v in res.items() if k != "_dataset"}
        if ablation:
            out["ablation"] = ablation
        print(json.dumps(out, indent=1, default=str))
    else:
        print(calibration.format_text(res))
        if ablation and not stored_ablation:
            print("Ablation of the parameter set")
            print(text_table(ABLATION_HEAD, ablation_rows(ablation)))
    if not args.no_report:
        out_dir.mkdir(parents=True, exist_ok=True)
        fig = calibration.parity_figure(res)
        fig.savefig(out_dir / "parity.png", dpi=130)
        md = calibration.render_markdown(
            res,
            ablation=ablation,
            findings=calibration.findings(res),
            plot="parity.png",
            ablation_stored=stored_ablation,
            data_notes=calibration.data_notes(rows),
            data=data,
        )
        (out_dir / "validation.md").write_text(md)
        (out_dir / "validation.json").write_text(
            json.dumps({k: v for k, v in res.items() if k != "_dataset"}, indent=1, default=str)
        )
        if ablation and not stored_ablation:
            abl_path.write_text(
                json.dumps(calibration.ablation_summary(ablation), indent=1, default=str)
            )
        _say(
            f"wrote {out_dir / 'validation.md'}, {out_dir / 'parity.png'}, "
            f"{out_dir / 'validation.json'}"
        )
    if args.write_presets:
        path = (
            Path(catalog_dir()) / "efficiency.toml"
            if args.write_presets == "default"
            else Path(args.write_presets)
        )
        path.write_text(calibration.efficiency_toml(res))
        _say(f"wrote {path}")
    _say(f"done in {time.perf_counter() - t0:.0f} s")
    return 0
