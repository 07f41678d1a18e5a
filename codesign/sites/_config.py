"""Sites jobs from dicts (the ``[sites]`` TOML form) and their readable table."""

from __future__ import annotations

from codesign.sites._balance import even_shares
from codesign.sites._evaluate import _per_layer_kinds
from codesign.sites._spec import (
    ACROSS,
    SCHEDULES,
    Site,
    Sites,
    SitesReport,
    _check,
    _replace,
    _total_work,
    _with_shares,
)
from codesign.specs import SpecError, Tier

_SITE_ONLY = ("name", "share", "strategy", "efficiency")


def _link(doc, site_run: dict) -> Tier:
    """The cross-site tier: a fabric preset with overrides and/or :class:`Tier` fields, read
    as one more tier of the first site (so a preset gets its calibrated efficiency like any
    tier of a run file)."""
    from codesign.config import load_run_dict

    if not isinstance(doc, dict):
        raise SpecError("link", doc, "a table (a fabric preset and/or Tier fields)")
    d = dict(doc)
    d.setdefault("cross_site", 1.0)
    d.setdefault("domain", 0.0)  # every site: set by the job
    tiers = list(site_run["system"].get("tiers") or [])
    if not tiers:
        raise SpecError("sites[0].tiers", tiers, "the site's tiers, innermost first")
    run = dict(site_run, system=dict(site_run["system"], tiers=[*tiers, d]))
    try:
        cfg = load_run_dict(run, check=False)
    except SpecError as e:
        field = e.field.replace(f"system.tiers[{len(tiers)}]", "link")
        raise SpecError(field, e.value, e.allowed) from None
    return cfg.system.tiers[-1]


def load_sites_dict(doc: dict, check: bool = True) -> Sites:
    """A :class:`~codesign.sites.Sites` job from a dict (the ``[sites]`` form of a TOML file).

    Keys: ``model`` and ``training`` (as in a run file), ``link`` (a fabric preset such as
    ``cross-building`` or ``cross-region`` and/or :class:`~codesign.specs.Tier` fields),
    ``across`` (``"dp"`` or ``"pp"``), ``schedule`` (``"1f1b"`` or ``"crosspipe"``) and
    ``sites``: a list of tables, each a run file's ``system`` table (``accelerator``,
    ``num_accelerators``, ``tiers`` innermost first, ...) plus ``strategy`` (the site's inner
    strategy, ``dp`` counted inside the site), optional ``name``, ``efficiency`` and
    ``share`` (sequences per step for ``dp``, layers for ``pp``; default
    :func:`~codesign.sites.even_shares`).  Each site is checked as a run of its own (its
    share of the batch, or of the layers); a bad field is named ``sites[i].<field>``.
    ``check=False`` skips those run checks and, when the sites' strategies admit no valid
    split, leaves the shares in proportion to replicas or stages (for a search such as
    :func:`~codesign.sites.best_strategies` to replace the strategies).
    """
    from codesign.config import load_run_dict

    if not isinstance(doc, dict):
        raise SpecError("sites document", doc, "a dict of tables")
    for k in ("model", "training", "link", "sites"):
        if k not in doc:
            raise SpecError(k, None, "a table (see codesign.sites.load_sites_dict)")
    across, schedule = doc.get("across", "dp"), doc.get("schedule", "1f1b")
    if across not in ACROSS:
        raise SpecError("across", across, f"one of {ACROSS}")
    if schedule not in SCHEDULES:
        raise SpecError("schedule", schedule, f"one of {SCHEDULES}")
    if not isinstance(doc["sites"], list) or not doc["sites"]:
        raise SpecError("sites", doc["sites"], "a non-empty list of site tables")
    sites, base, runs = [], None, []
    for i, sd in enumerate(doc["sites"]):
        if not isinstance(sd, dict) or "strategy" not in sd:
            raise SpecError(f"sites[{i}]", sd, "a table with a system and a strategy")
        run = {
            "model": doc["model"],
            "training": doc["training"],
            "system": {k: v for k, v in sd.items() if k not in _SITE_ONLY},
            "strategy": sd["strategy"],
        }
        if "efficiency" in sd:
            run["efficiency"] = sd["efficiency"]
        try:
            cfg = load_run_dict(run, check=False)
        except SpecError as e:
            raise SpecError(f"sites[{i}].{e.field}", e.value, e.allowed) from None
        base = base or cfg
        runs.append(run)
        sites.append(
            Site(
                system=cfg.system,
                strategy=cfg.strategy,
                efficiency=cfg.efficiency,
                share=float(sd.get("share", 0.0)),
                name=str(sd.get("name", f"site {i}")),
            )
        )
    job = Sites(
        model=base.model,
        training=base.training,
        sites=tuple(sites),
        link=_link(doc["link"], runs[0]),
        across=across,
        schedule=schedule,
    )
    _check(job)
    total = _total_work(job)
    if all(float(s.share) == 0 for s in job.sites):
        try:
            job = _with_shares(job, even_shares(job))
        except SpecError:
            if check:
                raise
            w = [float(s.strategy.dp if across == "dp" else s.strategy.pp) for s in job.sites]
            job = _with_shares(job, [total * x / sum(w) for x in w])
    if abs(sum(float(s.share) for s in job.sites) - total) > 1e-9:
        what = "training.global_batch" if across == "dp" else "the model's layers"
        raise SpecError(
            "sites[].share", [float(s.share) for s in job.sites], f"shares summing to {what}"
        )
    if check:
        check_sites(job)
    return job


