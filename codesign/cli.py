"""Command-line interface: ``codesign evaluate RUN.toml [--json]`` and friends.

Bad input (a :class:`~codesign.specs.SpecError`) prints one line naming the field, its value
and what is allowed, and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from codesign.report import format_report, report_to_dict

__all__ = ["main", "report_to_dict", "format_report"]


def _cmd_evaluate(args) -> int:
    import codesign as cd

    cfg = cd.load_run(args.run)
    report = cd.evaluate(*cfg.specs())
    d = report_to_dict(report, cfg)
    print(json.dumps(d, indent=2) if args.json else format_report(d, cfg))
    return 0


def _cmd_presets(args) -> int:
    from codesign.config import catalog

    cat = catalog()
    kinds = [args.kind] if args.kind else ["models", "accelerators", "fabrics", "efficiency"]
    if args.json:
        print(json.dumps({k: cat[k] for k in kinds}, indent=2))
        return 0
    for k in kinds:
        print(f"[{k}]")
        for name, t in cat[k].items():
            print(f"  {name:<24} {t.get('name', '')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="codesign", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("evaluate", help="evaluate one training step of a run TOML")
    e.add_argument("run", help="run TOML file ([model], [training], [system], [[system.tiers]], [strategy])")
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.set_defaults(func=_cmd_evaluate)
    pr = sub.add_parser("presets", help="list the catalog's presets")
    pr.add_argument("kind", nargs="?", choices=["models", "accelerators", "fabrics", "efficiency"])
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=_cmd_presets)
    _register_extra_commands(sub)
    return p


def _register_extra_commands(sub) -> None:
    """Commands defined next to their drivers: ``validate`` (validation), ``sweep``/``optimize``."""
    from codesign import problem, validation

    for m in (validation, problem):
        m.register_cli(sub)


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
