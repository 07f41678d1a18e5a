"""The container target by system, and measured speed-ups between systems against the model's.

:func:`system_pairs` reads the groups of :func:`codesign.calibration.same_layout_systems` (one
layout, one release, several systems) stored in a validation result and gives each pair's
speed-up as measured, as predicted by the fit without 25.11 and by the all-rows fit, and as
the ratio of the catalog's peak FLOP/s; :func:`systems_finding` adds the container target's
rows on systems without a training row and what the other rows would need for the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from codesign.calibration._bridge import bridge_key
from codesign.calibration._stats import ErrorStats, error_pct, split_of_kind
from codesign.calibration._tables import CONTAINER_TARGET_PCT, blackwell_bridge, fmt

__all__ = ["SystemPair", "SystemsFinding", "system_pairs", "systems_finding"]


@dataclass(frozen=True)
class SystemPair:
    """One layout run in one release on two systems (``system_a`` < ``system_b``): the speed-up
    of ``b`` over ``a`` (step time of ``a`` over that of ``b``) as measured, as predicted by
    the container split's fit (without 25.11: held out for 25.11 rows, ``held``) and by the
    all-rows fit (``fitted``), and as the ratio of the two accelerators' catalog peak FLOP/s
    at the run's number format (``peak``)."""

    release: str
    model: str
    system_a: str
    system_b: str
    measured: float
    held: float
    fitted: float
    peak: float


def system_pairs(res: dict) -> list[SystemPair]:
    """Every pair of fitted rows of one group of ``res["same_layout_systems"]``
    (:func:`codesign.calibration.same_layout_systems`) with its speed-ups (:class:`SystemPair`);
    the peaks come from the rows' mapped configurations in ``res["_dataset"]``.  Empty without
    the record (results written before it), the container split or the data set."""
    from codesign.compute import peak_flops

    cont, full = split_of_kind(res, "container"), split_of_kind(res, "all")
    mapped = {p["id"]: p for p in res.get("_dataset", {}).get("points", [])}
    if cont is None or full is None or not mapped:
        return []
    index = {p["id"]: i for i, p in enumerate(res["points"])}
    out = []
    for members in res.get("same_layout_systems", []):
        ok = [
            m for m in members if m[0] in index and res["points"][index[m[0]]]["excluded"] is None
        ]
        for (a, sys_a, ta), (b, sys_b, tb) in combinations(ok, 2):
            ia, ib = index[a], index[b]
            ca, cb = mapped[a]["config"], mapped[b]["config"]
            prec = ca.training.precision
            out.append(
                SystemPair(
                    release=a.split("_")[1],
                    model=str(mapped[a].get("model")),
                    system_a=sys_a,
                    system_b=sys_b,
                    measured=ta / tb,
                    held=cont["after_s"][ia] / cont["after_s"][ib],
                    fitted=full["after_s"][ia] / full["after_s"][ib],
                    peak=float(peak_flops(cb.system, prec) / peak_flops(ca.system, prec)),
                )
            )
    return out


