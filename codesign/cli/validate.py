"""``codesign validate``: validate and calibrate the model against published measured runs."""

from __future__ import annotations

__all__ = ["register"]


def register(sub) -> None:
    """Add ``validate`` to the ``codesign`` command line."""
    from codesign.calibration import validation

    p = sub.add_parser(
        "validate",
        help="validate and calibrate the model against measured runs (per-source tables, report, plot)",
        description="Evaluate every expressible row of the measured-runs data set before calibration, "
        "calibrate the efficiency parameters on random, by-source and by-generation splits, and "
        "report per-source errors on training and held-out rows.",
    )
    validation.add_arguments(p)
    p.set_defaults(func=validation.run_cli)
