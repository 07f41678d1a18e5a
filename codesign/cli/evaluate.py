"""``codesign evaluate RUN.toml`` and ``codesign presets``: one step's report, the catalog."""

from __future__ import annotations

import json

__all__ = ["register"]


def _cmd_evaluate(args) -> int:
    from codesign.config import load_run
    from codesign.report import format_report, report_to_dict
    from codesign.step import evaluate

    cfg = load_run(args.run)
    report = evaluate(*cfg.specs())
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


def register(sub) -> None:
    """Add ``evaluate`` and ``presets`` to the ``codesign`` command line."""
    e = sub.add_parser("evaluate", help="evaluate one training step of a run TOML")
    e.add_argument(
        "run", help="run TOML file ([model], [training], [system], [[system.tiers]], [strategy])"
    )
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.set_defaults(func=_cmd_evaluate)
    pr = sub.add_parser("presets", help="list the catalog's presets")
    pr.add_argument("kind", nargs="?", choices=["models", "accelerators", "fabrics", "efficiency"])
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=_cmd_presets)