@dataclass(frozen=True)
class SystemsFinding:
    """The container target's rows on systems that no training row of the split ran, and the
    measured speed-up between systems on one layout and release against the model's.

    ``unseen``: ``(system, errors of its held-out target rows)`` for each such system;
    ``rest_needed_pct``: the mean error the other target rows would need for the whole target
    to be met with the unseen systems' errors as they are, ``rest_fitted_pct`` their error in
    the all-rows fit (in sample: about the least a held-out prediction can reach); ``pairs``:
    every :class:`SystemPair` (:func:`system_pairs`)."""

    unseen: tuple[tuple[str, ErrorStats], ...]
    rows: int
    rest_rows: int
    rest_pct: float | None
    rest_needed_pct: float | None
    rest_fitted_pct: float | None
    target_pct: float
    pairs: tuple[SystemPair, ...]

    def _pairs(self) -> str:
        kinds: dict[tuple[str, str], list[SystemPair]] = {}
        for p in self.pairs:
            kinds.setdefault((p.system_a, p.system_b), []).append(p)

        def span(xs) -> str:
            lo, hi = min(xs), max(xs)
            return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"

        parts = []
        for (a, b), ps in kinds.items():
            parts.append(
                f"{b} over {a} ({len(ps)} layouts, {', '.join(sorted({p.release for p in ps}))}): "
                f"measured {span([p.measured for p in ps])}, the model fitted without 25.11 "
                f"{span([p.held for p in ps])}, fitted on all rows {span([p.fitted for p in ps])}, "
                f"the catalog's peak FLOP/s at the run's number format {span([p.peak for p in ps])}"
            )
        return (
            "  The same layout in the same release on two systems "
            "(codesign.calibration.same_layout_systems; speed-up = step time of the first over "
            "the second): " + "; ".join(parts) + "."
        )

    def sentence(self) -> str:
        unseen = "; ".join(
            f"{sys}: {st.rows} rows, MAPE {fmt(st.mape_pct)} % (mean signed "
            f"{fmt(st.mean_signed_pct)} %)"
            for sys, st in self.unseen
        )
        out = (
            "Rows of the container target on a system that no training row of the split ran "
            f"(its values come from another system's rows and the catalog): {unseen}."
        )
        if self.rest_needed_pct is not None:
            out += (
                f"  With those errors as they are, the other {self.rest_rows} rows (now "
                f"{fmt(self.rest_pct)} %) would need a mean error of "
                f"{fmt(self.rest_needed_pct)} % for the {self.rows} rows to reach the "
                f"{self.target_pct:g} % target; fitted on all rows (their release included, in "
                f"sample) they are {fmt(self.rest_fitted_pct)} % off"
                + (
                    ": the target cannot be met without predicting those systems better."
                    if (self.rest_fitted_pct or 0.0) > self.rest_needed_pct
                    else "."
                )
            )
        return out + (self._pairs() if self.pairs else "")


def systems_finding(res: dict) -> SystemsFinding | None:
    """The :class:`SystemsFinding` of a validation result (with its ``_dataset``): the
    container split's held-out Megatron-Bridge Blackwell rows grouped by system, the systems
    without a Megatron-Bridge training row in that split, and :func:`system_pairs`.  None
    without the splits or without such a system."""
    sp, full = split_of_kind(res, "container"), split_of_kind(res, "all")
    if sp is None or full is None:
        return None
    pts = res["points"]
    trained = {
        bridge_key(p)[1] for i, p in enumerate(pts) if sp["train"][i] and p["source"] == "Bridge"
    }
    errs: dict[str, list[float]] = {}
    fitted = []
    for i, p in enumerate(pts):
        if sp["held"][i] and p["excluded"] is None and blackwell_bridge(p):
            system = bridge_key(p)[1]
            errs.setdefault(system, []).append(error_pct(sp["after_s"][i], p["measured_s"]))
            if system in trained:
                fitted.append(abs(error_pct(full["after_s"][i], p["measured_s"])))
    unseen = {s: e for s, e in errs.items() if s not in trained}
    if not unseen:
        return None
    n = sum(len(e) for e in errs.values())
    rest = [abs(x) for s, e in errs.items() if s not in unseen for x in e]
    new_abs = sum(abs(x) for e in unseen.values() for x in e)
    needed = (CONTAINER_TARGET_PCT * n - new_abs) / len(rest) if rest else None
    return SystemsFinding(
        unseen=tuple((s, ErrorStats.of(e)) for s, e in sorted(unseen.items())),
        rows=n,
        rest_rows=len(rest),
        rest_pct=float(np.mean(rest)) if rest else None,
        rest_needed_pct=needed,
        rest_fitted_pct=float(np.mean(fitted)) if fitted else None,
        target_pct=CONTAINER_TARGET_PCT,
        pairs=tuple(system_pairs(res)),
    )
