"""The ``codesign`` command line: every command, its arguments and its printed output.

Commands: ``evaluate`` and ``presets`` (:mod:`codesign.cli.evaluate`), ``optimize`` and
``sweep`` (:mod:`codesign.cli.search`), ``sensitivity`` (:mod:`codesign.cli.sensitivity`),
``sites`` (:mod:`codesign.cli.sites`), ``validate`` (:mod:`codesign.cli.validate`).  The
library below never prints: drivers return data and these modules format it.

Bad input (a :class:`~codesign.specs.SpecError`) prints one line naming the field, its value
and what is allowed, and exits with status 2, without a traceback.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "build_parser"]

DESCRIPTION = (
    "Co-design an AI training cluster and its parallel strategy: evaluate one training step "
    "(time, memory, dollars, energy), search clusters and strategies exactly or by gradient "
    "descent, measure sensitivities, and validate against measured runs."
)


def build_parser():
    """The argument parser of every command."""
    from codesign._version import __version__
    from codesign.cli import evaluate, search, sensitivity, sites, validate
    from codesign.cli._args import Parser

    p = Parser(prog="codesign", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"codesign {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (evaluate, search, sensitivity, sites, validate):
        module.register(sub)
    for action in sub._choices_actions:  # a command's --help opens with its one-line summary
        cmd = sub.choices[action.dest]
        if cmd.description is None and action.help:
            cmd.description = action.help[0].upper() + action.help[1:] + "."
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and --version exit here, before JAX is imported
    # XLA's C++ log prints a spurious "E1201 cpu_aot_loader ... could lead to SIGILL" line per
    # program loaded from the on-disk compilation cache (tuning flags such as
    # +prefer-no-gather are compared as CPU features); real failures still raise Python
    # exceptions.  Importing JAX sets TF_CPP_MIN_LOG_LEVEL=1 for child processes, so a value
    # found here is no sign of a user's wish: CODESIGN_XLA_LOG=1 keeps the log as it is.
    if not os.environ.get("CODESIGN_XLA_LOG"):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    # One JAX CPU device per core, so that a sweep shards over all of them (unless the
    # user's XLA_FLAGS says otherwise; accelerator backends are unaffected).
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        n = os.cpu_count() or 1
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    import warnings

    def one_line(message, category, filename, lineno, file=None, line=None):
        print(f"codesign: warning: {message}", file=sys.stderr)

    warnings.showwarning = one_line
    import jax

    jax.config.update("jax_enable_x64", True)
    from codesign.specs import SpecError

    try:
        return args.func(args)
    except SpecError as e:
        print(f"codesign: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0
