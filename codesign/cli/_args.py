"""Argument types and the parser class shared by the commands (one-line errors, exit 2)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["Parser", "add_set_argument", "positive_int"]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``codesign: error: ...``) and exit 2,
    like the library's :class:`~codesign.specs.SpecError` messages."""

    def error(self, message: str):  # noqa: D102 (argparse's signature)
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def positive_int(text: str) -> int:
    """An integer >= 1 (``--starts``, ``--steps``, ``--top-k``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: a positive integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is invalid: a positive integer")
    return v


def add_set_argument(p) -> None:
    """``--set KEY=VALUE`` (repeatable): override a key of the TOML file before it is read
    (:func:`codesign._overrides.apply_sets`)."""
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the file, e.g. --set strategy.tp=4 --set "
        "system.tiers[1].bandwidth_gbps=100 (repeatable; the value is read as TOML)",
    )
