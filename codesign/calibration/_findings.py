"""The report's findings: typed facts computed from a validation result, and their sentences.

:func:`compute_findings` reads a validation result (with its ``_dataset``) and returns
:class:`Findings`: one typed fact per finding, the per-source ones of
:mod:`codesign.calibration._source_findings` (Korthikanti Table 5, DGX Cloud, MosaicML) and
the model-wide ones here (:class:`GenerationFinding`, :class:`Zero3Finding`,
:class:`WeakValuesFinding`), each holding every number its sentence states.
:func:`findings` gives the sentences of the report.  Every figure comes from the result, the
mapped runs or a named constant (targets, Calculon's published error, the ZeRO-3 traffic per
parameter); none is read back out of rendered text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codesign.calibration._bridge import bridge_key, recipe_differences
from codesign.calibration._dataset import CONTRADICTED, CONTRADICTION_RATIO, is_zero3_exclusion
from codesign.calibration._source_findings import (
    DgxcFinding,
    KorthikantiFinding,
    MosaicFinding,
    dgxc_finding,
    korthikanti_finding,
    mosaic_finding,
)
from codesign.calibration._stats import (
    LOOSE_RATIO,
    MEMORY_TARGET_PCT,
    UNMOVED_REL,
    ZERO3_BYTES_PER_PARAM,
    ErrorStats,
    after_errors,
    family_stats,
    mapped_points,
    split_of_kind,
    unidentified,
    weakly_identified,
    zero3_rows,
)
from codesign.calibration._systems import SystemsFinding, systems_finding
from codesign.calibration._tables import (
    CONTAINER_TARGET_PCT,
    blackwell_bridge,
    container_part,
    container_twins,
    fmt,
)

__all__ = [
    "ContainerFinding",
    "Findings",
    "GenerationFinding",
    "UnidentifiedFinding",
    "WeakValuesFinding",
    "Zero3Finding",
    "compute_findings",
    "findings",
]


# ------------------------------------------------------------------------------------------
# Generations, ZeRO-3 rows, weakly identified values
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationFinding:
    """Each generation-held-out split's mean held-out MAPE over its groups, and the all-rows
    gemm_max per label."""

    splits: tuple[tuple[str, float], ...]
    gemm_max: dict

    def sentence(self) -> str:
        return (
            "Held out by hardware generation ("
            + "; ".join(f"{n}: mean held-out MAPE {v:.1f} %" for n, v in self.splits)
            + "): the fitted values do not transfer between A100 and H100 (e.g. gemm_max "
            + ", ".join(f"{k} {v:.2f}" for k, v in self.gemm_max.items())
            + "), which is why the presets are per accelerator generation; an accelerator "
            "without measured rows inherits the nearest generation and its preset says so."
        )


def _generation(res: dict) -> GenerationFinding | None:
    hw = [s for s in res["splits"] if s["kind"] == "hardware"]
    if not hw:
        return None
    splits = []
    for s in hw:
        e = [
            st["held"]["after"]["mape_pct"]
            for g, st in s["per_group"].items()
            if st["held"]["after"]["rows"] and "not fitted" not in g
        ]
        splits.append((s["name"], float(np.mean(e))))
    gm = (split_of_kind(res, "all") or {}).get("values", {}).get("gemm_max", {})
    return GenerationFinding(tuple(splits), dict(gm))


@dataclass(frozen=True)
class Zero3Finding:
    """SC21's ZeRO-3 rows: how far the presets are off (``after``), the run whose step time did
    not fall when the GPU count doubled (``doubling``: model size, seconds at the smaller and
    at the larger count, the two counts), the scale-up domain and scale-out link the flat-ring
    estimate uses and its error range."""

    rows: int
    after: ErrorStats
    doubling: tuple[str, float, float, int, int] | None
    scale_up_domain: int | None
    link_gbps: float | None
    flat_errors_pct: tuple[float, ...]

    def sentence(self) -> str:
        ex = ""
        if self.doubling is not None:
            size, ta, tb, ga, gb = self.doubling
            ex = (
                f" ({size}: {ta:.1f} s at {ga} and at {gb} GPUs)"
                if f"{ta:.1f}" == f"{tb:.1f}"
                else f" ({size}: {ta:.1f} s at {ga} and {tb:.1f} s at {gb} GPUs)"
            )
        vol = f" at 1/{self.scale_up_domain} of the volume" if self.scale_up_domain else ""
        link = f"{self.link_gbps:g} GB/s " if self.link_gbps else ""
        fe = self.flat_errors_pct
        return (
            f"SC21 Table 2 ZeRO-3 rows ({self.rows}, DeepSpeed ZeRO-3 inside Megatron) stay "
            f"{fmt(self.after.mape_pct)} % off and are kept out of every fit: their measured step "
            f"time does not fall when the GPU count doubles at a fixed global batch{ex}, so a "
            "cost independent of the data-parallel degree dominates.  The model's ZeRO-3 term "
            f"uses hierarchical (NVLink, then IB{vol}), bandwidth-optimal collectives hidden "
            f"behind compute up to dp_overlap_eff; sending ~{ZERO3_BYTES_PER_PARAM:g} bytes per "
            f"parameter per micro-batch through each GPU's own {link}link with no overlap "
            "reproduces the rows far better"
            + (f" (errors {min(fe):+.0f} % to {max(fe):+.0f} %)" if fe else "")
            + " (table below).  Suggested formula change (codesign/step.py, ZeRO-3 branch): a "
            "separate ZeRO-3 collective efficiency / flat-ring option and a ZeRO-3 overlap "
            "efficiency."
        )


def _zero3(res: dict) -> Zero3Finding | None:
    pts = res["points"]
    if not any(is_zero3_exclusion(p) for p in pts):
        return None
    allsp = split_of_kind(res, "all")
    e = after_errors(res, allsp, is_zero3_exclusion) if allsp else []
    mapped = [p for p in mapped_points(res) if is_zero3_exclusion(p)]
    doubling, best = None, None
    for a in mapped:
        for b in mapped:
            same = a["model"] == b["model"] and float(a["config"].training.global_batch) == float(
                b["config"].training.global_batch
            )
            if same and b["gpus"] == 2 * a["gpus"]:
                change = abs(b["measured_s"] - a["measured_s"]) / a["measured_s"]
                if best is None or change < best:
                    best = change
                    size = a["id"].split("_")[3] if a["id"].count("_") >= 3 else a["model"]
                    doubling = (size, a["measured_s"], b["measured_s"], a["gpus"], b["gpus"])
    domains = {int(float(p["config"].system.tiers[0].domain)) for p in mapped}
    links = {float(p["config"].system.tiers[-1].bandwidth_gbps) for p in mapped}
    flat = [r.flat_error_pct for r in zero3_rows(res) if r.flat_s is not None]
    return Zero3Finding(
        rows=sum(1 for p in pts if is_zero3_exclusion(p)),
        after=ErrorStats.of(e),
        doubling=doubling,
        scale_up_domain=domains.pop() if len(domains) == 1 else None,
        link_gbps=links.pop() if len(links) == 1 else None,
        flat_errors_pct=tuple(flat),
    )


@dataclass(frozen=True)
class ContradictionFinding:
    """Rows kept out of the fit because another row of the same recipe contradicts them:
    ``(id, measured_s, after_s)`` each, in data order (pairs follow each other), and per pair
    ``(model, gpu, container a, container b, [(setting, value a, value b)])``, the recipe facts
    in which the two releases' recipes differ
    (:func:`codesign.calibration._bridge.recipe_differences`)."""

    rows: tuple[tuple[str, float, float], ...]
    pairs: tuple[tuple[str, str, str, str, tuple], ...] = ()

    def _differences(self) -> str:
        parts = []
        for model, gpu, ca, cb, diffs in self.pairs:
            what = ", ".join(f"{k} {va} ({ca}) / {vb} ({cb})" for k, va, vb in diffs)
            parts.append(f"{model} on {gpu.upper()}: {what or 'no collected setting differs'}")
        return "; ".join(parts)

    def sentence(self) -> str:
        parts = [
            f"{rid.removeprefix('mbridge_')}: measured {m:.2f} s, model (presets) {a:.2f} s "
            f"({100.0 * (a - m) / m:+.1f} %)"
            for rid, m, a in self.rows
        ]
        r = CONTRADICTION_RATIO
        text = (
            f"{len(self.rows)} Megatron-Bridge rows contradict another row of the same system, "
            "model, number format, batch and layout (two container releases of one recipe "
            f"whose measured step times differ by more than {r:g}x; see "
            "codesign.calibration.contradictions).  A model that does not tell the two recipes "
            "apart gives both rows of a pair the same prediction, so no such model puts both within "
            f"{100 * (r - 1) / (r + 1):.0f} % of their measurements; both rows are kept out of "
            "every fit and reported apart (group 'Bridge contradicted'): " + "; ".join(parts) + "."
        )
        if self.pairs:
            text += (
                "  The pages print the same layout, but the recipes differ (the collected recipe "
                "facts, codesign.calibration._bridge_recipes): " + self._differences() + "."
            )
        drop = [p for p in self.pairs if any(k == "token_drop" for k, _, _ in p[4])]
        if drop:
            graphs = [ca for _, gpu, ca, _, _ in drop if gpu == "b200"]
            text += (
                "  Token drop with capacity padding (run_script.py apply_moe_token_drop) runs "
                "static shapes without host synchronization"
                + (
                    f"; the {graphs[0]} recipe on B200 also captured whole-layer CUDA graphs"
                    if graphs
                    else ""
                )
                + "; the dropless dispatcher copies the token counts to the host and waits for "
                "them in every MoE layer's forward (Megatron-Core token_dispatcher.py "
                "cuda_sync_point), which the model charges as the host's launches that no "
                "queued kernel hides any more (codesign.compute.moe_host_wait, fitted on the "
                "other rows; the model's errors on these rows above are its predictions with it)."
            )
        return text + (
            "  Later releases alternate the same way (external, not fitted: on 16 H100 at PP 2, "
            "VP 12, micro-batch 1 the Megatron-Bridge 26.02 page gives 5,113 tokens/s/GPU, "
            "26.02.01 9,058): the recipe's speed depends on the release."
        )


@dataclass(frozen=True)
class WeakValuesFinding:
    """Values that vary by more than ``ratio`` across splits: ``(name, label, lowest, highest)``."""

    values: tuple[tuple[str, object, float, float], ...]
    ratio: float = LOOSE_RATIO

    def sentence(self) -> str:
        return (
            f"Weakly identified values (the fitted value varies by more than {self.ratio:g}x "
            "across the splits): "
            + "; ".join(f"{n}[{lab}] {lo:.3g}-{hi:.3g}" for n, lab, lo, hi in self.values)
            + ".  They trade off against each other (attention against GEMM and HBM time, "
            "overlap against fabric efficiency) where few rows separate them; the presets are "
            "the all-rows values, and their individual numbers should not be read as "
            "measurements of one kernel."
        )


@dataclass(frozen=True)
class UnidentifiedFinding:
    """Values that stayed at their start in every split: ``(name, label, start)``."""

    values: tuple[tuple[str, object, float], ...]

    def sentence(self) -> str:
        return (
            "Not identified by the data (the fitted value stayed within "
            f"{100 * UNMOVED_REL:g} % of its start in every split): "
            + "; ".join(f"{n}[{lab}] {v:.3g}" for n, lab, v in self.values)
            + ".  No training row moves them (a software stack without rows of that kind), so "
            "their presets carry codesign.Efficiency's documented estimates, not a fit."
        )


@dataclass(frozen=True)
class ContainerFinding:
    """The container target (Megatron-Bridge Blackwell rows, fit without 25.11, predict 25.11)
    split by whether the 25.09 fit carried every calibration label of the row: the errors of
    all, ``own`` and ``borrowed`` rows, and each borrowed value with its row count."""

    all: ErrorStats
    own: ErrorStats | None
    borrowed: ErrorStats | None
    labels: tuple[tuple[str, int], ...]
    target_pct: float
    twins: ErrorStats | None = None
    twin_floor_pct: float | None = None

    def sentence(self) -> str:
        def part(st: ErrorStats | None, what: str) -> str:
            if st is None:
                return f"no {what}"
            return f"{st.rows} {what}: MAPE {fmt(st.mape_pct)} % (max {fmt(st.max_ape_pct)} %)"

        return (
            "Megatron-Bridge Blackwell held out by container version (fit without 25.11, "
            f"predict 25.11): MAPE {fmt(self.all.mape_pct)} % over {self.all.rows} rows (target "
            f"{self.target_pct:g} %).  A row whose accelerator generation or number format no "
            "training row carries has no fitted value of its own and borrows the nearest "
            "fitted label's (codesign.calibration._grouping.fallback_chain): "
            + part(self.borrowed, "rows borrow")
            + " ("
            + "; ".join(f"{lab}: {n} rows" for lab, n in self.labels)
            + "); "
            + part(self.own, "rows have every value fitted on their own labels")
            + ".  The split therefore measures the transfer to hardware and number formats "
            "without 25.09 rows as much as the transfer to the next release." + self._twins()
        )

    def _twins(self) -> str:
        if self.twins is None or self.twin_floor_pct is None:
            return ""
        return (
            f"  {self.twins.rows} of the rows ran the same layout in 25.09 "
            "(codesign.calibration.same_layout_groups, exact number format): a prediction "
            "at each layout's median step time over its releases is "
            f"{fmt(self.twin_floor_pct)} % off on them, the model "
            f"{fmt(self.twins.mape_pct)} % (mean signed {fmt(self.twins.mean_signed_pct)} %)"
            + (
                ": on those rows most of the model's error is not the new release's (the "
                "same layout ran about as fast in both)."
                if self.twin_floor_pct < 0.5 * (self.twins.mape_pct or 0.0)
                else ": on those rows the releases themselves differ by about as much as the "
                "model misses."
            )
        )


def _container(res: dict) -> ContainerFinding | None:
    sp = split_of_kind(res, "container")
    if sp is None or "borrowed" not in sp:
        return None
    own = container_part(res, blackwell_bridge, False)
    bor = container_part(res, blackwell_bridge, True)
    if own is None and bor is None:
        return None
    counts: dict[str, int] = {}
    for i, p in enumerate(res["points"]):
        if sp["held"][i] and p["excluded"] is None and blackwell_bridge(p):
            for lab in sp["borrowed"][i]:
                counts[lab] = counts.get(lab, 0) + 1
    twins = container_twins(res, blackwell_bridge)
    return ContainerFinding(
        all=container_part(res, blackwell_bridge, None),
        own=own,
        borrowed=bor,
        labels=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        target_pct=CONTAINER_TARGET_PCT,
        twins=twins[0] if twins else None,
        twin_floor_pct=twins[1] if twins else None,
    )


def _contradicted(res: dict) -> ContradictionFinding | None:
    allsp = split_of_kind(res, "all")
    rows = tuple(
        (p["id"], float(p["measured_s"]), float(allsp["after_s"][i]) if allsp else float("nan"))
        for i, p in enumerate(res["points"])
        if str(p.get("excluded") or "").startswith(CONTRADICTED)
    )
    if not rows:
        return None
    by_recipe: dict[tuple, list[tuple[str, str]]] = {}
    for rid, _, _ in rows:
        model, gpu, container, _ = bridge_key({"id": rid})
        by_recipe.setdefault((model, gpu), []).append((container, rid))
    pairs = []
    for (model, gpu), members in by_recipe.items():
        if len(members) == 2:
            (ca, a), (cb, b) = sorted(members)
            pairs.append((model, gpu, ca, cb, tuple(recipe_differences(a, b))))
    return ContradictionFinding(rows, tuple(pairs))


def _memory_sentence() -> str:
    return (
        "Memory: no row of the data set publishes memory use, so the "
        f"{MEMORY_TARGET_PCT:g} % memory target cannot be checked on it; the model says a few rows "
        "that ran do not fit (see validation_first_cut.md), a hint that memory is over-estimated "
        "for them.  Runs published elsewhere with their peak allocated memory are an external "
        "check, never fitted: experiments/external_memory.py, results in "
        "experiments/results/external_memory.md."
    )


# ------------------------------------------------------------------------------------------
# All findings
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Findings:
    """Every finding of the report (None: not applicable to this result)."""

    korthikanti: KorthikantiFinding | None
    dgxc: DgxcFinding | None
    mosaicml: MosaicFinding | None
    generation: GenerationFinding | None
    zero3: Zero3Finding | None
    contradicted: ContradictionFinding | None
    weak_values: WeakValuesFinding | None
    unidentified: UnidentifiedFinding | None = None
    container: ContainerFinding | None = None
    systems: SystemsFinding | None = None

    def sentences(self) -> list[str]:
        parts = (
            self.korthikanti,
            self.dgxc,
            self.mosaicml,
            self.generation,
            self.zero3,
            self.container,
            self.systems,
            self.contradicted,
            self.weak_values,
            self.unidentified,
        )
        return [f.sentence() for f in parts if f is not None] + [_memory_sentence()]


def compute_findings(res: dict) -> Findings:
    """The typed findings of a validation result (with its ``_dataset``)."""
    fam = family_stats(res)
    weak = weakly_identified(res)
    unmoved = unidentified(res)
    return Findings(
        korthikanti=korthikanti_finding(res),
        dgxc=dgxc_finding(res, fam),
        mosaicml=mosaic_finding(res, fam),
        generation=_generation(res),
        zero3=_zero3(res),
        contradicted=_contradicted(res),
        container=_container(res),
        systems=systems_finding(res),
        weak_values=WeakValuesFinding(tuple(weak)) if weak else None,
        unidentified=UnidentifiedFinding(tuple(unmoved)) if unmoved else None,
    )


def findings(res: dict) -> list[str]:
    """Data-driven statements on what remains short of the targets (for the report)."""
    return compute_findings(res).sentences()
