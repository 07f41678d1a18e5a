"""``codesign sites JOB.toml``: one job over several sites (buildings, regions), balanced."""

from __future__ import annotations

import json

from codesign.cli._args import add_set_argument

__all__ = ["register"]


def _cmd_sites(args) -> int:
    from codesign import sites

    job = sites.load_sites(args.job, args.set)
    info = None
    if args.balance:
        job, info = sites.balance(job)
    r = sites.evaluate_sites(job)
    if args.json:
        d = sites.sites_to_dict(job, r)
        if info is not None:
            d["balance"] = info
        print(json.dumps(d, indent=2))
        return 0
    print(sites.format_sites(job, r))
    if info is not None:
        even = " / ".join(f"{x:g}" for x in info["even_shares"])
        print(
            f"balanced over {info['splits']:,} splits: even split ({even}) "
            f"{info['even_step_s']:.3f} s -> {info['best_step_s']:.3f} s"
            + ("" if info["fits"] else "  (no split fits in memory)")
        )
    return 0


def register(sub) -> None:
    """Add the ``sites`` command."""
    p = sub.add_parser(
        "sites",
        help="one job over several sites (heterogeneous ones included): step, split, costs",
        description=(
            "Evaluate a job over several sites joined by a cross-site link (codesign.sites): "
            "each site's own step, idle share and memory, the job's step, balance loss, "
            "costs, and the step against homogeneous clusters of the same peak FLOP/s."
        ),
    )
    p.add_argument("job", help="a sites TOML file ([model], [training], [link], [[sites]])")
    p.add_argument(
        "--balance",
        action="store_true",
        help="split the work (batch for dp across, layers for pp across) so that no site "
        "waits more than it must, over every valid split",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    add_set_argument(p)
    p.set_defaults(func=_cmd_sites)
