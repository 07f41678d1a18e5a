"""``codesign validate``: validate and calibrate the model against published measured runs.

Evaluates every expressible row of the measured-runs data set before calibration, calibrates
the efficiency parameters on random, by-source and by-generation splits and on all rows
(:func:`codesign.calibration.run_validation`), prints the per-source tables and writes, under
``--out``, ``validation.md`` (the report), ``parity.png`` and ``validation.json``; with
``--ablation`` also ``ablation.json``, and with ``--write-presets`` the calibrated presets.
A stored ``ablation.json`` in ``--out`` is reused for the report's ablation table;
``--ablation NAME ...`` fits only the named candidates and merges them into it (the fits are
deterministic, and the report flags a table whose candidates were fitted on other data).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from codesign.cli._args import positive_int

__all__ = ["DEFAULT_OUT", "ablation_sets", "add_arguments", "merge_ablation", "register", "run"]

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
        "--ablation",
        nargs="*",
        metavar="SET",
        default=None,
        help="also compare candidate parameter sets (slow: about 3 min each); with names, fit "
        "only those sets and merge them into the stored ablation.json of --out",
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


def ablation_sets(names: list[str] | None) -> dict | None:
    """The candidate sets that ``--ablation`` names: ``None`` for all of
    :data:`~codesign.calibration.ABLATION_SETS` (no names), else those sets in their table
    order; a :class:`~codesign.specs.SpecError` names any set the table lacks.

    >>> list(ablation_sets(["gemm_max"]))
    ['gemm_max']
    >>> ablation_sets([]) is None
    True
    """
    from codesign.calibration._validate import ABLATION_SETS
    from codesign.specs import SpecError

    if not names:
        return None
    for name in names:
        if name not in ABLATION_SETS:
            raise SpecError(
                "validate.ablation", name, "one of the candidate sets: " + "; ".join(ABLATION_SETS)
            )
    return {k: v for k, v in ABLATION_SETS.items() if k in names}


def merge_ablation(stored: dict | None, fresh: dict) -> dict:
    """``stored`` candidates (summaries, as in ``ablation.json``) with ``fresh`` ones
    (:func:`~codesign.calibration.ablation_summary`) in their place or added, in the order of
    :data:`~codesign.calibration.ABLATION_SETS` (candidates no longer listed there last).

    >>> merge_ablation({"gemm_max": 1, "old": 2}, {"+ attention_eff": 3, "gemm_max": 4})
    {'gemm_max': 4, '+ attention_eff': 3, 'old': 2}
    """
    from codesign.calibration._validate import ABLATION_SETS

    both = {**(stored or {}), **fresh}
    order = {name: i for i, name in enumerate(ABLATION_SETS)}
    return dict(sorted(both.items(), key=lambda kv: order.get(kv[0], len(order))))


def run(args) -> int:
    """Run ``codesign validate`` with parsed ``args``; returns the exit status."""
    from codesign import calibration
    from codesign.calibration._tables import ABLATION_HEAD, ablation_rows, text_table
    from codesign.config import catalog_dir

    t0 = time.perf_counter()
    sets = ablation_sets(args.ablation)  # before any fit: a bad name is an error at once
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
    out_dir = Path(args.out)
    abl_path = out_dir / "ablation.json"
    if args.ablation is not None:  # each candidate in its own process (see run_ablation)
        ablation = calibration.run_ablation(
            rows=rows, processes=True, progress=_say, sets=sets, **settings
        )
    if sets is not None:  # some candidates: the others come from the stored table
        stored = _read_ablation(abl_path) if abl_path.exists() else None
        ablation = merge_ablation(stored, calibration.ablation_summary(ablation))
        _say(f"ablation: {len(sets)} fitted, {len(ablation) - len(sets)} read from {abl_path}")
    stored_ablation = False
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
            ablation_stored=stored_ablation or sets is not None,  # merged: check its data
            data_notes=calibration.data_notes(rows),
            data=data,
        )
        (out_dir / "validation.md").write_text(md)
        (out_dir / "validation.json").write_text(
            json.dumps({k: v for k, v in res.items() if k != "_dataset"}, indent=1, default=str)
        )
        if ablation and not stored_ablation:
            summary = ablation if sets is not None else calibration.ablation_summary(ablation)
            abl_path.write_text(json.dumps(summary, indent=1, default=str))
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
