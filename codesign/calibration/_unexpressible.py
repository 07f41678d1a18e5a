"""What the row mappings share: rows the model cannot express, the run document, a Bridge row's precision."""

from __future__ import annotations

__all__ = ["Unexpressible", "bridge_precision", "run_document"]


class Unexpressible(ValueError):
    """A row the model cannot express (missing field, unknown hardware, invalid strategy)."""


def bridge_precision(row: dict, key: tuple, notes: list) -> str:
    """Training precision of a Megatron-Bridge row with recipe key ``(model, gpu, container,
    variant)`` (25.09 FP8 rows: the recipe's FP8 variant)."""
    _, gpu, container, variant = key
    p = str(row["parallel"].get("precision", ""))
    if p == "FP8-CS":
        return "fp8-current"
    if p in ("FP8-MX", "MXFP8"):
        return "mxfp8"
    if p == "NVFP4":
        return "nvfp4"
    if p == "BF16":
        return "bf16"
    if p.startswith("FP8"):
        if container.startswith("26"):  # the 2026 pages' FP8 = the *_FP8_CS configs
            notes.append("precision fp8-current (page: FP8; the release's *_FP8_CS perf configs)")
            return "fp8-current"
        # 25.09: r0.1.0 perf matrices match main numbers to fp8_cs (Llama3-70B GB200 mbs 2 is
        # only under fp8_cs), parenthesised ones to fp8_mx (B200/GB200) / fp8_ss (H100).
        if variant == "main":
            notes.append("precision fp8-current (page: FP8 unstated; r0.1.0 perf matrix fp8_cs)")
            return "fp8-current"
        if gpu == "h100":
            notes.append(
                "precision fp8 (page footnote: blockwise 128x128 / 1x128, fp8_ss; no "
                "blockwise preset)"
            )
            return "fp8"
        notes.append(
            "precision mxfp8 (page: FP8 unstated; parenthesised = 32-element blocks, fp8_mx)"
        )
        return "mxfp8"
    raise ValueError(f"parallel.precision = {p!r} not understood")


def run_document(model: dict, training: dict, system: dict, strategy: dict, stack: str) -> dict:
    """The run document of a mapped row, with the uncalibrated ``codesign.Efficiency()``
    defaults: the calibrated presets are applied (or not) by the caller, so the mapping itself
    never depends on a fit.  ``stack`` names the software the run used (a label for
    stack-grouped calibration)."""
    return {
        "model": model,
        "training": training,
        "system": system,
        "strategy": strategy,
        "efficiency": {"preset": "uncalibrated", "stack": stack},
    }
