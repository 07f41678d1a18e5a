"""``codesign evaluate RUN.toml`` and ``codesign presets``: one step's report, the catalog."""

from __future__ import annotations

import json

from codesign.cli._args import add_set_argument

__all__ = ["register"]


def _cmd_evaluate(args) -> int:
    from codesign.config import load_run
    from codesign.report import format_report, report_to_dict
    from codesign.step import evaluate

    cfg = load_run(args.run, args.set)
    report = evaluate(*cfg.specs())
    d = report_to_dict(report, cfg)
    print(json.dumps(d, indent=2) if args.json else format_report(d, cfg))
    return 0


PRESET_KINDS = ("models", "accelerators", "fabrics", "efficiency", "reliability")


def _cmd_presets(args) -> int:
    from codesign.config import catalog
    from codesign.goodput import reliability_presets

    cat = {**catalog(), "reliability": reliability_presets()}
    kinds = [args.kind] if args.kind else list(PRESET_KINDS)
    if args.json:
        print(json.dumps({k: cat[k] for k in kinds}, indent=2))
        return 0
    for k in kinds:
        print(f"[{k}]")
        for name, t in cat[k].items():
            print(f"  {name:<24} {t.get('name', '')}")
            if k in ("accelerators", "reliability"):
                if k == "accelerators":
                    print(f"  {'':<24} {_accelerator_figures(t)}")
                print(_source_lines(t.get("source", ""), args.sources))
        if k == "reliability":
            print(
                '  (a run file without [system.reliability], or with preset = "auto", gets its\n'
                "   platform's: rsc1-a100 on A100, gb200-nvl72 where the scale-up domain is wider\n"
                '   than 8, llama3-h100 otherwise; preset = "none" turns failures off)'
            )
    return 0


_SOURCE_CHARS = 100
"""Characters of an accelerator's source shown by ``codesign presets accelerators`` (all of it
with ``--sources``)."""


def _accelerator_figures(t: dict) -> str:
    """The key figures of an accelerator preset on one line (dense TFLOP/s; 0 = unsupported)."""

    def tf(key: str, fmt: str = "{:,.0f}") -> str:
        v = float(t.get(key, 0.0))
        return fmt.format(v) if v > 0 else "-"

    return (
        f"BF16/FP8/FP4 {tf('peak_tflops')}/{tf('peak_tflops_fp8')}/{tf('peak_tflops_fp4')} "
        f"TFLOP/s dense, HBM {float(t.get('hbm_gb', 0.0)):g} GB at "
        f"{float(t.get('hbm_tbps', 0.0)):g} TB/s, host link "
        f"{float(t.get('host_link_gbps', 0.0)):g} GB/s, exp {tf('exp_tera_per_s', '{:g}e12/s')}"
    )


def _source_lines(source: str, full: bool, indent: int = 27, width: int = 140) -> str:
    """The source, cut to :data:`_SOURCE_CHARS` characters (whole with ``full``), indented."""
    import textwrap

    text = " ".join(source.split())
    if not full and len(text) > _SOURCE_CHARS:
        text = text[: _SOURCE_CHARS - 3].rstrip() + "..."
    pad = " " * indent
    return textwrap.fill(
        f"source: {text}",
        width=width,
        initial_indent=pad,
        subsequent_indent=pad + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def register(sub) -> None:
    """Add ``evaluate`` and ``presets`` to the ``codesign`` command line."""
    e = sub.add_parser("evaluate", help="evaluate one training step of a run TOML")
    e.add_argument(
        "run", help="run TOML file ([model], [training], [system], [[system.tiers]], [strategy])"
    )
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    add_set_argument(e)
    e.set_defaults(func=_cmd_evaluate)
    pr = sub.add_parser("presets", help="list the catalog's presets")
    pr.add_argument("kind", nargs="?", choices=list(PRESET_KINDS))
    pr.add_argument("--json", action="store_true")
    pr.add_argument(
        "--sources",
        action="store_true",
        help="print each accelerator's whole source (default: its first 100 characters)",
    )
    pr.set_defaults(func=_cmd_presets)
