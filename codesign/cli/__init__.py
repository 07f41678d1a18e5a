"""The ``codesign`` command line: every command, its arguments and its printed output.

Commands: ``evaluate`` and ``presets`` (:mod:`codesign.cli.evaluate`), ``optimize`` and
``sweep`` (:mod:`codesign.cli.search`), ``validate`` (:mod:`codesign.cli.validate`).  The
library below never prints: drivers return data and these modules format it.

Bad input (a :class:`~codesign.specs.SpecError`) prints one line naming the field, its value
and what is allowed, and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    from codesign.cli import evaluate, search, validate

    p = argparse.ArgumentParser(prog="codesign", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for module in (evaluate, search, validate):
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from codesign.specs import SpecError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        print(f"codesign: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0