def load_sites(path, sets=()) -> Sites:
    """A :class:`~codesign.sites.Sites` job from a TOML file (:func:`load_sites_dict`'s keys
    as top-level tables: ``[model]``, ``[training]``, ``[link]``, ``across``, ``schedule``
    and ``[[sites]]`` with ``[sites.strategy]``, ``[[sites.tiers]]``), with the ``KEY=VALUE``
    overrides ``sets`` applied first (:func:`codesign._overrides.apply_sets`)."""
    from codesign._overrides import apply_sets
    from codesign.config import read_toml

    doc = apply_sets(read_toml(path, "sites file"), sets)
    doc.pop("title", None)
    doc.pop("description", None)
    return load_sites_dict(doc)


def sites_to_dict(job: Sites, r: SitesReport) -> dict:
    """A JSON-ready dict of a :class:`~codesign.sites.SitesReport`."""
    per = [
        {
            "name": s.name,
            "num_accelerators": float(s.system.num_accelerators),
            "share": float(s.share),
            "busy_s": float(r.site_busy_s[i]),
            "idle_fraction": float(r.idle_fraction[i]),
            "memory_gb": float(r.memory_gb[i]),
            "fits": bool(r.site_fits[i]),
            "vs_homogeneous": float(r.vs_homogeneous[i]),
        }
        for i, s in enumerate(job.sites)
    ]
    return {
        "across": job.across,
        "schedule": job.schedule,
        "step_time_s": float(r.step_time_s),
        "balance_loss": float(r.balance_loss),
        "link_exposed_s": float(r.link_exposed_s),
        "extra_warmup": [float(x) for x in r.extra_warmup],
        "tokens_per_s": float(r.tokens_per_s),
        "mfu": float(r.mfu),
        "fits": bool(r.fits),
        "sites": per,
        "cost": {k: float(v) for k, v in r.cost.items()},
    }


def check_sites(job: Sites) -> None:
    """Each site as a run of its own: its share of the batch (``dp``) or of the layers."""
    from codesign.rules import check_all

    _check(job)
    for i, s in enumerate(job.sites):
        model, training = job.model, job.training
        if job.across == "dp":
            training = _replace(training, global_batch=s.share)
        else:
            model = _per_layer_kinds(model, s.share)
        try:
            check_all(model, training, s.system, s.strategy, s.efficiency)
        except SpecError as e:
            raise SpecError(f"sites[{i}].{e.field}", e.value, e.allowed) from None


def format_sites(job: Sites, r: SitesReport) -> str:
    """A readable table of a :class:`~codesign.sites.SitesReport`."""
    unit = "sequences" if job.across == "dp" else "layers"
    head = f"{len(job.sites)} sites, {job.across} across the link"
    if job.across == "pp":
        head += f" ({job.schedule} schedule)"
    head += (
        f"; link {float(job.link.bandwidth_gbps):g} GB/s per accelerator, "
        f"{float(job.link.latency_us) / 1e3:g} ms"
    )
    lines = [
        head,
        f"{'site':<14} {'accelerators':>12} {unit:>10} {'busy s':>9} {'idle':>6} "
        f"{'memory GB':>10} {'fits':>5} {'vs homog.':>9}",
    ]
    for i, s in enumerate(job.sites):
        lines.append(
            f"{s.name:<14} {float(s.system.num_accelerators):>12,.0f} {float(s.share):>10g} "
            f"{float(r.site_busy_s[i]):>9.3f} {max(0.0, float(r.idle_fraction[i])):>6.1%} "
            f"{float(r.memory_gb[i]):>10.1f} {str(bool(r.site_fits[i])):>5} "
            f"{float(r.vs_homogeneous[i]):>9.3f}"
        )
    lines.append(
        f"step {float(r.step_time_s):.3f} s   balance loss {float(r.balance_loss):.1%}   "
        f"MFU {float(r.mfu):.1%}   fits {bool(r.fits)}"
    )
    if float(job.training.tokens) > 0:
        lines.append(
            f"to train {float(r.cost['time_to_train_days']):.2f} days, "
            f"{float(r.cost['cost_to_train_usd']) / 1e6:.2f} M$ (capex "
            f"{float(r.cost['capex_usd']) / 1e6:.1f} M$)"
            + (
                f", goodput {float(r.cost['goodput']):.1%} "
                f"({float(r.cost['failures_per_day']):.2f} failures/day over all sites)"
                if float(job.sites[0].system.reliability.enabled) > 0
                else ""
            )
        )
    lines.append(
        "Convergence effects (DiLoCo's extra tokens) are not modelled: "
        "training.outer_tokens_factor takes them."
        if float(job.sites[0].strategy.outer_sync_interval) > 1
        else ""
    )
    return "\n".join(x for x in lines if x)
